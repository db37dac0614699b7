"""A stand-in for pynvml that answers from recorded values (nvml.NvmlLib), no GPU needed.

Errors are pynvml's own classes, so the driver's ``except lib.NVMLError`` is the
same code path as on a host.
"""

from __future__ import annotations

import dataclasses
import queue
from types import SimpleNamespace
from typing import Any

import pynvml  # type: ignore[import-untyped]


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


class FakeNvml:
    NVMLError = pynvml.NVMLError
    NVML_GPU_INSTANCE_PROFILE_COUNT = pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT
    NVML_NVLINK_MAX_LINKS = pynvml.NVML_NVLINK_MAX_LINKS
    c_nvmlGpuFabricInfo_v2_t = pynvml.c_nvmlGpuFabricInfo_v2_t

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
