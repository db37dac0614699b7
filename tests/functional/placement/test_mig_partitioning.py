"""GPUs partitioned on demand (issue 46), end to end against the real Placement in-process,
on every database backend: a host of two H100s marked ``mig: dynamic`` (the fake driver,
its real geometry), its agent's task runner at work over HTTP. Each GPU is one provider of
MIG units; a device profile names a slice (``accel:mig_profile``); Nova's own query takes
the units from one provider; the bind makes the instance where the GPU allows, or fails
with the planner's reason; the release destroys that instance and no other."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from keystoneauth1 import adapter
from oslo_config import cfg
from sqlalchemy import select

from acceleron import json_file, report
from acceleron.db.models import AttachHandle, Task, table
from acceleron.db.session import Database
from acceleron.drivers.fake import FakeDriver
from acceleron.mig import units
from acceleron.placement.client import AllocationRequest, PlacementClient
from acceleron.report import HostReport
from acceleron.scheduler import query
from acceleron.service import device_profiles
from acceleron.vocabulary import Device, Health
from tests.fixtures.arqs import member
from tests.fixtures.fake_host import LATEST, reporting_api
from tests.fixtures.host import Host
from tests.fixtures.server import serve
from tests.fixtures.waiting import wait_for

GPUS = """
devices:
  - type: GPU
    count: 2
    product_id: "2330"
    model: H100
    memory_mb: 81559
    memory_type: HBM3
    mig: dynamic
