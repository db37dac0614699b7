"""The agent cleans what a tenant gave back, end to end over HTTP: a live API, a host whose
fake driver cleans for real (its state file shows it), the local bitstream store.

A region a tenant programmed is scrubbed: emptied, or loaded with the operator's blank
image for its region type; a cleaning that fails puts the region in maintenance; the
operator's command runs with the device's address and handles.
"""

from __future__ import annotations

import json
import stat
import uuid
from pathlib import Path
from typing import Any

import pytest

from acceleron.drivers import gbs
from tests.fixtures.host import Host, arq_of, bind, call, get, profile, upload

REGION0_TYPE = "ce48969398f05f33946d560708be108a"  # the fake inventory's first region type
FPGA = {"resources:CUSTOM_ACCELERATOR_FPGA": "1", "trait:CUSTOM_PROGRAMMABLE": "required"}


@pytest.fixture
def host(live_api: str, tmp_path: Path) -> Host:
    found = Host(live_api, tmp_path)
    found.report()
    return found


def tenant_program(host: Host, **accel: str) -> str:
    """A request whose bind loads a new function into region0 (a tenant's image), bound."""
    function = uuid.uuid4().hex
    upload(host.url, REGION0_TYPE, function, REGION0_TYPE)
    group = {**FPGA, "accel:function_id": function, **{f"accel:{k}": v for k, v in accel.items()}}
    arq = bind(host, profile(host.url, [group]), host.region()["rp_uuid"])
    host.run_tasks(lambda: arq_of(host.url, arq)["state"] == "Bound")
    return arq


def give_back_and_clean(host: Host, arq: str) -> dict[str, Any]:
    """The request deleted and the host's agent at work until its cleaning ended; the
    device's newest tenancy."""
    gone = call(host.url, "DELETE", f"/v2/accelerator_requests/{arq}")
    assert gone.status_code == 204, gone.text
    device = host.region()["device_uuid"]

    def newest() -> dict[str, Any]:
        found: dict[str, Any] = get(host.url, f"/v2/devices/{device}/history")["tenancies"][0]
        return found

    host.run_tasks(lambda: newest()["cleaning"] in ("done", "failed"))
    host.report()
    return newest()


def address(host: Host) -> str:
    """The PCI address of the host's first FPGA."""
    found: str = get(host.url, f"/v2/devices/{host.region()['device_uuid']}")["pci_address"]
    return found


def cleaned(host: Host) -> list[dict[str, Any]]:
    """What the fake driver's state file says it cleaned on the host's first FPGA."""
    state = json.loads(Path(host.conf.fake.state_file).read_text())["devices"]
    found: list[dict[str, Any]] = state[address(host)].get("cleaned", [])
    return found


def test_a_tenants_image_is_scrubbed_away(host: Host) -> None:
    arq = tenant_program(host)
    tenancy = give_back_and_clean(host, arq)
    assert tenancy["arq_uuid"] == arq and tenancy["cleaning_method"] == "scrub"
    assert tenancy["cleaning"] == "done" and tenancy["held"]["project_id"] == "admin"
    region = host.region()
    assert region["function_uuids"] == [] and region["provenance"] is None
    assert region["cleaning"] == 0 and region["status"] == "enabled"
    assert cleaned(host)[-1]["method"] == "scrub"
    assert ("running", "clean") in host.phases


def test_a_region_returns_to_its_blank_image(host: Host, tmp_path: Path) -> None:
    blank_function = uuid.uuid4().hex
    meta = {
        "name": "blank",
        "function_uuid": blank_function,
        "region_type_uuid": REGION0_TYPE,
        "visibility": "public",
    }
    created = call(host.url, "POST", "/v2/bitstreams", json=meta).json()["uuid"]
    data = gbs.build(REGION0_TYPE, (blank_function,), payload=b"\0" * 4096)
    call(
        host.url,
        "PUT",
        f"/v2/bitstreams/{created}/data",
        data=data,
        headers={"Content-Type": "application/octet-stream"},
    )
    try:
        tenancy = give_back_and_clean(host, tenant_program(host))
        assert tenancy["cleaning"] == "done"
        region = host.region()
        assert region["function_uuids"] == [blank_function]
        held = region["provenance"]
        assert held["bitstream_id"] == created and held["project_id"] is None
    finally:
        call(host.url, "DELETE", f"/v2/bitstreams/{created}")


def test_a_cleaning_that_fails_puts_the_region_in_maintenance(host: Host) -> None:
    host.conf.set_override("failing_cleanings", ["*"], "fake")
    tenancy = give_back_and_clean(host, tenant_program(host))
    assert tenancy["cleaning"] == "failed" and "simulated failure" in tenancy["cleaning_error"]
    region = host.region()
    assert region["status"] == "maintaining" and region["cleaning"] == 2
    assert region["maintenance_reason"].startswith("cleaning (scrub) failed:")


def test_the_operators_command_cleans(host: Host, tmp_path: Path) -> None:
    said = tmp_path / "said"
    script = tmp_path / "clean.sh"
    script.write_text(f'#!/bin/sh\necho "$@" > {said}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    host.conf.set_override(
        "cleaning_command", f"{script} {{address}} {{deployable}} {{handles}}", "agent"
    )
    tenancy = give_back_and_clean(host, tenant_program(host, cleaning="command"))
    assert tenancy["cleaning"] == "done" and tenancy["cleaning_method"] == "command"
    where, key, handles = said.read_text().split()
    assert (where, key) == (address(host), "region0")
    assert len(handles.split(",")) == 2
