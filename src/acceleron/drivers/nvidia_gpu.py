"""NVIDIA GPUs: whole GPUs, vGPU types (all three forms) and MIG instances.

Devices come from sysfs (vendor 10de, VGA or 3D class; VFs never stand alone)
and are enriched from NVML when it loads (name, memory, NUMA, MIG); a GPU NVML
sees but sysfs does not is still reported, and either side's extras are logged.

What a GPU offers, first match wins:

* MIG enabled (NVML), and the GPU carved on demand (``[nvidia_gpu] dynamic_mig``): one
  ``mig_gpu`` deployable, a slot handle per instance it can hold; the instances are made
  and destroyed as requests ask (``acceleron.drivers.nvidia_mig``).
* MIG enabled (NVML): one ``mig/<profile>`` deployable per profile with existing
  MIG devices; handles of type MIG (the ``MIG-...`` uuid).
* vGPU types (sysfs): one ``vgpu/<type>`` deployable per type, across the three
  forms of docs/design/hardware.md §2.2: mdev types on the PF (pre-Ampere), mdev types on the
  SR-IOV VFs, and the vendor-specific VFIO form (``nvidia/creatable_vgpu_types``
  on each VF). mdev capacity is ``available_instances`` plus the mdevs that exist;
  existing ones are handles ``in_use`` with their uuid, free ones get a uuid
  derived from host, parent address, type and slot, so it is the same every scan
  and the agent can create the mdev with it.
* Otherwise the whole GPU: one ``device`` deployable with the PF as PCI handle, in
  use on the host when the GPU is bound to vfio-pci (a VM most likely has it). A GPU
  whose MIG instances only NVML could describe is reported whole, with a warning.

Where each GPU sits: its NUMA node (NVML, else sysfs), its PCIe switch (sysfs, the
upstream port of the nearest switch above it: ``sysfs.pcie_switch``) and its NVLink
domain (NVML: the GPUs its active NVLinks lead to, directly or through NVSwitches, or
the NVLink fabric it joined: ``nvml.nvlink_domains``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from oslo_config import cfg

from acceleron.drivers import mdev, memory, nvidia_mig, nvml
from acceleron.drivers.errors import DriverConfigError, DriverError, TargetNotFound
from acceleron.drivers.health import EventHold, pci_health, scoped, worst
from acceleron.drivers.sysfs import (
    NVIDIA_GPU,
    PCI_DEVICES,
    CleanedByReset,
    PciFunction,
    Sysfs,
    classify,
    make_device,
    model_name,
    normalize_bdf,
    passed_through,
    pci_handle,
    pci_handle_info,
    read_function,
    scan,
    still_present,
    trait_part,
    virtual_functions,
)
from acceleron.exceptions import InvalidInput
from acceleron.mig import geometry, units
from acceleron.vocabulary import DEGRADED, UNHEALTHY, AttachHandle, Deployable, Device, Health

LOG = logging.getLogger(__name__)

# PCI device id -> model used in traits. Stable whatever NVML says, so that a scan
# without NVML does not rename the device (NVML's name is an attribute).
MODELS = {
    "1eb8": "T4",
    "1db1": "V100",
    "1db4": "V100",
    "1db5": "V100",
    "20b0": "A100",
    "20b2": "A100",
    "20b5": "A100",
    "20f1": "A100",
    "20b7": "A30",
    "2235": "A40",
    "2236": "A10",
    "26b5": "L40",
    "26b9": "L40S",
    "27b8": "L4",
    "2321": "H100",  # H100 NVL
    "2330": "H100",
    "2331": "H100",
    "2335": "H200",  # seen on a lent H200 SXM (NVML: "NVIDIA H200", 143,771 MiB)
    "233b": "H200",  # H200 NVL
    "2342": "GH200",
}
# PCI device id -> memory family, for a GPU whose NVML name does not say (an H200's is
# only "NVIDIA H200") or without NVML: T4, A10, A40, L4, L40 and L40S carry GDDR6; V100
# HBM2, A100 and A30 HBM2/HBM2e, H100 HBM3/HBM2e, H200 HBM3e, GH200 HBM3/HBM3e.
_GDDR = ("1eb8", "2235", "2236", "26b5", "26b9", "27b8")
_HBM = ("1db1", "1db4", "1db5", "20b0", "20b2", "20b5", "20f1", "20b7", "2321", "2330", "2331",
        "2335", "233b", "2342")  # fmt: skip
MEMORY = {**dict.fromkeys(_GDDR, "GDDR"), **dict.fromkeys(_HBM, "HBM")}
_SLOTS = uuid.UUID("6a1c3f2e-8d4b-5e7f-9a0b-1c2d3e4f5a6b")  # namespace of free mdev uuids
_CURRENT_VGPU = "nvidia/current_vgpu_type"  # a virtual function's vGPU type id, 0: none


class NvidiaGpuDriver(CleanedByReset):
    """NVIDIA GPUs from sysfs and NVML. ``nvml_lib`` stands in for pynvml (tests)."""

    name = "nvidia_gpu"

    def __init__(
        self, conf: cfg.ConfigOpts, root: Path, nvml_lib: nvml.NvmlLib | None = None
    ) -> None:
        self.conf = conf
        self.sysfs = Sysfs(root)
        self.events = EventHold(conf.agent.health_event_hold)
        self._nvml_lib = nvml_lib
        self.vgpu_types = set(conf.nvidia_gpu.enabled_vgpu_types)
        self.critical_xids = set(conf.nvidia_gpu.critical_xids)
        self._mig_warned: set[str] = set()
        # What the last scan's NVML snapshot said about each GPU's health.
        self._faults: dict[str, nvml.GpuFaults] = {}
        self._lost: set[str] = set()
        self._instances: dict[str, dict[int, str]] = {}  # GPU -> GPU instance id -> key
        # A GPU carved on demand -> GPU instance id -> the slot handle holding it.
        self._held_in: dict[str, dict[int, str]] = {}
        self._watch_stop: threading.Event | None = None
        dynamic = [a.strip() for a in conf.nvidia_gpu.dynamic_mig if a.strip()]
        self._dynamic_all = "all" in dynamic
        self._dynamic = {_address(a) for a in dynamic if a != "all"}
        for_vms = [a.strip() for a in conf.nvidia_gpu.dynamic_mig_vgpu if a.strip()]
        self._for_vms_all = "all" in for_vms
        self._for_vms = {_address(a) for a in for_vms if a != "all"}
        self._dynamic_warned: set[str] = set()
        self.slot_map = nvidia_mig.SlotMap(Path(conf.nvidia_gpu.mig_slots_file))
        self._carving_lock = threading.Lock()

    def _lib(self) -> nvml.NvmlLib | None:
        if not self.conf.nvidia_gpu.use_nvml:
            return None
        return self._nvml_lib or nvml.load_pynvml()

    def _snapshot(self, addresses: Sequence[str] = ()) -> nvml.NvmlSnapshot | None:
        lib = self._lib()
        snap = nvml.snapshot(lib, addresses) if lib is not None else None
        gpus = snap.gpus if snap else ()
        self._faults = {gpu.address: gpu.faults for gpu in gpus}
        self._lost = set(snap.lost) if snap else set()
        self._instances = {
            gpu.address: {
                m.gpu_instance_id: f"mig/{m.profile or 'unknown'}"
                for m in gpu.migs
                if m.gpu_instance_id is not None
            }
            for gpu in gpus
        }
        self._held_in = {}
        for gpu in gpus:
            product = self._carved_product(gpu) if gpu.mig_enabled else None
            if product is not None:  # one deployable, the GPU's; a handle per slot
                self._instances[gpu.address] = dict.fromkeys(
                    self._instances[gpu.address], units.KEY
                )
                slots = self._slots(gpu.address, product) or []
                held = nvidia_mig.slotted(
                    self.slot_map.of(gpu.address), slots, gpu.gpu_instances or ()
                )
                self._held_in[gpu.address] = {i.id: slot for slot, i in held.items()}
        return snap

    def discover(self) -> list[Device]:
        gpus = {fn.address: fn for fn in scan(self.sysfs) if classify(fn) == NVIDIA_GPU}
        with self._carving_lock:  # never a GPU half carved
            snap = self._snapshot([a for a, fn in gpus.items() if fn.driver == "nvidia"])
        from_nvml = snap.by_address() if snap else {}
        self._cross_check(gpus, from_nvml, snap is not None)
        version = snap.driver_version if snap else None
        domains = snap.nvlink_domains() if snap else {}
        found = (self._device(fn, from_nvml.get(a), version) for a, fn in gpus.items())
        devices = [device for device in found if device is not None]
        devices += [self._nvml_only(gpu, version) for a, gpu in from_nvml.items() if a not in gpus]
        devices = [
            dataclasses.replace(d, nvlink_domain=domains.get(d.pci_address)) for d in devices
        ]
        return sorted(devices, key=lambda d: d.pci_address)

    def _cross_check(
        self, gpus: dict[str, PciFunction], from_nvml: dict[str, nvml.NvmlGpu], loaded: bool
    ) -> None:
        for address in sorted(set(from_nvml) - set(gpus)):
            LOG.warning("NVML reports GPU %s, which sysfs does not show", address)
        for address, fn in gpus.items():
            if loaded and fn.driver == "nvidia" and address not in from_nvml:
                LOG.warning("GPU %s is bound to nvidia but NVML does not report it", address)

    def _device(
        self, fn: PciFunction, gpu: nvml.NvmlGpu | None, version: str | None
    ) -> Device | None:
        """The GPU's tree; None when it vanished while being read (its vGPU types gone,
        it would otherwise look like a whole GPU)."""
        deployables = self._deployables(fn, gpu)
        if not still_present(self.sysfs, fn):
            return None
        numa = gpu.numa_node if gpu and gpu.numa_node is not None else fn.numa_node
        return make_device(
            fn,
            type="GPU",
            driver=self.name,
            model=model_name(MODELS, fn.device),
            numa_node=numa,
            vendor_board_info=_board(gpu, version),
            deployables=tuple(deployables),
        )

    def _nvml_only(self, gpu: nvml.NvmlGpu, version: str | None) -> Device:
        return Device(
            pci_address=gpu.address,
            type="GPU",
            vendor_id="10de",
            vendor_name="NVIDIA",
            product_id=gpu.product_id,
            model=model_name(MODELS, gpu.product_id),
            driver=self.name,
            numa_node=gpu.numa_node,
            vendor_board_info=_board(gpu, version),
            deployables=tuple(
                self._mig(gpu) if gpu.mig_enabled else [_whole(gpu.address, gpu, gpu.product_id)]
            ),
        )

    def _deployables(self, fn: PciFunction, gpu: nvml.NvmlGpu | None) -> list[Deployable]:
        if gpu is not None and gpu.mig_enabled:
            return self._mig(gpu)
        if fn.address in self._dynamic:
            self._not_carved(fn.address, "is not in MIG mode (or NVML does not describe it)")
        vfs = virtual_functions(self.sysfs, fn)
        vgpus = self._mdev_types(fn, [fn, *vfs]) + self._vfio_types(fn, vfs)
        if vgpus:
            return vgpus
        if gpu is None:
            self._warn_mig_without_nvml(fn)
        return [_whole(fn.address, gpu, fn.device, in_use=passed_through(fn))]

    # -- MIG -------------------------------------------------------------------

    def _named(self, address: str) -> bool:
        """Whether ``[nvidia_gpu] dynamic_mig`` names the GPU (or says all)."""
        return self._dynamic_all or address in self._dynamic

    def _mig(self, gpu: nvml.NvmlGpu) -> list[Deployable]:
        """A GPU in MIG mode: carved on demand where configured and it can be (one
        ``mig_gpu`` deployable), else its MIG instances by profile."""
        product = self._carved_product(gpu)
        slots = None if product is None else self._slots(gpu.address, product)
        if product is None or slots is None:
            return _mig(gpu)
        recorded = self.slot_map.of(gpu.address)
        vgpus = self._vgpus(slots) if self._carved_for_vms(gpu.address) else None
        return [nvidia_mig.deployable(gpu, product, slots, recorded, vgpus)]

    def _carved_for_vms(self, address: str) -> bool:
        """Whether ``[nvidia_gpu] dynamic_mig_vgpu`` names the GPU (or says all)."""
        return self._for_vms_all or address in self._for_vms

    def _slots(self, address: str, product: geometry.Product) -> list[str] | None:
        """The slot handles' addresses of a GPU carved on demand: stable uuids; for VMs,
        its first SR-IOV virtual functions, one a compute slice (None, with a warning
        once, when it has fewer)."""
        if not self._carved_for_vms(address):
            return nvidia_mig.slot_addresses(self.conf.host, address, product)
        pf = read_function(self.sysfs, address)
        vfs = [] if pf is None else [vf.address for vf in virtual_functions(self.sysfs, pf)]
        if len(vfs) < product.compute_slices:
            self._not_carved(
                address,
                f"has {len(vfs)} virtual functions for its {product.compute_slices} slots "
                f"(dynamic_mig_vgpu: enable SR-IOV, sriov_numvfs)",
            )
            return None
        return vfs[: product.compute_slices]

    def _vgpus(self, vfs: Sequence[str]) -> dict[str, str]:
        """The vGPU type id each virtual function has now (those that have one)."""
        found = {}
        for vf in vfs:
            current = self.sysfs.read_int(self.sysfs.path(PCI_DEVICES, vf, _CURRENT_VGPU))
            if current:
                found[vf] = str(current)
        return found

    def _carved_product(self, gpu: nvml.NvmlGpu) -> geometry.Product | None:
        """The MIG table of a GPU in MIG mode to carve on demand; None (with a warning,
        once) when it has none, or holds instances the table does not allow."""
        if not self._named(gpu.address):
            return None
        if not geometry.known(gpu.product_id):
            self._not_carved(
                gpu.address,
                f"({gpu.name}, PCI id {gpu.product_id}) has no MIG table: Acceleron knows "
                f"{geometry.tables()}",
            )
            return None
        product = geometry.product(gpu.product_id)
        if gpu.gpu_instances is None:
            self._not_carved(gpu.address, "does not let NVML list its GPU instances")
            return None
        try:
            nvidia_mig.layout(product, gpu.gpu_instances)
        except InvalidInput as error:
            self._not_carved(gpu.address, f"holds GPU instances the table does not allow: {error}")
            return None
        return product

    def _not_carved(self, address: str, why: str) -> None:
        if address in self._dynamic_warned:
            return
        self._dynamic_warned.add(address)
        LOG.warning(
            "GPU %s %s; [nvidia_gpu] dynamic_mig names it, but it is reported as before, "
            "not carved on demand",
            address,
            why,
        )

    @contextlib.contextmanager
    def _carving(self, device: Device, handle: AttachHandle) -> Iterator[nvidia_mig.Carver]:
        """What carves the slot ``handle`` of a GPU carved on demand, NVML initialised;
        one slot at a time. NVML's errors become DriverError."""
        if not any(d.kind == units.KIND for d in device.deployables) or not self._named(
            device.pci_address
        ):
            raise TargetNotFound(f"GPU {device.pci_address} is not carved on demand here")
        product = geometry.product(device.product_id)
        slots = self._slots(device.pci_address, product) or []
        if handle.address not in slots:
            raise TargetNotFound(f"GPU {device.pci_address} has no MIG slot {handle.address}")
        lib = self._lib()
        if lib is None:
            raise DriverError(f"GPU {device.pci_address}: carving MIG instances needs NVML")
        with self._carving_lock:
            try:
                with nvml.session(lib):
                    yield nvidia_mig.Carver(lib, device.pci_address, product, slots, self.slot_map)
            except lib.NVMLError as error:
                raise DriverError(f"GPU {device.pci_address}: NVML: {error}") from error

    def make_mig_instance(
        self, device: Device, handle: AttachHandle, profile: str
    ) -> Mapping[str, str]:
        """Make a ``profile`` instance for the slot ``handle`` where the planner puts
        it on this GPU; its info. On a GPU carved for VMs the slot is a virtual function,
        given the MIG-backed vGPU type of ``profile`` once the instance is made (the
        instance undone when it cannot be). Idempotent. NoMigPlacement when there is no
        position."""
        with self._carving(device, handle) as carver:
            made = dict(carver.make(handle.address, profile))
        if handle.type != "PCI":
            return made
        try:
            return {**made, units.INFO_VGPU: self._give_vgpu(handle, profile)}
        except DriverError:
            with self._carving(device, handle) as carver:
                carver.destroy(handle.address)
            raise

    def _give_vgpu(self, handle: AttachHandle, profile: str) -> str:
        """Give the virtual function ``handle`` the MIG-backed vGPU type of ``profile``
        (NVIDIA names it ``... -3-40C`` for a 3g.40gb); its type id."""
        vf = handle.address
        suffix = units.vgpu_suffix(units.find(profile)[1])
        current = self.sysfs.read(self.sysfs.path(PCI_DEVICES, vf, _CURRENT_VGPU))
        offers = _creatable(
            self.sysfs.read(self.sysfs.path(PCI_DEVICES, vf, "nvidia/creatable_vgpu_types"))
        )
        chosen = [i for i, label in (offers or {}).items() if label.endswith(suffix)]
        if current not in (None, "0") and (current in chosen or not offers):
            return current  # given already (a type in use is no longer offered)
        if not chosen:
            raise DriverError(
                f"VF {vf} offers no MIG-backed vGPU type for a {profile} (one ending "
                f"{suffix}): it offers {sorted((offers or {}).values())}; is NVIDIA's vGPU "
                f"manager loaded?"
            )
        given = dataclasses.replace(handle, info={**handle.info, "vgpu_type": chosen[0]})
        mdev.create(self.sysfs, given)
        return chosen[0]

    def destroy_mig_instance(self, device: Device, handle: AttachHandle) -> None:
        """Destroy the instance made for the slot ``handle``, none other (on a GPU carved
        for VMs, its virtual function freed of its vGPU type first); nothing when it
        holds none. DriverError, nothing destroyed, while a process runs on it."""
        if handle.type == "PCI":
            mdev.remove(self.sysfs, handle)
        with self._carving(device, handle) as carver:
            carver.destroy(handle.address)

    def _warn_mig_without_nvml(self, fn: PciFunction) -> None:
        """Once per GPU: MIG instances exist (the driver's /proc says so) but only NVML
        describes them, so the GPU is reported whole."""
        if fn.address in self._mig_warned or not mig_instances_in_proc(self.sysfs, fn.address):
            return
        self._mig_warned.add(fn.address)
        LOG.warning(
            "GPU %s is in MIG mode, but MIG instances can only be read through NVML "
            "(nvidia-ml-py and the driver's libnvidia-ml; [nvidia_gpu] use_nvml): "
            "reporting it as a whole GPU",
            fn.address,
        )

    # -- vGPU, mdev forms ------------------------------------------------------

    def _mdev_types(self, pf: PciFunction, parents: Sequence[PciFunction]) -> list[Deployable]:
        """mdev types of the PF (pre-Ampere) or of its VFs (Ampere, before vGPU 17)."""
        types: dict[str, _VgpuType] = {}
        for parent in parents:
            for type_dir in self.sysfs.children(parent.path / "mdev_supported_types", ""):
                if self.vgpu_types and type_dir.name not in self.vgpu_types:
                    continue
                entry = types.setdefault(type_dir.name, _VgpuType(type_dir.name, "mdev"))
                entry.label = entry.label or self.sysfs.read(type_dir / "name")
                entry.attributes.setdefault("device_api", self.sysfs.read(type_dir / "device_api"))
                entry.attributes.setdefault(
                    "description", self.sysfs.read(type_dir / "description")
                )
                entry.handles += self._mdev_handles(parent, type_dir)
        return [t.deployable(pf.device) for t in types.values()]

    def _mdev_handles(self, parent: PciFunction, type_dir: Path) -> list[AttachHandle]:
        available = self.sysfs.read_int(type_dir / "available_instances") or 0
        created = self.sysfs.listdir(type_dir / "devices")
        free = list(self._free_uuids(parent.address, type_dir.name, set(created), available))
        return [
            _mdev_handle(parent.address, type_dir.name, mdev, slot, in_use=mdev in created)
            for slot, mdev in enumerate(created + free)
        ]

    def _free_uuids(
        self, address: str, mdev_type: str, taken: set[str], count: int
    ) -> Iterable[str]:
        slot = 0
        while count > 0:
            candidate = str(uuid.uuid5(_SLOTS, f"{self.conf.host}/{address}/{mdev_type}/{slot}"))
            slot += 1
            if candidate not in taken:
                count -= 1
                yield candidate

    # -- vGPU, vendor-specific VFIO form ----------------------------------------

    def _vfio_types(self, pf: PciFunction, vfs: Sequence[PciFunction]) -> list[Deployable]:
        """VFs with ``nvidia/creatable_vgpu_types``: a free VF can become any type it
        lists; a VF whose ``current_vgpu_type`` is set is that type's, in use."""
        types: dict[str, _VgpuType] = {}
        for vf in vfs:
            creatable = _creatable(self.sysfs.read(vf.path / "nvidia/creatable_vgpu_types"))
            current = self.sysfs.read_int(vf.path / "nvidia/current_vgpu_type")
            if creatable is None and current is None:
                continue
            offers = {str(current): None} if current else dict(creatable or {})
            for type_id, label in offers.items():
                name = f"nvidia-{type_id}"
                if self.vgpu_types and name not in self.vgpu_types:
                    continue
                entry = types.setdefault(name, _VgpuType(name, "vfio"))
                entry.label = entry.label or label
                entry.handles.append(
                    pci_handle(vf.address, in_use=bool(current), vgpu_type=type_id)
                )
        return [t.deployable(pf.device) for t in sorted(types.values(), key=lambda t: t.name)]

    def health(self, device: Device) -> Health:
        """PCI and AER, then NVML as of this scan: a GPU NVML calls lost (fallen off the
        bus), a failed row remapping or uncorrectable ECC errors since the driver loaded
        (unhealthy), remapped rows or retired pages pending a reset (degraded), and the
        critical XIDs seen in the hold time, scoped to the MIG profile of the GPU
        instance NVML names (on a GPU carved on demand, to the slot handle holding it:
        that instance's units alone are taken out)."""
        address = device.pci_address
        found = [pci_health(self.sysfs, device, self.events), *self.events.active(address)]
        if address in self._lost:
            found.append(Health(UNHEALTHY, f"GPU {address} has fallen off the bus (NVML)"))
        faults = self._faults.get(address)
        if faults is not None:
            found.extend(_fault_health(address, faults))
        return worst(found)

    def xid(self, event: nvml.XidEvent) -> bool:
        """Record a critical XID (others are ignored); True when it was critical."""
        if event.xid not in self.critical_xids:
            LOG.info("GPU %s: XID %d (not critical here)", event.address, event.xid)
            return False
        key = slot = None
        if event.gpu_instance_id is not None:
            key = self._instances.get(event.address, {}).get(event.gpu_instance_id)
            slot = self._held_in.get(event.address, {}).get(event.gpu_instance_id)
        where = f" in GPU instance {event.gpu_instance_id}" if key else ""
        verdict = Health(UNHEALTHY, f"GPU {event.address}: XID {event.xid}{where}")
        LOG.warning("%s", verdict.reason)
        signal = f"xid{event.xid}/{key or ''}/{slot or ''}"
        found = scoped(key, [verdict], slot) if key else verdict
        self.events.event(event.address, signal, found)
        return True

    def start_watch(self, notify: Callable[[], None]) -> None:
        """Watch NVML's critical XID events in a thread; ``notify`` (a rescan) on each."""
        lib = self._lib()
        if lib is None or self._watch_stop is not None:
            return
        stop = self._watch_stop = threading.Event()

        def on_event(event: nvml.XidEvent) -> None:
            if self.xid(event):
                notify()

        threading.Thread(
            target=nvml.watch_xids, args=(lib, on_event, stop), name="nvml-xid", daemon=True
        ).start()

    def stop_watch(self) -> None:
        if self._watch_stop is not None:
            self._watch_stop.set()
            self._watch_stop = None

    def create_mdev(self, device: Device, handle: AttachHandle) -> None:
        mdev.create(self.sysfs, handle)

    def remove_mdev(self, device: Device, handle: AttachHandle) -> None:
        mdev.remove(self.sysfs, handle)


