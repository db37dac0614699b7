"""The generic pci driver: Nova device_spec syntax, correct device types, VFs under PFs."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from oslo_config import cfg

from acceleron import conf as confmod
from acceleron.drivers.errors import DriverConfigError
from acceleron.drivers.pci import PciDriver, parse_device_specs
from acceleron.drivers.sysfs import pci_handle
from acceleron.vocabulary import Deployable, Device
from tests.fixtures.sysfs import SCENARIO_6_1, load_spec, rebuild_sysfs

MakeTree = Callable[..., Path]
QAT_VFS = ["0000:3d:01.0", "0000:3d:01.1", "0000:3d:01.2", "0000:3d:01.3"]


def discover(conf: cfg.ConfigOpts, root: Path, *specs: Any) -> list[Device]:
    conf.set_override("device_spec", [json.dumps(s) for s in specs], group="pci")
    return list(PciDriver(conf, root).discover())


def shape(devices: list[Device]) -> list[tuple[str, str, str, list[tuple[str, int, list[str]]]]]:
    return [
        (
            d.pci_address,
            d.type,
            d.vendor_name,
            [
                (p.key, p.num_accelerators, [h.address for h in p.attach_handles])
                for p in d.deployables
            ],
        )
        for d in devices
    ]


def host_6_1(**nic: Any) -> dict[str, Any]:
    spec = dict(load_spec(SCENARIO_6_1))
    spec["devices"] = [dict(d, **nic) if d["bdf"] == "0000:18:00.0" else d for d in spec["devices"]]
    return spec


def test_nothing_without_a_spec(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    assert discover(driver_conf, sysfs_tree(SCENARIO_6_1)) == []


def test_vendor_and_product(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    devices = discover(
        driver_conf, sysfs_tree(SCENARIO_6_1), {"vendor_id": "8086", "product_id": "0x1572"}
    )
    assert devices == [
        Device(
            pci_address="0000:18:00.0",
            type="NIC",  # from the PCI class, never "GPU" for everything
            vendor_id="8086",
            vendor_name="INTEL",
            product_id="1572",
            model="1572",
            driver="pci",
            numa_node=0,
            std_board_info={
                "class_code": "020000",
                "subsystem_vendor_id": "0000",
                "subsystem_device_id": "0000",
                "revision": "01",
                "kernel_driver": "i40e",
                "iommu_group": 20,
                "sriov_totalvfs": 64,
            },
            deployables=(
                Deployable(
                    key="device",
                    kind="device",
                    num_accelerators=1,
                    attach_handles=(pci_handle("0000:18:00.0"),),
                ),
            ),
        )
    ]


def test_a_pf_address_stands_for_its_vfs(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    root = sysfs_tree(SCENARIO_6_1)
    assert shape(discover(driver_conf, root, {"address": "0000:3d:00.0"})) == [
        ("0000:3d:00.0", "QAT", "INTEL", [("vf_pool", 4, QAT_VFS)])
    ]
    # The NIC has no VFs yet: its pool is there, empty, and the PF itself is not offered.
    assert shape(discover(driver_conf, root, {"address": "0000:18:00.0"})) == [
        ("0000:18:00.0", "NIC", "INTEL", [("vf_pool", 0, [])])
    ]


def test_vfs_appearing_later_join_the_pool(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts
) -> None:
    """The same driver scanning again after VFs were enabled: same pool, now with them."""
    root = sysfs_tree(host_6_1())
    driver_conf.set_override("device_spec", [json.dumps({"address": "0000:18:00.0"})], group="pci")
    driver = PciDriver(driver_conf, root)
    assert shape(driver.discover()) == [("0000:18:00.0", "NIC", "INTEL", [("vf_pool", 0, [])])]
    vfs = ["0000:18:02.0", "0000:18:02.1"]
    rebuild_sysfs(
        root, host_6_1(sriov={"totalvfs": 64, "vf_device": "154c", "vf_driver": "iavf", "vfs": vfs})
    )
    assert shape(driver.discover()) == [("0000:18:00.0", "NIC", "INTEL", [("vf_pool", 2, vfs)])]


def test_glob_addresses(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    root = sysfs_tree(SCENARIO_6_1)
    assert shape(discover(driver_conf, root, {"address": "*:3d:01.*"})) == [
        ("0000:3d:00.0", "QAT", "INTEL", [("vf_pool", 4, QAT_VFS)])
    ]
    assert [d.pci_address for d in discover(driver_conf, root, {"address": ":00."})] == [
        "0000:18:00.0",
        "0000:3b:00.0",
        "0000:3d:00.0",
        "0000:5e:00.0",
        "0000:be:00.0",
    ]
    devices = discover(driver_conf, root, {"address": "0000:5e:00.*"})
    assert shape(devices) == [
        ("0000:5e:00.0", "FPGA", "INTEL", [("vf_pool", 2, ["0000:5e:00.1", "0000:5e:00.2"])])
    ]


def test_regex_address(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    spec = {"address": {"domain": ".*", "bus": "3d", "slot": "01", "function": "[0-1]"}}
    assert shape(discover(driver_conf, sysfs_tree(SCENARIO_6_1), spec)) == [
        ("0000:3d:00.0", "QAT", "INTEL", [("vf_pool", 2, QAT_VFS[:2])])
    ]


def test_devname(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    root = sysfs_tree(host_6_1(netdev="ens785f0"))
    assert shape(discover(driver_conf, root, {"devname": "ens785f0"})) == [
        ("0000:18:00.0", "NIC", "INTEL", [("device", 1, ["0000:18:00.0"])])
    ]
    assert discover(driver_conf, root, {"devname": "eth9"}) == []


def test_tags_and_traits(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    spec = {
        "vendor_id": "10de",
        "product_id": "*",
        "physical_network": "physnet1",
        "traits": "HW_GPU_API_VULKAN, fast-lane,CUSTOM_T4",
        "device_type": "aichip",
    }
    (device,) = discover(driver_conf, sysfs_tree(SCENARIO_6_1), spec)
    (dep,) = device.deployables
    assert device.type == "AICHIP"
    assert dep.traits == ("HW_GPU_API_VULKAN", "CUSTOM_FAST_LANE", "CUSTOM_T4")
    assert dep.attributes == {"tags": {"physical_network": "physnet1"}}


def test_list_value_and_several_types(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    def dev(bdf: str, vendor: str, device: str, klass: str) -> dict[str, str]:
        return {"bdf": bdf, "vendor": vendor, "device": device, "class": klass}

    root = sysfs_tree(
        {
            "devices": [
                dev("0000:01:00.0", "0x1002", "0x740f", "0x038000"),
                dev("0000:02:00.0", "0x144d", "0xa808", "0x010802"),
                dev("0000:03:00.0", "0x1ded", "0x8000", "0x120000"),
                dev("0000:04:00.0", "0x19e5", "0xd801", "0x120000"),
                dev("10000:05:00.0", "0x8086", "0x2030", "0x060400"),
            ]
        }
    )
    value = [{"vendor_id": v} for v in ("1002", "144d", "1ded", "19e5")] + [
        {"address": "10000:*:*.*"}
    ]
    driver_conf.set_override("device_spec", [json.dumps(value)], group="pci")
    devices = PciDriver(driver_conf, root).discover()
    assert [(d.pci_address, d.type, d.vendor_name, d.model) for d in devices] == [
        ("0000:01:00.0", "GPU", "AMD", "740F"),
        ("0000:02:00.0", "SSD", "SAMSUNG", "A808"),
        ("0000:03:00.0", "PCI", "1DED", "8000"),
        ("0000:04:00.0", "AICHIP", "HUAWEI", "D801"),
        ("10000:05:00.0", "PCI", "INTEL", "2030"),
    ]


def test_gone_vf_is_left_out(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    root = sysfs_tree(
        {
            "devices": [
                {
                    "bdf": "0000:3d:00.0",
                    "vendor": "0x8086",
                    "device": "0x37c8",
                    "class": "0x0b4000",
                    "sriov": {
                        "vf_device": "37c9",
                        "vfs": ["0000:3d:01.0", {"bdf": "0000:3d:01.1", "gone": True}],
                    },
                }
            ]
        }
    )
    assert shape(discover(driver_conf, root, {"address": "0000:3d:00.0"})) == [
        ("0000:3d:00.0", "QAT", "INTEL", [("vf_pool", 1, ["0000:3d:01.0"])])
    ]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("{not json", "is not JSON"),
        ('"a string"', "must be JSON objects"),
        ('{"address": "0000:3b:00.0", "devname": "eth0"}', "address and devname are exclusive"),
        ('{"vendor_id": "80866"}', "vendor_id '80866' is not a 4-digit hex id"),
        ('{"product_id": "xyz"}', "product_id 'xyz' is not a 4-digit hex id"),
        ('{"address": "0:0:0:0.0"}', "too many ':' fields"),
        ('{"address": "0000:zz:00.0"}', "'zz' is not hex"),
        ('{"address": {"bus": "("}}', "regex is invalid"),
        ('{"address": {"bridge": "1"}}', "unknown keys"),
        ('{"address": 5}', "must be a string or a dict"),
    ],
)
def test_bad_specs_are_clear_errors(value: str, message: str) -> None:
    with pytest.raises(DriverConfigError, match=message):
        parse_device_specs([value])


def test_old_passthrough_whitelist_name(sysfs_tree: MakeTree, tmp_path: Path) -> None:
    conf_file = tmp_path / "acceleron.conf"
    conf_file.write_text(
        "[DEFAULT]\nhost = fakehost\n"
        '[pci]\npassthrough_whitelist = {"vendor_id": "8086", "product_id": "37c8"}\n'
    )
    conf = confmod.load([], config_files=[str(conf_file)])
    (device,) = PciDriver(conf, sysfs_tree(SCENARIO_6_1)).discover()
    assert (device.pci_address, device.type) == ("0000:3d:00.0", "QAT")


def test_no_sys_at_all(tmp_path: Path, driver_conf: cfg.ConfigOpts) -> None:
    assert discover(driver_conf, tmp_path, {"vendor_id": "*"}) == []
