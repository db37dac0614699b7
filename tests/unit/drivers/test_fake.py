"""The fake driver: deterministic inventory, generator form, simulated programming."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from oslo_config import cfg

from acceleron.drivers import gbs
from acceleron.drivers.base import spec004_view
from acceleron.drivers.errors import BitstreamError, DriverConfigError, TargetNotFound
from acceleron.drivers.fake import FakeDriver, addresses
from acceleron.vocabulary import Health, walk

TYPE_A = "ce48969398f05f33946d560708be108a"
TYPE_B = "9926ab6d6c925a68aabca7d84c545738"
NLB = "d8424dc4a4a3c413f89e433683f9040b"
DMA = "f7df405cbd7acf7222f144b0b93acd18"


def inventory(driver_conf: cfg.ConfigOpts, tmp_path: Path, text: str) -> FakeDriver:
    path = tmp_path / "inventory.yaml"
    path.write_text(text)
    driver_conf.set_override("inventory_file", str(path), group="fake")
    return FakeDriver(driver_conf, tmp_path)


def test_built_in_inventory(driver_conf: cfg.ConfigOpts, tmp_path: Path) -> None:
    devices = FakeDriver(driver_conf, tmp_path).discover()
    assert [
        (d.pci_address, d.type, d.vendor_name, d.product_id, d.model, d.numa_node) for d in devices
    ] == [
        ("0000:3e:00.0", "FPGA", "INTEL", "09c4", "PAC_ARRIA10", 0),
        ("0000:3f:00.0", "FPGA", "INTEL", "09c4", "PAC_ARRIA10", 0),
        ("0000:40:00.0", "GPU", "NVIDIA", "1eb8", "T4", 0),
        ("0000:41:00.0", "GPU", "NVIDIA", "2330", "H100", 1),
        ("0000:42:00.0", "QAT", "INTEL", "37c8", "C62X", 1),
    ]
    tree = {
        d.pci_address: [(p.key, p.kind, p.num_accelerators, p.traits) for p in d.deployables]
        for d in devices
    }
    assert tree["0000:3e:00.0"] == [("region0", "region", 2, ()), ("region1", "region", 1, ())]
    assert tree["0000:40:00.0"] == [
        ("vgpu/nvidia-222", "vgpu_type", 16, ("CUSTOM_NVIDIA_1EB8_T4_1B",)),
        ("vgpu/nvidia-223", "vgpu_type", 8, ("CUSTOM_NVIDIA_1EB8_T4_2B",)),
    ]
    assert tree["0000:41:00.0"] == [
        ("mig/1g.10gb", "mig_profile", 4, ("CUSTOM_NVIDIA_2330_MIG_1G_10GB",)),
        ("mig/3g.40gb", "mig_profile", 1, ("CUSTOM_NVIDIA_2330_MIG_3G_40GB",)),
    ]
    assert tree["0000:42:00.0"] == [("vf_pool", "vf_pool", 4, ())]
    region0, region1 = devices[0].deployables
    assert (region0.region_type, region0.function_uuids, region0.programmable) == (
        TYPE_A,
        (NLB, DMA),
        True,
    )
    assert (region1.region_type, region1.function_uuids) == (TYPE_B, ())
    assert [(h.type, h.address) for h in region0.attach_handles + region1.attach_handles] == [
        ("TEST_PCI", "0000:3e:00.1"),
        ("TEST_PCI", "0000:3e:00.2"),
        ("TEST_PCI", "0000:3e:00.3"),
    ]
    mig = devices[3].deployables[0].attach_handles[0]
    assert (mig.type, mig.address.startswith("MIG-"), mig.info["mig_uuid"]) == (
        "MIG",
        True,
        mig.address,
    )
    mdev = devices[2].deployables[0].attach_handles[3]
    assert (mdev.type, mdev.info["asked_type"], mdev.info["vgpu_mark"]) == (
        "MDEV",
        "nvidia-222",
        "nvidia-222_3",
    )


def test_deterministic_per_host(driver_conf: cfg.ConfigOpts, tmp_path: Path) -> None:
    first = FakeDriver(driver_conf, tmp_path).discover()
    assert FakeDriver(driver_conf, tmp_path).discover() == first
    driver_conf.set_override("host", "compute-2")
    other = FakeDriver(driver_conf, tmp_path).discover()
    handles = {h.address for d in first for p in walk(d.deployables) for h in p.attach_handles}
    others = {h.address for d in other for p in walk(d.deployables) for h in p.attach_handles}
    assert handles.isdisjoint(others)
    assert len(handles) == 2 * 3 + 16 + 8 + 4 + 1 + 4


def test_generator_form(driver_conf: cfg.ConfigOpts, tmp_path: Path) -> None:
    driver = inventory(
        driver_conf,
        tmp_path,
        "devices:\n"
        "  - {type: GPU, count: 8, product_id: '2330', model: H100, memory_mb: 81559}\n"
        "  - {type: NIC, vendor_id: '15b3', product_id: '101d', model: CX6}\n",
    )
    devices = driver.discover()
    assert len(devices) == 9
    assert len({d.pci_address for d in devices}) == 9
    assert [p.memory_mb for p in devices[0].deployables] == [81559]
    assert (devices[8].type, devices[8].vendor_name, devices[8].model) == ("NIC", "MELLANOX", "CX6")
    assert devices[0].deployables[0].attach_handles[0].address == devices[0].pci_address


def test_a_device_at_the_address_its_entry_names(
    driver_conf: cfg.ConfigOpts, tmp_path: Path
) -> None:
    """``pci_address`` places a device where another tool sees it (Cyborg's fake driver:
    0000:0c:00.0, its 16 handles 0000:0c:00.1 to 0000:0c:02.0); the others take the
    host's addresses, skipping those named."""
    first = next(addresses(driver_conf.host))
    driver = inventory(
        driver_conf,
        tmp_path,
        "devices:\n"
        f"  - {{type: GPU, product_id: '1eb8', pci_address: '{first.upper()}'}}\n"
        "  - {type: GPU, product_id: '1eb8'}\n"
        "  - type: FPGA\n"
        "    pci_address: 0c:00.0\n"
        f"    regions: [{{region_type: {TYPE_A}, accelerators: 16}}]\n",
    )
    gpu, other, fpga = driver.discover()
    assert gpu.pci_address == first
    assert other.pci_address not in (first, fpga.pci_address)
    assert fpga.pci_address == "0000:0c:00.0"
    (region,) = fpga.deployables
    handles = [h.address for h in region.attach_handles]
    assert handles[0] == "0000:0c:00.1" and handles[-1] == "0000:0c:02.0" and len(handles) == 16
    assert driver.discover() == [gpu, other, fpga]


