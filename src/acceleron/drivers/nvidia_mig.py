"""GPUs the NVIDIA driver carves on demand (``[nvidia_gpu] dynamic_mig``), through NVML.

Such a GPU (in MIG mode, of a product ``acceleron.mig.geometry`` has a table for) is one
``mig_gpu`` deployable (``acceleron.mig.units``) with a slot handle per instance it can
hold: one per compute slice, their addresses derived from the host, the GPU's address
and the slot's number, so the same every scan. A slot is in use where an instance is; its
info names the instance (its MIG uuid, profile, profile id and start).

Which slot holds which GPU instance is kept in a small JSON file (``[nvidia_gpu]
mig_slots_file``), so that an agent's restart finds each instance in its slot. An entry
counts while the GPU instance it names is there with the same profile and start; the
instances no entry names (made by hand, or before the file) fill the free slots in order.

``make`` asks the planner (``acceleron.mig.planner``) where on this GPU the profile goes,
makes the GPU instance there (``nvmlDeviceCreateGpuInstanceWithPlacement``) and a compute
instance as large as it (``nvmlGpuInstanceCreateComputeInstance``); when the compute
instance cannot be made, the GPU instance is destroyed. ``destroy`` destroys the slot's
compute instances and GPU instance, and refuses while a process runs on it.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from acceleron import json_file
from acceleron.drivers import nvml
from acceleron.drivers.errors import DriverError
from acceleron.drivers.sysfs import pci_handle_info
from acceleron.exceptions import InvalidInput
from acceleron.mig import geometry, planner, units
from acceleron.vocabulary import AttachHandle, Deployable

LOG = logging.getLogger(__name__)
_SLOTS = uuid.UUID("3e0f6d8a-5b21-5c47-a913-7d2e4b6c8f10")  # namespace of slot addresses


def slot_addresses(host: str, address: str, product: geometry.Product) -> list[str]:
    """The slot handles' addresses of a GPU: one per compute slice, stable."""
    return [
        str(uuid.uuid5(_SLOTS, f"{host}/{address}/mig-slot/{n}"))
        for n in range(product.compute_slices)
    ]


@dataclasses.dataclass(frozen=True)
class Held:
    """What the slot map keeps of the GPU instance made for a slot."""

    gpu_instance_id: int
    profile_id: int
    start: int

    def names(self, instance: nvml.GpuInstance) -> bool:
        return (instance.id, instance.profile_id, instance.start) == (
            self.gpu_instance_id,
            self.profile_id,
            self.start,
        )


class SlotMap:
    """Slot -> GPU instance of each GPU, in a JSON file replaced whole at each change."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _load(self) -> dict[str, dict[str, Any]]:
        data = json_file.load(self.path, "MIG slot map")
        gpus = data.get("gpus") if isinstance(data, dict) else None
        return gpus if isinstance(gpus, dict) else {}

    def of(self, address: str) -> dict[str, Held]:
        """The slots of the GPU at ``address`` that were given an instance."""
        found = {}
        for slot, item in (self._load().get(address) or {}).items():
            try:
                found[slot] = Held(int(item["gpu_instance_id"]), int(item["profile_id"]),
                                   int(item["start"]))  # fmt: skip
            except (KeyError, TypeError, ValueError):
                LOG.warning("ignoring slot %s of GPU %s in %s: %r", slot, address, self.path, item)
        return found

    def set(self, address: str, slot: str, held: Held | None) -> None:
        """Record (or, with None, forget) the instance of one slot."""
        gpus = self._load()
        slots = gpus.setdefault(address, {})
        if held is None:
            slots.pop(slot, None)
        else:
            slots[slot] = dataclasses.asdict(held)
        json_file.replace(self.path, {"version": 1, "gpus": gpus})


def slotted(
    recorded: Mapping[str, Held], slots: Sequence[str], instances: Sequence[nvml.GpuInstance]
) -> dict[str, nvml.GpuInstance]:
    """Which instance each slot holds: the one recorded for it while it is there, the
    others (found on the GPU) in the free slots in order."""
    made = {}
    for slot, held in recorded.items():
        found = next((i for i in instances if held.names(i)), None)
        if slot in slots and found is not None:
            made[slot] = found
    free = [slot for slot in slots if slot not in made]
    others = [i for i in instances if i not in made.values()]
    return {**made, **dict(zip(free, others, strict=False))}


def layout(product: geometry.Product, instances: Sequence[nvml.GpuInstance]) -> geometry.Layout:
    """The instances as the geometry sees them; InvalidInput when one has a profile id
    or placement the product's table does not allow."""
    return geometry.Layout.of(product, (_instance(product, i) for i in instances))


