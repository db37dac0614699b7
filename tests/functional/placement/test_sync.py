"""Placement sync against the real Placement, on every database backend."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from keystoneauth1 import adapter
from oslo_config import cfg
from sqlalchemy import select, update

from acceleron.db.models import Deployable, Device, Host, PlacementProvider, table
from acceleron.db.session import Database
from acceleron.exceptions import PlacementUnavailable, UnknownHost
from acceleron.placement import names
from acceleron.placement.client import Inventory, PlacementClient
from acceleron.placement.tree import Options
from acceleron.report import HostReport
from acceleron.scheduler.query import groups_from_flavor, profile_query
from acceleron.service import inventory
from acceleron.service.placement import options_from_conf
from acceleron.service.publish import HostLocks, Syncer
from tests.fixtures.fake_host import HOST, report, syncer
from tests.fixtures.placement import CountingAdapter, Meddler, Unreachable, allocate

DEVICES, DEPLOYABLES, HOSTS = table(Device), table(Deployable), table(Host)
PROVIDERS = table(PlacementProvider)
REGION_TYPE = "ce48969398f05f33946d560708be108a"
FUNCTION = "d8424dc4a4a3c413f89e433683f9040b"
# In traits an id is upper-cased as reported, no separator added (as upstream does).
REGION_ID = "CE48969398F05F33946D560708BE108A"
FUNCTION_ID = "D8424DC4A4A3C413F89E433683F9040B"
SECOND_ID = "F7DF405CBD7ACF7222F144B0B93ACD18"  # region0's other function


def spellings(bare: str) -> tuple[str, str]:
    """An id's two trait spellings: as is, and spec 004's (groups joined by "_")."""
    return bare, f"{bare[:8]}_{bare[8:12]}_{bare[12:16]}_{bare[16:20]}_{bare[20:]}"


def region_uuid(db: Database, index: int = 0) -> str:
    with db.reader() as conn:
        rows = (
            conn.execute(
                select(DEPLOYABLES.c.uuid)
                .where(DEPLOYABLES.c.kind == "region")
                .order_by(DEPLOYABLES.c.id)
            )
            .scalars()
            .all()
        )
    return str(rows[index])


def bump(db: Database, **device_values: Any) -> None:
    """Change the first FPGA as an operator or a report would, and mark the host changed."""
    with db.writer() as conn:
        first = (
            conn.execute(
                select(DEVICES.c.id).where(DEVICES.c.type == "FPGA").order_by(DEVICES.c.pci_address)
            )
            .scalars()
            .first()
        )
        conn.execute(update(DEVICES).where(DEVICES.c.id == first).values(device_values))
        conn.execute(update(HOSTS).values(generation=HOSTS.c.generation + 1))


def test_first_sync_publishes_the_tree_in_at_most_three_calls_per_provider(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, placement: adapter.Adapter
) -> None:
    inventory.reconcile(db, report(conf))
    PlacementClient(counted).ensure_traits(["CUSTOM_PROGRAMMABLE"])  # names are cluster-wide
    counted.reset()
    result = syncer(db, counted).sync_host(HOST)
    creates = [a for a in result.actions if a.op == "create"]
    assert len(creates) == 1 + 5 + 9  # compute node, 5 cards, 9 regions/types/pools
    per_provider = counted.by_route()
    name_calls = per_provider["PUT /traits/{name}"] + per_provider["PUT /resource_classes/{name}"]
    name_calls += per_provider["GET /traits"]
    assert counted.count("GET", "/resource_providers") == 1  # the compute node, by name
    provider_calls = len(counted.calls) - name_calls - 1  # and no read of the tree
    assert provider_calls <= 3 * len(creates)
    client = PlacementClient(placement)
    region = region_uuid(db)
    _, invs = client.get_inventories(region)
    assert {rc: (i.total, i.reserved, i.max_unit) for rc, i in invs.items()} == {
        "CUSTOM_ACCELERATOR_FPGA": (2, 0, 2)
    }
    _, traits = client.get_traits(region)
    assert traits == {
        "OWNER_CYBORG",
        "CUSTOM_FPGA_INTEL",
        "CUSTOM_FPGA_INTEL_PAC_ARRIA10",
        "CUSTOM_PROGRAMMABLE",
        "CUSTOM_FPGA_INTEL_ARRIA10",  # spec 001's family trait: the family, not the product
        # Every id in both spellings: 32 hex digits, and spec 004's groups.
        *(f"CUSTOM_FPGA_INTEL_REGION_{i}" for i in spellings(REGION_ID)),
        *(f"CUSTOM_FPGA_REGION_INTEL_{i}" for i in spellings(REGION_ID)),
        *(f"CUSTOM_FPGA_INTEL_FUNCTION_{i}" for i in spellings(FUNCTION_ID)),
        *(f"CUSTOM_FPGA_FUNCTION_INTEL_{i}" for i in spellings(FUNCTION_ID)),
        *(f"CUSTOM_FPGA_FUNCTION_ID_INTEL_{i}" for i in spellings(FUNCTION_ID)),
        # The region implements a second function: a trait for it too, in every spelling.
        *(f"CUSTOM_FPGA_INTEL_FUNCTION_{i}" for i in spellings(SECOND_ID)),
        *(f"CUSTOM_FPGA_FUNCTION_INTEL_{i}" for i in spellings(SECOND_ID)),
        *(f"CUSTOM_FPGA_FUNCTION_ID_INTEL_{i}" for i in spellings(SECOND_ID)),
    }
    provider = client.get_provider(region)
    assert provider is not None and provider.name.startswith(f"{HOST}_0000:")


def published(client: PlacementClient, compute: str) -> dict[str, Any]:
    """Each provider of the tree: its parent, inventories and traits."""
    return {
        p.uuid: (p.parent_uuid, client.get_inventories(p.uuid)[1], client.get_traits(p.uuid)[1])
        for p in client.get_tree(compute)
    }


def test_a_host_s_first_sync_reads_neither_its_tree_nor_its_new_pools(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, placement: adapter.Adapter
) -> None:
    """Nova's compute node found by its name is the whole tree Acceleron knows of it: the
    tree is not read, and a new pool, nothing retired beside it, is given its inventory
    by one write at the generation its traits' write answered, its members recorded
    first. The tree is the one a sync that read it makes."""
    compute = compute_node(placement)
    inventory.reconcile(db, report(conf))
    PlacementClient(counted).ensure_traits(["CUSTOM_PROGRAMMABLE"])  # names are cluster-wide
    counted.reset()
    syncer(db, counted, pools=True, create_compute_nodes=False).sync_host(HOST)
    reads = [c for c in counted.calls if c.method == "GET" and c.path.startswith("/resource_p")]
    assert [(c.path, c.query) for c in reads] == [("/resource_providers", f"name={HOST}")]
    assert counted.by_route()["POST /reshaper"] == 0
    client = PlacementClient(placement)
    with db.reader() as conn:
        host = conn.execute(select(HOSTS)).one()
        recorded = {r.uuid: r for r in conn.execute(select(PROVIDERS))}
    assert host.synced_generation == host.generation
    pools = [uuid for uuid, r in recorded.items() if r.owned.get("members")]
    assert pools and all(client.get_inventories(uuid)[1] for uuid in pools)
    in_placement = {p.uuid: p.generation for p in client.get_tree(compute)}
    assert {uuid: r.generation for uuid, r in recorded.items()} == {
        uuid: in_placement[uuid] for uuid in recorded
    }
    verify = syncer(db, counted, pools=True, create_compute_nodes=False)
    assert verify.sync_host(HOST, force=True).actions == []  # as a sync that read it


def test_a_first_sync_makes_right_what_an_attempt_left_unrecorded(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, placement: adapter.Adapter
) -> None:
    """A sync that died before recording what it made leaves providers the next first
    sync does not read: each is found when its creation is refused, and made right as if
    read: put back under its parent, its inventory and traits written again."""
    compute = compute_node(placement)
    inventory.reconcile(db, report(conf))
    sync = syncer(db, counted, create_compute_nodes=False)
    sync.sync_host(HOST)
    client = PlacementClient(placement)
    right = published(client, compute)
    region = region_uuid(db)
    client.move_provider(region, client.get_provider(region).name, compute)  # type: ignore[union-attr]
    client.set_inventories(region, {"CUSTOM_ACCELERATOR_FPGA": Inventory(total=9)})
    client.set_traits(region, ["CUSTOM_SOMETHING_ELSE"])
    with db.writer() as conn:  # the record lost: as if never written
        conn.execute(PROVIDERS.delete())
        conn.execute(update(HOSTS).values(rp_uuid=None, synced_generation=-1))
    planned = syncer(db, counted, create_compute_nodes=False).sync_host(HOST, dry_run=True)
    there = {p.uuid for p in client.get_tree(compute)}
    assert not [a for a in planned.actions if a.op == "create" and a.uuid in there]
    assert ("move", region) in {(a.op, a.uuid) for a in planned.actions}  # read, planned
    counted.reset()
    result = syncer(db, counted, create_compute_nodes=False).sync_host(HOST)
    assert result.errors == [] and counted.count("GET", "/resource_providers?in_tree") == 0
    assert published(client, compute) == right
    assert sync.sync_host(HOST, force=True).actions == []


def test_an_unchanged_host_costs_no_call_and_a_verification_no_write(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter
) -> None:
    inventory.reconcile(db, report(conf))
    sync = syncer(db, counted)
    sync.sync_host(HOST)
    counted.reset()
    assert sync.sync_host(HOST).skipped and counted.calls == []
    assert sync.sync_pending() == []
    result = sync.sync_host(HOST, force=True)
    assert result.actions == [] and counted.writes == []
    assert counted.count("GET") == 1  # the tree, with its generations


@pytest.mark.parametrize(
    "unusable", [{"status": "maintaining"}, {"health": "unhealthy"}, {"state": "lost"}], ids=str
)
def test_an_unusable_device_reserves_its_inventory(
    db: Database,
    conf: cfg.ConfigOpts,
    counted: CountingAdapter,
    placement: adapter.Adapter,
    unusable: dict[str, str],
) -> None:
    """Disabled by an operator, reported failed, or gone while in use."""
    inventory.reconcile(db, report(conf))
    sync = syncer(db, counted)
    sync.sync_host(HOST)
    bump(db, **unusable)
    counted.reset()
    [result] = sync.sync_pending()
    ops = sorted((a.op, a.name.rsplit("_", 1)[-1]) for a in result.actions)
    assert ops == [("inventories", "region0"), ("inventories", "region1")]
    _, invs = PlacementClient(placement).get_inventories(region_uuid(db))
    assert invs["CUSTOM_ACCELERATOR_FPGA"].reserved == 2
    assert counted.count("PUT") == 2


def test_reprogramming_swaps_the_function_traits_in_one_call(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, placement: adapter.Adapter
) -> None:
    inventory.reconcile(db, report(conf))
    sync = syncer(db, counted)
    sync.sync_host(HOST)
    region = region_uuid(db)
    new_function = "0123456789abcdef0123456789abcdef"
    new_id = new_function.upper()
    with db.writer() as conn:
        conn.execute(
            update(DEPLOYABLES)
            .where(DEPLOYABLES.c.uuid == region)
            .values(function_uuid=new_function)
        )
        conn.execute(update(HOSTS).values(generation=HOSTS.c.generation + 1))
    counted.reset()
    sync.sync_pending()
    assert counted.by_route()["PUT /resource_providers/{uuid}/traits"] == 1
    assert counted.count("PUT", "/resource_providers") == 1
    _, traits = PlacementClient(placement).get_traits(region)
    assert f"CUSTOM_FPGA_INTEL_FUNCTION_{new_id}" in traits
    # Both functions the region was reported with are gone until the agent reports again.
    assert f"CUSTOM_FPGA_INTEL_FUNCTION_{FUNCTION_ID}" not in traits
    assert f"CUSTOM_FPGA_INTEL_FUNCTION_{SECOND_ID}" not in traits


def _first_card_gone_while_allocated(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, placement: adapter.Adapter
) -> tuple[HostReport, Syncer, str, str]:
    """The host synced, a consumer allocated on the first card's region, then a report
    without that card: (the full report, the syncer, the region, the consumer)."""
    full = report(conf)
    inventory.reconcile(db, full)
    sync = syncer(db, counted)
    sync.sync_host(HOST)
    region = region_uuid(db)
    consumer = str(uuid.uuid4())
    allocate(placement, region, consumer)
    inventory.reconcile(db, HostReport(HOST, "1.0", full.devices[1:]))
    return full, sync, region, consumer


def test_a_vanished_provider_with_allocations_is_reserved_then_deleted(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, placement: adapter.Adapter
) -> None:
    _, sync, region, consumer = _first_card_gone_while_allocated(db, conf, counted, placement)
    [result] = sync.sync_pending()
    assert ("retire", region) in {(a.op, a.uuid) for a in result.actions}
    client = PlacementClient(placement)
    _, invs = client.get_inventories(region)
    assert invs["CUSTOM_ACCELERATOR_FPGA"].reserved == invs["CUSTOM_ACCELERATOR_FPGA"].total
    placement.delete(f"/allocations/{consumer}", microversion="1.39")
    compute = client.find_provider(HOST)
    assert compute is not None
    result = sync.sync_host(HOST, force=True)  # unused: out of the tree, still there
    assert ("retire", region) in {(a.op, a.uuid) for a in result.actions}
    assert region not in {p.uuid for p in client.get_tree(compute.uuid)}
    moved = client.get_provider(region)
    assert moved is not None and moved.parent_uuid is None
    result = sync.sync_host(HOST, force=True)  # a later pass ([placement] delay 0 here)
    assert ("delete", region) in {(a.op, a.uuid) for a in result.actions}
    assert client.get_provider(region) is None


def test_a_retired_provider_that_comes_back_is_usable_again(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, placement: adapter.Adapter
) -> None:
    full, sync, region, consumer = _first_card_gone_while_allocated(db, conf, counted, placement)
    sync.sync_pending()
    placement.delete(f"/allocations/{consumer}", microversion="1.39")
    inventory.reconcile(db, full)  # and back
    [result] = sync.sync_pending()
    assert ("inventories", region) in {(a.op, a.uuid) for a in result.actions}
    _, invs = PlacementClient(placement).get_inventories(region)
    assert invs["CUSTOM_ACCELERATOR_FPGA"].reserved == 0
    with db.reader() as conn:
        retired = conn.execute(
            select(table(PlacementProvider).c.retired).where(
                table(PlacementProvider).c.uuid == region
            )
        ).scalar_one()
    assert retired is False
    assert sync.sync_host(HOST, force=True).actions == []


def test_providers_acceleron_did_not_create_are_left_alone(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, placement: adapter.Adapter
) -> None:
    inventory.reconcile(db, report(conf))
    sync = syncer(db, counted)
    sync.sync_host(HOST)
    client = PlacementClient(placement)
    compute = client.find_provider(HOST)
    assert compute is not None
    novas = client.create_provider(str(uuid.uuid4()), f"{HOST}_pgpu_0000:81:00.0", compute.uuid)
    client.set_traits(novas.uuid, ["CUSTOM_NOVA_OWNED"])
    inventory.reconcile(db, HostReport(HOST, "1.0", ()))
    sync.sync_pending()
    assert client.get_provider(novas.uuid) is not None
    assert [p.uuid for p in client.get_tree(compute.uuid)] == [compute.uuid, novas.uuid]


def test_an_unknown_host_is_refused_naming_the_likely_compute_node(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, placement: adapter.Adapter
) -> None:
    PlacementClient(placement).create_provider(str(uuid.uuid4()), f"{HOST}.cloud.example.org")
    inventory.reconcile(db, report(conf))
    with pytest.raises(UnknownHost) as info:
        syncer(db, counted, create_compute_nodes=False).sync_host(HOST)
    assert f"no compute node named '{HOST}'" in info.value.message
    assert f"Did you mean '{HOST}.cloud.example.org'?" in info.value.message


@pytest.mark.parametrize("nested", [True, False])
def test_a_compute_node_nova_recreated_is_looked_up_again(
    db: Database,
    conf: cfg.ConfigOpts,
    counted: CountingAdapter,
    placement: adapter.Adapter,
    nested: bool,
) -> None:
    client = PlacementClient(placement)
    old = compute_node(placement)
    inventory.reconcile(db, report(conf))
    sync = syncer(db, counted, nested=nested, create_compute_nodes=False)
    sync.sync_host(HOST)
    client.delete_subtree(old)  # the compute node is deleted, then Nova makes a new one
    new = compute_node(placement)
    [failed] = sync.sync_all()
    assert failed.errors and old in failed.errors[0]
    with db.reader() as conn:
        host = conn.execute(select(HOSTS)).one()
    assert host.rp_uuid is None and host.synced_generation == -1  # looked up next pass
    [result] = sync.sync_pending()
    assert result.errors == []
    with db.reader() as conn:
        assert conn.execute(select(HOSTS.c.rp_uuid)).scalar_one() == new
    if nested:
        assert len(client.get_tree(new)) == 15
    else:
        assert "CUSTOM_ACCELERATOR_FPGA" in client.get_inventories(new)[1]


def test_dry_run_plans_without_writing(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter
) -> None:
    inventory.reconcile(db, report(conf))
    result = syncer(db, counted).sync_host(HOST, dry_run=True)
    assert len([a for a in result.actions if a.op == "create"]) == 15  # with the compute node
    assert counted.writes == []
    with db.reader() as conn:
        assert conn.execute(select(table(PlacementProvider))).first() is None
        assert conn.execute(select(HOSTS.c.synced_generation)).scalar_one() == -1


def test_flat_mode_and_the_move_to_nested_providers(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, placement: adapter.Adapter
) -> None:
    client = PlacementClient(placement)
    compute = client.create_provider(str(uuid.uuid4()), HOST)
    client.set_inventories(compute.uuid, {"VCPU": Inventory(total=16)})
    client.set_traits(compute.uuid, ["HW_CPU_X86_AVX2"])
    inventory.reconcile(db, report(conf))
    syncer(db, counted, nested=False).sync_host(HOST)
    _, invs = client.get_inventories(compute.uuid)
    assert {rc: i.total for rc, i in invs.items()} == {
        "VCPU": 16,
        "CUSTOM_ACCELERATOR_FPGA": 6,
        "CUSTOM_ACCELERATOR_VGPU": 24,
        "CUSTOM_ACCELERATOR_MIG": 5,
        "CUSTOM_ACCELERATOR_QAT": 4,
        "CUSTOM_ACCELERATOR_MEMORY_HBM": 4 * 9856 + 40192,
    }
    _, traits = client.get_traits(compute.uuid)
    assert {"HW_CPU_X86_AVX2", "CUSTOM_FPGA_INTEL", "CUSTOM_PROGRAMMABLE"} <= traits
    assert [p.uuid for p in client.get_tree(compute.uuid)] == [compute.uuid]
    # The upgrade to nested providers: Acceleron's classes and traits come off first.
    result = syncer(db, counted).remove_flat(HOST)
    assert [a.op for a in result.actions] == ["remove_flat"]
    _, invs = client.get_inventories(compute.uuid)
    _, traits = client.get_traits(compute.uuid)
    assert set(invs) == {"VCPU"} and traits == {"HW_CPU_X86_AVX2"}
    syncer(db, counted).sync_pending()
    assert len(client.get_tree(compute.uuid)) == 15


def test_a_class_still_allocated_is_kept_reserved_until_it_is_free(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, placement: adapter.Adapter
) -> None:
    """Switching to the standard classes while an instance holds a custom one."""
    inventory.reconcile(db, report(conf))
    syncer(db, counted).sync_host(HOST)
    region, consumer = region_uuid(db), str(uuid.uuid4())
    allocate(placement, region, consumer)
    standard = syncer(db, counted, standard_classes=True)
    result = standard.sync_host(HOST, force=True)
    assert result.errors == []
    assert (
        "inventories",
        region,
        "kept CUSTOM_ACCELERATOR_FPGA fully reserved: still allocated",
    ) in {(a.op, a.uuid, a.detail) for a in result.actions}
    client = PlacementClient(placement)

    def inventories() -> dict[str, tuple[int, int]]:
        return {rc: (i.total, i.reserved) for rc, i in client.get_inventories(region)[1].items()}

    assert inventories() == {"FPGA": (2, 0), "CUSTOM_ACCELERATOR_FPGA": (2, 2)}
    assert standard.sync_host(HOST, force=True).errors == []  # still in use: still kept
    assert inventories() == {"FPGA": (2, 0), "CUSTOM_ACCELERATOR_FPGA": (2, 2)}
    placement.delete(f"/allocations/{consumer}", microversion="1.39")
    standard.sync_host(HOST, force=True)
    assert inventories() == {"FPGA": (2, 0)}
    assert standard.sync_host(HOST, force=True).actions == []


def compute_node(placement: adapter.Adapter) -> str:
    """A compute node as Nova makes it, with Nova's own inventory and a trait."""
    client = PlacementClient(placement)
    compute = client.create_provider(str(uuid.uuid4()), HOST)
    client.set_inventories(
        compute.uuid, {"VCPU": Inventory(total=16), "MEMORY_MB": Inventory(total=65536)}
    )
    client.set_traits(compute.uuid, ["HW_CPU_X86_AVX2"])
    return compute.uuid


