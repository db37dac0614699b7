"""The whole host of docs/design/hardware.md §6.1/§6.3 through every sysfs driver at once, and the
use cases of spec 004: several device types and vendors on one host."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from oslo_config import cfg

from acceleron.drivers import load_drivers
from acceleron.drivers.base import spec004_view
from acceleron.vocabulary import Device, walk
from tests.fixtures.sysfs import SCENARIO_6_1, load_spec

MakeTree = Callable[..., Path]
SYSFS_DRIVERS = ["intel_fpga", "xilinx_fpga", "nvidia_gpu", "intel_qat", "pci"]
TYPE_A10 = "ce48969398f05f33946d560708be108a"


def discover_all(conf: cfg.ConfigOpts, root: Path) -> list[Device]:
    conf.set_override("enabled_drivers", SYSFS_DRIVERS, group="agent")
    return [device for driver in load_drivers(conf, root) for device in driver.discover()]


def test_6_3_expected_result(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    devices = discover_all(driver_conf, sysfs_tree(SCENARIO_6_1))
    summary = {
        d.pci_address: (
            d.driver,
            d.numa_node,
            [
                (p.key, p.kind, p.num_accelerators, sum(h.in_use for h in p.attach_handles))
                for p in walk(d.deployables)
            ],
        )
        for d in devices
    }
    assert summary == {
        "0000:5e:00.0": ("intel_fpga", 0, [("region0", "region", 2, 0)]),
        "0000:be:00.0": ("intel_fpga", 1, [("region0", "region", 2, 0)]),
        "0000:3b:00.0": (
            "nvidia_gpu",
            0,
            [("vgpu/nvidia-222", "vgpu_type", 16, 0), ("vgpu/nvidia-223", "vgpu_type", 8, 1)],
        ),
        "0000:3d:00.0": ("intel_qat", None, [("vf_pool", "vf_pool", 4, 0)]),
    }  # the NIC 0000:18:00.0 is absent: no driver claims it and no device_spec lists it


def test_6_1_spec004_view(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    view = spec004_view(discover_all(driver_conf, sysfs_tree(SCENARIO_6_1)))
    assert view == {
        "0000:5e:00.0": {
            "type": "FPGA",
            "vendor": "INTEL",
            "product": "PAC_ARRIA10",
            "regions": [
                {
                    "region-type-uuid": TYPE_A10,
                    "bitstream-id": None,
                    "function-uuid": "d8424dc4a4a3c413f89e433683f9040b",
                }
            ],
        },
        "0000:be:00.0": {
            "type": "FPGA",
            "vendor": "INTEL",
            "product": "PAC_ARRIA10",
            "regions": [
                {
                    "region-type-uuid": TYPE_A10,
                    "bitstream-id": None,
                    "function-uuid": "f7df405cbd7acf7222f144b0b93acd18",
                }
            ],
        },
        "0000:3b:00.0": {"type": "GPU", "vendor": "NVIDIA", "product": "T4", "regions": []},
        "0000:3d:00.0": {"type": "QAT", "vendor": "INTEL", "product": "C62X", "regions": []},
    }


def test_many_types_and_vendors_on_one_host(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts
) -> None:
    """Spec 004's use cases: GPUs, FPGAs of two vendors, QAT and a listed NIC together."""
    spec = dict(load_spec(SCENARIO_6_1))
    spec["devices"] = [
        *spec["devices"],
        {"bdf": "0000:d8:00.0", "vendor": "0x10ee", "device": "0x5000", "class": "0x120000",
         "driver": "xclmgmt"},
        {"bdf": "0000:d8:00.1", "vendor": "0x10ee", "device": "0x5001", "class": "0x120000",
         "driver": "xocl"},
        {"bdf": "10000:01:00.0", "vendor": "0x10de", "device": "0x2331", "class": "0x030200",
         "numa_node": 1, "driver": "nvidia"},
        {"bdf": "0000:af:00.0", "vendor": "0x8086", "device": "0x0b30", "class": "0x120000",
         "driver": "dfl-pci",
         "fpga": {"layout": "opae",
                  "pr_regions": [{"compat_id": "9926ab6d6c925a68aabca7d84c545738"}],
                  "ports": ["f7df405cbd7acf7222f144b0b93acd18"]}},
    ]  # fmt: skip
    driver_conf.set_override("device_spec", ['{"vendor_id": "8086", "product_id": "1572"}'], "pci")
    devices = discover_all(driver_conf, sysfs_tree(spec))
    assert sorted((d.type, d.vendor_name, d.model, d.pci_address) for d in devices) == [
        ("FPGA", "INTEL", "PAC_ARRIA10", "0000:5e:00.0"),
        ("FPGA", "INTEL", "PAC_ARRIA10", "0000:be:00.0"),
        ("FPGA", "INTEL", "PAC_N3000", "0000:af:00.0"),
        ("FPGA", "XILINX", "U200", "0000:d8:00.0"),
        ("GPU", "NVIDIA", "H100", "10000:01:00.0"),
        ("GPU", "NVIDIA", "T4", "0000:3b:00.0"),
        ("NIC", "INTEL", "1572", "0000:18:00.0"),
        ("QAT", "INTEL", "C62X", "0000:3d:00.0"),
    ]
    # Every deployable key is unique within its device, every handle within its deployable.
    for device in devices:
        keys = [p.key for p in walk(device.deployables)]
        assert len(keys) == len(set(keys))
        for dep in walk(device.deployables):
            addresses = [h.address for h in dep.attach_handles]
            assert len(addresses) == len(set(addresses)) == dep.num_accelerators


def test_empty_host(tmp_path: Path, driver_conf: cfg.ConfigOpts) -> None:
    assert discover_all(driver_conf, tmp_path) == []
    (tmp_path / "sys").mkdir()
    assert discover_all(driver_conf, tmp_path) == []
