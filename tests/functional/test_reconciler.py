"""Leaks between Placement and the accelerator requests, against the real Placement
(in-process) on every database backend: a claim that fails halfway undoes what it can,
and the reconciler frees what is left, after its grace, and only Acceleron's part."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from keystoneauth1 import adapter
from oslo_config import cfg
from sqlalchemy import select

from acceleron.api.app import create_app
from acceleron.cli.main import main
from acceleron.db.models import AttachHandle, Deployable, Device, Host, PlacementProvider, table
from acceleron.db.session import Database
from acceleron.exceptions import PlacementUnavailable
from acceleron.placement.client import Inventory, PlacementClient
from acceleron.service import arqs, binding, inventory
from acceleron.service.placement import PlacementService, options_from_conf
from acceleron.service.publish import Syncer, verify_slice
from acceleron.service.reconciler import Reconciler
from tests.fixtures.arqs import ADMIN, HOST, held
from tests.fixtures.fake_host import report
from tests.fixtures.placement import CountingAdapter
from tests.fixtures.server import serve
from tests.fixtures.waiting import wait_for

HANDLES, HOSTS = table(AttachHandle), table(Host)
DEPLOYABLES, DEVICES, PROVIDERS = table(Deployable), table(Device), table(PlacementProvider)
FPGA = "CUSTOM_ACCELERATOR_FPGA"
LATEST = {"OpenStack-API-Version": "accelerator latest"}


def allocate(placement: adapter.Adapter, consumer: str, allocations: dict[str, Any]) -> None:
    PlacementClient(placement).put_allocations(consumer, allocations, project_id="p1", user_id="u1")


def bind(db: Database, rp: str, consumer: str) -> str:
    """A request of profile "fpga" bound to ``rp`` for ``consumer``; its uuid."""
    arq = arqs.create(db, ADMIN, "fpga")[0].uuid
    binding.bind(db, ADMIN, [arqs.Binding(arq, HOST, rp, consumer)])
    return str(arq)


def reconciler(db: Database, placement: adapter.Adapter, grace: float = 0) -> Reconciler:
    return Reconciler(db, lambda: PlacementClient(placement), grace)


def actions(leaks: list[Any]) -> list[tuple[str, str, str]]:
    return sorted((leak.kind, leak.consumer, leak.action) for leak in leaks)


def test_an_allocation_no_request_holds_is_freed_leaving_the_rest(
    db: Database, placement: adapter.Adapter, published: dict[str, Any]
) -> None:
    region, compute = published["regions"][0].rp_uuid, published["compute"]
    leaked, healthy = str(uuid.uuid4()), str(uuid.uuid4())
    allocate(placement, leaked, {compute: {"VCPU": 2}, region: {FPGA: 1}})  # a Nova instance
    allocate(placement, healthy, {region: {FPGA: 1}})
    bind(db, region, healthy)
    passes = reconciler(db, placement)
    first = passes.run()
    assert actions(first) == [("allocation", leaked, "waiting")]  # seen once: not yet
    assert dict(first[0].allocations) == {region: {FPGA: 1}}  # only Acceleron's part
    assert actions(passes.run()) == [("allocation", leaked, "freed")]
    assert held(placement, leaked) == {compute: {"VCPU": 2}}
    assert held(placement, healthy) == {region: {FPGA: 1}}
    assert passes.run() == []


def test_a_pass_reads_only_the_providers_whose_generation_moved(
    db: Database, placement: adapter.Adapter, published: dict[str, Any]
) -> None:
    """One listing per pass; a provider's allocations are read again only when an
    allocation was written on it; a consumer dropped since (which bumps no generation)
    is no leak."""
    from tests.fixtures.placement import CountingAdapter

    region, other = (r.rp_uuid for r in published["regions"][:2])
    counted = CountingAdapter(placement)
    passes = Reconciler(db, lambda: PlacementClient(counted), 0)

    def reads() -> set[str]:
        return {c.path.split("/")[2] for c in counted.calls if c.path.endswith("/allocations")}

    leaked = str(uuid.uuid4())
    allocate(placement, leaked, {region: {FPGA: 1}})
    assert actions(passes.run()) == [("allocation", leaked, "waiting")]
    assert region in reads() and other in reads()  # the first pass reads every provider
    counted.reset()
    assert actions(passes.run(free=False)) == [("allocation", leaked, "reported")]
    assert reads() == set()
    assert [c.path for c in counted.calls] == ["/resource_providers", f"/allocations/{leaked}"]
    PlacementClient(placement).delete_allocations(leaked)
    assert passes.run() == []
    counted.reset()
    fresh = str(uuid.uuid4())
    allocate(placement, fresh, {other: {FPGA: 1}})
    assert actions(passes.run(free=False)) == [("allocation", fresh, "waiting")]
    assert reads() == {other}


def test_a_request_whose_consumer_holds_no_allocation_is_released(
    db: Database, placement: adapter.Adapter, published: dict[str, Any]
) -> None:
    region = published["regions"][0].rp_uuid
    gone = str(uuid.uuid4())
    arq = bind(db, region, gone)  # a claim undone halfway: its allocation dropped
    passes = reconciler(db, placement)
    assert actions(passes.run()) == [("request", gone, "waiting")]
    assert actions(passes.run()) == [("request", gone, "released")]
    released = arqs.get(db, ADMIN, arq)
    assert released.state == "Unbound" and gone in (released.failure_reason or "")
    with db.reader() as conn:
        assert conn.execute(select(HANDLES).where(HANDLES.c.arq_id.is_not(None))).first() is None
    assert passes.run() == []


def test_a_leak_waits_out_the_grace_and_a_dry_run_frees_nothing(
    db: Database, placement: adapter.Adapter, published: dict[str, Any]
) -> None:
    region = published["regions"][0].rp_uuid
    leaked = str(uuid.uuid4())
    allocate(placement, leaked, {region: {FPGA: 1}})
    patient = reconciler(db, placement, grace=3600)
    assert actions(patient.run()) == actions(patient.run()) == [("allocation", leaked, "waiting")]
    passes = reconciler(db, placement)
    passes.run()
    assert actions(passes.run(dry_run=True)) == [("allocation", leaked, "would free")]
    assert actions(passes.run(free=False)) == [("allocation", leaked, "reported")]
    assert held(placement, leaked) == {region: {FPGA: 1}}
    bind(db, region, leaked)  # its request came after all: no leak any more
    assert passes.run() == []
    assert held(placement, leaked) == {region: {FPGA: 1}}


class FailsAfterAllocating(PlacementClient):
    """The real client; its allocation is made, then the answer is lost."""

    def put_allocations(self, consumer: str, allocations: Any, **kwargs: Any) -> None:
        super().put_allocations(consumer, allocations, **kwargs)
        raise PlacementUnavailable("the answer was lost on the way back")


def test_a_server_side_claim_that_fails_halfway_is_undone(
    db: Database, conf: cfg.ConfigOpts, placement: adapter.Adapter, published: dict[str, Any]
) -> None:
    """POST /v2/claims: Placement allocated, then the API fails: the allocation is dropped,
    no request and no claim is left (and nothing for the reconciler)."""
    app = create_app(conf, db)
    app.state.placement = PlacementService(conf, db, lambda: FailsAfterAllocating(placement))
    consumer = str(uuid.uuid4())
    body = {"device_profile_name": "fpga", "consumer_uuid": consumer}
    with TestClient(app) as client:
        answer = client.post("/v2/claims", json=body, headers=LATEST)
        assert answer.status_code == 503, answer.text
        assert client.get(f"/v2/claims/{consumer}", headers=LATEST).status_code == 404
        arqs_left = client.get("/v2/accelerator_requests", params={"instance": consumer})
        assert arqs_left.json()["arqs"] == []
    assert held(placement, consumer) == {}
    assert reconciler(db, placement).run() == []
    # The same claim through a working client succeeds, on every backend.
    app = create_app(conf, db)
    app.state.placement = PlacementService(conf, db, lambda: PlacementClient(placement))
    with TestClient(app) as client:
        made = client.post("/v2/claims", json=body, headers=LATEST)
        assert made.status_code == 201, made.text
        assert made.json()["state"] == "bound" and made.json()["hostname"] == HOST
        assert list(held(placement, consumer)) == [
            made.json()["accelerator_requests"][0]["device_rp_uuid"]
        ]
        assert client.delete(f"/v2/claims/{consumer}", headers=LATEST).status_code == 204
        # A consumer that holds another's allocation is refused, and what it holds stays.
        other = str(uuid.uuid4())
        region = published["regions"][1].rp_uuid
        allocate(placement, other, {region: {FPGA: 1}})
        body = {"device_profile_name": "fpga", "consumer_uuid": other}
        refused = client.post("/v2/claims", json=body, headers=LATEST)
        assert refused.status_code == 409 and "holds allocations" in refused.text
        assert held(placement, other) == {region: {FPGA: 1}}
    assert held(placement, consumer) == {}


def test_the_api_and_the_cli(
    db: Database,
    conf: cfg.ConfigOpts,
    placement: adapter.Adapter,
    published: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    region = published["regions"][0].rp_uuid
    leaked = str(uuid.uuid4())
    allocate(placement, leaked, {region: {FPGA: 1}})
    conf.set_override("mode", "remote", group="placement")
    conf.set_override("grace", 0, group="reconciler")
    app = create_app(conf, db)
    app.state.placement = PlacementService(conf, db, lambda: PlacementClient(placement))
    with TestClient(app) as api:
        older = api.post(
            "/v2/placement/reconcile", json={}, headers={"OpenStack-API-Version": "accelerator 2.8"}
        )
        assert older.status_code == 404
        member = {**LATEST, "X-Roles": "member", "X-Project-Id": "p1"}
        assert api.post("/v2/placement/reconcile", json={}, headers=member).status_code == 403
        first = api.post("/v2/placement/reconcile", json={"dry_run": True}, headers=LATEST)
        assert first.status_code == 200, first.text
        assert [
            (x["kind"], x["consumer"], x["action"], x["allocations"]) for x in first.json()["leaks"]
        ] == [("allocation", leaked, "waiting", {region: {FPGA: 1}})]
    with serve(app) as url:
        assert main(["--os-url", url, "placement", "reconcile", "--dry-run", "-f", "json"]) == 0
        out, err = capsys.readouterr()
        assert [row["action"] for row in json.loads(out)] == ["would free"] and "dry run" in err
        assert main(["--os-url", url, "placement", "reconcile", "-f", "json"]) == 0
        out, err = capsys.readouterr()
        assert [row["action"] for row in json.loads(out)] == ["freed"]
    assert held(placement, leaked) == {}


def test_a_provider_changed_in_placement_shows_unsynced_and_is_repaired_at_the_next_pass(
    db: Database, conf: cfg.ConfigOpts, placement: adapter.Adapter, published: dict[str, Any]
) -> None:
    """Traits deleted by hand bump the provider's generation: the next reconciler pass
    reads it, finds it otherwise than the sync wrote it, and marks its host not synced;
    the sync's next pass (not only its periodic verification of every host) repairs it.
    An allocation alone moves a generation too: that is no drift."""
    region = published["regions"][0].rp_uuid
    client = PlacementClient(placement)
    syncer = Syncer(db, lambda: client, options_from_conf(conf), create_compute_nodes=True)
    passes = reconciler(db, placement, grace=3600)

    def synced() -> bool:
        with db.reader() as conn:
            host = conn.execute(select(HOSTS).where(HOSTS.c.hostname == HOST)).one()
        return bool(host.synced_generation >= host.generation and not host.placement_errors)

    allocate(placement, str(uuid.uuid4()), {region: {FPGA: 1}})
    passes.run(free=False)
    assert passes.drifted == [] and synced()
    wanted = client.get_traits(region)[1]
    assert wanted
    client.set_traits(region, frozenset())
    assert synced()  # nothing has looked yet
    passes.run(free=False)
    assert passes.drifted == [HOST] and not synced()
    assert [h.hostname for h in syncer.sync_pending() if h.actions] == [HOST]
    assert client.get_traits(region)[1] == wanted and synced()
    passes.run(free=False)
    assert passes.drifted == [] and synced()


# Four hosts in three slices (by the hash of their names): host-3 and host-4, host-1, host-2.
HOSTS_4, TICKS = (HOST, "host-2", "host-3", "host-4"), 3


def more_hosts(db: Database, conf: cfg.ConfigOpts, placement: adapter.Adapter) -> None:
    """host-2 to host-4 with host-1's fake inventory, in Placement as host-1 is."""
    syncer = Syncer(
        db, lambda: PlacementClient(placement), options_from_conf(conf), create_compute_nodes=True
    )
    for host in HOSTS_4[1:]:
        inventory.reconcile(db, report(conf, host))
        syncer.sync_host(host)
    assert [verify_slice(HOSTS_4, tick, TICKS) for tick in range(TICKS)] == [
        ["host-3", "host-4"],
        [HOST],
        ["host-2"],
    ]