def nova_grows_vcpu(raw: adapter.Adapter, rp: str) -> None:
    """Nova's concurrent update of the compute node's own inventory."""
    nova = PlacementClient(raw)
    generation, current = nova.get_inventories(rp)
    nova.set_inventories(rp, {**current, "VCPU": Inventory(total=32)}, generation=generation)


def test_flat_mode_keeps_a_concurrent_change_by_nova(
    db: Database, conf: cfg.ConfigOpts, placement: adapter.Adapter
) -> None:
    compute = compute_node(placement)
    nova = Meddler(placement, f"{compute}/inventories", nova_grows_vcpu)
    inventory.reconcile(db, report(conf))
    Syncer(db, lambda: PlacementClient(nova), Options(nested=False)).sync_host(HOST)
    assert nova.times == 0  # Nova did write between our read and our write
    _, invs = PlacementClient(placement).get_inventories(compute)
    assert invs["VCPU"].total == 32 and invs["MEMORY_MB"].total == 65536
    assert invs["CUSTOM_ACCELERATOR_FPGA"].total == 6


def test_flat_mode_removes_a_class_once_its_allocations_are_gone(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, placement: adapter.Adapter
) -> None:
    compute = compute_node(placement)
    full = report(conf)
    inventory.reconcile(db, full)
    flat = syncer(db, counted, nested=False, create_compute_nodes=False)
    flat.sync_host(HOST)
    consumer = str(uuid.uuid4())
    allocate(placement, compute, consumer, "CUSTOM_ACCELERATOR_QAT")
    inventory.reconcile(db, HostReport(HOST, "1.0", full.devices[:-1]))  # the QAT card goes
    [result] = flat.sync_pending()
    assert result.errors == []
    client = PlacementClient(placement)
    qat = client.get_inventories(compute)[1]["CUSTOM_ACCELERATOR_QAT"]
    assert qat.reserved == qat.total == 4
    placement.delete(f"/allocations/{consumer}", microversion="1.39")
    flat.sync_host(HOST, force=True)
    assert set(client.get_inventories(compute)[1]) == {
        "VCPU",
        "MEMORY_MB",
        "CUSTOM_ACCELERATOR_FPGA",
        "CUSTOM_ACCELERATOR_VGPU",
        "CUSTOM_ACCELERATOR_MIG",
        "CUSTOM_ACCELERATOR_MEMORY_HBM",
    }