def _address(text: str) -> str:
    try:
        return normalize_bdf(text)
    except ValueError as error:
        raise DriverConfigError(
            f"[nvidia_gpu] dynamic_mig: {text!r} is neither a PCI address nor all"
        ) from error


class _VgpuType:
    """A vGPU type being collected over the parents that offer it."""

    def __init__(self, name: str, form: str) -> None:
        self.name = name
        self.label: str | None = None
        self.attributes: dict[str, Any] = {"form": form}
        self.handles: list[AttachHandle] = []

    def deployable(self, product_id: str) -> Deployable:
        return Deployable(
            key=f"vgpu/{self.name}",
            kind="vgpu_type",
            num_accelerators=len(self.handles),
            accelerator_type="VGPU",
            traits=(vgpu_trait(product_id, self.label or self.name),),
            attributes={"type_name": self.label, **self.attributes},
            attach_handles=tuple(self.handles),
        )


def vgpu_trait(product_id: str, label: str) -> str:
    """``CUSTOM_NVIDIA_<PID>_<second word of the type name>``, as upstream:
    ``GRID T4-2B`` on 1eb8 -> ``CUSTOM_NVIDIA_1EB8_T4_2B``."""
    words = label.split()
    return f"CUSTOM_NVIDIA_{product_id.upper()}_{trait_part(words[1] if len(words) > 1 else label)}"


