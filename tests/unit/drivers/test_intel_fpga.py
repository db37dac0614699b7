"""The intel_fpga driver on fake sysfs trees: DFL and OPAE layouts, VFs, programming."""

from __future__ import annotations

import logging
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from oslo_config import cfg

from acceleron.drivers import gbs, intel_fpga
from acceleron.drivers.errors import BitstreamError, ProgrammingError, TargetNotFound
from acceleron.drivers.intel_fpga import IntelFpgaDriver
from acceleron.drivers.sysfs import pci_handle
from acceleron.vocabulary import Deployable, Device, Health
from tests.fixtures.cards import NLB, TYPE_A10, pac
from tests.fixtures.sysfs import SCENARIO_6_1, deny_reads, rebuild_sysfs, scan_then_remove

MakeTree = Callable[..., Path]
DMA = "f7df405cbd7acf7222f144b0b93acd18"


def discover(driver_conf: cfg.ConfigOpts, root: Path) -> list[Device]:
    return list(IntelFpgaDriver(driver_conf, root).discover())


def region(
    handles: list[str],
    functions: tuple[str, ...],
    *,
    key: str = "region0",
    region_type: str | None = TYPE_A10,
    layout: str = "dfl",
    metadata: str | None = "0x0",
    memory_type: str | None = "DDR",  # a PAC Arria10's DDR4, from the product table
) -> Deployable:
    return Deployable(
        key=key,
        kind="region",
        num_accelerators=len(handles),
        programmable=True,
        region_type=region_type,
        function_uuids=functions,
        memory_type=memory_type,
        attributes={
            "layout": layout,
            "fim_bitstream_id": "0x23000410010309",
            "bitstream_metadata": metadata,
            "ports_num": 2,
        },
        attach_handles=tuple(pci_handle(a) for a in handles),
    )