def test_placement_down_leaves_hosts_pending_until_it_answers(
    db: Database, conf: cfg.ConfigOpts, placement: adapter.Adapter
) -> None:
    down = Unreachable(placement)
    sync = Syncer(db, lambda: PlacementClient(down), Options(), create_compute_nodes=True)
    inventory.reconcile(db, report(conf))
    with pytest.raises(PlacementUnavailable):
        sync.sync_pending()
    with db.reader() as conn:
        assert conn.execute(select(HOSTS.c.synced_generation)).scalar_one() == -1
    down.up = True
    [result] = sync.sync_pending()
    assert len(result.actions) == 15
    assert sync.sync_pending() == []


def test_a_pass_publishes_several_hosts_at_once_each_once(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, placement: adapter.Adapter
) -> None:
    """``[placement] sync_threads``: the syncers given take hosts beside the first, each
    host published by one of them, once; Placement away ends the pass with every host
    left pending, as one syncer alone does."""
    hosts = [f"host-{n}" for n in range(6)]
    for host in hosts:
        inventory.reconcile(db, report(conf, host))
    seen: set[str] = set()

    class Watched(CountingAdapter):
        def request(self, url: str, method: str, **kwargs: Any) -> Any:
            seen.add(threading.current_thread().name)
            return super().request(url, method, **kwargs)

    down = Unreachable(placement)
    watched = Watched(down)
    first, *others = [syncer(db, watched) for _ in range(3)]
    with pytest.raises(PlacementUnavailable):
        first.sync_pending(others)
    with db.reader() as conn:
        assert set(conn.execute(select(HOSTS.c.synced_generation)).scalars()) == {-1}
    down.up = True
    done = first.sync_pending(others)
    assert sorted(d.hostname for d in done) == hosts and all(not d.errors for d in done)
    assert len({name for name in seen if name.startswith("placement-sync")}) > 1
    assert watched.by_route()["POST /resource_providers"] == 15 * len(hosts)
    assert first.sync_pending(others) == []


