"""The generic PCI driver: any device an operator lists in ``[pci] device_spec``.

The syntax is Nova's ``device_spec`` (formerly ``passthrough_whitelist``): each
value is a JSON dict, or a list of dicts, with ``vendor_id`` and ``product_id`` (hex
or ``*``), ``address`` (a glob string such as ``"*:0a:00.*"`` or a dict of regexes
for domain/bus/slot/function) or ``devname`` (a network interface), and any other
key as a tag. An exact ``address`` naming an SR-IOV PF matches that PF's VFs.

Nothing is reported without a spec. A matched function becomes a device with one
``device`` deployable (itself as the handle); matched VFs are reported under their
PF as one ``vf_pool`` deployable instead. The device type comes from the PCI class
(``NIC``, ``GPU``, ``SSD``...) or the §1.2 tables, ``PCI`` when nothing better is
known. Tags are kept as attributes; a ``traits`` tag (comma-separated) adds traits
and a ``device_type`` tag overrides the type.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import os_traits
from oslo_config import cfg

from acceleron.drivers.errors import DriverConfigError
from acceleron.drivers.health import EventHold, pci_health
from acceleron.drivers.sysfs import (
    Bdf,
    CleanedByReset,
    PciFunction,
    Sysfs,
    make_device,
    model_name,
    normalize_hex_id,
    parse_bdf,
    pci_handle,
    scan,
    trait_part,
)
from acceleron.vocabulary import DEVICE_TYPES, Deployable, Device, Health

_FIELDS = ("domain", "bus", "slot", "function")
_SPECIAL_TAGS = ("traits", "device_type")


# ---------------------------------------------------------------------------
# device_spec parsing and matching


@dataclasses.dataclass(frozen=True)
class AddressSpec:
    """One address pattern: per field either ``None`` (any), an int (glob), or a regex."""

    globs: tuple[int | None, ...] = (None, None, None, None)
    regexes: tuple[re.Pattern[str], ...] | None = None
    exact: bool = False  # names one function exactly (may then stand for its VFs)

    def match(self, bdf: Bdf) -> bool:
        values = (bdf.domain, bdf.bus, bdf.slot, bdf.function)
        if self.regexes is not None:
            texts = str(bdf).replace(".", ":").split(":")
            return all(rx.fullmatch(text) for rx, text in zip(self.regexes, texts, strict=True))
        return all(g is None or g == v for g, v in zip(self.globs, values, strict=True))


def parse_address(value: Any) -> AddressSpec:
    """``"[[[domain]:]bus]:][slot][.[function]]"`` with ``*`` wildcards, or a regex dict."""
    if isinstance(value, dict):
        unknown = set(value) - set(_FIELDS)
        if unknown:
            raise DriverConfigError(f"device_spec address has unknown keys {sorted(unknown)}")
        try:
            regexes = tuple(re.compile(str(value.get(f, ".*"))) for f in _FIELDS)
        except re.error as error:
            raise DriverConfigError(f"device_spec address regex is invalid: {error}") from error
        return AddressSpec(regexes=regexes)
    if not isinstance(value, str):
        raise DriverConfigError(f"device_spec address must be a string or a dict: {value!r}")
    head, _, func = value.strip().partition(".")
    parts = head.split(":")
    if len(parts) > 3:
        raise DriverConfigError(f"device_spec address {value!r} has too many ':' fields")
    fields = ["*"] * (3 - len(parts)) + parts + [func]
    globs = tuple(_glob_field(f, value) for f in fields)
    return AddressSpec(globs=globs, exact=None not in globs)


def _glob_field(text: str, whole: str) -> int | None:
    text = text.strip()
    if text in ("", "*"):
        return None
    try:
        return int(text, 16)
    except ValueError:
        raise DriverConfigError(f"device_spec address {whole!r}: {text!r} is not hex") from None


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    vendor_id: str | None = None  # None: any
    product_id: str | None = None
    address: AddressSpec | None = None
    devname: str | None = None
    tags: Mapping[str, str] = dataclasses.field(default_factory=dict)


def parse_device_specs(values: Iterable[str]) -> list[DeviceSpec]:
    """Every ``[pci] device_spec`` value (JSON dict or list of dicts) as DeviceSpecs."""
    specs = []
    for value in values:
        try:
            loaded = json.loads(value)
        except json.JSONDecodeError as error:
            raise DriverConfigError(f"[pci] device_spec {value!r} is not JSON: {error}") from error
        for item in loaded if isinstance(loaded, list) else [loaded]:
            specs.append(_parse_one(item))
    return specs


def _parse_one(item: Any) -> DeviceSpec:
    if not isinstance(item, dict):
        raise DriverConfigError(f"[pci] device_spec entries must be JSON objects: {item!r}")
    if "address" in item and "devname" in item:
        raise DriverConfigError(f"[pci] device_spec {item!r}: address and devname are exclusive")
    known = ("vendor_id", "product_id", "address", "devname")
    return DeviceSpec(
        vendor_id=_id_field(item, "vendor_id"),
        product_id=_id_field(item, "product_id"),
        address=parse_address(item["address"]) if "address" in item else None,
        devname=str(item["devname"]) if "devname" in item else None,
        tags={k: str(v) for k, v in item.items() if k not in known},
    )


def _id_field(item: Mapping[str, Any], key: str) -> str | None:
    value = item.get(key, "*")
    if value == "*":
        return None
    normalized = normalize_hex_id(str(value))
    if normalized is None or len(normalized) != 4:
        raise DriverConfigError(f"[pci] device_spec {key} {value!r} is not a 4-digit hex id")
    return normalized


# ---------------------------------------------------------------------------
# The driver


@dataclasses.dataclass
class _Owner:
    """A top-level function and what the specs matched on it."""

    fn: PciFunction
    spec: DeviceSpec | None = None  # the spec that matched the function itself
    pool_spec: DeviceSpec | None = None  # the spec that matched (or named) its VFs
    vfs: list[PciFunction] = dataclasses.field(default_factory=list)


class PciDriver(CleanedByReset):
    """Devices listed by ``[pci] device_spec``, typed from their PCI class."""

    name = "pci"

    def __init__(self, conf: cfg.ConfigOpts, root: Path) -> None:
        self.conf = conf
        self.sysfs = Sysfs(root)
        self.events = EventHold(conf.agent.health_event_hold)
        self.specs = parse_device_specs(conf.pci.device_spec)

    def discover(self) -> list[Device]:
        if not self.specs:
            return []
        functions = scan(self.sysfs)
        owners = self._match(functions)
        return [self._device(owner) for owner in owners.values()]

    def _match(self, functions: Sequence[PciFunction]) -> dict[str, _Owner]:
        devnames = self._devnames()
        owners = {fn.address: _Owner(fn) for fn in functions if not fn.is_vf}
        for fn in functions:
            owner = owners.get(fn.physfn or fn.address)
            if owner is None:  # a VF whose PF is gone
                continue
            spec = self._first_match(fn, devnames)
            if fn.is_vf and spec is not None:
                owner.vfs.append(fn)
                owner.pool_spec = owner.pool_spec or spec
            elif not fn.is_vf:
                owner.spec = spec
                owner.pool_spec = owner.pool_spec or self._names_pf(fn)
        return {a: o for a, o in sorted(owners.items()) if o.spec or o.pool_spec}

    def _first_match(self, fn: PciFunction, devnames: Mapping[str, str]) -> DeviceSpec | None:
        for spec in self.specs:
            if spec.vendor_id not in (None, fn.vendor):
                continue
            if spec.product_id not in (None, fn.device):
                continue
            if spec.devname is not None and devnames.get(spec.devname) != fn.address:
                continue
            if spec.address is not None and not self._address_match(spec.address, fn):
                continue
            return spec
        return None

    def _address_match(self, address: AddressSpec, fn: PciFunction) -> bool:
        """An exact PF address stands for the PF's VFs (Nova's parent-address rule)."""
        if fn.is_vf and fn.physfn is not None and self._is_pf_address(address, fn.physfn):
            return True
        if not fn.is_vf and self._is_pf_address(address, fn.address):
            return False
        return address.match(fn.bdf)

    def _is_pf_address(self, address: AddressSpec, pf_address: str) -> bool:
        if not address.exact or not address.match(parse_bdf(pf_address)):
            return False
        totalvfs = self.sysfs.read_int(
            self.sysfs.path("sys/bus/pci/devices", pf_address, "sriov_totalvfs")
        )
        return bool(totalvfs)

    def _names_pf(self, fn: PciFunction) -> DeviceSpec | None:
        """The spec whose exact address names this SR-IOV PF (its pool exists even empty)."""
        for spec in self.specs:
            named = spec.address is not None and self._is_pf_address(spec.address, fn.address)
            if named and spec.vendor_id in (None, fn.vendor):
                return spec
        return None

    def _devnames(self) -> dict[str, str]:
        """Interface name -> PCI address, from ``sys/class/net/<if>/device``."""
        wanted = {s.devname for s in self.specs if s.devname}
        found = {}
        for name in wanted:
            target = self.sysfs.resolve(self.sysfs.path("sys/class/net", name, "device"))
            if target is not None:
                found[name] = target.name
        return found

    def _device(self, owner: _Owner) -> Device:
        fn = owner.fn
        spec = owner.pool_spec or owner.spec
        assert spec is not None
        deployable = _pool(owner.vfs, owner.pool_spec) if owner.pool_spec else _whole(fn, spec)
        fields: dict[str, Any] = {"deployables": (deployable,)}
        if spec.tags.get("device_type", "").upper() in DEVICE_TYPES:
            fields["type"] = spec.tags["device_type"].upper()
        return make_device(fn, driver=self.name, model=model_name({}, fn.device), **fields)

    def health(self, device: Device) -> Health:
        return pci_health(self.sysfs, device, self.events)


def _whole(fn: PciFunction, spec: DeviceSpec) -> Deployable:
    return Deployable(
        key="device",
        kind="device",
        num_accelerators=1,
        traits=_traits(spec),
        attributes=_attributes(spec),
        attach_handles=(pci_handle(fn.address),),
    )


def _pool(vfs: Sequence[PciFunction], spec: DeviceSpec) -> Deployable:
    handles = tuple(pci_handle(vf.address) for vf in vfs)
    return Deployable(
        key="vf_pool",
        kind="vf_pool",
        num_accelerators=len(handles),
        traits=_traits(spec),
        attributes=_attributes(spec),
        attach_handles=handles,
    )


def _attributes(spec: DeviceSpec) -> dict[str, Any]:
    tags = {k: v for k, v in spec.tags.items() if k not in _SPECIAL_TAGS}
    return {"tags": tags} if tags else {}


def _traits(spec: DeviceSpec) -> tuple[str, ...]:
    """A ``traits`` tag: standard os-traits names kept, others made ``CUSTOM_``."""
    names = [t.strip() for t in spec.tags.get("traits", "").split(",") if t.strip()]
    traits = []
    for name in names:
        upper = trait_part(name)
        if upper.startswith("CUSTOM_") or not os_traits.check_traits([upper])[1]:
            traits.append(upper)
        else:
            traits.append(f"CUSTOM_{upper}")
    return tuple(dict.fromkeys(traits))
