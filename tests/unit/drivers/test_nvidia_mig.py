"""The nvidia_gpu driver carving GPUs on demand ([nvidia_gpu] dynamic_mig), on the
simulated NVML of fake_nvml: discovery, making and destroying MIG instances per slot."""

from __future__ import annotations

import ctypes
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml  # type: ignore[import-untyped]
import pytest
from oslo_config import cfg

from acceleron.agent import tasks
from acceleron.drivers.errors import DriverError, TargetNotFound
from acceleron.drivers.fake import FakeDriver
from acceleron.drivers.nvidia_gpu import NvidiaGpuDriver
from acceleron.drivers.nvml import XidEvent
from acceleron.exceptions import NoMigPlacement
from acceleron.mig import geometry, units
from acceleron.service import arqs
from acceleron.vocabulary import AttachHandle, Deployable, Device, Health
from tests.fixtures.cards import gpu_spec
from tests.fixtures.tasks import Api
from tests.unit.drivers.fake_nvml import H100_PROFILES, FakeNvml, Gpu, h100

MakeTree = Callable[..., Path]
ADDRESS = "0000:3b:00.0"


@pytest.fixture
def conf(driver_conf: cfg.ConfigOpts) -> cfg.ConfigOpts:
    driver_conf.set_override("use_nvml", True, group="nvidia_gpu")
    driver_conf.set_override("dynamic_mig", [ADDRESS], group="nvidia_gpu")
    return driver_conf


@pytest.fixture
def root(sysfs_tree: MakeTree) -> Path:
    return sysfs_tree({"devices": [gpu_spec(ADDRESS)]})


def carved_h100(**fields: Any) -> FakeNvml:
    return FakeNvml([h100(mig_mode=1, profiles=dict(H100_PROFILES), **fields)])


class Host:
    """The driver on one host, and what it reports of the GPU."""

    def __init__(self, conf: cfg.ConfigOpts, root: Path, lib: FakeNvml) -> None:
        self.conf, self.root, self.lib = conf, root, lib
        self.driver = NvidiaGpuDriver(conf, root, lib)

    def device(self) -> Device:
        (device,) = self.driver.discover()
        return device

    def gpu(self) -> Deployable:
        (dep,) = self.device().deployables
        assert dep.kind == units.KIND
        return dep

    def slot(self, number: int) -> AttachHandle:
        return self.gpu().attach_handles[number]

    def held(self) -> dict[int, tuple[str, str]]:
        """Slot number -> (profile, start) of the slots in use."""
        return {
            n: (h.info[units.INFO_PROFILE], h.info[units.INFO_START])
            for n, h in enumerate(self.gpu().attach_handles)
            if h.in_use
        }

    def make(self, number: int, profile: str) -> dict[str, str]:
        return dict(self.driver.make_mig_instance(self.device(), self.slot(number), profile))

    def destroy(self, number: int) -> None:
        self.driver.destroy_mig_instance(self.device(), self.slot(number))

    def layout(self) -> dict[int, str]:
        """What NVML holds: start -> profile name."""
        product = geometry.product("2330")
        names = {p.id: p.name for p in product.profiles}
        gpu = self.lib.gpus[0]
        return {g.start: names[g.profile_id] for g in gpu.gpu_instances.values()}


# -- discovery -------------------------------------------------------------------------


def test_an_empty_gpu_is_one_partitionable_deployable(conf: cfg.ConfigOpts, root: Path) -> None:
    host = Host(conf, root, carved_h100())
    dep = host.gpu()
    assert (dep.key, dep.kind, dep.accelerator_type, dep.num_accelerators) == (
        units.KEY,
        units.KIND,
        units.ACCELERATOR_TYPE,
        7,  # one slot per compute slice
    )
    assert dep.attributes == {"mig_product": "H100 80GB"}
    assert [h.in_use for h in dep.attach_handles] == [False] * 7
    assert {h.type for h in dep.attach_handles} == {"MIG"}
    assert len({h.address for h in dep.attach_handles}) == 7
    assert dep.attach_handles[3].info == {
        "domain": "0000",
        "bus": "3b",
        "device": "00",
        "function": "0",
        "gpu_uuid": host.lib.gpus[0].uuid,
        "mig_slot": "3",
    }
    # The same slots every scan, and on a new driver; another host's are others.
    again = Host(conf, root, host.lib).gpu()
    assert [h.address for h in again.attach_handles] == [h.address for h in dep.attach_handles]
    conf.set_override("host", "otherhost")
    other = Host(conf, root, host.lib).gpu()
    assert {h.address for h in other.attach_handles}.isdisjoint(
        h.address for h in dep.attach_handles
    )