def test_host_locks_hold_one_host_at_a_time_and_forget_it_after() -> None:
    locks, order = HostLocks(), []
    inside = threading.Event()

    def second() -> None:
        with locks.hold("a"):
            order.append("second")

    with locks.hold("a"):
        thread = threading.Thread(target=second)
        thread.start()
        with locks.hold("b"):  # another host: not held up
            inside.set()
        thread.join(0.2)
        assert thread.is_alive() and inside.is_set()  # waits for the first to let go
        order.append("first")
    thread.join()
    assert order == ["first", "second"]
    assert locks._held == {}  # nothing kept of a host once its syncs are done


def test_configured_functionality_traits_are_published(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, placement: adapter.Adapter
) -> None:
    conf.set_override(
        "functionality",
        {"pac arria10": "compute", "9926AB6D-6C92-5A68-AABC-A7D84C545738": "network"},
        "placement",
    )
    inventory.reconcile(db, report(conf))
    Syncer(
        db, lambda: PlacementClient(counted), options_from_conf(conf), create_compute_nodes=True
    ).sync_host(HOST)
    client = PlacementClient(placement)
    traits = [client.get_traits(region_uuid(db, i))[1] for i in range(4)]  # 2 cards x 2 regions
    functionality = {"CUSTOM_FPGA_COMPUTE", "CUSTOM_FPGA_NETWORK"}
    assert [t & functionality for t in traits] == [
        {"CUSTOM_FPGA_COMPUTE"},
        functionality,
        {"CUSTOM_FPGA_COMPUTE"},
        functionality,
    ]
    not_network = [
        {
            "resources:CUSTOM_ACCELERATOR_FPGA": "1",
            "trait:CUSTOM_FPGA_COMPUTE": "required",
            "trait:CUSTOM_FPGA_NETWORK": "forbidden",
        }
    ]
    found = client.get_allocation_candidates(profile_query(not_network).params())
    assert {rp for r in found.requests for rp in r.mappings["device_profile_0"]} == {
        region_uuid(db, 0),
        region_uuid(db, 2),
    }


