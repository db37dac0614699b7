"""The shared sysfs/PCI module: addresses, tolerant reads, PCI records, classification."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from acceleron.drivers import sysfs
from acceleron.drivers.sysfs import Bdf, PciFunction, Sysfs
from tests.fixtures.sysfs import SCENARIO_6_1

MakeTree = Callable[..., Path]


# -- addresses ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0000:3b:00.0", "0000:3b:00.0"),
        ("0000:3B:1F.7", "0000:3b:1f.7"),
        ("00000000:3B:00.0", "0000:3b:00.0"),  # NVML's busId
        (b"00000000:AF:00.1", "0000:af:00.1"),  # NVML struct field (bytes)
        ("10000:01:00.0", "10000:01:00.0"),  # Intel VMD, 5-digit domain
        ("1000a:e1:02.3", "1000a:e1:02.3"),
        ("3b:00.0", "0000:3b:00.0"),  # lspci without -D
        (" 0000:5e:00.1\n", "0000:5e:00.1"),
    ],
)
def test_normalize_bdf(text: str | bytes, expected: str) -> None:
    assert sysfs.normalize_bdf(text) == expected


@pytest.mark.parametrize(
    "text", ["", "0000:3b:00", "0000:3b:00.8", "0000:3b:20.0", "123456789:00:00.0", "x:00:00.0"]
)
def test_parse_bdf_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not a PCI address"):
        sysfs.parse_bdf(text)


def test_bdf_fields_and_formatting() -> None:
    bdf = sysfs.parse_bdf("10000:e1:1f.7")
    assert bdf == Bdf(0x10000, 0xE1, 0x1F, 7)
    assert bdf.slot_address == "10000:e1:1f"
    assert sysfs.format_bdf(0, 0x3B, 0, 0) == "0000:3b:00.0"
    assert sysfs.format_bdf(0x10000, 1, 2, 3) == "10000:01:02.3"


def test_id_hygiene() -> None:
    assert sysfs.normalize_hex_id("0x10DE\n") == "10de"
    assert sysfs.normalize_hex_id("37c9") == "37c9"
    assert sysfs.normalize_hex_id("0x030200", width=6) == "030200"
    assert sysfs.normalize_hex_id("0x0b4000", width=6) == "0b4000"
    assert sysfs.normalize_hex_id("zz") is None
    assert sysfs.normalize_hex_id(None) is None
    assert (
        sysfs.normalize_uuid("CE489693-98F0-5F33-946D-560708BE108A")
        == "ce48969398f05f33946d560708be108a"
    )
    assert sysfs.normalize_uuid("not-a-uuid") is None
    assert sysfs.trait_part("GRID T4-2B") == "GRID_T4_2B"
    assert sysfs.trait_part("1g.10gb+me") == "1G_10GB_ME"


# -- reading under a root --------------------------------------------------------------


def test_realpath_stays_inside_root(tmp_path: Path) -> None:
    (tmp_path / "sys/devices/pci0000:00/0000:00:01.0").mkdir(parents=True)
    (tmp_path / "sys/bus").mkdir(parents=True)
    # An absolute target means the root's /sys, never the real one.
    (tmp_path / "sys/bus/abs").symlink_to("/sys/devices/pci0000:00/0000:00:01.0")
    (tmp_path / "sys/bus/up").symlink_to("../../../../../../../sys/devices")
    fs = Sysfs(tmp_path)
    assert fs.realpath(tmp_path / "sys/bus/abs") == tmp_path / "sys/devices/pci0000:00/0000:00:01.0"
    assert fs.realpath(Path("sys/bus/up")) == tmp_path / "sys/devices"
    assert fs.resolve(tmp_path / "sys/bus/missing") is None


def test_realpath_loop_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    fs = Sysfs(tmp_path)
    with pytest.raises(OSError, match="too many levels"):
        fs.realpath(tmp_path / "a")
    assert fs.resolve(tmp_path / "a") is None


def test_reads_are_tolerant(tmp_path: Path) -> None:
    (tmp_path / "ok").write_text("0x8086\n")
    (tmp_path / "dir").mkdir()
    (tmp_path / "binary").write_bytes(b"\xff\xfe\x00")
    fs = Sysfs(tmp_path)
    assert fs.read(tmp_path / "ok") == "0x8086"
    assert fs.read(tmp_path / "missing") is None
    assert fs.read(tmp_path / "dir") is None  # a directory where a file was expected
    assert fs.read(tmp_path / "binary") is None
    assert fs.read_int(tmp_path / "ok") is None  # not decimal
    assert fs.read_int(tmp_path / "ok", 16) == 0x8086
    assert fs.listdir(tmp_path / "missing") == []
    assert fs.link_name(tmp_path / "ok") is None


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads mode-000 files")
def test_unreadable_file_as_non_root(tmp_path: Path) -> None:
    target = tmp_path / "compat_id"
    target.write_text("x\n")
    target.chmod(0)
    assert Sysfs(tmp_path).read(target) is None


def test_natural_order(tmp_path: Path) -> None:
    for name in ("virtfn10", "virtfn2", "virtfn1", "physfn"):
        (tmp_path / name).touch()
    assert Sysfs(tmp_path).listdir(tmp_path) == ["physfn", "virtfn1", "virtfn2", "virtfn10"]


# -- the builder's topology, seen through the module -------------------------------------


def test_builder_mimics_real_links(sysfs_tree: MakeTree) -> None:
    root = sysfs_tree(SCENARIO_6_1)
    fs = Sysfs(root)
    bus_link = root / "sys/bus/pci/devices/0000:3d:01.2"
    assert os.readlink(bus_link) == "../../../devices/pci0000:3d/0000:3d:01.2"
    assert os.readlink(root / "sys/devices/pci0000:3d/0000:3d:00.0/virtfn2") == "../0000:3d:01.2"
    assert os.readlink(root / "sys/devices/pci0000:3d/0000:3d:01.2/physfn") == "../0000:3d:00.0"
    assert fs.realpath(bus_link) == root / "sys/devices/pci0000:3d/0000:3d:01.2"
    assert fs.resolve(root / "sys/class/fpga_region/region1") == (
        root / "sys/devices/pci0000:5e/0000:5e:00.0/fpga_region/region0/dfl-fme.0"
        "/dfl-fme-region.0/fpga_region/region1"
    )
    assert sysfs.owning_function(fs, root / "sys/class/fpga_region/region1") == "0000:5e:00.0"
    assert sysfs.owning_function(fs, root / "sys/class/fpga_region/region2") == "0000:5e:00.1"
    mdev = root / "sys/bus/mdev/devices/6c4f8a2e-0d7b-4a57-9a4e-3f0c1b2d9e10"
    assert fs.resolve(mdev / "mdev_type") == (
        root / "sys/devices/pci0000:3b/0000:3b:00.0/mdev_supported_types/nvidia-223"
    )
    assert (root / "sys/kernel/iommu_groups/30/devices/0000:3b:00.0/vendor").is_file()


# -- PCI records -----------------------------------------------------------------------


def test_scan_of_the_6_1_host(sysfs_tree: MakeTree) -> None:
    root = sysfs_tree(SCENARIO_6_1)
    fs = Sysfs(root)
    assert sysfs.pci_addresses(fs) == [
        "0000:18:00.0",
        "0000:3b:00.0",
        "0000:3d:00.0",
        "0000:3d:01.0",
        "0000:3d:01.1",
        "0000:3d:01.2",
        "0000:3d:01.3",
        "0000:5e:00.0",
        "0000:5e:00.1",
        "0000:5e:00.2",
        "0000:be:00.0",
        "0000:be:00.1",
        "0000:be:00.2",
    ]
    qat = sysfs.read_function(fs, "0000:3d:00.0")
    assert qat == PciFunction(
        address="0000:3d:00.0",
        path=root / "sys/devices/pci0000:3d/0000:3d:00.0",
        vendor="8086",
        device="37c8",
        class_code="0b4000",
        subsystem_vendor="0000",
        subsystem_device="0000",
        revision="01",
        numa_node=None,  # -1 is unknown, not node 0
        driver="c6xx",
        iommu_group=50,
        sriov_totalvfs=16,
        sriov_numvfs=4,
        vf_addresses=("0000:3d:01.0", "0000:3d:01.1", "0000:3d:01.2", "0000:3d:01.3"),
        physfn=None,
    )
    vf = sysfs.read_function(fs, "0000:3d:01.3")
    assert vf is not None
    assert (vf.device, vf.driver, vf.physfn, vf.is_vf) == ("37c9", "c6xxvf", "0000:3d:00.0", True)
    gpu = sysfs.read_function(fs, "0000:3b:00.0")
    assert gpu is not None
    assert (gpu.numa_node, gpu.subsystem_device, gpu.sriov_totalvfs) == (0, "12a2", None)


def test_no_sys_at_all(tmp_path: Path) -> None:
    fs = Sysfs(tmp_path)
    assert sysfs.pci_addresses(fs) == []
    assert sysfs.scan(fs) == []
    assert sysfs.read_function(fs, "0000:3b:00.0") is None


def test_missing_driver_link_and_iommu(sysfs_tree: MakeTree) -> None:
    root = sysfs_tree(
        {
            "devices": [
                {
                    "bdf": "0000:3b:00.0",
                    "vendor": "0x10de",
                    "device": "0x2331",
                    "class": "0x030200",
                    "driver": None,
                    "iommu_group": None,
                }
            ]
        }
    )
    fn = sysfs.read_function(Sysfs(root), "0000:3b:00.0")
    assert fn is not None
    assert (fn.driver, fn.iommu_group, fn.numa_node) == (None, None, None)


def test_vf_gone_mid_scan(sysfs_tree: MakeTree) -> None:
    root = sysfs_tree(
        {
            "devices": [
                {
                    "bdf": "0000:3d:00.0",
                    "vendor": "0x8086",
                    "device": "0x37c8",
                    "class": "0x0b4000",
                    "driver": "c6xx",
                    "sriov": {
                        "totalvfs": 16,
                        "vf_device": "37c9",
                        "vfs": [
                            "0000:3d:01.0",
                            {"bdf": "0000:3d:01.1", "gone": True},
                            "0000:3d:01.2",
                        ],
                    },
                }
            ]
        }
    )
    fs = Sysfs(root)
    pf = sysfs.read_function(fs, "0000:3d:00.0")
    assert pf is not None
    assert pf.sriov_numvfs == 3  # the kernel still counts it
    assert pf.vf_addresses == ("0000:3d:01.0", "0000:3d:01.2")
    assert [vf.address for vf in sysfs.virtual_functions(fs, pf)] == [
        "0000:3d:01.0",
        "0000:3d:01.2",
    ]


def test_unreadable_ids_skip_that_device_only(sysfs_tree: MakeTree) -> None:
    root = sysfs_tree(
        {
            "devices": [
                {
                    "bdf": "0000:3b:00.0",
                    "vendor": "0x10de",
                    "device": "0x2331",
                    "class": "0x030200",
                    "unreadable": ["vendor"],
                },
                {
                    "bdf": "0000:3c:00.0",
                    "vendor": "0x10de",
                    "device": "0x2331",
                    "class": "0x030200",
                },
            ]
        }
    )
    assert [fn.address for fn in sysfs.scan(Sysfs(root))] == ["0000:3c:00.0"]


def test_five_digit_domain(sysfs_tree: MakeTree) -> None:
    root = sysfs_tree(
        {
            "devices": [
                {
                    "bdf": "10000:01:00.0",
                    "vendor": "0x8086",
                    "device": "0x4940",
                    "class": "0x0b4000",
                    "numa_node": 1,
                }
            ]
        }
    )
    fs = Sysfs(root)
    assert sysfs.pci_addresses(fs) == ["10000:01:00.0"]
    fn = sysfs.read_function(fs, "10000:01:00.0")
    assert fn is not None
    assert (fn.path.parent.name, fn.numa_node) == ("pci10000:01", 1)


# -- classification ------------------------------------------------------------------------


def _fn(vendor: str, device: str, class_code: str, physfn: str | None = None) -> PciFunction:
    return PciFunction("0000:01:00.0", Path("/x"), vendor, device, class_code, physfn=physfn)


@pytest.mark.parametrize(
    ("vendor", "device", "class_code", "name", "device_type"),
    [
        ("10de", "2331", "030200", "nvidia_gpu", "GPU"),
        ("10de", "1eb8", "030000", "nvidia_gpu", "GPU"),
        ("10de", "22a3", "068000", None, "PCI"),  # an NVSwitch bridge is no GPU
        ("1002", "740f", "038000", "amd_gpu", "GPU"),
        ("8086", "09c4", "120000", "intel_fpga", "FPGA"),
        ("8086", "0b30", "120000", "intel_fpga", "FPGA"),
        ("8086", "0b2b", "120000", "intel_fpga", "FPGA"),
        ("8086", "bcce", "120000", "intel_fpga", "FPGA"),
        ("8086", "bcc0", "120000", "intel_fpga", "FPGA"),
        ("8086", "bcbd", "120000", "intel_fpga", "FPGA"),
        ("10ee", "5000", "120000", "xilinx_fpga", "FPGA"),
        ("10ee", "5001", "120001", "xilinx_fpga", "FPGA"),
        ("8086", "0435", "0b4000", "intel_qat", "QAT"),
        ("8086", "37c8", "0b4000", "intel_qat", "QAT"),
        ("8086", "19e2", "0b4000", "intel_qat", "QAT"),
        ("8086", "18ee", "0b4000", "intel_qat", "QAT"),
        ("8086", "6f54", "0b4000", "intel_qat", "QAT"),
        ("8086", "18a0", "0b4000", "intel_qat", "QAT"),
        ("8086", "4940", "0b4000", "intel_qat", "QAT"),
        ("8086", "4942", "0b4000", "intel_qat", "QAT"),
        ("8086", "4944", "0b4000", "intel_qat", "QAT"),
        ("19e5", "d100", "120000", "ascend", "AICHIP"),
        ("19e5", "d801", "120000", "ascend", "AICHIP"),
        ("1ded", "8000", "120000", "accelerator", "PCI"),
        ("8086", "1572", "020000", None, "NIC"),
        ("144d", "a808", "010802", None, "SSD"),
        ("8086", "2030", "060400", None, "PCI"),
    ],
)
def test_classification(
    vendor: str, device: str, class_code: str, name: str | None, device_type: str
) -> None:
    fn = _fn(vendor, device, class_code)
    category = sysfs.classify(fn)
    assert (category.name if category else None) == name
    assert sysfs.device_type(fn) == device_type


@pytest.mark.parametrize(
    ("device", "class_code"),
    [
        ("09c5", "120000"), ("0b31", "120000"), ("0b2c", "120000"), ("bccf", "120000"),
        ("bcc1", "120000"), ("bcbf", "120000"), ("0443", "0b4000"), ("37c9", "0b4000"),
        ("19e3", "0b4000"), ("18ef", "0b4000"), ("6f55", "0b4000"), ("18a1", "0b4000"),
        ("4941", "0b4000"), ("4943", "0b4000"), ("4945", "0b4000"),
    ],
)  # fmt: skip
def test_vf_ids_are_never_top_level(device: str, class_code: str) -> None:
    fn = _fn("8086", device, class_code)
    assert sysfs.identify(fn) is not None
    assert sysfs.identify(fn).vf_only  # type: ignore[union-attr]
    assert sysfs.classify(fn) is None


def test_a_vf_is_never_top_level_whatever_its_id() -> None:
    assert sysfs.classify(_fn("10de", "2331", "030200", physfn="0000:00:00.0")) is None


def test_vendor_names() -> None:
    assert [sysfs.vendor_name(v) for v in ("8086", "10de", "10ee", "19e5", "1abc")] == [
        "INTEL",
        "NVIDIA",
        "XILINX",
        "HUAWEI",
        "1ABC",
    ]


def test_pci_handle() -> None:
    handle = sysfs.pci_handle("10000:e1:02.3", in_use=True, physical_network="physnet1")
    assert handle.type == "PCI"
    assert handle.address == "10000:e1:02.3"
    assert handle.in_use is True
    assert dict(handle.info) == {
        "domain": "10000",
        "bus": "e1",
        "device": "02",
        "function": "3",
        "physical_network": "physnet1",
    }


def test_shared_scan_reads_once_per_cycle_and_only_inside_it(sysfs_tree: MakeTree) -> None:
    root = sysfs_tree(SCENARIO_6_1)
    reader = Sysfs(root)
    first = sysfs.scan(reader)
    with sysfs.shared_scan():
        inside = sysfs.scan(reader)
        # A device removed during the cycle is still seen by the cycle's other drivers...
        (root / "sys/bus/pci/devices/0000:18:00.0").unlink()
        assert sysfs.scan(Sysfs(root)) is inside
    # ...and gone at the next scan: nothing is cached outside a cycle.
    after = sysfs.scan(reader)
    assert [f.address for f in inside] == [f.address for f in first]
    assert "0000:18:00.0" in {f.address for f in inside}
    assert "0000:18:00.0" not in {f.address for f in after}