def _instance(product: geometry.Product, found: nvml.GpuInstance) -> geometry.Instance:
    profile = _by_id(product, found.profile_id)
    if found.size != profile.memory_slices:
        raise InvalidInput(
            f"GPU instance {found.id} ({profile.name}) takes {found.size} memory slices, "
            f"not {profile.memory_slices}"
        )
    return geometry.Instance(profile.name, found.start)


def _by_id(product: geometry.Product, profile_id: int) -> geometry.Profile:
    for profile in product.profiles:
        if profile.id == profile_id:
            return profile
    raise InvalidInput(f"the {product.name} has no GPU instance profile id {profile_id}")


def instance_info(product: geometry.Product, found: nvml.GpuInstance) -> dict[str, str]:
    """What a slot's info says of the instance it holds."""
    return {
        units.INFO_UUID: found.mig_uuid or "",
        units.INFO_PROFILE: _by_id(product, found.profile_id).name,
        "gpu_instance_profile_id": str(found.profile_id),
        units.INFO_START: str(found.start),
    }


def deployable(
    gpu: nvml.NvmlGpu,
    product: geometry.Product,
    slots: Sequence[str],
    recorded: Mapping[str, Held],
    vgpus: Mapping[str, str] | None = None,
) -> Deployable:
    """The GPU as one partitionable deployable, a slot handle per instance it can hold.
    ``vgpus``: for a GPU carved for VMs, whose slots are its virtual functions (PCI
    handles), the vGPU type id each has now."""
    held = slotted(recorded, slots, gpu.gpu_instances or ())
    handles = []
    for number, slot in enumerate(slots):
        vf = slot if vgpus is not None else None
        info = {
            **pci_handle_info(vf or gpu.address),
            "gpu_uuid": gpu.uuid,
            "mig_slot": str(number),
        }
        instance = held.get(slot)
        if instance is not None:
            info.update(instance_info(product, instance))
        given = None if vgpus is None else vgpus.get(slot)
        if given is not None:
            info[units.INFO_VGPU] = given
        handles.append(
            AttachHandle(
                type="PCI" if vf else "MIG",
                address=slot,
                info=info,
                in_use=instance is not None,
            )
        )
    return Deployable(
        key=units.KEY,
        kind=units.KIND,
        num_accelerators=len(handles),
        accelerator_type=units.ACCELERATOR_TYPE,
        attributes={"mig_product": product.name},
        attach_handles=tuple(handles),
    )


# -- carving ---------------------------------------------------------------------


