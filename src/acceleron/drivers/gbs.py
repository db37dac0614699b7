"""The GBS header of Intel FPGA partial-reconfiguration bitstreams (docs/design/hardware.md §3.4).

Layout: a 16-byte GUID (``XeonFPGA·GBSv001``), a little-endian u32 metadata length
L, L bytes of UTF-8 JSON metadata, then the raw bitstream. Signed images (N3000,
D5005, OFS) put a 1 KiB signature block in front, so the GUID is looked for at
offset 0 and then at 0x400. The agent checks a bitstream with ``read_header``
before programming; the drivers compare its interface uuid with the region type.
"""

from __future__ import annotations

import dataclasses
import io
import json
import struct
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

from acceleron import uuids
from acceleron.drivers.errors import BitstreamError
from acceleron.drivers.sysfs import normalize_uuid

GBS_GUID = uuid.UUID("58656f6e-4650-4741-b747-425376303031").bytes  # b"XeonFPGA\xb7GBSv001"
SIGNATURE_BLOCK = 0x400
MAGIC_NO = 0x1D1F8680
MAX_METADATA = 1 << 20  # a real header is a few hundred bytes


@dataclasses.dataclass(frozen=True)
class GbsHeader:
    """What the header says. UUIDs are 32 lower-case hex digits."""

    interface_uuid: str  # the region type the image fits
    accelerator_type_uuids: tuple[str, ...]  # the AFU (function) ids it implements
    platform_name: str | None
    metadata: Mapping[str, Any]
    header_offset: int  # 0, or 0x400 for a signed image
    payload_offset: int  # where the raw bitstream starts


def read_header(path: Path) -> GbsHeader:
    """Parse the header of a GBS file without reading the (large) bitstream itself."""
    try:
        with path.open("rb") as stream:
            return _read(stream, path.name)
    except OSError as error:
        raise BitstreamError(f"cannot read bitstream {path}: {error.strerror}") from error


def has_header(path: Path) -> bool:
    """Whether the file starts (at 0, or after a signature block) with the GBS GUID."""
    try:
        with path.open("rb") as stream:
            for offset in (0, SIGNATURE_BLOCK):
                stream.seek(offset)
                if stream.read(len(GBS_GUID)) == GBS_GUID:
                    return True
    except OSError:
        return False
    return False


def parse(data: bytes, name: str = "bitstream") -> GbsHeader:
    """Parse a GBS header from bytes (the whole image or at least its header)."""
    return _read(io.BytesIO(data), name)


def _read(stream: BinaryIO, name: str) -> GbsHeader:
    for offset in (0, SIGNATURE_BLOCK):
        stream.seek(offset)
        if stream.read(len(GBS_GUID)) == GBS_GUID:
            return _read_metadata(stream, offset, name)
    raise BitstreamError(f"{name} is not a GBS image: no GBS GUID at offset 0 or 0x400")


def _read_metadata(stream: BinaryIO, offset: int, name: str) -> GbsHeader:
    raw_length = stream.read(4)
    if len(raw_length) != 4:
        raise BitstreamError(f"{name}: GBS header truncated before the metadata length")
    (length,) = struct.unpack("<I", raw_length)
    if length > MAX_METADATA:
        raise BitstreamError(f"{name}: GBS metadata length {length} is implausible")
    raw = stream.read(length)
    if len(raw) != length:
        raise BitstreamError(f"{name}: GBS metadata truncated ({len(raw)} of {length} bytes)")
    try:
        metadata = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BitstreamError(f"{name}: GBS metadata is not valid JSON: {error}") from error
    if not isinstance(metadata, dict):
        raise BitstreamError(f"{name}: GBS metadata is not a JSON object")
    return _header(metadata, offset, offset + 20 + length, name)


def _header(metadata: dict[str, Any], offset: int, payload: int, name: str) -> GbsHeader:
    image = metadata.get("afu-image")
    if not isinstance(image, dict):
        raise BitstreamError(f"{name}: GBS metadata has no afu-image object")
    magic = image.get("magic-no")
    if magic is not None and magic != MAGIC_NO:
        raise BitstreamError(f"{name}: afu-image magic-no {magic!r} is not {MAGIC_NO:#x}")
    interface = normalize_uuid(_text(image.get("interface-uuid")))
    if interface is None:
        raise BitstreamError(f"{name}: afu-image has no valid interface-uuid")
    clusters = image.get("accelerator-clusters") or []
    afus = [normalize_uuid(_text(c.get("accelerator-type-uuid"))) for c in _dicts(clusters)]
    platform = metadata.get("platform-name")
    return GbsHeader(
        interface_uuid=interface,
        accelerator_type_uuids=tuple(dict.fromkeys(a for a in afus if a is not None)),
        platform_name=platform if isinstance(platform, str) else None,
        metadata=metadata,
        header_offset=offset,
        payload_offset=payload,
    )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def build(
    interface_uuid: str,
    accelerator_type_uuids: tuple[str, ...] = (),
    payload: bytes = b"",
    *,
    platform_name: str = "PAC_A10",
    signed: bool = False,
) -> bytes:
    """A GBS image with the given ids (for the fake driver's users, tests and demos)."""
    clusters = [
        {
            "name": f"afu{i}",
            "total-contexts": 1,
            "accelerator-type-uuid": uuids.parse(afu, "accelerator-type-uuid"),
        }
        for i, afu in enumerate(accelerator_type_uuids)
    ]
    metadata = {
        "version": 1,
        "platform-name": platform_name,
        "afu-image": {
            "magic-no": MAGIC_NO,
            "interface-uuid": uuids.parse(interface_uuid, "interface-uuid"),
            "accelerator-clusters": clusters,
        },
    }
    raw = json.dumps(metadata).encode()
    header = GBS_GUID + struct.pack("<I", len(raw)) + raw
    return (b"\0" * SIGNATURE_BLOCK if signed else b"") + header + payload
