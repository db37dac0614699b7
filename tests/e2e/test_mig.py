"""GPU slices carved on demand, through real Nova (docs/mig.md).

compute-1 of the reference cloud has an H200 carved on demand (the fake driver's
``mig: dynamic``, cloud/templates/inventory-mig.yaml). A flavor's device profile asks for
a slice by name (``accel:mig_profile``); Nova's query takes its units from that one GPU,
the bind makes the instance where the agent's planner puts it, and the delete destroys
it. Two 3g.71gb take both of the positions a 3g may start at; a third has no room (7
compute slices, 3 left after two): Nova finds no host.
"""

from __future__ import annotations

from typing import Any

from tests.fixtures.e2e import (
    LATEST,
    Flavors,
    active,
    allocations,
    boot,
    check_bound,
    check_gone,
    delete_and_wait,
    wait_status,
)

HOST = "compute-1"
MEMORY, COMPUTE = "CUSTOM_MIG_MEMORY_SLICE", "CUSTOM_MIG_COMPUTE_SLICE"


def carved_gpu(admin: Any) -> dict[str, Any]:
    """compute-1's GPU partitioned on demand (its one ``mig_gpu`` deployable)."""
    response = admin.accelerator.get(
        "/deployables", headers=LATEST, params={"hostname": HOST, "limit": 1000}
    )
    (found,) = [d for d in response.json()["deployables"] if d.get("kind") == "mig_gpu"]
    result: dict[str, Any] = found
    return result


def test_slices_are_made_at_boot_where_they_fit_and_destroyed_at_delete(
    admin: Any, flavors: Flavors, image: str
) -> None:
    three = flavors.make([{"accel:mig_profile": "3g.71gb"}])
    servers, starts = [], []
    for _ in range(2):
        server = active(admin, boot(three, image)["id"])
        assert server.compute_host == HOST, server.compute_host
        (arq,) = check_bound(admin, server, groups=1)
        info = arq["attach_handle_info"]
        assert info["mig_profile"] == "3g.71gb", info
        assert info["mig_uuid"], info
        held = allocations(admin, server.id)[arq["device_rp_uuid"]]
        assert (held[COMPUTE], held[MEMORY]) == (3, 4), held
        servers.append(server.id)
        starts.append(info["gpu_instance_start"])
    assert sorted(starts) == ["0", "4"]  # both positions a 3g may take, never overlapping
    in_use = [h for h in carved_gpu(admin)["attach_handles"] if h["in_use"]]
    assert len(in_use) == 2, in_use
    third = wait_status(admin, boot(three, image)["id"], "ACTIVE")
    servers.append(third.id)
    assert third.status == "ERROR", third.status
    assert "No valid host" in third.fault["message"], third.fault
    delete_and_wait(admin, *servers)
    check_gone(admin, *servers)
    assert not [h for h in carved_gpu(admin)["attach_handles"] if h["in_use"]]
