"""The fake driver: simulated accelerators, deterministic, no hardware and no sysfs.

The devices come from a YAML inventory (``[fake] inventory_file``; a built-in one
when unset). PCI addresses and uuids are derived from ``[DEFAULT] host``, so a
host sees the same devices on every scan and two hosts see different ones.
Programming is simulated for real: the GBS header is parsed, an image built for
another region type is refused, and what was loaded is kept in ``[fake]
state_file`` so the next scan, and the next start, show it.

Where each device sits (``numa_node``, ``pcie_switch``, ``nvlink_domain``) is one value
per entry, or with ``count`` a list of one value per device (``topology``).

Attach handles are ``TEST_PCI`` for anything PCI (upstream's fake type, which
Nova's libvirt driver ignores), ``MDEV`` for vGPU slots and ``MIG`` for MIG
instances. docs/drivers.md describes the inventory format.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from oslo_config import cfg

from acceleron import json_file
from acceleron.drivers import gbs, memory
from acceleron.drivers.errors import BitstreamError, DriverConfigError, DriverError, TargetNotFound
from acceleron.drivers.nvidia_gpu import vgpu_trait
from acceleron.drivers.sysfs import (
    format_bdf,
    normalize_uuid,
    parse_bdf,
    pci_handle,
    pci_handle_info,
    trait_part,
    vendor_name,
)
from acceleron.exceptions import InvalidInput
from acceleron.mig import geometry, planner, units
from acceleron.vocabulary import (
    DEGRADED,
    DEVICE_TYPES,
    HEALTH_STATES,
    HEALTHY,
    UNHEALTHY,
    AttachHandle,
    Deployable,
    Device,
    Health,
)

LOG = logging.getLogger(__name__)
_NAMESPACE = uuid.UUID("0b9c1a52-7f0e-5d8a-b5b4-3f8e2c6d1a90")
MDEVS = "mdevs"  # a device's key in the state file: the vGPUs made on it
CLEANED = "cleaned"  # another: the cleanings done on it, the last ones
MIG_INSTANCES = "mig_instances"  # another: a ``mig: dynamic`` GPU's instances, once changed
_DEFAULT_VENDORS = {"FPGA": "8086", "GPU": "10de", "QAT": "8086", "NIC": "8086"}

DEFAULT_INVENTORY = """
devices:
  - type: FPGA                # two Intel PAC Arria10 cards, two PR regions each,
                              # the first with two functions
    count: 2
    product_id: "09c4"
    model: PAC_ARRIA10
    numa_node: 0
    regions:
      - region_type: ce48969398f05f33946d560708be108a
        accelerators: 2
        functions: [d8424dc4a4a3c413f89e433683f9040b, f7df405cbd7acf7222f144b0b93acd18]
      - region_type: 9926ab6d6c925a68aabca7d84c545738
        accelerators: 1
  - type: GPU                 # a T4 with two vGPU types
    product_id: "1eb8"
    model: T4
    numa_node: 0
    memory_mb: 15360
    memory_type: GDDR6
    vgpu_types:
      - {name: nvidia-222, label: GRID T4-1B, instances: 16}
      - {name: nvidia-223, label: GRID T4-2B, instances: 8}
  - type: GPU                 # an H100 in MIG mode
    product_id: "2330"
    model: H100
    numa_node: 1
    memory_mb: 81559
    memory_type: HBM3
    mig_profiles:
      - {name: 1g.10gb, instances: 4, memory_mb: 9856}
      - {name: 3g.40gb, instances: 1, memory_mb: 40192}
  - type: QAT                 # a C62x with four VFs
    product_id: "37c8"
    model: C62X
    numa_node: 1
    vfs: 4
"""


def built_in_functions() -> list[str]:
    """The functions the built-in inventory's regions hold as found (pre-programmed)."""
    entries = load_inventory(DEFAULT_INVENTORY, "built-in inventory")
    return [str(f) for e in entries for r in e.get("regions", ()) for f in r.get("functions", ())]


