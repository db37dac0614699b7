"""A stand-in for pynvml that answers from recorded values (nvml.NvmlLib), no GPU needed.

Errors are pynvml's own classes, so the driver's ``except lib.NVMLError`` is the
same code path as on a host.

GPU and compute instances are simulated with NVML's rules: a GPU instance is made only
at a placement its profile allows (``acceleron.mig.geometry``'s table stands for the
GPU's), refused with INVALID_ARGUMENT otherwise and INSUFFICIENT_RESOURCES where it
would overlap another or go over a limit; each compute instance is a MIG device
(``migs``), destroyed only while no process runs on it (IN_USE), and a GPU instance only
once its compute instances are gone. Handles of GPU and compute instances are integers,
in ctypes arrays of ``c_void_p`` where NVML fills arrays.
"""

from __future__ import annotations

import ctypes
import dataclasses
import queue
import uuid
from types import SimpleNamespace
from typing import Any

import pynvml  # type: ignore[import-untyped]

from acceleron.exceptions import InvalidInput
from acceleron.mig import geometry


def error(code: int) -> Exception:
    made: Exception = pynvml.NVMLError(code)  # the subclass for that code
    return made


NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
NOT_FOUND = pynvml.NVML_ERROR_NOT_FOUND


@dataclasses.dataclass
class Mig:
    uuid: str
    profile: str
    gpu_instance_id: int
    memory_mb: int
    processes: list[int] = dataclasses.field(default_factory=list)  # pids running on it


@dataclasses.dataclass
class GpuInstance:
    id: int
    profile_id: int
    start: int
    size: int
    compute: dict[int, tuple[int, int]] = dataclasses.field(default_factory=dict)
    # compute instance id -> (its compute instance profile id, its slot in ``migs``)


# Compute instance profile index (= id) -> compute slices, as a Hopper GPU instance
# offers them (NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE ... _7_SLICE).
CI_SLICES = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7}


@dataclasses.dataclass
class Gpu:
    """A GPU as NVML would answer for it; struct fields are bytes as in pynvml."""

    bus_id: bytes  # b"00000000:3B:00.0"
    domain: int
    bus: int
    device: int
    pci_device_id: int  # 0x233010DE
    name: str
    uuid: str
    memory_mb: int
    numa_node: int | None = None  # None: NotSupported (old driver)
    mig_mode: int | None = None  # None: NotSupported (no MIG)
    profiles: dict[int, tuple[int, str, int, int, int]] = dataclasses.field(default_factory=dict)
    # profile index -> (id, name, instanceCount, memorySizeMB, remaining)
    migs: dict[int, Mig] = dataclasses.field(default_factory=dict)  # slot -> MIG device
    broken: bool = False  # every per-GPU call fails (GPU is lost)
    # Faults to inject (None: NotSupported on this GPU).
    retired_pending: int | None = 0
    remapped_rows: tuple[int, int, int, int] | None = (0, 0, 0, 0)  # corr, unc, pending, failed
    ecc_volatile_uncorrected: int | None = 0
    # Its NVLinks: for each link, the bus id at its far end (a GPU's or an NVSwitch's,
    # b"00000000:3C:00.0"; b"": NVML names none), or None for a link that is down; None:
    # NotSupported (no NVLink). ``nvswitch``: its links lead to NVSwitches (their remote
    # device type), else to GPUs.
    nvlinks: list[bytes | None] | None = None
    nvswitch: bool = False
    # The NVLink fabric it joined: (cluster uuid bytes, clique id, state); None:
    # NotSupported.
    fabric: tuple[bytes, int, int] | None = None
    gpu_instances: dict[int, GpuInstance] = dataclasses.field(default_factory=dict)
    compute_instance_error: int | None = None  # an NVML error making a compute instance
    list_error: int | None = None  # an NVML error listing its GPU instances


