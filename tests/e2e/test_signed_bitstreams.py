"""Signed bitstreams through Nova: the reference cloud's agents require a signature on
what they program for the project ``signed`` (docs/bitstreams.md, "In the reference
cloud"). Their certificates are in Barbican: the CA the cloud made, and a signing
certificate it issues, made here. Glance checks a signature as it takes an image's
bytes; the agent checks it again on the bytes it programs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.fixtures import signing
from tests.fixtures.e2e import (
    COMPUTES,
    REGION_B,
    Flavors,
    active,
    allocations,
    arqs,
    boot,
    check_bound,
    check_gone,
    delete_and_wait,
    handles_in_use,
    osc,
    region,
    trait,
    wait_status,
)

from acceleron.drivers import gbs

SIGNED_FUNCTION = "5e1a7c3b9d2f4e6a8b0c1d2e3f405162"
UNSIGNED_FUNCTION = "6f2b8d4c0e3a5f7b9c1d2e3f40516273"
QAT = {"resources:CUSTOM_ACCELERATOR_QAT": "1"}


def programmable(bitstream: str) -> dict[str, str]:
    """A device profile group: region type B (empty, programmable), programmed with
    ``bitstream`` at bind."""
    return {
        "resources:CUSTOM_ACCELERATOR_FPGA": "1",
        f"trait:{trait('REGION', REGION_B)}": "required",
        "trait:CUSTOM_PROGRAMMABLE": "required",
        "accel:bitstream_id": bitstream,
    }


def upload(tmp_path: Path, name: str, data: bytes, properties: dict[str, str]) -> str:
    """A public bitstream image (the admin's) of ``data`` for region type B, with
    ``properties``, uploaded with the ``openstack`` CLI: its id."""
    path = tmp_path / name
    path.write_bytes(data)
    extra = [arg for key, value in properties.items() for arg in ("--property", f"{key}={value}")]
    image = osc(
        "image",
        "create",
        "--public",
        "--disk-format",
        "raw",
        "--container-format",
        "bare",
        "--file",
        str(path),
        "--property",
        f"accel:region_type_uuid={REGION_B}",
        "--property",
        "accel:vendor=8086",
        *extra,
        "-f",
        "json",
        name,
        user="admin",
    )
    image_id: str = image["id"]
    return image_id


def test_a_signed_bitstream_is_programmed_and_a_tampered_one_is_not_taken(
    admin: Any, flavors: Flavors, image: str, signer: signing.Signer, tmp_path: Path
) -> None:
    """Glance refuses an image whose bytes the signature does not match; a server of the
    project ``signed`` whose profile programs the signed bitstream is ACTIVE, its region
    holding the bitstream's function."""
    data = gbs.build(REGION_B, (SIGNED_FUNCTION,), payload=b"\x5a" * 4096)
    properties = {**signer.sign(data), "accel:function_uuid": SIGNED_FUNCTION}
    created = admin.image.post(
        "/images",
        json={
            "name": "tampered.gbs",
            "disk_format": "raw",
            "container_format": "bare",
            "accel:region_type_uuid": REGION_B,
            **properties,
        },
    )
    assert created.status_code == 201, created.text
    tampered = created.json()["id"]
    try:
        refused = admin.image.put(
            f"/images/{tampered}/file",
            data=data[:-1] + b"\x00",
            headers={"Content-Type": "application/octet-stream"},
        )
        assert refused.status_code == 400, refused.text
        assert "Signature verification failed" in refused.text
    finally:
        admin.image.delete(f"/images/{tampered}")
    bitstream = upload(tmp_path, "signed.gbs", data, properties)
    try:
        flavor = flavors.make([programmable(bitstream)])
        server = active(admin, boot(flavor, image, user="signer")["id"])
        (arq,) = check_bound(admin, server, groups=1)
        programmed = region(admin, server.compute_host, "region1")
        assert arq["device_rp_uuid"] == programmed["rp_uuid"]
        assert programmed["function_uuids"] == [SIGNED_FUNCTION]
        assert programmed["bitstream_id"] == bitstream
        delete_and_wait(admin, server.id)
        check_gone(admin, server.id)
    finally:
        osc("image", "delete", bitstream, user="admin")


def test_an_unsigned_bitstream_is_refused_and_the_flavor_freed(
    admin: Any, flavors: Flavors, image: str, signer: signing.Signer, tmp_path: Path
) -> None:
    """The project ``signed`` boots a flavor with a QAT VF and a region to program with
    an unsigned bitstream: the agent refuses it, Nova fails the build, and nothing of the
    flavor is held (no request, allocation or handle); the regions keep what they held.

    A large bitstream puts the refusal (after its fetch) in Nova's wait for the binds
    (tests/e2e/test_failures.py says why)."""
    data = gbs.build(REGION_B, (UNSIGNED_FUNCTION,), payload=b"\x5a" * (256 << 20))
    bitstream = upload(tmp_path, "unsigned.gbs", data, {"accel:function_uuid": UNSIGNED_FUNCTION})
    try:
        before = {host: region(admin, host, "region1") for host in COMPUTES}
        flavor = flavors.make([QAT, programmable(bitstream)])
        server = wait_status(admin, boot(flavor, image, user="signer")["id"], "ACTIVE")
        assert server.status == "ERROR", server
        assert "accelerator" in server.fault["message"].lower(), server.fault
        assert arqs(admin, server.id) == []
        assert allocations(admin, server.id) == {}
        assert handles_in_use(admin) == []
        after = {host: region(admin, host, "region1") for host in COMPUTES}
        for host in COMPUTES:
            for field in ("function_uuids", "bitstream_id"):
                assert after[host][field] == before[host][field], (host, field)
        errors = [after[host]["program_error"] or "" for host in COMPUTES]
        assert any("signature refused (unsigned)" in error for error in errors), errors
        delete_and_wait(admin, server.id)
        check_gone(admin, server.id)
    finally:
        osc("image", "delete", bitstream, user="admin")