_DEVICE_KEYS = {
    "type", "count", "vendor_id", "product_id", "vendor_name", "model", "numa_node",
    "pcie_switch", "nvlink_domain", "memory_mb", "memory_type", "health", "regions",
    "vgpu_types", "mig_profiles", "vfs", "pci_address", "mig", "mig_instances", "mig_vgpu",
}  # fmt: skip
# Where a device sits: one value for every device of the entry, or with ``count`` a list
# of one value per device.
_TOPOLOGY = ("numa_node", "pcie_switch", "nvlink_domain")
_SHAPES = ("regions", "vgpu_types", "mig_profiles", "vfs", "mig")
_ITEM_KEYS = {
    "regions": {"region_type", "accelerators", "functions"},
    "vgpu_types": {"name", "label", "instances"},
    "mig_profiles": {"name", "instances", "memory_mb"},
    "mig_instances": {"profile", "start"},
}


# ---------------------------------------------------------------------------
# The inventory


def load_inventory(text: str, source: str) -> list[dict[str, Any]]:
    """The device entries of an inventory, checked; raises DriverConfigError."""
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        raise DriverConfigError(f"fake inventory {source} is not YAML: {error}") from error
    entries = data.get("devices") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise DriverConfigError(f"fake inventory {source} needs a 'devices' list")
    named: set[str] = set()
    for number, entry in enumerate(entries, 1):
        where = f"{source}, device {number}"
        _check_entry(entry, where)
        if "pci_address" in entry:
            address = _check_address(entry, where)
            if address in named:
                raise DriverConfigError(f"{where}: pci_address {address} is named twice")
            named.add(address)
    return entries


def _check_address(entry: Mapping[str, Any], where: str) -> str:
    """The address an entry names, checked: one device, a PCI address."""
    if entry.get("count", 1) != 1:
        raise DriverConfigError(f"{where}: a pci_address names one device, not a count")
    try:
        return fixed_address(entry)
    except ValueError as error:
        raise DriverConfigError(f"{where}: pci_address: {error}") from error


def fixed_address(entry: Mapping[str, Any]) -> str:
    """The PCI address an inventory entry names (``pci_address``), normalised."""
    return str(parse_bdf(str(entry["pci_address"])))


def _check_entry(entry: Any, where: str) -> None:
    if not isinstance(entry, dict):
        raise DriverConfigError(f"{where}: expected a mapping, got {entry!r}")
    unknown = set(entry) - _DEVICE_KEYS
    if unknown:
        raise DriverConfigError(f"{where}: unknown keys {sorted(unknown)}")
    if entry.get("type") not in DEVICE_TYPES:
        raise DriverConfigError(f"{where}: type must be one of {', '.join(DEVICE_TYPES)}")
    shapes = [shape for shape in _SHAPES if shape in entry]
    if len(shapes) > 1:
        raise DriverConfigError(f"{where}: {' and '.join(shapes)} cannot be combined")
    for shape, keys in _ITEM_KEYS.items():
        for item in entry.get(shape) or []:
            if not isinstance(item, dict) or set(item) - keys:
                raise DriverConfigError(f"{where}: {shape} entries take {sorted(keys)}: {item!r}")
    for key in ("count", "vfs"):
        if key in entry and (not isinstance(entry[key], int) or entry[key] < 0):
            raise DriverConfigError(f"{where}: {key} must be a whole number")
    for key in _TOPOLOGY:
        _check_topology(entry, key, where)
    _check_mig(entry, where)


def _check_mig(entry: Mapping[str, Any], where: str) -> None:
    """``mig: dynamic``: a GPU carved on demand, whose product has a MIG table
    (``acceleron.mig.geometry``), holding ``mig_instances`` at start (none if left out)
    that the table allows."""
    if "mig" not in entry:
        for key in ("mig_instances", "mig_vgpu"):
            if key in entry:
                raise DriverConfigError(f"{where}: {key} needs mig: dynamic")
        return
    if not isinstance(entry.get("mig_vgpu", False), bool):
        raise DriverConfigError(f"{where}: mig_vgpu is true or false")
    if entry["mig"] != "dynamic" or entry["type"] != "GPU":
        raise DriverConfigError(f"{where}: mig takes one value, dynamic, and on a GPU only")
    if not geometry.known(str(entry.get("product_id", ""))):
        raise DriverConfigError(
            f"{where}: mig: dynamic needs a product_id with a MIG table: {geometry.tables()}"
        )
    try:
        _mig_layout(entry, {})
    except (InvalidInput, KeyError, TypeError, ValueError) as error:
        raise DriverConfigError(f"{where}: mig_instances: {_words(error)}") from error


