"""A group asking for accelerator memory beside its accelerator (issue 26, section 1):
one request per accelerator, the memory in the group's Placement allocation only. Through
the HTTP API, against the real Placement in-process, on every database backend: requests,
a Nova-style bind, a server-side claim, quotas, and the per-group limit at profile create.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from keystoneauth1 import adapter
from oslo_config import cfg
from sqlalchemy import func, select

from acceleron.api.app import create_app
from acceleron.db.models import AcceleratorRequest, table
from acceleron.db.session import Database
from acceleron.drivers.fake import FakeDriver
from acceleron.placement.client import PlacementClient
from acceleron.report import HostReport
from acceleron.service import inventory
from acceleron.service.placement import PlacementService, options_from_conf
from acceleron.service.publish import Syncer
from tests.fixtures.placement import placement, placement_app

__all__ = ["placement", "placement_app"]
HOST = "host-1"
MIG, HBM = "CUSTOM_ACCELERATOR_MIG", "CUSTOM_ACCELERATOR_MEMORY_HBM"
MIG_AND_MEMORY = {f"resources:{MIG}": "1", f"resources:{HBM}": "100"}
LATEST = {"OpenStack-API-Version": "accelerator latest"}
ARQS = table(AcceleratorRequest)


@pytest.fixture
def api(db: Database, conf: cfg.ConfigOpts, placement: adapter.Adapter) -> Iterator[TestClient]:
    """host-1's fake inventory (an H100 in MIG mode with HBM among it) published to the
    real Placement; a project may hold 1 MIG slice; profile ``mig-hbm`` asks for one slice
    and 100 MB of HBM."""
    conf.set_override("host", HOST)
    inventory.reconcile(db, HostReport(HOST, "1", tuple(FakeDriver(conf, Path("/")).discover())))
    Syncer(
        db, lambda: PlacementClient(placement), options_from_conf(conf), create_compute_nodes=True
    ).sync_host(HOST)
    conf.set_override("limits", [f"class:{MIG}=1"], group="quota")
    app = create_app(conf, db)
    app.state.placement = PlacementService(conf, db, lambda: PlacementClient(placement))
    with TestClient(app, raise_server_exceptions=False) as client:
        made = client.post(
            "/v2/device_profiles", json=[{"name": "mig-hbm", "groups": [MIG_AND_MEMORY]}]
        )
        assert made.status_code == 201, made.text
        yield client


def _rows(db: Database) -> int:
    with db.reader() as conn:
        return int(conn.execute(select(func.count()).select_from(ARQS)).scalar_one())


def _held(placement: adapter.Adapter, consumer: str) -> dict[str, dict[str, int]]:
    found = PlacementClient(placement).get_consumer(consumer).allocations
    return {rp: dict(resources) for rp, resources in found.items()}


def test_memory_beside_an_accelerator_makes_one_request(api: TestClient, db: Database) -> None:
    made = api.post("/v2/accelerator_requests", json={"device_profile_name": "mig-hbm"})
    assert made.status_code == 201, made.text
    assert [a["device_profile_group_id"] for a in made.json()["arqs"]] == [0]
    assert _rows(db) == 1


def test_a_nova_bind_binds_one_slice(
    api: TestClient, db: Database, placement: adapter.Adapter
) -> None:
    """What Nova does: Placement allocates the group (slice and memory on one provider),
    the requests are created and bound to that provider."""
    from acceleron.scheduler.query import profile_query

    client = PlacementClient(placement)
    candidates = client.get_allocation_candidates(profile_query([MIG_AND_MEMORY]).params())
    best = candidates.requests[0]
    (rp,) = best.mappings["device_profile_0"]
    assert best.allocations[rp] == {MIG: 1, HBM: 100}
    instance = str(uuid.uuid4())
    client.put_allocations(instance, best.allocations, project_id="admin", user_id="u")
    arqs = api.post("/v2/accelerator_requests", json={"device_profile_name": "mig-hbm"})
    assert arqs.status_code == 201, arqs.text
    ops = {
        a["uuid"]: [
            {"op": "add", "path": "/hostname", "value": HOST},
            {"op": "add", "path": "/device_rp_uuid", "value": rp},
            {"op": "add", "path": "/instance_uuid", "value": instance},
        ]
        for a in arqs.json()["arqs"]
    }
    assert len(ops) == 1
    bound = api.patch("/v2/accelerator_requests", json=ops)
    assert bound.status_code == 202, bound.text
    shown = api.get("/v2/accelerator_requests", params={"instance": instance}, headers=LATEST)
    (arq,) = shown.json()["arqs"]
    assert arq["state"] == "Bound" and arq["attach_handle_type"] == "MIG", arq


def test_a_claim_binds_one_slice_and_allocates_the_memory(
    api: TestClient, db: Database, placement: adapter.Adapter
) -> None:
    consumer = str(uuid.uuid4())
    body = {"device_profile_name": "mig-hbm", "consumer_uuid": consumer}
    made = api.post("/v2/claims", json=body, headers=LATEST)
    assert made.status_code == 201, made.text
    claim: dict[str, Any] = made.json()
    assert claim["state"] == "bound", claim
    (arq,) = claim["accelerator_requests"]
    assert arq["state"] == "Bound" and arq["attach_handle_type"] == "MIG"
    rp = arq["device_rp_uuid"]
    assert _held(placement, consumer) == {rp: {MIG: 1, HBM: 100}}
    assert claim["allocations"] == {rp: {"resources": {MIG: 1, HBM: 100}}}
    assert _rows(db) == 1
    # The quota counts the one slice, and memory is no quota resource.
    quotas = api.get("/v2/quotas/admin", headers=LATEST).json()["quota_set"]["quotas"]
    assert [(q["resource_class"], q["limit"], q["usage"]) for q in quotas] == [(MIG, 1, 1)]
    assert api.delete(f"/v2/claims/{consumer}", headers=LATEST).status_code == 204
    assert _held(placement, consumer) == {} and _rows(db) == 0


def test_a_group_over_the_limit_is_refused_at_create(api: TestClient, db: Database) -> None:
    def create(name: str, group: dict[str, str]) -> Any:
        return api.post("/v2/device_profiles", json=[{"name": name, "groups": [group]}])

    refused = create("many", {f"resources:{MIG}": "17", f"resources:{HBM}": "100"})
    assert refused.status_code == 400, refused.text
    assert "16" in refused.text and "max_accelerators_per_group" in refused.text
    # Memory is not counted: 16 slices with much memory are within the limit.
    within = create("sixteen", {f"resources:{MIG}": "16", f"resources:{HBM}": "1000000"})
    assert within.status_code == 201, within.text
    # A group asking for memory alone asks for no accelerator.
    alone = create("memory", {f"resources:{HBM}": "100"})
    assert alone.status_code == 400 and "no accelerator" in alone.text, alone.text
    assert _rows(db) == 0
