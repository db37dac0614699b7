"""Accelerator requests through HTTP (Nova's calls, byte for byte), on every backend."""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from oslo_config import cfg
from sqlalchemy import select, update
from tests.fixtures.arqs import ADMIN, HOST, PATH, bind_body

from acceleron.api.app import create_app
from acceleron.db.models import AcceleratorRequest, AttachHandle, Deployable, Task, table
from acceleron.db.session import Database
from acceleron.drivers.fake import FakeDriver, built_in_functions
from acceleron.exceptions import Conflict
from acceleron.report import HostReport
from acceleron.service import arqs as service
from acceleron.service import bind_tasks, binding, device_profiles, inventory

V2_8 = {"OpenStack-API-Version": "accelerator 2.8"}
FPGA = [{"resources:CUSTOM_ACCELERATOR_FPGA": "1", "trait:CUSTOM_PROGRAMMABLE": "required"}]
# The same, handed back as it is (no cleaning between tenants: tests/functional/placement/
# test_cleaning.py has what a cleaning does), for tests that bind a region again at once.
FPGA_AS_IS = [{**FPGA[0], "accel:cleaning": "none"}]
DEPLOYABLES, HANDLES, ARQS = table(Deployable), table(AttachHandle), table(AcceleratorRequest)


def profile(db: Database, name: str, groups: Any) -> None:
    device_profiles.create(db, name=name, groups=groups)


def create(api: TestClient, name: str) -> list[dict[str, Any]]:
    response = api.post(PATH, json={"device_profile_name": name})
    assert response.status_code == 201, response.text
    arqs: list[dict[str, Any]] = response.json()["arqs"]
    return arqs


def test_nova_boot_and_delete(
    api: TestClient, db: Database, inventory_of_host: dict[str, Any]
) -> None:
    """The requests of docs/design/nova-contract.md, in order, for one boot and delete."""
    profile(db, "dp1", [*FPGA, {"resources:CUSTOM_ACCELERATOR_QAT": "2"}])
    assert (
        len(api.get("/v2/device_profiles", params={"name": "dp1"}).json()["device_profiles"]) == 1
    )
    arqs = create(api, "dp1")
    assert [(a["device_profile_group_id"], a["state"]) for a in arqs] == [
        (0, "Initial"),
        (1, "Initial"),
        (1, "Initial"),
    ]
    instance = str(uuid.uuid4())
    region, pool = inventory_of_host["regions"][0], inventory_of_host["pool"][0]
    mapping = {0: region.rp_uuid, 1: pool.rp_uuid}
    body: dict[str, Any] = {}
    for arq in arqs:
        body.update(bind_body(arq["uuid"], mapping[arq["device_profile_group_id"]], instance))
    assert api.patch(PATH, json=body).status_code == 202
    bound = api.get(PATH, params={"instance": instance, "bind_state": "resolved"}).json()["arqs"]
    assert {a["state"] for a in bound} == {"Bound"}
    first = api.get(f"{PATH}/{arqs[0]['uuid']}").json()
    assert first["attach_handle_type"] == "TEST_PCI"
    assert set(first["attach_handle_info"]) >= {"domain", "bus", "device", "function"}
    assert (first["hostname"], first["device_rp_uuid"], first["instance_uuid"]) == (
        HOST,
        region.rp_uuid,
        instance,
    )
    addresses = [a["attach_handle_uuid"] for a in bound]
    assert len(set(addresses)) == 3
    assert api.delete(PATH, params={"instance": instance}).status_code == 204
    assert api.delete(PATH, params={"instance": instance}).status_code == 204  # idempotent
    assert api.get(PATH, params={"instance": instance}).json() == {"arqs": []}
    with db.reader() as conn:
        assert conn.execute(select(HANDLES).where(HANDLES.c.in_use.is_(True))).first() is None


def test_an_instance_is_bound_once_and_a_retry_is_fine(
    api: TestClient, db: Database, inventory_of_host: dict[str, Any]
) -> None:
    profile(db, "dp", FPGA)
    first, second = create(api, "dp")[0]["uuid"], create(api, "dp")[0]["uuid"]
    region = inventory_of_host["regions"][0]
    instance = str(uuid.uuid4())
    body = bind_body(first, region.rp_uuid, instance)
    assert api.patch(PATH, json=body).status_code == 202
    assert api.patch(PATH, json=body).status_code == 202  # Nova retrying the same bind
    response = api.patch(PATH, json=bind_body(second, region.rp_uuid, instance))
    assert response.status_code == 409 and "already has bound" in response.text
    # Unbind (remove ops), then the other ARQ may be bound to it.
    remove = {first: [{"path": "/hostname", "op": "remove"}]}
    assert api.patch(PATH, json=remove).status_code == 202
    unbound = api.get(f"{PATH}/{first}").json()
    assert (unbound["state"], unbound["instance_uuid"], unbound["attach_handle_uuid"]) == (
        "Unbound",
        None,
        None,
    )
    assert api.patch(PATH, json=bind_body(second, region.rp_uuid, instance)).status_code == 202