class _RecordedNvml:
    """What FakeNvml answers of GPUs, their MIG devices, health, NVLinks and events."""

    NVMLError = pynvml.NVMLError
    NVML_GPU_INSTANCE_PROFILE_COUNT = pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT
    NVML_NVLINK_MAX_LINKS = pynvml.NVML_NVLINK_MAX_LINKS
    c_nvmlGpuFabricInfo_v2_t = pynvml.c_nvmlGpuFabricInfo_v2_t
    c_nvmlGpuInstance_t = ctypes.c_void_p
    c_nvmlComputeInstance_t = ctypes.c_void_p
    c_nvmlGpuInstancePlacement_t = pynvml.c_nvmlGpuInstancePlacement_t
    NVML_COMPUTE_INSTANCE_PROFILE_COUNT = pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT

    def __init__(self, gpus: list[Gpu], init_error: int | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.calls: list[str] = []
        self.events: queue.Queue[SimpleNamespace] = queue.Queue()
        self.registered: list[int] = []

    def xid(self, index: int, xid: int, gpu_instance_id: int = 0xFFFFFFFF) -> None:
        """Inject a critical XID on GPU ``index`` (as nvmlEventSetWait would return it)."""
        self.events.put(
            SimpleNamespace(
                device=index,
                eventType=8,
                eventData=xid,
                gpuInstanceId=gpu_instance_id,
                computeInstanceId=0xFFFFFFFF,
            )
        )

    def _gpu(self, handle: Any) -> Gpu:
        if isinstance(handle, tuple):
            raise error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu: Gpu = self.gpus[handle]
        if gpu.broken:
            raise error(pynvml.NVML_ERROR_GPU_IS_LOST)
        return gpu

    def nvmlInit(self) -> None:
        self.calls.append("init")
        if self.init_error is not None:
            raise error(self.init_error)

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        return index

    def nvmlDeviceGetName(self, handle: Any) -> str:
        if isinstance(handle, tuple):
            gpu, slot = self.gpus[handle[0]], handle[1]
            return f"{gpu.name} MIG {gpu.migs[slot].profile}"
        return self._gpu(handle).name

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        if isinstance(handle, tuple):
            return self.gpus[handle[0]].migs[handle[1]].uuid
        return self._gpu(handle).uuid

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        gpu = self._gpu(handle)
        return SimpleNamespace(
            busId=gpu.bus_id,
            busIdLegacy=gpu.bus_id[4:],
            domain=gpu.domain,
            bus=gpu.bus,
            device=gpu.device,
            pciDeviceId=gpu.pci_device_id,
        )

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        if isinstance(handle, tuple):
            mb = self.gpus[handle[0]].migs[handle[1]].memory_mb
        else:
            mb = self._gpu(handle).memory_mb
        return SimpleNamespace(total=mb * 1024 * 1024, free=0, used=0)

    def nvmlDeviceGetNumaNodeId(self, handle: Any) -> int:
        node = self._gpu(handle).numa_node
        if node is None:
            raise error(NOT_SUPPORTED)
        return node

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        mode = self._gpu(handle).mig_mode
        if mode is None:
            raise error(NOT_SUPPORTED)
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> Any:
        if index not in self._gpu(handle).migs:
            raise error(NOT_FOUND)
        return (handle, index)

    def nvmlDeviceGetGpuInstanceId(self, handle: tuple[int, int]) -> int:
        return self.gpus[handle[0]].migs[handle[1]].gpu_instance_id

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: Any, profile: int) -> Any:
        if profile not in self._gpu(handle).profiles:
            raise error(NOT_SUPPORTED)
        pid, name, count, memory, _ = self._gpu(handle).profiles[profile]
        return SimpleNamespace(
            id=pid, name=f"MIG {name}".encode(), instanceCount=count, memorySizeMB=memory
        )

    def nvmlDeviceGetGpuInstanceRemainingCapacity(self, handle: Any, profile_id: int) -> int:
        for pid, _, _, _, remaining in self._gpu(handle).profiles.values():
            if pid == profile_id:
                return int(remaining)
        raise error(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetHandleByPciBusId(self, bus_id: str) -> Any:
        for index, gpu in enumerate(self.gpus):
            if f"{gpu.domain:04x}:{gpu.bus:02x}:{gpu.device:02x}.0" == bus_id.lower():
                self._gpu(index)
                return index
        raise error(NOT_FOUND)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any) -> int:
        value = self._gpu(handle).retired_pending
        if value is None:
            raise error(NOT_SUPPORTED)
        return value

    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]:
        value = self._gpu(handle).remapped_rows
        if value is None:
            raise error(NOT_SUPPORTED)
        return value

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter: int) -> int:
        assert (error_type, counter) == (1, 0)  # uncorrected, volatile
        value = self._gpu(handle).ecc_volatile_uncorrected
        if value is None:
            raise error(NOT_SUPPORTED)
        return value

    def _link(self, handle: Any, link: int) -> bytes | None:
        links = self._gpu(handle).nvlinks
        if links is None:
            raise error(NOT_SUPPORTED)
        if not 0 <= link < len(links):
            raise error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return links[link]

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int:
        return 0 if self._link(handle, link) is None else 1

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: Any, link: int) -> Any:
        remote = self._link(handle, link)
        if remote is None:
            raise error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if not remote:
            raise error(NOT_SUPPORTED)
        domain, bus, rest = remote.decode().split(":")
        return SimpleNamespace(
            busId=remote,
            domain=int(domain, 16),
            bus=int(bus, 16),
            device=int(rest.split(".")[0], 16),
        )

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int:
        self._link(handle, link)
        switch = self._gpu(handle).nvswitch
        return int(
            pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH if switch else pynvml.NVML_NVLINK_DEVICE_TYPE_GPU
        )

    def nvmlDeviceGetGpuFabricInfoV(self, handle: Any, info: Any) -> int:
        fabric = self._gpu(handle).fabric
        if fabric is None:
            raise error(NOT_SUPPORTED)
        struct = info._obj  # what ctypes.byref() refers to, as the C call would fill it
        cluster, clique, state = fabric
        struct.clusterUuid[:] = list(cluster)
        struct.cliqueId, struct.state, struct.status = clique, state, 0
        return 0

    def nvmlEventSetCreate(self) -> Any:
        self.calls.append("event_set")
        return "event-set"

    def nvmlDeviceRegisterEvents(self, handle: Any, types: int, event_set: Any) -> None:
        assert types == 8  # nvmlEventTypeXidCriticalError
        self._gpu(handle)
        self.registered.append(handle)

    def nvmlEventSetWait(self, event_set: Any, timeout_ms: int) -> Any:
        try:
            return self.events.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise error(pynvml.NVML_ERROR_TIMEOUT) from None

    def nvmlEventSetFree(self, event_set: Any) -> None:
        self.calls.append("event_set_free")


