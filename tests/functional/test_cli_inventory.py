"""``acceleron device ...`` and ``acceleron deployable ...`` against a live API, on
SQLite, PostgreSQL and MariaDB, with the inventory of ``test_devices.seed``; and
the real OpenStack clients (``openstack accelerator ...``, openstacksdk) reading it."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openstack
import pytest
from oslo_config import cfg

from acceleron.api.app import create_app
from acceleron.cli.inventory import Names, deployable_line, fitted
from acceleron.cli.main import main
from acceleron.db.session import Database
from acceleron.report import HostReport
from acceleron.service import inventory
from tests.fixtures.devices import (
    BITSTREAM,
    FPGA,
    FUNCTION,
    GPU,
    HOST_A,
    HOST_B,
    INSTANCE,
    MDEV0,
    MDEV1,
    QAT,
    QAT_CARD,
    RT0,
    RT1,
    seed,
    uuid_of,
)
from tests.fixtures.server import serve

R0 = uuid_of(HOST_A, FPGA, "region0")
R1 = uuid_of(HOST_A, FPGA, "region1")
VFS = uuid_of(HOST_A, FPGA, "region0/vfs")
FPGA_TREE = [
    f"host-a  0000:0c:00.0  FPGA  INTEL PAC_ARRIA10 (8086:09c4)  NUMA 0  enabled  "
    f"({uuid_of(HOST_A, FPGA)})",
    f"├── region0  [region]  capacity 2  region type {RT0[:8]}  functions {FUNCTION[:8]}  "
    f"bitstream {BITSTREAM[:8]}  instance {INSTANCE}  ({R0})",
    "│   ├── PCI 0000:0c:00.1  in use",
    "│   ├── PCI 0000:0c:00.2  free",
    f"│   └── region0/vfs  [vf_pool]  capacity 2  ({VFS})",
    "│       ├── PCI 0000:0c:01.0  free",
    "│       └── PCI 0000:0c:01.1  free",
    f"└── region1  [region]  capacity 1  region type {RT1[:8]}  ({R1})",
    "    └── PCI 0000:0c:00.3  free",
]
HOST_B_TREES = [
    f"host-b  0000:3b:00.0  GPU  NVIDIA T4 (10de:1eb8)  NUMA 1  PCIe switch 0000:3a:00.0  "
    f"NVLink nvlink-0000:3b:00.0  maintaining  health degraded  "
    f"({uuid_of(HOST_B, GPU)})",
    f"└── vgpu/nvidia-222  [vgpu_type]  capacity 2  type GRID T4-1B  "
    f"({uuid_of(HOST_B, GPU, 'vgpu/nvidia-222')})",
    f"    ├── MDEV {MDEV0}  busy on host",
    f"    └── MDEV {MDEV1}  free",
    "",
    f"host-b  0000:5e:00.0  QAT  INTEL C62X (8086:37c8)  NUMA unknown  enabled  "
    f"({uuid_of(HOST_B, QAT)})",
    f"└── vf_pool  [vf_pool]  capacity 4  ({uuid_of(HOST_B, QAT, 'vf_pool')})",
    "    ├── PCI 0000:5e:00.1  in use",
    "    ├── PCI 0000:5e:00.2  in use",
    "    ├── PCI 0000:5e:00.3  free",
    "    └── PCI 0000:5e:00.4  free",
]


@pytest.fixture
def live(conf: cfg.ConfigOpts, db: Database) -> Iterator[str]:
    seed(db)
    with serve(create_app(conf, db)) as url:
        yield url


@pytest.fixture
def live_sqlite(conf: cfg.ConfigOpts, sqlite_db: Database) -> Iterator[str]:
    """The same on SQLite only, for the slower real clients."""
    seed(sqlite_db)
    with serve(create_app(conf, sqlite_db)) as url:
        yield url


def run(capsys: pytest.CaptureFixture[str], url: str, *argv: str) -> tuple[int, str, str]:
    code = main(["--os-url", url, *argv])
    out, err = capsys.readouterr()
    return code, out, err


def output(capsys: pytest.CaptureFixture[str], url: str, *argv: str) -> str:
    code, out, err = run(capsys, url, *argv)
    assert code == 0, err
    return out


def as_json(capsys: pytest.CaptureFixture[str], url: str, *argv: str) -> Any:
    return json.loads(output(capsys, url, *argv, "-f", "json"))


def test_trees(live: str, capsys: pytest.CaptureFixture[str]) -> None:
    everything = output(capsys, live, "deployable", "list", "--tree")
    assert everything.splitlines() == [*FPGA_TREE, "", *HOST_B_TREES]
    shown = output(capsys, live, "deployable", "show", R1).splitlines()
    # The deployable shown is marked and lists its attributes first.
    assert shown == [
        *FPGA_TREE[:7],
        f"└── region1  [region]  capacity 1  region type {RT1[:8]}  ({R1})  ◀",
        "    ├── memory.size_mb = 4096",
        "    └── PCI 0000:0c:00.3  free",
    ]
    device = output(capsys, live, "device", "show", uuid_of(HOST_A, FPGA), "--tree")
    assert device.splitlines() == FPGA_TREE
    # Filters apply to the tree: a deployable whose parent is filtered out hangs
    # from its device.
    pools = output(
        capsys, live, "deployable", "list", "--tree", "--kind", "vf_pool", "--hostname", HOST_A
    )
    assert pools.splitlines() == [
        FPGA_TREE[0],
        f"└── {FPGA_TREE[4][8:]}",
        "    ├── PCI 0000:0c:01.0  free",
        "    └── PCI 0000:0c:01.1  free",
    ]


def test_a_region_line_lists_every_function() -> None:
    region = {
        "key": "region0",
        "kind": "region",
        "num_accelerators": 1,
        "uuid": R0,
        "function_uuid": FUNCTION,
        "function_uuids": [FUNCTION, RT1],
    }
    assert deployable_line(region) == (
        f"region0  [region]  capacity 1  functions {FUNCTION[:8]}, {RT1[:8]}  ({R0})"
    )
    # By name where a bitstream names the function (its uuid in any case and form).
    named = Names(functions={FUNCTION: "gzip"})
    assert f"functions gzip, {RT1[:8]}  (" in deployable_line(region, named)
    dashed = {**region, "function_uuids": [str(uuid.UUID(FUNCTION)).upper()]}
    assert "functions gzip  (" in deployable_line(dashed, named)
    # A view without the list (before 2.5) shows the one function it has.
    del region["function_uuids"]
    assert f"functions {FUNCTION[:8]}  (" in deployable_line(region)


def test_functions_and_bitstreams_by_name(
    live: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A bitstream the caller sees names its function and itself in the tree and the
    table; -f value keeps the ids."""
    data = tmp_path / "gzip.bin"
    data.write_bytes(b"\x5a" * 1000)
    output(
        capsys,
        live,
        "bitstream",
        "upload",
        str(data),
        "--name",
        "gzip-a10",
        "--function-uuid",
        FUNCTION,
        "--function-name",
        "gzip",
    )
    tree = output(capsys, live, "deployable", "show", R0).splitlines()
    assert f"region type {RT0[:8]}  functions gzip  bitstream {BITSTREAM[:8]}  " in tree[1]
    table = output(capsys, live, "deployable", "list", "--key", "region0")
    assert f"| {RT0[:8]}  " in table and "| gzip " in table and "| allocated " in table, table
    values = output(
        capsys,
        live,
        "deployable",
        "list",
        "--key",
        "region0",
        "-f",
        "value",
        "-c",
        "region_type",
        "-c",
        "functions",
        "-c",
        "hostname",
    )
    assert values == f"{HOST_A} {RT0} ['{FUNCTION}']\n"  # in the API's order


