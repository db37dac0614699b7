"""A device given back is cleaned before its next tenant, reserved in Placement meanwhile.

The API on each database, the fake host's report published to the real Placement, the
host's agent played through its own calls (claim its tasks, report their end) so that
each step can be seen: what is reserved, what a bind does while it cleans, what a
failed cleaning leaves, and the device's history.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient
from keystoneauth1 import adapter
from oslo_config import cfg
from sqlalchemy import select, update

from acceleron import formats
from acceleron.db.models import AttachHandle, Deployable, Device, Host, Task, table, utcnow
from acceleron.db.session import Database
from acceleron.drivers import gbs
from acceleron.placement.client import PlacementClient
from acceleron.service import bind_tasks, device_profiles, inventory, tenancies
from acceleron.service.publish import Syncer
from tests.fixtures.fake_host import HOST, host_report, syncer
from tests.fixtures.placement import CountingAdapter
from tests.functional.placement.test_health import bind_body

LATEST = {"OpenStack-API-Version": "accelerator latest"}
AGENT = {**LATEST, formats.HEADER: formats.OURS.header()}
PATH = "/v2/accelerator_requests"
DEVICES, DEPLOYABLES, HANDLES = table(Device), table(Deployable), table(AttachHandle)
TASKS, HOSTS = table(Task), table(Host)
FPGA = {"resources:CUSTOM_ACCELERATOR_FPGA": "1", "trait:CUSTOM_PROGRAMMABLE": "required"}
QAT = {"resources:CUSTOM_ACCELERATOR_QAT": "1"}


@pytest.fixture
def synced(db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter) -> Syncer:
    inventory.reconcile(db, host_report(conf), task_format=formats.show(formats.TASK_VERSION))
    sync = syncer(db, counted)
    sync.sync_host(HOST)
    device_profiles.create(db, name="fpga", groups=[FPGA])
    device_profiles.create(db, name="qat", groups=[QAT])
    device_profiles.create(db, name="fpga-as-is", groups=[{**FPGA, "accel:cleaning": "none"}])
    return sync


def deployable(db: Database, key: str, device_type: str = "FPGA") -> Any:
    """The first card of ``device_type``'s deployable ``key``, as the database has it."""
    with db.reader() as conn:
        return conn.execute(
            select(DEPLOYABLES, DEVICES.c.uuid.label("device_uuid"))
            .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
            .where(DEVICES.c.type == device_type, DEPLOYABLES.c.key == key)
            .order_by(DEVICES.c.pci_address)
        ).first()


def states(db: Database, dep: Any) -> list[str | None]:
    with db.reader() as conn:
        rows = conn.execute(
            select(HANDLES.c.cleaning)
            .where(HANDLES.c.deployable_id == dep.id)
            .order_by(HANDLES.c.id)
        )
        return list(rows.scalars())


def reserved(placement: adapter.Adapter, dep: Any, rc: str) -> int:
    _, invs = PlacementClient(placement).get_inventories(dep.rp_uuid)
    return invs[rc].reserved


def bound(api: TestClient, profile: str, dep: Any) -> str:
    created = api.post(PATH, json={"device_profile_name": profile})
    assert created.status_code == 201, created.text
    arq: str = created.json()["arqs"][0]["uuid"]
    answer = api.patch(PATH, json=bind_body(arq, dep.rp_uuid, str(uuid.uuid4())))
    assert answer.status_code == 202, answer.text
    return arq


def give_back(api: TestClient, arq: str) -> None:
    assert api.delete(f"{PATH}/{arq}").status_code == 204


def agent_takes(api: TestClient) -> list[dict[str, Any]]:
    answer = api.post(f"/v2/hosts/{HOST}/tasks/claim", headers=AGENT)
    assert answer.status_code == 200, answer.text
    found: list[dict[str, Any]] = answer.json()["tasks"]
    return found


def agent_ends(api: TestClient, task: dict[str, Any], state: str, error: str = "") -> None:
    body = {"state": state, "progress": 100, **({"error": error} if error else {})}
    answer = api.put(f"/v2/tasks/{task['uuid']}", json=body, headers=AGENT)
    assert answer.status_code == 200, answer.text


def history(api: TestClient, dep: Any) -> list[dict[str, Any]]:
    answer = api.get(f"/v2/devices/{dep.device_uuid}/history", headers=LATEST)
    assert answer.status_code == 200, answer.text
    found: list[dict[str, Any]] = answer.json()["tenancies"]
    return found