def h100(bus: int = 0x3B, **fields: Any) -> Gpu:
    """An H100 SXM5 80GB as docs/design/hardware.md §2.4 describes it."""
    values: dict[str, Any] = {
        "bus_id": f"00000000:{bus:02X}:00.0".encode(),
        "domain": 0,
        "bus": bus,
        "device": 0,
        "pci_device_id": 0x233010DE,
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": f"GPU-5c3a1f0e-2b4d-4e6f-8a9b-0c1d2e3f4a{bus:02x}",
        "memory_mb": 81559,
        "numa_node": 1,
    }
    values.update(fields)
    return Gpu(**values)


H100_PROFILES = {
    0: (19, "1g.10gb", 7, 9856, 5),
    1: (14, "2g.20gb", 3, 19968, 2),
    2: (9, "3g.40gb", 2, 40192, 1),
    3: (5, "4g.40gb", 1, 40192, 0),
    4: (0, "7g.80gb", 1, 80384, 0),
    7: (20, "1g.10gb+me", 1, 9856, 1),
    9: (15, "1g.20gb", 4, 19968, 3),
}


# -- GPU and compute instances ----------------------------------------------------------


def _gi_handle(index: int, gi: int) -> int:
    return (index + 1) << 16 | (gi + 1)


def _ci_handle(index: int, gi: int, ci: int) -> int:
    return (index + 1) << 16 | (gi + 1) << 8 | (ci + 1)


