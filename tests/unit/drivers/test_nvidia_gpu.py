"""The nvidia_gpu driver: sysfs alone, NVML through a recorded fake, vGPU and MIG forms."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from oslo_config import cfg

from acceleron.drivers import nvidia_gpu, nvml
from acceleron.drivers.nvidia_gpu import NvidiaGpuDriver, vgpu_trait
from acceleron.drivers.sysfs import pci_handle
from acceleron.vocabulary import AttachHandle, Deployable, Device
from tests.fixtures.cards import CREATED, gpu_spec
from tests.fixtures.sysfs import SCENARIO_6_1, deny_reads, rebuild_sysfs, scan_then_remove
from tests.unit.drivers.fake_nvml import H100_PROFILES, FakeNvml, Mig, h100

MakeTree = Callable[..., Path]
PF_INFO = {"domain": "0000", "bus": "3b", "device": "00", "function": "0"}


def discover(conf: cfg.ConfigOpts, root: Path, lib: FakeNvml | None = None) -> list[Device]:
    if lib is not None:
        conf.set_override("use_nvml", True, group="nvidia_gpu")
    return list(NvidiaGpuDriver(conf, root, lib).discover())


def mdev_sets(device: Device) -> dict[str, list[tuple[str, bool]]]:
    return {
        dep.key: [(h.address, h.in_use) for h in dep.attach_handles] for dep in device.deployables
    }


# -- sysfs only ------------------------------------------------------------------------


def test_the_6_1_gpu(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    (device,) = discover(driver_conf, sysfs_tree(SCENARIO_6_1))
    assert (device.pci_address, device.type, device.vendor_name, device.model) == (
        "0000:3b:00.0",
        "GPU",
        "NVIDIA",
        "T4",
    )
    assert (device.product_id, device.numa_node, device.vendor_board_info) == (
        "1eb8",
        0,
        {"source": "sysfs"},
    )
    t4_1b, t4_2b = device.deployables
    assert (t4_1b.key, t4_1b.kind, t4_1b.num_accelerators, t4_1b.accelerator_type) == (
        "vgpu/nvidia-222",
        "vgpu_type",
        16,
        "VGPU",
    )
    assert t4_1b.traits == ("CUSTOM_NVIDIA_1EB8_T4_1B",)
    assert t4_1b.attributes == {
        "type_name": "GRID T4-1B",
        "form": "mdev",
        "device_api": "vfio-pci",
        "description": "num_heads=4",
    }
    assert (t4_2b.key, t4_2b.num_accelerators, t4_2b.traits) == (
        "vgpu/nvidia-223",
        8,
        ("CUSTOM_NVIDIA_1EB8_T4_2B",),
    )
    # 16 free slots; 7 free + the existing mdev, in use with its own uuid.
    assert [h.in_use for h in t4_1b.attach_handles] == [False] * 16
    assert t4_2b.attach_handles[0] == AttachHandle(
        type="MDEV",
        address=CREATED,
        info={**PF_INFO, "asked_type": "nvidia-223", "vgpu_mark": "nvidia-223_0"},
        in_use=True,
    )
    assert [h.in_use for h in t4_2b.attach_handles[1:]] == [False] * 7
    for dep in (t4_1b, t4_2b):
        addresses = [h.address for h in dep.attach_handles]
        assert len(set(addresses)) == len(addresses)
        assert all(uuid.UUID(a).version == (4 if a == CREATED else 5) for a in addresses)
    assert t4_1b.attach_handles[5].info == {
        **PF_INFO,
        "asked_type": "nvidia-222",
        "vgpu_mark": "nvidia-222_5",
    }


def test_free_mdev_uuids_are_stable_and_per_host(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts
) -> None:
    root = sysfs_tree(SCENARIO_6_1)
    first = mdev_sets(discover(driver_conf, root)[0])
    assert mdev_sets(discover(driver_conf, root)[0]) == first
    driver_conf.set_override("host", "otherhost")
    other = mdev_sets(discover(driver_conf, root)[0])
    assert set(first["vgpu/nvidia-222"]).isdisjoint(other["vgpu/nvidia-222"])


def test_creating_an_mdev_with_a_slot_uuid_keeps_the_handle_set(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts
) -> None:
    types = {"nvidia-223": {"name": "GRID T4-2B", "available_instances": 3, "created": []}}
    before = discover(driver_conf, sysfs_tree({"devices": [gpu_spec(mdev_types=types)]}))
    handles = [h.address for h in before[0].deployables[0].attach_handles]
    assert len(handles) == 3
    # The agent creates the mdev with the second handle's uuid: one fewer available.
    types = {
        "nvidia-223": {"name": "GRID T4-2B", "available_instances": 2, "created": [handles[1]]}
    }
    after = discover(driver_conf, sysfs_tree({"devices": [gpu_spec(mdev_types=types)]}))
    assert {(h.address, h.in_use) for h in after[0].deployables[0].attach_handles} == {
        (handles[0], False),
        (handles[1], True),
        (handles[2], False),
    }


def test_enabled_vgpu_types(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    driver_conf.set_override("enabled_vgpu_types", ["nvidia-223"], group="nvidia_gpu")
    (device,) = discover(driver_conf, sysfs_tree(SCENARIO_6_1))
    assert [d.key for d in device.deployables] == ["vgpu/nvidia-223"]


def test_whole_gpu_without_vgpu(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    spec = gpu_spec("10000:3b:00.0", numa_node=-1, driver=None)
    (device,) = discover(driver_conf, sysfs_tree({"devices": [spec]}))
    assert (device.pci_address, device.model, device.numa_node) == ("10000:3b:00.0", "H100", None)
    assert device.deployables == (
        Deployable(
            key="device",
            kind="device",
            memory_type="HBM",  # the H100: from NVML's name, else the product table
            num_accelerators=1,
            attach_handles=(pci_handle("10000:3b:00.0"),),
        ),
    )


def test_gpu_bound_to_vfio_is_in_use_on_the_host(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts
) -> None:
    """Passed through to a VM already: reported, but not offered."""
    root = sysfs_tree({"devices": [gpu_spec(driver="vfio-pci"), gpu_spec("0000:86:00.0")]})
    passed, free = discover(driver_conf, root)
    assert passed.deployables[0].attach_handles == (pci_handle("0000:3b:00.0", in_use=True),)
    assert free.deployables[0].attach_handles == (pci_handle("0000:86:00.0"),)


def proc_gpu(root: Path, address: str, minor: int, gpu_instances: list[int]) -> None:
    """What the NVIDIA driver shows in /proc for a GPU and its MIG GPU instances."""
    info = root / "proc/driver/nvidia/gpus" / address / "information"
    info.parent.mkdir(parents=True)
    info.write_text(
        f"Model: \t\t NVIDIA H100 80GB HBM3\nBus Location: \t {address}\n"
        f"Device Minor: \t {minor}\nGPU Excluded:\t No\n"
    )
    mig = root / "proc/driver/nvidia/capabilities" / f"gpu{minor}" / "mig"
    mig.mkdir(parents=True)
    for gi in gpu_instances:
        (mig / f"gi{gi}" / "ci0").mkdir(parents=True)
        (mig / f"gi{gi}" / "access").write_text("DeviceFileMinor: 65\n")


def test_mig_without_nvml_is_a_whole_gpu_with_a_warning(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts, caplog: pytest.LogCaptureFixture
) -> None:
    root = sysfs_tree({"devices": [gpu_spec(), gpu_spec("0000:86:00.0")]})
    proc_gpu(root, "0000:3b:00.0", 1, [1, 2])  # in MIG mode, two GPU instances
    proc_gpu(root, "0000:86:00.0", 0, [])  # MIG off
    driver = NvidiaGpuDriver(driver_conf, root)
    with caplog.at_level(logging.WARNING):
        devices = driver.discover()
        driver.discover()
    assert [[d.key for d in device.deployables] for device in devices] == [["device"]] * 2
    warnings = [r.getMessage() for r in caplog.records if "MIG" in r.getMessage()]
    assert len(warnings) == 1  # once, for the GPU in MIG mode only
    assert warnings[0].startswith(
        "GPU 0000:3b:00.0 is in MIG mode, but MIG instances can only be read through NVML"
    )


def test_mdev_types_on_sriov_vfs(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    """Ampere before vGPU 17: each VF carries the types, one instance each."""
    free = {"nvidia-500": {"name": "NVIDIA A100-4C", "available_instances": 1}}
    used = {
        "nvidia-500": {"name": "NVIDIA A100-4C", "available_instances": 0, "created": [CREATED]}
    }
    spec = gpu_spec(
        device="0x20b5",
        sriov={
            "totalvfs": 16,
            "vf_device": "20b5",
            "vf_driver": "nvidia",
            "vfs": [
                {"bdf": "0000:3b:00.4", "mdev_types": used},
                {"bdf": "0000:3b:00.5", "mdev_types": free},
            ],
        },
    )
    (device,) = discover(driver_conf, sysfs_tree({"devices": [spec]}))
    (dep,) = device.deployables
    assert (dep.key, dep.num_accelerators, dep.traits) == (
        "vgpu/nvidia-500",
        2,
        ("CUSTOM_NVIDIA_20B5_A100_4C",),
    )
    first = dep.attach_handles[0]
    assert (first.address, first.in_use, first.info["function"]) == (
        CREATED,
        True,
        "4",
    )
    assert (dep.attach_handles[1].in_use, dep.attach_handles[1].info["function"]) == (False, "5")


def test_vendor_specific_vfio_vgpu(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    """vGPU 17+: a free VF can become any type it lists; an assigned VF is in use."""
    offers = ["1414 : NVIDIA H100-1-10C", "1415 : NVIDIA H100-2-20C"]
    spec = gpu_spec(
        device="0x2331",
        sriov={
            "totalvfs": 16,
            "vf_device": "2331",
            "vf_driver": "nvidia",
            "vfs": [
                {
                    "bdf": "0000:3b:00.4",
                    "nvidia": {"creatable_vgpu_types": [], "current_vgpu_type": 1414},
                },
                {"bdf": "0000:3b:00.5", "nvidia": {"creatable_vgpu_types": offers}},
                {"bdf": "0000:3b:00.6", "nvidia": {"creatable_vgpu_types": offers[:1]}},
            ],
        },
    )
    (device,) = discover(driver_conf, sysfs_tree({"devices": [spec]}))
    assert [(d.key, d.kind, d.num_accelerators, d.traits) for d in device.deployables] == [
        ("vgpu/nvidia-1414", "vgpu_type", 3, ("CUSTOM_NVIDIA_2331_H100_1_10C",)),
        ("vgpu/nvidia-1415", "vgpu_type", 1, ("CUSTOM_NVIDIA_2331_H100_2_20C",)),
    ]
    assert device.deployables[0].attach_handles == (
        pci_handle("0000:3b:00.4", in_use=True, vgpu_type="1414"),
        pci_handle("0000:3b:00.5", vgpu_type="1414"),
        pci_handle("0000:3b:00.6", vgpu_type="1414"),
    )
    assert device.deployables[0].attributes == {"type_name": "NVIDIA H100-1-10C", "form": "vfio"}


def test_permission_denied_reads_as_unknown(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a non-root agent meets on 0600 files: the GPU is still reported, what it
    cannot read is unknown, and no free vGPU slot is invented."""
    types = {"nvidia-223": {"name": "GRID T4-2B", "available_instances": 7, "created": [CREATED]}}
    root = sysfs_tree({"devices": [gpu_spec(device="0x1eb8", mdev_types=types)]})
    deny_reads(monkeypatch, "numa_node", "available_instances")
    (device,) = discover(driver_conf, root)
    assert (device.pci_address, device.model, device.numa_node) == ("0000:3b:00.0", "T4", None)
    (dep,) = device.deployables
    assert (dep.key, dep.traits) == ("vgpu/nvidia-223", ("CUSTOM_NVIDIA_1EB8_T4_2B",))
    assert [(h.address, h.in_use) for h in dep.attach_handles] == [(CREATED, True)]