@dataclasses.dataclass
class Carver:
    """Makes and destroys the instances of one GPU's slots, NVML initialised."""

    lib: nvml.NvmlLib
    address: str
    product: geometry.Product
    slots: Sequence[str]
    slot_map: SlotMap

    def __post_init__(self) -> None:
        self.handle = self.lib.nvmlDeviceGetHandleByPciBusId(self.address)

    def _recorded(self, slot: str) -> tuple[Held | None, nvml.GpuInstance | None]:
        """The instance recorded for ``slot``, and the one NVML shows for it (None when
        gone: destroyed by hand, or the GPU reset)."""
        held = self.slot_map.of(self.address).get(slot)
        if held is None:
            return None, None
        instances = nvml.read_instances(self.lib, self.handle)
        return held, next((i for i in instances if held.names(i)), None)

    def make(self, slot: str, profile_name: str) -> dict[str, str]:
        _, found = self._recorded(slot)
        if found is not None:
            if _by_id(self.product, found.profile_id).name != profile_name:
                raise DriverError(
                    f"slot {slot} of GPU {self.address} holds a "
                    f"{_by_id(self.product, found.profile_id).name}, not a {profile_name}"
                )
            return instance_info(self.product, found)
        instances = nvml.read_instances(self.lib, self.handle)
        try:
            gpu = planner.Gpu(self.address, layout(self.product, instances))
        except InvalidInput as error:
            raise DriverError(f"GPU {self.address}: {error.message}") from error
        start = planner.best_fit([gpu], profile_name).instance.start
        profile = self.product.profile(profile_name)
        placement = self.lib.c_nvmlGpuInstancePlacement_t(start, profile.memory_slices)
        gpu_instance = self.lib.nvmlDeviceCreateGpuInstanceWithPlacement(
            self.handle, profile.id, ctypes.byref(placement)
        )
        try:
            made = self._compute_instance(gpu_instance, profile)
            self.slot_map.set(self.address, slot, Held(made.id, made.profile_id, made.start))
        except (self.lib.NVMLError, DriverError, OSError, StopIteration) as error:
            self._undo(gpu_instance)
            raise DriverError(
                f"cannot make the compute instance of a {profile_name} at memory slice "
                f"{start} of GPU {self.address} (the GPU instance is destroyed): {error}"
            ) from error
        where = f"memory slice {start} of GPU {self.address}"
        LOG.info("Made a %s at %s for slot %s", profile_name, where, slot)
        return instance_info(self.product, made)

    def _compute_instance(self, gpu_instance: Any, profile: geometry.Profile) -> nvml.GpuInstance:
        """Make the compute instance as large as the GPU instance; the GPU instance as
        NVML then describes it, with its MIG device's uuid."""
        ci_profile = nvml.compute_profile(self.lib, gpu_instance, profile.compute_slices)
        if ci_profile is None:
            raise DriverError(
                f"NVML offers no compute instance profile of {profile.compute_slices} "
                f"slice(s) for a {profile.name} GPU instance"
            )
        self.lib.nvmlGpuInstanceCreateComputeInstance(gpu_instance, ci_profile)
        instance_id = int(self.lib.nvmlGpuInstanceGetInfo(gpu_instance).id)
        return next(i for i in nvml.read_instances(self.lib, self.handle) if i.id == instance_id)

    def _undo(self, gpu_instance: Any) -> None:
        """Destroy a GPU instance just made, and its compute instances, if any."""
        try:
            for ci in nvml.compute_instances(self.lib, gpu_instance):
                self.lib.nvmlComputeInstanceDestroy(ci)
            self.lib.nvmlGpuInstanceDestroy(gpu_instance)
        except self.lib.NVMLError as error:
            LOG.error("GPU %s: cannot destroy the GPU instance just made: %s", self.address, error)

    def destroy(self, slot: str) -> None:
        held, found = self._recorded(slot)
        if found is None:
            if held is not None:
                self.slot_map.set(self.address, slot, None)
            return
        where = f"the {_by_id(self.product, found.profile_id).name} of slot {slot} on GPU "
        where += self.address
        for mig in nvml.mig_handles(self.lib, self.handle, found.id):
            try:
                running = self.lib.nvmlDeviceGetComputeRunningProcesses(mig)
            except self.lib.NVMLError as error:
                raise DriverError(
                    f"cannot tell whether processes run on {where}; not destroying it: {error}"
                ) from error
            if running:
                pids = ", ".join(str(getattr(p, "pid", p)) for p in running)
                raise DriverError(f"processes ({pids}) still run on {where}: not destroying it")
        gpu_instance = self.lib.nvmlDeviceGetGpuInstanceById(self.handle, found.id)
        try:
            for ci in nvml.compute_instances(self.lib, gpu_instance):
                self.lib.nvmlComputeInstanceDestroy(ci)
            self.lib.nvmlGpuInstanceDestroy(gpu_instance)
        except self.lib.NVMLError as error:
            raise DriverError(f"cannot destroy {where}: {error}") from error
        self.slot_map.set(self.address, slot, None)
        LOG.info("Destroyed %s", where)
