"""Placement sync: calls per device, calls when nothing changed, and time at scale.

Every host has 8 fake FPGA cards with 2 regions each (25 providers with its
compute node). Against the real Placement running in this process (SQLite):

1. one host, first sync: Placement calls per device and per provider, by route;
2. the same host again: calls when nothing changed (and when forced to verify);
3. N hosts (default 1,000, i.e. 25,000 providers): wall time and calls of the
   first sync, then of a pass where nothing changed;
4. the periodic verification of those hosts, every host checked (``sync_all``) and
   incremental (``verify``), also with 1 % of the hosts changed in Placement behind
   Acceleron's back; and allocations written to Placement (what a claim writes: one
   FPGA unit, released at once) while verification passes run back to back in a
   thread of the same process, as the API's sync thread runs beside its requests,
   against allocations alone.

    .venv/bin/python bench/placement_sync.py [--hosts 1000] [--placement-db URL]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fixtures.placement import CountingAdapter  # noqa: E402

from acceleron import conf as confmod  # noqa: E402
from acceleron.db import migrate  # noqa: E402
from acceleron.db.session import Database  # noqa: E402
from acceleron.drivers.fake import FakeDriver  # noqa: E402
from acceleron.placement import inprocess  # noqa: E402
from acceleron.placement.client import PlacementClient  # noqa: E402
from acceleron.placement.tree import Options  # noqa: E402
from acceleron.report import HostReport  # noqa: E402
from acceleron.service import inventory  # noqa: E402
from acceleron.service.publish import Syncer  # noqa: E402

INVENTORY = """
devices:
  - type: FPGA
    count: 8
    product_id: "09c4"
    model: PAC_ARRIA10
    regions:
      - {region_type: ce48969398f05f33946d560708be108a, accelerators: 2,
         functions: [d8424dc4a4a3c413f89e433683f9040b]}
      - {region_type: 9926ab6d6c925a68aabca7d84c545738, accelerators: 1}