def test_gpu_gone_after_the_scan_listed_it(
    sysfs_tree: MakeTree,
    driver_conf: cfg.ConfigOpts,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Listed, then gone before its vGPU types are read: left out, not a whole GPU."""
    types = {"nvidia-223": {"name": "GRID T4-2B", "available_instances": 2}}
    root = sysfs_tree(
        {
            "devices": [
                gpu_spec("0000:3b:00.0", "0x1eb8", mdev_types=types),
                gpu_spec("0000:86:00.0", "0x1eb8", mdev_types=types),
            ]
        }
    )
    scan_then_remove(monkeypatch, nvidia_gpu, "0000:3b:00.0")
    with caplog.at_level(logging.INFO):
        devices = discover(driver_conf, root)
    assert [(d.pci_address, [p.key for p in d.deployables]) for d in devices] == [
        ("0000:86:00.0", ["vgpu/nvidia-223"])
    ]
    assert "PCI device 0000:3b:00.0 vanished during the scan; leaving it out" in caplog.text


def test_vfs_appearing_later_add_vgpu_handles(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts
) -> None:
    """The same driver scanning again after more VFs were enabled: the same vGPU type,
    the VF it had keeps its handle, the new VFs add theirs."""
    offers = ["1414 : NVIDIA H100-1-10C"]

    def gpu(count: int) -> dict[str, Any]:
        vfs = [
            {"bdf": f"0000:3b:00.{4 + i}", "nvidia": {"creatable_vgpu_types": offers}}
            for i in range(count)
        ]
        sriov = {"totalvfs": 16, "vf_device": "2331", "vf_driver": "nvidia", "vfs": vfs}
        return {"devices": [gpu_spec(device="0x2331", sriov=sriov)]}

    root = sysfs_tree(gpu(1))
    driver = NvidiaGpuDriver(driver_conf, root)
    (before,) = driver.discover()
    rebuild_sysfs(root, gpu(3))
    (after,) = driver.discover()
    assert [d.key for d in before.deployables] == [d.key for d in after.deployables]
    assert [d.key for d in after.deployables] == ["vgpu/nvidia-1414"]
    assert before.deployables[0].attach_handles == (pci_handle("0000:3b:00.4", vgpu_type="1414"),)
    assert after.deployables[0].attach_handles == tuple(
        pci_handle(f"0000:3b:00.{f}", vgpu_type="1414") for f in (4, 5, 6)
    )


def test_vgpu_trait_rule() -> None:
    assert vgpu_trait("1eb8", "GRID T4-2B") == "CUSTOM_NVIDIA_1EB8_T4_2B"
    assert vgpu_trait("2330", "single") == "CUSTOM_NVIDIA_2330_SINGLE"


def test_no_sys_and_no_nvml(tmp_path: Path, driver_conf: cfg.ConfigOpts) -> None:
    assert discover(driver_conf, tmp_path) == []


# -- NVML --------------------------------------------------------------------------------


def test_nvml_enriches_a_whole_h100(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    lib = FakeNvml([h100()])
    (device,) = discover(driver_conf, sysfs_tree({"devices": [gpu_spec()]}), lib)
    assert device.numa_node == 1  # NVML's answer wins over sysfs' 0
    assert device.vendor_board_info == {
        "source": "nvml",
        "product_name": "NVIDIA H100 80GB HBM3",
        "gpu_uuid": "GPU-5c3a1f0e-2b4d-4e6f-8a9b-0c1d2e3f4a3b",
        "memory_mb": 81559,
        "driver_version": "550.54.15",
        "mig_enabled": False,
    }
    assert device.deployables == (
        Deployable(
            key="device",
            kind="device",
            memory_type="HBM",  # the H100: from NVML's name, else the product table
            num_accelerators=1,
            memory_mb=81559,
            attach_handles=(pci_handle("0000:3b:00.0"),),
        ),
    )
    assert lib.calls == ["init", "shutdown"]


def test_an_h200_as_a_lent_one_showed_itself(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts
) -> None:
    """A real H200 SXM (2026-11-27): PCI 10de:2335, NVML's name "NVIDIA H200" naming no
    memory, no NUMA node. Its model and its memory family come from the product table,
    so a profile asking for HBM finds it."""
    gpu = h100(pci_device_id=0x233510DE, name="NVIDIA H200", memory_mb=143771, numa_node=None)
    tree = sysfs_tree({"devices": [gpu_spec(device="0x2335", numa_node=-1)]})
    (device,) = discover(driver_conf, tree, FakeNvml([gpu]))
    assert (device.product_id, device.model, device.numa_node) == ("2335", "H200", None)
    (whole,) = device.deployables
    assert (whole.kind, whole.memory_type, whole.memory_mb) == ("device", "HBM", 143771)


def test_numa_falls_back_to_sysfs(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    lib = FakeNvml([h100(numa_node=None)])
    (device,) = discover(driver_conf, sysfs_tree({"devices": [gpu_spec()]}), lib)
    assert device.numa_node == 0


def test_mig_instances(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    migs = {
        0: Mig("MIG-aaaaaaaa-0000-4000-8000-000000000001", "1g.10gb", 7, 9856),
        2: Mig("MIG-aaaaaaaa-0000-4000-8000-000000000002", "1g.10gb", 8, 9856),
        3: Mig("MIG-aaaaaaaa-0000-4000-8000-000000000003", "3g.40gb", 1, 40192),
    }
    lib = FakeNvml([h100(mig_mode=1, profiles=H100_PROFILES, migs=migs)])
    (device,) = discover(driver_conf, sysfs_tree({"devices": [gpu_spec()]}), lib)
    gpu_uuid = "GPU-5c3a1f0e-2b4d-4e6f-8a9b-0c1d2e3f4a3b"

    def handle(mig: Mig) -> AttachHandle:
        return AttachHandle(
            type="MIG",
            address=mig.uuid,
            info={
                **PF_INFO,
                "gpu_uuid": gpu_uuid,
                "mig_uuid": mig.uuid,
                "gpu_instance_id": str(mig.gpu_instance_id),
            },
        )

    assert device.deployables == (
        Deployable(
            key="mig/1g.10gb",
            kind="mig_profile",
            memory_type="HBM",  # the H100: from NVML's name, else the product table
            num_accelerators=2,
            accelerator_type="MIG",
            memory_mb=9856,
            traits=("CUSTOM_NVIDIA_2330_MIG_1G_10GB",),
            attributes={"profile_id": 19, "max_instances": 7, "remaining_capacity": 5},
            attach_handles=(handle(migs[0]), handle(migs[2])),
        ),
        Deployable(
            key="mig/3g.40gb",
            kind="mig_profile",
            memory_type="HBM",  # the H100: from NVML's name, else the product table
            num_accelerators=1,
            accelerator_type="MIG",
            memory_mb=40192,
            traits=("CUSTOM_NVIDIA_2330_MIG_3G_40GB",),
            attributes={"profile_id": 9, "max_instances": 2, "remaining_capacity": 1},
            attach_handles=(handle(migs[3]),),
        ),
    )
    assert device.vendor_board_info["mig_enabled"] is True


@pytest.mark.parametrize("code", [9, 12])  # DriverNotLoaded, LibraryNotFound
def test_nvml_not_loading_falls_back_to_sysfs(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts, code: int
) -> None:
    lib = FakeNvml([h100()], init_error=code)
    (device,) = discover(driver_conf, sysfs_tree(SCENARIO_6_1), lib)
    assert device.vendor_board_info == {"source": "sysfs"}
    assert [d.key for d in device.deployables] == ["vgpu/nvidia-222", "vgpu/nvidia-223"]
    assert lib.calls == ["init"]


def test_cross_check_sysfs_against_nvml(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts, caplog: pytest.LogCaptureFixture
) -> None:
    """A GPU only NVML sees is still reported; one only sysfs sees too; both are logged."""
    root = sysfs_tree({"devices": [gpu_spec("0000:3b:00.0"), gpu_spec("0000:86:00.0")]})
    lib = FakeNvml([h100(0x3B), h100(0xAF), h100(0x86, broken=True)])
    with caplog.at_level(logging.WARNING):
        devices = discover(driver_conf, root, lib)
    assert [(d.pci_address, d.vendor_board_info["source"]) for d in devices] == [
        ("0000:3b:00.0", "nvml"),
        ("0000:86:00.0", "sysfs"),
        ("0000:af:00.0", "nvml"),
    ]
    assert devices[2].std_board_info == {}
    assert (devices[2].product_id, devices[2].model, devices[2].numa_node) == ("2330", "H100", 1)
    assert "NVML reports GPU 0000:af:00.0, which sysfs does not show" in caplog.text
    assert "GPU 0000:86:00.0 is bound to nvidia but NVML does not report it" in caplog.text
    assert "NVML cannot describe GPU 2" in caplog.text


def test_nvml_pci_address_from_integer_fields() -> None:
    lib = FakeNvml([h100(bus_id=b"00010000:E1:00.0", domain=0x10000, bus=0xE1)])
    snap = nvml.snapshot(lib)
    assert snap is not None
    assert [g.address for g in snap.gpus] == ["10000:e1:00.0"]
    assert snap.driver_version == "550.54.15"


def test_use_nvml_off_never_calls_it(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    lib = FakeNvml([h100()])
    NvidiaGpuDriver(driver_conf, sysfs_tree(SCENARIO_6_1), lib).discover()
    assert lib.calls == []


def test_real_pynvml_has_everything_the_seam_uses() -> None:
    """The fake answers to NvmlLib's names; the real module must have each of them."""
    lib = nvml.load_pynvml()
    assert lib is not None
    members = [m for m in dir(nvml.NvmlLib) if m.startswith("nvml")]
    assert len(members) == 38
    assert all(callable(getattr(lib, m)) for m in members)
    assert issubclass(lib.NVMLError, Exception)
    assert lib.NVML_GPU_INSTANCE_PROFILE_COUNT == 0x12
    assert lib.NVML_COMPUTE_INSTANCE_PROFILE_COUNT == 9
    assert lib.c_nvmlComputeInstance_t is not None
    assert lib.c_nvmlGpuInstancePlacement_t(4, 4).size == 4
    assert len((lib.c_nvmlGpuInstance_t * 7)()) == 7  # what NVML fills
    # Without the NVIDIA library (this machine, CI) NVML is simply unavailable.
    snap = nvml.snapshot(lib)
    assert snap is None or all(g.address.count(":") == 2 for g in snap.gpus)
