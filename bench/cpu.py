"""CPU time per operation: the API's, and Placement's for its share, a baseline beside.

On a small shared machine a rate moves by a third from run to run; the CPU time a
server spends per operation moves far less. This script measures it, for the same
operations on a baseline commit's code and on this tree's, in one run:

* **profile create / show / list**: ``POST /v2/device_profiles`` (one profile),
  ``GET`` one of them, ``GET`` the list of 200;
* **report**: an agent's periodic ``PUT /v2/hosts/{host}/report`` that changes nothing
  (what every host sends every ``[agent] report_interval``);
* **bind**: Nova's two calls, ``POST /v2/accelerator_requests`` then ``PATCH`` binding
  it to a host's QAT VF pool (the requests deleted afterwards, not counted);
* **claim**: ``POST /v2/claims`` for one QAT VF (2.12) and its release, ``DELETE``.

The layout keeps the two servers apart so that each one's CPU time is its own: a
standalone Placement (its WSGI application under uvicorn, one process, SQLite) and
``acceleron api`` (one process, SQLite, ``[placement] mode = remote``), started afresh
for each tree; ``--hosts`` hosts of the fake driver (one FPGA card of two regions, one
QAT card of 32 VFs; their compute nodes made in Placement as Nova would) are reported
through the API and published by its sync before anything is measured. CPU time is
user + system of each process, from ``/proc/<pid>/stat``, over the whole operation
(its own clients' requests only: the servers are idle before each).

    .venv/bin/python bench/cpu.py [--baseline c314fe3] [--hosts 40] [--seconds 8]
        [--clients 8]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from load import (
    GROUPS,
    Request,
    Result,
    Url,
    binder,
    body,
    call,
    checkout,
    connect,
    cpu_seconds,
    exchange,
    fake_reports,
    free_port,
    run,
    wait_synced,
)
from scale import INVENTORY, PROFILES, QAT, placement_server, process, vf_pools

BASELINE = "c314fe3"  # main before issue 31's work
PATH = "/v2/device_profiles"
PLACEMENT_HEADERS = {
    "X-Auth-Token": "admin",
    "OpenStack-API-Version": "placement 1.39",
    "Content-Type": "application/json",
}


@dataclasses.dataclass
class Figure:
    """One operation on one tree: its rate, and the CPU milliseconds each took in the
    API's process and in Placement's."""

    operation: str
    rate: float
    api_ms: float
    placement_ms: float
    failed: int


@dataclasses.dataclass
class Servers:
    api: Url
    placement: Url


def settle(pids: tuple[int, ...], timeout: float = 60.0) -> None:
    """Wait until the servers are idle (under 5 % of a core for half a second)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        cpu = sum(cpu_seconds(p) for p in pids)
        time.sleep(0.5)
        if sum(cpu_seconds(p) for p in pids) - cpu < 0.025:
            return


def measured(servers: Servers, operation: str, drive: Callable[[], Result]) -> Figure:
    pids = (servers.api.pid, servers.placement.pid)
    settle(pids)
    api, placement = cpu_seconds(pids[0]), cpu_seconds(pids[1])
    result = drive()
    done = max(result.requests, 1)
    api = (cpu_seconds(pids[0]) - api) / done * 1000
    placement = (cpu_seconds(pids[1]) - placement) / done * 1000
    failed = sum(n for s, n in result.statuses.items() if s >= 400)
    return Figure(operation, result.rate, api, placement, failed)


# --- the servers ----------------------------------------------------------------------


def api_config(state: Path, placement: str) -> str:
    return f"""[DEFAULT]
state_path = {state}
auth_strategy = noauth
[database]
connection = sqlite:///{state / "acceleron.sqlite"}
[placement]
mode = remote
auth_type = admin_token
endpoint = {placement}
token = admin
verify_interval = 0
"""