def region_of(db: Database, host: str) -> str:
    with db.reader() as conn:
        return str(
            conn.execute(
                select(DEPLOYABLES.c.rp_uuid)
                .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
                .where(DEPLOYABLES.c.kind == "region", DEVICES.c.hostname == host)
                .order_by(DEPLOYABLES.c.id)
            )
            .scalars()
            .first()
        )


def test_a_periodic_pass_reads_only_its_slice_of_the_hosts(
    db: Database, conf: cfg.ConfigOpts, placement: adapter.Adapter, published: dict[str, Any]
) -> None:
    """A pass of tick ``t`` of ``n`` reads the tree of each host of its slice (one small
    GET each) and the allocations of their providers (the first time, then only of
    those whose generation moved), never the whole listing; n ticks read every host."""
    more_hosts(db, conf, placement)
    with db.reader() as conn:
        computes = dict(conn.execute(select(HOSTS.c.hostname, HOSTS.c.rp_uuid)).all())
        providers = {
            host: {
                row.uuid
                for row in conn.execute(select(PROVIDERS).where(PROVIDERS.c.hostname == host))
            }
            for host in HOSTS_4
        }
    counted = CountingAdapter(placement)
    passes = Reconciler(db, lambda: PlacementClient(counted), 0)

    def served(tick: int) -> tuple[list[str], set[str]]:
        counted.reset()
        assert passes.run(tick=tick, ticks=TICKS) == []
        trees = [c.query for c in counted.calls if c.path == "/resource_providers"]
        reads = {c.path.split("/")[2] for c in counted.calls if c.path.endswith("/allocations")}
        return trees, reads

    for tick in range(TICKS):
        mine = verify_slice(HOSTS_4, tick, TICKS)
        trees, reads = served(tick)
        assert trees == [f"in_tree={computes[host]}" for host in mine]
        assert reads == set().union(*(providers[host] for host in mine))
    for tick in range(TICKS, 2 * TICKS):  # the second round: nothing moved, only the trees
        mine = verify_slice(HOSTS_4, tick, TICKS)
        assert served(tick) == ([f"in_tree={computes[host]}" for host in mine], set())
    fresh = str(uuid.uuid4())
    allocate(placement, fresh, {region_of(db, "host-2"): {FPGA: 1}})
    assert served(0) == (
        [f"in_tree={computes[host]}" for host in ("host-3", "host-4")],
        set(),
    )  # host-2's slice is not this one: its allocation waits for its tick
    assert actions(passes.run(tick=2, ticks=TICKS)) == [("allocation", fresh, "waiting")]


