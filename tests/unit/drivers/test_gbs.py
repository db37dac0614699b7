"""The GBS header parser (docs/design/hardware.md §3.4)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from acceleron.drivers import gbs
from acceleron.drivers.errors import BitstreamError

INTERFACE = "ce48969398f05f33946d560708be108a"
AFU = "d8424dc4a4a3c413f89e433683f9040b"

# The example metadata of docs/design/hardware.md §3.4, byte for byte as a tool writes it.
EXAMPLE = (
    '{"version": 1, "platform-name": "PAC_A10", "afu-image": {"magic-no": 488605312, '
    '"interface-uuid": "ce489693-98f0-5f33-946d-560708be108a", "power": 50, '
    '"clock-frequency-high": 312, "clock-frequency-low": 156, '
    '"accelerator-clusters": [{"name": "nlb_400", "total-contexts": 1, '
    '"accelerator-type-uuid": "d8424dc4-a4a3-c413-f89e-433683f9040b"}]}}'
)


def image(metadata: str | bytes, payload: bytes = b"RAW", prefix: bytes = b"") -> bytes:
    raw = metadata.encode() if isinstance(metadata, str) else metadata
    return prefix + gbs.GBS_GUID + struct.pack("<I", len(raw)) + raw + payload


def test_guid_is_the_ascii_marker() -> None:
    assert gbs.GBS_GUID == b"XeonFPGA\xb7GBSv001"


def test_parse_the_example() -> None:
    header = gbs.parse(image(EXAMPLE))
    assert header.interface_uuid == INTERFACE
    assert header.accelerator_type_uuids == (AFU,)
    assert header.platform_name == "PAC_A10"
    assert header.header_offset == 0
    assert header.payload_offset == 20 + len(EXAMPLE)
    assert header.metadata["afu-image"]["power"] == 50


def test_signed_image_has_the_header_at_0x400() -> None:
    data = image(EXAMPLE, prefix=b"\x00" * 0x400)
    header = gbs.parse(data)
    assert header.header_offset == 0x400
    assert header.payload_offset == 0x400 + 20 + len(EXAMPLE)
    assert data[header.payload_offset :] == b"RAW"


def test_read_header_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "nlb.gbs"
    path.write_bytes(image(EXAMPLE, payload=b"\x01" * 100_000))
    assert gbs.read_header(path).interface_uuid == INTERFACE


def test_build_round_trips() -> None:
    data = gbs.build(INTERFACE, (AFU, AFU), b"bits", signed=True)
    header = gbs.parse(data)
    assert (header.interface_uuid, header.accelerator_type_uuids) == (INTERFACE, (AFU,))
    assert data[header.payload_offset :] == b"bits"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not a GBS image"),
        (b"\x00" * 0x500, "not a GBS image"),
        (gbs.GBS_GUID + b"\x01", "truncated before the metadata length"),
        (gbs.GBS_GUID + struct.pack("<I", 50) + b"{}", "metadata truncated"),
        (gbs.GBS_GUID + struct.pack("<I", 1 << 30), "implausible"),
        (image("{not json"), "not valid JSON"),
        (image(b"\xff\xfe"), "not valid JSON"),
        (image("[1, 2]"), "not a JSON object"),
        (image("{}"), "no afu-image"),
        (image(json.dumps({"afu-image": {"interface-uuid": "nope"}})), "no valid interface-uuid"),
        (
            image(json.dumps({"afu-image": {"magic-no": 1, "interface-uuid": INTERFACE}})),
            "magic-no 1",
        ),
    ],
)
def test_malformed_images_are_refused(data: bytes, message: str) -> None:
    with pytest.raises(BitstreamError, match=message):
        gbs.parse(data, "x.gbs")


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(BitstreamError, match="cannot read bitstream"):
        gbs.read_header(tmp_path / "missing.gbs")
