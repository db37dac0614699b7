"""The sync's periodic verification, incremental: what Placement holds as the last sync
recorded it is not read again; what changed behind Acceleron's back is repaired."""

from __future__ import annotations

import uuid

from keystoneauth1 import adapter
from oslo_config import cfg
from sqlalchemy import select

from acceleron.db.models import Deployable, table
from acceleron.db.session import Database
from acceleron.placement.client import PlacementClient
from acceleron.service import inventory
from acceleron.service.publish import Syncer
from tests.fixtures.fake_host import HOST, report, syncer
from tests.fixtures.placement import CountingAdapter, allocate

DEPLOYABLES = table(Deployable)
LISTING = ("GET", "/resource_providers")


def _synced(db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter) -> Syncer:
    inventory.reconcile(db, report(conf))
    sync = syncer(db, counted)
    sync.sync_host(HOST)
    counted.reset()
    return sync


def _region(db: Database) -> str:
    with db.reader() as conn:
        found = conn.execute(select(DEPLOYABLES.c.rp_uuid).where(DEPLOYABLES.c.kind == "region")
                             .order_by(DEPLOYABLES.c.id)).scalars().first()  # fmt: skip
    assert found is not None
    return str(found)


def _calls(counted: CountingAdapter) -> list[tuple[str, str]]:
    return [(c.method, c.path) for c in counted.calls]


def test_a_quiet_cloud_is_verified_with_one_listing(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter
) -> None:
    sync = _synced(db, conf, counted)
    assert sync.verify() == []
    assert _calls(counted) == [LISTING]


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
    assert sync.verify() == [] and _calls(counted) == [LISTING]


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


def test_allocations_alone_cost_a_read_and_no_write_once(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, placement: adapter.Adapter
) -> None:
    sync = _synced(db, conf, counted)
    allocate(placement, _region(db), str(uuid.uuid4()))
    [result] = sync.verify()
    assert result.actions == [] and counted.writes == []
    counted.reset()
    assert sync.verify() == [] and _calls(counted) == [LISTING]


def test_only_the_host_that_changed_is_read(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, placement: adapter.Adapter
) -> None:
    inventory.reconcile(db, report(conf))  # first: its region is the one changed below
    inventory.reconcile(db, report(conf, "other-host"))
    sync = syncer(db, counted)
    sync.sync_host(HOST)
    sync.sync_host("other-host")
    PlacementClient(placement).set_traits(_region(db), [])
    counted.reset()
    assert [r.hostname for r in sync.verify()] == [HOST]
    trees = [c for c in counted.calls if c.path == "/resource_providers" and "in_tree" in c.query]
    assert len(trees) == 1


def test_every_host_that_changed_is_read_and_repaired(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, placement: adapter.Adapter
) -> None:
    hosts = [HOST, "other-host", "third-host"]
    for host in hosts:
        inventory.reconcile(db, report(conf, host))
    sync = syncer(db, counted)
    for host in hosts:
        sync.sync_host(host)
    client = PlacementClient(placement)
    roots = {p.root_uuid: p for p in client.list_providers() if "_region" in p.name}
    changed = list(roots.values())[:2]
    for provider in changed:
        client.set_traits(provider.uuid, [])
    checked = sync.verify()
    assert len(checked) == 2 and all(r.errors == [] for r in checked)
    assert all(client.get_traits(p.uuid)[1] for p in changed)