def test_a_periodic_pass_verifies_the_hosts_it_read_with_no_read_of_its_own(
    db: Database, conf: cfg.ConfigOpts, placement: adapter.Adapter, published: dict[str, Any]
) -> None:
    """The API's passes (``verify``) verify each host of their slice for the sync from
    the tree they read: a provider deleted by hand on one is made again at its host's
    pass, and a pass over quiet hosts reads each tree once. An operator's pass (no
    ``verify``) leaves it."""
    more_hosts(db, conf, placement)
    counted = CountingAdapter(placement)
    client = PlacementClient(counted)

    def sync() -> Syncer:
        return Syncer(db, lambda: client, options_from_conf(conf), create_compute_nodes=True)

    passes = Reconciler(db, lambda: client, 0, verifier=sync)
    gone = region_of(db, "host-2")
    assert PlacementClient(placement).delete_provider(gone)
    passes.run()  # an operator's: every host, no verification
    assert PlacementClient(placement).get_provider(gone) is None
    for tick in (0, 1):  # not host-2's slices: nothing made, each tree read once
        counted.reset()
        passes.run(tick=tick, ticks=TICKS, verify=True)
        trees = [c for c in counted.calls if c.path == "/resource_providers"]
        assert len(trees) == len(verify_slice(HOSTS_4, tick, TICKS)) and not counted.writes
    passes.run(tick=2, ticks=TICKS, verify=True)
    assert PlacementClient(placement).get_provider(gone) is not None
    passes.run(tick=2, ticks=TICKS, verify=True)  # the new provider's allocations read
    counted.reset()
    passes.run(tick=2, ticks=TICKS, verify=True)  # quiet: the tree, read once
    assert [c.route for c in counted.calls] == ["GET /resource_providers"]


