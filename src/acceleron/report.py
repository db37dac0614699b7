"""The host report: what an agent sends, and the only contract between agent and API.

An agent sends one full, idempotent report of its host with
``PUT /v2/hosts/{hostname}/report`` (microversion 2.5): every device its
drivers found, as the frozen dataclasses of ``acceleron.vocabulary``. The API
validates it (``from_json``) and reconciles its inventory with it. Sending the
same report twice changes nothing.

The report has a version (``acceleron.formats``): ``report_version`` is its major,
``report_minor`` its minor (a report without one, from an agent older than the minor
field, is a ``.0``). A field a later minor adds is declared with
``dataclasses.field(default=..., metadata={"since": (1, N)})``: a reader that does not
know it ignores it, and ``to_json`` leaves it out for an API that reads an older minor.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Annotated, Any

import orjson
import pydantic

from acceleron import formats
from acceleron.exceptions import InvalidInput
from acceleron.failfast import FailFast
from acceleron.text import has_control
from acceleron.vocabulary import (
    DEVICE_TYPES,
    HANDLE_TYPES,
    KINDS,
    WIDTHS,
    Device,
    Health,
    walk,
    worst_verdict,
)

REPORT_VERSION, REPORT_MINOR = formats.REPORT_VERSION
HANDLE_HEALTH_SINCE: formats.Version = (1, 3)  # ``Health.handles``


@dataclasses.dataclass(frozen=True)
class HostReport:
    hostname: str
    agent_version: str
    devices: Annotated[tuple[Device, ...], FailFast]
    report_version: int = REPORT_VERSION
    report_minor: int = REPORT_MINOR

    @property
    def version(self) -> formats.Version:
        return self.report_version, self.report_minor

    def digest(self) -> str:
        """A stable hash of the report's content: equal reports have equal digests."""
        return hashlib.sha256(orjson.dumps(self, option=orjson.OPT_SORT_KEYS)).hexdigest()


def check_version(data: Any) -> Any:
    """``data`` (a report as JSON) unchanged; UnsupportedFormat when its major is one this
    API does not read, before anything else in it is looked at (another major may have
    another shape)."""
    if isinstance(data, Mapping):
        major = data.get("report_version", REPORT_VERSION)
        minor = data.get("report_minor", 0)
        if type(major) is int and type(minor) is int:
            formats.check_report((major, minor))
        if "report_minor" not in data:  # an agent older than the minor field: a .0
            data = {**data, "report_minor": 0}
    return data


# A report as an API handler takes it: its version checked first.
Incoming = Annotated[HostReport, pydantic.BeforeValidator(check_version)]
_ADAPTER: pydantic.TypeAdapter[HostReport] = pydantic.TypeAdapter(Incoming)


def to_json(report: HostReport, version: formats.Version | None = None) -> dict[str, Any]:
    """The report as JSON data; for a reader of an older minor ``version`` of its major,
    without the fields added since (and saying that minor)."""
    if version is None or version >= report.version:
        return dataclasses.asdict(report)
    if version[0] != report.report_version:
        raise ValueError(
            f"a report of format {formats.show(report.version)} cannot be "
            f"written as {formats.show(version)}"
        )
    if version < HANDLE_HEALTH_SINCE:
        report = dataclasses.replace(
            report,
            devices=tuple(
                dataclasses.replace(d, health=_handles_folded(d.health)) for d in report.devices
            ),
        )
    data: dict[str, Any] = formats.trim(report, version)
    data["report_minor"] = version[1]
    for device in data.get("devices") or ():
        device["deployables"] = _known_kinds(device.get("deployables") or [], version)
    return data


def _handles_folded(health: Health) -> Health:
    """A device's health with each deployable's handle verdicts folded into the
    deployable's own (the worst state, with its reasons): what a reader before report
    1.3, which has no handle health, is told."""
    parts = {
        key: worst_verdict([part, *part.handles.values()])
        for key, part in health.deployables.items()
    }
    return dataclasses.replace(health, deployables=parts)


def newest_kind(report: HostReport) -> formats.Version:
    """The report format its deployables' kinds need (1.0 when every kind is older)."""
    found = [
        formats.KINDS_SINCE.get(d.kind, (1, 0))
        for dev in report.devices
        for d in walk(dev.deployables)
    ]
    return max(found, default=(1, 0))


def _known_kinds(deployables: list[dict[str, Any]], version: formats.Version) -> list[Any]:
    """The deployables (and their children) of kinds a reader of ``version`` knows."""
    kept = []
    for dep in deployables:
        if formats.KINDS_SINCE.get(str(dep.get("kind")), (0, 0)) <= version:
            kept.append({**dep, "children": _known_kinds(dep.get("children") or [], version)})
    return kept


def to_bytes(report: HostReport, version: formats.Version | None = None) -> bytes:
    """The report as a JSON request body (30 times faster than json.dumps(to_json()) when
    it goes in its own version)."""
    if version is None or version >= report.version:
        return orjson.dumps(report)
    return orjson.dumps(to_json(report, version))


def from_json(data: Any) -> HostReport:
    """Validate a report received as JSON; InvalidInput names what is wrong and where."""
    try:
        report = _ADAPTER.validate_python(data)
    except pydantic.ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidInput(f"Invalid host report: {where}: {first['msg']}.") from error
    check(report)
    return report


_TEXT_MAX = 65_535  # attribute values and JSON-held strings
_INT_RANGE = (-1, 2**31 - 1)


def _check_value(value: Any, where: str, limit: int) -> None:
    if isinstance(value, str):
        if len(value) > limit:
            raise InvalidInput(f"Invalid host report: {where}: longer than {limit} characters.")
        if has_control(value, layout=True):
            raise InvalidInput(f"Invalid host report: {where}: control characters.")
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int):
        if not _INT_RANGE[0] <= value <= _INT_RANGE[1]:
            raise InvalidInput(f"Invalid host report: {where}: {value} is out of range.")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            _check_value(key, f"{where}.{key}", 255)
            _check_value(item, f"{where}.{key}", _TEXT_MAX)
    elif isinstance(value, (tuple, list)):
        for index, item in enumerate(value):
            _check_value(item, f"{where}.{index}", limit)


def check_values(obj: Any, where: str = "") -> None:
    """Every string fits its column and holds no control character; every number fits."""
    for field in dataclasses.fields(obj):
        value = getattr(obj, field.name)
        here = f"{where}{field.name}"
        if dataclasses.is_dataclass(value):
            check_values(value, f"{here}.")
        elif isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
            for index, item in enumerate(value):
                check_values(item, f"{here}.{index}.")
        else:
            _check_value(value, here, WIDTHS.get(field.name, _TEXT_MAX))


def check(report: HostReport) -> None:
    """Rules a report must follow beyond its types: values that fit the database (each
    checked once), known enumerations, unique keys."""
    check_values(report)
    addresses: set[str] = set()
    for index, device in enumerate(report.devices):
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
