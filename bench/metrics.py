"""What a Prometheus scrape of /metrics costs, with 100 hosts of the fake inventory.

Fills a SQLite database with ``--hosts`` hosts (each the fake driver's five cards),
runs the refresher once (the ``GROUP BY`` queries behind the state gauges, which run
every ``[metrics] refresh_interval`` seconds, not per scrape), sends ``--requests``
API requests so that the request counters have label sets, then times:

* the refresh (database queries and gauge updates);
* building the exposition text in the process (``metrics.exposition``);
* ``GET /metrics`` over HTTP from a live server (one process), sequentially.

    .venv/bin/python bench/metrics.py [--hosts 100] [--scrapes 200]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.fixtures
from tests.fixtures.server import serve

from acceleron import metrics
from acceleron.api.app import create_app
from acceleron.service import stats
from load import fake_hosts


def timed(fn: Callable[[], object], times: int) -> list[float]:
    found = []
    for _ in range(times):
        started = time.perf_counter()
        fn()
        found.append((time.perf_counter() - started) * 1000)
    return found


def describe(name: str, ms: list[float]) -> None:
    ms = sorted(ms)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    print(f"{name:<34} median {statistics.median(ms):7.2f} ms   p99 {p99:7.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--scrapes", type=int, default=200)
    args = parser.parse_args()
    conf, db = fake_hosts(args.hosts, "bench-metrics-")
    describe("refresh (every refresh_interval)", timed(lambda: stats.refresh(db, True), 20))
    with serve(create_app(conf, db)) as url:
        for path in ("/v2", "/v2/device_profiles", "/v2/accelerator_requests", "/nope"):
            for _ in range(5):
                with contextlib.suppress(OSError):  # /nope: a 404
                    urllib.request.urlopen(url + path).read()
        size = len(metrics.exposition())
        describe("exposition in process", timed(metrics.exposition, args.scrapes))
        describe(
            "GET /metrics over HTTP",
            timed(lambda: urllib.request.urlopen(url + "/metrics").read(), args.scrapes),
        )
    print(f"hosts {args.hosts}, exposition {size / 1024:.1f} KiB")


if __name__ == "__main__":
    main()
