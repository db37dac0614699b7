"""What NVML says about the GPUs, read once per scan into plain data.

The seam: ``snapshot(lib)`` takes any object with pynvml's functions (``NvmlLib``).
On a host that is the ``pynvml`` module from nvidia-ml-py; in tests it is a fake
that answers from recorded values, no GPU needed. NVML failing to load (no
driver, no library) gives ``None`` and the driver falls back to sysfs; one GPU
failing to answer is left out of the snapshot, never the scan.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import importlib
import logging
import threading
import uuid as uuidlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, cast

from acceleron.drivers.sysfs import format_bdf, normalize_bdf

LOG = logging.getLogger(__name__)
MIB = 1024 * 1024
# NVML constants (nvml.h), so that the seam needs no pynvml to name them.
MEMORY_ERROR_UNCORRECTED = 1  # NVML_MEMORY_ERROR_TYPE_UNCORRECTED
VOLATILE_ECC = 0  # NVML_VOLATILE_ECC: since the driver was loaded
ERROR_TIMEOUT = 10  # NVML_ERROR_TIMEOUT
ERROR_GPU_IS_LOST = 15  # NVML_ERROR_GPU_IS_LOST
EVENT_XID_CRITICAL = 8  # nvmlEventTypeXidCriticalError
NO_INSTANCE = 0xFFFFFFFF  # gpuInstanceId of an event that no GPU instance owns
ERROR_INVALID_ARGUMENT = 2  # NVML_ERROR_INVALID_ARGUMENT: e.g. a link past the last
ERROR_NOT_SUPPORTED = 3  # NVML_ERROR_NOT_SUPPORTED
NVLINK_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS of older bindings (36 in nvidia-ml-py 13)
FABRIC_STATE_COMPLETED = 3  # NVML_GPU_FABRIC_STATE_COMPLETED
NVLINK_DEVICE_TYPE_SWITCH = 2  # NVML_NVLINK_DEVICE_TYPE_SWITCH
# The far end of a link to an NVSwitch NVML names no PCI address for (on HGX H100 boards
# the NVSwitches are not on the host's PCI bus): the GPUs of a host that reach one are
# taken to share it.
NVSWITCH = "nvswitch"
ENGINE_SHARED = 0  # NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
_NO_ADDRESS = "0000:00:00.0"  # a far end NVML fills with zeros: no address known


class NvmlLib(Protocol):
    """The part of pynvml the driver uses (names as in nvidia-ml-py)."""

    NVMLError: type[Exception]
    NVML_GPU_INSTANCE_PROFILE_COUNT: int

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str | bytes: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetName(self, handle: Any) -> str | bytes: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str | bytes: ...
    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetNumaNodeId(self, handle: Any) -> int: ...
    def nvmlDeviceGetMigMode(self, handle: Any) -> Any: ...
    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int: ...
    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> Any: ...
    def nvmlDeviceGetGpuInstanceId(self, handle: Any) -> int: ...
    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: Any, profile: int) -> Any: ...
    def nvmlDeviceGetGpuInstanceRemainingCapacity(self, handle: Any, profile_id: int) -> int: ...
    def nvmlDeviceGetHandleByPciBusId(self, bus_id: str) -> Any: ...
    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any) -> int: ...
    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]: ...
    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter: int) -> int: ...
    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int: ...
    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: Any, link: int) -> Any: ...
    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int: ...
    def nvmlDeviceGetGpuFabricInfoV(self, handle: Any, info: Any) -> Any: ...
    def nvmlEventSetCreate(self) -> Any: ...
    def nvmlDeviceRegisterEvents(self, handle: Any, types: int, event_set: Any) -> None: ...
    def nvmlEventSetWait(self, event_set: Any, timeout_ms: int) -> Any: ...
    def nvmlEventSetFree(self, event_set: Any) -> None: ...

    # GPU and compute instances (a GPU carved on demand: ``acceleron.drivers.nvidia_mig``).
    c_nvmlGpuInstance_t: Any
    c_nvmlComputeInstance_t: Any
    c_nvmlGpuInstancePlacement_t: Any
    NVML_COMPUTE_INSTANCE_PROFILE_COUNT: int

    def nvmlDeviceGetGpuInstances(
        self, handle: Any, profile_id: int, instances: Any, count: Any
    ) -> Any: ...
    def nvmlDeviceGetGpuInstanceById(self, handle: Any, gpu_instance_id: int) -> Any: ...
    def nvmlGpuInstanceGetInfo(self, gpu_instance: Any) -> Any: ...
    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, handle: Any, profile_id: int, placement: Any
    ) -> Any: ...
    def nvmlGpuInstanceDestroy(self, gpu_instance: Any) -> Any: ...
    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, gpu_instance: Any, profile: int, engine_profile: int
    ) -> Any: ...
    def nvmlGpuInstanceCreateComputeInstance(self, gpu_instance: Any, profile_id: int) -> Any: ...
    def nvmlGpuInstanceGetComputeInstances(
        self, gpu_instance: Any, profile_id: int, instances: Any, count: Any
    ) -> Any: ...
    def nvmlComputeInstanceDestroy(self, compute_instance: Any) -> Any: ...
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> Sequence[Any]: ...


@dataclasses.dataclass(frozen=True)
class MigProfile:
    name: str  # e.g. "1g.10gb" (NVML's "MIG 1g.10gb" without the prefix)
    profile_id: int  # the id nvidia-smi prints (not the enumeration index)
    instance_count: int  # most instances of it the GPU can hold
    remaining: int | None  # how many more could be created now
    memory_mb: int | None


@dataclasses.dataclass(frozen=True)
class MigInstance:
    uuid: str  # "MIG-<uuid>", what CUDA_VISIBLE_DEVICES and the attach handle use
    profile: str | None  # the profile name, None when NVML does not say
    gpu_instance_id: int | None
    memory_mb: int | None


@dataclasses.dataclass(frozen=True)
class GpuInstance:
    """A GPU instance as ``nvmlGpuInstanceGetInfo`` describes it, with the uuid of its
    MIG device (None while it has no compute instance)."""

    id: int
    profile_id: int  # the id nvidia-smi prints (``acceleron.mig.geometry.Profile.id``)
    start: int  # the memory slice it starts at (its placement)
    size: int  # memory slices
    mig_uuid: str | None = None


@dataclasses.dataclass(frozen=True)
class NvmlGpu:
    address: str  # canonical BDF, from the pci info struct's integer fields
    product_id: str  # PCI device id, 4 lower hex digits
    name: str  # "NVIDIA H100 80GB HBM3"
    uuid: str  # "GPU-..."
    memory_mb: int | None
    numa_node: int | None
    mig_enabled: bool
    profiles: tuple[MigProfile, ...] = ()
    migs: tuple[MigInstance, ...] = ()
    faults: GpuFaults = dataclasses.field(default_factory=lambda: GpuFaults())
    # The PCI addresses at the far end of its active NVLinks (GPUs, or NVSwitches;
    # ``NVSWITCH`` for NVSwitches NVML gives no address for), and the NVLink fabric it is
    # in where the driver reports one (``<cluster uuid>/<clique id>``); see
    # ``nvlink_domains``.
    nvlink_peers: tuple[str, ...] = ()
    fabric: str | None = None
    # Under MIG: its GPU instances (None: NVML could not list them).
    gpu_instances: tuple[GpuInstance, ...] | None = ()


@dataclasses.dataclass(frozen=True)
class GpuFaults:
    """The GPU's memory health as NVML reports it (None: not supported here)."""

    retired_pages_pending: bool | None = None  # pre-Ampere page retirement awaiting a reset
    remap_pending: bool | None = None  # Ampere and later: row remapping awaiting a reset
    remap_failed: bool | None = None  # a row remapping failed: the memory is out of spares
    ecc_uncorrected_volatile: int | None = None  # uncorrectable ECC errors since the driver loaded


