"""The periodic verification (the reconciler's passes', or the sync thread's without
them), host by host: each host's tree is read with one small GET (what Placement holds
as the last sync recorded it is not read again), what changed behind Acceleron's back
is repaired, and spread over ticks every host is verified once per interval."""

from __future__ import annotations

import uuid

import pytest
from keystoneauth1 import adapter
from oslo_config import cfg
from sqlalchemy import select

from acceleron.db.models import Deployable, Device, Host, table
from acceleron.db.session import Database
from acceleron.placement.client import PlacementClient
from acceleron.service import inventory
from acceleron.service.publish import Syncer
from tests.fixtures.fake_host import HOST, report, reporting_api, syncer
from tests.fixtures.placement import CountingAdapter, allocate
from tests.fixtures.waiting import wait_for

DEPLOYABLES, DEVICES, HOSTS = table(Deployable), table(Device), table(Host)
OTHERS = ["other-host", "third-host"]


def _synced(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, hosts: tuple[str, ...] = (HOST,)
) -> Syncer:
    for host in hosts:
        inventory.reconcile(db, report(conf, host))
    sync = syncer(db, counted)
    for host in hosts:
        sync.sync_host(host)
    counted.reset()
    return sync


def _region(db: Database, host: str = HOST) -> str:
    return _regions(db, host)[0]


def _regions(db: Database, host: str = HOST) -> list[str]:
    with db.reader() as conn:
        return list(
            conn.execute(
                select(DEPLOYABLES.c.rp_uuid)
                .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
                .where(DEPLOYABLES.c.kind == "region", DEVICES.c.hostname == host)
                .order_by(DEPLOYABLES.c.id)
            ).scalars()
        )


def _compute(db: Database, host: str = HOST) -> str:
    with db.reader() as conn:
        found = conn.execute(select(HOSTS.c.rp_uuid).where(HOSTS.c.hostname == host)).scalar()
    assert found is not None
    return str(found)


def _tree_reads(counted: CountingAdapter) -> list[str]:
    """The trees read, by the uuid each GET named."""
    return [
        c.query.removeprefix("in_tree=")
        for c in counted.calls
        if c.method == "GET" and c.path == "/resource_providers"
    ]


def test_a_quiet_host_is_verified_with_one_small_get(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter
) -> None:
    sync = _synced(db, conf, counted)
    assert sync.verify() == []
    assert [(c.method, c.path, c.query) for c in counted.calls] == [
        ("GET", "/resource_providers", f"in_tree={_compute(db)}")
    ]


def test_a_trait_removed_by_hand_is_put_back_and_then_left_alone(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, placement: adapter.Adapter
) -> None:
    sync = _synced(db, conf, counted)
    client = PlacementClient(placement)
    region = _region(db)
    _, traits = client.get_traits(region)
    client.set_traits(region, [])
    [result] = sync.verify()
    assert result.hostname == HOST and result.errors == []
    assert region in {a.uuid for a in result.actions}
    assert client.get_traits(region)[1] == traits
    counted.reset()
    assert sync.verify() == [] and len(counted.calls) == 1


def test_a_provider_deleted_by_hand_is_made_again(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, placement: adapter.Adapter
) -> None:
    sync = _synced(db, conf, counted)
    client = PlacementClient(placement)
    region = _region(db)
    assert client.delete_provider(region)
    [result] = sync.verify()
    assert ("create", region) in {(a.op, a.uuid) for a in result.actions}
    assert client.get_provider(region) is not None


def test_a_deleted_root_is_caught_and_the_tree_made_again(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, placement: adapter.Adapter
) -> None:
    sync, client = _synced(db, conf, counted), PlacementClient(placement)
    assert client.delete_subtree(_compute(db)) > 1  # the compute node and all under it
    [result] = sync.verify()
    assert result.hostname == HOST and result.errors  # the compute node is looked up again
    [again] = sync.verify()  # by its name: the embedded mode makes it again
    assert again.errors == [] and client.get_provider(_region(db)) is not None
    counted.reset()
    assert sync.verify() == [] and len(counted.calls) == 1


def test_allocations_alone_cost_a_read_and_no_write_once(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, placement: adapter.Adapter
) -> None:
    sync = _synced(db, conf, counted)
    allocate(placement, _region(db), str(uuid.uuid4()))
    [result] = sync.verify()
    assert result.actions == [] and counted.writes == []
    # the tree once, the moved region's inventories and traits
    assert len(counted.calls) == 3, [c.route for c in counted.calls]
    counted.reset()
    assert sync.verify() == [] and len(counted.calls) == 1


