"""Spec 001's flat fallback through Nova (``python -m cloud up --flat``): Acceleron
publishes every class and trait on the compute node providers, Nova's scheduler
allocates against the compute node, Nova binds with the compute node's provider as
``device_rp_uuid`` and Acceleron picks the device; deleting the server frees the handle
and the allocation. Then the upgrade to nested providers, as an operator does it:
``[placement] nested = true``, the API restarted, ``migrate-to-nested`` refused for a
host while a server uses its accelerators and done once it is gone. The test leaves the
cloud nested (``cloud.json`` says so), so it runs once per flat cloud."""

from __future__ import annotations

import time
from typing import Any

import pytest
from cloud.base import Cloud
from cloud.launcher import to_nested
from tests.fixtures.e2e import (
    COMPUTES,
    GZIP,
    HOLDER,
    LATEST,
    Flavors,
    active,
    allocations,
    arqs,
    boot,
    check_gone,
    delete_and_wait,
    handles_in_use,
    region,
    trait,
)

pytestmark = pytest.mark.flat

PLACEMENT = {"OpenStack-API-Version": "placement 1.14"}
QAT = {"resources:CUSTOM_ACCELERATOR_QAT": "1"}
FPGA_GZIP = {
    "resources:CUSTOM_ACCELERATOR_FPGA": "1",
    f"trait:{trait('FUNCTION', GZIP)}": "required",
}


def compute_nodes(admin: Any) -> dict[str, str]:
    """Compute host -> its compute node provider's uuid."""
    found = {}
    for host in COMPUTES:
        response = admin.placement.get(
            "/resource_providers", params={"name": host}, headers=PLACEMENT
        )
        (rp,) = response.json()["resource_providers"]
        found[host] = rp["uuid"]
    return found


def inventory(admin: Any, rp: str) -> dict[str, int]:
    response = admin.placement.get(f"/resource_providers/{rp}/inventories", headers=PLACEMENT)
    return {rc: inv["total"] for rc, inv in response.json()["inventories"].items()}


def traits(admin: Any, rp: str) -> set[str]:
    response = admin.placement.get(f"/resource_providers/{rp}/traits", headers=PLACEMENT)
    return set(response.json()["traits"])


def tree(admin: Any, rp: str) -> list[dict[str, Any]]:
    """The providers under the compute node ``rp`` (not itself)."""
    response = admin.placement.get("/resource_providers", params={"in_tree": rp}, headers=PLACEMENT)
    return [p for p in response.json()["resource_providers"] if p["uuid"] != rp]


def accelerator_classes(admin: Any, rp: str) -> set[str]:
    return {rc for rc in inventory(admin, rp) if rc.startswith("CUSTOM_ACCELERATOR_")}


def migrate(admin: Any) -> dict[str, dict[str, Any]]:
    response = admin.accelerator.post("/placement/migrate-to-nested", json={}, headers=LATEST)
    assert response.status_code == 200, response.text
    return {h["hostname"]: h for h in response.json()["hosts"]}


def test_boot_bind_delete_then_migrate_to_nested(
    cloud: Cloud, admin: Any, member: Any, flavors: Flavors, image: str
) -> None:
    nodes = compute_nodes(admin)
    deadline = time.monotonic() + 60  # the agents' first reports, then a sync
    while not all(
        {"CUSTOM_ACCELERATOR_FPGA", "CUSTOM_ACCELERATOR_QAT"} <= accelerator_classes(admin, rp)
        for rp in nodes.values()
    ):
        assert time.monotonic() < deadline, {h: inventory(admin, rp) for h, rp in nodes.items()}
        time.sleep(1)
    for host, rp in nodes.items():
        assert tree(admin, rp) == [], f"{host}: flat mode publishes no provider under it"
        assert (trait("FUNCTION", GZIP) in traits(admin, rp)) == (host == HOLDER[GZIP])

    # Two servers: gzip (only compute-1's region0 holds it) and a QAT VF.
    wanted = {
        "CUSTOM_ACCELERATOR_FPGA": flavors.make([FPGA_GZIP]),
        "CUSTOM_ACCELERATOR_QAT": flavors.make([QAT]),
    }
    booted = {rc: boot(flavor, image)["id"] for rc, flavor in wanted.items()}
    servers = {rc: active(admin, server_id) for rc, server_id in booted.items()}
    for rc, server in servers.items():
        host = server.compute_host
        (arq,) = arqs(admin, server.id)
        assert arq["state"] == "Bound" and arq["hostname"] == host, arq
        assert arq["device_rp_uuid"] == nodes[host], (arq, nodes)  # Nova's bind: the node
        assert arq["attach_handle_uuid"] and arq["attach_handle_type"], arq
        held = allocations(admin, server.id)
        assert list(held) == [nodes[host]], held  # Nova's scheduler: the node alone
        assert held[nodes[host]][rc] == 1, held
    gzip = servers["CUSTOM_ACCELERATOR_FPGA"]
    assert gzip.compute_host == HOLDER[GZIP]
    chosen = region(admin, HOLDER[GZIP], "region0")  # Acceleron's pick: the one holding it
    assert sum(h["in_use"] for h in chosen["attach_handles"]) == 1
    assert chosen["function_uuids"] == [GZIP]  # nothing was programmed
    empty = region(admin, HOLDER[GZIP], "region1")
    assert not any(h["in_use"] for h in empty["attach_handles"])
    assert len(handles_in_use(admin)) == 2

    # The upgrade: nested = true, the API restarted; a host in use is refused alone.
    to_nested(cloud)
    busy = {s.compute_host for s in servers.values()}
    result = migrate(admin)
    assert set(result) == set(COMPUTES)
    for host, done in result.items():
        if host in busy:
            assert done["actions"] == [], done
            assert "still has allocations" in done["errors"][0], done
            assert {"CUSTOM_ACCELERATOR_FPGA", "CUSTOM_ACCELERATOR_QAT"} <= (
                accelerator_classes(admin, nodes[host])
            )
        else:
            assert done["errors"] == [], done
            assert accelerator_classes(admin, nodes[host]) == set(), host
            assert tree(admin, nodes[host]), f"{host}: no nested provider"
    for rc, server in servers.items():
        assert allocations(admin, server.id)[nodes[server.compute_host]][rc] == 1

    delete_and_wait(member, *(s.id for s in servers.values()))
    check_gone(admin, *(s.id for s in servers.values()))

    result = migrate(admin)
    for host, done in result.items():
        assert done["errors"] == [], done
        assert accelerator_classes(admin, nodes[host]) == set(), host
        names = {p["name"] for p in tree(admin, nodes[host])}
        assert names and all(n.startswith(f"{host}_") for n in names), names
    assert cloud.nested and Cloud.load().nested  # type: ignore[union-attr]