def test_instances_found_on_the_gpu_fill_the_free_slots_in_order(
    conf: cfg.ConfigOpts, root: Path
) -> None:
    lib = carved_h100()
    three = lib.carve(0, "3g.40gb", 4)  # made by hand (nvidia-smi), before Acceleron
    one = lib.carve(0, "1g.10gb", 1)
    dep = Host(conf, root, lib).gpu()
    assert [h.in_use for h in dep.attach_handles] == [True, True] + [False] * 5
    first, second = dep.attach_handles[:2]
    assert {k: first.info[k] for k in first.info if k not in ("domain", "bus", "device")} == {
        "function": "0",
        "gpu_uuid": lib.gpus[0].uuid,
        "mig_slot": "0",
        units.INFO_UUID: one.uuid,
        units.INFO_PROFILE: "1g.10gb",
        "gpu_instance_profile_id": "19",
        units.INFO_START: "1",
    }  # by placement: the 1g at slice 1 first
    assert (second.info[units.INFO_UUID], second.info[units.INFO_START]) == (three.uuid, "4")


def test_the_shape_is_the_fake_drivers(conf: cfg.ConfigOpts, root: Path, tmp_path: Path) -> None:
    """A GPU carved on demand looks the same from either driver: one deployable of the
    same kind, slot handles whose info has the same keys."""
    lib = carved_h100()
    lib.carve(0, "3g.40gb", 4)
    real = Host(conf, root, lib).gpu()
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        "devices:\n  - {type: GPU, product_id: '2330', mig: dynamic,"
        " mig_instances: [{profile: 3g.40gb, start: 4}]}\n"
    )
    conf.set_override("inventory_file", str(inventory), group="fake")
    (simulated,) = FakeDriver(conf, root).discover()[0].deployables
    assert (real.key, real.kind, real.accelerator_type, real.num_accelerators) == (
        simulated.key,
        simulated.kind,
        simulated.accelerator_type,
        simulated.num_accelerators,
    )
    assert real.attributes == simulated.attributes
    for mine, theirs in zip(real.attach_handles, simulated.attach_handles, strict=True):
        assert (mine.type, mine.in_use, set(mine.info)) == (
            theirs.type,
            theirs.in_use,
            set(theirs.info),
        )


@pytest.mark.parametrize(
    ("gpu", "device", "why"),
    [
        (h100(mig_mode=0), "0x2330", "is not in MIG mode"),
        (  # an A100 in MIG mode: no table for it
            h100(mig_mode=1, pci_device_id=0x20B010DE, name="NVIDIA A100", profiles=H100_PROFILES),
            "0x20b0",
            "has no MIG table",
        ),
    ],
)
def test_a_gpu_that_cannot_be_carved_is_published_as_today(
    conf: cfg.ConfigOpts,
    sysfs_tree: MakeTree,
    caplog: pytest.LogCaptureFixture,
    gpu: Gpu,
    device: str,
    why: str,
) -> None:
    root = sysfs_tree({"devices": [gpu_spec(ADDRESS, device=device)]})
    lib = FakeNvml([gpu])
    driver = NvidiaGpuDriver(conf, root, lib)
    with caplog.at_level(logging.WARNING):
        first = driver.discover()
        assert driver.discover() == first
    conf.set_override("dynamic_mig", [], group="nvidia_gpu")
    assert NvidiaGpuDriver(conf, root, lib).discover() == first  # as without the option
    warnings = [r.getMessage() for r in caplog.records if "dynamic_mig" in r.getMessage()]
    assert len(warnings) == 1  # once
    assert why in warnings[0] and ADDRESS in warnings[0]