def test_vendors_read_alike_in_list_and_tree(live: str, capsys: pytest.CaptureFixture[str]) -> None:
    table = output(capsys, live, "device", "list", "--hostname", HOST_A)
    assert "| INTEL (8086) |" in table
    assert output(capsys, live, "device", "list", "-f", "value", "-c", "vendor") == (
        "8086\n10de\n8086\n"
    )
    assert "INTEL PAC_ARRIA10 (8086:09c4)" in FPGA_TREE[0]


def test_trees_fit_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a terminal a line is cut at its width; in a pipe or a file it stays whole."""

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("COLUMNS", "40")
    lines = [FPGA_TREE[0], "short"]
    terminal = Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    assert fitted(lines, terminal) == [FPGA_TREE[0][:39] + "…", "short"]
    assert fitted(lines, io.StringIO()) == lines


def test_json_is_the_apis_data(live: str, capsys: pytest.CaptureFixture[str]) -> None:
    shown = as_json(capsys, live, "deployable", "show", R0)
    assert shown["uuid"] == R0 and shown["attributes"]["memory"]["ddr"]["speed"] == "2400"
    assert shown["attach_handles"][0]["in_use"] is True
    assert json.loads(shown["attributes_list"])[0] == {"afu": "gzip"}
    listed = as_json(capsys, live, "deployable", "list", "--tree")
    assert [d["uuid"] for d in listed][:3] == [R0, R1, VFS] and listed[0] == shown
    old = as_json(capsys, live, "--os-accelerator-api-version", "2.0", "deployable", "show", R0)
    assert "kind" not in old and old["attributes_list"] == shown["attributes_list"]
    device = as_json(capsys, live, "device", "show", uuid_of(HOST_B, GPU))
    assert (device["status"], device["health"], device["pci_address"]) == (
        "maintaining",
        "degraded",
        GPU,
    )
    assert (device["numa_node"], device["pcie_switch"], device["nvlink_domain"]) == (
        1,
        "0000:3a:00.0",
        "nvlink-0000:3b:00.0",
    )
    table = output(capsys, live, "device", "show", uuid_of(HOST_B, GPU))
    assert "| pcie_switch " in table and "| nvlink-0000:3b:00.0 " in table, table


def test_lists_and_filters(live: str, capsys: pytest.CaptureFixture[str]) -> None:
    value = ("-f", "value", "-c")
    assert output(capsys, live, "device", "list", "--vendor", "8086", *value, "pci_address") == (
        f"{FPGA}\n{QAT}\n"
    )
    out = output(
        capsys,
        live,
        "device",
        "list",
        "--sort-key",
        "pci_address",
        "--sort-dir",
        "desc",
        "--status",
        "enabled",
        *value,
        "hostname",
    )
    assert out == "host-b\nhost-a\n"
    table = output(capsys, live, "device", "list")
    assert "| uuid" in table and "maintaining" in table and "std_board_info" not in table
    where = output(
        capsys,
        live,
        "device",
        "list",
        "--hostname",
        HOST_B,
        "-f",
        "csv",
        "-c",
        "pci_address",
        "-c",
        "numa_node",
        "-c",
        "pcie_switch",
        "-c",
        "nvlink_domain",
    )
    assert where.splitlines() == [
        '"pci_address","numa_node","pcie_switch","nvlink_domain"',
        f'"{GPU}",1,"0000:3a:00.0","nvlink-0000:3b:00.0"',
        f'"{QAT}","None","None","None"',
    ]
    assert "| pcie_switch " in table and "| 0000:3a:00.0 " in table, table
    devices = as_json(capsys, live, "device", "list")
    assert devices[0]["std_board_info"] == {"product_id": "09c4", "controller": "PAC"}
    spec003 = ("deployable", "list", "--bitstream-id", "None", "--type", "FPGA")
    assert output(capsys, live, *spec003, *value, "key") == "region1\nregion0/vfs\n"
    nested = ("deployable", "list", "--attribute", "memory.ddr.channels=2")
    assert output(capsys, live, *nested, *value, "key") == "region0\n"
    # Without --limit every page is fetched; with it, one page.
    everything = as_json(capsys, live, "deployable", "list", "--sort-key", "key")
    assert len(everything) == 5
    page = as_json(
        capsys,
        live,
        "deployable",
        "list",
        "--sort-key",
        "key",
        "--limit",
        "2",
        "--marker",
        everything[1]["uuid"],
    )
    assert [d["key"] for d in page] == ["region1", "vf_pool"]


def test_names_where_uuids_go(live: str, db: Database, capsys: pytest.CaptureFixture[str]) -> None:
    """What the lists show finds an item, as OSC finds a name: a deployable by its name,
    a device by its PCI address or HOST_PCI-ADDRESS (its Placement provider's name)."""
    region1 = f"{HOST_A}_{FPGA}_region1"
    assert as_json(capsys, live, "deployable", "show", region1)["uuid"] == R1
    assert output(capsys, live, "deployable", "show", region1).splitlines()[7].endswith("◀")
    assert output(capsys, live, "device", "show", FPGA, "--tree").splitlines() == FPGA_TREE
    for name in (QAT, f"{HOST_B}_{QAT}"):
        assert as_json(capsys, live, "device", "show", name)["uuid"] == uuid_of(HOST_B, QAT)
    assert as_json(capsys, live, "device", "disable", FPGA)["status"] == "maintaining"
    assert as_json(capsys, live, "device", "enable", FPGA)["status"] == "enabled"
    assert run(capsys, live, "device", "show", f"{HOST_A}_{QAT}") == (
        1,
        "",
        f"No device at {QAT} on {HOST_A}.\n",
    )
    inventory.reconcile(db, HostReport("host-c", "1.0", (QAT_CARD,)))  # the same address
    assert run(capsys, live, "device", "show", QAT) == (
        1,
        "",
        (
            f"Device at {QAT} on any host: 2 match ({uuid_of(HOST_B, QAT)} on {HOST_B}, "
            f"{uuid_of('host-c', QAT)} on host-c). Give a uuid.\n"
        ),
    )


def test_errors_are_one_clear_line(live: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, live, "deployable", "show", "nope")
    assert (code, err) == (1, "No deployable named 'nope'.\n")
    code, _, err = run(capsys, live, "deployable", "list", "--marker", "toaster")
    assert code == 1 and "marker: 'toaster' is not a UUID." in err
    code, _, err = run(capsys, live, "deployable", "list", "--attribute", "afu")
    assert (code, err.strip()) == (1, "--attribute 'afu': expected KEY=VALUE.")
    code, _, err = run(capsys, live, "deployable", "list", "--attribute", "kind=region")
    assert (code, err.strip()) == (1, "--attribute kind: use --kind instead.")


def osc(url: str, *args: str) -> Any:
    """``openstack`` (with python-cyborgclient) in its own process, noauth; its JSON."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    command = [
        str(Path(sys.executable).parent / "openstack"),
        "--os-auth-type",
        "none",
        "--os-endpoint",
        url,
        *args,
        "-f",
        "json",
    ]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
def test_the_openstack_clients_read_the_inventory(live_sqlite: str) -> None:
    names = [d["name"] for d in osc(live_sqlite, "accelerator", "deployable", "list")]
    assert names[:3] == [
        f"host-a_{FPGA}_region0",
        f"host-a_{FPGA}_region1",
        f"host-a_{FPGA}_region0/vfs",
    ]
    shown = osc(live_sqlite, "accelerator", "deployable", "show", R0)
    assert (shown["uuid"], shown["name"]) == (R0, f"host-a_{FPGA}_region0")
    device = osc(live_sqlite, "accelerator", "device", "show", uuid_of(HOST_B, GPU))
    assert (device["type"], device["model"], device["hostname"]) == ("GPU", "T4", HOST_B)
    devices = osc(
        live_sqlite, "--os-accelerator-api-version", "2.3", "accelerator", "device", "list"
    )
    assert [d["status"] for d in devices] == ["enabled", "maintaining", "enabled"]
    attributes = osc(live_sqlite, "accelerator", "device", "attribute", "list")
    assert ("afu", "gzip") in [(a["key"], a["value"]) for a in attributes]
    conn = openstack.connect(auth_type="none", auth={"endpoint": live_sqlite})
    # openstacksdk follows the deployables_links of each page.
    assert len(list(conn.accelerator.deployables(limit=2))) == 5
    assert conn.accelerator.get_deployable(R0).name == f"host-a_{FPGA}_region0"
    assert [d.type for d in conn.accelerator.devices()] == ["FPGA", "GPU", "QAT"]


def test_health_maintenance_and_drain(live: str, capsys: pytest.CaptureFixture[str]) -> None:
    value = ("-f", "value", "-c")
    # host-b's GPU is degraded: --unhealthy lists it alone, with its health column.
    assert output(capsys, live, "device", "list", "--unhealthy", *value, "pci_address") == (
        f"{GPU}\n"
    )
    assert output(capsys, live, "device", "list", "--health", "healthy", *value, "health") == (
        "healthy\nhealthy\n"
    )
    assert run(capsys, live, "device", "maintenance", "on", FPGA)[0] == 1  # no reason
    shown = as_json(capsys, live, "device", "maintenance", "on", FPGA, "--reason", "burn-in: HBM")
    assert (shown["status"], shown["maintenance_reason"]) == ("maintaining", "burn-in: HBM")
    tree = output(capsys, live, "device", "show", FPGA, "--tree").splitlines()
    assert tree[0].endswith(f"maintaining  maintenance (burn-in: HBM)  ({uuid_of(HOST_A, FPGA)})")
    region1 = f"{HOST_A}_{FPGA}_region1"
    shown = as_json(capsys, live, "device", "maintenance", "on", region1, "--reason", "reflash")
    assert (shown["uuid"], shown["status"]) == (R1, "maintaining")
    assert "maintenance (reflash)" in output(capsys, live, "deployable", "show", region1)
    # Nothing is bound to the QAT card: the drain ends at once, leaving it in maintenance.
    code, out, err = run(capsys, live, "device", "drain", QAT, "--interval", "0.01")
    assert code == 0, err
    assert "drained" in err and "maintenance off" in out
    assert as_json(capsys, live, "device", "show", QAT)["maintenance_reason"] == "drain"
    off = as_json(capsys, live, "device", "maintenance", "off", QAT)
    assert (off["status"], off["maintenance_reason"]) == ("enabled", None)
