"""The host report: what an agent sends, and the only contract between agent and API.

An agent sends one full, idempotent report of its host with
``PUT /v2/hosts/{hostname}/report`` (microversion 2.5): every device its
drivers found, as the frozen dataclasses of ``acceleron.drivers.base``. The API
validates it (``from_json``) and reconciles its inventory with it. Sending the
same report twice changes nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import Any

import orjson
import pydantic

from acceleron.drivers.base import DEVICE_TYPES, HANDLE_TYPES, KINDS, Device, walk
from acceleron.exceptions import InvalidInput

REPORT_VERSION = 1


@dataclasses.dataclass(frozen=True)
class HostReport:
    hostname: str
    agent_version: str
    devices: tuple[Device, ...]
    report_version: int = REPORT_VERSION

    def digest(self) -> str:
        """A stable hash of the report's content: equal reports have equal digests."""
        return hashlib.sha256(orjson.dumps(to_json(self), option=orjson.OPT_SORT_KEYS)).hexdigest()


_ADAPTER = pydantic.TypeAdapter(HostReport)


def to_json(report: HostReport) -> dict[str, Any]:
    return dataclasses.asdict(report)


def from_json(data: Any) -> HostReport:
    """Validate a report received as JSON; InvalidInput names what is wrong and where."""
    try:
        report = _ADAPTER.validate_python(data)
    except pydantic.ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidInput(f"Invalid host report: {where}: {first['msg']}.") from error
    if report.report_version != REPORT_VERSION:
        raise InvalidInput(
            f"Report version {report.report_version} is not understood: this API reads "
            f"version {REPORT_VERSION}. Upgrade the API before the agents."
        )
    check(report.devices)
    return report


def check(devices: Sequence[Device]) -> None:
    """Rules a report must follow beyond its types: known enumerations, unique keys."""
    addresses: set[str] = set()
    for index, device in enumerate(devices):
        where = f"devices.{index} ({device.pci_address})"
        if device.pci_address in addresses:
            raise InvalidInput(f"Invalid host report: {where}: PCI address reported twice.")
        addresses.add(device.pci_address)
        if device.type not in DEVICE_TYPES:
            raise InvalidInput(f"Invalid host report: {where}: unknown type {device.type!r}.")
        keys: set[str] = set()
        for dep in walk(device.deployables):
            if dep.key in keys:
                raise InvalidInput(f"Invalid host report: {where}: deployable {dep.key!r} twice.")
            keys.add(dep.key)
            if dep.kind not in KINDS:
                raise InvalidInput(f"Invalid host report: {where}: unknown kind {dep.kind!r}.")
            handles = [h.address for h in dep.attach_handles]
            if len(set(handles)) != len(handles):
                raise InvalidInput(
                    f"Invalid host report: {where}: deployable {dep.key!r} repeats a handle."
                )
            for handle in dep.attach_handles:
                if handle.type not in HANDLE_TYPES:
                    raise InvalidInput(
                        f"Invalid host report: {where}: unknown handle type {handle.type!r}."
                    )
