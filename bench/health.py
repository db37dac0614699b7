"""Device health: what a health scan costs, and how fast a fault empties Placement.

* scan cost: every sysfs driver's health() over the 64 accelerators of
  bench/discovery.py's fake sysfs tree (AER files, FME and port error registers, QAT
  state and heartbeat, xocl state, NVML faults from a fake NVML of 16 GPUs);
* fault -> reserved: the all-in-one pieces in this process (the API on SQLite with
  the embedded Placement, the agent with the real drivers on that tree, over HTTP).
  A fault is written into the tree and the time until Placement shows the device's
  inventory fully reserved is measured, three ways:
  - udev: a fatal AER error, and the PCI error recovery uevent the kernel sends with
    it (the agent's udev handler calls the schedule's ``urgent``, as here);
  - NVML: an XID 79 from the (fake) NVML event set, heard by the driver's thread;
  - polling: a QAT device going down (no event): the next periodic scan sees it.

    .venv/bin/python bench/health.py [--trials 5] [--interval 5]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tests.fixtures.server import serve  # noqa: E402
from tests.fixtures.sysfs import build_sysfs, inject, write_aer  # noqa: E402
from tests.unit.drivers.fake_nvml import FakeNvml, h100  # noqa: E402

from acceleron import conf as confmod  # noqa: E402
from acceleron.agent import discovery  # noqa: E402
from acceleron.agent.client import connect  # noqa: E402
from acceleron.agent.loop import Agent, Settings  # noqa: E402
from acceleron.api.app import create_app  # noqa: E402
from acceleron.db import migrate  # noqa: E402
from acceleron.db.session import Database  # noqa: E402
from acceleron.drivers import load_drivers  # noqa: E402
from acceleron.drivers.base import Driver  # noqa: E402
from acceleron.drivers.nvidia_gpu import NvidiaGpuDriver  # noqa: E402
from acceleron.drivers.sysfs import shared_scan  # noqa: E402
from acceleron.placement import names  # noqa: E402
from discovery import sysfs_spec  # noqa: E402

HOST = "bench-host"
DRIVERS = ["intel_fpga", "nvidia_gpu", "intel_qat", "xilinx_fpga"]
PLACEMENT = {"X-Auth-Token": "admin", "OpenStack-API-Version": "placement 1.39"}


def fake_nvml() -> FakeNvml:
    """16 GPUs where the tree has them (0000:40:00.0 ...), T4 ids as in sysfs."""
    return FakeNvml(
        [
            h100(bus=0x40 + n, pci_device_id=0x1EB810DE, name="Tesla T4", memory_mb=15360)
            for n in range(16)
        ]
    )


def drivers_for(conf: Any, root: Path, lib: FakeNvml) -> list[Driver]:
    drivers = load_drivers(conf, root)
    return [NvidiaGpuDriver(conf, root, lib) if d.name == "nvidia_gpu" else d for d in drivers]


def make_conf(state: Path, root: Path, interval: int) -> Any:
    return confmod.load(
        [],
        config_files=[],
        overrides={
            "DEFAULT": {"state_path": str(state), "host": HOST},
            "database": {"connection": f"sqlite:///{state / 'acceleron.sqlite'}"},
            "agent": {
                "enabled_drivers": DRIVERS,
                "root": str(root),
                "report_interval": interval,
                "udev": False,
            },
            "nvidia_gpu": {"use_nvml": True},
            "placement": {"mode": "embedded"},
        },
    )


def scan_cost(conf: Any, root: Path, repeat: int) -> None:
    drivers = drivers_for(conf, root, fake_nvml())
    with shared_scan():
        found = [(d, d.discover()) for d in drivers]
    count = sum(len(devices) for _, devices in found)
    health_times, scan_times = [], []
    for _ in range(repeat):
        started = time.perf_counter()
        for driver, devices in found:
            for device in devices:
                driver.health(device)
        health_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        discovery.scan(drivers)
        scan_times.append(time.perf_counter() - started)
    health = statistics.median(health_times)
    print(
        f"health checks of {count} devices: {health * 1000:.1f} ms "
        f"({health / count * 1e6:.0f} us per device; median of {repeat})"
    )
    print(
        f"whole scan with health ({count} devices): {statistics.median(scan_times) * 1000:.1f} ms"
    )


def provider_reserved(url: str, rp: str) -> bool:
    response = requests.get(
        f"{url}/placement/resource_providers/{rp}/inventories", headers=PLACEMENT, timeout=10
    )
    if response.status_code != 200:
        return False
    invs = response.json()["inventories"].values()
    return bool(invs) and all(i["reserved"] == i["total"] for i in invs)


def wait(check: Callable[[], bool], timeout: float, step: float = 0.01) -> float | None:
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        if check():
            return time.perf_counter() - started
        time.sleep(step)
    return None


def latency(trials: int, interval: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        state, root = Path(tmp) / "state", Path(tmp) / "root"
        state.mkdir()
        root.mkdir()
        build_sysfs(root, sysfs_spec())
        for n in range(16):  # QAT gen4 state files, for the polled fault
            inject(root, f"0000:{0x70 + n:02x}:00.0", "qat/state", "up")
        conf = make_conf(state, root, interval)
        db = Database(conf.database.connection)
        migrate.upgrade(db)
        lib = fake_nvml()
        with serve(create_app(conf, db)) as url:
            conf.set_override("api_endpoint", url, "agent")
            agent = Agent(Settings.from_conf(conf), drivers_for(conf, root, lib), connect(conf))
            for driver in agent.drivers:
                if isinstance(driver, NvidiaGpuDriver):
                    driver.start_watch(agent.schedule.urgent)
            thread = threading.Thread(target=agent.run, name="agent", daemon=True)
            thread.start()
            first = names.provider_uuid(HOST, "0000:10:00.0", "region0")
            ready = wait(
                lambda: (
                    requests.get(
                        f"{url}/placement/resource_providers/{first}", headers=PLACEMENT, timeout=10
                    ).status_code
                    == 200
                ),
                120,
            )
            print(f"first report published in {ready:.1f} s" if ready else "never published")
            synced = wait(
                lambda: (
                    requests.get(
                        f"{url}/v2/hosts/{HOST}",
                        headers={"OpenStack-API-Version": "accelerator 2.8"},
                        timeout=10,
                    ).json()["host"]["placement_synced"]
                    is True
                ),
                300,
                0.2,
            )
            print(f"whole host in Placement {synced:.1f} s later" if synced else "never synced")
            results: dict[str, list[float]] = {"udev": [], "nvml": [], "polling": []}
            for n in range(trials):
                fpga = f"0000:{0x10 + n:02x}:00.0"
                write_aer(root / "sys/bus/pci/devices" / fpga, fatal=1)
                started = time.perf_counter()
                agent.schedule.urgent()  # what the ERROR_EVENT uevent does
                rp = names.provider_uuid(HOST, fpga, "region0")
                wait(lambda rp=rp: provider_reserved(url, rp), 30)
                results["udev"].append(time.perf_counter() - started)
                gpu = f"0000:{0x40 + n:02x}:00.0"
                started = time.perf_counter()
                lib.xid(n, 79)
                rps = [names.provider_uuid(HOST, gpu, f"vgpu/nvidia-22{k}") for k in (2, 3)]
                wait(lambda rps=rps: all(provider_reserved(url, r) for r in rps), 30)
                results["nvml"].append(time.perf_counter() - started)
                qat = f"0000:{0x70 + n:02x}:00.0"
                time.sleep((n % 3) * interval / 3)  # land anywhere in the polling period
                inject(root, qat, "qat/state", "down")
                started = time.perf_counter()
                rp = names.provider_uuid(HOST, qat, "vf_pool")
                wait(lambda rp=rp: provider_reserved(url, rp), interval * 3)
                results["polling"].append(time.perf_counter() - started)
            agent.stop()
            for driver in agent.drivers:
                if isinstance(driver, NvidiaGpuDriver):
                    driver.stop_watch()
        db.dispose()
    for path, times in results.items():
        print(
            f"fault -> Placement reserved, {path}: median {statistics.median(times):.2f} s, "
            f"max {max(times):.2f} s over {len(times)} trials"
            + (f" (report_interval {interval} s)" if path == "polling" else "")
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--interval", type=int, default=5, help="[agent] report_interval")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        root = build_sysfs(Path(tmp), sysfs_spec())
        for n in range(16):
            inject(root, f"0000:{0x70 + n:02x}:00.0", "qat/state", "up")
        scan_cost(make_conf(Path(tmp), root, args.interval), root, args.repeat)
    latency(args.trials, args.interval)


if __name__ == "__main__":
    main()
