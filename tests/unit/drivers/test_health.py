"""Device health from every driver: each fault the hardware exposes, injected in a fake
sysfs tree or the fake NVML, then cleared."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from oslo_config import cfg

from acceleron.agent import discovery
from acceleron.drivers.health import EventHold, counter_total, worst
from acceleron.drivers.intel_fpga import IntelFpgaDriver
from acceleron.drivers.intel_qat import IntelQatDriver
from acceleron.drivers.nvidia_gpu import NvidiaGpuDriver
from acceleron.drivers.pci import PciDriver
from acceleron.drivers.xilinx_fpga import XilinxFpgaDriver
from acceleron.vocabulary import Health
from tests.fixtures.cards import gpu_spec, pac, qat, u250
from tests.fixtures.sysfs import inject, write_aer
from tests.unit.drivers.fake_nvml import H100_PROFILES, FakeNvml, Mig, h100

MakeTree = Callable[..., Path]
GPU = "0000:3b:00.0"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- the shared pieces -----------------------------------------------------------------


def test_worst_keeps_the_worst_state_and_its_reasons() -> None:
    verdict = worst(
        [
            Health(),
            Health("degraded", "a"),
            Health("unhealthy", "b"),
            Health("unhealthy", "c", {"region0": Health("degraded", "d")}),
        ]
    )
    assert verdict == Health("unhealthy", "b; c", {"region0": Health("degraded", "d")})
    assert worst([]) == Health()
    assert worst([Health("bogus", "x")]).state == "degraded"


def test_aer_totals_are_read_from_the_kernel_format(tmp_path: Path) -> None:
    write_aer(tmp_path, fatal=2, nonfatal=5)
    fatal = (tmp_path / "aer_dev_fatal").read_text()
    assert counter_total(fatal, "TOTAL_ERR_FATAL") == 2
    assert counter_total((tmp_path / "aer_dev_nonfatal").read_text(), "TOTAL_ERR_NONFATAL") == 5
    assert counter_total(None, "TOTAL_ERR_FATAL") is None
    assert counter_total("garbage\n", "TOTAL_ERR_FATAL") is None


def test_an_event_is_held_then_let_go() -> None:
    clock = Clock()
    hold = EventHold(hold=60, clock=clock)
    sick = Health("unhealthy", "AER")
    hold.count("dev", "aer", 0, sick)
    assert hold.active("dev") == []
    hold.count("dev", "aer", 1, sick)
    assert hold.active("dev") == [sick]
    clock.now += 59
    hold.count("dev", "aer", 1, sick)  # the same count is no new event
    assert hold.active("dev") == [sick]
    clock.now += 2
    assert hold.active("dev") == []


# -- every PCI device: AER -------------------------------------------------------------


def test_aer_fatal_and_nonfatal_on_a_generic_pci_device(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts
) -> None:
    driver_conf.set_override(
        "device_spec", ['{"vendor_id": "1d0f", "product_id": "cd01"}'], group="pci"
    )
    card = {
        "bdf": "0000:a1:00.0",
        "vendor": "0x1d0f",
        "device": "0xcd01",
        "class": "0x120000",
        "driver": "vfio-pci",
    }
    root = sysfs_tree({"devices": [card]})
    driver = PciDriver(driver_conf, root)
    clock = Clock()
    driver.events = EventHold(hold=300, clock=clock)
    (device,) = driver.discover()
    assert driver.health(device) == Health()
    write_aer(root / "sys/bus/pci/devices/0000:a1:00.0", nonfatal=1)
    assert driver.health(device) == Health(
        "degraded", "PCIe AER: 1 non-fatal error(s) on 0000:a1:00.0"
    )
    write_aer(root / "sys/bus/pci/devices/0000:a1:00.0", fatal=1, nonfatal=1)
    assert driver.health(device) == Health(
        "unhealthy", "PCIe AER: 1 fatal error(s) on 0000:a1:00.0"
    )
    clock.now += 301  # no new error for the hold time: healthy again by itself
    assert driver.health(device) == Health()


def test_a_device_gone_or_changed_is_unhealthy(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts
) -> None:
    root = sysfs_tree({"devices": [qat([])]})
    driver = IntelQatDriver(driver_conf, root)
    (device,) = driver.discover()
    inject(root, "0000:3d:00.0", "device", "0x1234")
    assert driver.health(device) == Health("unhealthy", "PCI device 0000:3d:00.0 is now 8086:1234")


# -- QAT ---------------------------------------------------------------------------------


def test_qat_down_and_heartbeat(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    root = sysfs_tree({"devices": [qat([], device="0x4940", qat={"heartbeat": 0})]})
    driver = IntelQatDriver(driver_conf, root)
    (device,) = driver.discover()
    assert driver.health(device) == Health()
    debug = root / "sys/kernel/debug/qat_4xxx_0000:3d:00.0/heartbeat/status"
    debug.write_text("-1\n")
    assert driver.health(device) == Health(
        "unhealthy", "QAT 0000:3d:00.0 firmware heartbeat failed"
    )
    debug.write_text("0\n")
    inject(root, "0000:3d:00.0", "qat/state", "down")
    assert driver.health(device).reason == "QAT 0000:3d:00.0 is down (firmware stopped)"
    inject(root, "0000:3d:00.0", "qat/state", "up")
    assert driver.health(device) == Health()


# -- Intel FPGA (DFL) --------------------------------------------------------------------


def test_fpga_fme_errors(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    spec = pac("0000:5e:00.0")
    spec["fpga"] = {
        **spec["fpga"],
        "fme": {
            **spec["fpga"]["fme"],
            "errors": {"catfatal_errors": "0x800", "first_error": "0x800"},
        },
    }
    root = sysfs_tree({"devices": [spec]})
    driver = IntelFpgaDriver(driver_conf, root)
    (device,) = driver.discover()
    assert driver.health(device) == Health(
        "unhealthy", "FPGA 0000:5e:00.0: catastrophic/fatal errors 0x800 (first 0x800)"
    )
    errors = next(root.glob("sys/devices/*/0000:5e:00.0/fpga_region/region*/dfl-fme.*/errors"))
    (errors / "catfatal_errors").write_text("0x0\n")
    (errors / "nonfatal_errors").write_text("0x4\n")
    assert driver.health(device).state == "degraded"
    (errors / "nonfatal_errors").write_text("0x0\n")
    assert driver.health(device) == Health()


def test_fpga_port_errors_belong_to_the_region(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts
) -> None:
    spec = pac("0000:5e:00.0")
    spec["fpga"] = {**spec["fpga"], "port_errors": ["0x0", "0x10"]}
    root = sysfs_tree({"devices": [spec]})
    driver = IntelFpgaDriver(driver_conf, root)
    (device,) = driver.discover()
    verdict = driver.health(device)
    assert verdict.state == "healthy"  # the card works; its region does not
    assert verdict.deployables["region0"].state == "unhealthy"
    assert "reports errors 0x10" in (verdict.deployables["region0"].reason or "")


# -- Xilinx ------------------------------------------------------------------------------


def test_xilinx_offline_and_not_ready(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    root = sysfs_tree({"devices": u250()})
    driver = XilinxFpgaDriver(driver_conf, root)
    (device,) = driver.discover()
    assert driver.health(device) == Health()
    inject(root, "0000:d8:00.1", "ready", "0x0")
    assert driver.health(device) == Health("degraded", "Xilinx 0000:d8:00.1 is not ready (xocl)")
    inject(root, "0000:d8:00.1", "dev_offline", "1")
    assert driver.health(device).state == "unhealthy"


# -- NVIDIA: NVML ---------------------------------------------------------------------------


def nvidia(conf: cfg.ConfigOpts, root: Path, lib: FakeNvml) -> NvidiaGpuDriver:
    conf.set_override("use_nvml", True, group="nvidia_gpu")
    return NvidiaGpuDriver(conf, root, lib)


@pytest.mark.parametrize(
    ("fault", "state", "reason"),
    [
        ({"ecc_volatile_uncorrected": 2}, "unhealthy",
         "GPU 0000:3b:00.0: 2 uncorrectable ECC error(s) since the driver loaded"),
        ({"remapped_rows": (0, 1, 0, 1)}, "unhealthy", "GPU 0000:3b:00.0: a row remapping failed"),
        ({"remapped_rows": (0, 1, 1, 0)}, "degraded",
         "GPU 0000:3b:00.0: remapped rows pending a reset"),
        ({"retired_pending": 1}, "degraded", "GPU 0000:3b:00.0: retired pages pending a reset"),
        ({"retired_pending": None, "remapped_rows": None, "ecc_volatile_uncorrected": None},
         "healthy", None),
    ],
)  # fmt: skip
def test_nvml_memory_faults(
    sysfs_tree: MakeTree,
    driver_conf: cfg.ConfigOpts,
    fault: dict[str, Any],
    state: str,
    reason: str | None,
) -> None:
    lib = FakeNvml([h100(**fault)])
    driver = nvidia(driver_conf, sysfs_tree({"devices": [gpu_spec()]}), lib)
    (device,) = driver.discover()
    assert driver.health(device) == Health(state, reason)


def test_a_gpu_fallen_off_the_bus(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    lib = FakeNvml([h100(broken=True)])
    driver = nvidia(driver_conf, sysfs_tree({"devices": [gpu_spec()]}), lib)
    (device,) = driver.discover()
    assert driver.health(device) == Health("unhealthy", f"GPU {GPU} has fallen off the bus (NVML)")
    lib.gpus[0].broken = False
    (device,) = driver.discover()
    assert driver.health(device) == Health()


def test_critical_xids_through_nvml_events(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts
) -> None:
    lib = FakeNvml([h100()])
    driver = nvidia(driver_conf, sysfs_tree({"devices": [gpu_spec()]}), lib)
    clock = Clock()
    driver.events = EventHold(hold=600, clock=clock)
    (device,) = driver.discover()
    heard = threading.Event()
    driver.start_watch(heard.set)
    try:
        deadline = time.monotonic() + 5
        while not lib.registered and time.monotonic() < deadline:
            time.sleep(0.01)
        lib.xid(0, 13)  # an application's own fault: not critical
        lib.xid(0, 79)
        assert heard.wait(5)
    finally:
        driver.stop_watch()
    assert driver.health(device) == Health("unhealthy", f"GPU {GPU}: XID 79")
    clock.now += 601
    assert driver.health(device) == Health()


def test_an_xid_in_a_gpu_instance_is_scoped_to_its_mig_profile(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts
) -> None:
    migs = {0: Mig("MIG-aaaa", "1g.10gb", 7, 9856), 1: Mig("MIG-bbbb", "3g.40gb", 2, 40192)}
    lib = FakeNvml([h100(mig_mode=1, profiles=H100_PROFILES, migs=migs)])
    driver = nvidia(driver_conf, sysfs_tree({"devices": [gpu_spec()]}), lib)
    (device,) = driver.discover()
    from acceleron.drivers.nvml import XidEvent

    assert driver.xid(XidEvent(GPU, 94, 2))
    verdict = driver.health(device)
    assert verdict.state == "healthy"
    assert verdict.deployables == {
        "mig/3g.40gb": Health("unhealthy", f"GPU {GPU}: XID 94 in GPU instance 2")
    }


def test_the_agent_puts_the_verdict_in_the_report(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts
) -> None:
    root = sysfs_tree({"devices": [qat([], device="0x4940", qat={"state": "down"})]})
    scan = discovery.scan([IntelQatDriver(driver_conf, root)])
    (device,) = scan.devices
    assert device.health.state == "unhealthy"

    class Broken(IntelQatDriver):
        def health(self, device: Any) -> Health:
            raise OSError("boom")

    (device,) = discovery.scan([Broken(driver_conf, root)]).devices
    assert device.health.state == "degraded"
    assert device.health.reason == "health check failed: OSError('boom')"