def test_addresses_roll_over_into_the_next_domain() -> None:
    slots = addresses("fakehost")
    seen = [next(slots) for _ in range(0x100)]
    assert seen[0] == "0000:3e:00.0"
    assert seen[0xC1] == "0000:ff:00.0"
    assert seen[0xC2] == "0001:00:00.0"


def test_spec004_view(driver_conf: cfg.ConfigOpts, tmp_path: Path) -> None:
    view = spec004_view(FakeDriver(driver_conf, tmp_path).discover())
    assert view["0000:3e:00.0"] == {
        "type": "FPGA",
        "vendor": "INTEL",
        "product": "PAC_ARRIA10",
        "regions": [
            {"region-type-uuid": TYPE_A, "bitstream-id": None, "function-uuid": NLB},
            {"region-type-uuid": TYPE_B, "bitstream-id": None, "function-uuid": None},
        ],
    }
    assert view["0000:42:00.0"] == {
        "type": "QAT",
        "vendor": "INTEL",
        "product": "C62X",
        "regions": [],
    }


# -- programming ----------------------------------------------------------------------


def test_program_is_recorded_and_survives_a_restart(
    driver_conf: cfg.ConfigOpts, tmp_path: Path
) -> None:
    driver = FakeDriver(driver_conf, tmp_path)
    device = driver.discover()[1]
    image = tmp_path / "dma.gbs"
    image.write_bytes(gbs.build(TYPE_B, (DMA,), b"payload", signed=True))
    driver.program(device, "region1", image)
    region = FakeDriver(driver_conf, tmp_path).discover()[1].deployables[1]  # a new process
    assert region.function_uuids == (DMA,)
    assert dict(region.attributes) == {
        "bitstream_name": "dma.gbs",
        "bitstream_sha256": hashlib.sha256(image.read_bytes()).hexdigest(),
    }
    state = json.loads((tmp_path / "fake-driver-state.json").read_text())
    assert state["version"] == 1
    assert state["devices"]["0000:3f:00.0"]["region1"]["function_uuids"] == [DMA]
    # The other card and region are untouched.
    assert FakeDriver(driver_conf, tmp_path).discover()[0].deployables[1].function_uuids == ()


def test_program_refusals(driver_conf: cfg.ConfigOpts, tmp_path: Path) -> None:
    driver = FakeDriver(driver_conf, tmp_path)
    fpga, _, t4, *_ = driver.discover()
    wrong = tmp_path / "wrong.gbs"
    wrong.write_bytes(gbs.build(TYPE_B, (DMA,)))
    with pytest.raises(BitstreamError, match=f"built for interface {TYPE_B}.* is {TYPE_A}"):
        driver.program(fpga, "region0", wrong)
    junk = tmp_path / "junk.gbs"
    junk.write_bytes(b"not a bitstream")
    with pytest.raises(BitstreamError, match="not a GBS image"):
        driver.program(fpga, "region0", junk)
    with pytest.raises(TargetNotFound, match="no programmable region 'region9'"):
        driver.program(fpga, "region0".replace("0", "9"), wrong)
    with pytest.raises(TargetNotFound, match="no programmable region 'vgpu/nvidia-222'"):
        driver.program(t4, "vgpu/nvidia-222", wrong)
    assert not (tmp_path / "fake-driver-state.json").exists()


