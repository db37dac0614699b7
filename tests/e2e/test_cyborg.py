"""Upstream Cyborg as the reference cloud's accelerator service (``make e2e-cyborg``,
``python -m cloud up --cyborg``): Nova boots servers with accelerators through it.

Cyborg's fake driver gives each compute one device, a deployable ``<host>_FakeDevice``
whose provider (a child of the compute node) holds 16 of the standard class ``FPGA``
and the trait ``CUSTOM_FAKE_DEVICE``; its attach handles are of type ``TEST_PCI``,
which Nova's drivers leave alone. The device profiles here ask for that: the other e2e
tests' profiles name Acceleron's classes and traits (``CUSTOM_ACCELERATOR_FPGA``,
function and region traits), which Cyborg's fake driver does not report.

These tests run only against such a cloud; every other e2e test is skipped there
(tests/e2e/conftest.py).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from tests.e2e.conftest import (
    Flavors,
    active,
    allocations,
    boot,
    delete_and_wait,
    provider,
)

pytestmark = pytest.mark.cyborg

FAKE = {"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}


def cyborg_arqs(admin: Any, instance: str) -> list[dict[str, Any]]:
    """The instance's accelerator requests, as Cyborg lists them (no microversion)."""
    response = admin.accelerator.get("/accelerator_requests", params={"instance": instance})
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["arqs"]
    return sorted(found, key=lambda a: (a["device_profile_group_id"], a["uuid"]))


def check_bound(admin: Any, server: Any, count: int) -> list[dict[str, Any]]:
    """``count`` requests of the server Bound on its host's fake device, whose provider
    holds the server's FPGA allocation under that host's compute node."""
    host = server.compute_host
    found = cyborg_arqs(admin, server.id)
    assert len(found) == count, found
    assert {a["state"] for a in found} == {"Bound"}, found
    assert {a["hostname"] for a in found} == {host}, found
    assert {a["instance_uuid"] for a in found} == {server.id}, found
    assert {a["attach_handle_type"] for a in found} == {"TEST_PCI"}, found
    assert len({a["attach_handle_uuid"] for a in found}) == count, found
    (rp_uuid,) = {a["device_rp_uuid"] for a in found}
    rp = provider(admin, rp_uuid)
    assert rp["name"] == f"{host}_FakeDevice", rp
    held = allocations(admin, server.id)
    assert held[rp_uuid] == {"FPGA": count}, held
    roots = {provider(admin, p)["name"]: p for p in held}
    assert rp["root_provider_uuid"] == roots[host], (rp, held)
    return found


def check_gone(admin: Any, *server_ids: str, seconds: float = 60) -> None:
    """No request and no allocation of the servers is left (Nova deletes the requests
    after the server has gone from its API)."""
    deadline = time.monotonic() + seconds
    while True:
        left = [(s, cyborg_arqs(admin, s), allocations(admin, s)) for s in server_ids]
        left = [item for item in left if item[1] or item[2]]
        if not left:
            return
        assert time.monotonic() < deadline, f"left behind: {left}"
        time.sleep(1)


def test_the_accelerator_service_is_cyborg(admin: Any) -> None:
    """The catalog's accelerator endpoint is upstream Cyborg's, and each compute's fake
    device is in Placement under its compute node."""
    (service,) = admin.identity.services(type="accelerator")
    assert service.name == "cyborg"
    response = admin.accelerator.get("/deployables")
    assert response.status_code == 200, response.text
    names = {d["name"] for d in response.json()["deployables"]}
    assert names == {"compute-1_FakeDevice", "compute-2_FakeDevice"}


def test_boot_with_a_fake_fpga(admin: Any, member: Any, flavors: Flavors, image: str) -> None:
    """A flavor whose device profile asks for one FPGA of the fake device: the server
    becomes ACTIVE with its request bound; deleting it frees the request and the
    allocation."""
    flavor = flavors.make([FAKE])
    server = active(admin, boot(flavor, image)["id"])
    check_bound(admin, server, count=1)
    delete_and_wait(member, server.id)
    check_gone(admin, server.id)


def test_two_accelerators_and_two_servers(
    admin: Any, member: Any, flavors: Flavors, image: str
) -> None:
    """A group asking for two FPGAs gets two requests, each with its own attach handle;
    two servers at once each get theirs."""
    flavor = flavors.make([{**FAKE, "resources:FPGA": "2"}])
    servers = [boot(flavor, image)["id"] for _ in range(2)]
    for server_id in servers:
        check_bound(admin, active(admin, server_id), count=2)
    delete_and_wait(member, *servers)
    check_gone(admin, *servers)