def test_all_carves_every_gpu_that_can_be(conf: cfg.ConfigOpts, sysfs_tree: MakeTree) -> None:
    conf.set_override("dynamic_mig", ["all"], group="nvidia_gpu")
    root = sysfs_tree({"devices": [gpu_spec(ADDRESS), gpu_spec("0000:86:00.0")]})
    lib = FakeNvml([h100(mig_mode=1, profiles=H100_PROFILES), h100(0x86, mig_mode=0)])
    carved, whole = NvidiaGpuDriver(conf, root, lib).discover()
    assert [d.kind for d in carved.deployables] == [units.KIND]
    assert [d.kind for d in whole.deployables] == ["device"]


def test_a_bad_address_is_a_configuration_error(conf: cfg.ConfigOpts, root: Path) -> None:
    conf.set_override("dynamic_mig", ["3b:00"], group="nvidia_gpu")
    with pytest.raises(DriverError, match="dynamic_mig: '3b:00' is neither"):
        NvidiaGpuDriver(conf, root, carved_h100())


# -- making --------------------------------------------------------------------------


def test_make_at_the_planners_position(conf: cfg.ConfigOpts, root: Path) -> None:
    host = Host(conf, root, carved_h100())
    made = host.make(2, "1g.10gb")
    # On an empty GPU the planner keeps the 4g and the three 2g positions: slice 6.
    assert host.layout() == {6: "1g.10gb"}
    (mig,) = host.lib.gpus[0].migs.values()
    assert made == {
        units.INFO_UUID: mig.uuid,
        units.INFO_PROFILE: "1g.10gb",
        "gpu_instance_profile_id": "19",
        units.INFO_START: "6",
    }
    slot = host.slot(2)
    assert slot.in_use and {k: slot.info[k] for k in made} == made
    assert host.held() == {2: ("1g.10gb", "6")}
    # The next goes where the planner says given the first: a 3g at 0 (4-7 is spoilt).
    host.make(0, "3g.40gb")
    assert host.layout() == {6: "1g.10gb", 0: "3g.40gb"}
    assert host.held() == {0: ("3g.40gb", "0"), 2: ("1g.10gb", "6")}


def test_the_slot_map_survives_a_new_driver(conf: cfg.ConfigOpts, root: Path) -> None:
    lib = carved_h100()
    host = Host(conf, root, lib)
    host.make(5, "2g.20gb")
    lib.carve(0, "1g.10gb", 0)  # made by hand since: fills the first free slot
    slot_map = json.loads(Path(conf.nvidia_gpu.mig_slots_file).read_text())
    assert list(slot_map["gpus"][ADDRESS]) == [host.slot(5).address]
    restarted = Host(conf, root, lib)
    assert restarted.held() == {0: ("1g.10gb", "0"), 5: ("2g.20gb", "4")}
    # What it made is still its own: it answers it, and destroys it alone.
    assert restarted.make(5, "2g.20gb")[units.INFO_START] == "4"
    restarted.destroy(5)
    assert restarted.held() == {0: ("1g.10gb", "0")}
    assert host.layout() == {0: "1g.10gb"}


def test_an_instance_gone_from_its_slot_frees_it(conf: cfg.ConfigOpts, root: Path) -> None:
    """The slot map names a GPU instance that is no longer there (destroyed by hand, and
    another made with its id elsewhere): the slot is free, the other found."""
    host = Host(conf, root, carved_h100())
    host.make(1, "1g.10gb")
    gpu = host.lib.gpus[0]
    (gi,) = gpu.gpu_instances.values()
    gi.start = 0  # NVML reused its id for an instance elsewhere
    assert host.held() == {0: ("1g.10gb", "0")}
    host.destroy(1)  # nothing made for slot 1 is there: nothing to do
    assert host.layout() == {0: "1g.10gb"}
    assert json.loads(Path(conf.nvidia_gpu.mig_slots_file).read_text())["gpus"][ADDRESS] == {}