def _words(error: Exception) -> str:
    return error.message if isinstance(error, InvalidInput) else f"{error!r}"


def _mig_layout(entry: Mapping[str, Any], programmed: Mapping[str, Any]) -> geometry.Layout:
    """The instances a ``mig: dynamic`` GPU holds: those made or destroyed since (the
    state file), else the inventory's."""
    instances = [geometry.Instance(str(item[0]), int(item[1])) for item in _held(entry, programmed)]
    return geometry.Layout.of(geometry.product(str(entry["product_id"]).lower()), instances)


def _held(entry: Mapping[str, Any], programmed: Mapping[str, Any]) -> list[list[Any]]:
    """The instances a ``mig: dynamic`` GPU holds as the state file keeps them (else as
    the inventory lists them): ``[profile, start]``, and the slot handle it was made for
    when Acceleron made it."""
    held = programmed.get(MIG_INSTANCES)
    if held is None:
        held = [[item["profile"], item["start"]] for item in entry.get("mig_instances") or []]
    return [list(item) for item in held]


def _check_topology(entry: Mapping[str, Any], key: str, where: str) -> None:
    """``numa_node`` (a whole number), ``pcie_switch`` (a PCI address) or
    ``nvlink_domain`` (a name): one value, or a list of ``count`` values."""
    value = entry.get(key)
    values = value if isinstance(value, list) else [value]
    count = entry.get("count", 1)
    if isinstance(value, list) and len(value) != count:
        raise DriverConfigError(
            f"{where}: {key} lists {len(value)} values for {count} device(s): give one "
            f"value, or one per device"
        )
    for item in values:
        if item is None:
            continue
        if key == "numa_node" and (not isinstance(item, int) or isinstance(item, bool) or item < 0):
            raise DriverConfigError(f"{where}: numa_node {item!r} is not a NUMA node number")
        if key == "pcie_switch":
            try:
                parse_bdf(str(item))
            except ValueError as error:
                raise DriverConfigError(
                    f"{where}: pcie_switch {item!r} is not the PCI address of a switch's "
                    f"upstream port (e.g. 0000:17:00.0)"
                ) from error
        if key == "nvlink_domain" and (not isinstance(item, str) or not 0 < len(item) <= 64):
            raise DriverConfigError(
                f"{where}: nvlink_domain {item!r} is not a name of 1 to 64 characters"
            )


def topology(entry: Mapping[str, Any], index: int) -> dict[str, Any]:
    """Where the ``index``-th device of an entry sits: its numa_node, pcie_switch (a
    canonical PCI address) and nvlink_domain, each None when the entry gives none."""
    found: dict[str, Any] = {}
    for key in _TOPOLOGY:
        value = entry.get(key)
        found[key] = value[index] if isinstance(value, list) else value
    if found["pcie_switch"] is not None:
        found["pcie_switch"] = str(parse_bdf(str(found["pcie_switch"])))
    return found


def addresses(host: str) -> Iterator[str]:
    """PF addresses of a host: one bus per device from a host-seeded start."""
    start = 0x10 + hashlib.sha256(host.encode()).digest()[0] % 0x40
    for n in range(1 << 20):
        domain, bus = divmod(start + n, 0x100)
        yield format_bdf(domain, bus, 0, 0)


def sub_address(pf: str, index: int) -> str:
    """The ``index``-th (1-based) function after a PF: VFs, region handles."""
    bdf = parse_bdf(pf)
    slot, function = divmod(index, 8)
    return format_bdf(bdf.domain, bdf.bus, slot, function)