def inventories_by_key(client: PlacementClient, compute: str) -> dict[str, dict[str, Any]]:
    """Each published provider's inventory, (total, reserved, max_unit) by class, keyed by
    the provider's key (``region0``, ``mig/1g.10gb``, ...); the cards' own are empty."""
    return {
        rp.name.split("_", 2)[-1]: {
            rc: (i.total, i.reserved, i.max_unit)
            for rc, i in client.get_inventories(rp.uuid)[1].items()
        }
        for rp in client.get_tree(compute)
        if rp.parent_uuid is not None and rp.parent_uuid != compute
    }


def test_standard_resource_classes_are_published_where_upstream_has_them(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, placement: adapter.Adapter
) -> None:
    inventory.reconcile(db, report(conf))
    syncer(db, counted, standard_classes=True).sync_host(HOST)
    client = PlacementClient(placement)
    compute = client.find_provider(HOST)
    assert compute is not None
    published = inventories_by_key(client, compute.uuid)
    assert published["region0"] == {"FPGA": (2, 0, 2)}
    assert published["vgpu/nvidia-223"] == {"VGPU": (8, 0, 8)}
    assert set(published["mig/1g.10gb"]) == {  # no standard class: custom ones stay
        "CUSTOM_ACCELERATOR_MIG",
        "CUSTOM_ACCELERATOR_MEMORY_HBM",
    }
    assert published["vf_pool"] == {"CUSTOM_ACCELERATOR_QAT": (4, 0, 4)}
    upstream_flavor = [
        {"resources:FPGA": "1", f"trait:CUSTOM_FPGA_REGION_INTEL_{REGION_ID}": "required"}
    ]
    found = client.get_allocation_candidates(profile_query(upstream_flavor).params())
    assert {rp for r in found.requests for rp in r.mappings["device_profile_0"]} == {
        region_uuid(db, 0),
        region_uuid(db, 2),
    }