def _creatable(content: str | None) -> dict[str, str] | None:
    """``1414 : NVIDIA H200X-1-18C`` lines -> {"1414": "NVIDIA H200X-1-18C"}."""
    if content is None:
        return None
    offers = {}
    for line in content.splitlines():
        type_id, sep, label = line.partition(":")
        if sep and type_id.strip().isdigit():
            offers[type_id.strip()] = label.strip()
    return offers


def _mdev_handle(parent: str, mdev_type: str, mdev: str, slot: int, in_use: bool) -> AttachHandle:
    """Upstream's MDEV attach_handle_info: the parent's PCI address, asked_type, vgpu_mark."""
    info = {**pci_handle_info(parent), "asked_type": mdev_type, "vgpu_mark": f"{mdev_type}_{slot}"}
    return AttachHandle(type="MDEV", address=mdev, info=info, in_use=in_use)


# -- whole GPUs and MIG ------------------------------------------------------------


def memory_type(gpu: nvml.NvmlGpu | None, product_id: str) -> str | None:
    """The GPU's memory family: from NVML's name when it tells ("NVIDIA H100 80GB
    HBM3"), else from the product table."""
    return memory.family(gpu.name if gpu else None) or MEMORY.get(product_id)


def _whole(
    address: str, gpu: nvml.NvmlGpu | None, product_id: str, in_use: bool = False
) -> Deployable:
    return Deployable(
        key="device",
        kind="device",
        num_accelerators=1,
        memory_mb=gpu.memory_mb if gpu else None,
        memory_type=memory_type(gpu, product_id),
        attach_handles=(pci_handle(address, in_use=in_use),),
    )


