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

import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

import openstack
import pytest
from cloud.base import Cloud
from cloud.cyborg_cloud import (
    acceleron_beside_cyborg,
    adopt_cyborg,
    cyborg_programmed,
    switch_to_acceleron,
)
from tests.fixtures.e2e import (
    LATEST,
    Flavors,
    active,
    allocations,
    arqs,
    boot,
    delete_and_wait,
    provider,
    wait_status,
)
from tests.fixtures.e2e import check_gone as check_all_gone

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


# --- adoption: Acceleron takes the servers over (the last test: it leaves the cloud's
# --- accelerator endpoint on Acceleron and Cyborg's services stopped) ------------------

# The function the fake card holds: Acceleron's region of it is programmed with it
# (cloud/templates/inventory-cyborg.yaml); Cyborg's provider carries the trait Cyborg
# records once it has programmed a function (cyborg_programmed: its fake driver cannot).
FUNCTION = "6a1f0c2e3b4d4e5f8a9b0c1d2e3f4a5b"
OUR_FUNCTION = f"CUSTOM_FPGA_FUNCTION_ID_INTEL_{FUNCTION.upper()}"
# Cyborg's fake trait: Acceleron's region of the same card carries CUSTOM_FPGA_INTEL.
MAPPING = "traits:\n  CUSTOM_FAKE_DEVICE: CUSTOM_FPGA_INTEL\n  {theirs}: {ours}\n"


def pci(info: Any) -> tuple[int, ...]:
    """An attach handle's PCI address from its attach_handle_info (a JSON string or an
    object, hex fields zero-padded or not)."""
    fields = json.loads(info) if isinstance(info, str) else info
    return tuple(int(fields[k], 16) for k in ("domain", "bus", "device", "function"))


def when(stamp: str) -> dt.datetime:
    """A request's created_at (Cyborg's has no zone, Acceleron's says UTC)."""
    return dt.datetime.fromisoformat(stamp).replace(tzinfo=None)


def total(held: dict[str, dict[str, int]]) -> int:
    return sum(amount for resources in held.values() for amount in resources.values())


def traits(admin: Any, rp: str) -> set[str]:
    response = admin.placement.get(
        f"/resource_providers/{rp}/traits", headers={"OpenStack-API-Version": "placement 1.6"}
    )
    return set(response.json()["traits"])


def settle(admin: Any, server_id: str, status: str) -> None:
    found = wait_status(admin, server_id, status)
    assert found.status == status, f"{server_id}: {found.status}: {found.fault}"


def check_function(admin: Any, server_id: str) -> dict[str, Any]:
    """The server's one request is Bound on a region of Acceleron's that holds the
    function; returns it."""
    (arq,) = arqs(admin, server_id)
    assert arq["state"] == "Bound", arq
    assert OUR_FUNCTION in traits(admin, arq["device_rp_uuid"]), arq
    assert arq["device_rp_uuid"] in allocations(admin, server_id)
    return arq