@dataclasses.dataclass(frozen=True)
class NvmlSnapshot:
    driver_version: str | None
    gpus: tuple[NvmlGpu, ...]
    # GPUs sysfs lists that NVML answers "GPU is lost" for (fallen off the bus).
    lost: tuple[str, ...] = ()

    def by_address(self) -> dict[str, NvmlGpu]:
        return {gpu.address: gpu for gpu in self.gpus}

    def nvlink_domains(self) -> dict[str, str]:
        """Each GPU's NVLink domain (``nvlink_domains``); GPUs with none are left out."""
        return nvlink_domains(self.gpus)


def load_pynvml() -> NvmlLib | None:
    """The pynvml module, or None when nvidia-ml-py is not installed."""
    try:
        return cast(NvmlLib, importlib.import_module("pynvml"))
    except ImportError:
        LOG.info("nvidia-ml-py is not installed; reading GPUs from sysfs only")
        return None


def text(value: str | bytes) -> str:
    """NVML getters return str, struct fields bytes."""
    return (value.decode(errors="replace") if isinstance(value, bytes) else value).strip()


def snapshot(lib: NvmlLib, addresses: Sequence[str] = ()) -> NvmlSnapshot | None:
    """Everything the driver needs from NVML, or None when NVML is not usable here.
    ``addresses`` (sysfs' GPUs) that NVML does not describe are asked for by bus id, to
    tell a GPU that is lost from one NVML does not manage."""
    try:
        lib.nvmlInit()
    except lib.NVMLError as error:
        LOG.info("NVML is not available (%s); reading GPUs from sysfs only", error)
        return None
    try:
        version = _try(lib, lambda: text(lib.nvmlSystemGetDriverVersion()))
        count = _try(lib, lib.nvmlDeviceGetCount) or 0
        found = tuple(gpu for gpu in (_gpu(lib, i) for i in range(count)) if gpu is not None)
        known = {gpu.address for gpu in found}
        lost = tuple(a for a in addresses if a not in known and _is_lost(lib, a))
        return NvmlSnapshot(version, found, lost)
    finally:
        _try(lib, lib.nvmlShutdown)