def test_memory_classes_in_nested_mode(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, placement: adapter.Adapter
) -> None:
    inventory.reconcile(db, report(conf))
    syncer(db, counted).sync_host(HOST)
    client = PlacementClient(placement)
    compute = client.find_provider(HOST)
    assert compute is not None
    published = inventories_by_key(client, compute.uuid)
    assert published["mig/1g.10gb"] == {
        "CUSTOM_ACCELERATOR_MIG": (4, 0, 4),
        "CUSTOM_ACCELERATOR_MEMORY_HBM": (4 * 9856, 0, 9856),  # per unit: max_unit
    }
    assert published["mig/3g.40gb"]["CUSTOM_ACCELERATOR_MEMORY_HBM"] == (40192, 0, 40192)
    big = [
        {
            "resources:CUSTOM_ACCELERATOR_MIG": "1",
            "resources:CUSTOM_ACCELERATOR_MEMORY_HBM": "20000",
        }
    ]
    found = client.get_allocation_candidates(profile_query(big).params())
    h100 = report(conf).devices[3].pci_address
    assert {rp for r in found.requests for rp in r.mappings["device_profile_0"]} == {
        names.provider_uuid(HOST, h100, "mig/3g.40gb")
    }
    # A driver that cannot tell the memory type: the class is named after the accelerator.
    with db.writer() as conn:
        conn.execute(
            update(DEPLOYABLES).where(DEPLOYABLES.c.key == "mig/3g.40gb").values(memory_type=None)
        )
        conn.execute(update(HOSTS).values(generation=HOSTS.c.generation + 1))
    syncer(db, counted).sync_host(HOST)
    after = inventories_by_key(client, compute.uuid)["mig/3g.40gb"]
    assert after == {
        "CUSTOM_ACCELERATOR_MIG": (1, 0, 1),
        "CUSTOM_ACCELERATOR_MEMORY_MIG": (40192, 0, 40192),
    }