def test_a_region_given_back_is_reserved_until_cleaned_and_a_bind_waits_for_it(
    api: TestClient, db: Database, placement: adapter.Adapter, synced: Syncer
) -> None:
    region = deployable(db, "region1")
    first = bound(api, "fpga", region)
    give_back(api, first)
    assert states(db, region) == ["cleaning"]
    synced.sync_pending()
    assert reserved(placement, region, "CUSTOM_ACCELERATOR_FPGA") == 1  # nothing lands there
    shown = api.get(f"/v2/deployables/{region.uuid}", headers=LATEST).json()
    assert shown["cleaning"] == 1 and shown["availability"] == "allocated"
    (tenancy,) = history(api, region)
    assert tenancy["arq_uuid"] == first and tenancy["cleaning"] == "pending"
    assert tenancy["cleaning_method"] == "scrub" and tenancy["project_id"] == "admin"

    waiting = bound(api, "fpga", region)  # scheduled before the reservation reached Placement
    shown = api.get(f"{PATH}/{waiting}", headers=LATEST).json()
    assert (shown["state"], shown["phase"]) == ("BindStarted", "cleaning")
    (task,) = agent_takes(api)
    assert task["kind"] == "clean" and task["params"]["method"] == "scrub"
    handles = api.get(f"/v2/deployables/{region.uuid}", headers=LATEST).json()["attach_handles"]
    assert task["params"]["handles"] == [h["address"] for h in handles]
    agent_ends(api, task, "done")
    assert api.get(f"{PATH}/{waiting}", headers=LATEST).json()["state"] == "Bound"
    assert states(db, region) == [None]
    synced.sync_pending()
    assert reserved(placement, region, "CUSTOM_ACCELERATOR_FPGA") == 0
    (tenancy,) = history(api, region)
    assert tenancy["cleaning"] == "done" and tenancy["cleaned_at"] is not None


def test_a_region_is_cleaned_once_its_last_request_gives_it_back(
    api: TestClient, db: Database, placement: adapter.Adapter, synced: Syncer
) -> None:
    region = deployable(db, "region0")  # two accelerators
    one, two = bound(api, "fpga", region), bound(api, "fpga", region)
    give_back(api, one)
    assert sorted(states(db, region), key=str) == [None, "waiting"]  # under a workload
    assert agent_takes(api) == []
    synced.sync_pending()
    assert reserved(placement, region, "CUSTOM_ACCELERATOR_FPGA") == 1
    give_back(api, two)
    assert states(db, region) == ["cleaning", "cleaning"]
    (task,) = agent_takes(api)
    assert len(task["params"]["handles"]) == 2
    synced.sync_pending()
    assert reserved(placement, region, "CUSTOM_ACCELERATOR_FPGA") == 2
    agent_ends(api, task, "done")
    assert states(db, region) == [None, None]
    assert [t["cleaning"] for t in history(api, region)] == ["done", "done"]


def test_a_vf_is_reset_by_itself(
    api: TestClient, db: Database, placement: adapter.Adapter, synced: Syncer
) -> None:
    pool = deployable(db, "vf_pool", "QAT")
    kept, given = bound(api, "qat", pool), bound(api, "qat", pool)
    give_back(api, given)
    (task,) = agent_takes(api)
    assert task["params"]["method"] == "reset" and len(task["params"]["handles"]) == 1
    synced.sync_pending()
    assert reserved(placement, pool, "CUSTOM_ACCELERATOR_QAT") == 1
    assert api.get(f"{PATH}/{kept}", headers=LATEST).json()["state"] == "Bound"


def test_a_failed_cleaning_puts_the_region_in_maintenance_until_cleaned_again(
    api: TestClient, db: Database, placement: adapter.Adapter, synced: Syncer
) -> None:
    region = deployable(db, "region1")
    give_back(api, bound(api, "fpga", region))
    waiting = bound(api, "fpga", region)
    (task,) = agent_takes(api)
    agent_ends(api, task, "failed", "port reset timed out")
    failed = api.get(f"{PATH}/{waiting}", headers=LATEST).json()
    assert failed["state"] == "BindFailed" and "port reset timed out" in failed["failure_reason"]
    shown = api.get(f"/v2/deployables/{region.uuid}", headers=LATEST).json()
    assert shown["status"] == "maintaining" and shown["cleaning"] == 1
    assert shown["maintenance_reason"] == "cleaning (scrub) failed: port reset timed out"
    assert states(db, region) == ["failed"]
    synced.sync_pending()
    assert reserved(placement, region, "CUSTOM_ACCELERATOR_FPGA") == 1  # nothing uncleaned
    later = api.post(PATH, json={"device_profile_name": "fpga"}).json()["arqs"][0]["uuid"]
    refused = api.patch(PATH, json=bind_body(later, region.rp_uuid, str(uuid.uuid4())))
    assert refused.status_code == 409 and "maintenance" in refused.text
    assert history(api, region)[0]["cleaning"] == "failed"

    out = api.post(
        f"/v2/deployables/{region.uuid}/maintenance", json={"maintenance": False}, headers=LATEST
    )
    assert out.status_code == 200, out.text
    assert states(db, region) == ["cleaning"]  # cleaned again before it serves
    (again,) = agent_takes(api)
    agent_ends(api, again, "done")
    assert states(db, region) == [None]
    assert history(api, region)[0]["cleaning"] == "done"