@dataclasses.dataclass(frozen=True)
class _Context:
    host: str
    address: str
    entry: Mapping[str, Any]
    programmed: Mapping[str, Any]  # this device's part of the state file
    index: int = 0  # which of the entry's ``count`` devices it is

    def uuid(self, *parts: object) -> str:
        return str(uuid.uuid5(_NAMESPACE, "/".join([self.host, self.address, *map(str, parts)])))


# ---------------------------------------------------------------------------
# The driver


class FakeDriver:
    """Simulated devices from the inventory; regions can be programmed."""

    name = "fake"

    def __init__(self, conf: cfg.ConfigOpts, root: Path) -> None:
        self.conf = conf
        self.root = root
        source = conf.fake.inventory_file
        if source:
            try:
                text = Path(source).read_text()
            except OSError as error:
                raise DriverConfigError(f"cannot read [fake] inventory_file: {error}") from error
        else:
            source, text = "built-in inventory", DEFAULT_INVENTORY
        self.entries = load_inventory(text, source)
        self.state_file = Path(conf.fake.state_file)

    def _placed(self) -> Iterator[tuple[str, Mapping[str, Any], int]]:
        """Every simulated device with its address and which of its entry's devices it
        is, ``count`` expanded: the address an entry names (``pci_address``), else the
        host's next one that none names."""
        named = {fixed_address(e) for e in self.entries if "pci_address" in e}
        slots = (a for a in addresses(self.conf.host) if a not in named)
        for entry in self.entries:
            if "pci_address" in entry:
                yield fixed_address(entry), entry, 0
                continue
            for index in range(entry.get("count", 1)):
                yield next(slots), entry, index

    def discover(self) -> list[Device]:
        state = self._load_state()
        return [
            _device(_Context(self.conf.host, address, entry, state.get(address, {}), index))
            for address, entry, index in self._placed()
        ]

    def health(self, device: Device) -> Health:
        """The inventory's ``health`` for the device, unless the state file injects a
        fault: ``{"devices": {"<address>": {"health": {"state": ..., "reason": ...,
        "deployables": {"<key>": {"state": ..., "reason": ..., "handles": {"<address>":
        {"state": ..., "reason": ...}}}}}}}}`` (what tests write to break a device, a
        deployable, or one attach handle: the GPU instance in one slot)."""
        entry = {address: entry for address, entry, _ in self._placed()}.get(device.pci_address)
        if entry is None:
            return Health(UNHEALTHY, f"no simulated device at {device.pci_address}")
        injected = self._load_state().get(device.pci_address, {}).get("health")
        if isinstance(injected, dict):
            return _injected(injected)
        state = _state(entry.get("health"))
        return Health(state, None if state == HEALTHY else "set in the fake inventory")

    def program(self, device: Device, deployable_key: str, bitstream: Path) -> None:
        """Check the image fits the region, then record its functions in the state file."""
        regions = {
            d.key: d
            for found in self.discover()
            if found.pci_address == device.pci_address
            for d in found.deployables
            if d.programmable
        }
        region = regions.get(deployable_key)
        if region is None:
            raise TargetNotFound(
                f"no programmable region {deployable_key!r} on simulated device "
                f"{device.pci_address}"
            )
        header = gbs.read_header(bitstream)
        if header.interface_uuid != region.region_type:
            raise BitstreamError(
                f"bitstream {bitstream.name} is built for interface {header.interface_uuid}, "
                f"but region {deployable_key} of {device.pci_address} is {region.region_type}"
            )
        time.sleep(self.conf.fake.program_seconds)  # a real card's loading time, if set
        self._record(device.pci_address, deployable_key, bitstream, header)

    def clean(
        self,
        device: Device,
        deployable_key: str,
        handles: Sequence[str],
        method: str,
        image: Path | None,
    ) -> None:
        """Simulate a cleaning: ``[fake] cleaning_seconds`` long, failing where
        ``[fake] failing_cleanings`` says; a scrubbed region holds ``image`` (its blank
        image) or nothing. Each is logged in the state file (``cleaned``, the last 50)."""
        time.sleep(self.conf.fake.cleaning_seconds)
        failing = self.conf.fake.failing_cleanings
        if "*" in failing or device.pci_address in failing:
            raise DriverError(
                f"simulated failure to {method} {device.pci_address} {deployable_key} "
                f"([fake] failing_cleanings)"
            )
        if method == "scrub" and any(
            d.key == deployable_key and d.programmable for d in device.deployables
        ):
            if image is not None:
                self.program(device, deployable_key, image)
            else:
                self._blank(device.pci_address, deployable_key)
        state = self._load_state()
        done = state.setdefault(device.pci_address, {}).setdefault(CLEANED, [])
        done.append({"deployable": deployable_key, "handles": list(handles), "method": method})
        del done[:-50]
        self._save_state(state)

    def _blank(self, address: str, key: str) -> None:
        state = self._load_state()
        state.setdefault(address, {})[key] = {"function_uuids": []}
        self._save_state(state)

    def create_mdev(self, device: Device, handle: AttachHandle) -> None:
        """Simulate making the vGPU: it shows as in use from the next scan on."""
        self._set_mdev(device.pci_address, handle.address, present=True)

    def remove_mdev(self, device: Device, handle: AttachHandle) -> None:
        self._set_mdev(device.pci_address, handle.address, present=False)

    def _set_mdev(self, address: str, mdev_uuid: str, present: bool) -> None:
        state = self._load_state()
        device = state.setdefault(address, {})
        made = set(device.get(MDEVS, []))
        made = made | {mdev_uuid} if present else made - {mdev_uuid}
        device[MDEVS] = sorted(made)
        self._save_state(state)

    def make_mig(self, device: Device, profile: str, start: int | None = None) -> int:
        """Simulate making a GPU instance of ``profile`` (with its compute instance) on a
        GPU marked ``mig: dynamic``, outside Acceleron (as an operator would): at memory
        slice ``start``, or where the planner puts it; answers the slice it starts at. It
        shows from the next scan on. NoMigPlacement when the GPU has no room for the
        profile (its reason says whether slices or a valid position are missing);
        DriverError when ``start`` is a position the profile cannot take there."""
        return self._make(device, profile, start, None)

    def make_mig_instance(
        self, device: Device, handle: AttachHandle, profile: str
    ) -> Mapping[str, str]:
        """Make the instance of ``profile`` a slot handle asks for, where the planner
        puts it on this GPU; its info (uuid, profile, start; on a virtual function, the
        MIG-backed vGPU type made on it with the instance). Idempotent: a slot that
        holds such an instance already answers it; one holding another profile is a
        DriverError."""
        entry = self._dynamic(device)
        state = self._load_state()
        held = _held(entry, state.get(device.pci_address, {}))
        layout = _mig_layout(entry, state.get(device.pci_address, {}))
        found = next((item for item in held if item[2:] == [handle.address]), None)
        if found is not None:
            if found[0] != profile:
                raise DriverError(
                    f"slot {handle.address} of simulated GPU {device.pci_address} holds a "
                    f"{found[0]}, not a {profile}"
                )
            instance = geometry.Instance(*found[:2])
        else:
            instance = geometry.Instance(profile, self._make(device, profile, None, handle.address))
        vf = handle.address if entry.get("mig_vgpu") else None
        mig_uuid = handle.address  # a slot's own uuid; a virtual function's, its number's
        if vf is not None:
            ctx = _Context(self.conf.host, device.pci_address, entry, {}, 0)
            mig_uuid = ctx.uuid("mig-slot", handle.info.get("mig_slot", ""))
        return _instance_info(layout.product, mig_uuid, instance, vf)

    def destroy_mig_instance(self, device: Device, handle: AttachHandle) -> None:
        """Destroy the instance made for a slot handle, and no other; nothing when the
        slot holds none (destroyed already)."""
        entry = self._dynamic(device)
        state = self._load_state()
        held = _held(entry, state.get(device.pci_address, {}))
        kept = [item for item in held if item[2:] != [handle.address]]
        if len(kept) != len(held):
            state.setdefault(device.pci_address, {})[MIG_INSTANCES] = kept
            self._save_state(state)

    def _make(self, device: Device, profile: str, start: int | None, slot: str | None) -> int:
        entry = self._dynamic(device)
        state = self._load_state()
        layout = _mig_layout(entry, state.get(device.pci_address, {}))
        if start is None:
            gpu = planner.Gpu(device.pci_address, layout)
            start = planner.best_fit([gpu], profile).instance.start
        try:
            layout.adding(geometry.Instance(profile, start))
        except InvalidInput as error:
            raise DriverError(
                f"cannot make a {profile} instance on simulated GPU {device.pci_address}: "
                f"{error.message}"
            ) from error
        held = _held(entry, state.get(device.pci_address, {}))
        held.append([profile, start, *([slot] if slot else [])])
        state.setdefault(device.pci_address, {})[MIG_INSTANCES] = held
        self._save_state(state)
        return start

    def destroy_mig(self, device: Device, profile: str, start: int) -> None:
        """Simulate destroying the ``profile`` instance that starts at ``start``."""
        entry = self._dynamic(device)
        state = self._load_state()
        held = _held(entry, state.get(device.pci_address, {}))
        kept = [item for item in held if item[:2] != [profile, start]]
        if len(kept) == len(held):
            raise TargetNotFound(
                f"simulated GPU {device.pci_address}: no {profile} instance starts at "
                f"memory slice {start}."
            )
        state.setdefault(device.pci_address, {})[MIG_INSTANCES] = kept
        self._save_state(state)

    def _dynamic(self, device: Device) -> Mapping[str, Any]:
        entry = {address: entry for address, entry, _ in self._placed()}.get(device.pci_address)
        if entry is None or "mig" not in entry:
            raise TargetNotFound(f"no simulated GPU marked mig: dynamic at {device.pci_address}")
        return entry

    # -- state file ---------------------------------------------------------------

    def _load_state(self) -> dict[str, Any]:
        data = json_file.load(self.state_file, "fake driver state")
        return data.get("devices", {}) if isinstance(data, dict) else {}

    def _record(self, address: str, key: str, bitstream: Path, header: gbs.GbsHeader) -> None:
        state = self._load_state()
        state.setdefault(address, {})[key] = {
            "function_uuids": list(header.accelerator_type_uuids),
            "bitstream_sha256": _sha256(bitstream),
            "bitstream_name": bitstream.name,
        }
        self._save_state(state)

    def _save_state(self, state: Mapping[str, Any]) -> None:
        json_file.replace(self.state_file, {"version": 1, "devices": state})


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# ---------------------------------------------------------------------------
# Building the tree


