"""A flavor naming a function, with no region type, boots through Nova only onto regions
a bitstream of that function fits: the device profile Nova reads carries the region
type traits to forbid, so Placement offers nothing else and Nova's first candidate is
a right one. A function nothing can serve fails at scheduling, on no host."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from tests.fixtures.e2e import (
    LATEST,
    REGION_A,
    REGION_B,
    Flavors,
    active,
    boot,
    check_bound,
    check_gone,
    delete_and_wait,
    glance_bitstream,
    region,
    trait,
    wait_status,
)

FPGA = {"resources:CUSTOM_ACCELERATOR_FPGA": "1"}


def served_groups(member: Any, name: str) -> list[dict[str, str]]:
    """The profile's groups as Nova reads them (``GET /device_profiles?name=``)."""
    response = member.accelerator.get("/device_profiles", params={"name": name})
    assert response.status_code == 200, response.text
    (profile,) = response.json()["device_profiles"]
    groups: list[dict[str, str]] = profile["groups"]
    return groups


def test_a_function_lands_only_where_its_bitstream_fits(
    admin: Any, member: Any, flavors: Flavors, image: str, tmp_path: Path
) -> None:
    """The function's only bitstream is built for region type 9926 (each compute's
    region1); region0 (ce48) is free on both hosts and holds other functions. Three
    servers in turn: each is bound to a region1, programmed with the function."""
    function = uuid.uuid4().hex
    bitstream = glance_bitstream(tmp_path, function, REGION_B, REGION_B)
    flavor = flavors.make([{**FPGA, "accel:function_id": function}])
    (group,) = served_groups(member, flavor)
    assert group[f"trait:{trait('REGION', REGION_A)}"] == "forbidden"
    assert f"trait:{trait('REGION', REGION_B)}" not in group
    for _ in range(3):
        server = active(admin, boot(flavor, image)["id"])
        (arq,) = check_bound(admin, server, groups=1)
        programmed = region(admin, server.compute_host, "region1")
        assert arq["device_rp_uuid"] == programmed["rp_uuid"]
        assert programmed["function_uuids"] == [function]
        assert programmed["bitstream_id"] == bitstream
        delete_and_wait(member, server.id)
        check_gone(admin, server.id)


def test_a_function_nothing_can_serve_fails_at_scheduling(
    admin: Any, member: Any, flavors: Flavors, image: str
) -> None:
    """No bitstream of the function and no region holding it: every region type is
    forbidden, Placement offers no candidate, and Nova fails the server at once with
    NoValidHost, binding nothing on any host. A claim says why."""
    function = uuid.uuid4().hex
    flavor = flavors.make([{**FPGA, "accel:function_id": function}])
    (group,) = served_groups(member, flavor)
    forbidden = {k for k, v in group.items() if v == "forbidden"}
    assert {f"trait:{trait('REGION', REGION_A)}", f"trait:{trait('REGION', REGION_B)}"} <= forbidden
    server = wait_status(admin, boot(flavor, image)["id"], "ACTIVE")
    assert server.status == "ERROR"
    assert "No valid host" in (server.fault or {}).get("message", ""), server.fault
    consumer = str(uuid.uuid4())
    claimed = member.accelerator.post(
        "/claims",
        headers=LATEST,
        raise_exc=False,
        json={"device_profile_name": flavor, "consumer_uuid": consumer},
    )
    assert claimed.status_code == 409, claimed.text
    assert "no bitstream for it fits any region" in claimed.text
    delete_and_wait(member, server.id)
    check_gone(admin, server.id)