@contextmanager
def started(source: Path | None, state: Path) -> Iterator[Servers]:
    """Placement and ``acceleron api`` (``source``: another tree's ``src``) in ``state``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(source), env.get("PYTHONPATH", "")])
    log = state / "servers.log"
    with placement_server(f"sqlite:///{state / 'placement.sqlite'}", 1, log) as placement:
        conf = state / "acceleron.conf"
        conf.write_text(api_config(state, placement))
        acceleron = str(Path(sys.executable).parent / "acceleron")
        upgrade = [acceleron, "--config-file", str(conf), "db", "upgrade"]
        subprocess.run(upgrade, env=env, check=True, capture_output=True, timeout=300)
        port = free_port()
        argv = [
            acceleron,
            "--config-file",
            str(conf),
            "api",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ]
        with process(argv, f"http://127.0.0.1:{port}", log, env) as api:
            servers = Servers(Url(api), Url(placement))
            servers.api.pid = _listener(port)
            servers.placement.pid = _listener(int(placement.rsplit(":", 1)[1]))
            yield servers


def _listener(port: int) -> int:
    """The process listening on ``port`` (a worker may be a child of what was started)."""
    wanted = f":{port:04X} "
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[1].endswith(wanted.strip()) and fields[3] == "0A":  # LISTEN
                inodes.add(fields[9])
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                return int(pid)
    raise RuntimeError(f"nothing listens on port {port}")


# --- filling ----------------------------------------------------------------------------


def compute_nodes(placement: str, names: list[str]) -> None:
    """The hosts' compute node providers, made in Placement as Nova makes them."""
    for name in names:
        data = json.dumps({"name": name, "uuid": str(uuid.uuid4())}).encode()
        request = urllib.request.Request(
            placement + "/resource_providers", data=data, method="POST", headers=PLACEMENT_HEADERS
        )
        urllib.request.urlopen(request, timeout=60).close()


def fill(servers: Servers, bodies: dict[str, bytes]) -> None:
    names = list(bodies)
    compute_nodes(servers.placement, names)
    for name, report in bodies.items():
        request = urllib.request.Request(
            f"{servers.api}/v2/hosts/{name}/report", data=report, method="PUT"
        )
        request.add_header("OpenStack-API-Version", "accelerator latest")
        request.add_header("Content-Type", "application/json")
        urllib.request.urlopen(request, timeout=120).close()
    wait_synced(servers.api, names)
    for name, groups in PROFILES.items():
        call(servers.api, "POST", PATH, [{"name": name, "groups": groups}])


# --- the operations ---------------------------------------------------------------------


def creates(start: int, stop: int = 10**9) -> Callable[[int], Iterator[Request]]:
    counter = iter(range(start, stop))

    def make(worker: int) -> Iterator[Request]:
        del worker
        for n in counter:
            data = [{"name": f"cpu-{n:06d}", "groups": GROUPS}]
            yield "POST", PATH, body(data)

    return make


def repeated(requests: list[Request]) -> Callable[[int], Iterator[Request]]:
    def make(worker: int) -> Iterator[Request]:
        n = worker
        while True:
            yield requests[n % len(requests)]
            n += 7

    return make


async def _claimer(url: str, deadline: float, result: Result) -> None:
    host, reader, writer = await connect(url)
    try:
        while time.perf_counter() < deadline:
            consumer = str(uuid.uuid4())
            made = (
                "POST",
                "/v2/claims",
                body({"device_profile_name": QAT, "consumer_uuid": consumer}),
            )
            status, _ = await exchange(reader, writer, host, made)
            result.statuses[status] += 1
            if status == 201:
                status, _ = await exchange(
                    reader, writer, host, ("DELETE", f"/v2/claims/{consumer}", b"")
                )
                result.statuses[status] += 1
                result.requests += 1
    finally:
        writer.close()