def _device(ctx: _Context) -> Device:
    entry = ctx.entry
    kind = entry["type"]
    vendor_id = str(entry.get("vendor_id", _DEFAULT_VENDORS.get(kind, "1af4"))).lower()
    product_id = str(entry.get("product_id", "0001")).lower()
    return Device(
        pci_address=ctx.address,
        type=kind,
        vendor_id=vendor_id,
        vendor_name=entry.get("vendor_name") or vendor_name(vendor_id),
        product_id=product_id,
        model=trait_part(str(entry.get("model", product_id))),
        driver="fake",
        **topology(entry, ctx.index),
        std_board_info={"simulated": True},
        vendor_board_info={"memory_mb": entry.get("memory_mb"), **_mig_board_info(ctx)},
        deployables=tuple(_deployables(ctx, product_id)),
    )


def _deployables(ctx: _Context, product_id: str) -> list[Deployable]:
    entry = ctx.entry
    if "regions" in entry:
        return _regions(ctx)
    if "vgpu_types" in entry:
        return [_vgpu(ctx, product_id, item) for item in entry["vgpu_types"]]
    if "mig_profiles" in entry:
        return [_mig(ctx, product_id, item) for item in entry["mig_profiles"]]
    if "mig" in entry:
        return _dynamic_mig(ctx)
    if "vfs" in entry:
        handles = tuple(_test_pci(sub_address(ctx.address, i + 1)) for i in range(entry["vfs"]))
        return [Deployable("vf_pool", "vf_pool", len(handles), attach_handles=handles)]
    handle = _test_pci(ctx.address)
    return [
        Deployable(
            "device",
            "device",
            1,
            memory_mb=entry.get("memory_mb"),
            memory_type=_memory_type(entry),
            attach_handles=(handle,),
        )
    ]