def test_no_valid_position_is_refused_with_nothing_made(conf: cfg.ConfigOpts, root: Path) -> None:
    lib = carved_h100()
    lib.carve(0, "1g.10gb", 2)
    lib.carve(0, "1g.10gb", 5)
    host = Host(conf, root, lib)
    before = dict(lib.gpus[0].gpu_instances)
    with pytest.raises(NoMigPlacement) as refused:
        host.make(3, "3g.40gb")  # 6 memory and 5 compute slices free, no position
    assert refused.value.reason == geometry.NO_VALID_POSITION
    assert "{0,4}:4" in str(refused.value)
    assert lib.gpus[0].gpu_instances == before
    assert not any(c.startswith("create_gi 3g") for c in lib.calls)


def test_nvml_refuses_an_overlapping_placement(conf: cfg.ConfigOpts) -> None:
    """The simulated NVML itself holds to the table: what the tests meet is NVML's rule."""
    lib = carved_h100()
    lib.carve(0, "1g.10gb", 2)
    for start, size, code in ((0, 4, 23), (1, 4, 2), (4, 2, 2)):  # overlap, start, size
        placement = pynvml.c_nvmlGpuInstancePlacement_t(start, size)
        with pytest.raises(pynvml.NVMLError) as refused:
            lib.nvmlDeviceCreateGpuInstanceWithPlacement(0, 9, ctypes.byref(placement))
        assert refused.value.value == code


def test_a_failed_compute_instance_leaves_no_gpu_instance(conf: cfg.ConfigOpts, root: Path) -> None:
    host = Host(conf, root, carved_h100(compute_instance_error=pynvml.NVML_ERROR_UNKNOWN))
    with pytest.raises(DriverError, match="the GPU instance is destroyed"):
        host.make(0, "2g.20gb")
    assert host.layout() == {}
    assert [c for c in host.lib.calls if "gi" in c][-2:] == ["create_gi 2g.20gb@4", "destroy_gi 1"]
    assert not Path(conf.nvidia_gpu.mig_slots_file).exists()
    assert host.held() == {}


def test_make_is_idempotent(conf: cfg.ConfigOpts, root: Path) -> None:
    host = Host(conf, root, carved_h100())
    first = host.make(4, "4g.40gb")
    assert host.make(4, "4g.40gb") == first
    assert len(host.lib.gpus[0].gpu_instances) == 1
    with pytest.raises(DriverError, match=r"holds a 4g\.40gb, not a 1g\.10gb"):
        host.make(4, "1g.10gb")


def test_only_a_slot_of_a_carved_gpu_is_carved(conf: cfg.ConfigOpts, root: Path) -> None:
    host = Host(conf, root, carved_h100())
    stranger = AttachHandle(type="MIG", address="not-a-slot", info={})
    with pytest.raises(TargetNotFound, match="no MIG slot"):
        host.driver.make_mig_instance(host.device(), stranger, "1g.10gb")
    conf.set_override("dynamic_mig", [], group="nvidia_gpu")
    plain = NvidiaGpuDriver(conf, root, host.lib)
    (device,) = plain.discover()
    with pytest.raises(TargetNotFound, match="not carved on demand"):
        plain.make_mig_instance(device, stranger, "1g.10gb")


# -- destroying ------------------------------------------------------------------------


def test_destroy_only_its_own(conf: cfg.ConfigOpts, root: Path) -> None:
    lib = carved_h100()
    lib.carve(0, "1g.10gb", 0)  # found on the GPU: slot 0
    host = Host(conf, root, lib)
    host.make(1, "1g.10gb")  # beside the first (the planner's tightest fit)
    host.make(2, "2g.20gb")
    assert host.held() == {0: ("1g.10gb", "0"), 1: ("1g.10gb", "1"), 2: ("2g.20gb", "2")}
    host.destroy(1)
    assert host.layout() == {0: "1g.10gb", 2: "2g.20gb"}
    host.destroy(0)  # holds what Acceleron did not make for it: not destroyed
    host.destroy(1)  # destroyed already: nothing
    assert host.layout() == {0: "1g.10gb", 2: "2g.20gb"}
    assert host.held() == {0: ("1g.10gb", "0"), 2: ("2g.20gb", "2")}
    assert sum(c.startswith("destroy_gi") for c in lib.calls) == 1


