"""The driver contract: what a driver reports and what it can be asked to do.

Drivers return plain frozen dataclasses, a tree per physical card:

    Device (keyed by PCI address)
      Deployable (region, VF pool, vGPU type, MIG profile, or the device itself)
        Deployable ... (children, when the hardware nests)
        AttachHandle (PCI function, mdev, MIG instance: what a workload gets)

They store nothing and know no HTTP. Everything a driver reads comes from under
its ``root`` directory (``/`` on a real host, a fake sysfs tree in tests).
``spec004_view()`` renders the same data as spec 004's discover() dictionary.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

# Device types (spec 004 "type"), as upstream names them, plus PCI for the generic driver.
DEVICE_TYPES = ("FPGA", "GPU", "QAT", "AICHIP", "NIC", "SSD", "PCI")
# Deployable kinds: the shapes of the tree.
KINDS = ("device", "region", "vf_pool", "vgpu_type", "mig_profile")
# Attach handle types: PCI and MDEV as upstream; MIG is Acceleron's; TEST_PCI from the fake driver.
HANDLE_TYPES = ("PCI", "MDEV", "MIG", "TEST_PCI")
# Health states, best first: a device or deployable that is unhealthy takes no new work.
HEALTHY, DEGRADED, UNHEALTHY = "healthy", "degraded", "unhealthy"
HEALTH_STATES = (HEALTHY, DEGRADED, UNHEALTHY)


@dataclasses.dataclass(frozen=True)
class Health:
    """What the hardware says about a device's health: ``healthy``, ``degraded`` (it
    works, an operator should look) or ``unhealthy`` (nothing new may land on it), with
    the reason. ``deployables`` holds the faults scoped to one deployable by its key (an
    FPGA port's region, a MIG profile whose GPU instance failed)."""

    state: str = HEALTHY
    reason: str | None = None
    deployables: Mapping[str, Health] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class AttachHandle:
    """Something a workload is given: a PCI function, an mdev or a MIG instance."""

    type: str  # one of HANDLE_TYPES
    address: str  # BDF, mdev uuid or MIG uuid; unique within its deployable
    # Upstream's attach_handle_info: PCI {domain, bus, device, function}; MDEV adds
    # asked_type and vgpu_mark; MIG {gpu_uuid, mig_uuid, ...}. Values are strings.
    info: Mapping[str, str] = dataclasses.field(default_factory=dict)
    in_use: bool = False  # already in use on the host (e.g. an mdev that exists)


@dataclasses.dataclass(frozen=True)
class Deployable:
    """A node of the tree. ``key`` is stable across scans and unique within the device."""

    key: str  # e.g. "region0", "vf_pool", "vgpu/nvidia-222", "mig/1g.10gb"
    kind: str  # one of KINDS
    num_accelerators: int  # how many workloads it can serve at once
    # What the deployable is an accelerator of, for the resource class
    # CUSTOM_ACCELERATOR_<TYPE>; defaults to the device's type.
    accelerator_type: str | None = None
    programmable: bool = False  # a region that can be (re)programmed
    region_type: str | None = None  # region type / interface uuid, 32 lower hex (FPGA)
    bitstream_id: str | None = None  # what is loaded: an id the vendor reports
    function_uuids: tuple[str, ...] = ()  # functions it implements (AFU ids), 32 lower hex
    memory_mb: int | None = None  # device-local memory, when the driver knows it
    # Extra traits the driver asks for beyond those derived from the fields above
    # (e.g. a vGPU type's CUSTOM_NVIDIA_1EB8_T4_2B); Placement-valid names.
    traits: tuple[str, ...] = ()
    # Free-form facts shown to operators (spec 003 attributes); values may nest.
    attributes: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    attach_handles: tuple[AttachHandle, ...] = ()
    children: tuple[Deployable, ...] = ()


@dataclasses.dataclass(frozen=True)
class Device:
    """One physical card, keyed by its PCI address (the PF's, for SR-IOV devices)."""

    pci_address: str  # canonical lower-case BDF, "dddd:bb:ss.f" (domain 4 to 8 hex digits)
    type: str  # one of DEVICE_TYPES
    vendor_id: str  # PCI vendor id, 4 lower hex digits without 0x, e.g. "8086"
    vendor_name: str  # upper-case name for traits, e.g. "INTEL", "NVIDIA", "XILINX"
    product_id: str  # PCI device id, 4 lower hex digits, e.g. "09c4"
    model: str  # product or family for traits, upper case, e.g. "PAC_ARRIA10", "H100"
    driver: str  # the Acceleron driver that found it, e.g. "intel_fpga"
    numa_node: int | None = None  # None when the kernel reports -1 (unknown)
    std_board_info: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    vendor_board_info: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    deployables: tuple[Deployable, ...] = ()
    # Filled in by the agent from the driver's health() at each scan.
    health: Health = dataclasses.field(default_factory=Health)


@runtime_checkable
class Driver(Protocol):
    """What every driver does. Constructed as ``cls(conf, root)``."""

    name: str

    def discover(self) -> Sequence[Device]:
        """Every device this driver manages on the host. Never raises for one bad device:
        a device that vanishes or cannot be read mid-scan is left out (and logged)."""
        ...

    def health(self, device: Device) -> Health:
        """The device's health now, from what the hardware exposes. Never raises for a
        fault: a device it cannot read is itself the fault."""
        ...


@runtime_checkable
class Watching(Protocol):
    """A driver that hears of faults as they happen (NVML's XID events): it records them
    for health() and calls ``notify`` so that the agent scans at once."""

    def start_watch(self, notify: Callable[[], None]) -> None: ...

    def stop_watch(self) -> None: ...


@runtime_checkable
class Programmable(Protocol):
    """A driver whose regions can be loaded with a bitstream."""

    def program(self, device: Device, deployable_key: str, bitstream: Path) -> None:
        """Load ``bitstream`` into the region ``deployable_key`` of ``device``."""
        ...


@runtime_checkable
class Mediated(Protocol):
    """A driver that makes vGPUs on request: an mdev, or a VF given a vGPU type. The
    handle is one the driver reported; both calls are idempotent."""

    def create_mdev(self, device: Device, handle: AttachHandle) -> None: ...

    def remove_mdev(self, device: Device, handle: AttachHandle) -> None: ...


def walk(deployables: Sequence[Deployable]) -> list[Deployable]:
    """Every deployable of a tree, parents before children."""
    out: list[Deployable] = []
    for dep in deployables:
        out.append(dep)
        out.extend(walk(dep.children))
    return out


def spec004_view(devices: Sequence[Device]) -> dict[str, dict[str, Any]]:
    """Spec 004's discover() dictionary: keyed by PCI BDF, with type/vendor/product
    and, per region, region-type-uuid, bitstream-id and function-uuid."""
    view: dict[str, dict[str, Any]] = {}
    for device in devices:
        regions = [
            {
                "region-type-uuid": dep.region_type,
                "bitstream-id": dep.bitstream_id,
                "function-uuid": dep.function_uuids[0] if dep.function_uuids else None,
            }
            for dep in walk(device.deployables)
            if dep.kind == "region"
        ]
        view[device.pci_address] = {
            "type": device.type,
            "vendor": device.vendor_name,
            "product": device.model,
            "regions": regions,
        }
    return view