def _memory_type(entry: Mapping[str, Any]) -> str | None:
    """The device's ``memory_type`` (``HBM3``, ``GDDR6``...) as its memory family."""
    return memory.family(str(entry.get("memory_type") or ""))


def _regions(ctx: _Context) -> list[Deployable]:
    deployables, next_function = [], 1
    for index, region in enumerate(ctx.entry["regions"]):
        count = int(region.get("accelerators", 1))
        handles = tuple(
            _test_pci(sub_address(ctx.address, next_function + i)) for i in range(count)
        )
        next_function += count
        key = f"region{index}"
        loaded = ctx.programmed.get(key) or {}
        functions = loaded.get("function_uuids", region.get("functions") or [])
        deployables.append(
            Deployable(
                key=key,
                kind="region",
                num_accelerators=count,
                programmable=True,
                region_type=normalize_uuid(str(region.get("region_type", ""))),
                function_uuids=tuple(u for f in functions if (u := normalize_uuid(str(f)))),
                attributes={k: v for k, v in loaded.items() if k != "function_uuids"},
                attach_handles=handles,
            )
        )
    return deployables


def _vgpu(ctx: _Context, product_id: str, item: Mapping[str, Any]) -> Deployable:
    name = str(item["name"])
    handles = tuple(
        AttachHandle(
            type="MDEV",
            address=ctx.uuid("vgpu", name, slot),
            info={
                **pci_handle_info(ctx.address),
                "asked_type": name,
                "vgpu_mark": f"{name}_{slot}",
            },
            in_use=ctx.uuid("vgpu", name, slot) in ctx.programmed.get(MDEVS, ()),
        )
        for slot in range(int(item.get("instances", 1)))
    )
    label = str(item.get("label", name))
    return Deployable(
        key=f"vgpu/{name}",
        kind="vgpu_type",
        num_accelerators=len(handles),
        accelerator_type="VGPU",
        traits=(vgpu_trait(product_id, label),),
        attributes={"type_name": label},
        attach_handles=handles,
    )