def _try(lib: NvmlLib, call: Any, *args: Any) -> Any:
    """``call(*args)``, or None when NVML answers with an error (NotSupported...)."""
    try:
        return call(*args)
    except lib.NVMLError as error:
        LOG.debug("NVML %s: %s", getattr(call, "__name__", call), error)
        return None


def _gpu(lib: NvmlLib, index: int) -> NvmlGpu | None:
    try:
        handle = lib.nvmlDeviceGetHandleByIndex(index)
        pci = lib.nvmlDeviceGetPciInfo(handle)
        name, uuid = text(lib.nvmlDeviceGetName(handle)), text(lib.nvmlDeviceGetUUID(handle))
    except lib.NVMLError as error:
        LOG.warning("NVML cannot describe GPU %d (%s); leaving it out", index, error)
        return None
    mig_mode = _try(lib, lib.nvmlDeviceGetMigMode, handle)
    mig_enabled = bool(mig_mode) and mig_mode[0] == 1
    profiles = _profiles(lib, handle) if mig_enabled else ()
    migs = _migs(lib, handle) if mig_enabled else ()
    return NvmlGpu(
        address=pci_address(pci),
        product_id=f"{(int(pci.pciDeviceId) >> 16) & 0xFFFF:04x}",
        name=name,
        uuid=uuid,
        memory_mb=_memory_mb(lib, handle),
        numa_node=_numa(lib, handle),
        mig_enabled=mig_enabled,
        profiles=profiles,
        migs=migs,
        faults=_faults(lib, handle),
        nvlink_peers=_nvlink_peers(lib, handle),
        fabric=_fabric(lib, handle),
        gpu_instances=_try_instances(lib, handle, profiles, migs) if mig_enabled else (),
    )


def _nvlink_peers(lib: NvmlLib, handle: Any) -> tuple[str, ...]:
    """The PCI addresses at the far end of the GPU's active NVLinks, each once, sorted.
    Links are asked in order until NVML says there is no such link (InvalidArgument) or
    the GPU has no NVLink (NotSupported, as on a PCIe card or a VM's GPU); a link that is
    down, or whose far end NVML cannot name, is passed over."""
    peers: set[str] = set()
    for link in range(int(getattr(lib, "NVML_NVLINK_MAX_LINKS", NVLINK_MAX_LINKS))):
        try:
            active = lib.nvmlDeviceGetNvLinkState(handle, link)
        except lib.NVMLError as error:
            if getattr(error, "value", None) in (ERROR_INVALID_ARGUMENT, ERROR_NOT_SUPPORTED):
                break
            LOG.debug("NVML NVLink %d state: %s", link, error)
            continue
        if active != 1:
            continue
        peer = _far_end(lib, handle, link)
        if peer is not None:
            peers.add(peer)
    return tuple(sorted(peers))