def test_a_leak_outside_the_first_slice_is_freed_within_the_bound(
    db: Database, conf: cfg.ConfigOpts, placement: adapter.Adapter, published: dict[str, Any]
) -> None:
    """Passes spread over the interval, each reading its slice: a leak is seen when its
    host's slice comes, once an interval, and freed at the latest interval * (1 +
    max(1, ceil(grace / interval))) seconds after it appears: within grace + 2 *
    interval. The passes' clock is the time each tick was due."""
    more_hosts(db, conf, placement)
    interval, grace = 60.0, 100.0
    passes = reconciler(db, placement, grace=grace)
    allocation, request = str(uuid.uuid4()), str(uuid.uuid4())
    leaks: dict[str, tuple[int, Callable[[], object]]] = {  # its host's tick, how it leaks
        allocation: (
            2,
            lambda: allocate(placement, allocation, {region_of(db, "host-2"): {FPGA: 1}}),
        ),
        request: (1, lambda: bind(db, region_of(db, HOST), request)),  # no allocation at all
    }
    appeared: dict[str, float] = {}
    freed: dict[str, float] = {}
    tick = 0
    while len(freed) < len(leaks) and tick < 10 * TICKS:
        now = (tick + 1) * interval / TICKS
        for leak in passes.run(tick=tick, ticks=TICKS, now=now):
            assert leak.consumer in appeared and leaks[leak.consumer][0] == tick % TICKS
            first = appeared[leak.consumer] + interval  # its host's next pass
            assert leak.seen_for == now - first
            done = "freed" if leak.kind == "allocation" else "released"
            assert leak.action == ("waiting" if now - first < grace else done)
            if leak.action != "waiting":
                freed[leak.consumer] = now
        for consumer, (slot, make) in leaks.items():
            if tick == slot:  # just after its host's pass: the longest wait
                make()
                appeared[consumer] = now
        tick += 1
    latest = interval * (1 + max(1, math.ceil(grace / interval)))
    assert {c: freed[c] - appeared[c] for c in leaks} == dict.fromkeys(leaks, latest)
    assert latest <= grace + 2 * interval
    assert held(placement, allocation) == {}
    assert passes.run() == []