def _mig(ctx: _Context, product_id: str, item: Mapping[str, Any]) -> Deployable:
    name = str(item["name"])
    gpu_uuid = f"GPU-{ctx.uuid('gpu')}"
    migs = [f"MIG-{ctx.uuid('mig', name, slot)}" for slot in range(int(item.get("instances", 1)))]
    handles = tuple(
        AttachHandle(
            type="MIG",
            address=mig,
            info={**pci_handle_info(ctx.address), "gpu_uuid": gpu_uuid, "mig_uuid": mig},
        )
        for mig in migs
    )
    return Deployable(
        key=f"mig/{name}",
        kind="mig_profile",
        num_accelerators=len(handles),
        accelerator_type="MIG",
        memory_mb=item.get("memory_mb"),
        memory_type=_memory_type(ctx.entry),
        traits=(_mig_trait(product_id, name),),
        attach_handles=handles,
    )


def _mig_trait(product_id: str, name: str) -> str:
    return f"CUSTOM_NVIDIA_{product_id.upper()}_MIG_{trait_part(name)}"


def _mig_board_info(ctx: _Context) -> dict[str, Any]:
    """What a ``mig: dynamic`` GPU tells of itself: its MIG table and what is free."""
    if "mig" not in ctx.entry:
        return {}
    layout = _mig_layout(ctx.entry, ctx.programmed)
    return {
        "mig": "dynamic",
        "mig_product": layout.product.name,
        "mig_free_memory_slices": layout.free_slices_text(),
        "mig_free_compute_slices": layout.free_compute_slices,
    }