def cycles(url: str, what: str, clients: int, seconds: float) -> Result:
    """Claims (each released) or binds (Nova's two calls) for ``seconds``; the bound
    requests are deleted afterwards, outside the count."""
    result = Result(what, 0, 0.0, [], collections.Counter())
    instances: list[str] = []
    pools = vf_pools(url) if what == "bind" else []

    async def main() -> None:
        deadline = time.perf_counter() + seconds
        if what == "claim":
            await asyncio.gather(*(_claimer(url, deadline, result) for _ in range(clients)))
        else:
            await asyncio.gather(
                *(
                    binder(url, QAT, pools, i, 7, deadline, result, instances)
                    for i in range(clients)
                )
            )

    started_at = time.perf_counter()
    asyncio.run(main())
    result.seconds = time.perf_counter() - started_at
    for instance in instances:
        call(url, "DELETE", f"/v2/accelerator_requests?instance={instance}")
    return result


def measure(
    servers: Servers, bodies: dict[str, bytes], clients: int, seconds: float
) -> list[Figure]:
    url = servers.api
    run(PATH, url, creates(0, 200), clients, 120)
    figures = []
    seeded = [p["uuid"] for p in call(url, "GET", PATH)["device_profiles"]][:200]
    steps: list[tuple[str, Callable[[], Result]]] = [
        ("profile show", lambda: run("show", url, repeated(
            [("GET", f"{PATH}/{u}", b"") for u in seeded]), clients, seconds)),
        (f"profile list ({len(seeded)})", lambda: run("list", url, repeated(
            [("GET", PATH, b"")]), clients, seconds)),
        ("profile create", lambda: run("create", url, creates(1000), clients, seconds)),
        ("report (unchanged)", lambda: run("report", url, repeated(
            [("PUT", f"/v2/hosts/{h}/report", b) for h, b in bodies.items()]), clients,
            seconds)),
        ("bind (create + bind)", lambda: cycles(url, "bind", clients, seconds)),
        ("claim (claim + release)", lambda: cycles(url, "claim", clients, seconds)),
    ]  # fmt: skip
    for name, drive in steps:
        figures.append(measured(servers, name, drive))
        print(f"  {name}: done", flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=BASELINE, help="commit to compare with")
    parser.add_argument("--hosts", type=int, default=40)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args()
    names = [f"cpu-{n:03d}" for n in range(args.hosts)]
    bodies = fake_reports(names, INVENTORY)
    trees: dict[str, list[Figure]] = {}
    with checkout(args.baseline) as source:
        for label, src in ((args.baseline, source), ("now", None)):
            print(f"{label}: starting", flush=True)
            with (
                tempfile.TemporaryDirectory(prefix="acceleron-cpu-") as tmp,
                started(src, Path(tmp)) as servers,
            ):
                fill(servers, bodies)
                trees[label] = measure(servers, bodies, args.clients, args.seconds)
    load = Path("/proc/loadavg").read_text().split()[0]
    print(
        f"\n{os.cpu_count()} cores, load average {load}; {args.hosts} hosts, {args.clients} "
        f"clients, {args.seconds:g} s each; CPU ms per operation, API + Placement"
    )
    before, after = trees[args.baseline], trees["now"]
    heads = (f"{args.baseline} (API + Placement)", "now (API + Placement)", "rate before -> now")
    print(f"{'operation':<26}{heads[0]:>30}{heads[1]:>26}{heads[2]:>22}")
    for old, new in zip(before, after, strict=True):
        print(
            f"{old.operation:<26}{old.api_ms:>14.2f} + {old.placement_ms:<13.2f}"
            f"{new.api_ms:>10.2f} + {new.placement_ms:<13.2f}"
            f"{old.rate:>10.0f}/s -> {new.rate:.0f}/s"
        )
        for label, figure in ((args.baseline, old), ("now", new)):
            if figure.failed:
                print(f"    {label}: {figure.failed} answers 4xx/5xx")


if __name__ == "__main__":
    main()
