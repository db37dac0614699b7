"""Discovery and inventory reconcile: how long they take, and what they write.

* discovery: every sysfs driver scanning a fake sysfs tree of 64 accelerators
  (16 DFL FPGAs with 2 VFs, 16 NVIDIA GPUs with 2 vGPU types, 16 QAT PFs with
  4 VFs, 16 Xilinx cards), built by tests/fixtures/sysfs.py;
* reconcile: a 128-device host report (the fake driver) applied to an empty
  SQLite database, then the same report again (which must write nothing), then
  a report with one device changed. Statements are counted per verb; the exit
  status is 1 if the unchanged report (digest or full diff) wrote anything.

Discovery is timed side by side with a baseline, the same tree scanned by the code of
another commit (``--baseline``, by default the last one before discovery was cut down:
sysfs read once per device), alternating rounds of each in fresh processes.

    .venv/bin/python bench/discovery.py [--database URL] [--baseline REV]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fixtures.sysfs import build_sysfs  # noqa: E402

from acceleron import conf as confmod  # noqa: E402
from acceleron.db import migrate  # noqa: E402
from acceleron.db.session import Database, StatementCounter  # noqa: E402
from acceleron.drivers import load_drivers  # noqa: E402
from acceleron.drivers.base import walk  # noqa: E402
from acceleron.drivers.sysfs import shared_scan  # noqa: E402
from acceleron.report import HostReport  # noqa: E402
from acceleron.service import inventory  # noqa: E402

WRITES = ("INSERT", "UPDATE", "DELETE")
BASELINE = "d178f91"  # main before sysfs was read once per device


def sysfs_spec(per_kind: int = 16) -> dict[str, Any]:
    devices: list[dict[str, Any]] = []
    for n in range(per_kind):
        bus = 0x10 + n
        devices.append(
            {
                "bdf": f"0000:{bus:02x}:00.0",
                "vendor": "0x8086",
                "device": "0x09c4",
                "class": "0x120000",
                "numa_node": n % 2,
                "driver": "dfl-pci",
                "iommu_group": bus,
                "sriov": {
                    "totalvfs": 2,
                    "vf_device": "09c5",
                    "vf_driver": "vfio-pci",
                    "vfs": [f"0000:{bus:02x}:00.1", f"0000:{bus:02x}:00.2"],
                },
                "fpga": {
                    "layout": "dfl",
                    "fme": {"bitstream_id": "0x23000410010309", "ports_num": 2},
                    "pr_regions": [{"compat_id": "ce48969398f05f33946d560708be108a"}],
                    "vf_ports": ["d8424dc4a4a3c413f89e433683f9040b"] * 2,
                },
            }
        )
        bus = 0x40 + n
        devices.append(
            {
                "bdf": f"0000:{bus:02x}:00.0",
                "vendor": "0x10de",
                "device": "0x1eb8",
                "class": "0x030200",
                "numa_node": n % 2,
                "driver": "nvidia",
                "iommu_group": bus,
                "mdev_types": {
                    "nvidia-222": {"name": "GRID T4-1B", "available_instances": 16},
                    "nvidia-223": {"name": "GRID T4-2B", "available_instances": 8},
                },
            }
        )
        bus = 0x70 + n
        devices.append(
            {
                "bdf": f"0000:{bus:02x}:00.0",
                "vendor": "0x8086",
                "device": "0x37c8",
                "class": "0x0b4000",
                "numa_node": -1,
                "driver": "c6xx",
                "iommu_group": bus,
                "sriov": {
                    "totalvfs": 16,
                    "vf_device": "37c9",
                    "vf_driver": "c6xxvf",
                    "vfs": [f"0000:{bus:02x}:01.{i}" for i in range(4)],
                },
            }
        )
        bus = 0xA0 + n
        devices.append(
            {
                "bdf": f"0000:{bus:02x}:00.0",
                "vendor": "0x10ee",
                "device": "0x5000",
                "class": "0x120000",
                "numa_node": 0,
                "driver": "xclmgmt",
                "iommu_group": bus,
            }
        )
        devices.append(
            {
                "bdf": f"0000:{bus:02x}:00.1",
                "vendor": "0x10ee",
                "device": "0x5001",
                "class": "0x120000",
                "numa_node": 0,
                "driver": "xocl",
                "iommu_group": bus + 0x100,
            }
        )
    return {"hostname": "bench", "devices": devices}


def timed(fn: Callable[[], Any], repeat: int) -> tuple[Any, list[float]]:
    result, times = None, []
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return result, times


def ms(times: list[float]) -> str:
    return f"median {statistics.median(times) * 1000:7.1f} ms  (min {min(times) * 1000:.1f})"


def discovery_times(work: Path, repeat: int) -> tuple[int, int, list[float]]:
    """Scan a fresh fake tree ``repeat`` times: accelerators, handles, seconds each."""
    root = build_sysfs(work / "sysfs", sysfs_spec())
    conf = confmod.load(
        [],
        config_files=[],
        overrides={
            "DEFAULT": {"host": "bench", "state_path": str(work)},
            "agent": {"enabled_drivers": ["intel_fpga", "nvidia_gpu", "intel_qat", "xilinx_fpga"]},
            "nvidia_gpu": {"use_nvml": False},
        },
    )
    drivers = load_drivers(conf, root)

    def discover() -> list[Any]:
        with shared_scan():  # as the agent runs a discovery cycle
            return [d for drv in drivers for d in drv.discover()]

    discover()  # warm: imports, first directory reads
    devices, times = timed(discover, repeat)
    handles = sum(len(dep.attach_handles) for d in devices for dep in walk(d.deployables))
    return len(devices), handles, times


def _timed_in_process(source: Path | None, repeat: int) -> tuple[int, int, list[float]]:
    """``discovery_times`` in a fresh process, on ``source`` (a checkout's src) or this one."""
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(source), env.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, __file__, "--discovery-only", str(repeat)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    count, handles, times = json.loads(out.splitlines()[-1])
    return count, handles, times


def bench_discovery(baseline: str, rounds: int = 3, repeat: int = 7) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", baseline, "src"], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        before: list[float] = []
        after: list[float] = []
        for _ in range(rounds):
            before += _timed_in_process(Path(tmp) / "src", repeat)[2]
            count, handles, times = _timed_in_process(None, repeat)
            after += times
    print(
        f"discovery, {count} accelerators ({handles} attach handles), 4 sysfs drivers, "
        f"{rounds} alternating rounds of {repeat}:"
    )
    print(f"    baseline ({baseline})  {ms(before)}")
    print(f"    this tree          {ms(after)}")


def fake_report(work: Path, count: int) -> HostReport:
    inventory_file = work / "inventory.yaml"
    inventory_file.write_text(
        "devices:\n"
        f"  - {{type: FPGA, count: {count // 4}, product_id: '09c4', model: PAC_ARRIA10,\n"
        "      regions: [{region_type: ce48969398f05f33946d560708be108a, accelerators: 2},\n"
        "                {region_type: 9926ab6d6c925a68aabca7d84c545738, accelerators: 1}]}\n"
        f"  - {{type: GPU, count: {count // 4}, product_id: '1eb8', model: T4,\n"
        "      vgpu_types: [{name: nvidia-222, label: GRID T4-1B, instances: 16}]}\n"
        f"  - {{type: QAT, count: {count // 4}, product_id: '37c8', model: C62X, vfs: 8}}\n"
        f"  - {{type: GPU, count: {count // 4}, product_id: '2330', model: H100}}\n"
    )
    conf = confmod.load(
        [],
        config_files=[],
        overrides={
            "DEFAULT": {"host": "bench", "state_path": str(work)},
            "fake": {"inventory_file": str(inventory_file)},
        },
    )
    from acceleron.drivers.fake import FakeDriver

    return HostReport("bench", "bench", tuple(FakeDriver(conf, work).discover()))


def counted(db: Database, fn: Callable[[], Any]) -> tuple[float, dict[str, int]]:
    with StatementCounter(db) as counter:
        started = time.perf_counter()
        fn()
        seconds = time.perf_counter() - started
    return seconds, counter.by_verb


def wrote(what: str, by_verb: dict[str, int]) -> list[str]:
    """``what`` named with its writes, if it made any: an unchanged report must not."""
    writes = {verb: n for verb, n in by_verb.items() if verb in WRITES and n}
    return [f"{what} wrote to the database: {writes}"] if writes else []


def bench_reconcile(work: Path, url: str | None) -> list[str]:
    """Print the figures; return what went wrong (writes where there must be none)."""
    report = fake_report(work, 128)
    db = Database(url or f"sqlite:///{work / 'bench.sqlite'}")
    migrate.upgrade(db)
    rows = sum(1 + len(walk(d.deployables)) for d in report.devices)
    handles = sum(len(dep.attach_handles) for d in report.devices for dep in walk(d.deployables))
    print(
        f"\nreconcile, {len(report.devices)}-device report ({rows} device/deployable rows, "
        f"{handles} handles), {db.backend}:"
    )
    first, writes = counted(db, lambda: inventory.reconcile(db, report))
    print(f"    first report      {first * 1000:8.1f} ms   statements {writes}")
    _, times = timed(lambda: inventory.reconcile(db, report), 50)
    _, writes = counted(db, lambda: inventory.reconcile(db, report))
    print(f"    unchanged report  {ms(times)}   statements {writes}")
    problems = wrote("the unchanged report", writes)
    no_digest, writes = counted(db, lambda: _apply_without_digest(db, report))
    print(
        f"    unchanged, full diff (digest ignored) {no_digest * 1000:.1f} ms   statements {writes}"
    )
    problems += wrote("the unchanged report's full diff", writes)
    one = report.devices[0]
    changed = dataclasses.replace(
        report, devices=(dataclasses.replace(one, numa_node=1), *report.devices[1:])
    )
    seconds, writes = counted(db, lambda: inventory.reconcile(db, changed))
    print(f"    one device changed {seconds * 1000:7.1f} ms   statements {writes}")
    db.dispose()
    return problems


def _apply_without_digest(db: Database, report: HostReport) -> None:
    with db.writer() as conn:
        inventory.apply(
            conn, inventory.load_existing(conn, report.hostname), inventory.desired_state(report)
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", help="SQLAlchemy URL (default: a fresh SQLite file)")
    parser.add_argument("--baseline", default=BASELINE, help="commit to compare discovery with")
    parser.add_argument("--discovery-only", type=int, metavar="N", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.discovery_only:  # a child of bench_discovery: print the figures as JSON
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(discovery_times(Path(tmp), args.discovery_only)))
        return
    bench_discovery(args.baseline)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        problems = bench_reconcile(work, args.database)
    for problem in problems:
        print(f"FAILED: {problem}", file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