"""
TASKS, HANDLES = table(Task), table(AttachHandle)
_XID = {"state": "unhealthy", "reason": "XID 94"}
UNITS = (units.INSTANCE_CLASS, units.COMPUTE_CLASS, units.MEMORY_CLASS)


class Cloud:
    """The API (a test client, and served for the host's agent), Placement, the host."""

    GROUP = f"{query.GROUP_PREFIX}0"

    def __init__(
        self, api: TestClient, placement: adapter.Adapter, host: Host, db: Database
    ) -> None:
        self.api, self.host, self.db = api, host, db
        self.placement = PlacementClient(placement)

    def tasks(self, kind: str) -> list[str]:
        """The states of the host's tasks of ``kind``, oldest first."""
        with self.db.reader() as conn:
            found = conn.execute(
                select(TASKS.c.state)
                .where(TASKS.c.hostname == self.host.name, TASKS.c.kind == kind)
                .order_by(TASKS.c.id)
            )
            return [str(state) for state in found.scalars()]

    def gpus(self) -> dict[str, str]:
        """The host's partitionable GPUs' providers, by PCI address."""
        found = self.api.get(
            "/v2/deployables", params={"hostname": self.host.name}, headers=LATEST
        ).json()["deployables"]
        devices = {d["uuid"]: d["pci_address"] for d in self.devices()}
        return {
            devices[d["device_uuid"]]: d["rp_uuid"]
            for d in found
            if d["kind"] == units.KIND and d["rp_uuid"]
        }

    def devices(self) -> list[dict[str, Any]]:
        """The host's devices (host-1, which the API's fixture reports, has devices at
        the same PCI addresses)."""
        params = {"hostname": self.host.name}
        found: list[dict[str, Any]] = self.api.get(
            "/v2/devices", params=params, headers=LATEST
        ).json()["devices"]
        return found

    def inventory(self, rp: str) -> dict[str, tuple[int, int]]:
        """A provider's MIG units: (total, reserved) by class."""
        found = self.placement.get_inventories(rp)[1]
        return {rc: (found[rc].total, found[rc].reserved) for rc in UNITS}

    def spoil(self, address: str, rp: str) -> None:
        """Two 1g made on the GPU outside Acceleron, at slices 2 and 5: both 3g positions
        partly taken; its provider reserves their units."""
        driver = FakeDriver(self.host.conf, Path("/"))
        device = next(d for d in driver.discover() if d.pci_address == address)
        driver.make_mig(device, "1g.10gb", 2)
        driver.make_mig(device, "1g.10gb", 5)
        self.host.report()
        wait_for(lambda: self.inventory(rp)[units.MEMORY_CLASS] == (8, 2))

    def claim_state(self, consumer: str, project: str) -> str | None:
        """The state of ``project``'s claim for ``consumer``; None when it sees none."""
        shown = self.api.get(f"/v2/claims/{consumer}", headers={**LATEST, **member(project)})
        return None if shown.status_code == 404 else str(shown.json()["state"])

    def state(self) -> dict[str, Any]:
        """The fake driver's state file, by PCI address."""
        path = Path(self.host.conf.fake.state_file)
        found: dict[str, Any] = json.loads(path.read_text())["devices"] if path.exists() else {}
        return found

    def held(self, address: str) -> list[tuple[str, int]]:
        """What the fake GPU at ``address`` holds: (profile, start), Acceleron's or not."""
        held = self.state().get(address, {}).get("mig_instances", [])
        return sorted((i[0], int(i[1])) for i in held)

    def boot(self, profile: str, on: str | None = None) -> dict[str, Any]:
        """What Nova does for a server with ``profile``: its query, a candidate allocated
        (the one on provider ``on``, else the first), the request created and bound to
        its group's provider; the host's agent at work until the bind ends. The request."""
        shown = self.api.get(f"/v2/device_profiles?name={profile}").json()["device_profiles"][0]
        params = query.profile_query(shown["groups"], limit=1000).params()

        def offered() -> AllocationRequest | None:
            """The candidate on ``on`` (else the first), once Placement offers one: a
            report's sync may be writing that provider's reservations at this moment."""
            found = self.placement.get_allocation_candidates(params).requests
            mapped = (c for c in found if on is None or list(c.mappings[self.GROUP]) == [on])
            return next(mapped, None)

        wait_for(lambda: offered() is not None)
        chosen = offered()
        assert chosen is not None
        instance = str(uuid.uuid4())
        self.placement.put_allocations(instance, chosen.allocations, project_id="p", user_id="u")
        created = self.api.post("/v2/accelerator_requests", json={"device_profile_name": profile})
        assert created.status_code == 201, created.text
        (arq,) = created.json()["arqs"]
        rp = chosen.mappings[f"{query.GROUP_PREFIX}0"][0]
        body = {
            arq["uuid"]: [
                {"op": "add", "path": "/hostname", "value": self.host.name},
                {"op": "add", "path": "/device_rp_uuid", "value": rp},
                {"op": "add", "path": "/instance_uuid", "value": instance},
            ]
        }
        patched = self.api.patch("/v2/accelerator_requests", json=body)
        assert patched.status_code == 202, patched.text
        self.host.run_tasks(lambda: self.arq(arq["uuid"])["state"] in ("Bound", "BindFailed"))
        return {**self.arq(arq["uuid"]), "body": body}

    def deployable(self, address: str) -> dict[str, Any]:
        """The partitionable deployable of the GPU at ``address``, with its handles."""
        device = next(d["uuid"] for d in self.devices() if d["pci_address"] == address)
        found = self.api.get(
            "/v2/deployables", params={"hostname": self.host.name}, headers=LATEST
        ).json()["deployables"]
        gpu = next(d for d in found if d["device_uuid"] == device and d["kind"] == units.KIND)
        shown: dict[str, Any] = self.api.get(
            f"/v2/deployables/{gpu['uuid']}", headers=LATEST
        ).json()
        return shown

    def slot(self, arq: dict[str, Any]) -> str:
        """The address of the slot handle a bound request holds."""
        with self.db.reader() as conn:
            return str(
                conn.execute(
                    select(HANDLES.c.address).where(HANDLES.c.uuid == arq["attach_handle_uuid"])
                ).scalar_one()
            )

    def slot_health(self, address: str, slot: str) -> str:
        """The health recorded for one slot handle of the GPU at ``address``."""
        self.host.report()
        with self.db.reader() as conn:
            return str(
                conn.execute(select(HANDLES.c.health).where(HANDLES.c.address == slot)).scalar_one()
            )

    def inject(self, address: str, health: dict[str, Any]) -> None:
        """The fake driver's health of the GPU at ``address`` (healthy when empty)."""
        state = self.state()
        state.setdefault(address, {})["health"] = health
        self.write_state(state)

    def write_state(self, state: dict[str, Any]) -> None:
        """The fake driver's state file, replaced at once: the agent's scans read it at
        any moment, and one that read it half written took the GPU for one without
        instances (its deployable missing from a listing, seen under load)."""
        json_file.replace(Path(self.host.conf.fake.state_file), {"version": 1, "devices": state})

    def arq(self, arq: str) -> dict[str, Any]:
        found: dict[str, Any] = self.api.get(
            f"/v2/accelerator_requests/{arq}", headers=LATEST
        ).json()
        return found

    def release(self, arq: str, address: str, left: list[tuple[str, int]]) -> None:
        """Nova deletes the request; the agent at work until the GPU holds ``left``."""
        gone = self.api.delete(f"/v2/accelerator_requests?arqs={arq}")
        assert gone.status_code == 204, gone.text
        self.host.run_tasks(
            lambda: self.held(address) == left and self.tasks("destroy_mig")[-1:] == ["done"]
        )
        self.host.report()


@contextlib.contextmanager
def _cloud(
    conf: cfg.ConfigOpts, db: Database, placement: adapter.Adapter, tmp_path: Path, gpus: str
) -> Iterator[Cloud]:
    conf.set_override("methods", {"GPU": "none"}, "cleaning")
    with reporting_api(conf, db, placement) as api, serve(api.app) as url:  # type: ignore[arg-type]
        (tmp_path / "host").mkdir()
        host = Host(url, tmp_path / "host", inventory=gpus)
        host.report()
        found = Cloud(api, placement, host, db)
        wait_for(
            lambda: (
                len(gpus := found.gpus()) == 2
                and all(found.placement.get_provider(rp) is not None for rp in gpus.values())
            )
        )
        for name in ("3g.40gb", "1g.10gb", "7g.80gb", "3g.71gb"):
            device_profiles.create(
                db, name=f"mig-{name.replace('.', '-')}", groups=[{units.PROFILE_KEY: name}]
            )
        yield found


@pytest.fixture
def cloud(
    conf: cfg.ConfigOpts, db: Database, placement: adapter.Adapter, tmp_path: Path
) -> Iterator[Cloud]:
    with _cloud(conf, db, placement, tmp_path, GPUS) as found:
        yield found


def test_a_gpu_carved_for_vms_binds_a_virtual_function_with_its_vgpu(
    conf: cfg.ConfigOpts, db: Database, placement: adapter.Adapter, tmp_path: Path
) -> None:
    """``mig_vgpu``: each slot is one of the GPU's virtual functions. Nova's bind makes
    the instance, then the MIG-backed vGPU type on the VF: the request's handle is that
    VF (a PCI function Nova attaches), naming the instance and the vGPU type. Its
    release frees the VF and destroys the instance."""
    with _cloud(conf, db, placement, tmp_path, GPUS + "    mig_vgpu: true\n") as cloud:
        arq = cloud.boot("mig-3g-40gb")
        assert arq["state"] == "Bound", arq
        info = arq["attach_handle_info"]
        assert arq["attach_handle_type"] == "TEST_PCI" and info["function"] != "0", info
        assert (info["mig_profile"], info["vgpu_type"]) == ("3g.40gb", "NVIDIA H100-3-40C")
        assert info["mig_uuid"].startswith("MIG-")
        address = next(a for a, rp in cloud.gpus().items() if rp == arq["device_rp_uuid"])
        assert cloud.held(address) == [("3g.40gb", int(info["gpu_instance_start"]))]
        cloud.release(arq["uuid"], address, [])


def test_a_partitionable_gpu_is_one_provider_of_mig_units(cloud: Cloud) -> None:
    for rp in cloud.gpus().values():
        assert cloud.inventory(rp) == {
            units.INSTANCE_CLASS: (7, 0),
            units.COMPUTE_CLASS: (7, 0),
            units.MEMORY_CLASS: (8, 0),
        }
        traits = cloud.placement.get_traits(rp)[1]
        assert {units.PARTITIONABLE, "CUSTOM_MIG_H100_80GB"} <= set(traits)


def test_a_3g_is_made_on_an_empty_gpu_and_destroyed_at_release(cloud: Cloud) -> None:
    arq = cloud.boot("mig-3g-40gb")
    assert arq["state"] == "Bound", arq
    info = arq["attach_handle_info"]
    assert (arq["attach_handle_type"], info["mig_profile"]) == ("MIG", "3g.40gb")
    assert info["gpu_instance_start"] in ("0", "4") and info["mig_uuid"].startswith("MIG-")
    address = next(a for a, rp in cloud.gpus().items() if rp == arq["device_rp_uuid"])
    other = next(a for a in cloud.gpus() if a != address)
    assert cloud.held(address) == [("3g.40gb", int(info["gpu_instance_start"]))]
    usages = cloud.placement.get_usages(arq["device_rp_uuid"])
    assert {rc: usages.get(rc) for rc in UNITS} == {
        units.INSTANCE_CLASS: 1,
        units.COMPUTE_CLASS: 3,
        units.MEMORY_CLASS: 4,
    }
    # Nova sends the same bind again: nothing more is made.
    again = cloud.api.patch("/v2/accelerator_requests", json=arq["body"])
    assert again.status_code == 202, again.text
    assert cloud.tasks("make_mig") == ["done"] and len(cloud.held(address)) == 1
    cloud.release(arq["uuid"], address, [])
    assert cloud.held(other) == []
    assert cloud.tasks("destroy_mig") == ["done"]
    gone = cloud.api.delete(f"/v2/accelerator_requests?arqs={arq['uuid']}")  # again: nothing
    assert gone.status_code in (204, 404) and cloud.tasks("destroy_mig") == ["done"]


def test_units_but_no_valid_position_fail_the_bind_never_overlap(cloud: Cloud) -> None:
    """Two 1g made outside Acceleron at slices 2 and 5 spoil both 3g positions of a GPU:
    its provider still offers 3 compute and 4 memory slices (their units reserved), a
    bind there fails with the planner's reason and makes nothing; Nova's next try, on
    the other GPU, is bound."""
    gpus = cloud.gpus()
    spoiled, other = sorted(gpus)
    cloud.spoil(spoiled, gpus[spoiled])
    assert cloud.inventory(gpus[spoiled]) == {
        units.INSTANCE_CLASS: (7, 2),
        units.COMPUTE_CLASS: (7, 2),
        units.MEMORY_CLASS: (8, 2),
    }
    failed = cloud.boot("mig-3g-40gb", on=gpus[spoiled])
    assert failed["state"] == "BindFailed"
    reason = failed["failure_reason"]
    assert reason.startswith("make_mig failed on ") and "No GPU can take a 3g.40gb" in reason
    assert "none where it may start ({0,4}:4); free memory slices" in reason, reason
    assert cloud.held(spoiled) == [("1g.10gb", 2), ("1g.10gb", 5)]  # nothing made
    bound = cloud.boot("mig-3g-40gb", on=gpus[other])
    assert bound["state"] == "Bound" and cloud.held(other) == [
        ("3g.40gb", int(bound["attach_handle_info"]["gpu_instance_start"]))
    ]


def test_release_destroys_only_its_own_instance(cloud: Cloud) -> None:
    first = cloud.boot("mig-1g-10gb")
    address = next(a for a, rp in cloud.gpus().items() if rp == first["device_rp_uuid"])
    second = cloud.boot("mig-1g-10gb", on=first["device_rp_uuid"])
    assert first["state"] == second["state"] == "Bound"
    starts = {int(a["attach_handle_info"]["gpu_instance_start"]) for a in (first, second)}
    assert len(starts) == 2  # never one slice twice
    kept = int(second["attach_handle_info"]["gpu_instance_start"])
    cloud.release(first["uuid"], address, [("1g.10gb", kept)])
    assert cloud.arq(second["uuid"])["state"] == "Bound"
    # The slice's memory was scrubbed before it went (a reset would be the whole GPU's).
    slot = first["attach_handle_info"]["mig_uuid"]
    cleaned = cloud.state().get(address, {}).get("cleaned", [])
    assert {"deployable": units.KEY, "handles": [slot], "method": "scrub"} in cleaned


def test_an_unhealthy_gpu_offers_no_units(cloud: Cloud) -> None:
    """The driver says a GPU is unhealthy: its units are all reserved, Nova's query
    offers only the other one."""
    gpus = cloud.gpus()
    sick, well = sorted(gpus)
    state = cloud.state()
    state.setdefault(sick, {})["health"] = {"state": "unhealthy", "reason": "XID 79"}
    cloud.write_state(state)
    cloud.host.report()
    wait_for(lambda: cloud.inventory(gpus[sick])[units.COMPUTE_CLASS] == (7, 7))
    assert cloud.inventory(gpus[sick]) == {
        units.INSTANCE_CLASS: (7, 7),
        units.COMPUTE_CLASS: (7, 7),
        units.MEMORY_CLASS: (8, 8),
    }
    assert cloud.inventory(gpus[well])[units.COMPUTE_CLASS] == (7, 0)
    bound = cloud.boot("mig-1g-10gb")
    assert bound["state"] == "Bound" and bound["device_rp_uuid"] == gpus[well]


def test_a_failed_instance_takes_out_its_own_slot_alone(cloud: Cloud) -> None:
    """A fault inside one GPU instance (the driver scopes it to the slot holding it) takes
    out that slot alone: the GPU shows degraded naming the slot, the request holding it
    stays bound; once released and destroyed, the slot's instance unit stays reserved
    while the fault lasts, the GPU's slices are offered, and the next bind there takes
    another slot. The fault gone, the slot is offered again."""
    arq = cloud.boot("mig-1g-10gb")
    rp = arq["device_rp_uuid"]
    neighbour = cloud.boot("mig-1g-10gb", on=rp)
    address = next(a for a, found in cloud.gpus().items() if found == rp)
    slot = cloud.slot(arq)
    cloud.inject(address, {"deployables": {units.KEY: {"handles": {slot: _XID}}}})
    wait_for(lambda: cloud.slot_health(address, slot) == "unhealthy")
    gpu = cloud.deployable(address)
    assert gpu["health"] == "degraded" and f"{slot}: XID 94" in gpu["health_reason"], gpu
    shown = cloud.arq(arq["uuid"])
    assert shown["state"] == "Bound"
    assert shown["health"] == {"state": "unhealthy", "reason": "XID 94"}
    assert cloud.arq(neighbour["uuid"])["health"] == {"state": "healthy", "reason": None}
    start = int(arq["attach_handle_info"]["gpu_instance_start"])
    cloud.release(neighbour["uuid"], address, [("1g.10gb", start)])
    wait_for(lambda: cloud.inventory(rp)[units.COMPUTE_CLASS] == (7, 0))  # its slice: allocated
    cloud.release(arq["uuid"], address, [])
    left = {units.INSTANCE_CLASS: (7, 1), units.COMPUTE_CLASS: (7, 0), units.MEMORY_CLASS: (8, 0)}
    wait_for(lambda: cloud.inventory(rp) == left)  # once the instance is destroyed
    again = cloud.boot("mig-1g-10gb", on=rp)
    assert again["state"] == "Bound" and cloud.slot(again) != slot
    cloud.inject(address, {})
    wait_for(lambda: cloud.slot_health(address, slot) == "healthy")
    wait_for(lambda: cloud.inventory(rp)[units.INSTANCE_CLASS] == (7, 0))
    assert cloud.deployable(address)["health"] == "healthy"


def test_a_report_for_an_older_api_folds_a_slots_fault_into_its_gpu() -> None:
    """An agent writing for an API of report format 1.2 (no health per handle) tells it
    the whole GPU is unhealthy, as that API knew such a fault."""
    slot = str(uuid.uuid4())
    scoped = Health(deployables={units.KEY: Health(handles={slot: Health("unhealthy", "XID")})})
    device = Device("0000:3b:00.0", "GPU", "10de", "NVIDIA", "2330", "H100", "fake")
    found = HostReport("h", "1", (dataclasses.replace(device, health=scoped),))
    (written,) = report.to_json(found, (1, 2))["devices"]
    assert written["health"]["deployables"] == {
        units.KEY: {"state": "unhealthy", "reason": "XID", "deployables": {}}
    }
    (newest,) = report.to_json(found)["devices"]
    assert newest["health"]["deployables"][units.KEY]["handles"][slot]["state"] == "unhealthy"


def test_a_profile_another_product_has_finds_no_gpu_here(cloud: Cloud) -> None:
    """An H200's 3g.71gb asks for the H200's trait, which no H100 carries: a claim
    finds nothing (Placement knows no such trait yet; Nova: no valid host)."""
    shown = cloud.api.get("/v2/device_profiles?name=mig-3g-71gb").json()["device_profiles"][0]
    group = shown["groups"][0]
    assert group["trait:CUSTOM_MIG_H200_141GB"] == group[f"trait:{units.PARTITIONABLE}"]
    assert group[f"resources:{units.MEMORY_CLASS}"] == "4"
    body = {"device_profile_name": "mig-3g-71gb", "consumer_uuid": str(uuid.uuid4())}
    refused = cloud.api.post("/v2/claims", json=body, headers={**LATEST, **member("p1")})
    assert refused.status_code == 409, refused.text
    assert "CUSTOM_MIG_H200_141GB" in refused.text
    assert all(cloud.held(a) == [] for a in cloud.gpus())


def test_an_unknown_profile_is_refused_naming_the_known_ones(cloud: Cloud) -> None:
    body = [{"name": "bad", "groups": [{units.PROFILE_KEY: "3g.41gb"}]}]
    response = cloud.api.post("/v2/device_profiles", json=body)
    assert response.status_code == 400, response.text
    assert "no GPU has a MIG profile '3g.41gb'" in response.text and "3g.40gb" in response.text
    clash = [
        {
            "name": "clash",
            "groups": [{units.PROFILE_KEY: "3g.40gb", f"resources:{units.COMPUTE_CLASS}": "2"}],
        }
    ]
    response = cloud.api.post("/v2/device_profiles", json=clash)
    assert response.status_code == 400 and "leave it out" in response.text
    group = {units.PROFILE_KEY: "1g.10gb", "resources:CUSTOM_ACCELERATOR_GPU": "1"}
    both = [{"name": "both", "groups": [group]}]
    response = cloud.api.post("/v2/device_profiles", json=both)
    assert response.status_code == 400, response.text
    assert "ask for them in groups of their own" in response.text


def test_a_claim_is_its_projects_alone(cloud: Cloud) -> None:
    consumer = str(uuid.uuid4())
    body = {"device_profile_name": "mig-1g-10gb", "consumer_uuid": consumer}
    made = cloud.api.post("/v2/claims", json=body, headers={**LATEST, **member("p1")})
    assert made.status_code in (200, 201, 202), made.text
    cloud.host.run_tasks(lambda: cloud.claim_state(consumer, "p1") == "bound")
    assert cloud.claim_state(consumer, "p2") is None
    ended = cloud.api.delete(f"/v2/claims/{consumer}", headers={**LATEST, **member("p2")})
    assert ended.status_code == 404
    assert sum(len(cloud.held(a)) for a in cloud.gpus()) == 1
    ended = cloud.api.delete(f"/v2/claims/{consumer}", headers={**LATEST, **member("p1")})
    assert ended.status_code == 204, ended.text
    cloud.host.run_tasks(lambda: sum(len(cloud.held(a)) for a in cloud.gpus()) == 0)


def test_a_claim_takes_a_gpu_with_a_position_or_is_refused_with_the_reason(
    cloud: Cloud,
) -> None:
    """One GPU spoiled for a 3g (1g at slices 2 and 5, outside Acceleron), the other
    empty: two 3g claims land on the empty one, though Placement offers the spoiled one
    as well; a third finds units only on the spoiled one, and is refused with the
    planner's reason. Nothing overlapping is ever made."""
    gpus = cloud.gpus()
    spoiled, other = sorted(gpus)
    cloud.spoil(spoiled, gpus[spoiled])
    headers = {**LATEST, **member("p1")}
    for consumer in (str(uuid.uuid4()), str(uuid.uuid4())):
        body = {"device_profile_name": "mig-3g-40gb", "consumer_uuid": consumer}
        made = cloud.api.post("/v2/claims", json=body, headers=headers)
        assert made.status_code in (200, 201, 202), made.text
        assert made.json()["allocations"] == {
            gpus[other]: {
                "resources": {
                    units.INSTANCE_CLASS: 1,
                    units.COMPUTE_CLASS: 3,
                    units.MEMORY_CLASS: 4,
                }
            }
        }
        cloud.host.run_tasks(
            functools.partial(lambda c: cloud.claim_state(c, "p1") == "bound", consumer)
        )
    assert cloud.held(other) == [("3g.40gb", 0), ("3g.40gb", 4)]
    body = {"device_profile_name": "mig-3g-40gb", "consumer_uuid": str(uuid.uuid4())}
    refused = cloud.api.post("/v2/claims", json=body, headers=headers)
    assert refused.status_code == 409, refused.text
    assert "none where it may start ({0,4}:4)" in refused.text
    assert cloud.held(spoiled) == [("1g.10gb", 2), ("1g.10gb", 5)]