def _fill(array: Any, count: Any, handles: list[int]) -> int:
    if len(array) < len(handles):
        raise error(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
    for i, handle in enumerate(handles):
        array[i] = handle
    count._obj.value = len(handles)  # what ctypes.byref() refers to
    return 0


class FakeNvml(_RecordedNvml):
    """The stand-in for pynvml: recorded GPUs, whose GPU and compute instances can be
    made and destroyed."""

    def _gi(self, handle: int) -> tuple[int, Gpu, GpuInstance]:
        index, gi = (handle >> 16) - 1, (handle & 0xFF) - 1
        gpu = self._gpu(index)
        if gi not in gpu.gpu_instances:
            raise error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return index, gpu, gpu.gpu_instances[gi]

    def _product(self, gpu: Gpu) -> geometry.Product:
        if gpu.mig_mode != 1:
            raise error(NOT_SUPPORTED)
        try:
            return geometry.product(f"{gpu.pci_device_id >> 16 & 0xFFFF:04x}")
        except InvalidInput:
            raise error(NOT_SUPPORTED) from None

    def _layout(self, gpu: Gpu, product: geometry.Product) -> geometry.Layout:
        by_id = {p.id: p for p in product.profiles}
        return geometry.Layout.of(
            product,
            (
                geometry.Instance(by_id[g.profile_id].name, g.start)
                for g in gpu.gpu_instances.values()
            ),
        )

    def nvmlDeviceGetGpuInstances(
        self, handle: Any, profile_id: int, array: Any, count: Any
    ) -> int:
        gpu = self._gpu(handle)
        self._product(gpu)
        if gpu.list_error is not None:
            raise error(gpu.list_error)
        found = [
            _gi_handle(handle, g.id)
            for g in gpu.gpu_instances.values()
            if g.profile_id == profile_id
        ]
        return _fill(array, count, found)

    def nvmlDeviceGetGpuInstanceById(self, handle: Any, gpu_instance_id: int) -> int:
        if gpu_instance_id not in self._gpu(handle).gpu_instances:
            raise error(NOT_FOUND)
        return _gi_handle(handle, gpu_instance_id)

    def nvmlGpuInstanceGetInfo(self, gpu_instance: int) -> Any:
        _, _, gi = self._gi(gpu_instance)
        placement = SimpleNamespace(start=gi.start, size=gi.size)
        return SimpleNamespace(id=gi.id, profileId=gi.profile_id, placement=placement)

    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, handle: Any, profile_id: int, placement: Any
    ) -> int:
        gpu = self._gpu(handle)
        product = self._product(gpu)
        asked = placement._obj
        profile = next((p for p in product.profiles if p.id == profile_id), None)
        if profile is None or asked.start not in profile.starts:
            raise error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if asked.size != profile.memory_slices:
            raise error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        try:
            self._layout(gpu, product).adding(geometry.Instance(profile.name, asked.start))
        except InvalidInput:
            raise error(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES) from None
        gi = next(n for n in range(1, 64) if n not in gpu.gpu_instances)
        gpu.gpu_instances[gi] = GpuInstance(gi, profile_id, asked.start, asked.size)
        self.calls.append(f"create_gi {profile.name}@{asked.start}")
        return _gi_handle(handle, gi)

    def nvmlGpuInstanceDestroy(self, gpu_instance: int) -> int:
        _, gpu, gi = self._gi(gpu_instance)
        if gi.compute:
            raise error(pynvml.NVML_ERROR_IN_USE)
        del gpu.gpu_instances[gi.id]
        self.calls.append(f"destroy_gi {gi.id}")
        return 0

    def _gi_slices(self, gpu: Gpu, gi: GpuInstance) -> int:
        product = self._product(gpu)
        return next(p.compute_slices for p in product.profiles if p.id == gi.profile_id)

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, gpu_instance: int, profile: int, engine_profile: int
    ) -> Any:
        _, gpu, gi = self._gi(gpu_instance)
        slices = CI_SLICES.get(profile)
        if slices is None or slices > self._gi_slices(gpu, gi):
            raise error(NOT_SUPPORTED)
        return SimpleNamespace(
            id=profile, sliceCount=slices, instanceCount=self._gi_slices(gpu, gi) // slices
        )

    def nvmlGpuInstanceCreateComputeInstance(self, gpu_instance: int, profile_id: int) -> int:
        index, gpu, gi = self._gi(gpu_instance)
        if gpu.compute_instance_error is not None:
            raise error(gpu.compute_instance_error)
        slices = CI_SLICES.get(profile_id)
        if slices is None or slices > self._gi_slices(gpu, gi):
            raise error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        taken = sum(CI_SLICES[p] for p, _ in gi.compute.values())
        if taken + slices > self._gi_slices(gpu, gi):
            raise error(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        ci = next(n for n in range(8) if n not in gi.compute)
        slot = next(n for n in range(7) if n not in gpu.migs)
        name = next(p.name for p in self._product(gpu).profiles if p.id == gi.profile_id)
        mig_uuid = (
            f"MIG-{uuid.uuid5(uuid.NAMESPACE_OID, f'{gpu.uuid}/{gi.id}/{ci}/{len(self.calls)}')}"
        )
        gpu.migs[slot] = Mig(mig_uuid, name, gi.id, 0)
        gi.compute[ci] = (profile_id, slot)
        self.calls.append(f"create_ci {gi.id}/{ci}")
        return _ci_handle(index, gi.id, ci)

    def nvmlGpuInstanceGetComputeInstances(
        self, gpu_instance: int, profile_id: int, array: Any, count: Any
    ) -> int:
        index, _, gi = self._gi(gpu_instance)
        found = [_ci_handle(index, gi.id, c) for c, (p, _) in gi.compute.items() if p == profile_id]
        return _fill(array, count, found)

    def nvmlComputeInstanceDestroy(self, compute_instance: int) -> int:
        gpu_instance = (compute_instance & ~0xFFFF) | (compute_instance >> 8 & 0xFF)
        _, gpu, gi = self._gi(gpu_instance)
        ci = (compute_instance & 0xFF) - 1
        if ci not in gi.compute:
            raise error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        slot = gi.compute[ci][1]
        if gpu.migs[slot].processes:
            raise error(pynvml.NVML_ERROR_IN_USE)
        del gpu.migs[slot]
        del gi.compute[ci]
        self.calls.append(f"destroy_ci {gi.id}/{ci}")
        return 0

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        if not isinstance(handle, tuple):
            self._gpu(handle)
            return []
        mig = self.gpus[handle[0]].migs[handle[1]]
        return [SimpleNamespace(pid=pid, usedGpuMemory=0) for pid in mig.processes]

    def carve(self, index: int, profile: str, start: int) -> Mig:
        """Make a GPU instance and its compute instance as an operator would
        (``nvidia-smi mig -cgi <profile> -C``); its MIG device."""
        gpu = self.gpus[index]
        chosen = self._product(gpu).profile(profile)
        placement = pynvml.c_nvmlGpuInstancePlacement_t(start, chosen.memory_slices)
        gi = self.nvmlDeviceCreateGpuInstanceWithPlacement(
            index, chosen.id, ctypes.byref(placement)
        )
        ci_profile = next(p for p, n in CI_SLICES.items() if n == chosen.compute_slices)
        self.nvmlGpuInstanceCreateComputeInstance(gi, ci_profile)
        gi_id = (gi & 0xFF) - 1
        return next(m for m in gpu.migs.values() if m.gpu_instance_id == gi_id)
