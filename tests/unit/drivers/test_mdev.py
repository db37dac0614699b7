"""Making and removing vGPUs in a fake sysfs tree: what the kernel would be told."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from oslo_config import cfg

from acceleron.drivers.base import Mediated
from acceleron.drivers.errors import DriverError, TargetNotFound
from acceleron.drivers.nvidia_gpu import NvidiaGpuDriver
from tests.fixtures.cards import CREATED, gpu_spec

MakeTree = Callable[..., Path]
PF = "sys/bus/pci/devices/0000:3b:00.0"


def test_an_mdev_is_created_by_writing_its_uuid_and_removed_by_writing_1(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts
) -> None:
    types = {"nvidia-223": {"name": "GRID T4-2B", "available_instances": 1, "created": [CREATED]}}
    root = sysfs_tree({"devices": [gpu_spec(device="0x1eb8", mdev_types=types)]})
    driver = NvidiaGpuDriver(driver_conf, root)
    assert isinstance(driver, Mediated)
    (device,) = driver.discover()
    made, free = device.deployables[0].attach_handles
    assert (made.address, made.in_use, free.in_use) == (CREATED, True, False)

    driver.create_mdev(device, free)
    create = root / PF / "mdev_supported_types/nvidia-223/create"
    assert create.read_text() == free.address
    create.write_text("")
    driver.create_mdev(device, made)  # it exists: nothing is written
    assert create.read_text() == ""

    driver.remove_mdev(device, made)
    assert (root / "sys/bus/mdev/devices" / CREATED / "remove").read_text() == "1"
    driver.remove_mdev(device, free)  # never made: nothing to remove
    assert not (root / "sys/bus/mdev/devices" / free.address).exists()


def test_a_vfio_vf_is_given_its_vgpu_type_and_freed(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts
) -> None:
    offers = ["1414 : NVIDIA H100-1-10C"]
    spec = gpu_spec(
        device="0x2331",
        sriov={
            "totalvfs": 16,
            "vf_device": "2331",
            "vf_driver": "nvidia",
            "vfs": [{"bdf": "0000:3b:00.5", "nvidia": {"creatable_vgpu_types": offers}}],
        },
    )
    root = sysfs_tree({"devices": [spec]})
    driver = NvidiaGpuDriver(driver_conf, root)
    (device,) = driver.discover()
    (handle,) = device.deployables[0].attach_handles
    current = root / "sys/bus/pci/devices/0000:3b:00.5/nvidia/current_vgpu_type"
    driver.create_mdev(device, handle)
    assert current.read_text() == "1414"
    driver.remove_mdev(device, handle)
    assert current.read_text() == "0"


def test_a_missing_target_or_a_refused_write_is_a_driver_error(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts, monkeypatch: pytest.MonkeyPatch
) -> None:
    types = {"nvidia-223": {"name": "GRID T4-2B", "available_instances": 1}}
    root = sysfs_tree({"devices": [gpu_spec(device="0x1eb8", mdev_types=types)]})
    driver = NvidiaGpuDriver(driver_conf, root)
    (device,) = driver.discover()
    (handle,) = device.deployables[0].attach_handles

    def refuse(self: Path, data: str) -> int:
        raise OSError(16, "Device or resource busy")

    monkeypatch.setattr(Path, "write_text", refuse)
    with pytest.raises(DriverError, match="EBUSY"):
        driver.create_mdev(device, handle)
    monkeypatch.undo()
    (root / PF / "mdev_supported_types/nvidia-223/create").unlink()
    with pytest.raises(TargetNotFound, match="does not exist"):
        driver.create_mdev(device, handle)