def test_a_device_whose_names_are_invalid_is_left_out_and_named(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, placement: adapter.Adapter
) -> None:
    inventory.reconcile(db, report(conf))
    bump(db, vendor_name="Intel/Altera")  # no trait can be made of it
    result = syncer(db, counted).sync_host(HOST)
    [error] = result.errors
    assert "'Intel/Altera'" in error and "fake" in error
    with db.reader() as conn:
        bad = conn.execute(
            select(DEVICES.c.pci_address).where(DEVICES.c.vendor_name == "Intel/Altera")
        ).scalar_one()
    assert f"{HOST} {bad}" in error
    client = PlacementClient(placement)
    compute = client.find_provider(HOST)
    assert compute is not None
    published = {rp.name for rp in client.get_tree(compute.uuid)}
    assert len(published) == 15 - 3 and not any(bad in name for name in published)
    with db.reader() as conn:
        host = conn.execute(select(HOSTS).where(HOSTS.c.hostname == HOST)).one()
    assert host.synced_generation == host.generation and host.placement_errors == [error]
    # Fixed (the next report names it well): the errors go.
    bump(db, vendor_name="INTEL")
    assert syncer(db, counted).sync_host(HOST).errors == []
    with db.reader() as conn:
        assert conn.execute(select(HOSTS.c.placement_errors)).scalar_one() == []


def test_flat_mode_leaves_out_a_device_whose_names_are_invalid(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, placement: adapter.Adapter
) -> None:
    inventory.reconcile(db, report(conf))
    bump(db, vendor_name="Intel/Altera")
    result = syncer(db, counted, nested=False).sync_host(HOST)
    [error] = result.errors
    assert "'Intel/Altera'" in error
    compute = PlacementClient(placement).find_provider(HOST)
    assert compute is not None
    fpga = PlacementClient(placement).get_inventories(compute.uuid)[1]["CUSTOM_ACCELERATOR_FPGA"]
    assert fpga.total == 3  # the other card's two regions (2 + 1)


def test_spec_001_flavors_find_the_providers_acceleron_published(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, placement: adapter.Adapter
) -> None:
    inventory.reconcile(db, report(conf))
    syncer(db, counted).sync_host(HOST)
    client = PlacementClient(placement)
    daas = [
        {
            "resources:CUSTOM_ACCELERATOR_FPGA": "1",
            "trait:CUSTOM_FPGA_INTEL_PAC_ARRIA10": "required",
            "trait:CUSTOM_PROGRAMMABLE": "required",
        }
    ]
    found = client.get_allocation_candidates(profile_query(daas).params())
    assert len(found.requests) == 4  # 2 cards x 2 regions
    afaas = [
        {
            "resources:CUSTOM_ACCELERATOR_FPGA": "1",
            f"trait:CUSTOM_FPGA_INTEL_FUNCTION_{FUNCTION_ID}": "required",
        }
    ]
    found = client.get_allocation_candidates(profile_query(afaas).params())
    regions = {rp for r in found.requests for rp in r.mappings["device_profile_0"]}
    with db.reader() as conn:
        expected = set(
            conn.execute(
                select(DEPLOYABLES.c.uuid).where(DEPLOYABLES.c.function_uuid == FUNCTION)
            ).scalars()
        )
    assert regions == expected and len(regions) == 2
    two = [
        {"resources:CUSTOM_ACCELERATOR_FPGA": "1"},
        {"resources:CUSTOM_ACCELERATOR_VGPU": "1", "trait:CUSTOM_NVIDIA_1EB8_T4_2B": "required"},
    ]
    found = client.get_allocation_candidates(profile_query(two).params())
    assert found.requests and all(
        set(r.mappings) == {"device_profile_0", "device_profile_1"} for r in found.requests
    )
    assert names.provider_uuid(HOST, report(conf).devices[2].pci_address, "vgpu/nvidia-223") in {
        rp for r in found.requests for rp in r.mappings["device_profile_1"]
    }