"""


def reports(work: Path, hosts: int, prefix: str = "compute") -> list[HostReport]:
    (work / "inventory.yaml").write_text(INVENTORY)
    conf = confmod.load([], config_files=[], overrides={
        "DEFAULT": {"state_path": str(work)},
        "fake": {"inventory_file": str(work / "inventory.yaml")},
    })  # fmt: skip
    out = []
    for n in range(hosts):
        host = f"{prefix}-{n:04d}"
        conf.set_override("host", host)
        out.append(HostReport(host, "bench", tuple(FakeDriver(conf, work).discover())))
    return out


def show_calls(title: str, counted: CountingAdapter, devices: int, providers: int) -> None:
    routes = counted.by_route()
    total = sum(routes.values())
    writes = len(counted.writes)
    print(f"  {title}: {total} calls ({writes} writes)", end="")
    if devices:
        print(f", {total / devices:.2f} per device, {total / providers:.2f} per provider", end="")
    print()
    for route, count in sorted(routes.items(), key=lambda item: -item[1]):
        print(f"      {count:6d}  {route}")


def one_host(work: Path, app: inprocess.WSGIApp) -> None:
    db = Database(f"sqlite:///{work / 'one.sqlite'}")
    migrate.upgrade(db)
    [report] = reports(work, 1, prefix="solo")
    inventory.reconcile(db, report)
    counted = CountingAdapter(inprocess.direct_adapter(app))
    syncer = Syncer(db, lambda: PlacementClient(counted), Options(), create_compute_nodes=True)
    print("one host, 8 FPGA cards x 2 regions (25 providers with the compute node):")
    syncer.sync_host(report.hostname)
    show_calls("first sync", counted, 8, 25)
    counted.reset()
    syncer.sync_host(report.hostname)
    show_calls("unchanged, again", counted, 0, 25)
    counted.reset()
    syncer.sync_host(report.hostname, force=True)
    show_calls("unchanged, forced verification", counted, 0, 25)
    db.dispose()


def many_hosts(work: Path, app: inprocess.WSGIApp, hosts: int) -> None:
    db = Database(f"sqlite:///{work / 'many.sqlite'}")
    migrate.upgrade(db)
    started = time.perf_counter()
    for report in reports(work, hosts):
        inventory.reconcile(db, report)
    print(f"\n{hosts} hosts ({hosts * 25} providers): reports reconciled in "
          f"{time.perf_counter() - started:.1f} s")  # fmt: skip
    counted = CountingAdapter(inprocess.direct_adapter(app))
    syncer = Syncer(db, lambda: PlacementClient(counted), Options(), create_compute_nodes=True)
    started = time.perf_counter()
    results = syncer.sync_pending()
    seconds = time.perf_counter() - started
    actions = Counter(a.op for r in results for a in r.actions)
    print(f"  first sync: {seconds:.1f} s, {seconds / hosts * 1000:.0f} ms per host, "
          f"{len(counted.calls)} calls ({len(counted.calls) / (hosts * 8):.2f} per device), "
          f"actions {dict(actions)}")  # fmt: skip
    counted.reset()
    started = time.perf_counter()
    syncer.sync_pending()
    print(f"  nothing changed: {time.perf_counter() - started:.2f} s, {len(counted.calls)} "
          f"Placement calls")  # fmt: skip
    verification(syncer, counted, app, hosts)
    db.dispose()


def verification(syncer: Syncer, counted: CountingAdapter, app: inprocess.WSGIApp,
                 hosts: int) -> None:  # fmt: skip
    """The periodic verification, every host checked (``sync_all``) against incremental
    (``verify``); and allocations written while passes of each run back to back in
    another thread, against allocations alone."""
    for name, verify in (("every host (sync_all)", syncer.sync_all),
                         ("incremental (verify)", syncer.verify)):  # fmt: skip
        counted.reset()
        started = time.perf_counter()
        verify()
        print(f"  verification, {name}: {time.perf_counter() - started:.2f} s, "
              f"{len(counted.calls)} Placement calls")  # fmt: skip
    client = PlacementClient(inprocess.direct_adapter(app))
    regions = [p for p in client.list_providers()
               if p.name.startswith("compute-") and "_region" in p.name]  # fmt: skip
    one_per_host = {p.root_uuid: p for p in regions}
    changed = list(one_per_host.values())[: max(hosts // 100, 1)]
    for provider in changed:
        client.set_traits(provider.uuid, [])
    counted.reset()
    started = time.perf_counter()
    repaired = syncer.verify()
    print(f"  incremental, {len(changed)} hosts changed behind its back: "
          f"{time.perf_counter() - started:.2f} s, {len(counted.calls)} Placement calls, "
          f"{len(repaired)} hosts checked")  # fmt: skip
    seconds = 10.0
    alone = allocations(app, seconds, [p.uuid for p in regions])
    print(f"  allocations (written, then released) alone: {alone:.1f}/s")
    for name, verify in (("sync_all", syncer.sync_all), ("verify", syncer.verify)):
        during = allocations(app, seconds, [p.uuid for p in regions], verify)
        print(f"  allocations while {name} passes run back to back: {during:.1f}/s "
              f"({during / alone:.2f} of alone)")  # fmt: skip


def allocations(
    app: inprocess.WSGIApp,
    seconds: float,
    regions: list[str],
    passes: Callable[[], Any] | None = None,
) -> float:
    """Allocations per second for ``seconds``, each of one FPGA unit on one of
    ``regions`` (in turn) and released at once, ``passes`` looping meanwhile. (At
    thousands of providers Placement's candidates query takes seconds here: the
    allocation is what a claim writes, and what a verification's reads compete with.)"""
    placement = inprocess.direct_adapter(app)
    stop = threading.Event()

    def loop() -> None:
        while passes is not None and not stop.is_set():
            passes()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    done, deadline = 0, time.perf_counter() + seconds
    started = time.perf_counter()
    while time.perf_counter() < deadline:
        consumer = str(uuid.uuid4())
        region = regions[done % len(regions)]
        body = {"allocations": {region: {"resources": {"CUSTOM_ACCELERATOR_FPGA": 1}}},
                "project_id": "bench", "user_id": "bench", "consumer_generation": None,
                "consumer_type": "INSTANCE"}  # fmt: skip
        placement.put(f"/allocations/{consumer}", json=body, microversion="1.39")
        placement.delete(f"/allocations/{consumer}", microversion="1.39")
        done += 1
    rate = done / (time.perf_counter() - started)
    stop.set()
    thread.join()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument(
        "--placement-db", help="Placement's database (default: SQLite in a temporary file)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        app = inprocess.placement_app(args.placement_db or f"sqlite:///{work / 'placement.sqlite'}")
        one_host(work, app)
        many_hosts(work, app, args.hosts)


if __name__ == "__main__":
    main()
