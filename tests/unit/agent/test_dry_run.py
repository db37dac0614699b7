"""``acceleron agent --once --dry-run``: what would be reported, as a tree or as JSON."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

import acceleron
from acceleron import text_tree
from acceleron.agent import discovery
from acceleron.cli.main import main
from acceleron.report import from_json
from acceleron.vocabulary import AttachHandle, Deployable, Device
from tests.fixtures.cards import gpu_spec
from tests.fixtures.sysfs import SCENARIO_6_1

MakeTree = Callable[..., Path]
pytestmark = pytest.mark.usefixtures("keep_logging")


def config(tmp_path: Path, **agent: str) -> Path:
    path = tmp_path / "acceleron.conf"
    lines = ["[DEFAULT]", f"state_path = {tmp_path}", "host = fakehost", "[agent]"]
    lines += [f"{key} = {value}" for key, value in agent.items()]
    lines += ["[nvidia_gpu]", "use_nvml = false"]
    path.write_text("\n".join(lines) + "\n")
    return path


def dry_run(capsys: pytest.CaptureFixture[str], path: Path, *extra: str) -> tuple[int, str, str]:
    code = main(["--config-file", str(path), "agent", "--once", "--dry-run", *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_tree_per_device_from_a_sysfs_root(
    sysfs_tree: MakeTree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = sysfs_tree(SCENARIO_6_1)
    path = config(
        tmp_path,
        root=str(root),
        enabled_drivers="intel_fpga,nvidia_gpu,intel_qat",
        api_endpoint="http://127.0.0.1:1",
    )
    code, out, err = dry_run(capsys, path)
    assert code == 0, err
    assert out.startswith(f"Host fakehost: 4 devices (agent {acceleron.__version__}, ")
    blocks = out.split("\n\n")[1:]
    assert blocks[0].splitlines() == [
        "0000:5e:00.0  FPGA  INTEL PAC_ARRIA10 (8086:09c4)  NUMA 0  driver intel_fpga",
        "└── region0  region, 2 accelerators, programmable",
        "    ├── region type  ce48969398f05f33946d560708be108a",
        "    ├── functions    d8424dc4a4a3c413f89e433683f9040b",
        "    ├── PCI 0000:5e:00.1",
        "    └── PCI 0000:5e:00.2",
    ]
    gpu = next(b for b in blocks if b.startswith("0000:3b:00.0"))
    assert "── vgpu/nvidia-223  vgpu_type, 8 accelerators of type VGPU" in gpu
    assert "── MDEV 6c4f8a2e-0d7b-4a57-9a4e-3f0c1b2d9e10  (in use)" in gpu
    qat = next(b for b in blocks if b.startswith("0000:3d:00.0"))
    assert "NUMA unknown  driver intel_qat" in qat.splitlines()[0]


def test_a_device_behind_a_switch_says_so(
    sysfs_tree: MakeTree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bridges = ["0000:5a:01.0", "0000:5b:00.0", "0000:5c:08.0"]
    root = sysfs_tree({"devices": [gpu_spec("0000:5d:00.0", bridges=bridges)]})
    path = config(tmp_path, root=str(root), enabled_drivers="nvidia_gpu")
    code, out, err = dry_run(capsys, path)
    assert code == 0, err
    assert out.split("\n\n")[1].splitlines()[0] == (
        "0000:5d:00.0  GPU  NVIDIA H100 (10de:2330)  NUMA 0  PCIe switch 0000:5b:00.0  "
        "driver nvidia_gpu"
    )


def test_json_is_the_exact_report(
    sysfs_tree: MakeTree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = sysfs_tree(SCENARIO_6_1)
    path = config(tmp_path, root=str(root), enabled_drivers="fake,intel_fpga")
    code, out, err = dry_run(capsys, path, "-f", "json")
    assert code == 0, err
    report = from_json(json.loads(out))  # what the API would validate
    assert report.hostname == "fakehost"
    assert [d.driver for d in report.devices] == ["fake"] * 5 + ["intel_fpga"] * 2


def test_a_root_without_sysfs_finds_nothing_there_and_fails_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("devices: [{type: QAT, product_id: '37c8', vfs: 2}]\n")
    path = config(tmp_path, root=str(tmp_path / "empty"), enabled_drivers="fake,intel_fpga")
    path.write_text(path.read_text() + f"[fake]\ninventory_file = {inventory}\n")
    code, out, err = dry_run(capsys, path)
    assert code == 0, err
    assert out.startswith("Host fakehost: 1 device (")


def test_an_unknown_driver_is_a_configuration_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = dry_run(capsys, config(tmp_path, enabled_drivers="fake,nope"))
    assert code == 1
    assert "unknown driver 'nope' in [agent] enabled_drivers" in err


def test_the_tree_shows_every_field_an_operator_checks() -> None:
    region = Deployable(
        key="region0",
        kind="region",
        num_accelerators=1,
        programmable=True,
        region_type="ab" * 16,
        bitstream_id="0x2300041",
        function_uuids=("cd" * 16,),
        memory_mb=8192,
        traits=("CUSTOM_FPGA_X",),
        attach_handles=(AttachHandle("PCI", "0000:5e:00.1", in_use=True),),
        children=(Deployable(key="vf_pool", kind="vf_pool", num_accelerators=0),),
    )
    device = Device(
        pci_address="0000:5e:00.0",
        type="FPGA",
        vendor_id="8086",
        vendor_name="INTEL",
        product_id="0b30",
        model="N3000",
        driver="intel_fpga",
        deployables=(region,),
    )
    text = text_tree.report(discovery.build_report("h1", [device]))
    assert text.splitlines()[2:] == [
        "0000:5e:00.0  FPGA  INTEL N3000 (8086:0b30)  NUMA unknown  driver intel_fpga",
        "└── region0  region, 1 accelerator, programmable",
        f"    ├── region type  {'ab' * 16}",
        "    ├── bitstream    0x2300041",
        f"    ├── functions    {'cd' * 16}",
        "    ├── memory       8192 MiB",
        "    ├── traits       CUSTOM_FPGA_X",
        "    ├── PCI 0000:5e:00.1  (in use)",
        "    └── vf_pool  vf_pool, 0 accelerators",
    ]


def test_a_driver_that_finds_nothing_says_what_it_looked_for(
    sysfs_tree: MakeTree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """0 devices is not left unexplained: what the driver reports, and what the host's
    PCI functions are (here an Intel FPGA, an NVIDIA GPU and a QAT card: no Xilinx)."""
    root = sysfs_tree(SCENARIO_6_1)
    code, out, err = dry_run(capsys, config(tmp_path, root=str(root)), "--driver", "xilinx_fpga")
    assert code == 0 and out.startswith("Host fakehost: 0 devices (")
    devices = root / "sys" / "bus" / "pci" / "devices"
    assert err == (
        "Driver xilinx_fpga found no device (Xilinx (AMD) Alveo cards: vendor 10ee, class "
        f"0x1200xx). {devices} has 13 PCI functions, of vendors 10de (1), 8086 (12): none is "
        "one of those.\n"
    )


def test_an_unknown_driver_on_the_command_line_lists_the_drivers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = dry_run(capsys, config(tmp_path), "--driver", "nvidia")
    assert (code, out) == (1, "")
    assert err == (
        "--driver 'nvidia': no such driver. The drivers are: fake, intel_fpga, intel_qat, "
        "nvidia_gpu, pci, xilinx_fpga.\n"
    )
