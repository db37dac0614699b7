"""``acceleron adopt cyborg`` against Cyborg's real schema (made by its own
cyborg-dbsync), the real Placement in-process, and Acceleron's database on every backend.

The cloud of each test: compute node ``compute-1`` (Nova's provider, VCPU and memory),
one FPGA card that Cyborg publishes as its provider ``compute-1_<PCI address>`` (its
Intel driver's naming: the name Acceleron's card provider wants) and Acceleron's fake
driver reports with two regions (handles .1 .2 and .3); two servers booted under
Cyborg, each holding VCPU and memory on the compute node and an FPGA on Cyborg's
provider, bound to handles .1 and .3.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests
from keystoneauth1 import adapter
from keystoneauth1 import exceptions as ks_exc
from oslo_config import cfg
from sqlalchemy import column, func, select
from sqlalchemy import table as core_table

from acceleron.db.models import AcceleratorRequest, AttachHandle, DeviceProfile, table
from acceleron.db.session import Database
from acceleron.drivers.fake import FakeDriver
from acceleron.exceptions import PlacementUnavailable
from acceleron.placement.client import Inventory, PlacementClient
from acceleron.placement.tree import Options
from acceleron.report import HostReport
from acceleron.service import adopt, device_profiles, inventory
from acceleron.service.publish import Syncer
from tests.fixtures.cyborg import CyborgRows, cyborg, cyborg_url

__all__ = ["cyborg", "cyborg_url"]

HOST = "compute-1"
ARQS, HANDLES, PROFILES = table(AcceleratorRequest), table(AttachHandle), table(DeviceProfile)
MAPPING = device_profiles.NameMapping(traits={"CUSTOM_FAKE_DEVICE": "CUSTOM_FPGA_INTEL"})
GROUPS = [{"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}]


@dataclasses.dataclass
class Cloud:
    db: Database
    placement: adapter.Adapter
    cyborg: CyborgRows
    compute: str
    old_provider: str
    servers: dict[str, str]  # instance -> Cyborg's request uuid
    profile_uuid: str
    deployable: int

    def client(self, inner: adapter.Adapter | None = None) -> PlacementClient:
        return PlacementClient(inner or self.placement)

    def syncer(self, inner: adapter.Adapter | None = None) -> Syncer:
        return Syncer(self.db, lambda: self.client(inner), Options())

    def plan(self) -> adopt.Plan:
        found = adopt.read_cyborg(self.cyborg.url)
        ours = adopt.read_ours(self.db, {HOST}, Options())
        view = adopt.read_placement(self.client(), found, ours)
        return adopt.plan(found, ours, view, MAPPING)

    def adopt(self, inner: adapter.Adapter | None = None) -> adopt.Plan:
        the_plan = self.plan()
        adopt.apply(self.db, self.client(inner), self.syncer(inner), the_plan)
        return the_plan

    def allocations(self, consumer: str) -> dict[str, dict[str, int]]:
        return self.client().get_consumer_allocations(consumer)

    def state(self) -> tuple[Any, ...]:
        """Everything an adoption changes: Placement's providers and each server's
        allocations, Acceleron's profiles and requests."""
        client = self.client()
        providers = sorted((p.uuid, p.name) for p in client.list_providers())
        held = {s: self.allocations(s) for s in self.servers}
        with self.db.reader() as conn:
            profiles = conn.execute(select(func.count()).select_from(PROFILES)).scalar()
            requests_ = conn.execute(select(func.count()).select_from(ARQS)).scalar()
        return providers, held, profiles, requests_


def _address(conf: cfg.ConfigOpts) -> tuple[str, list[str]]:
    card = FakeDriver(conf, Path("/")).discover()[0]
    return card.pci_address, [h.address for d in card.deployables for h in d.attach_handles]