def test_destroy_is_refused_while_a_process_runs(conf: cfg.ConfigOpts, root: Path) -> None:
    host = Host(conf, root, carved_h100())
    made = host.make(0, "3g.40gb")
    (mig,) = host.lib.gpus[0].migs.values()
    mig.processes.append(4242)
    with pytest.raises(DriverError, match=r"processes \(4242\) still run"):
        host.destroy(0)
    assert host.layout() == {4: "3g.40gb"}
    assert host.slot(0).info[units.INFO_UUID] == made[units.INFO_UUID]
    mig.processes.clear()
    host.destroy(0)
    assert host.layout() == {} and host.lib.gpus[0].migs == {}
    assert host.held() == {}


def test_nvml_failing_is_a_driver_error(conf: cfg.ConfigOpts, root: Path) -> None:
    host = Host(conf, root, carved_h100())
    device, slot = host.device(), host.slot(0)
    host.lib.init_error = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    with pytest.raises(DriverError, match="NVML"):
        host.driver.make_mig_instance(device, slot, "1g.10gb")


def test_an_xid_in_one_of_its_instances_is_the_slot_holding_it(
    conf: cfg.ConfigOpts, root: Path
) -> None:
    """A critical XID NVML scopes to a GPU instance of a GPU carved on demand is the slot
    handle's holding that instance: the ``mig_gpu`` deployable itself stays healthy."""
    host = Host(conf, root, carved_h100())
    host.make(2, "2g.20gb")
    host.make(0, "1g.10gb")
    device = host.device()
    slot = host.slot(2).address
    instances = host.lib.gpus[0].gpu_instances
    (gi,) = (n for n, found in instances.items() if found.profile_id == 14)  # the 2g
    assert host.driver.xid(XidEvent(ADDRESS, 94, gi))
    verdict = host.driver.health(device)
    reason = f"GPU {ADDRESS}: XID 94 in GPU instance {gi}"
    assert verdict.deployables == {units.KEY: Health(handles={slot: Health("unhealthy", reason)})}
    assert verdict.state == "healthy"


