"""Accelerator request throughput, and where the time of a programming bind goes.

Starts Acceleron the way ``make run`` does (all-in-one: SQLite, noauth, the real
Placement embedded, the fake driver's agent) and measures:

1. **create + bind, no programming**: 16 clients each loop on Nova's two calls,
   ``POST /v2/accelerator_requests`` then ``PATCH`` binding the new request to a VF
   pool of a host that reported 256 QAT cards of 32 VFs (8,192 attach handles, so
   that no pool runs out at 400 binds/s); every bind ends Bound at once. Then the
   same requests are deleted (``DELETE ?instance=``), 16 clients.
2. **a bind that programs a region**, with the all-in-one's own agent doing the
   work: upload a GBS bitstream to the local store, bind a request whose profile
   names its function to a fake FPGA region, and time each phase the request
   shows (queued, fetch, verify, program, report) until it is Bound; then again on
   the card's other region, where the host's cache spares the fetch.

With ``--baseline REV`` the create + bind figure is first taken, the same way, on
the code of commit ``REV`` (default ``2723894``, before issue 14's cut of the bind path),
and printed beside this tree's; ``--baseline none`` skips it. With ``--profile DIR``
each server runs under cProfile (which slows it: its rate is not the figure to quote),
its statistics are written to ``DIR/baseline.prof`` and ``DIR/now.prof``, and the top
entries by own time printed.

    .venv/bin/python bench/bind.py [--seconds 10] [--clients 16] [--size-mb 16] [--baseline REV]
                                   [--profile DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import io
import json
import pstats
import time
import uuid
from pathlib import Path
from typing import Any

from acceleron.drivers import gbs
from load import (
    Result,
    all_in_one,
    binder,
    call,
    checkout,
    cpu_seconds,
    profiling,
    report_fake_hosts,
    wait_synced,
)

HOST = "bench-host"
QAT = {"resources:CUSTOM_ACCELERATOR_QAT": "1"}
BASELINE = "2723894"  # main before issue 14's cut of the bind path
REGION_TYPE = "ce48969398f05f33946d560708be108a"  # the fake inventory's first region type
INVENTORY = "devices:\n  - {type: QAT, count: 256, product_id: '37c8', model: C62X, vfs: 32}\n"


def report_big_host(url: str) -> list[str]:
    """Report a host with 8,192 VF handles; the resource providers of its VF pools."""
    report_fake_hosts(url, [HOST], INVENTORY)
    wait_synced(url, [HOST])  # the embedded Placement gets the new host first
    deployables = call(url, "GET", f"/v2/deployables?hostname={HOST}&kind=vf_pool&limit=1000")
    return [d["rp_uuid"] for d in deployables["deployables"]]


def create_and_bind(url: str, clients: int, seconds: float) -> tuple[Result, list[str]]:
    pools = [(HOST, rp) for rp in report_big_host(url)]
    name = f"qat-{uuid.uuid4().hex[:6]}"
    call(url, "POST", "/v2/device_profiles", [{"name": name, "groups": [QAT]}])
    result = Result("create + bind (no programming)", 0, 0.0, [], collections.Counter())
    instances: list[str] = []

    async def main() -> None:
        deadline = time.perf_counter() + seconds
        await asyncio.gather(
            *(binder(url, name, pools, i, 16, deadline, result, instances) for i in range(clients))
        )

    started, cpu = time.perf_counter(), cpu_seconds(url.pid)  # type: ignore[attr-defined]
    with profiling(url):
        asyncio.run(main())
    result.seconds = time.perf_counter() - started
    cpu = cpu_seconds(url.pid) - cpu  # type: ignore[attr-defined]
    result.name += f", server CPU {cpu / max(result.requests, 1) * 1000:.2f} ms/bind"
    return result, instances


def delete_all(url: str, instances: list[str], clients: int) -> Result:
    from load import run

    queue = iter(instances)

    def make(worker: int) -> Any:
        del worker
        for instance in queue:
            yield "DELETE", f"/v2/accelerator_requests?instance={instance}", b""

    return run("delete ?instance= (unbind + delete)", url, make, clients, 600)


def bound_states(url: str) -> collections.Counter[str]:
    arqs = call(url, "GET", "/v2/accelerator_requests")["arqs"]
    return collections.Counter(a["state"] for a in arqs)


# --- programming ---------------------------------------------------------------------


def upload(url: str, function: str, size_mb: int) -> str:
    made = call(
        url,
        "POST",
        "/v2/bitstreams",
        {"name": "bench.gbs", "function_uuid": function, "region_type_uuid": REGION_TYPE},
    )
    data = gbs.build(REGION_TYPE, (function,), payload=b"\x5a" * (size_mb << 20))
    call(url, "PUT", f"/v2/bitstreams/{made['uuid']}/data", raw=data)
    bitstream: str = made["uuid"]
    return bitstream


def timed_bind(url: str, profile: str, rp: str, host: str) -> list[tuple[str, float]]:
    """Bind and poll the request every 2 ms; (phase, seconds spent in it) in order."""
    arq = call(url, "POST", "/v2/accelerator_requests", {"device_profile_name": profile})
    arq_uuid = arq["arqs"][0]["uuid"]
    ops = [{"op": "add", "path": "/hostname", "value": host},
           {"op": "add", "path": "/device_rp_uuid", "value": rp},
           {"op": "add", "path": "/instance_uuid", "value": str(uuid.uuid4())}]  # fmt: skip
    started = last = time.perf_counter()
    call(url, "PATCH", "/v2/accelerator_requests", {arq_uuid: ops})
    phases: list[tuple[str, float]] = []
    current = "bind request"
    while True:
        seen = call(url, "GET", f"/v2/accelerator_requests/{arq_uuid}")
        phase = seen["state"] if seen["state"] != "BindStarted" else (seen["phase"] or "allocate")
        now = time.perf_counter()
        if phase != current:
            phases.append((current, now - last))
            current, last = phase, now
        if seen["state"] in ("Bound", "BindFailed"):
            phases.append(("total", now - started))
            if seen["state"] != "Bound":
                raise RuntimeError(seen["failure_reason"])
            return phases
        time.sleep(0.002)


def programming(url: str, size_mb: int) -> list[tuple[str, list[tuple[str, float]]]]:
    function = uuid.uuid4().hex
    upload(url, function, size_mb)
    name = f"fn-{function[:6]}"
    group = {"resources:CUSTOM_ACCELERATOR_FPGA": "1", "accel:function_id": function}
    call(url, "POST", "/v2/device_profiles", [{"name": name, "groups": [group]}])
    regions = [
        d
        for d in call(url, "GET", "/v2/deployables?kind=region")["deployables"]
        if d["region_type"] == REGION_TYPE and d["hostname"] != HOST
    ]
    first, second = regions[0], regions[1]
    return [
        (
            f"first bind, {size_mb} MiB bitstream fetched",
            timed_bind(url, name, first["rp_uuid"], first["hostname"]),
        ),
        (
            "second bind, same bitstream from the host's cache",
            timed_bind(url, name, second["rp_uuid"], second["hostname"]),
        ),
    ]


def top(profile: Path, entries: int = 30) -> str:
    """The functions of a cProfile file that took the most time of their own."""
    out = io.StringIO()
    stats = pstats.Stats(str(profile), stream=out)
    stats.sort_stats("tottime").print_stats(entries)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--size-mb", type=int, default=16, help="bitstream size")
    parser.add_argument("--baseline", default=BASELINE, help="commit to compare with, or none")
    parser.add_argument("--profile", type=Path, help="directory for the servers' cProfiles")
    args = parser.parse_args()
    profiles = {}
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
        profiles = {"baseline": args.profile / "baseline.prof", "now": args.profile / "now.prof"}
    baseline = None
    if args.baseline != "none":
        with (
            checkout(args.baseline) as source,
            all_in_one(source=source, profile=profiles.get("baseline")) as url,
        ):
            baseline, _ = create_and_bind(url, args.clients, args.seconds)
    with all_in_one(profile=profiles.get("now")) as url:
        bound, instances = create_and_bind(url, args.clients, args.seconds)
        states = bound_states(url)
        deleted = delete_all(url, instances, args.clients)
        timings = programming(url, args.size_mb)
    print(f"\n{args.clients} concurrent clients, {args.seconds:.0f} s")
    if baseline is not None:
        baseline.name = baseline.name.replace(
            "create + bind (no programming)", f"baseline ({args.baseline})"
        )
        print(baseline.line().replace("req/s", "binds/s"))
    print(bound.line().replace("req/s", "binds/s"))
    print(f"    requests after the run: {dict(states)}")
    print(deleted.line())
    for title, phases in timings:
        print(f"\n{title}:")
        for phase, seconds in phases:
            print(f"    {phase:<14} {seconds * 1000:8.1f} ms")
    for name, profile in profiles.items():
        if profile.exists():
            print(f"\nserver profile, {name} ({profile}):\n{top(profile)}")
    for name, profile in profiles.items():
        run = baseline if name == "baseline" else bound
        counted = profile.with_suffix(".statements.json")
        if run is not None and counted.exists():
            verbs = json.loads(counted.read_text())
            per = ", ".join(f"{n / run.requests:.1f} {v}" for v, n in sorted(verbs.items()))
            total = sum(verbs.values()) / run.requests
            print(f"statements per create + bind, {name}: {total:.1f} ({per})")


if __name__ == "__main__":
    main()