def _allocate(placement: adapter.Adapter, consumer: str, body: dict[str, Any]) -> None:
    response = placement.put(
        f"/allocations/{consumer}",
        json={"allocations": {rp: {"resources": r} for rp, r in body.items()},
              "project_id": "p1", "user_id": "u1", "consumer_generation": None,
              "consumer_type": "INSTANCE"},
        microversion="1.39", raise_exc=False,
    )  # fmt: skip
    assert response.status_code == 204, response.text


@pytest.fixture
def cloud(
    db: Database, conf: cfg.ConfigOpts, placement: adapter.Adapter, cyborg: CyborgRows
) -> Cloud:
    conf.set_override("host", HOST)
    inventory.reconcile(db, HostReport(HOST, "1.0", tuple(FakeDriver(conf, Path("/")).discover())))
    card, handles = _address(conf)
    client = PlacementClient(placement)
    compute = str(uuid.uuid4())
    client.create_provider(compute, HOST)
    client.set_inventories(compute, {"VCPU": Inventory(16), "MEMORY_MB": Inventory(8192)})
    # Cyborg's side: its rows, its provider under the compute node.
    name = f"{HOST}_{card}"
    _, deployable, old = cyborg.device(HOST, card, name=name, rc="FPGA",
                                       traits=["CUSTOM_FAKE_DEVICE"], total=3)  # fmt: skip
    handle_ids = [cyborg.handle(deployable, address) for address in handles[:3]]
    profile, profile_uuid = cyborg.profile("fpga-dp", GROUPS)
    client.create_provider(old, name, compute)
    client.set_inventories(old, {"FPGA": Inventory(3)})
    client.set_traits(old, ["CUSTOM_FAKE_DEVICE", "OWNER_CYBORG"])
    servers = {}
    for handle_id in (handle_ids[0], handle_ids[2]):
        server = str(uuid.uuid4())
        servers[server] = cyborg.arq(profile, "Bound", hostname=HOST, device_rp_uuid=old,
                                     instance_uuid=server, attach_handle_id=handle_id,
                                     deployable_id=deployable)  # fmt: skip
        _allocate(placement, server, {compute: {"VCPU": 2, "MEMORY_MB": 512}, old: {"FPGA": 1}})
    return Cloud(db, placement, cyborg, compute, old, servers, profile_uuid, deployable)


