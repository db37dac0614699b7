"""Device profile API throughput and latency, 16 concurrent clients.

Starts Acceleron the way ``make run`` does (all-in-one: SQLite, noauth, one
process) and measures, each for a fixed time:

* create (POST /v2/device_profiles) until 200, then 1,000, profiles exist;
* show (GET /v2/device_profiles/{uuid}), random profiles;
* list (GET /v2/device_profiles) with 200 and with 1,000 profiles.

Upstream's figures on this kind of machine (its best case, SQLite, 16 clients):
create ~100 req/s, show ~140 req/s, list of 200 profiles ~20 req/s (p99 1.7 s).

With ``--inventory`` it measures the inventory's reads instead, ``--hosts`` hosts of
the fake driver's cards reported: list and show devices, list and show deployables
(the whole list in one page, at the latest microversion). ``--baseline REV`` takes
the same figures first on the code of commit REV and prints them beside this tree's.

    .venv/bin/python bench/api.py [--seconds 10] [--clients 16]
    .venv/bin/python bench/api.py --inventory [--hosts 20] [--baseline REV]
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

from acceleron.drivers.fake import DEFAULT_INVENTORY
from load import (
    GROUPS,
    Request,
    Result,
    Url,
    all_in_one,
    body,
    checkout,
    cpu_seconds,
    report_fake_hosts,
    run,
    wait_synced,
)

PATH = "/v2/device_profiles"


def creates(start: int, target: int) -> Callable[[int], Iterator[Request]]:
    counter = itertools.count(start)

    def make(worker: int) -> Iterator[Request]:
        del worker
        while (n := next(counter)) < target:
            data = [{"name": f"profile-{n:05d}", "description": f"bench {n}", "groups": GROUPS}]
            yield "POST", PATH, body(data)

    return make


def all_uuids(url: str) -> list[str]:
    with urllib.request.urlopen(url + PATH) as response:
        return [p["uuid"] for p in json.load(response)["device_profiles"]]


def gets(paths: list[str]) -> Callable[[int], Iterator[Request]]:
    """GETs of ``paths``, picked at random (in the same order for every tree measured)."""

    def make(worker: int) -> Iterator[Request]:
        rng = random.Random(worker)
        while True:
            yield "GET", rng.choice(paths), b""

    return make


def inventory(url: Url, hosts: int, clients: int, seconds: float, label: str) -> list[Result]:
    """The inventory's reads, ``hosts`` fake hosts reported (and in Placement, so that no
    sync runs meanwhile); each result's name ends with the server's CPU time per request."""
    names = [f"bench-{i:03d}" for i in range(hosts)]
    report_fake_hosts(url, names, DEFAULT_INVENTORY)
    wait_synced(url, names)
    results: list[Result] = []
    for noun in ("devices", "deployables"):
        with urllib.request.urlopen(f"{url}/v2/{noun}") as response:
            uuids = [item["uuid"] for item in json.load(response)[noun]]
        paths = {"list": [f"/v2/{noun}"], "show": [f"/v2/{noun}/{u}" for u in uuids]}
        for what, wanted in paths.items():
            cpu = cpu_seconds(url.pid)
            result = run(f"{label}{what}, {len(uuids)} {noun}", url, gets(wanted), clients, seconds)
            cpu = (cpu_seconds(url.pid) - cpu) / max(result.requests, 1) * 1000
            result.name += f" ({cpu:.2f} ms CPU)"
            results.append(result)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--inventory", action="store_true", help="devices and deployables")
    parser.add_argument("--hosts", type=int, default=20, help="fake hosts (--inventory)")
    parser.add_argument("--baseline", default="none", help="commit to compare with")
    args = parser.parse_args()
    results: list[Result] = []
    if args.inventory:
        if args.baseline != "none":
            with checkout(args.baseline) as source, all_in_one(source=source) as url:
                label = f"{args.baseline}: "
                results += inventory(url, args.hosts, args.clients, args.seconds, label)
        with all_in_one() as url:
            results += inventory(url, args.hosts, args.clients, args.seconds, "this tree: ")
    else:
        if args.baseline != "none":
            with checkout(args.baseline) as source:
                results += profiles(args.clients, args.seconds, source, f"{args.baseline}: ")
        results += profiles(args.clients, args.seconds, label="this tree: " if results else "")
    print(f"\n{args.clients} concurrent clients, {args.seconds:.0f} s per read test")
    for result in results:
        print(result.line())
        bad = {s: n for s, n in result.statuses.items() if s >= 400}
        if bad:
            print(f"    errors: {bad}")


def profiles(
    clients: int, seconds: float, source: Path | None = None, label: str = ""
) -> list[Result]:
    """The profile API's figures, on this tree's code or ``source`` (another's src)."""
    results: list[Result] = []
    with all_in_one(source=source) as url:
        results.append(run(f"{label}create (0 -> 200 profiles)", url, creates(0, 200), clients, 60))
        results.append(run(f"{label}list, 200 profiles", url, gets([PATH]), clients, seconds))
        results.append(
            run(f"{label}create (200 -> 1000 profiles)", url, creates(200, 1000), clients, 120)
        )
        uuids = all_uuids(url)
        assert len(uuids) == 1000, len(uuids)
        results.append(
            run(
                f"{label}show, 1000 profiles",
                url,
                gets([f"{PATH}/{u}" for u in uuids]),
                clients,
                seconds,
            )
        )
        results.append(run(f"{label}list, 1000 profiles", url, gets([PATH]), clients, seconds))
    return results


if __name__ == "__main__":
    main()