def test_the_apis_passes_go_round_the_hosts_and_free_a_leak(
    db: Database,
    conf: cfg.ConfigOpts,
    placement: adapter.Adapter,
    published: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The API's own passes, a slice each tick (ticks made short here): a leak on a host
    of a later slice is freed once its host's slice has seen it twice."""
    from acceleron.api import workers

    more_hosts(db, conf, placement)
    monkeypatch.setattr(workers, "VERIFY_TICK", 0.25)  # 1 s: four ticks of 0.25 s
    conf.set_override("mode", "remote", group="placement")
    conf.set_override("interval", 1, group="reconciler")
    conf.set_override("grace", 0, group="reconciler")
    leaked = str(uuid.uuid4())
    allocate(placement, leaked, {region_of(db, "host-2"): {FPGA: 1}})
    counted = CountingAdapter(placement)
    app = create_app(conf, db)
    app.state.placement = PlacementService(conf, db, lambda: PlacementClient(counted))
    with TestClient(app):
        wait_for(lambda: held(placement, leaked) == {}, seconds=60)
    assert not any(c.path == "/resource_providers" and not c.query for c in counted.calls)


class AllocatedBetweenReads(PlacementClient):
    """The real client; another consumer allocates on ``region`` between the first read
    of its inventories and that of its traits, as a claim may."""

    def __init__(self, placement: adapter.Adapter, region: str) -> None:
        super().__init__(placement)
        self.placement, self.region, self.allocated = placement, region, False
        self.consumer = str(uuid.uuid4())

    def get_inventories(self, uuid: str) -> tuple[int, dict[str, Inventory]]:
        found = super().get_inventories(uuid)
        if uuid == self.region and not self.allocated:
            self.allocated = True
            allocate(self.placement, self.consumer, {self.region: {FPGA: 1}})
        return found


def test_an_allocation_between_a_providers_two_reads_is_no_drift(
    db: Database, placement: adapter.Adapter, published: dict[str, Any]
) -> None:
    """A pass reads a moved provider's inventories, then its traits; a claim allocating
    between the two moves its generation. The pass reads it again rather than take the
    host for drifted (a warning, and the host's sync done again)."""
    region = published["regions"][0].rp_uuid
    allocate(placement, str(uuid.uuid4()), {region: {FPGA: 1}})  # the pass reads it
    client = AllocatedBetweenReads(placement, region)
    passes = Reconciler(db, lambda: client, 3600)
    passes.run(free=False)
    assert client.allocated
    assert passes.drifted == []
    with db.reader() as conn:
        host = conn.execute(select(HOSTS).where(HOSTS.c.hostname == HOST)).one()
        recorded = conn.execute(select(PROVIDERS.c.generation).where(PROVIDERS.c.uuid == region))
        assert recorded.scalar_one() == client.get_inventories(region)[0]
    assert host.synced_generation >= host.generation