def test_adoption_keeps_the_servers_accelerators(
    member: Any, flavors: Flavors, image: str, tmp_path: Path
) -> None:
    """Servers booted under Cyborg, one of them on the card's function; Acceleron
    started beside it and `acceleron adopt cyborg` run: each server keeps its attach
    handle (its uuid too), its request's creation time and the amount it holds in
    Placement, and the function's profile asks for the function as Acceleron publishes
    it, on the region that holds it. Then the catalog
    points at Acceleron, Cyborg stops and the computes restart: reboot, stop/start and
    shelve/unshelve work
    (shelve-offload deletes the adopted request, unshelve binds a new one on the
    function), delete frees everything, new boots land, and a second adoption is a
    no-op."""
    cloud = Cloud.load()
    assert cloud is not None and cloud.cyborg
    admin: Any = openstack.connect(cloud="acceleron-admin")
    theirs = cyborg_programmed(cloud, FUNCTION)
    flavor = flavors.make([FAKE])
    function = flavors.make([{**FAKE, f"trait:{theirs}": "required"}])
    servers = [active(admin, boot(name, image)["id"]) for name in (flavor, flavor, function)]
    before: dict[str, tuple[str, str, tuple[int, ...], int]] = {}
    kept: dict[str, tuple[str, dt.datetime]] = {}  # the handle's uuid, the creation time
    for server in servers:
        (arq,) = check_bound(admin, server, count=1)
        held = total(allocations(admin, server.id))
        before[server.id] = (arq["uuid"], arq["hostname"], pci(arq["attach_handle_info"]), held)
        kept[server.id] = (arq["attach_handle_uuid"], when(arq["created_at"]))
    assert theirs in traits(admin, arq["device_rp_uuid"])  # the function's server's provider

    acceleron_beside_cyborg(cloud)
    mapping = tmp_path / "mapping.yaml"
    mapping.write_text(MAPPING.format(theirs=theirs, ours=OUR_FUNCTION))
    done = adopt_cyborg(cloud, mapping)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "The plan is in " in done.stderr, done.stderr  # written before any change
    switch_to_acceleron(cloud)

    admin = openstack.connect(cloud="acceleron-admin")  # a new token: the new catalog
    member = openstack.connect(cloud="acceleron-member")
    for server in servers:
        uuid, host, address, amount = before[server.id]
        (arq,) = arqs(admin, server.id)
        assert (arq["uuid"], arq["state"], arq["hostname"]) == (uuid, "Bound", host), arq
        assert pci(arq["attach_handle_info"]) == address, (arq, address)
        assert (arq["attach_handle_uuid"], when(arq["created_at"])) == kept[server.id], arq
        assert total(allocations(admin, server.id)) == amount
    _, second, programmed = servers
    check_function(admin, programmed.id)
    listed = admin.accelerator.get("/device_profiles", headers=LATEST).json()
    (groups,) = [p["groups"] for p in listed["device_profiles"] if p["name"] == function]
    assert groups == [
        {
            "resources:CUSTOM_ACCELERATOR_FPGA": "1",
            "trait:CUSTOM_FPGA_INTEL": "required",
            f"trait:{OUR_FUNCTION}": "required",
        }
    ], groups
    # The switch restarted the computes (docs/adopt-from-cyborg.md, step 6), and Nova's
    # fake virt driver forgets its guests when nova-compute restarts (a libvirt host keeps
    # them): a hard reboot brings each back, as it would a libvirt guest that had gone.
    for server in servers:
        admin.compute.reboot_server(server.id, "HARD")
        active(admin, server.id)
    admin.compute.stop_server(second.id)
    wait_status(admin, second.id, "SHUTOFF")
    admin.compute.start_server(second.id)
    active(admin, second.id)
    admin.compute.shelve_server(programmed.id)
    settle(admin, programmed.id, "SHELVED")
    admin.compute.unshelve_server(programmed.id)
    settle(admin, programmed.id, "ACTIVE")
    assert check_function(admin, programmed.id)["uuid"] == before[programmed.id][0]
    admin.compute.shelve_server(programmed.id)
    settle(admin, programmed.id, "SHELVED")
    admin.compute.shelve_offload_server(programmed.id)
    settle(admin, programmed.id, "SHELVED_OFFLOADED")
    assert arqs(admin, programmed.id) == [] and allocations(admin, programmed.id) == {}
    admin.compute.unshelve_server(programmed.id)
    settle(admin, programmed.id, "ACTIVE")
    assert check_function(admin, programmed.id)["uuid"] != before[programmed.id][0]
    delete_and_wait(member, *[s.id for s in servers])
    check_all_gone(admin, *[s.id for s in servers])
    again = [active(admin, boot(name, image)["id"]) for name in (flavor, function)]
    (arq,) = arqs(admin, again[0].id)
    assert arq["state"] == "Bound", arq
    check_function(admin, again[1].id)
    delete_and_wait(member, *[s.id for s in again])
    check_all_gone(admin, *[s.id for s in again])

    done = adopt_cyborg(cloud, mapping)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Nothing to do" in done.stdout + done.stderr
