"""What goes wrong: no accelerator free, a bind that fails, an API replica killed while
servers boot."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

from cloud.base import Cloud, restart
from tests.fixtures.e2e import (
    REGION_A,
    REGION_B,
    Flavors,
    active,
    allocations,
    arqs,
    boot,
    check_bound,
    check_gone,
    delete_and_wait,
    glance_bitstream,
    handles_in_use,
    trait,
    wait_status,
)

BAD_FUNCTION = "5b0c7a1e9d8f4c2ba3e6d7f8091a2b3c"


def test_no_free_accelerator_is_an_error_and_holds_nothing(
    admin: Any, member: Any, flavors: Flavors, image: str
) -> None:
    """Each host has two QAT VFs; a flavor takes both: the third server finds none."""
    flavor = flavors.make([{"resources:CUSTOM_ACCELERATOR_QAT": "2"}])
    first = active(admin, boot(flavor, image)["id"])
    second = active(admin, boot(flavor, image)["id"])
    assert {first.compute_host, second.compute_host} == {"compute-1", "compute-2"}
    third = wait_status(admin, boot(flavor, image)["id"], "ACTIVE")
    assert third.status == "ERROR"
    assert "No valid host was found" in third.fault["message"]
    assert arqs(admin, third.id) == []
    assert allocations(admin, third.id) == {}
    for server in (first, second):
        check_bound(admin, admin.compute.get_server(server.id), groups=1, per_group=2)
    delete_and_wait(member, first.id, second.id, third.id)
    check_gone(admin, first.id, second.id, third.id)


def test_a_failed_bind_is_a_nova_fault_and_leaves_no_request(
    admin: Any, member: Any, flavors: Flavors, image: str, tmp_path: Path
) -> None:
    """The bitstream says it is for region type B but is built for A: the agent refuses
    to program it, the bind fails, Nova aborts the build.

    Nova 34 aborts only when the failure reaches the compute while it waits for the
    binds: a bind that has already failed when the compute first looks is taken as done
    (it checks no state), and the server is built without its accelerator. A large
    bitstream (fetched and checked before programming) puts the failure in the wait."""
    bitstream = glance_bitstream(tmp_path, BAD_FUNCTION, REGION_B, REGION_A, size=256 << 20)
    flavor = flavors.make(
        [
            {
                "resources:CUSTOM_ACCELERATOR_FPGA": "1",
                f"trait:{trait('REGION', REGION_B)}": "required",
                "accel:bitstream_id": bitstream,
            }
        ]
    )
    server = wait_status(admin, boot(flavor, image)["id"], "ACTIVE")
    assert server.status == "ERROR"
    assert "accelerator" in server.fault["message"].lower(), server.fault
    assert arqs(admin, server.id) == []
    assert handles_in_use(admin) == []
    delete_and_wait(member, server.id)
    check_gone(admin, server.id)


def test_an_api_replica_killed_while_servers_boot(
    cloud: Cloud, admin: Any, member: Any, flavors: Flavors, image: str
) -> None:
    """Four servers in one request; one of the two API replicas is killed at once. The
    balancer sends the next requests, and any the killed one had in flight, to the
    other one, and every boot completes."""
    flavor = flavors.make([{"resources:CUSTOM_ACCELERATOR_QAT": "1"}])
    boot(flavor, image, "--min", "4", "--max", "4")
    time.sleep(1)
    cloud = Cloud.load() or cloud  # the processes as they are now
    cloud.stop("acceleron-api-1", signal.SIGKILL)
    try:
        servers = [s.id for s in member.compute.servers() if s.flavor["original_name"] == flavor]
        assert len(servers) == 4
        for server_id in servers:
            check_bound(admin, active(admin, server_id), groups=1)
    finally:
        restart(cloud, "acceleron-api-1")
    delete_and_wait(member, *servers)
    check_gone(admin, *servers)
