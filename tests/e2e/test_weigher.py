"""Acceleron's weigher inside nova-scheduler, with two hosts: a flavor asking for a
function lands on the host whose region already holds it, even where Nova's own
weighers prefer the other host, and nothing is reprogrammed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cloud.base import LOGS, Cloud
from tests.fixtures.e2e import (
    GZIP,
    HOLDER,
    NLB,
    REGION_A,
    Flavors,
    active,
    boot,
    check_bound,
    check_gone,
    delete_and_wait,
    glance_bitstream,
    region,
    trait,
)

GAVE_UP = "Acceleron weigher: every host weighs 0"


def gave_up() -> int:
    """How often the weigher has given up so far (nova-scheduler's log)."""
    return (LOGS / "nova-scheduler.log").read_text(errors="replace").count(GAVE_UP)


def test_a_function_flavor_lands_where_the_function_is(
    cloud: Cloud, admin: Any, member: Any, flavors: Flavors, image: str, tmp_path: Path
) -> None:
    # Nova's own weighers (RAM, CPU, disk) prefer compute-1 once compute-2 runs a big
    # server; only Acceleron's weigher knows compute-2's region0 holds NLB.
    filler = boot(
        flavors.plain(ram=40_000), image, "--availability-zone", f"nova:{HOLDER[NLB]}", user="admin"
    )
    active(admin, filler["id"])
    glance_bitstream(tmp_path, NLB, REGION_A, REGION_A, "--property", "accel:function_name=nlb")
    before = gave_up()
    fpga = {
        "resources:CUSTOM_ACCELERATOR_FPGA": "1",
        f"trait:{trait('REGION', REGION_A)}": "required",
    }
    for named in ({"accel:function_id": NLB}, {"accel:function_name": "nlb"}):
        flavor = flavors.make([{**fpga, **named}])
        server = active(admin, boot(flavor, image)["id"])
        assert server.compute_host == HOLDER[NLB], named
        (arq,) = check_bound(admin, server, groups=1)
        assert arq["device_rp_uuid"] == region(admin, HOLDER[NLB], "region0")["rp_uuid"]
        # Nothing was programmed: each region still holds what it came with.
        assert region(admin, HOLDER[NLB], "region0")["function_uuids"] == [NLB]
        assert region(admin, HOLDER[GZIP], "region0")["function_uuids"] == [GZIP]
        delete_and_wait(member, server.id)
        check_gone(admin, server.id)
    assert gave_up() == before
    delete_and_wait(admin, filler["id"])