def test_a_gpu_whose_instances_nvml_cannot_list_is_published_as_today(
    conf: cfg.ConfigOpts, root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lib = carved_h100(list_error=pynvml.NVML_ERROR_NO_PERMISSION)
    with caplog.at_level(logging.WARNING):
        (device,) = NvidiaGpuDriver(conf, root, lib).discover()
    assert [d.kind for d in device.deployables] == []  # no MIG device: no profile either
    assert "does not let NVML list its GPU instances" in caplog.text


# -- through the agent's tasks ---------------------------------------------------------


def test_the_agents_mig_tasks_carve_the_nvidia_gpu(conf: cfg.ConfigOpts, root: Path) -> None:
    """``make_mig`` and ``destroy_mig`` as the API queues them, run by the agent's task
    runner on this driver: the instance's info is the task's result; a GPU with the
    slices but no position fails the task with the planner's reason."""
    lib = carved_h100()
    host = Host(conf, root, lib)
    api = Api(b"")
    runner = tasks.TaskRunner(tasks.Settings.from_conf(conf), [host.driver], api)  # type: ignore[arg-type]

    def task(uuid: str, kind: str, slot: int, **more: str) -> dict[str, Any]:
        params = arqs.mig_params(ADDRESS, units.KEY, host.slot(slot).address)
        runner.execute({"uuid": uuid, "kind": kind, "params": {**params, **more}})
        return dict(api.updates[-1])

    made = task("t1", "make_mig", 0, profile="1g.10gb")
    assert made["state"] == "done"
    assert made["result"]["instance"] == {
        k: host.slot(0).info[k] for k in made["result"]["instance"]
    }
    assert host.layout() == {6: "1g.10gb"}
    lib.carve(0, "1g.10gb", 2)  # by hand: 3g positions both partly taken
    refused = task("t2", "make_mig", 1, profile="3g.40gb")
    assert refused["state"] == "failed" and "none where it may start" in refused["error"]
    assert task("t3", "destroy_mig", 0)["state"] == "done"
    assert host.layout() == {2: "1g.10gb"}


# -- carved for VMs: each slot one of its virtual functions ---------------------------

VFS = [f"0000:3b:00.{n}" for n in range(1, 8)] + ["0000:3b:01.0"]
# What NVIDIA's vGPU manager offers on a VF of an H100 in MIG mode: MIG-backed types.
MIG_TYPES = ["1061 : NVIDIA H100XM-1-10C", "1062 : NVIDIA H100XM-2-20C",
             "1063 : NVIDIA H100XM-3-40C", "1064 : NVIDIA H100XM-7-80C"]  # fmt: skip


def vm_root(sysfs_tree: MakeTree, vfs: list[str], types: list[str] = MIG_TYPES) -> Path:
    """The GPU with SR-IOV virtual functions that take MIG-backed vGPU types."""
    sriov = {
        "totalvfs": 16,
        "vf_device": "0x2330",
        "vf_driver": "nvidia",
        "vfs": [{"bdf": vf, "nvidia": {"creatable_vgpu_types": types}} for vf in vfs],
    }
    return sysfs_tree({"devices": [gpu_spec(ADDRESS, sriov=sriov)]})


def current_type(root: Path, vf: str) -> str:
    return (root / "sys/bus/pci/devices" / vf / "nvidia/current_vgpu_type").read_text().strip()


def test_a_gpu_carved_for_vms_has_its_virtual_functions_for_slots(
    conf: cfg.ConfigOpts, sysfs_tree: MakeTree
) -> None:
    conf.set_override("dynamic_mig_vgpu", ["all"], group="nvidia_gpu")
    host = Host(conf, vm_root(sysfs_tree, VFS), carved_h100())
    handles = host.gpu().attach_handles
    assert [(h.type, h.address) for h in handles] == [("PCI", vf) for vf in VFS[:7]]
    assert handles[0].info["function"] == "1" and handles[0].info["gpu_uuid"]


def test_a_bind_makes_the_instance_then_the_vgpu_on_its_virtual_function(
    conf: cfg.ConfigOpts, sysfs_tree: MakeTree
) -> None:
    """The GPU instance at the planner's position, then the VF given the MIG-backed type
    of its profile; again: the same. The release frees the VF first, then destroys."""
    conf.set_override("dynamic_mig_vgpu", [ADDRESS], group="nvidia_gpu")
    root = vm_root(sysfs_tree, VFS)
    host = Host(conf, root, carved_h100())
    made = host.make(0, "3g.40gb")
    assert made[units.INFO_VGPU] == "1063" and current_type(root, VFS[0]) == "1063"
    assert host.layout() == {int(made[units.INFO_START]): "3g.40gb"}
    assert host.slot(0).in_use and host.slot(0).info[units.INFO_VGPU] == "1063"
    assert host.make(0, "3g.40gb") == made  # Nova's retry: nothing more
    assert len(host.lib.gpus[0].gpu_instances) == 1
    host.destroy(0)
    assert current_type(root, VFS[0]) == "0" and host.layout() == {}


def test_a_virtual_function_without_the_type_leaves_nothing_made(
    conf: cfg.ConfigOpts, sysfs_tree: MakeTree
) -> None:
    conf.set_override("dynamic_mig_vgpu", ["all"], group="nvidia_gpu")
    root = vm_root(sysfs_tree, VFS, types=["1061 : NVIDIA H100XM-1-10C"])
    host = Host(conf, root, carved_h100())
    with pytest.raises(DriverError, match=r"offers no MIG-backed vGPU type for a 3g\.40gb"):
        host.make(0, "3g.40gb")
    assert host.layout() == {} and current_type(root, VFS[0]) == "0"


def test_too_few_virtual_functions_is_not_carved_for_vms(
    conf: cfg.ConfigOpts, sysfs_tree: MakeTree, caplog: pytest.LogCaptureFixture
) -> None:
    conf.set_override("dynamic_mig_vgpu", ["all"], group="nvidia_gpu")
    host = Host(conf, vm_root(sysfs_tree, VFS[:3]), carved_h100())
    with caplog.at_level(logging.WARNING):
        kinds = [d.kind for d in host.device().deployables]
    assert units.KIND not in kinds
    assert "has 3 virtual functions for its 7 slots" in caplog.text
