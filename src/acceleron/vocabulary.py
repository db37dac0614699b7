"""The shared vocabulary: what a host has, as drivers report it and the API stores it.

Drivers return these plain frozen dataclasses, a tree per physical card:

    Device (keyed by PCI address)
      Deployable (region, VF pool, vGPU type, MIG profile, or the device itself)
        Deployable ... (children, when the hardware nests)
        AttachHandle (PCI function, mdev, MIG instance: what a workload gets)

The agent sends them in its host report (``acceleron.report``); the service and the
API read the same names and enumerations. Nothing here does I/O, so the drivers, the
agent, the service and the API all import it without importing each other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any

from acceleron.failfast import FailFast

# How long each reported string may be: the width of the column it is stored in.
# db/models.py declares its columns with these, and the report is checked against them
# (``acceleron.report``), so a report that passes always fits the database.
UUID_LEN = 36
NAME_LEN = 255
WIDTHS = {
    "hostname": NAME_LEN,  # hosts.hostname
    "agent_version": 64,  # hosts.agent_version
    "pci_address": 32,  # devices.pci_address
    "pcie_switch": 32,  # devices.pcie_switch (a PCI address)
    "nvlink_domain": 64,  # devices.nvlink_domain
    "type": 32,  # devices.type
    "vendor_id": 16,  # devices.vendor
    "vendor_name": 64,  # devices.vendor_name
    "product_id": 16,  # devices.product_id
    "model": NAME_LEN,  # devices.model
    "driver": 64,  # devices.driver_name, deployables.driver_name
    "key": NAME_LEN,  # deployables.key
    "kind": 32,  # deployables.kind
    "accelerator_type": 32,  # deployables.accelerator_type
    "memory_type": 32,  # deployables.memory_type
    "region_type": 64,  # deployables.region_type
    "bitstream_id": UUID_LEN,  # deployables.bitstream_id
    "function_uuids": 64,  # deployables.function_uuid (each of them)
    "traits": NAME_LEN,  # Placement's longest name (held as JSON)
    "address": NAME_LEN,  # attach_handles.address
}

# Device types (spec 004 "type"), as upstream names them, plus PCI for the generic driver.
DEVICE_TYPES = ("FPGA", "GPU", "QAT", "AICHIP", "NIC", "SSD", "PCI")
# Deployable kinds: the shapes of the tree.
# mig_gpu: a GPU carved on demand, its MIG instances made at bind (acceleron.mig.units).
KINDS = ("device", "region", "vf_pool", "vgpu_type", "mig_profile", "mig_gpu")
# Attach handle types: PCI and MDEV as upstream; MIG is Acceleron's; TEST_PCI from the fake driver.
HANDLE_TYPES = ("PCI", "MDEV", "MIG", "TEST_PCI")
# Health states, best first: a device or deployable that is unhealthy takes no new work.
HEALTHY, DEGRADED, UNHEALTHY = "healthy", "degraded", "unhealthy"
HEALTH_STATES = (HEALTHY, DEGRADED, UNHEALTHY)
_HEALTH_RANK = {state: index for index, state in enumerate(HEALTH_STATES)}  # best first


def health_rank(state: str | None) -> int:
    """0 for healthy, 1 degraded, 2 unhealthy; an unknown word (or none) counts as degraded."""
    return _HEALTH_RANK.get(state or "", _HEALTH_RANK[DEGRADED])


@dataclasses.dataclass(frozen=True)
class Health:
    """What the hardware says about a device's health: ``healthy``, ``degraded`` (it
    works, an operator should look) or ``unhealthy`` (nothing new may land on it), with
    the reason. ``deployables`` holds the faults scoped to one deployable by its key (an
    FPGA port's region, a MIG profile whose GPU instance failed); a deployable's
    ``handles`` those scoped to one of its attach handles by its address (the GPU
    instance in one slot of a GPU carved on demand: report format 1.3)."""

    state: str = HEALTHY
    reason: str | None = None
    deployables: Annotated[Mapping[str, Health], FailFast] = dataclasses.field(default_factory=dict)
    handles: Annotated[Mapping[str, Health], FailFast] = dataclasses.field(
        default_factory=dict, metadata={"since": (1, 3)}
    )


@dataclasses.dataclass(frozen=True)
class AttachHandle:
    """Something a workload is given: a PCI function, an mdev or a MIG instance."""

    type: str  # one of HANDLE_TYPES
    address: str  # BDF, mdev uuid or MIG uuid; unique within its deployable
    # Upstream's attach_handle_info: PCI {domain, bus, device, function}; MDEV adds
    # asked_type and vgpu_mark; MIG {gpu_uuid, mig_uuid, ...}. Values are strings.
    info: Annotated[Mapping[str, str], FailFast] = dataclasses.field(default_factory=dict)
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
    # The functions it implements (AFU ids), 32 lower hex each.
    function_uuids: Annotated[tuple[str, ...], FailFast] = ()
    memory_mb: int | None = None  # device-local memory, when the driver knows it
    # Its kind, naming the memory class (spec 001): DDR, HBM, GDDR... (drivers.memory);
    # None when the driver cannot tell (the class is then named after the accelerator type).
    memory_type: str | None = None
    # Extra traits the driver asks for beyond those derived from the fields above
    # (e.g. a vGPU type's CUSTOM_NVIDIA_1EB8_T4_2B); Placement-valid names.
    traits: Annotated[tuple[str, ...], FailFast] = ()
    # Free-form facts shown to operators (spec 003 attributes); values may nest.
    attributes: Annotated[Mapping[str, Any], FailFast] = dataclasses.field(default_factory=dict)
    attach_handles: Annotated[tuple[AttachHandle, ...], FailFast] = ()
    children: Annotated[tuple[Deployable, ...], FailFast] = ()


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
    # Where it sits (report format 1.1; a reader of 1.0 ignores them): the PCI address of
    # the upstream port of its nearest PCIe switch (drivers.sysfs.pcie_switch), and the
    # name its NVLink peers on the host share (drivers.nvml.nvlink_domains). None: it has
    # none (it hangs off a root port; it has no NVLink peer), or the driver cannot tell.
    pcie_switch: str | None = dataclasses.field(default=None, metadata={"since": (1, 1)})
    nvlink_domain: str | None = dataclasses.field(default=None, metadata={"since": (1, 1)})
    std_board_info: Annotated[Mapping[str, Any], FailFast] = dataclasses.field(default_factory=dict)
    vendor_board_info: Annotated[Mapping[str, Any], FailFast] = dataclasses.field(
        default_factory=dict
    )
    deployables: Annotated[tuple[Deployable, ...], FailFast] = ()
    # Filled in by the agent from the driver's health() at each scan.
    health: Health = dataclasses.field(default_factory=Health)


def walk(deployables: Sequence[Deployable]) -> list[Deployable]:
    """Every deployable of a tree, parents before children."""
    out: list[Deployable] = []
    for dep in deployables:
        out.append(dep)
        out.extend(walk(dep.children))
    return out


def worst_verdict(found: Iterable[Health]) -> Health:
    """One verdict of several (no scopes): the worst state, with the reasons of every
    verdict in that state; an unknown state counts as, and is told as, degraded."""
    found = list(found)
    state = max((h.state for h in found), key=health_rank, default=HEALTHY)
    reasons = [h.reason for h in found if h.state == state and h.reason]
    shown = state if state in _HEALTH_RANK else DEGRADED
    return Health(shown, "; ".join(dict.fromkeys(reasons)) or None)
