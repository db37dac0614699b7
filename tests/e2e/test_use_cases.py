"""Spec 001's use cases as flavors, booted through Nova: each server ends ACTIVE with its
accelerator requests Bound and its allocations on the right providers under the right
compute node; deleting it leaves no request, allocation or handle in use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.fixtures.e2e import (
    GZIP,
    HOLDER,
    REGION_B,
    Flavors,
    active,
    allocations,
    boot,
    check_bound,
    check_gone,
    delete_and_wait,
    glance_bitstream,
    region,
    trait,
)

QAT = {"resources:CUSTOM_ACCELERATOR_QAT": "1"}
VGPU = {"resources:CUSTOM_ACCELERATOR_VGPU": "1", "trait:CUSTOM_GPU_NVIDIA_T4": "required"}
# A MIG slice with memory beside it: the memory travels with the slice, it is no request.
MIG_AND_MEMORY = {
    "resources:CUSTOM_ACCELERATOR_MIG": "1",
    "resources:CUSTOM_ACCELERATOR_MEMORY_HBM": "4096",
}
FUNCTION_X = "3c9e1d7ab2f54e0c8d6a1b2c3d4e5f60"


def test_device_as_a_service(admin: Any, member: Any, flavors: Flavors, image: str) -> None:
    """The flavor asks for a device (a vGPU of a T4): Acceleron makes the vGPU at bind."""
    flavor = flavors.make([VGPU])
    server = active(admin, boot(flavor, image)["id"])
    (arq,) = check_bound(admin, server, groups=1)
    assert arq["attach_handle_type"] == "MDEV"
    delete_and_wait(member, server.id)
    check_gone(admin, server.id)


def test_afaas_pre_programmed(admin: Any, member: Any, flavors: Flavors, image: str) -> None:
    """The flavor asks for a function already loaded: only compute-1's region0 has gzip."""
    flavor = flavors.make(
        [{"resources:CUSTOM_ACCELERATOR_FPGA": "1", f"trait:{trait('FUNCTION', GZIP)}": "required"}]
    )
    server = active(admin, boot(flavor, image)["id"])
    assert server.compute_host == HOLDER[GZIP]
    (arq,) = check_bound(admin, server, groups=1)
    held = region(admin, HOLDER[GZIP], "region0")
    assert arq["device_rp_uuid"] == held["rp_uuid"]
    assert held["function_uuids"] == [GZIP]  # nothing was programmed
    delete_and_wait(member, server.id)
    check_gone(admin, server.id)


def test_afaas_orchestration_programmed_from_glance(
    admin: Any, member: Any, flavors: Flavors, image: str, tmp_path: Path
) -> None:
    """The flavor names a bitstream in Glance: Acceleron programs an empty region of the
    right type with it before Nova builds the server."""
    bitstream = glance_bitstream(tmp_path, FUNCTION_X, REGION_B, REGION_B)
    flavor = flavors.make(
        [
            {
                "resources:CUSTOM_ACCELERATOR_FPGA": "1",
                f"trait:{trait('REGION', REGION_B)}": "required",
                "trait:CUSTOM_PROGRAMMABLE": "required",
                "accel:bitstream_id": bitstream,
            }
        ]
    )
    server = active(admin, boot(flavor, image)["id"])
    (arq,) = check_bound(admin, server, groups=1)
    programmed = region(admin, server.compute_host, "region1")
    assert arq["device_rp_uuid"] == programmed["rp_uuid"]
    assert programmed["function_uuids"] == [FUNCTION_X]
    assert programmed["bitstream_id"] == bitstream
    traits = admin.placement.get(
        f"/resource_providers/{arq['device_rp_uuid']}/traits",
        headers={"OpenStack-API-Version": "placement 1.6"},
    )
    assert trait("FUNCTION", FUNCTION_X) in traits.json()["traits"]
    delete_and_wait(member, server.id)
    check_gone(admin, server.id)


def test_a_mig_slice_with_its_memory(admin: Any, member: Any, flavors: Flavors, image: str) -> None:
    """The flavor asks for a MIG slice and 4 GiB of HBM (the H100 in the cloud's
    inventories): one request, one slice bound, the memory in the slice's allocation."""
    flavor = flavors.make([MIG_AND_MEMORY])
    server = active(admin, boot(flavor, image)["id"])
    (arq,) = check_bound(admin, server, groups=1)
    assert arq["attach_handle_type"] == "MIG"
    held = allocations(admin, server.id)
    assert held[arq["device_rp_uuid"]] == {
        "CUSTOM_ACCELERATOR_MIG": 1,
        "CUSTOM_ACCELERATOR_MEMORY_HBM": 4096,
    }
    delete_and_wait(member, server.id)
    check_gone(admin, server.id)


def test_two_groups(admin: Any, member: Any, flavors: Flavors, image: str) -> None:
    flavor = flavors.make([QAT, VGPU])
    server = active(admin, boot(flavor, image)["id"])
    found = check_bound(admin, server, groups=2)
    assert [a["device_profile_group_id"] for a in found] == [0, 1]
    assert [a["attach_handle_type"] for a in found] == ["TEST_PCI", "MDEV"]
    held = allocations(admin, server.id)
    assert held[found[0]["device_rp_uuid"]] == {"CUSTOM_ACCELERATOR_QAT": 1}
    assert held[found[1]["device_rp_uuid"]] == {"CUSTOM_ACCELERATOR_VGPU": 1}
    delete_and_wait(member, server.id)
    check_gone(admin, server.id)


def test_two_servers_in_one_request(admin: Any, member: Any, flavors: Flavors, image: str) -> None:
    flavor = flavors.make([QAT])
    boot(flavor, image, "--min", "2", "--max", "2")
    servers = [s for s in member.compute.servers() if s.flavor["original_name"] == flavor]
    assert len(servers) == 2
    handles = set()
    for listed in servers:
        server = active(admin, listed.id)
        (arq,) = check_bound(admin, server, groups=1)
        handles.add(arq["attach_handle_uuid"])
    assert len(handles) == 2  # one accelerator each
    delete_and_wait(member, *(s.id for s in servers))
    check_gone(admin, *(s.id for s in servers))


def test_attach_targets_host_and_none(
    admin: Any, member: Any, flavors: Flavors, image: str
) -> None:
    """Groups for the host and for nobody: Nova boots the server with them held and
    Bound, and is shown no handle for them (it sends no microversion), so it attaches
    only the VM's."""
    flavor = flavors.make(
        [QAT, {**QAT, "accel:attach_target": "host"}, {**VGPU, "accel:attach_target": "none"}]
    )
    server = active(admin, boot(flavor, image)["id"])
    found = check_bound(admin, server, groups=3)
    assert [a["attach_target"] for a in found] == ["VM", "host", "none"]
    assert [a["attach_handle_type"] for a in found] == ["TEST_PCI", "TEST_PCI", "MDEV"]
    response = admin.accelerator.get("/accelerator_requests", params={"instance": server.id})
    as_nova = sorted(response.json()["arqs"], key=lambda a: a["device_profile_group_id"])
    assert [a["attach_handle_type"] for a in as_nova] == ["TEST_PCI", None, None]
    delete_and_wait(member, server.id)
    check_gone(admin, server.id)