def _dynamic_mig(ctx: _Context) -> list[Deployable]:
    """A ``mig: dynamic`` GPU as one partitionable deployable (``acceleron.mig.units``):
    a slot handle per instance it can hold (one per compute slice), in use where an
    instance is, whose info tells which (its profile, where it starts, its uuid). With
    ``mig_vgpu`` the slots are the GPU's SR-IOV virtual functions, for VMs: an instance
    made for one comes with the MIG-backed vGPU type on it (``units.INFO_VGPU``)."""
    layout = _mig_layout(ctx.entry, ctx.programmed)
    gpu_uuid = f"GPU-{ctx.uuid('gpu')}"
    slots = _slot_addresses(ctx, layout.product)
    held = _slotted(ctx.programmed, slots, layout)
    handles = []
    for number, slot in enumerate(slots):
        vf = slot if ctx.entry.get("mig_vgpu") else None
        info = {
            **pci_handle_info(vf or ctx.address),
            "gpu_uuid": gpu_uuid,
            "mig_slot": str(number),
        }
        instance = held.get(slot)
        if instance is not None:
            info.update(_instance_info(layout.product, ctx.uuid("mig-slot", number), instance, vf))
        handles.append(
            AttachHandle(
                type="TEST_PCI" if vf else "MIG",
                address=slot,
                info=info,
                in_use=instance is not None,
            )
        )
    return [
        Deployable(
            key=units.KEY,
            kind=units.KIND,
            num_accelerators=len(handles),
            accelerator_type=units.ACCELERATOR_TYPE,
            attributes={"mig_product": layout.product.name},
            attach_handles=tuple(handles),
        )
    ]


def _slot_addresses(ctx: _Context, product: geometry.Product) -> list[str]:
    """The slot handles of a partitionable GPU: as many as it has compute slices. An
    instance the fake makes for a slot has the slot's uuid as its MIG uuid. With
    ``mig_vgpu``, its first virtual functions."""
    if ctx.entry.get("mig_vgpu"):
        return [sub_address(ctx.address, n + 1) for n in range(product.compute_slices)]
    return [f"MIG-{ctx.uuid('mig-slot', n)}" for n in range(product.compute_slices)]


def _slotted(
    programmed: Mapping[str, Any], slots: Sequence[str], layout: geometry.Layout
) -> dict[str, geometry.Instance]:
    """Which instance each slot holds: those made for a slot there, the others (found
    on the GPU, made outside Acceleron) in the free slots in order."""
    made: dict[str, geometry.Instance] = {}
    for item in programmed.get(MIG_INSTANCES) or []:
        if len(item) > 2 and item[2] in slots:
            made[str(item[2])] = geometry.Instance(str(item[0]), int(item[1]))
    free = [slot for slot in slots if slot not in made]
    others = [i for i in layout.instances if i not in made.values()]
    return {**made, **dict(zip(free, others, strict=False))}


def _instance_info(
    product: geometry.Product, mig_uuid: str, instance: geometry.Instance, vf: str | None
) -> dict[str, str]:
    """What a slot holding ``instance`` tells of it; on a virtual function (``vf``), the
    MIG-backed vGPU type made on it too."""
    profile = product.profile(instance.profile)
    info = {
        units.INFO_UUID: f"MIG-{mig_uuid.removeprefix('MIG-')}",
        units.INFO_PROFILE: instance.profile,
        "gpu_instance_profile_id": str(profile.id),
        units.INFO_START: str(instance.start),
    }
    if vf is not None:
        info[units.INFO_VGPU] = f"NVIDIA {product.name.split()[0]}{units.vgpu_suffix(profile)}"
    return info


def _test_pci(address: str) -> AttachHandle:
    return pci_handle(address, type="TEST_PCI")


_OLD_WORDS = {"ok": HEALTHY, "failed": UNHEALTHY}


def _injected(found: Mapping[str, Any]) -> Health:
    """A health injected in the state file, with its deployables' and handles' own."""
    parts = found.get("deployables") or {}
    handles = found.get("handles") or {}
    return Health(
        _state(found.get("state")),
        found.get("reason"),
        {key: _injected(part) for key, part in parts.items()},
        {address: _injected(part) for address, part in handles.items()},
    )


def _state(word: Any) -> str:
    """A health word of the inventory; ``ok`` and ``failed`` (the old words) still read."""
    state = _OLD_WORDS.get(str(word or HEALTHY), str(word or HEALTHY))
    return state if state in HEALTH_STATES else DEGRADED