def test_with_a_reconciler_generations_are_left_to_it(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, placement: adapter.Adapter
) -> None:
    """With a reconciler (the API runs one by default), a provider at another generation
    is its to read (test_reconciler: it tells allocations from changes, and has the sync
    repair the changes): the verification reads each host's tree alone, and still
    remakes a provider deleted by hand."""
    sync = _synced(db, conf, counted)
    client = PlacementClient(placement)
    allocated, changed = _regions(db)[:2]
    allocate(placement, allocated, str(uuid.uuid4()))
    _, traits = client.get_traits(changed)
    client.set_traits(changed, [])
    with db.reader() as conn:
        compute = str(conn.execute(select(HOSTS.c.rp_uuid)).scalar_one())
    assert sync.verify_read(HOST, compute, client.get_tree(compute)).skipped
    assert counted.calls == []  # the pass's read of the tree, and nothing more
    assert client.delete_provider(changed)
    result = sync.verify_read(HOST, compute, client.get_tree(compute))
    assert ("create", changed) in {(a.op, a.uuid) for a in result.actions}
    assert client.get_traits(changed)[1] == traits


def test_only_the_host_that_changed_is_read_again(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, placement: adapter.Adapter
) -> None:
    sync = _synced(db, conf, counted, (HOST, OTHERS[0]))
    PlacementClient(placement).set_traits(_region(db), [])
    assert [r.hostname for r in sync.verify()] == [HOST]
    # host-1's check (its repair works from the tree that check read), the other host's
    assert _tree_reads(counted) == [_compute(db), _compute(db, OTHERS[0])]


def test_a_host_changed_is_repaired_within_one_interval_of_ticks(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, placement: adapter.Adapter
) -> None:
    hosts = (HOST, *OTHERS)
    sync = _synced(db, conf, counted, hosts)
    client = PlacementClient(placement)
    changed = [_region(db, host) for host in hosts[:2]]
    for region in changed:
        client.set_traits(region, [])
    ticks = 4
    repaired = [[r.hostname for r in sync.verify_tick(tick, ticks)] for tick in range(ticks)]
    assert sorted(h for tick in repaired for h in tick) == sorted(hosts[:2])
    assert all(client.get_traits(region)[1] for region in changed)
    assert sorted(set(_tree_reads(counted))) == sorted(_compute(db, h) for h in hosts)
    counted.reset()
    assert [sync.verify_tick(tick, ticks) for tick in range(ticks)] == [[]] * ticks
    assert sorted(_tree_reads(counted)) == sorted(_compute(db, h) for h in hosts)


@pytest.mark.parametrize("reconciler", [0, 1], ids=["sync thread", "reconciler passes"])
def test_the_api_verifies_at_its_ticks(
    db: Database, conf: cfg.ConfigOpts, placement: adapter.Adapter, reconciler: int
) -> None:
    """With the reconciler's passes on, they verify the hosts from the trees they read;
    without, the sync thread does, once per ``verify_interval``."""
    conf.set_override("verify_interval", 1, "placement")  # one tick a second: every host
    conf.set_override("interval", reconciler, "reconciler")
    client = PlacementClient(placement)
    with reporting_api(conf, db, placement):
        wait_for(lambda: _published(db, client))
        region = _region(db)
        _, traits = client.get_traits(region)
        assert client.delete_provider(region)
        # made again, then its inventories and traits written: the last is the signal
        wait_for(
            lambda: (
                client.get_provider(region) is not None and client.get_traits(region)[1] == traits
            )
        )


def test_without_a_reconciler_the_api_sync_thread_reads_what_moved(
    db: Database, conf: cfg.ConfigOpts, placement: adapter.Adapter
) -> None:
    """``[reconciler] interval = 0``: the verification reads the providers at another
    generation itself, and repairs a trait removed by hand."""
    conf.set_override("verify_interval", 1, "placement")
    conf.set_override("interval", 0, "reconciler")
    client = PlacementClient(placement)
    with reporting_api(conf, db, placement):
        wait_for(lambda: _published(db, client))
        region = _region(db)
        _, traits = client.get_traits(region)
        client.set_traits(region, [])
        wait_for(lambda: client.get_traits(region)[1] == traits)


def _published(db: Database, client: PlacementClient) -> bool:
    with db.reader() as conn:
        host = conn.execute(select(HOSTS).where(HOSTS.c.hostname == HOST)).one()
    return host.synced_generation == host.generation and bool(client.get_tree(host.rp_uuid))