def test_one_request_binds_and_unbinds_on_its_own_path(
    api: TestClient, db: Database, inventory_of_host: dict[str, Any]
) -> None:
    """PATCH /v2/accelerator_requests/{uuid}: the SDK's body ({uuid: ops}) or bare ops."""
    profile(db, "dp", FPGA_AS_IS)
    arq = create(api, "dp")[0]["uuid"]
    other = create(api, "dp")[0]["uuid"]
    region = inventory_of_host["regions"][0]
    instance = str(uuid.uuid4())
    body = bind_body(arq, region.rp_uuid, instance)
    assert api.patch(f"{PATH}/{arq.upper()}", json=body).status_code == 202
    bound = api.get(f"{PATH}/{arq}").json()
    assert (bound["state"], bound["instance_uuid"]) == ("Bound", instance)
    remove = [{"path": "/hostname", "op": "remove"}, {"path": "/instance_uuid", "op": "remove"}]
    assert api.patch(f"{PATH}/{arq}", json=remove).status_code == 202
    assert api.get(f"{PATH}/{arq}").json()["state"] == "Unbound"
    assert api.patch(f"{PATH}/{arq}", json=body[arq]).status_code == 202
    assert api.get(f"{PATH}/{arq}").json()["state"] == "Bound"
    # The body may not reach another request than the path's.
    for wrong in (bind_body(other, region.rp_uuid, instance), {**body, other: remove}):
        response = api.patch(f"{PATH}/{arq}", json=wrong)
        assert response.status_code == 400
        assert f"only accelerator request {arq}" in response.json()["errors"][0]["detail"]
    missing = str(uuid.uuid4())
    assert api.patch(f"{PATH}/{missing}", json=remove).status_code == 404
    assert api.patch(f"{PATH}/nope", json=remove).status_code == 400
    assert api.patch(f"{PATH}/{arq}", json={arq: []}).status_code == 400
    assert api.get(f"{PATH}/{other}").json()["state"] == "Initial"