def _far_end(lib: NvmlLib, handle: Any, link: int) -> str | None:
    """The PCI address at the far end of an active link; ``NVSWITCH`` for an NVSwitch
    NVML names no address for; None when NVML cannot tell."""
    remote = _try(lib, lib.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
    address = None
    if remote is not None:
        try:
            address = pci_address(remote)
        except ValueError:
            address = None
    if address is not None and address != _NO_ADDRESS:
        return address
    if _try(lib, lib.nvmlDeviceGetNvLinkRemoteDeviceType, handle, link) == (
        NVLINK_DEVICE_TYPE_SWITCH
    ):
        return NVSWITCH
    LOG.debug("NVLink %d leads to a device NVML does not name", link)
    return None


def _fabric(lib: NvmlLib, handle: Any) -> str | None:
    """``<cluster uuid>/<clique id>`` of the NVLink fabric the GPU has joined (a
    multi-node NVLink system's, as nvidia-imex and the fabric manager set up); None when
    the GPU reports no fabric, has not joined it, or its cluster is all zeros."""
    make = getattr(lib, "c_nvmlGpuFabricInfo_v2_t", None)
    if make is None:
        return None
    info = make()
    if _try(lib, lib.nvmlDeviceGetGpuFabricInfoV, handle, ctypes.byref(info)) is None:
        return None
    cluster = bytes(info.clusterUuid)
    if info.state != FABRIC_STATE_COMPLETED or info.status != 0 or not any(cluster):
        return None
    return f"{uuidlib.UUID(bytes=cluster)}/{int(info.cliqueId)}"


def nvlink_domains(gpus: Sequence[NvmlGpu]) -> dict[str, str]:
    """The NVLink domain of each GPU that has one: a name the GPUs of a host joined by
    NVLink share. A GPU in an NVLink fabric (``fabric``) is in that fabric's domain,
    ``fabric-<cluster uuid>/<clique id>``. Otherwise GPUs are joined when one's NVLinks
    lead to the other, or both lead to the same NVSwitch (its PCI address, or any
    NVSwitch NVML gives no address for): each connected set of two GPUs or more is a
    domain, ``nvlink-<lowest GPU address>``. A GPU with no NVLink, or whose links lead to
    no other GPU of the host, has none."""
    parent: dict[str, str] = {}

    def root(node: str) -> str:
        while parent.setdefault(node, node) != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for gpu in gpus:
        for peer in gpu.nvlink_peers:
            parent[root(peer)] = root(gpu.address)
    members: dict[str, list[str]] = {}
    for gpu in gpus:
        members.setdefault(root(gpu.address), []).append(gpu.address)
    domains = {}
    for gpu in gpus:
        if gpu.fabric is not None:
            domains[gpu.address] = f"fabric-{gpu.fabric}"
            continue
        joined = members[root(gpu.address)]
        if len(joined) > 1:
            domains[gpu.address] = f"nvlink-{min(joined)}"
    return domains


def _faults(lib: NvmlLib, handle: Any) -> GpuFaults:
    pending = _try(lib, lib.nvmlDeviceGetRetiredPagesPendingStatus, handle)
    rows = _try(lib, lib.nvmlDeviceGetRemappedRows, handle)
    ecc = _try(lib, lib.nvmlDeviceGetTotalEccErrors, handle, MEMORY_ERROR_UNCORRECTED, VOLATILE_ECC)
    return GpuFaults(
        retired_pages_pending=None if pending is None else bool(pending),
        remap_pending=None if rows is None else bool(rows[2]),
        remap_failed=None if rows is None else bool(rows[3]),
        ecc_uncorrected_volatile=None if ecc is None else int(ecc),
    )


def _is_lost(lib: NvmlLib, address: str) -> bool:
    """Whether NVML answers "GPU is lost" for the GPU at ``address``."""
    try:
        lib.nvmlDeviceGetHandleByPciBusId(address)
    except lib.NVMLError as error:
        return getattr(error, "value", None) == ERROR_GPU_IS_LOST
    return False


def pci_address(pci: Any) -> str:
    """Canonical BDF from NVML's pci info: the integer fields, the function from busId."""
    bus_id = text(pci.busId)
    try:
        function = int(bus_id.rsplit(".", 1)[1], 16)
        return format_bdf(int(pci.domain), int(pci.bus), int(pci.device), function)
    except (IndexError, ValueError, AttributeError):
        return normalize_bdf(bus_id)


def _memory_mb(lib: NvmlLib, handle: Any) -> int | None:
    info = _try(lib, lib.nvmlDeviceGetMemoryInfo, handle)
    return int(info.total) // MIB if info is not None else None


def _numa(lib: NvmlLib, handle: Any) -> int | None:
    node = _try(lib, lib.nvmlDeviceGetNumaNodeId, handle)
    return node if isinstance(node, int) and node >= 0 else None


def _profiles(lib: NvmlLib, handle: Any) -> tuple[MigProfile, ...]:
    found = {}
    for index in range(lib.NVML_GPU_INSTANCE_PROFILE_COUNT):
        info = _try(lib, lib.nvmlDeviceGetGpuInstanceProfileInfo, handle, index)
        if info is None:
            continue
        name = text(info.name).removeprefix("MIG ").strip()
        found[name] = MigProfile(
            name=name,
            profile_id=int(info.id),
            instance_count=int(info.instanceCount),
            remaining=_try(lib, lib.nvmlDeviceGetGpuInstanceRemainingCapacity, handle, info.id),
            memory_mb=int(info.memorySizeMB),
        )
    return tuple(found.values())


def _migs(lib: NvmlLib, handle: Any) -> tuple[MigInstance, ...]:
    """Existing MIG devices; unused slots answer NotFound and are skipped."""
    migs = []
    for index in range(_try(lib, lib.nvmlDeviceGetMaxMigDeviceCount, handle) or 0):
        mig = _try(lib, lib.nvmlDeviceGetMigDeviceHandleByIndex, handle, index)
        uuid = _try(lib, lib.nvmlDeviceGetUUID, mig) if mig is not None else None
        if uuid is None:
            continue
        migs.append(
            MigInstance(
                uuid=text(uuid),
                profile=_mig_profile(lib, mig),
                gpu_instance_id=_try(lib, lib.nvmlDeviceGetGpuInstanceId, mig),
                memory_mb=_memory_mb(lib, mig),
            )
        )
    return tuple(migs)


def _try_instances(
    lib: NvmlLib, handle: Any, profiles: Sequence[MigProfile], migs: Sequence[MigInstance]
) -> tuple[GpuInstance, ...] | None:
    """``gpu_instances``, or None when NVML cannot list them."""
    try:
        return gpu_instances(lib, handle, profiles, migs)
    except lib.NVMLError as error:
        LOG.debug("NVML cannot list the GPU instances of a GPU in MIG mode: %s", error)
        return None


def gpu_instances(
    lib: NvmlLib, handle: Any, profiles: Sequence[MigProfile], migs: Sequence[MigInstance]
) -> tuple[GpuInstance, ...]:
    """The GPU's GPU instances, of every profile, by placement; each with the uuid of
    the first of ``migs`` (its MIG devices) in it."""
    uuids: dict[int, str] = {}
    for mig in migs:
        if mig.gpu_instance_id is not None:
            uuids.setdefault(mig.gpu_instance_id, mig.uuid)
    found = []
    for profile in profiles:
        for instance in _instance_handles(
            lib.nvmlDeviceGetGpuInstances,
            lib.c_nvmlGpuInstance_t,
            handle,
            profile.profile_id,
            profile.instance_count,
        ):
            info = lib.nvmlGpuInstanceGetInfo(instance)
            found.append(
                GpuInstance(
                    id=int(info.id),
                    profile_id=int(info.profileId),
                    start=int(info.placement.start),
                    size=int(info.placement.size),
                    mig_uuid=uuids.get(int(info.id)),
                )
            )
    return tuple(sorted(found, key=lambda i: (i.start, i.id)))


def _instance_handles(
    list_them: Any, kind: Any, parent: Any, profile_id: int, most: int
) -> list[Any]:
    """The handles ``nvmlDeviceGetGpuInstances`` (or ``nvmlGpuInstanceGetComputeInstances``)
    lists for one profile: an array as long as the most the profile allows, filled."""
    array = (kind * max(1, int(most)))()
    count = ctypes.c_uint(0)
    list_them(parent, profile_id, array, ctypes.byref(count))
    return [array[i] for i in range(count.value)]


def read_instances(lib: NvmlLib, handle: Any) -> tuple[GpuInstance, ...]:
    """The GPU instances of the GPU ``handle`` now (``gpu_instances``)."""
    return gpu_instances(lib, handle, _profiles(lib, handle), _migs(lib, handle))


def mig_handles(lib: NvmlLib, handle: Any, gpu_instance_id: int) -> list[Any]:
    """The MIG device handles (one per compute instance) of a GPU instance."""
    found = []
    for index in range(_try(lib, lib.nvmlDeviceGetMaxMigDeviceCount, handle) or 0):
        mig = _try(lib, lib.nvmlDeviceGetMigDeviceHandleByIndex, handle, index)
        if mig is not None and _try(lib, lib.nvmlDeviceGetGpuInstanceId, mig) == gpu_instance_id:
            found.append(mig)
    return found


@contextlib.contextmanager
def session(lib: NvmlLib) -> Iterator[None]:
    """NVML initialised for the calls inside, shut down after (NVML counts them)."""
    lib.nvmlInit()
    try:
        yield
    finally:
        _try(lib, lib.nvmlShutdown)


def _compute_profiles(lib: NvmlLib, gpu_instance: Any) -> list[Any]:
    """The compute instance profiles NVML offers in a GPU instance, each id once."""
    found: dict[int, Any] = {}
    for index in range(lib.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
        get = lib.nvmlGpuInstanceGetComputeInstanceProfileInfo
        info = _try(lib, get, gpu_instance, index, ENGINE_SHARED)
        if info is not None:
            found.setdefault(int(info.id), info)
    return list(found.values())


def compute_profile(lib: NvmlLib, gpu_instance: Any, slices: int) -> int | None:
    """The id of the compute instance profile of ``slices`` compute slices (the GPU
    instance's own, for one compute instance as large as it), None when NVML offers none."""
    profiles = _compute_profiles(lib, gpu_instance)
    return next((int(i.id) for i in profiles if int(i.sliceCount) == slices), None)


def compute_instances(lib: NvmlLib, gpu_instance: Any) -> list[Any]:
    """Every compute instance of a GPU instance, of every compute instance profile."""
    list_them, kind = lib.nvmlGpuInstanceGetComputeInstances, lib.c_nvmlComputeInstance_t
    return [
        ci
        for info in _compute_profiles(lib, gpu_instance)
        for ci in _instance_handles(list_them, kind, gpu_instance, int(info.id), info.instanceCount)
    ]


def _mig_profile(lib: NvmlLib, mig: Any) -> str | None:
    """A MIG device's name ends with its profile: "NVIDIA H100 80GB HBM3 MIG 1g.10gb"."""
    name = _try(lib, lib.nvmlDeviceGetName, mig)
    if name is None or "MIG " not in text(name):
        return None
    return text(name).rsplit("MIG ", 1)[1].strip() or None


# -- XID events -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class XidEvent:
    """A critical XID NVML reported for a GPU (or one of its GPU instances)."""

    address: str
    xid: int
    gpu_instance_id: int | None  # None: the whole GPU


def _handle_key(handle: Any) -> Any:
    """pynvml handles are ctypes pointers: compare their value."""
    return getattr(handle, "value", handle)


def watch_xids(
    lib: NvmlLib,
    on_event: Callable[[XidEvent], None],
    stop: threading.Event,
    poll_ms: int = 500,
) -> None:
    """Wait for critical XID events on every GPU until ``stop`` is set, calling
    ``on_event`` for each (nvmlEventSetWait, ``nvmlEventTypeXidCriticalError``). Returns
    at once when NVML does not load; a GPU that cannot register is left out."""
    try:
        lib.nvmlInit()
    except lib.NVMLError as error:
        LOG.info("NVML is not available (%s); no XID events", error)
        return
    event_set = None
    try:
        event_set = lib.nvmlEventSetCreate()
        addresses: dict[Any, str] = {}
        for index in range(_try(lib, lib.nvmlDeviceGetCount) or 0):
            handle = _try(lib, lib.nvmlDeviceGetHandleByIndex, index)
            pci = _try(lib, lib.nvmlDeviceGetPciInfo, handle) if handle is not None else None
            if pci is None:
                continue
            try:
                lib.nvmlDeviceRegisterEvents(handle, EVENT_XID_CRITICAL, event_set)
            except lib.NVMLError as error:  # NotSupported on some GPUs
                LOG.info("No XID events for GPU %s: %s", pci_address(pci), error)
                continue
            addresses[_handle_key(handle)] = pci_address(pci)
        LOG.info("Watching XID events of %d GPU(s)", len(addresses))
        while not stop.is_set():
            try:
                data = lib.nvmlEventSetWait(event_set, poll_ms)
            except lib.NVMLError as error:
                if getattr(error, "value", None) != ERROR_TIMEOUT:
                    LOG.warning("NVML event wait failed (%s); retrying", error)
                    stop.wait(poll_ms / 1000)
                continue
            address = addresses.get(_handle_key(data.device))
            if address is None:
                continue
            instance = getattr(data, "gpuInstanceId", NO_INSTANCE)
            scope = None if instance in (None, NO_INSTANCE) else int(instance)
            on_event(XidEvent(address, int(data.eventData), scope))
    finally:
        if event_set is not None:
            _try(lib, lib.nvmlEventSetFree, event_set)
        _try(lib, lib.nvmlShutdown)
