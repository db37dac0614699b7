"""Device profile API throughput and latency, 16 concurrent clients.

Starts Acceleron the way ``make run`` does (all-in-one: SQLite, noauth, one
process) and measures, each for a fixed time:

* create (POST /v2/device_profiles) until 200, then 1,000, profiles exist;
* show (GET /v2/device_profiles/{uuid}), random profiles;
* list (GET /v2/device_profiles) with 200 and with 1,000 profiles.

Upstream's figures on this kind of machine (its best case, SQLite, 16 clients):
create ~100 req/s, show ~140 req/s, list of 200 profiles ~20 req/s (p99 1.7 s).

    .venv/bin/python bench/api.py [--seconds 10] [--clients 16]
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import urllib.request
from collections.abc import Callable, Iterator

from load import Request, Result, all_in_one, body, run

PATH = "/v2/device_profiles"
GROUPS = [
    {
        "resources:CUSTOM_ACCELERATOR_FPGA": "1",
        "trait:CUSTOM_FPGA_INTEL_PAC_ARRIA10": "required",
        "accel:function_id": "8411555e-3cbf-47de-988c-b5e30bbfa035",
    },
    {"resources:CUSTOM_ACCELERATOR_GPU": "2", "trait:CUSTOM_GPU_NVIDIA": "forbidden"},
]


def creates(start: int, target: int) -> Callable[[int], Iterator[Request]]:
    counter = itertools.count(start)

    def make(worker: int) -> Iterator[Request]:
        del worker
        while (n := next(counter)) < target:
            data = [{"name": f"profile-{n:05d}", "description": f"bench {n}", "groups": GROUPS}]
            yield "POST", PATH, body(data)

    return make


def shows(uuids: list[str]) -> Callable[[int], Iterator[Request]]:
    def make(worker: int) -> Iterator[Request]:
        rng = random.Random(worker)
        while True:
            yield "GET", f"{PATH}/{rng.choice(uuids)}", b""

    return make


def lists(worker: int) -> Iterator[Request]:
    del worker
    while True:
        yield "GET", PATH, b""


def all_uuids(url: str) -> list[str]:
    with urllib.request.urlopen(url + PATH) as response:
        return [p["uuid"] for p in json.load(response)["device_profiles"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=16)
    args = parser.parse_args()
    results: list[Result] = []
    with all_in_one() as url:
        results.append(run("create (0 -> 200 profiles)", url, creates(0, 200), args.clients, 60))
        results.append(run("list, 200 profiles", url, lists, args.clients, args.seconds))
        results.append(
            run("create (200 -> 1000 profiles)", url, creates(200, 1000), args.clients, 120)
        )
        uuids = all_uuids(url)
        assert len(uuids) == 1000, len(uuids)
        results.append(run("show, 1000 profiles", url, shows(uuids), args.clients, args.seconds))
        results.append(run("list, 1000 profiles", url, lists, args.clients, args.seconds))
    print(f"\n{args.clients} concurrent clients, {args.seconds:.0f} s per read test")
    for result in results:
        print(result.line())
        bad = {s: n for s, n in result.statuses.items() if s >= 400}
        if bad:
            print(f"    errors: {bad}")


if __name__ == "__main__":
    main()