def test_the_6_1_scenario_exactly(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    devices = discover(driver_conf, sysfs_tree(SCENARIO_6_1))
    board = {
        "class_code": "120000",
        "subsystem_vendor_id": "0000",
        "subsystem_device_id": "0000",
        "revision": "01",
        "kernel_driver": "dfl-pci",
        "sriov_totalvfs": 2,
    }
    assert devices == [
        Device(
            pci_address="0000:5e:00.0",
            type="FPGA",
            vendor_id="8086",
            vendor_name="INTEL",
            product_id="09c4",
            model="PAC_ARRIA10",
            driver="intel_fpga",
            numa_node=0,
            std_board_info={**board, "iommu_group": 40},
            vendor_board_info={
                "layout": "dfl",
                "fim_bitstream_id": "0x23000410010309",
                "bitstream_metadata": "0x1081009",
                "ports_num": 2,
            },
            deployables=(region(["0000:5e:00.1", "0000:5e:00.2"], (NLB,), metadata="0x1081009"),),
        ),
        Device(
            pci_address="0000:be:00.0",
            type="FPGA",
            vendor_id="8086",
            vendor_name="INTEL",
            product_id="09c4",
            model="PAC_ARRIA10",
            driver="intel_fpga",
            numa_node=1,
            std_board_info={**board, "iommu_group": 80},
            vendor_board_info={
                "layout": "dfl",
                "fim_bitstream_id": "0x23000410010309",
                "bitstream_metadata": "0x0",
                "ports_num": 2,
            },
            deployables=(region(["0000:be:00.1", "0000:be:00.2"], (DMA,)),),
        ),
    ]


def test_opae_layout(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    spec = pac("0000:5e:00.0")
    spec["fpga"] = {**spec["fpga"], "layout": "opae"}
    (device,) = discover(driver_conf, sysfs_tree({"devices": [spec]}))
    assert device.deployables == (region(["0000:5e:00.1", "0000:5e:00.2"], (NLB,), layout="opae"),)
    assert device.vendor_board_info["layout"] == "opae"


def test_port_kept_on_the_pf_is_a_pf_handle(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts
) -> None:
    spec = pac("0000:5e:00.0", sriov={"totalvfs": 1, "vf_device": "09c5", "vfs": []})
    spec["fpga"] = {**spec["fpga"], "ports": [DMA], "vf_ports": []}
    (device,) = discover(driver_conf, sysfs_tree({"devices": [spec]}))
    assert device.deployables == (region(["0000:5e:00.0"], (DMA,)),)


def test_two_regions_map_ports_in_order(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    other = "9926ab6d6c925a68aabca7d84c545738"
    spec = pac("0000:5e:00.0")
    spec["fpga"] = {
        **spec["fpga"],
        "pr_regions": [{"compat_id": TYPE_A10}, {"compat_id": other.upper()}],
        "vf_ports": [NLB, DMA],
    }
    (device,) = discover(driver_conf, sysfs_tree({"devices": [spec]}))
    assert device.deployables == (
        region(["0000:5e:00.1"], (NLB,)),
        region(["0000:5e:00.2"], (DMA,), key="region1", region_type=other),
    )


def test_compat_id_under_fme_manager(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    spec = pac("0000:5e:00.0")
    spec["fpga"] = {**spec["fpga"], "pr_regions": [{"compat_id": TYPE_A10, "location": "fme_mgr"}]}
    (device,) = discover(driver_conf, sysfs_tree({"devices": [spec]}))
    assert device.deployables[0].region_type == TYPE_A10


@pytest.mark.parametrize("layout", ["dfl", "opae"])
def test_unreadable_compat_id_keeps_the_region(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts, layout: str
) -> None:
    spec = pac("0000:5e:00.0")
    spec["fpga"] = {**spec["fpga"], "layout": layout, "pr_regions": [{"unreadable": True}]}
    (device,) = discover(driver_conf, sysfs_tree({"devices": [spec]}))
    assert device.deployables == (
        region(["0000:5e:00.1", "0000:5e:00.2"], (NLB,), region_type=None, layout=layout),
    )


def test_permission_denied_reads_as_unknown(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a non-root agent meets on a 0600 file: PermissionError, region type unknown."""
    root = sysfs_tree({"devices": [pac("0000:5e:00.0")]})
    deny_reads(monkeypatch, "compat_id")
    (device,) = discover(driver_conf, root)
    assert device.deployables[0].region_type is None
    assert device.deployables[0].function_uuids == (NLB,)


def test_vf_gone_mid_scan(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    spec = pac(
        "0000:5e:00.0",
        sriov={
            "totalvfs": 2,
            "vf_device": "09c5",
            "vfs": ["0000:5e:00.1", {"bdf": "0000:5e:00.2", "gone": True}],
        },
    )
    (device,) = discover(driver_conf, sysfs_tree({"devices": [spec]}))
    assert device.deployables == (region(["0000:5e:00.1"], (NLB,)),)


def test_card_gone_after_the_scan_listed_it(
    sysfs_tree: MakeTree,
    driver_conf: cfg.ConfigOpts,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Listed, then gone before its FPGA stack is read: left out, not a card without one."""
    root = sysfs_tree({"devices": [pac("0000:5e:00.0"), pac("0000:be:00.0")]})
    scan_then_remove(monkeypatch, intel_fpga, "0000:5e:00.0")
    with caplog.at_level(logging.INFO):
        devices = discover(driver_conf, root)
    assert [d.pci_address for d in devices] == ["0000:be:00.0"]
    assert devices[0].deployables == (region(["0000:be:00.1", "0000:be:00.2"], (NLB,)),)
    assert "PCI device 0000:5e:00.0 vanished during the scan; leaving it out" in caplog.text


def test_vfs_appearing_later_take_over_the_ports(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts
) -> None:
    """The same driver scanning again after the ports were released and VFs enabled:
    the same region, its handles now the VFs instead of the PF."""
    before = pac("0000:5e:00.0", sriov={"totalvfs": 2, "vf_device": "09c5", "vfs": []})
    before["fpga"] = {**before["fpga"], "ports": [NLB], "vf_ports": []}
    root = sysfs_tree({"devices": [before]})
    driver = IntelFpgaDriver(driver_conf, root)
    assert driver.discover()[0].deployables == (region(["0000:5e:00.0"], (NLB,)),)
    rebuild_sysfs(root, {"devices": [pac("0000:5e:00.0")]})
    (device,) = driver.discover()
    assert device.deployables == (region(["0000:5e:00.1", "0000:5e:00.2"], (NLB,)),)


def test_vf_without_a_readable_port_is_still_a_handle(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts
) -> None:
    spec = pac("0000:5e:00.0")
    spec["fpga"] = {**spec["fpga"], "vf_ports": [NLB]}  # the second VF shows no port
    (device,) = discover(driver_conf, sysfs_tree({"devices": [spec]}))
    assert device.deployables == (region(["0000:5e:00.1", "0000:5e:00.2"], (NLB,)),)


@pytest.mark.parametrize(("kernel_driver", "in_use"), [("vfio-pci", True), (None, False)])
def test_no_fpga_stack_falls_back_to_the_pci_identity(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts, kernel_driver: str | None, in_use: bool
) -> None:
    """Passed through (bound to vfio-pci, a VM most likely has it): in use on the host.
    No driver loaded: free."""
    spec = pac("0000:5e:00.0", driver=kernel_driver, sriov={"totalvfs": 2, "vfs": []})
    del spec["fpga"]
    (device,) = discover(driver_conf, sysfs_tree({"devices": [spec]}))
    assert device.vendor_board_info == {}
    assert device.deployables == (
        Deployable(
            key="device",
            kind="device",
            num_accelerators=1,
            attributes={"kernel_driver": kernel_driver},
            attach_handles=(pci_handle("0000:5e:00.0", in_use=in_use),),
        ),
    )


def test_missing_driver_link(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    driver = IntelFpgaDriver(
        driver_conf, sysfs_tree({"devices": [pac("0000:5e:00.0", driver=None)]})
    )
    (device,) = driver.discover()
    assert device.std_board_info["kernel_driver"] is None
    assert device.deployables[0].region_type == TYPE_A10
    assert driver.health(device) == Health("degraded", "no kernel driver is bound to 0000:5e:00.0")


@pytest.mark.parametrize(
    ("pf", "vf", "model"),
    [
        ("0b30", "0b31", "PAC_N3000"),
        ("0b2b", "0b2c", "PAC_D5005"),
        ("bcce", "bccf", "OFS"),
        ("bcc0", "bcc1", "XEON_FPGA"),
        ("bcbd", "bcbf", "XEON_FPGA"),
    ],
)
def test_every_card_family(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts, pf: str, vf: str, model: str
) -> None:
    spec = pac("10000:5e:00.0", device=f"0x{pf}")
    spec["sriov"] = {**spec["sriov"], "vf_device": vf, "vfs": ["10000:5e:00.1", "10000:5e:00.2"]}
    (device,) = discover(driver_conf, sysfs_tree({"devices": [spec]}))
    assert (device.pci_address, device.product_id, device.model) == ("10000:5e:00.0", pf, model)
    assert [h.address for h in device.deployables[0].attach_handles] == [
        "10000:5e:00.1",
        "10000:5e:00.2",
    ]


def test_unknown_id_found_through_the_fpga_class(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts
) -> None:
    """A DFL card with an id we do not list (Silicom N5010) is found by its fpga_region."""
    spec = pac("0000:5e:00.0", vendor="0x1c2c", device="0x1000", sriov={"totalvfs": 0, "vfs": []})
    spec["fpga"] = {**spec["fpga"], "ports": [NLB], "vf_ports": []}
    (device,) = discover(driver_conf, sysfs_tree({"devices": [spec]}))
    assert (device.vendor_name, device.model, device.type) == ("SILICOM", "1000", "FPGA")


def test_no_sys_at_all(tmp_path: Path, driver_conf: cfg.ConfigOpts) -> None:
    assert discover(driver_conf, tmp_path) == []


# -- programming ----------------------------------------------------------------------------

RECORDER = "import json, sys; open(sys.argv[1], 'w').write(json.dumps(sys.argv[2:]))"


@pytest.fixture
def programmed(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts, tmp_path: Path
) -> tuple[IntelFpgaDriver, Device, Path]:
    out = tmp_path / "argv.json"
    driver_conf.set_override(
        "program_command",
        f"{shlex.quote(sys.executable)} -c {shlex.quote(RECORDER)} {out} "
        "--segment {segment} --bus {bus} --device {device} --function {function} {image}",
        group="intel_fpga",
    )
    spec = pac("10000:5e:00.0")
    spec["sriov"] = {**spec["sriov"], "vfs": ["10000:5e:00.1", "10000:5e:00.2"]}
    driver = IntelFpgaDriver(driver_conf, sysfs_tree({"devices": [spec]}))
    (device,) = driver.discover()
    return driver, device, out


def test_program_runs_fpgaconf_with_the_segment(
    programmed: tuple[IntelFpgaDriver, Device, Path], tmp_path: Path
) -> None:
    import json

    driver, device, out = programmed
    image = tmp_path / "nlb 3.gbs"
    image.write_bytes(gbs.build(TYPE_A10, (NLB,), b"bits"))
    driver.program(device, "region0", image)
    assert json.loads(out.read_text()) == [
        "--segment",
        "0x10000",
        "--bus",
        "0x5e",
        "--device",
        "0x00",
        "--function",
        "0x0",
        str(image),
    ]


def test_program_refuses_another_region_type(
    programmed: tuple[IntelFpgaDriver, Device, Path], tmp_path: Path
) -> None:
    driver, device, out = programmed
    image = tmp_path / "other.gbs"
    image.write_bytes(gbs.build("9926ab6d6c925a68aabca7d84c545738", (NLB,)))
    with pytest.raises(BitstreamError, match="built for interface 9926ab6d"):
        driver.program(device, "region0", image)
    assert not out.exists()


def test_program_errors(
    programmed: tuple[IntelFpgaDriver, Device, Path],
    tmp_path: Path,
    driver_conf: cfg.ConfigOpts,
) -> None:
    driver, device, _ = programmed
    image = tmp_path / "nlb.gbs"
    image.write_bytes(gbs.build(TYPE_A10, (NLB,)))
    with pytest.raises(TargetNotFound, match="no programmable region 'region7'"):
        driver.program(device, "region7", image)
    fail = f"{shlex.quote(sys.executable)} -c 'import sys; sys.exit(\"PR failed: EIO\")'"
    driver_conf.set_override("program_command", fail, group="intel_fpga")
    with pytest.raises(ProgrammingError, match="exit status 1: PR failed: EIO"):
        driver.program(device, "region0", image)
    driver_conf.set_override("program_command", "/nonexistent/fpgaconf {image}", group="intel_fpga")
    with pytest.raises(ProgrammingError, match="is not installed"):
        driver.program(device, "region0", image)
    gone = Device(**{**device.__dict__, "pci_address": "0000:99:00.0"})
    with pytest.raises(TargetNotFound, match="not on this host"):
        driver.program(gone, "region0", image)
