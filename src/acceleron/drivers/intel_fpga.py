"""Intel FPGA cards (PAC Arria10, N3000, D5005, OFS, integrated Xeon+FPGA).

Both driver stacks are read (docs/design/hardware.md §3): the kernel's DFL layout
(``fpga_region/region*/dfl-fme.*``, PR regions with ``compat_id``) and the older
OPAE ``intel-fpga`` layout (``fpga/intel-fpga-dev.*/intel-fpga-fme.*/pr/interface_id``).
Each PF becomes one device with one ``region<i>`` deployable per PR region. The
region type is the interface uuid; the functions are the ``afu_id`` of the ports;
the attach handles are the VFs holding a port, or the PF for a port it kept. The
FME's ``bitstream_id`` is the static FPGA interface manager's (FIM), not what a
region holds: it is the attribute ``fim_bitstream_id``, and the deployable's
``bitstream_id`` stays what Acceleron loaded.
A card whose FPGA stack shows nothing (bound to vfio-pci, say) is still reported,
as one ``device`` deployable with the PF as its handle, in use on the host when the
card is bound to vfio-pci (a VM most likely has it).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path

from oslo_config import cfg

from acceleron.drivers import command, gbs
from acceleron.drivers.base import CleanedByProgramming
from acceleron.drivers.errors import BitstreamError, TargetNotFound
from acceleron.drivers.health import EventHold, hex_value, pci_health, scoped, worst
from acceleron.drivers.sysfs import (
    INTEL_FPGA,
    PciFunction,
    Sysfs,
    classify,
    make_device,
    model_name,
    normalize_uuid,
    owning_function,
    passed_through,
    pci_handle,
    read_function,
    scan,
    still_present,
    suffix_index,
    virtual_functions,
)
from acceleron.vocabulary import DEGRADED, UNHEALTHY, AttachHandle, Deployable, Device, Health

LOG = logging.getLogger(__name__)

# PF and VF device ids -> family name used in traits (CUSTOM_FPGA_INTEL_<MODEL>).
MODELS = {
    "09c4": "PAC_ARRIA10",
    "09c5": "PAC_ARRIA10",
    "0b30": "PAC_N3000",
    "0b31": "PAC_N3000",
    "0b2b": "PAC_D5005",
    "0b2c": "PAC_D5005",
    "bcce": "OFS",
    "bccf": "OFS",
    "bcc0": "XEON_FPGA",
    "bcc1": "XEON_FPGA",
    "bcbd": "XEON_FPGA",
    "bcbf": "XEON_FPGA",
}
# Device id -> the memory family on the card (PAC Arria10, N3000 and D5005 carry DDR4);
# the FME does not say, and OFS or integrated parts vary.
MEMORY = dict.fromkeys(("09c4", "09c5", "0b30", "0b31", "0b2b", "0b2c"), "DDR")


@dataclasses.dataclass(frozen=True)
class Fme:
    """What the FPGA management engine of a PF says, in either layout."""

    layout: str  # "dfl" or "opae"
    region_types: tuple[str | None, ...]  # per PR region, in order; None when unreadable
    bitstream_id: str | None
    bitstream_metadata: str | None
    ports_num: int | None


@dataclasses.dataclass(frozen=True)
class Port:
    """A port (where an AFU lives) and the PCI function that carries it."""

    address: str
    afu_id: str | None


class IntelFpgaDriver(CleanedByProgramming):
    """Intel FPGAs from sysfs; programs PR regions with a configurable tool (fpgaconf)."""

    name = "intel_fpga"

    def __init__(self, conf: cfg.ConfigOpts, root: Path) -> None:
        self.conf = conf
        self.sysfs = Sysfs(root)
        self.events = EventHold(conf.agent.health_event_hold)

    def discover(self) -> list[Device]:
        functions = scan(self.sysfs)
        wanted = self._fpga_addresses(functions)
        devices = (self._device(fn) for fn in functions if fn.address in wanted)
        return [device for device in devices if device is not None]

    def _fpga_addresses(self, functions: Sequence[PciFunction]) -> set[str]:
        """PFs with an Intel FPGA id, plus any PF an fpga class device sits under."""
        found = {fn.address for fn in functions if classify(fn) == INTEL_FPGA}
        for cls in ("fpga_region", "fpga"):
            for entry in self.sysfs.children(self.sysfs.path("sys/class", cls), ""):
                owner = owning_function(self.sysfs, entry)
                if owner is not None:
                    found.add(owner)
        top_level = {fn.address for fn in functions if not fn.is_vf}
        return found & top_level

    def _device(self, fn: PciFunction) -> Device | None:
        """The card's tree; None when it vanished while being read (its FPGA stack
        gone, it would otherwise look like a card without one)."""
        fme = read_fme(self.sysfs, fn.path)
        vfs = virtual_functions(self.sysfs, fn)
        if fme is None:
            deployables: tuple[Deployable, ...] = (self._whole_device(fn),)
        else:
            ports = read_ports(self.sysfs, fn, vfs)
            deployables = tuple(_regions(fme, ports, MEMORY.get(fn.device)))
        if not still_present(self.sysfs, fn):
            return None
        return make_device(
            fn,
            type="FPGA",
            driver=self.name,
            model=model_name(MODELS, fn.device),
            vendor_board_info=_board(fme),
            deployables=deployables,
        )

    def _whole_device(self, fn: PciFunction) -> Deployable:
        """The PF alone; in use on the host when bound to vfio-pci (a VM has it)."""
        LOG.info("FPGA %s shows no FME (kernel driver %s); reporting the PF", fn.address, fn.driver)
        return Deployable(
            key="device",
            kind="device",
            num_accelerators=1,
            attributes={"kernel_driver": fn.driver},
            attach_handles=(pci_handle(fn.address, in_use=passed_through(fn)),),
        )

    def health(self, device: Device) -> Health:
        """PCI and AER, then the FPGA's own error registers (DFL layout): the FME's
        ``errors/`` (``catfatal_errors`` not zero: unhealthy; ``fme_errors``,
        ``nonfatal_errors``, ``pcie0_errors``, ``pcie1_errors``: degraded) for the card,
        and each port's ``errors/errors`` for the region the port belongs to (unhealthy:
        the port is held in reset until the error is cleared). ``first_error`` is quoted."""
        found = [pci_health(self.sysfs, device, self.events)]
        pf = self.sysfs.resolve(self.sysfs.path("sys/bus/pci/devices", device.pci_address))
        if pf is None:
            return worst(found)
        fme_errors = next(
            (
                fme / "errors"
                for region in self.sysfs.children(pf / "fpga_region", "region")
                for fme in self.sysfs.children(region, "dfl-fme.")
            ),
            None,
        )
        if fme_errors is not None:
            found.append(_fme_health(self.sysfs, fme_errors, device.pci_address))
        regions = sum(1 for dep in device.deployables if dep.kind == "region")
        vfs = [
            vf
            for link in self.sysfs.children(pf, "virtfn")
            if suffix_index(link.name) is not None and (vf := self.sysfs.resolve(link))
        ]
        ports: list[Path | None] = [*_port_paths(self.sysfs, pf)]
        ports += [next(iter(_port_paths(self.sysfs, vf)), None) for vf in vfs]
        for index, port in enumerate(ports):
            if port is None or not regions:
                continue
            errors = hex_value(self.sysfs.read(port / "errors/errors"))
            if errors:
                first = self.sysfs.read(port / "errors/first_error") or "unknown"
                key = f"region{min(index, regions - 1)}"
                reason = f"FPGA port {port.name} reports errors {errors:#x} (first {first})"
                found.append(scoped(key, [Health(UNHEALTHY, reason)]))
        return worst(found)

    def program(self, device: Device, deployable_key: str, bitstream: Path) -> None:
        """Check the image fits the region, then run ``[intel_fpga] program_command``."""
        region = self._current_region(device, deployable_key)
        header = gbs.read_header(bitstream)
        if region.region_type is not None and header.interface_uuid != region.region_type:
            raise BitstreamError(
                f"bitstream {bitstream.name} is built for interface {header.interface_uuid}, "
                f"but region {deployable_key} of {device.pci_address} is {region.region_type}"
            )
        opts = self.conf.intel_fpga
        values = command.pci_values(device.pci_address, bitstream)
        command.run(
            opts.program_command,
            {**values, "region": deployable_key.removeprefix("region")},
            opts.program_timeout,
        )

    def _current_region(self, device: Device, key: str) -> Deployable:
        fn = read_function(self.sysfs, device.pci_address)
        current = self._device(fn) if fn is not None else None
        if current is None:
            raise TargetNotFound(f"FPGA {device.pci_address} is not on this host any more")
        for dep in current.deployables:
            if dep.key == key and dep.kind == "region":
                return dep
        raise TargetNotFound(f"FPGA {device.pci_address} has no programmable region {key!r}")


# ---------------------------------------------------------------------------
# Reading the FPGA stack


def read_fme(sysfs: Sysfs, pf: Path) -> Fme | None:
    """The FME of a PF in the DFL layout, else the OPAE one; None when neither is there."""
    return _dfl_fme(sysfs, pf) or _opae_fme(sysfs, pf)


def _dfl_fme(sysfs: Sysfs, pf: Path) -> Fme | None:
    for region in sysfs.children(pf / "fpga_region", "region"):
        for fme in sysfs.children(region, "dfl-fme."):
            return Fme(
                layout="dfl",
                region_types=_dfl_region_types(sysfs, fme),
                bitstream_id=sysfs.read(fme / "bitstream_id"),
                bitstream_metadata=sysfs.read(fme / "bitstream_metadata"),
                ports_num=sysfs.read_int(fme / "ports_num"),
            )
    return None


def _dfl_region_types(sysfs: Sysfs, fme: Path) -> tuple[str | None, ...]:
    """compat_id of each PR region under ``dfl-fme-region.*``; ``dfl-fme-mgr.*/compat_id``
    (the proposed new place) when the region has none, or when no region is listed."""
    manager = next(
        (
            value
            for mgr in sysfs.children(fme, "dfl-fme-mgr.")
            if (value := normalize_uuid(sysfs.read(mgr / "compat_id")))
        ),
        None,
    )
    types: list[str | None] = []
    for holder in sysfs.children(fme, "dfl-fme-region."):
        for region in sysfs.children(holder / "fpga_region", "region"):
            types.append(normalize_uuid(sysfs.read(region / "compat_id")) or manager)
    return tuple(types) if types else (manager,)


def _opae_fme(sysfs: Sysfs, pf: Path) -> Fme | None:
    for dev in sysfs.children(pf / "fpga", "intel-fpga-dev."):
        for fme in sysfs.children(dev, "intel-fpga-fme."):
            return Fme(
                layout="opae",
                region_types=(normalize_uuid(sysfs.read(fme / "pr/interface_id")),),
                bitstream_id=sysfs.read(fme / "bitstream_id"),
                bitstream_metadata=sysfs.read(fme / "bitstream_metadata"),
                ports_num=sysfs.read_int(fme / "ports_num"),
            )
    return None


def read_ports(sysfs: Sysfs, pf: PciFunction, vfs: Sequence[PciFunction]) -> list[Port]:
    """Ports kept by the PF, then one per VF (a VF without a readable port still
    counts: it is the handle, the AFU is just unknown)."""
    return [
        Port(address, None if port is None else normalize_uuid(sysfs.read(port / "afu_id")))
        for address, port in _ports(sysfs, pf, vfs)
    ]


def _ports(
    sysfs: Sysfs, pf: PciFunction, vfs: Sequence[PciFunction]
) -> list[tuple[str, Path | None]]:
    ports: list[tuple[str, Path | None]] = [(pf.address, p) for p in _port_paths(sysfs, pf.path)]
    for vf in vfs:
        paths = _port_paths(sysfs, vf.path)
        ports.append((vf.address, paths[0] if paths else None))
    return ports


def _fme_health(sysfs: Sysfs, errors: Path, address: str) -> Health:
    first = sysfs.read(errors / "first_error") or "unknown"
    fatal = hex_value(sysfs.read(errors / "catfatal_errors"))
    if fatal:
        return Health(
            UNHEALTHY, f"FPGA {address}: catastrophic/fatal errors {fatal:#x} (first {first})"
        )
    for name in ("fme_errors", "nonfatal_errors", "pcie0_errors", "pcie1_errors"):
        value = hex_value(sysfs.read(errors / name))
        if value:
            return Health(DEGRADED, f"FPGA {address}: {name} {value:#x} (first {first})")
    return Health()


def _port_paths(sysfs: Sysfs, path: Path) -> list[Path]:
    """Every port directory under a function, DFL then OPAE layout."""
    return [
        port
        for region in sysfs.children(path / "fpga_region", "region")
        for port in sysfs.children(region, "dfl-port.")
    ] + [
        port
        for dev in sysfs.children(path / "fpga", "intel-fpga-dev.")
        for port in sysfs.children(dev, "intel-fpga-port.")
    ]


# ---------------------------------------------------------------------------
# Building the tree


def _regions(fme: Fme, ports: Sequence[Port], memory_type: str | None) -> list[Deployable]:
    """One deployable per PR region. Ports map to regions by order; when there are
    fewer regions than ports (the usual single region), the rest share the last one."""
    per_region: list[list[Port]] = [[] for _ in fme.region_types]
    for index, port in enumerate(ports):
        per_region[min(index, len(per_region) - 1)].append(port)
    return [
        _region(index, region_type, fme, members, memory_type)
        for index, (region_type, members) in enumerate(
            zip(fme.region_types, per_region, strict=True)
        )
    ]


def _region(
    index: int, region_type: str | None, fme: Fme, ports: list[Port], memory_type: str | None
) -> Deployable:
    handles: dict[str, AttachHandle] = {}
    for port in ports:
        handles.setdefault(port.address, pci_handle(port.address))
    functions = dict.fromkeys(p.afu_id for p in ports if p.afu_id is not None)
    return Deployable(
        key=f"region{index}",
        kind="region",
        num_accelerators=len(handles),
        programmable=True,
        region_type=region_type,
        function_uuids=tuple(functions),
        memory_type=memory_type,
        attributes={
            "layout": fme.layout,
            "fim_bitstream_id": fme.bitstream_id,
            "bitstream_metadata": fme.bitstream_metadata,
            "ports_num": fme.ports_num,
        },
        attach_handles=tuple(handles.values()),
    )


def _board(fme: Fme | None) -> dict[str, str | int | None]:
    if fme is None:
        return {}
    return {
        "layout": fme.layout,
        "fim_bitstream_id": fme.bitstream_id,
        "bitstream_metadata": fme.bitstream_metadata,
        "ports_num": fme.ports_num,
    }