_MINOR = re.compile(r"^Device Minor:\s*(\d+)", re.MULTILINE)


def mig_instances_in_proc(sysfs: Sysfs, address: str) -> bool:
    """Whether the NVIDIA driver shows GPU instances of the GPU at ``address``:
    ``/proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<N>``, the minor number read from
    ``/proc/driver/nvidia/gpus/<address>/information``."""
    info = sysfs.read(sysfs.path("proc/driver/nvidia/gpus", address, "information"))
    minor = _MINOR.search(info or "")
    if minor is None:
        return False
    mig = sysfs.path("proc/driver/nvidia/capabilities", f"gpu{minor.group(1)}", "mig")
    return any(True for _ in sysfs.children(mig, "gi"))


def _mig(gpu: nvml.NvmlGpu) -> list[Deployable]:
    profiles = {p.name: p for p in gpu.profiles}
    names = sorted({m.profile or "unknown" for m in gpu.migs})
    deployables = []
    for name in names:
        profile = profiles.get(name)
        migs = [m for m in gpu.migs if (m.profile or "unknown") == name]
        handles = tuple(_mig_handle(gpu, m) for m in migs)
        deployables.append(
            Deployable(
                key=f"mig/{name}",
                kind="mig_profile",
                num_accelerators=len(handles),
                accelerator_type="MIG",
                memory_mb=profile.memory_mb if profile else migs[0].memory_mb,
                memory_type=memory_type(gpu, gpu.product_id),
                traits=(f"CUSTOM_NVIDIA_{gpu.product_id.upper()}_MIG_{trait_part(name)}",),
                attributes=_profile_attributes(profile),
                attach_handles=handles,
            )
        )
    return deployables


