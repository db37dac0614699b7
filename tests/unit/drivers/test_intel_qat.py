"""The intel_qat driver: one VF pool per PF, a stable shape, gen4 services."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from oslo_config import cfg

from acceleron.drivers.intel_qat import IntelQatDriver
from acceleron.drivers.sysfs import pci_handle
from acceleron.vocabulary import Deployable, Device, Health
from tests.fixtures.cards import qat
from tests.fixtures.sysfs import SCENARIO_6_1, deny_reads

MakeTree = Callable[..., Path]
VFS = ["0000:3d:01.0", "0000:3d:01.1", "0000:3d:01.2", "0000:3d:01.3"]


def discover(conf: cfg.ConfigOpts, root: Path) -> list[Device]:
    return list(IntelQatDriver(conf, root).discover())


def test_the_6_1_qat_exactly(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    assert discover(driver_conf, sysfs_tree(SCENARIO_6_1)) == [
        Device(
            pci_address="0000:3d:00.0",
            type="QAT",
            vendor_id="8086",
            vendor_name="INTEL",
            product_id="37c8",
            model="C62X",
            driver="intel_qat",
            numa_node=None,
            std_board_info={
                "class_code": "0b4000",
                "subsystem_vendor_id": "0000",
                "subsystem_device_id": "0000",
                "revision": "01",
                "kernel_driver": "c6xx",
                "iommu_group": 50,
                "sriov_totalvfs": 16,
            },
            deployables=(
                Deployable(
                    key="vf_pool",
                    kind="vf_pool",
                    num_accelerators=4,
                    attributes={"sriov_totalvfs": 16},
                    attach_handles=tuple(pci_handle(a) for a in VFS),
                ),
            ),
        )
    ]


def test_vfs_appearing_later_keep_the_shape(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts
) -> None:
    (before,) = discover(driver_conf, sysfs_tree({"devices": [qat([])]}))
    (after,) = discover(driver_conf, sysfs_tree({"devices": [qat(VFS)]}))
    shape = [(d.key, d.kind) for d in before.deployables]
    assert shape == [(d.key, d.kind) for d in after.deployables] == [("vf_pool", "vf_pool")]
    assert (before.deployables[0].num_accelerators, before.deployables[0].attach_handles) == (0, ())
    assert after.deployables[0].num_accelerators == 4


def test_vf_gone_mid_scan(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    vfs = [VFS[0], {"bdf": VFS[1], "gone": True}, VFS[2]]
    (device,) = discover(driver_conf, sysfs_tree({"devices": [qat(vfs)]}))
    assert [h.address for h in device.deployables[0].attach_handles] == [VFS[0], VFS[2]]


def test_gen4_services_become_a_trait(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    spec = qat([], device="0x4940", qat={"state": "up", "cfg_services": "asym;dc"}, numa_node=1)
    spec["sriov"]["vf_device"] = "4941"
    (device,) = discover(driver_conf, sysfs_tree({"devices": [spec]}))
    assert (device.model, device.numa_node) == ("4XXX", 1)
    assert device.deployables[0].traits == ("CUSTOM_QAT_ASYM_DC",)
    assert device.deployables[0].attributes == {
        "sriov_totalvfs": 16,
        "cfg_services": "asym;dc",
        "state": "up",
    }


def test_permission_denied_reads_as_unknown(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A non-root agent that cannot read qat/: the pool and its VFs are still reported,
    without a services trait."""
    spec = qat(VFS[:2], device="0x4940", qat={"state": "up", "cfg_services": "asym;dc"})
    spec["sriov"]["vf_device"] = "4941"
    root = sysfs_tree({"devices": [spec]})
    deny_reads(monkeypatch, "cfg_services", "state")
    driver = IntelQatDriver(driver_conf, root)
    (device,) = driver.discover()
    assert device.deployables == (
        Deployable(
            key="vf_pool",
            kind="vf_pool",
            num_accelerators=2,
            attributes={"sriov_totalvfs": 16, "cfg_services": None, "state": None},
            attach_handles=tuple(pci_handle(a) for a in VFS[:2]),
        ),
    )
    assert driver.health(device) == Health()


@pytest.mark.parametrize(
    ("pf", "model"),
    [("0435", "DH895XCC"), ("19e2", "C3XXX"), ("18ee", "200XX"), ("6f54", "D15XX"),
     ("18a0", "C4XXX"), ("4942", "401XX"), ("4944", "402XX")],
)  # fmt: skip
def test_every_qat_generation(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts, pf: str, model: str
) -> None:
    (device,) = discover(driver_conf, sysfs_tree({"devices": [qat([], device=f"0x{pf}")]}))
    assert (device.product_id, device.model) == (pf, model)


def test_health(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    root = sysfs_tree({"devices": [qat([], qat={"state": "down", "cfg_services": "dc"})]})
    driver = IntelQatDriver(driver_conf, root)
    (device,) = driver.discover()
    assert driver.health(device) == Health(
        "unhealthy", "QAT 0000:3d:00.0 is down (firmware stopped)"
    )
    gone = Device(**{**device.__dict__, "pci_address": "0000:3f:00.0"})
    assert driver.health(gone).state == "unhealthy"


def test_no_sys_at_all(tmp_path: Path, driver_conf: cfg.ConfigOpts) -> None:
    assert discover(driver_conf, tmp_path) == []