def test_no_handle_is_handed_out_twice_under_concurrent_binds(
    db: Database, inventory_of_host: dict[str, Any]
) -> None:
    """50 binds race for the 4 free VF handles of the QAT pool: exactly 4 win."""
    profile(db, "qat", [{"resources:CUSTOM_ACCELERATOR_QAT": "1"}])
    pool = inventory_of_host["pool"][0]
    arqs = [service.create(db, ADMIN, "qat")[0].uuid for _ in range(50)]
    outcomes: list[str] = []
    barrier = threading.Barrier(10)

    def bind(chunk: list[str]) -> None:
        barrier.wait()
        for arq in chunk:
            request = service.Binding(arq, HOST, pool.rp_uuid, str(uuid.uuid4()))
            outcomes.extend(r.status for r in binding.bind(db, ADMIN, [request]))

    threads = [threading.Thread(target=bind, args=(arqs[i::10],)) for i in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["completed"] * 4 + ["failed"] * 46
    with db.reader() as conn:
        held = list(conn.execute(select(HANDLES.c.arq_id).where(HANDLES.c.arq_id.is_not(None))))
        states = [s for (s,) in conn.execute(select(ARQS.c.state))]
    assert len(held) == 4 and len({h.arq_id for h in held}) == 4
    assert states.count("Bound") == 4 and states.count("BindFailed") == 46


def test_racing_binds_of_one_instance_let_one_win(
    db: Database, inventory_of_host: dict[str, Any]
) -> None:
    profile(db, "qat", [{"resources:CUSTOM_ACCELERATOR_QAT": "1"}])
    pool = inventory_of_host["pool"][0]
    instance = str(uuid.uuid4())
    arqs = [service.create(db, ADMIN, "qat")[0].uuid for _ in range(8)]
    won, lost = [], []
    barrier = threading.Barrier(8)

    def bind(arq: str) -> None:
        barrier.wait()
        try:
            binding.bind(db, ADMIN, [service.Binding(arq, HOST, pool.rp_uuid, instance)])
            won.append(arq)
        except Conflict:
            lost.append(arq)

    threads = [threading.Thread(target=bind, args=(a,)) for a in arqs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1 and len(lost) == 7
    with db.reader() as conn:
        bound = list(conn.execute(select(ARQS.c.uuid).where(ARQS.c.instance_uuid == instance)))
    assert [b.uuid for b in bound] == won


def test_a_vgpu_bind_waits_for_its_mdev_then_binds(
    api: TestClient, db: Database, inventory_of_host: dict[str, Any]
) -> None:
    profile(db, "vgpu", [{"resources:CUSTOM_ACCELERATOR_VGPU": "1"}])
    arq = create(api, "vgpu")[0]["uuid"]
    instance = str(uuid.uuid4())
    vgpu = inventory_of_host["vgpu"][0]
    assert api.patch(PATH, json=bind_body(arq, vgpu.rp_uuid, instance)).status_code == 202
    locked = api.get(PATH, params={"instance": instance, "bind_state": "resolved"})
    assert locked.status_code == 423
    assert api.get(f"{PATH}/{arq}", headers=V2_8).json()["phase"] == "queued"
    claimed = api.post(f"/v2/hosts/{HOST}/tasks/claim", headers=V2_8).json()["tasks"]
    assert [(t["kind"], t["state"]) for t in claimed] == [("create_mdev", "running")]
    mdev = claimed[0]["params"]["mdev_uuid"]
    assert api.get(f"{PATH}/{arq}").json()["attach_handle_uuid"] is None  # not Bound yet
    done = api.put(f"/v2/tasks/{claimed[0]['uuid']}", json={"state": "done"}, headers=V2_8)
    assert done.status_code == 200 and done.json()["state"] == "done"
    bound = api.get(PATH, params={"instance": instance, "bind_state": "resolved"}).json()["arqs"]
    assert bound[0]["state"] == "Bound" and bound[0]["attach_handle_type"] == "MDEV"
    assert bound[0]["attach_handle_info"]["asked_type"] == "nvidia-222"
    assert bound[0]["attach_handle_uuid"] == mdev  # Nova's libvirt driver attaches it by this
    with db.reader() as conn:
        address = conn.execute(select(HANDLES.c.address).where(HANDLES.c.arq_id.is_not(None)))
        assert address.scalar() == mdev
    # Unbinding asks the agent to remove the mdev.
    assert api.delete(PATH, params={"arqs": arq}).status_code == 204
    claimed = api.post(f"/v2/hosts/{HOST}/tasks/claim", headers=V2_8).json()["tasks"]
    assert [(t["kind"], t["params"]["mdev_uuid"]) for t in claimed] == [("remove_mdev", mdev)]


def test_a_failed_task_fails_the_bind_and_frees_the_handle(
    api: TestClient, db: Database, inventory_of_host: dict[str, Any]
) -> None:
    profile(db, "vgpu", [{"resources:CUSTOM_ACCELERATOR_VGPU": "1"}])
    arq = create(api, "vgpu")[0]["uuid"]
    api.patch(PATH, json=bind_body(arq, inventory_of_host["vgpu"][0].rp_uuid, str(uuid.uuid4())))
    [task] = api.post(f"/v2/hosts/{HOST}/tasks/claim", headers=V2_8).json()["tasks"]
    report = {"state": "failed", "error": "write to create: Permission denied"}
    assert api.put(f"/v2/tasks/{task['uuid']}", json=report, headers=V2_8).status_code == 200
    failed = api.get(f"{PATH}/{arq}", headers=V2_8).json()
    assert failed["state"] == "BindFailed"
    assert (
        "create_mdev failed on host-1: write to create: Permission denied"
        in (failed["failure_reason"])
    )
    with db.reader() as conn:
        assert conn.execute(select(HANDLES).where(HANDLES.c.arq_id.is_not(None))).first() is None
    again = api.put(f"/v2/tasks/{task['uuid']}", json={"state": "done"}, headers=V2_8)
    assert again.status_code == 409  # a finished task stays finished


def test_the_reaper_fails_binds_that_never_end(
    api: TestClient, db: Database, inventory_of_host: dict[str, Any]
) -> None:
    profile(db, "vgpu", [{"resources:CUSTOM_ACCELERATOR_VGPU": "1"}])
    arq = create(api, "vgpu")[0]["uuid"]
    instance = str(uuid.uuid4())
    api.patch(PATH, json=bind_body(arq, inventory_of_host["vgpu"][0].rp_uuid, instance))
    assert bind_tasks.reap(db, 300) == []  # not yet
    later = dt.datetime.now(dt.UTC).replace(tzinfo=None) + dt.timedelta(seconds=301)
    assert bind_tasks.reap(db, 300, now=later) == [service.Resolved(instance, arq, "failed")]
    failed = api.get(f"{PATH}/{arq}", headers=V2_8).json()
    assert (
        failed["state"] == "BindFailed"
        and "did not finish within 300 s" in (failed["failure_reason"])
    )
    with db.reader() as conn:
        assert {t.state for t in conn.execute(select(table(Task)))} == {"cancelled"}


def test_a_region_holding_the_function_is_not_reprogrammed(
    conf: cfg.ConfigOpts, db: Database, inventory_of_host: dict[str, Any]
) -> None:
    """Its operator vouches for the function it was found holding (a pre-programmed one):
    nothing to program. Without that, see tests/functional/test_provenance.py."""
    conf.set_override("trusted_functions", built_in_functions(), "bitstreams")
    function = "d8424dc4-a4a3-c413-f89e-433683f9040b"  # what region0 of each card holds
    profile(db, "gzip", [{"resources:CUSTOM_ACCELERATOR_FPGA": "1", "accel:function_id": function}])
    region = next(r for r in inventory_of_host["regions"] if r.function_uuid)
    with TestClient(create_app(conf, db), raise_server_exceptions=False) as api:
        arq = create(api, "gzip")[0]["uuid"]
        bound = api.patch(PATH, json=bind_body(arq, region.rp_uuid, str(uuid.uuid4())))
        assert bound.status_code == 202, bound.text
        assert api.get(f"{PATH}/{arq}").json()["state"] == "Bound"
    with db.reader() as conn:
        assert conn.execute(select(table(Task))).first() is None


def test_the_state_machine() -> None:
    assert service.can_move("Initial", "BindStarted")
    assert service.can_move("BindStarted", "Bound")
    assert not service.can_move("Initial", "Bound")
    assert not service.can_move("Bound", "BindStarted")
    assert service.can_move("Bound", "Unbound") and service.can_move("Unbound", "BindStarted")
    assert all(service.can_move(s, "Deleting") for s in service.STATES)


def test_deployable_availability_follows_its_handles(
    api: TestClient, db: Database, inventory_of_host: dict[str, Any]
) -> None:
    profile(db, "dp", FPGA_AS_IS)
    region = next(r for r in inventory_of_host["regions"] if r.num_accelerators == 1)
    arq = create(api, "dp")[0]["uuid"]
    instance = str(uuid.uuid4())
    api.patch(PATH, json=bind_body(arq, region.rp_uuid, instance))
    with db.reader() as conn:
        row = conn.execute(select(DEPLOYABLES).where(DEPLOYABLES.c.id == region.id)).one()
    assert (row.availability, row.instance_uuid) == ("allocated", instance)
    api.delete(f"{PATH}/{arq}")
    with db.reader() as conn:
        row = conn.execute(select(DEPLOYABLES).where(DEPLOYABLES.c.id == region.id)).one()
    assert (row.availability, row.instance_uuid) == ("available", None)
    with db.writer() as conn:
        conn.execute(update(DEPLOYABLES).values(availability="available"))


def test_a_device_lost_while_bound_goes_once_its_request_is_deleted(
    api: TestClient, db: Database, conf: cfg.ConfigOpts, inventory_of_host: dict[str, Any]
) -> None:
    profile(db, "qat", [{"resources:CUSTOM_ACCELERATOR_QAT": "1"}])
    arq = create(api, "qat")[0]["uuid"]
    pool = inventory_of_host["pool"][0]
    assert api.patch(PATH, json=bind_body(arq, pool.rp_uuid, str(uuid.uuid4()))).status_code == 202
    devices = FakeDriver(conf, Path("/")).discover()
    without_qat = HostReport(HOST, "1", tuple(d for d in devices if d.type != "QAT"))
    inventory.reconcile(db, without_qat)
    qat = api.get("/v2/devices", params={"type": "QAT"}).json()["devices"]
    assert len(qat) == 1  # kept, lost, while its VF is held
    assert api.get(f"{PATH}/{arq}").json()["state"] == "Bound"
    assert api.delete(PATH, params={"arqs": arq}).status_code == 204
    inventory.reconcile(db, without_qat)  # the very same report: now it goes
    assert api.get("/v2/devices", params={"type": "QAT"}).json()["devices"] == []


def test_a_bind_in_progress_survives_an_api_restart(
    conf: cfg.ConfigOpts, db: Database, inventory_of_host: dict[str, Any]
) -> None:
    profile(db, "vgpu", [{"resources:CUSTOM_ACCELERATOR_VGPU": "1"}])
    vgpu = inventory_of_host["vgpu"][0]
    with TestClient(create_app(conf, db)) as first:
        arq = create(first, "vgpu")[0]["uuid"]
        first.patch(PATH, json=bind_body(arq, vgpu.rp_uuid, str(uuid.uuid4())))
        (task,) = first.post(f"/v2/hosts/{HOST}/tasks/claim", headers=V2_8).json()["tasks"]
    # That API process is gone; another one, on the same database, hears the agent.
    with TestClient(create_app(conf, db)) as second:
        assert second.get(f"{PATH}/{arq}").json()["state"] == "BindStarted"
        done = second.put(f"/v2/tasks/{task['uuid']}", json={"state": "done"}, headers=V2_8)
        assert done.status_code == 200
        assert second.get(f"{PATH}/{arq}").json()["state"] == "Bound"