def _profile_attributes(profile: nvml.MigProfile | None) -> dict[str, Any]:
    if profile is None:
        return {}
    return {
        "profile_id": profile.profile_id,
        "max_instances": profile.instance_count,
        "remaining_capacity": profile.remaining,
    }


def _mig_handle(gpu: nvml.NvmlGpu, mig: nvml.MigInstance) -> AttachHandle:
    info = {
        **pci_handle_info(gpu.address),
        "gpu_uuid": gpu.uuid,
        "mig_uuid": mig.uuid,
        "gpu_instance_id": "" if mig.gpu_instance_id is None else str(mig.gpu_instance_id),
    }
    return AttachHandle(type="MIG", address=mig.uuid, info=info)


def _fault_health(address: str, faults: nvml.GpuFaults) -> list[Health]:
    found = []
    if faults.remap_failed:
        found.append(Health(UNHEALTHY, f"GPU {address}: a row remapping failed"))
    if faults.ecc_uncorrected_volatile:
        count = faults.ecc_uncorrected_volatile
        reason = f"GPU {address}: {count} uncorrectable ECC error(s) since the driver loaded"
        found.append(Health(UNHEALTHY, reason))
    if faults.remap_pending:
        found.append(Health(DEGRADED, f"GPU {address}: remapped rows pending a reset"))
    if faults.retired_pages_pending:
        found.append(Health(DEGRADED, f"GPU {address}: retired pages pending a reset"))
    return found


def _board(gpu: nvml.NvmlGpu | None, version: str | None) -> dict[str, Any]:
    if gpu is None:
        return {"source": "sysfs"}
    return {
        "source": "nvml",
        "product_name": gpu.name,
        "gpu_uuid": gpu.uuid,
        "memory_mb": gpu.memory_mb,
        "driver_version": version,
        "mig_enabled": gpu.mig_enabled,
    }
