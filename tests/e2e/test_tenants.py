"""What one tenant leaves for the next, through Nova (docs/cleaning.md, docs/binding.md).

* A region left holding an unsigned image one project loaded is not handed to a project
  that runs only signed images (the project ``signed``): that server fails, and binds
  once a signed image exists, programmed anew. (A private image of one project in this
  cloud's Glance is not even seen by Acceleron's service user; what a project may see is
  tested on every database in tests/functional/test_provenance.py.)
* A GPU given back is cleaned before its next tenant: while it cleans (a cleaning the test
  holds open, cloud/cleaning_gate.py) it is reserved in Placement, the next server lands
  on the other host, and once clean the GPU serves again; its history says so.
* An FPGA region a tenant programmed returns to its blank image.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from cloud.base import RUN
from tests.fixtures import signing
from tests.fixtures.e2e import (
    COMPUTES,
    LATEST,
    REGION_B,
    WAIT,
    Flavors,
    active,
    boot,
    check_bound,
    check_gone,
    cleaning_left,
    delete_and_wait,
    osc,
    region,
    trait,
    wait_status,
)

from acceleron.drivers import gbs

L4 = {"resources:CUSTOM_ACCELERATOR_GPU": "1", "trait:CUSTOM_GPU_NVIDIA_L4": "required"}


def program(function: str, **accel: str) -> dict[str, str]:
    """A group for region type B (empty, programmable), programmed with ``function``."""
    return {
        "resources:CUSTOM_ACCELERATOR_FPGA": "1",
        f"trait:{trait('REGION', REGION_B)}": "required",
        "trait:CUSTOM_PROGRAMMABLE": "required",
        "accel:function_id": function,
        **{f"accel:{k}": v for k, v in accel.items()},
    }


def image_of(
    tmp_path: Path, function: str, user: str, *extra: str, name: str = "", size: int = 4096
) -> str:
    """A GBS image for region type B implementing ``function``, uploaded by ``user``
    (private to its project unless ``extra`` says ``--public``); its id."""
    path = tmp_path / f"{function[:8]}-{uuid.uuid4().hex[:4]}.gbs"
    path.write_bytes(gbs.build(REGION_B, (function,), payload=b"\x5a" * size))
    made = osc(
        "image",
        "create",
        "--disk-format",
        "raw",
        "--container-format",
        "bare",
        "--file",
        str(path),
        "--property",
        f"accel:function_uuid={function}",
        "--property",
        f"accel:region_type_uuid={REGION_B}",
        *extra,
        "-f",
        "json",
        name or path.name,
        user=user,
    )
    found: str = made["id"]
    return found


def held_by(admin: Any, arq: dict[str, Any]) -> dict[str, Any]:
    """The deployable an accelerator request is bound to."""
    found = admin.accelerator.get(
        "/deployables", headers=LATEST, params={"rp_uuid": arq["device_rp_uuid"]}
    )
    (dep,) = found.json()["deployables"]
    result: dict[str, Any] = dep
    return result


def test_a_project_that_runs_signed_images_never_gets_anothers_unsigned_one(
    admin: Any, flavors: Flavors, image: str, signer: signing.Signer, tmp_path: Path
) -> None:
    function = uuid.uuid4().hex
    # Large: its refusal, after its fetch, comes while Nova waits for the bind (Nova builds
    # a server whose bind failed before it looked, without its accelerator: see
    # tests/e2e/test_failures.py).
    unsigned = image_of(tmp_path, function, "admin", "--public", size=256 << 20)
    flavor = flavors.make([program(function, cleaning="none")])  # left as it was
    try:
        first = active(admin, boot(flavor, image)["id"])
        (arq,) = check_bound(admin, first, groups=1)
        left = held_by(admin, arq)
        assert left["provenance"]["bitstream_id"] == unsigned
        assert left["provenance"]["signature"]["verified"] is False
        delete_and_wait(admin, first.id)
        check_gone(admin, first.id)
        assert region(admin, first.compute_host, "region1")["function_uuids"] == [function]

        refused = wait_status(admin, boot(flavor, image, user="signer")["id"], "ACTIVE")
        assert refused.status == "ERROR", refused  # nothing it may run: no bind anywhere
        kept = region(admin, first.compute_host, "region1")
        assert kept["provenance"]["bitstream_id"] == unsigned  # not handed over as it was
        assert kept["provenance"]["project_id"] != admin.current_project_id
        delete_and_wait(admin, refused.id)
        osc("image", "delete", unsigned, user="admin")  # one image a function, or ambiguous

        data = gbs.build(REGION_B, (function,), payload=b"\x5a" * 4096)
        path = tmp_path / "signed.gbs"
        path.write_bytes(data)
        properties = [
            arg
            for key, value in signer.sign(data).items()
            for arg in ("--property", f"{key}={value}")
        ]
        signed = image_of(tmp_path, function, "admin", "--public", *properties)
        try:
            server = active(admin, boot(flavor, image, user="signer")["id"])
            (arq,) = check_bound(admin, server, groups=1)
            loaded = held_by(admin, arq)["provenance"]
            assert loaded["bitstream_id"] == signed and loaded["signature"]["verified"] is True
            delete_and_wait(admin, server.id)
            check_gone(admin, server.id)
        finally:
            osc("image", "delete", signed, user="admin")
    finally:
        osc("image", "delete", unsigned, user="admin", check=False)


def gate(host: str) -> Path:
    return RUN / "acceleron" / host / "cleaning"


def wait_for(what: str, check: Any, seconds: float = WAIT) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"still not so after {seconds} s: {what}"
        time.sleep(1)


def test_a_gpu_is_cleaned_before_its_next_tenant_reserved_meanwhile(
    admin: Any, flavors: Flavors, image: str
) -> None:
    flavor = flavors.make([{**L4, "accel:cleaning": "command"}])  # cloud/cleaning_gate.py
    first = active(admin, boot(flavor, image)["id"])
    (arq,) = check_bound(admin, first, groups=1)
    gpu = held_by(admin, arq)
    host = first.compute_host
    device = admin.accelerator.get(f"/devices/{gpu['device_uuid']}", headers=LATEST).json()
    address = device["pci_address"]
    other = next(h for h in COMPUTES if h != host)
    for stale in gate(host).glob(f"*-{address}"):  # left by an earlier run on this cloud
        stale.unlink()
    try:
        delete_and_wait(admin, first.id)
        wait_for("the cleaning began", lambda: (gate(host) / f"at-{address}").exists())
        again = admin.accelerator.get(f"/deployables/{gpu['uuid']}", headers=LATEST).json()
        assert again["cleaning"] == 1
        wait_for(
            "Placement reserves it",
            lambda: (
                admin.placement.get(
                    f"/resource_providers/{gpu['rp_uuid']}/inventories",
                    headers={"OpenStack-API-Version": "placement 1.26"},
                ).json()["inventories"]["CUSTOM_ACCELERATOR_GPU"]["reserved"]
                == 1
            ),
        )

        second = active(admin, boot(flavor, image)["id"])  # it lands where a GPU is clean
        assert second.compute_host == other

        (gate(host) / f"open-{address}").touch()  # the cleaning ends
        wait_for("the GPU is clean again", lambda: not cleaning_left(admin))
        third = active(admin, boot(flavor, image)["id"])  # and it serves again
        assert third.compute_host == host
        history = admin.accelerator.get(
            f"/devices/{gpu['device_uuid']}/history", headers=LATEST
        ).json()["tenancies"]
        (given,) = [t for t in history if t["instance_uuid"] == first.id]
        assert (given["cleaning_method"], given["cleaning"]) == ("command", "done")
        assert given["cleaning_seconds"] > 0
    finally:
        for name in COMPUTES:  # whatever L4 cleans next ends at once (compute-2 has H200s)
            listed = admin.accelerator.get("/devices", headers=LATEST, params={"hostname": name})
            gate(name).mkdir(parents=True, exist_ok=True)
            for found in listed.json()["devices"]:
                if found["model"] == "L4":
                    (gate(name) / f"open-{found['pci_address']}").touch()
    left = [s.id for s in admin.compute.servers(all_projects=True)]
    delete_and_wait(admin, *left)
    check_gone(admin, *left)
    for name in COMPUTES:
        for done in gate(name).glob("*"):
            done.unlink()


def test_an_fpga_region_returns_to_its_blank_image(
    admin: Any, flavors: Flavors, image: str, tmp_path: Path
) -> None:
    blank_function, function = uuid.uuid4().hex, uuid.uuid4().hex
    blank = image_of(tmp_path, blank_function, "admin", "--public", name="blank")
    tenant = image_of(tmp_path, function, "admin", "--public")
    try:
        server = active(admin, boot(flavors.make([program(function)]), image)["id"])
        (arq,) = check_bound(admin, server, groups=1)
        assert held_by(admin, arq)["function_uuids"] == [function]
        delete_and_wait(admin, server.id)
        check_gone(admin, server.id)
        after = region(admin, server.compute_host, "region1")
        assert after["function_uuids"] == [blank_function]
        assert after["provenance"]["bitstream_id"] == blank
        assert after["provenance"]["project_id"] is None
    finally:
        osc("image", "delete", blank, tenant, user="admin")