def _totals(allocations: dict[str, dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for resources in allocations.values():
        for rc, n in resources.items():
            key = "accelerator" if rc in ("FPGA", "CUSTOM_ACCELERATOR_FPGA") else rc
            out[key] = out.get(key, 0) + n
    return out


def test_a_dry_run_prints_the_plan_and_changes_nothing(cloud: Cloud) -> None:
    before = cloud.state()
    the_plan = cloud.plan()
    assert the_plan.problems == []
    text = "\n".join(the_plan.lines())
    assert "create fpga-dp" in text
    assert '+ {"resources:CUSTOM_ACCELERATOR_FPGA": "1", "trait:CUSTOM_FPGA_INTEL": "required"}' \
        in text  # fmt: skip
    assert f"rename provider {HOST}_" in text  # Acceleron's card provider wants its name
    assert text.count("move consumer") == 2
    assert f"delete provider {HOST}_" in text
    assert cloud.state() == before


def test_adoption_moves_allocations_and_keeps_the_requests(cloud: Cloud) -> None:
    before = {s: cloud.allocations(s) for s in cloud.servers}
    cloud.adopt()
    client = cloud.client()
    assert client.get_provider(cloud.old_provider) is None
    with cloud.db.reader() as conn:
        held = select(ARQS, HANDLES.c.address).join(HANDLES, HANDLES.c.arq_id == ARQS.c.id)
        rows = {r.uuid: r for r in conn.execute(held)}
        profile = conn.execute(select(PROFILES)).one()
    assert (profile.name, profile.uuid) == ("fpga-dp", cloud.profile_uuid)
    for server, arq in cloud.servers.items():
        after = cloud.allocations(server)
        assert after[cloud.compute] == before[server][cloud.compute]  # VCPU, memory untouched
        assert _totals(after) == _totals(before[server])
        row = rows[arq]
        assert (row.state, row.instance_uuid, row.hostname) == ("Bound", server, HOST)
        assert after[row.device_rp_uuid] == {"CUSTOM_ACCELERATOR_FPGA": 1}
    handles = sorted(r.address for r in rows.values())
    assert handles[0].endswith(".1") and handles[1].endswith(".3")


def test_a_second_run_is_a_no_op(cloud: Cloud) -> None:
    cloud.adopt()
    after = cloud.state()
    again = cloud.plan()
    assert again.problems == [] and again.nothing_to_do, again.lines()
    adopt.apply(cloud.db, cloud.client(), cloud.syncer(), again)
    assert cloud.state() == after


class _DownAfter(adapter.Adapter):
    """Placement that goes away after ``writes`` allocation writes (an interruption)."""

    def __init__(self, inner: adapter.Adapter, writes: int) -> None:
        super().__init__(inner.session, service_type="placement")
        self.inner, self.left = inner, writes

    def request(self, url: str, method: str, **kwargs: Any) -> requests.Response:
        if method == "PUT" and url.startswith("/allocations/"):
            if self.left == 0:
                raise ks_exc.ConnectFailure("connection refused")
            self.left -= 1
        return self.inner.request(url, method, **kwargs)


def test_an_interrupted_run_finishes_when_run_again(cloud: Cloud) -> None:
    with pytest.raises(PlacementUnavailable):
        cloud.adopt(_DownAfter(cloud.placement, writes=1))
    moved = [s for s in cloud.servers if cloud.old_provider not in cloud.allocations(s)]
    assert len(moved) == 1  # the first server moved, the second not
    for server in cloud.servers:  # every server holds its accelerator somewhere
        assert _totals(cloud.allocations(server))["accelerator"] == 1
    the_plan = cloud.adopt()
    assert len(the_plan.moves) == 1
    assert cloud.client().get_provider(cloud.old_provider) is None
    for server in cloud.servers:
        assert _totals(cloud.allocations(server))["accelerator"] == 1
    assert cloud.plan().nothing_to_do


def _bind_started(cloud: Cloud) -> str:
    profile = _cyborg_profile_id(cloud)
    return cloud.cyborg.arq(profile, "BindStarted", hostname=HOST, instance_uuid=str(uuid.uuid4()))


def _unknown_device(cloud: Cloud) -> str:
    cloud.cyborg.device(HOST, "0000:ee:00.0", name=f"{HOST}_other", rc="FPGA", traits=[], total=1)
    return "0000:ee:00.0"


def _unexplained(cloud: Cloud) -> str:
    stranger = str(uuid.uuid4())
    _allocate(cloud.placement, stranger, {cloud.old_provider: {"FPGA": 1}})
    return stranger


def _cyborg_profile_id(cloud: Cloud) -> int:
    profiles = core_table("device_profiles", column("id"))
    with cloud.cyborg.engine.connect() as conn:
        return int(conn.execute(select(profiles.c.id)).scalar_one())


@pytest.mark.parametrize(
    "make, named",
    [
        (_bind_started, "a bind or delete is in progress"),
        (_unknown_device, "no Acceleron agent reports it"),
        (_unexplained, "its bound requests explain nothing"),
    ],
)
def test_what_cannot_be_mapped_stops_it_before_any_change(
    cloud: Cloud, make: Callable[[Cloud], str], named: str
) -> None:
    item = make(cloud)
    before = cloud.state()
    the_plan = cloud.plan()
    assert any(item in p and named in p for p in the_plan.problems), the_plan.problems
    with pytest.raises(adopt.AdoptionRefused) as refused:
        adopt.apply(cloud.db, cloud.client(), cloud.syncer(), the_plan)
    assert item in refused.value.message
    assert cloud.state() == before