def test_spec_001_afaas_flavors_in_spec_001_spelling_on_the_published_tree(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter, placement: adapter.Adapter
) -> None:
    """Spec 001's AFaaS flavors, traits spelt as spec 001 (and upstream) write them,
    against the tree the sync publishes from the fake driver's inventory."""
    inventory.reconcile(db, report(conf))
    programmed, blank = region_uuid(db, 0), region_uuid(db, 2)  # region0 of each card
    with db.writer() as conn:  # the second card's region0 holds no function yet
        conn.execute(
            update(DEPLOYABLES).where(DEPLOYABLES.c.uuid == blank).values(function_uuid=None)
        )
    syncer(db, counted).sync_host(HOST)
    client = PlacementClient(placement)
    function = f"CUSTOM_FPGA_FUNCTION_INTEL_{FUNCTION_ID}"

    def candidates(specs: dict[str, str]) -> tuple[set[str], Any]:
        found = client.get_allocation_candidates(groups_from_flavor(specs).query().params())
        return {rp for r in found.requests for rp in r.mappings["device_profile_0"]}, found

    orchestrated = {
        "resources:CUSTOM_ACCELERATOR_FPGA": "1",
        f"trait:CUSTOM_FPGA_REGION_INTEL_{REGION_ID}": "required",
        "trait:CUSTOM_PROGRAMMABLE": "required",
        f"function:{function}": "required",
    }
    assert groups_from_flavor(orchestrated).groups[0]["accel:function_id"] == str(
        uuid.UUID(FUNCTION)
    )
    regions, found = candidates(orchestrated)
    assert regions == {programmed, blank}  # the function is not asked of Placement
    assert {rp for rp, s in found.summaries.items() if function in s.traits} == {programmed}
    pre_programmed = {"resources:CUSTOM_ACCELERATOR_FPGA": "1", f"trait:{function}": "required"}
    assert candidates(pre_programmed)[0] == {programmed}
    granular = {
        "resources1:CUSTOM_ACCELERATOR_FPGA": "1",
        "traits1:CUSTOM_FPGA_INTEL_PAC_ARRIA10": "required",
        "others1": f"function:{function}=required",
    }
    assert candidates(granular)[0] == {programmed, blank, region_uuid(db, 1), region_uuid(db, 3)}


def nested_card() -> Any:
    """An FPGA whose region0 holds a VF pool (spec 003's tree: region0/vfs under region0)."""
    from acceleron.vocabulary import AttachHandle
    from acceleron.vocabulary import Deployable as Dep
    from acceleron.vocabulary import Device as Dev

    vfs = Dep(
        "region0/vfs",
        "vf_pool",
        2,
        accelerator_type="FPGA_VF",
        attach_handles=(AttachHandle("PCI", "0000:5e:00.2"), AttachHandle("PCI", "0000:5e:00.3")),
    )
    handle = AttachHandle("PCI", "0000:5e:00.1")
    region = Dep(
        "region0",
        "region",
        1,
        programmable=True,
        region_type=REGION_TYPE,
        attach_handles=(handle,),
        children=(vfs,),
    )
    return Dev(
        "0000:5e:00.0",
        "FPGA",
        "8086",
        "INTEL",
        "09c4",
        "PAC_ARRIA10",
        "intel_fpga",
        deployables=(region,),
    )


def test_a_nested_deployable_is_a_child_provider_of_its_region(
    db: Database, counted: CountingAdapter, placement: adapter.Adapter
) -> None:
    """Published under its region; a provider an older sync put under the device (a
    sibling of its region) is moved there, keeping its allocations."""
    inventory.reconcile(db, HostReport(HOST, "1.0", (nested_card(),)))
    sync = syncer(db, counted)
    sync.sync_host(HOST)
    client = PlacementClient(placement)
    card = names.provider_uuid(HOST, "0000:5e:00.0")
    region = names.provider_uuid(HOST, "0000:5e:00.0", "region0")
    vfs = names.provider_uuid(HOST, "0000:5e:00.0", "region0/vfs")
    parents = {rp.uuid: rp.parent_uuid for rp in client.get_tree(card)}
    assert parents[region] == card and parents[vfs] == region
    # As an older Acceleron left it: the pool beside its region, in use.
    client.move_provider(vfs, names.provider_name(HOST, "0000:5e:00.0", "region0/vfs"), card)
    consumer = str(uuid.uuid4())
    allocate(placement, vfs, consumer, "CUSTOM_ACCELERATOR_FPGA_VF")
    plan = sync.sync_host(HOST, force=True, dry_run=True)
    assert [(a.op, a.uuid) for a in plan.actions] == [("move", vfs)]
    sync.sync_host(HOST, force=True)
    assert {rp.uuid: rp.parent_uuid for rp in client.get_tree(card)}[vfs] == region
    assert client.get_consumer_allocations(consumer) == {vfs: {"CUSTOM_ACCELERATOR_FPGA_VF": 1}}
    assert sync.sync_host(HOST, force=True).actions == []
