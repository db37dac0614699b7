"""Placement sync: calls per device, calls when nothing changed, and time at scale.

Every host has 8 fake FPGA cards with 2 regions each (25 providers with its
compute node). Against the real Placement running in this process (SQLite):

1. one host, first sync: Placement calls per device and per provider, by route;
2. the same host again: calls when nothing changed (and when forced to verify);
3. N hosts (default 1,000, i.e. 25,000 providers): wall time and calls of the
   first sync, then of a pass where nothing changed;
4. the periodic verification of those hosts, every host checked (``sync_all``) and
   each host's one small GET (``verify``: a whole interval's ticks back to back), also
   with 1 % of the hosts changed in Placement behind Acceleron's back;
5. allocations written to Placement (what a claim writes: one FPGA unit, released at
   once) for ``--window`` seconds: alone; while the API's sync thread (``SyncWorker``,
   in this process, as it runs beside the API's requests) verifies at its real pace,
   every host once per ``--verify-interval``; at the pace 1,000 hosts would set (the
   interval scaled by hosts / 1,000: as many small GETs a second), as the API runs it
   beside its reconciler (the default: a provider at another generation is the
   reconciler's to read) and without one (``[reconciler] interval = 0``: the
   verification reads those itself); and, for reference, while the previous design's
   one listing of every provider runs back to back. The
   modes alternate for ``--rounds`` rounds; each says its median rate and share of the
   rate alone (each round against its own window alone), the allocating thread's CPU
   time per allocation (Placement serves in it), the other threads' CPU time (the
   verification's) as a share of a core, and the sync's GETs in a window.

    .venv/bin/python bench/placement_sync.py [--hosts 1000] [--placement-db URL]
        [--verify-interval 600] [--window 30] [--rounds 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import statistics
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
from acceleron.api.workers import SyncWorker  # noqa: E402
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
    conf = confmod.load(
        [],
        config_files=[],
        overrides={
            "DEFAULT": {"state_path": str(work)},
            "fake": {"inventory_file": str(work / "inventory.yaml")},
        },
    )
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


def many_hosts(work: Path, app: inprocess.WSGIApp, hosts: int, args: argparse.Namespace) -> None:
    db = Database(f"sqlite:///{work / 'many.sqlite'}")
    migrate.upgrade(db)
    started = time.perf_counter()
    for report in reports(work, hosts):
        inventory.reconcile(db, report)
    print(
        f"\n{hosts} hosts ({hosts * 25} providers): reports reconciled in "
        f"{time.perf_counter() - started:.1f} s"
    )
    counted = CountingAdapter(inprocess.direct_adapter(app))
    syncer = Syncer(db, lambda: PlacementClient(counted), Options(), create_compute_nodes=True)
    started = time.perf_counter()
    results = syncer.sync_pending()
    seconds = time.perf_counter() - started
    actions = Counter(a.op for r in results for a in r.actions)
    print(
        f"  first sync: {seconds:.1f} s, {seconds / hosts * 1000:.0f} ms per host, "
        f"{len(counted.calls)} calls ({len(counted.calls) / (hosts * 8):.2f} per device), "
        f"actions {dict(actions)}"
    )
    counted.reset()
    started = time.perf_counter()
    syncer.sync_pending()
    print(
        f"  nothing changed: {time.perf_counter() - started:.2f} s, {len(counted.calls)} "
        f"Placement calls"
    )
    verification(syncer, counted, app, hosts, args)
    db.dispose()


def verification(
    syncer: Syncer,
    counted: CountingAdapter,
    app: inprocess.WSGIApp,
    hosts: int,
    args: argparse.Namespace,
) -> None:
    """The periodic verification: every host checked (``sync_all``), and a whole
    interval's ticks back to back (``verify``, one small GET a host); then allocations
    written with the API's sync thread verifying at its real pace, against none."""
    for name, verify in (
        ("every host (sync_all)", syncer.sync_all),
        ("every host's small GET (verify)", syncer.verify),
    ):
        counted.reset()
        started, cpu = time.perf_counter(), time.process_time()
        verify()
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        print(
            f"  verification, {name}: {seconds:.2f} s, {len(counted.calls)} Placement "
            f"calls, {seconds / hosts * 1000:.1f} ms and {cpu / hosts * 1000:.1f} ms CPU "
            f"per host"
        )
    client = PlacementClient(inprocess.direct_adapter(app))
    regions = [
        p for p in client.list_providers() if p.name.startswith("compute-") and "_region" in p.name
    ]
    one_per_host = {p.root_uuid: p for p in regions}
    changed = list(one_per_host.values())[: max(hosts // 100, 1)]
    for provider in changed:
        client.set_traits(provider.uuid, [])
    counted.reset()
    started = time.perf_counter()
    repaired = syncer.verify()
    print(
        f"  every host's small GET, {len(changed)} hosts changed behind its back: "
        f"{time.perf_counter() - started:.2f} s, {len(counted.calls)} Placement calls, "
        f"{len(repaired)} hosts checked"
    )
    paced(syncer, counted, app, hosts, args, [p.uuid for p in regions])


def paced(
    syncer: Syncer,
    counted: CountingAdapter,
    app: inprocess.WSGIApp,
    hosts: int,
    args: argparse.Namespace,
    regions: list[str],
) -> None:
    """Allocations alone, against allocations while the API's sync thread (its
    ``SyncWorker``) verifies at the pace of ``--verify-interval`` (every host once per
    interval), and at the pace 1,000 hosts would set (as many small GETs a second);
    alternated, ``--rounds`` times. Also the previous design's one listing of every
    provider, back to back, for reference.

    A rate moves by a third between windows on a shared machine, and drifts over a run:
    each mode's share of alone is the median of its rounds' shares, each against the
    round's own window alone. Beside it, the CPU time of the allocating thread per
    allocation (its own work and Placement's, which serves in that thread) and the CPU
    time of every other thread (the verification's) per second of window."""
    thousand = args.verify_interval * hosts / 1000
    # As the API process does once started (``app.settle_heap``): what the set-up built
    # stays out of the garbage collector's passes.
    gc.collect()
    gc.freeze()
    modes: list[tuple[str, Callable[[], Any] | None, float, bool]] = [
        ("alone", None, 0.0, False),
        (f"verify_interval {args.verify_interval:g} s", None, args.verify_interval, True),
        (f"1,000 hosts' pace ({thousand:g} s here)", None, thousand, True),
        ("1,000 hosts' pace, no reconciler", None, thousand, False),
        ("one listing back to back (previous design)", syncer.client.list_providers, 0.0,
         False),
    ]  # fmt: skip
    figures: dict[str, list[Window]] = {name: [] for name, *_ in modes}
    for _ in range(args.rounds):
        for name, passes, interval, reconciled in modes:
            worker = (
                SyncWorker(lambda: syncer, 3600, interval, reconciled=reconciled)
                if interval
                else None
            )
            counted.reset()
            if worker is not None:
                worker.start()
            window = allocations(app, args.window, regions, passes)
            if worker is not None:
                worker.stop()
            window.gets = counted.count("GET", "/resource_providers")
            figures[name].append(window)
    alone = figures["alone"]
    print(f"  allocations for {args.window:g} s a window, {args.rounds} rounds (medians):")
    for name, runs in figures.items():
        share = statistics.median(w.rate / a.rate for w, a in zip(runs, alone, strict=True))
        print(
            f"    {name}: {statistics.median(w.rate for w in runs):.1f}/s, {share:.2f} of "
            f"alone (rates {', '.join(f'{w.rate:.1f}' for w in runs)}); allocating thread "
            f"{statistics.median(w.cpu for w in runs) * 1000:.2f} ms CPU an allocation; "
            f"other threads {statistics.median(w.others for w in runs) * 100:.1f} % of a "
            f"core; {statistics.median(w.gets for w in runs):.0f} GETs of the sync"
        )


@dataclasses.dataclass
class Window:
    """One window of allocations: their rate, the allocating thread's CPU seconds per
    allocation, every other thread's CPU seconds per second of window, and the sync's
    GETs."""

    rate: float
    cpu: float
    others: float
    gets: int = 0


def allocations(
    app: inprocess.WSGIApp,
    seconds: float,
    regions: list[str],
    passes: Callable[[], Any] | None = None,
) -> Window:
    """Allocations for ``seconds``, each of one FPGA unit on one of ``regions`` (in
    turn) and released at once, ``passes`` looping meanwhile. (At thousands of
    providers Placement's candidates query takes seconds here: the allocation is what a
    claim writes, and what a verification's reads compete with.)"""
    placement = inprocess.direct_adapter(app)
    stop = threading.Event()

    def loop() -> None:
        while passes is not None and not stop.is_set():
            passes()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    done, deadline = 0, time.perf_counter() + seconds
    started, process, own = time.perf_counter(), time.process_time(), time.thread_time()
    while time.perf_counter() < deadline:
        consumer = str(uuid.uuid4())
        region = regions[done % len(regions)]
        body = {"allocations": {region: {"resources": {"CUSTOM_ACCELERATOR_FPGA": 1}}},
                "project_id": "bench", "user_id": "bench", "consumer_generation": None,
                "consumer_type": "INSTANCE"}  # fmt: skip
        placement.put(f"/allocations/{consumer}", json=body, microversion="1.39")
        placement.delete(f"/allocations/{consumer}", microversion="1.39")
        done += 1
    elapsed, own = time.perf_counter() - started, time.thread_time() - own
    others = time.process_time() - process - own
    stop.set()
    thread.join()
    return Window(done / elapsed, own / max(done, 1), others / elapsed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument(
        "--placement-db", help="Placement's database (default: SQLite in a temporary file)"
    )
    parser.add_argument(
        "--verify-interval",
        type=float,
        default=600,
        help="[placement] verify_interval of the paced verification (600)",
    )
    parser.add_argument(
        "--window", type=float, default=30, help="seconds of allocations per mode and round (30)"
    )
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the modes, alternated (2)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        app = inprocess.placement_app(args.placement_db or f"sqlite:///{work / 'placement.sqlite'}")
        one_host(work, app)
        many_hosts(work, app, args.hosts, args)


if __name__ == "__main__":
    main()