def test_what_needs_no_cleaning_is_handed_out_at_once(
    api: TestClient, db: Database, synced: Syncer
) -> None:
    region = deployable(db, "region1")
    give_back(api, bound(api, "fpga-as-is", region))  # the profile says none
    assert states(db, region) == [None] and agent_takes(api) == []
    (tenancy,) = history(api, region)
    assert tenancy["cleaning"] == "skipped" and tenancy["cleaning_method"] == "none"
    # An agent too old to clean (task format 1.1): skipped, and saying why.
    with db.writer() as conn:
        conn.execute(update(HOSTS).where(HOSTS.c.hostname == HOST).values(task_format="1.1"))
    give_back(api, bound(api, "fpga", region))
    assert states(db, region) == [None]
    assert "does not clean: upgrade it" in history(api, region)[0]["cleaning_error"]
    # One that has not reported to this release's API yet (a rolling upgrade, before its
    # next report): it may be too old; it was handed the task, failed it, and the region
    # went into maintenance.
    with db.writer() as conn:
        conn.execute(update(HOSTS).where(HOSTS.c.hostname == HOST).values(task_format=None))
    give_back(api, bound(api, "fpga", region))
    assert states(db, region) == [None] and agent_takes(api) == []
    assert "has not said which tasks it takes" in history(api, region)[0]["cleaning_error"]


def test_a_request_given_back_before_its_bind_reached_the_device_needs_none(
    api: TestClient, db: Database, synced: Syncer
) -> None:
    region = deployable(db, "region1")
    function = uuid.uuid4().hex
    meta = {"name": "f.gbs", "function_uuid": function, "region_type_uuid": region.region_type}
    created = api.post("/v2/bitstreams", json=meta, headers=LATEST).json()["uuid"]
    data = gbs.build(region.region_type, (function,), b"\0" * 1000)
    put = api.put(
        f"/v2/bitstreams/{created}/data",
        content=data,
        headers={**LATEST, "Content-Type": "application/octet-stream"},
    )
    assert put.status_code == 200, put.text
    device_profiles.create(db, name="f", groups=[{**FPGA, "accel:function_id": function}])
    arq = bound(api, "f", region)
    shown = api.get(f"{PATH}/{arq}", headers=LATEST).json()
    assert (shown["state"], shown["phase"]) == ("BindStarted", "queued")  # its program waits
    give_back(api, arq)
    assert states(db, region) == [None] and history(api, region) == []
    assert [t["kind"] for t in agent_takes(api)] == []  # the program cancelled, no clean


def test_a_cleaning_that_never_ends_fails_by_the_reaper(
    api: TestClient, db: Database, synced: Syncer
) -> None:
    region = deployable(db, "region1")
    give_back(api, bound(api, "fpga", region))
    bind_tasks.reap(db, 3600, cleaning_timeout=0.0)
    assert states(db, region) == ["failed"]
    shown = api.get(f"/v2/deployables/{region.uuid}", headers=LATEST).json()
    assert "did not finish within 0 s" in shown["maintenance_reason"]


def test_only_admins_read_a_devices_history_and_it_is_pruned(
    api: TestClient, db: Database, synced: Syncer
) -> None:
    region = deployable(db, "region1")
    give_back(api, bound(api, "fpga-as-is", region))
    member = {**LATEST, "X-Roles": "member,reader", "X-Project-Id": "p2"}
    refused = api.get(f"/v2/devices/{region.device_uuid}/history", headers=member)
    assert refused.status_code == 403
    assert len(history(api, region)) == 1
    assert tenancies.prune(db, 1) == 0  # released today: kept
    assert tenancies.prune(db, 1, now=utcnow() + dt.timedelta(days=2)) == 1
    assert history(api, region) == []
