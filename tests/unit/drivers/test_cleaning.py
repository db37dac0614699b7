"""What each driver does to clean a device between tenants (drivers.base.Cleanable)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from oslo_config import cfg

from acceleron.drivers import gbs
from acceleron.drivers.errors import CleaningUnsupported, DriverError
from acceleron.drivers.fake import FakeDriver
from acceleron.drivers.intel_qat import IntelQatDriver
from acceleron.drivers.nvidia_gpu import NvidiaGpuDriver
from acceleron.drivers.sysfs import Sysfs, reset_functions
from tests.fixtures.cards import gpu_spec
from tests.fixtures.sysfs import SCENARIO_6_1

MakeTree = Any


def test_a_whole_gpu_is_reset_through_the_kernel(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts
) -> None:
    root = sysfs_tree({"devices": [gpu_spec("0000:3b:00.0", driver="vfio-pci")]})
    driver = NvidiaGpuDriver(driver_conf, root)
    (device,) = driver.discover()
    reset = root / "sys/bus/pci/devices/0000:3b:00.0/reset"
    assert reset.read_text().strip() == ""
    driver.clean(device, "device", ["0000:3b:00.0"], "reset", None)
    assert reset.read_text() == "1"
    with pytest.raises(CleaningUnsupported, match="can be reset"):
        driver.clean(device, "device", ["0000:3b:00.0"], "scrub", None)


def test_a_function_the_kernel_cannot_reset_is_said_so(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts
) -> None:
    root = sysfs_tree({"devices": [gpu_spec("0000:3b:00.0", reset_method=None)]})
    with pytest.raises(CleaningUnsupported, match="offers no reset"):
        reset_functions(Sysfs(root), ["0000:3b:00.0"], "the GPU")
    with pytest.raises(CleaningUnsupported, match="no PCI function"):
        reset_functions(Sysfs(root), ["6a1c3f2e-8d4b-5e7f-9a0b-1c2d3e4f5a6b"], "a vGPU")


def test_a_reset_that_the_kernel_refuses_is_a_driver_error(tmp_path: Path) -> None:
    target = tmp_path / "sys/bus/pci/devices/0000:3b:00.0/reset"
    target.mkdir(parents=True)  # a directory: the write fails as a refused one would
    with pytest.raises(DriverError, match=r"writing .*reset failed"):
        reset_functions(Sysfs(tmp_path), ["0000:3b:00.0"], "the GPU")


def test_qat_vfs_are_reset_one_by_one(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    root = sysfs_tree(SCENARIO_6_1)
    driver = IntelQatDriver(driver_conf, root)
    (device,) = driver.discover()
    first, second = (h.address for h in device.deployables[0].attach_handles[:2])
    driver.clean(device, "vf_pool", [second], "reset", None)
    assert (root / "sys/bus/pci/devices" / second / "reset").read_text() == "1"
    assert (root / "sys/bus/pci/devices" / first / "reset").read_text().strip() == ""


def test_the_fake_driver_scrubs_a_region_and_fails_when_told(conf: cfg.ConfigOpts) -> None:
    driver = FakeDriver(conf, Path("/"))
    fpga = next(d for d in driver.discover() if d.type == "FPGA")
    region0 = next(d for d in fpga.deployables if d.key == "region0")
    assert region0.function_uuids  # pre-programmed
    driver.clean(fpga, "region0", [h.address for h in region0.attach_handles], "scrub", None)
    fpga = next(d for d in driver.discover() if d.pci_address == fpga.pci_address)
    assert next(d for d in fpga.deployables if d.key == "region0").function_uuids == ()

    blank = Path(conf.state_path) / "blank.gbs"
    blank.write_bytes(gbs.build(region0.region_type or "", ("ab" * 16,), b"\0" * 64))
    driver.clean(fpga, "region0", [], "scrub", blank)
    fpga = next(d for d in driver.discover() if d.pci_address == fpga.pci_address)
    assert next(d for d in fpga.deployables if d.key == "region0").function_uuids == ("ab" * 16,)

    conf.set_override("failing_cleanings", [fpga.pci_address], "fake")
    with pytest.raises(DriverError, match="simulated failure to reset"):
        driver.clean(fpga, "region1", [], "reset", None)
