"""The reconciler against the reference cloud's own Placement (Keystone, a provider list
with Nova's compute nodes in it): an allocation of Acceleron's resources that no
request holds is found, and once it is dropped (which bumps no provider generation) a
later pass no longer reports it."""

from __future__ import annotations

import uuid
from typing import Any

from tests.fixtures.e2e import LATEST, allocations

HOST = "compute-1"
PLACEMENT = {"OpenStack-API-Version": "placement 1.28"}


def reconcile(admin: Any) -> dict[str, dict[str, Any]]:
    """A dry-run pass: the leaks found, by consumer."""
    response = admin.accelerator.post(
        "/placement/reconcile", json={"dry_run": True}, headers=LATEST
    )
    assert response.status_code == 200, response.text
    return {leak["consumer"]: leak for leak in response.json()["leaks"]}


def test_a_leak_is_found_then_forgotten_once_dropped(admin: Any) -> None:
    listed = admin.accelerator.get(
        "/deployables", headers=LATEST, params={"hostname": HOST, "kind": "vf_pool"}
    )
    pool = listed.json()["deployables"][0]["rp_uuid"]
    leaked = str(uuid.uuid4())
    body = {"allocations": {pool: {"resources": {"CUSTOM_ACCELERATOR_QAT": 1}}},
            "consumer_generation": None, "project_id": admin.current_project_id,
            "user_id": admin.current_user_id}  # fmt: skip
    reconcile(admin)  # the providers as they are: the next pass reads only what moved
    made = admin.placement.put(f"/allocations/{leaked}", json=body, headers=PLACEMENT)
    assert made.status_code == 204, made.text
    try:
        leak = reconcile(admin)[leaked]
        assert (leak["kind"], leak["allocations"]) == (
            "allocation",
            {pool: {"CUSTOM_ACCELERATOR_QAT": 1}},
        )
        assert leak["action"] in ("waiting", "would free")
    finally:
        dropped = admin.placement.delete(f"/allocations/{leaked}", headers=PLACEMENT)
    assert dropped.status_code == 204, dropped.text
    assert allocations(admin, leaked) == {}
    assert leaked not in reconcile(admin)