def test_corrupt_state_file_is_ignored(driver_conf: cfg.ConfigOpts, tmp_path: Path) -> None:
    (tmp_path / "fake-driver-state.json").write_text("{broken")
    region = FakeDriver(driver_conf, tmp_path).discover()[0].deployables[0]
    assert region.function_uuids == (NLB, DMA)


# -- inventory errors and health ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("devices: {}", "needs a 'devices' list"),
        ("[1, 2", "is not YAML"),
        ("devices: [{type: TPU}]", "type must be one of"),
        ("devices: [{type: GPU, colour: red}]", r"unknown keys \['colour'\]"),
        ("devices: [{type: GPU, vfs: 2, mig_profiles: []}]", "mig_profiles and vfs cannot"),
        ("devices: [{type: FPGA, regions: [{region_typ: x}]}]", "regions entries take"),
        ("devices: [{type: QAT, vfs: -1}]", "vfs must be a whole number"),
        ("devices: [7]", "device 1: expected a mapping"),
        ("devices: [{type: GPU, pci_address: 'slot 3'}]", "pci_address: not a PCI address"),
        ("devices: [{type: GPU, count: 2, pci_address: 0c:00.0}]", "names one device"),
        (
            "devices: [{type: GPU, pci_address: 0c:00.0}, {type: QAT, pci_address: '0C:00.0'}]",
            "device 2: pci_address 0000:0c:00.0 is named twice",
        ),
        ("devices: [{type: GPU, count: 2, numa_node: [0]}]", "numa_node lists 1 values for 2"),
        ("devices: [{type: GPU, numa_node: -1}]", "numa_node -1 is not a NUMA node number"),
        ("devices: [{type: GPU, pcie_switch: sw0}]", "pcie_switch 'sw0' is not the PCI address"),
        ("devices: [{type: GPU, count: 2, pcie_switch: ['0000:15:00.0', 7]}]", "pcie_switch 7"),
        ("devices: [{type: GPU, nvlink_domain: ''}]", "nvlink_domain '' is not a name of 1"),
    ],
)
def test_bad_inventories(
    driver_conf: cfg.ConfigOpts, tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(DriverConfigError, match=message):
        inventory(driver_conf, tmp_path, text)


HGX = Path(__file__).parents[3] / "cloud/templates/inventory-compute-hgx.yaml"


def test_the_8_gpu_example_inventory(driver_conf: cfg.ConfigOpts, tmp_path: Path) -> None:
    """Eight whole H200s: 0-3 on NUMA node 0 and 4-7 on node 1, two per PCIe switch, all
    in one NVLink domain."""
    devices = inventory(driver_conf, tmp_path, HGX.read_text()).discover()
    assert [(d.product_id, d.model, d.type) for d in devices] == [("2335", "H200", "GPU")] * 8
    assert [d.numa_node for d in devices] == [0, 0, 0, 0, 1, 1, 1, 1]
    switches = [d.pcie_switch for d in devices]
    assert [switches.count(s) for s in switches] == [2] * 8
    assert len(set(switches)) == 4 and switches == sorted(s or "" for s in switches)
    assert {d.nvlink_domain for d in devices} == {"nvswitch-0"}
    for device in devices:
        (whole,) = device.deployables
        assert (whole.kind, whole.num_accelerators, whole.memory_mb, whole.memory_type) == (
            "device",
            1,
            143771,
            "HBM",
        )


def test_topology_per_device_or_per_entry(driver_conf: cfg.ConfigOpts, tmp_path: Path) -> None:
    text = """
devices:
  - {type: GPU, count: 2, numa_node: [1, null], pcie_switch: ["17:00.0", null]}
  - {type: GPU, pci_address: "0000:8a:00.0", pcie_switch: "0000:89:00.0",
     nvlink_domain: bridge-a}
"""
    devices = inventory(driver_conf, tmp_path, text).discover()
    assert [(d.numa_node, d.pcie_switch, d.nvlink_domain) for d in devices] == [
        (1, "0000:17:00.0", None),
        (None, None, None),
        (None, "0000:89:00.0", "bridge-a"),
    ]


def test_missing_inventory_file(driver_conf: cfg.ConfigOpts, tmp_path: Path) -> None:
    driver_conf.set_override("inventory_file", str(tmp_path / "nope.yaml"), group="fake")
    with pytest.raises(DriverConfigError, match="cannot read \\[fake\\] inventory_file"):
        FakeDriver(driver_conf, tmp_path)


def test_health(driver_conf: cfg.ConfigOpts, tmp_path: Path) -> None:
    driver = inventory(
        driver_conf, tmp_path, "devices: [{type: GPU}, {type: GPU, health: degraded}]"
    )
    ok, sick = driver.discover()
    assert driver.health(ok) == Health()
    assert driver.health(sick) == Health("degraded", "set in the fake inventory")
    gone = type(ok)(**{**ok.__dict__, "pci_address": "0000:01:00.0"})
    assert driver.health(gone) == Health("unhealthy", "no simulated device at 0000:01:00.0")
