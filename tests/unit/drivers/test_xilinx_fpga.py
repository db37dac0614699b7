"""The xilinx_fpga driver: management and user PFs merged per slot, programming via xbmgmt."""

from __future__ import annotations

import json
import logging
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from oslo_config import cfg

from acceleron.drivers import xilinx_fpga
from acceleron.drivers.errors import TargetNotFound
from acceleron.drivers.sysfs import pci_handle
from acceleron.drivers.xilinx_fpga import XilinxFpgaDriver
from acceleron.vocabulary import Deployable, Device
from tests.fixtures.cards import SHELL, XCLBIN, pf, u250
from tests.fixtures.sysfs import deny_reads, scan_then_remove

MakeTree = Callable[..., Path]


def test_mgmt_and_user_pfs_are_one_device(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts
) -> None:
    nic = {"bdf": "0000:18:00.0", "vendor": "0x8086", "device": "0x1572", "class": "0x020000"}
    root = sysfs_tree({"devices": [*u250(), nic]})
    (device,) = XilinxFpgaDriver(driver_conf, root).discover()
    assert (device.pci_address, device.product_id, device.model, device.type) == (
        "0000:d8:00.0",
        "5004",
        "U250",
        "FPGA",
    )
    assert (device.vendor_name, device.numa_node) == ("XILINX", 1)
    assert device.vendor_board_info == {
        "management_address": "0000:d8:00.0",
        "user_address": "0000:d8:00.1",
        "vbnv": "xilinx_u250",
    }
    xclbin = XCLBIN.replace("-", "")
    assert device.deployables == (
        Deployable(
            key="region0",
            kind="region",
            memory_type="DDR",  # the U250's DDR4, from the product table
            num_accelerators=1,
            programmable=True,
            region_type=SHELL.replace("-", ""),
            bitstream_id=xclbin,
            function_uuids=(xclbin,),
            attributes={
                "management_address": "0000:d8:00.0",
                "user_address": "0000:d8:00.1",
                "logic_uuid": "aa" * 16,
            },
            attach_handles=(pci_handle("0000:d8:00.1"),),
        ),
    )


def test_unbound_pfs_without_xrt_files(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    root = sysfs_tree(
        {
            "devices": [
                pf("10000:3b:00.0", "0x5000", None),
                pf("10000:3b:00.1", "0x5001", None),
                pf("10000:3c:00.1", "0x5021", "xocl", files={"xclbinuuid": "0" * 32}),
            ]
        }
    )
    u200, u50 = XilinxFpgaDriver(driver_conf, root).discover()
    assert (u200.pci_address, u200.model) == ("10000:3b:00.0", "U200")
    region = u200.deployables[0]
    assert (region.region_type, region.bitstream_id, region.function_uuids) == (None, None, ())
    assert region.attach_handles == (pci_handle("10000:3b:00.1"),)
    # Only the user PF is visible (the management PF is elsewhere): it is the key.
    assert (u50.pci_address, u50.product_id, u50.model) == ("10000:3c:00.1", "5021", "U50")
    assert u50.deployables[0].bitstream_id is None  # all zeros: nothing loaded


def test_permission_denied_reads_as_unknown(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A non-root agent that cannot read XRT's files: the card and its user PF handle
    are still reported; the shell, the xclbin and the board name are unknown."""
    root = sysfs_tree({"devices": u250()})
    deny_reads(monkeypatch, "interface_uuids", "logic_uuids", "xclbinuuid", "VBNV")
    (device,) = XilinxFpgaDriver(driver_conf, root).discover()
    assert device.vendor_board_info["vbnv"] is None
    (region,) = device.deployables
    assert (region.region_type, region.bitstream_id, region.function_uuids) == (None, None, ())
    assert region.attributes["logic_uuid"] is None
    assert (region.num_accelerators, region.attach_handles) == (1, (pci_handle("0000:d8:00.1"),))


def test_unreadable_xclbinuuid(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    mgmt, user = u250()
    user = {**user, "unreadable": ["xclbinuuid"]}  # a directory where the file should be
    (device,) = XilinxFpgaDriver(driver_conf, sysfs_tree({"devices": [mgmt, user]})).discover()
    (region,) = device.deployables
    assert (region.bitstream_id, region.function_uuids) == (None, ())
    assert region.region_type == SHELL.replace("-", "")
    assert region.attach_handles == (pci_handle("0000:d8:00.1"),)


def user_gone(device: Device) -> None:
    """What a card whose user PF is gone looks like: the management PF is never a handle."""
    assert (device.pci_address, device.model) == ("0000:d8:00.0", "U250")
    assert device.vendor_board_info == {
        "management_address": "0000:d8:00.0",
        "user_address": None,
        "vbnv": "xilinx_u250",
    }
    assert device.deployables == (
        Deployable(
            key="region0",
            kind="region",
            memory_type="DDR",  # the U250's DDR4, from the product table
            num_accelerators=0,
            programmable=True,
            region_type=SHELL.replace("-", ""),
            attributes={
                "management_address": "0000:d8:00.0",
                "user_address": None,
                "logic_uuid": "aa" * 16,
            },
        ),
    )


def test_user_pf_missing(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        (device,) = XilinxFpgaDriver(driver_conf, sysfs_tree({"devices": u250()[:1]})).discover()
    user_gone(device)
    assert "Xilinx FPGA 0000:d8:00.0 shows no user PF" in caplog.text


def test_user_pf_gone_mid_scan(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = sysfs_tree({"devices": u250()})
    scan_then_remove(monkeypatch, xilinx_fpga, "0000:d8:00.1")
    (device,) = XilinxFpgaDriver(driver_conf, root).discover()
    user_gone(device)


def test_card_gone_mid_scan(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = sysfs_tree({"devices": [*u250(), *u250("0000:d9:00")]})
    scan_then_remove(monkeypatch, xilinx_fpga, "0000:d8:00.0")
    scan_then_remove(monkeypatch, xilinx_fpga, "0000:d8:00.1")
    assert [d.pci_address for d in XilinxFpgaDriver(driver_conf, root).discover()] == [
        "0000:d9:00.0"
    ]


def test_program_runs_xbmgmt_on_the_management_pf(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts, tmp_path: Path
) -> None:
    out = tmp_path / "argv.json"
    recorder = "import json, sys; open(sys.argv[1], 'w').write(json.dumps(sys.argv[2:]))"
    driver_conf.set_override(
        "program_command",
        f"{shlex.quote(sys.executable)} -c {shlex.quote(recorder)} {out} "
        "program --device {address} --user {image} --note {user_address}",
        group="xilinx_fpga",
    )
    driver = XilinxFpgaDriver(driver_conf, sysfs_tree({"devices": u250()}))
    (device,) = driver.discover()
    image = tmp_path / "vadd.xclbin"
    image.write_bytes(b"xclbin2\0")
    driver.program(device, "region0", image)
    assert json.loads(out.read_text()) == [
        "program",
        "--device",
        "0000:d8:00.0",
        "--user",
        str(image),
        "--note",
        "0000:d8:00.1",
    ]
    with pytest.raises(TargetNotFound, match="no region 'region1'"):
        driver.program(device, "region1", image)


def test_default_command_is_xbmgmt(driver_conf: cfg.ConfigOpts) -> None:
    assert driver_conf.xilinx_fpga.program_command == (
        "/opt/xilinx/xrt/bin/xbmgmt program --device {address} --user {image}"
    )


def test_no_sys_at_all(tmp_path: Path, driver_conf: cfg.ConfigOpts) -> None:
    assert XilinxFpgaDriver(driver_conf, tmp_path).discover() == []
