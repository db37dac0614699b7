"""Where devices sit (issue 41): the PCIe switch from the sysfs path, the NVLink domain
from NVML, and a real H200's recording still read as it was."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from oslo_config import cfg

from acceleron.drivers import nvml
from acceleron.drivers.nvidia_gpu import NvidiaGpuDriver
from acceleron.drivers.sysfs import Sysfs, bridge_chain, pcie_switch, read_function
from acceleron.vocabulary import Device
from tests.fixtures.cards import gpu_spec
from tests.fixtures.recorded.replay import H200, RecordedNvml, sysfs_spec
from tests.unit.drivers.fake_nvml import FakeNvml, h100

MakeTree = Callable[..., Path]
ROOT_PORT, UP, DOWN = "0000:00:01.0", "0000:01:00.0", "0000:02:08.0"


def switch_of(root: Path, address: str) -> str | None:
    fn = read_function(Sysfs(root), address)
    assert fn is not None
    return pcie_switch(fn)


def discover(conf: cfg.ConfigOpts, root: Path, lib: Any = None) -> dict[str, Device]:
    if lib is not None:
        conf.set_override("use_nvml", True, group="nvidia_gpu")
    return {d.pci_address: d for d in NvidiaGpuDriver(conf, root, lib).discover()}


# -- the PCIe switch: the sysfs path ---------------------------------------------------


def test_a_device_on_its_root_port_has_no_switch(sysfs_tree: MakeTree) -> None:
    root = sysfs_tree({"devices": [gpu_spec("0000:01:00.0", bridges=[ROOT_PORT])]})
    assert switch_of(root, "0000:01:00.0") is None


def test_a_device_without_a_parent_bridge_has_no_switch(sysfs_tree: MakeTree) -> None:
    """On a root bus (an integrated device; a VM's flat PCI bus, as the lent H200's)."""
    root = sysfs_tree({"devices": [gpu_spec("0000:00:06.0")]})
    assert switch_of(root, "0000:00:06.0") is None
    fn = read_function(Sysfs(root), "0000:00:06.0")
    assert fn is not None and bridge_chain(fn.path) == []


def test_two_devices_behind_one_switch_share_its_upstream_port(sysfs_tree: MakeTree) -> None:
    """root port -> switch upstream port -> two downstream ports -> a GPU each."""
    root = sysfs_tree(
        {
            "devices": [
                gpu_spec("0000:03:00.0", bridges=[ROOT_PORT, UP, DOWN]),
                gpu_spec("0000:04:00.0", bridges=[ROOT_PORT, UP, "0000:02:10.0"]),
                gpu_spec("0000:83:00.0", bridges=["0000:80:01.0", "0000:81:00.0", "0000:82:00.0"]),
            ]
        }
    )
    assert switch_of(root, "0000:03:00.0") == UP
    assert switch_of(root, "0000:04:00.0") == UP
    assert switch_of(root, "0000:83:00.0") == "0000:81:00.0"


def test_behind_nested_switches_the_nearest_counts(sysfs_tree: MakeTree) -> None:
    bridges = [ROOT_PORT, UP, DOWN, "0000:03:00.0", "0000:04:00.0"]
    root = sysfs_tree({"devices": [gpu_spec("0000:05:00.0", bridges=bridges)]})
    assert switch_of(root, "0000:05:00.0") == "0000:03:00.0"


def test_a_bridge_below_the_root_port_alone_is_no_switch(sysfs_tree: MakeTree) -> None:
    """root port -> a PCIe-to-PCI bridge -> the device: no switch port pair."""
    root = sysfs_tree({"devices": [gpu_spec("0000:02:00.0", bridges=[ROOT_PORT, UP])]})
    assert switch_of(root, "0000:02:00.0") is None


def test_an_upstream_port_that_is_no_bridge_is_not_named(sysfs_tree: MakeTree) -> None:
    bridges = [ROOT_PORT, {"bdf": UP, "class": "0x010400"}, DOWN]
    root = sysfs_tree({"devices": [gpu_spec("0000:03:00.0", bridges=bridges)]})
    assert switch_of(root, "0000:03:00.0") is None


def test_a_vmd_domain_starts_its_own_chain(sysfs_tree: MakeTree) -> None:
    """Intel VMD: a domain of its own (pci10000:e0) below a PCI device of domain 0
    (``pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:1d.0/...``): its root port is the
    first bridge of the chain, the VMD device above it none."""
    below = ["10000:e0:1d.0", "10000:e1:00.0", "10000:e2:00.0"]
    bridges = [{"bdf": "0000:00:0e.0", "class": "0x010400"}, "pci10000:e0", *below]
    root = sysfs_tree({"devices": [gpu_spec("10000:e3:00.0", bridges=bridges)]})
    assert switch_of(root, "10000:e3:00.0") == "10000:e1:00.0"
    fn = read_function(Sysfs(root), "10000:e3:00.0")
    assert fn is not None
    assert [p.name for p in bridge_chain(fn.path)] == below
    # Its root port straight below the VMD domain: no switch.
    root = sysfs_tree({"devices": [gpu_spec("10000:e1:00.0", bridges=bridges[:3])]})
    assert switch_of(root, "10000:e1:00.0") is None


def test_a_recording_is_replayed_along_its_real_path(tmp_path: Path, sysfs_tree: MakeTree) -> None:
    """A recorded GPU behind a switch in a VMD domain comes back at the same place."""
    real = (
        "/sys/devices/pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:1d.0/10000:e1:00.0/"
        "10000:e2:00.0/10000:e3:00.0"
    )
    names = real.split("/")[3:]
    node = {"vendor": "0x10de", "device": "0x2335", "class": "0x030200", "numa_node": "1"}
    chain = [{**node, "path": real}] + [
        {"path": "/".join(real.split("/")[: 3 + i + 1]), "class": "0x060400"}
        for i in reversed(range(len(names) - 1))
        if not names[i].startswith("pci")
    ]
    recorded = {"functions": {"10000:e3:00.0": {"realpath": real, "chain": chain}}}
    (tmp_path / "sysfs.json").write_text(json.dumps(recorded))
    root = sysfs_tree(sysfs_spec(tmp_path))
    assert str(Sysfs(root).resolve(root / "sys/bus/pci/devices/10000:e3:00.0")) == f"{root}{real}"
    assert switch_of(root, "10000:e3:00.0") == "10000:e1:00.0"


def test_drivers_report_the_switch(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    root = sysfs_tree(
        {
            "devices": [
                gpu_spec("0000:03:00.0", bridges=[ROOT_PORT, UP, DOWN]),
                gpu_spec("0000:41:00.0", bridges=["0000:40:01.0"]),
            ]
        }
    )
    found = discover(driver_conf, root)
    assert found["0000:03:00.0"].pcie_switch == UP
    assert found["0000:41:00.0"].pcie_switch is None
    # The bridges are PCI functions of the host, and no devices of the driver.
    assert sorted(found) == ["0000:03:00.0", "0000:41:00.0"]


# -- the NVLink domain: NVML -----------------------------------------------------------


def bus_id(bus: int) -> bytes:
    return f"00000000:{bus:02X}:00.0".encode()


def hgx(**extra: Any) -> tuple[list[int], list[Any]]:
    """Eight GPUs whose 18 NVLinks each lead to one of four NVSwitches (HGX/DGX)."""
    buses = [0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB]
    switches = [bus_id(b) for b in (0x05, 0x06, 0x07, 0x08)]
    links: list[bytes | None] = [switches[link % 4] for link in range(18)]
    return buses, [h100(bus, nvlinks=links, **extra) for bus in buses]


def tree_of(sysfs_tree: MakeTree, buses: list[int]) -> Path:
    return sysfs_tree({"devices": [gpu_spec(f"0000:{b:02x}:00.0") for b in buses]})


def test_gpus_joined_by_nvlink_share_a_domain(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts
) -> None:
    """Two GPUs bridged to each other, a third with NVLink but its links down, a fourth
    without NVLink (NotSupported)."""
    a, b, c, d = 0x3B, 0x3C, 0x3D, 0x3E
    gpus = [
        h100(a, nvlinks=[bus_id(b), bus_id(b), None, None]),
        h100(b, nvlinks=[bus_id(a), bus_id(a), None, None]),
        h100(c, nvlinks=[None, None, None, None]),
        h100(d),
    ]
    found = discover(driver_conf, tree_of(sysfs_tree, [a, b, c, d]), FakeNvml(gpus))
    domains = {address: device.nvlink_domain for address, device in found.items()}
    assert domains == {
        "0000:3b:00.0": "nvlink-0000:3b:00.0",
        "0000:3c:00.0": "nvlink-0000:3b:00.0",
        "0000:3d:00.0": None,
        "0000:3e:00.0": None,
    }


def test_an_nvswitch_joins_all_eight(sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts) -> None:
    buses, gpus = hgx()
    found = discover(driver_conf, tree_of(sysfs_tree, buses), FakeNvml(gpus))
    assert {d.nvlink_domain for d in found.values()} == {"nvlink-0000:18:00.0"}
    assert len(found) == 8


def test_nvswitches_nvml_names_no_address_for_join_too(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts
) -> None:
    """NVSwitches off the host's PCI bus (HGX H100): the far end's PCI info is zeros or
    NotSupported, its device type NVSwitch. A link to a GPU NVML cannot name joins
    nothing."""
    buses = [0x18, 0x2A, 0x3A]
    zeros, unnamed = bus_id(0), b""
    gpus = [h100(0x18, nvlinks=[zeros] * 4, nvswitch=True),
            h100(0x2A, nvlinks=[unnamed] * 4, nvswitch=True),
            h100(0x3A, nvlinks=[unnamed] * 4)]  # fmt: skip
    found = discover(driver_conf, tree_of(sysfs_tree, buses), FakeNvml(gpus))
    assert [d.nvlink_domain for d in found.values()] == [
        "nvlink-0000:18:00.0",
        "nvlink-0000:18:00.0",
        None,
    ]


def test_two_nvlink_islands_are_two_domains() -> None:
    """Two pairs of bridged GPUs (two NVLink bridges in one host)."""
    gpus = [
        nvml.NvmlGpu("0000:3b:00.0", "2330", "H100", "GPU-a", None, None, False,
                     nvlink_peers=("0000:3c:00.0",)),
        nvml.NvmlGpu("0000:3c:00.0", "2330", "H100", "GPU-b", None, None, False,
                     nvlink_peers=("0000:3b:00.0",)),
        nvml.NvmlGpu("0000:86:00.0", "2330", "H100", "GPU-c", None, None, False,
                     nvlink_peers=("0000:87:00.0",)),
        nvml.NvmlGpu("0000:87:00.0", "2330", "H100", "GPU-d", None, None, False,
                     nvlink_peers=("0000:86:00.0",)),
    ]  # fmt: skip
    assert nvml.nvlink_domains(gpus) == {
        "0000:3b:00.0": "nvlink-0000:3b:00.0",
        "0000:3c:00.0": "nvlink-0000:3b:00.0",
        "0000:86:00.0": "nvlink-0000:86:00.0",
        "0000:87:00.0": "nvlink-0000:86:00.0",
    }


def test_links_to_a_switch_no_other_gpu_reaches_are_no_domain() -> None:
    """One GPU of an NVSwitch system, alone on its host (the others given to VMs)."""
    gpu = nvml.NvmlGpu(
        "0000:18:00.0",
        "2330",
        "H100",
        "GPU-a",
        None,
        None,
        False,
        nvlink_peers=("0000:05:00.0", "0000:06:00.0"),
    )
    assert nvml.nvlink_domains([gpu]) == {}


def test_a_gpu_of_an_nvlink_fabric_is_in_its_clique(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts
) -> None:
    """Where the driver reports the GPU's fabric (cluster uuid and clique), that names the
    domain; a fabric not set up yet, or all zeros (the lent H200), does not."""
    cluster = uuid.UUID("5b1e0c2a-7d3f-4e8a-9b6c-1d2e3f4a5b6c")
    buses, gpus = hgx(fabric=(cluster.bytes, 7, nvml.FABRIC_STATE_COMPLETED))
    found = discover(driver_conf, tree_of(sysfs_tree, buses), FakeNvml(gpus))
    assert {d.nvlink_domain for d in found.values()} == {f"fabric-{cluster}/7"}
    for fabric in ((cluster.bytes, 7, 2), (bytes(16), 0, nvml.FABRIC_STATE_COMPLETED)):
        buses, gpus = hgx(fabric=fabric)
        found = discover(driver_conf, tree_of(sysfs_tree, buses), FakeNvml(gpus))
        assert {d.nvlink_domain for d in found.values()} == {"nvlink-0000:18:00.0"}


def test_nvlink_is_asked_until_there_is_no_such_link() -> None:
    """NotSupported on the first link ends the asking (the GPU has no NVLink), as does
    InvalidArgument (past its last link)."""
    lib = FakeNvml([h100(nvlinks=[bus_id(0x3C)] * 3), h100(0x3C)])
    snap = nvml.snapshot(lib)
    assert snap is not None
    assert [g.nvlink_peers for g in snap.gpus] == [("0000:3c:00.0",), ()]


# -- a real H200, as recorded (tests/fixtures/recorded/h200-2026-11-28) -----------------


def test_the_recorded_h200_has_no_topology(
    sysfs_tree: MakeTree, driver_conf: cfg.ConfigOpts
) -> None:
    """One H200 SXM in a VM: on the root bus (no bridge above it), NUMA node -1, NVML's
    NVLink calls NotSupported and its fabric all zeros: no switch, no NVLink domain, no
    NUMA node; everything else as the driver's own snapshot of that day."""
    lib = RecordedNvml()
    found = discover(driver_conf, sysfs_tree(sysfs_spec()), lib)
    (device,) = found.values()
    assert (device.pci_address, device.model, device.product_id) == ("0000:00:06.0", "H200", "2335")
    assert (device.numa_node, device.pcie_switch, device.nvlink_domain) == (None, None, None)
    assert lib.unrecorded == []
    snap = nvml.snapshot(lib)
    assert snap is not None
    (gpu,) = snap.gpus
    assert (gpu.nvlink_peers, gpu.fabric) == ((), None)
    recorded = json.loads((H200 / "snapshot.json").read_text())["gpus"][0]
    assert (gpu.uuid, gpu.memory_mb, gpu.numa_node) == (
        recorded["uuid"],
        recorded["memory_mb"],
        recorded["numa_node"],
    )
