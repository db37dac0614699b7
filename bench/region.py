"""A region in simulation: N hosts as light agents against the API and a standalone
Placement, each periodic cost measured per host per interval (issue 45).

The layout is ``bench/scale.py``'s: a standalone Placement (``uvicorn --workers P``) and
``acceleron api --workers A``, each on a fresh PostgreSQL database, the API publishing
in remote mode (Nova's compute node providers made first, as Nova makes them). The hosts
are two kinds in turn, the shipped examples: an 8-GPU host
(``cloud/templates/inventory-compute-hgx.yaml``) and an FPGA + QAT host (``INVENTORY``
of ``bench/scale.py``). Each host is a light agent in this one process: its report is
built once by the fake driver, as the agent builds it, and the agent then does what a
real one does over HTTP, on asyncio streams that cost little CPU here:

* it reports every ``--interval`` seconds (the hosts' reports spread evenly over the
  interval), the report unchanged after the first: the first whole
  (``PUT /v2/hosts/{host}/report``), the others by the digest the API answered it with
  (``PUT /v2/hosts/{host}/report/unchanged``), as agents do;
* it polls for tasks without pause (``POST /v2/hosts/{host}/tasks/claim?wait=W``, the
  API holding each poll up to ``--task-wait`` seconds), one connection per host.

For each number of hosts:

1. **publication**: every agent's first report (32 at a time), then the seconds until
   every host is in Placement (its count read in the database every second), with the
   CPU each process spent a host and the API's requests to Placement a host;
2. **steady state**, nothing changing, in four windows of ``--window`` seconds each:
   the API alone (its own periodic work: the Placement sync's passes and spread
   verification, the reconciler), then with every agent polling for tasks, then polling
   and reporting (an unchanged report named by the digest the API answered the last
   one with, as agents do), then polling and sending every report whole (the baseline:
   agents before digests). The CPU time (user + system) of the API's processes, Placement's and
   PostgreSQL's (the backends serving the run's two databases; and every ``postgres``
   process of the machine, other users' included) in each window, a second (a window
   with polls lasts until the last poll begun in it ends, up to a poll's wait longer
   than ``--window``: before 2026-11-30 its CPU was divided by ``--window``, which
   overstated the polls and the reports); a window's rate less the one before is what
   the agents' polls, then their reports, cost. Each is given per host per interval
   (ms), beside the share of a core it takes; and the API's calls to Placement a host
   an interval in the window with the API alone (its metrics). The API's
   reconciler reads every host once per ``[reconciler] interval`` (300 s), a slice
   every 5 s: ``--window 300`` spans whole rounds (before, one listing of every
   provider a pass: windows differed by whether they caught one);
3. **beside the load**, in a fifth window with the agents polling and reporting: a
   claim and its release, Nova's create + bind of one QAT VF (``POST`` then ``PATCH``,
   the request deleted after), and Nova's Placement query for one H200, each one at a
   time, back to back, with their p50/p95;
4. the servers' resident memory and the databases' sizes (``pg_database_size``).

A cost per host that grows with the hosts is a pass that reads them all. The machine's
load is printed beside the figures: on a small shared machine the agents, both servers
and PostgreSQL share its cores. So is its pace, the CPU seconds of a fixed Python loop:
machines of one kind differ (this script's CPU a host fourfold, docs/benchmark-runs.md).

    .venv/bin/python bench/region.py [--hosts 100,1000] [--interval 60] [--task-wait 45]
        [--window 60] [--api-workers 2] [--placement-workers 2] [--sync-threads 4]
        [--postgresql postgresql+psycopg://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from load import call, connect, exchange, fake_reports
from scale import (
    INVENTORY,
    PLACEMENT_DB_ENV,
    api_server,
    config,
    databases,
    placement_server,
)

HGX = (Path(__file__).parents[1] / "cloud/templates/inventory-compute-hgx.yaml").read_text()
KINDS = {"hgx": HGX, "fpga-qat": INVENTORY}
QAT_PROFILE = ("region-qat", [{"resources:CUSTOM_ACCELERATOR_QAT": "1"}])
GPU_QUERY = "resources=CUSTOM_ACCELERATOR_GPU:1&limit=1000"
CONCURRENT_FIRST_REPORTS = 32


# --- CPU time of processes ---------------------------------------------------------------


def _stat(pid: int) -> tuple[int, float, str] | None:
    """(parent pid, CPU seconds, command name) of a process; None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name = text[text.index("(") + 1 : text.rindex(")")]
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), name


def _processes() -> dict[int, tuple[int, float, str]]:
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            found[int(entry.name)] = stat
    return found


def _serves(pid: int, prefix: str) -> bool:
    """Whether ``pid`` is a PostgreSQL backend connected to a database named ``prefix``..."""
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return f" {prefix}" in title


def _tree(table: dict[int, tuple[int, float, str]], root: int) -> list[int]:
    """``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in table.items():
        children.setdefault(parent, []).append(pid)
    stack, found = [root], []
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


def cpu_of(roots: dict[str, int], prefix: str = "") -> dict[str, float]:
    """CPU seconds so far of each named process tree (a server and its workers), of the
    PostgreSQL backends serving the databases named ``prefix``... (``postgresql``: a
    backend that ended within a window takes its CPU with it), and of every
    ``postgres`` process of the machine (``postgresql (machine)``: other users' too)."""
    table = _processes()
    totals = {
        name: sum(table[pid][1] for pid in _tree(table, root) if pid in table)
        for name, root in roots.items()
    }
    totals["postgresql (machine)"] = sum(
        cpu for _, cpu, name in table.values() if name == "postgres"
    )
    totals["postgresql"] = sum(
        cpu
        for pid, (_, cpu, name) in table.items()
        if name == "postgres" and prefix and _serves(pid, prefix)
    )
    return totals


def rss_of(roots: dict[str, int]) -> dict[str, tuple[float, int]]:
    """Resident memory (MiB) of each named process tree, and how many processes it has."""
    table = _processes()
    found = {}
    for name, root in roots.items():
        total, count = 0.0, 0
        for pid in _tree(table, root):
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
                    count += 1
        found[name] = (total, count)
    return found


def own_rss() -> float:
    """This process's resident memory (MiB), its children left out."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


# --- the light agents ----------------------------------------------------------------------


@dataclasses.dataclass
class Agents:
    """Every host's report and what the agents did."""

    url: str
    reports: dict[str, bytes]
    interval: float
    task_wait: float
    polls: int = 0
    reported: int = 0
    failures: int = 0
    # The digest the API answered each host's last report with: an agent names its
    # unchanged report by it (``PUT .../report/unchanged``) rather than send it again.
    digests: dict[str, str] = dataclasses.field(default_factory=dict)
    whole: bool = False  # every report sent whole (as agents before digests did)

    async def first_reports(self) -> None:
        names = list(self.reports)
        await asyncio.gather(
            *(
                self._report_all(names[i::CONCURRENT_FIRST_REPORTS])
                for i in range(CONCURRENT_FIRST_REPORTS)
            )
        )

    async def _report_all(self, names: list[str]) -> None:
        host, reader, writer = await connect(self.url)
        try:
            for name in names:
                await self._report(host, reader, writer, name)
        finally:
            writer.close()

    async def _report(
        self, host: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, name: str
    ) -> None:
        path = f"/v2/hosts/{name}/report"
        self.reported += 1
        if name in self.digests and not self.whole:
            named = json.dumps({"digest": self.digests[name]}).encode()
            status, _ = await exchange(reader, writer, host, ("PUT", f"{path}/unchanged", named))
            if status != 409:  # 409: the API knows another report, the whole one goes
                self.failures += status >= 300
                return
        status, body = await exchange(reader, writer, host, ("PUT", path, self.reports[name]))
        self.failures += status >= 300
        if status < 300:
            self.digests[name] = json.loads(body)["digest"]

    async def poll(self, name: str, until: float) -> None:
        """Poll for tasks as the agent does, until ``until`` (monotonic)."""
        host, reader, writer = await connect(self.url)
        path = f"/v2/hosts/{name}/tasks/claim?wait={self.task_wait:g}"
        try:
            while time.monotonic() < until:
                status, _ = await exchange(reader, writer, host, ("POST", path, b""))
                self.polls += 1
                self.failures += status >= 300
        finally:
            writer.close()

    async def report_periodically(self, until: float, senders: int = 16) -> None:
        """Every host once an interval, the hosts spread evenly over it; each report on
        a connection of its own, as an agent idle for an interval opens one."""
        names = list(self.reports)
        gap = self.interval / len(names)
        start = time.monotonic()

        async def sender(offset: int) -> None:
            for n in itertools.count(offset, senders):
                due = start + n * gap
                if due >= until:
                    return
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                await self._report_all([names[n % len(names)]])

        await asyncio.gather(*(sender(i) for i in range(senders)))


# --- what runs beside the load --------------------------------------------------------------


@dataclasses.dataclass
class Timed:
    """Each success's seconds, and the failures by what they were."""

    taken: list[float] = dataclasses.field(default_factory=list)
    failed: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)


def timed(seconds: float, action: Callable[[], None]) -> Timed:
    """``action`` back to back for ``seconds``. A failure is counted, not timed: a
    saturated API sheds load (503), and the window's other figures stand."""
    found = Timed()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.perf_counter()
        try:
            action()
        except urllib.error.HTTPError as error:
            found.failed[f"HTTP {error.code}"] += 1
            continue
        except OSError as error:  # refused, reset, timed out
            found.failed[type(error).__name__] += 1
            continue
        found.taken.append(time.perf_counter() - started)
    return found


def claim(url: str) -> None:
    consumer = str(uuid.uuid4())
    call(
        url,
        "POST",
        "/v2/claims",
        {"device_profile_name": QAT_PROFILE[0], "consumer_uuid": consumer},
    )
    call(url, "DELETE", f"/v2/claims/{consumer}")


def create_and_bind(url: str, pools: list[tuple[str, str]]) -> Callable[[], None]:
    turn = itertools.count()

    def once() -> None:
        hostname, rp = pools[next(turn) % len(pools)]
        made = call(
            url, "POST", "/v2/accelerator_requests", {"device_profile_name": QAT_PROFILE[0]}
        )["arqs"][0]
        instance = str(uuid.uuid4())
        patch = [
            {"path": "/hostname", "op": "add", "value": hostname},
            {"path": "/device_rp_uuid", "op": "add", "value": rp},
            {"path": "/instance_uuid", "op": "add", "value": instance},
        ]
        call(url, "PATCH", "/v2/accelerator_requests", {made["uuid"]: patch})
        call(url, "DELETE", f"/v2/accelerator_requests?instance={instance}")

    return once


def nova_query(placement: str) -> Callable[[], None]:
    def once() -> None:
        request = urllib.request.Request(f"{placement}/allocation_candidates?{GPU_QUERY}")
        request.add_header("OpenStack-API-Version", "placement 1.36")
        request.add_header("X-Auth-Token", "admin")
        with urllib.request.urlopen(request, timeout=120) as response:
            response.read()

    return once


def percentiles(found: Timed) -> str:
    failed = "".join(f", {n} failed ({why})" for why, n in sorted(found.failed.items()))
    if not found.taken:
        return f"-{failed}"
    ordered = sorted(found.taken)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"{statistics.median(ordered) * 1000:.0f}/{p95 * 1000:.0f} ms ({len(ordered)}){failed}"


# --- one region -----------------------------------------------------------------------------


def compute_nodes(placement: str, names: list[str]) -> None:
    """The compute node providers Nova would have made, one per host."""
    for name in names:
        request = urllib.request.Request(
            f"{placement}/resource_providers",
            data=json.dumps(
                {"name": name, "uuid": str(uuid.uuid5(uuid.NAMESPACE_DNS, name))}
            ).encode(),
            method="POST",
        )
        request.add_header("OpenStack-API-Version", "placement 1.20")
        request.add_header("X-Auth-Token", "admin")
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=120):
            pass


def reports_of(hosts: int) -> dict[str, bytes]:
    names = {
        kind: [f"{kind}-{i:05d}" for i in range(n, hosts, len(KINDS))]
        for n, kind in enumerate(KINDS)
    }
    found: dict[str, bytes] = {}
    for kind, inventory in KINDS.items():
        found.update(fake_reports(names[kind], inventory))
    return found


def wait_published(url: str, database: str, names: list[str], limit: float) -> float:
    """Seconds until every host is in Placement: its count read in the database every
    second (a listing of every host, every few seconds, cost the API a share of its CPU
    at 10,000 hosts), then the API asked once whether each is synced, errors included."""
    from sqlalchemy import create_engine, text

    engine, started = create_engine(database), time.monotonic()
    count = text("SELECT count(*) FROM hosts WHERE synced_generation >= generation")
    try:
        while True:
            with engine.connect() as conn:
                if conn.execute(count).scalar_one() >= len(names):
                    break
            if time.monotonic() - started > limit:
                raise RuntimeError(f"the hosts were not all in Placement after {limit:g} s")
            time.sleep(1)
    finally:
        engine.dispose()
    took = time.monotonic() - started
    hosts = call(url, "GET", "/v2/hosts")["hosts"]
    unsynced = [h["hostname"] for h in hosts if not h.get("placement_synced")]
    if unsynced:
        raise RuntimeError(f"{len(unsynced)} hosts not synced, e.g. {unsynced[:3]}")
    return took


def placement_calls(url: str) -> dict[str, float]:
    """The API's requests to Placement so far, by method and kind (its metrics)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{url}/metrics", timeout=60) as response:
        text = response.read().decode()
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "acceleron_placement_requests_total":
                key = f"{sample.labels['method']} {sample.labels['kind']}"
                counts[key] = counts.get(key, 0) + sample.value
    return counts


def placement_requests(url: str, per: float, since: dict[str, float] | None = None) -> str:
    """The API's requests to Placement (since ``since``) divided by ``per``, by method
    and kind."""
    counts = {k: v - (since or {}).get(k, 0.0) for k, v in placement_calls(url).items()}
    ranked = sorted(((k, v) for k, v in counts.items() if v), key=lambda kv: -kv[1])
    shown = ", ".join(f"{k} {v / per:.3g}" for k, v in ranked)
    return f"{sum(counts.values()) / per:.3g} ({shown})"


def database_sizes(urls: list[str]) -> dict[str, int]:
    from sqlalchemy import create_engine, text

    sizes = {}
    for label, url in zip(("acceleron", "placement"), urls, strict=True):
        engine = create_engine(url)
        with engine.connect() as conn:
            sizes[label] = int(
                conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one()
            )
        engine.dispose()
    return sizes


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def pace() -> float:
    """The CPU seconds this machine takes for a fixed pure-Python loop (the sum of 10**7
    squares, best of three): machines of one kind differ, so figures of runs on
    different machines compare only with this beside them."""
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        sum(i * i for i in range(10**7))
        best = min(best, time.process_time() - started)
    return best


def steady(
    agents: Agents,
    roots: dict[str, int],
    prefix: str,
    window: float,
    polls: bool,
    reports: bool,
    beside: Callable[[float], Any] | None = None,
) -> tuple[dict[str, float], Any]:
    """The processes' CPU seconds a second over one window with the agents doing what
    is asked (a window lasts until the last poll begun in it ends: up to a poll's wait
    past ``window``); what ``beside`` returned (run in a thread meanwhile)."""
    before, started = cpu_of(roots, prefix), time.monotonic()
    until = started + window

    async def main() -> Any:
        work = []
        if polls:
            work += [agents.poll(name, until) for name in agents.reports]
        if reports:
            work.append(agents.report_periodically(until))
        side = asyncio.to_thread(beside, window) if beside is not None else asyncio.sleep(window)
        results = await asyncio.gather(side, *work)
        return results[0]

    found = asyncio.run(main())
    after, elapsed = cpu_of(roots, prefix), time.monotonic() - started
    return {k: (after[k] - before[k]) / elapsed for k in after}, found


def run_size(args: argparse.Namespace, hosts: int) -> None:
    prefix = f"bench_region_{uuid.uuid4().hex[:8]}"
    work = Path(tempfile.mkdtemp(prefix="acceleron-region-"))
    log = work / "servers.log"
    reports = reports_of(hosts)
    names = list(reports)
    print(
        f"\n== {hosts} hosts ({', '.join(KINDS)} in turn), load {load_average()}, "
        f"pace {pace():.2f} s; logs {log}"
    )
    with ExitStack() as stack:
        urls = stack.enter_context(databases(args.postgresql, f"{prefix}_acc", f"{prefix}_plc"))
        urls[1] = urls[1].replace("+psycopg:", "+psycopg2:")  # what Placement runs on
        # Placement's schema, once, before its workers start (each would make it).
        subprocess.run(
            [sys.executable, "-c", "import scale; scale.placement_wsgi()"],
            cwd=Path(__file__).parent,
            env={**os.environ, PLACEMENT_DB_ENV: urls[1]},
            check=True,
        )
        placement = stack.enter_context(placement_server(urls[1], args.placement_workers, log))
        conf_file = work / "acceleron.conf"
        settings = config(work, urls[0], placement).replace("verify_interval = 0\n", "")
        conf_file.write_text(settings + f"sync_threads = {args.sync_threads}\n")
        from acceleron import conf as confmod
        from acceleron.db import migrate, session

        database = session.from_conf(confmod.load([], config_files=[str(conf_file)]))
        migrate.upgrade(database)
        database.dispose()
        url = stack.enter_context(api_server(conf_file, args.api_workers, log))
        roots = {"api": _server_pid(url), "placement": _server_pid(placement)}
        started = time.monotonic()
        compute_nodes(placement, names)
        print(f"compute node providers made: {time.monotonic() - started:.1f} s")
        agents = Agents(url, reports, args.interval, args.task_wait)
        before, started = cpu_of(roots, prefix), time.monotonic()
        asyncio.run(agents.first_reports())
        reported = time.monotonic() - started
        published = wait_published(url, urls[0], names, limit=600 + hosts)
        spent = {k: (v - before[k]) * 1000 / hosts for k, v in cpu_of(roots, prefix).items()}
        print(
            f"publication: first reports {reported:.1f} s, every host in Placement "
            f"{reported + published:.1f} s after the first; load {load_average()}\n"
            f"  CPU a host: {'; '.join(f'{k} {v:.1f} ms' for k, v in spent.items())}\n"
            f"  Placement requests a host: {placement_requests(url, hosts)}"
        )
        call(
            url, "POST", "/v2/device_profiles", [{"name": QAT_PROFILE[0], "groups": QAT_PROFILE[1]}]
        )
        pools = [
            (d["hostname"], d["rp_uuid"])
            for d in call(url, "GET", "/v2/deployables?kind=vf_pool")["deployables"]
            if d.get("rp_uuid")
        ]

        def side(seconds: float) -> dict[str, Timed]:
            share = seconds / 3
            return {
                "claim + release": timed(share, lambda: claim(url)),
                "create + bind": timed(share, create_and_bind(url, pools)),
                "Nova's query, 1 H200": timed(share, nova_query(placement)),
            }

        before_calls = placement_calls(url)
        alone, _ = steady(agents, roots, prefix, args.window, polls=False, reports=False)
        per_minute = hosts * args.window / args.interval  # a host an interval
        calls = placement_requests(url, per_minute, before_calls)
        polling, _ = steady(agents, roots, prefix, args.window, polls=True, reports=False)
        everything, _ = steady(agents, roots, prefix, args.window, polls=True, reports=True)
        agents.whole = True  # the baseline: every report sent whole
        whole, _ = steady(agents, roots, prefix, args.window, polls=True, reports=True)
        agents.whole = False
        _, beside = steady(agents, roots, prefix, args.window, True, True, side)
        print(
            f"steady state, {args.window:g} s windows; load {load_average()}; agents: "
            f"{agents.polls} polls, {agents.reported} reports, {agents.failures} failed"
        )
        rows = [
            ("the API's own periodic work", alone, None),
            ("task polls", polling, alone),
            ("reports (by digest)", everything, polling),
            ("reports (sent whole)", whole, polling),
        ]
        for label, window, base in rows:
            cells = []
            for proc in ("api", "placement", "postgresql", "postgresql (machine)"):
                rate = window[proc] - (base[proc] if base else 0.0)  # CPU s a second
                per_host = rate * args.interval / hosts * 1000
                cells.append(f"{proc} {per_host:7.3f} ms ({rate * 100:5.1f} % of a core)")
            print(f"  {label:<28} per host per interval: " + "; ".join(cells))
        print(f"  the API's own periodic work: Placement calls a host an interval {calls}")
        for label, taken in beside.items():
            print(f"  beside it: {label:<24} p50/p95 {percentiles(taken)}")
        memory = rss_of(roots)
        print(
            "memory (resident): "
            + ", ".join(f"{k} {mib:.0f} MiB ({n} processes)" for k, (mib, n) in memory.items())
            + f", agents (this process alone) {own_rss():.0f} MiB"
        )
        sizes = database_sizes(urls)
        print(
            "databases: "
            + ", ".join(
                f"{k} {v / 2**20:.1f} MiB ({v / hosts / 1024:.1f} KiB a host)"
                for k, v in sizes.items()
            )
        )


def _server_pid(url: str) -> int:
    """The pid of the process listening on ``url``'s port (the server's master)."""
    port = int(url.rsplit(":", 1)[1])
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == port and fields[3] == "0A":  # LISTEN
            inodes.add(fields[9])
    table = _processes()
    for pid in table:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                root = pid
                while table.get(table[root][0], (0, 0.0, ""))[2] == table[root][2]:
                    root = table[root][0]  # the master, above its workers
                return root
    raise RuntimeError(f"nothing listens on {url}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="100,1000", help="host counts, e.g. 100,1000")
    parser.add_argument("--interval", type=float, default=60.0, help="report interval (s)")
    parser.add_argument("--task-wait", type=float, default=45.0, help="a poll's wait (s)")
    parser.add_argument("--window", type=float, default=60.0, help="each steady window (s)")
    parser.add_argument("--api-workers", type=int, default=2)
    parser.add_argument("--placement-workers", type=int, default=2)
    parser.add_argument(
        "--sync-threads", type=int, default=4, help="[placement] sync_threads (its default: 4)"
    )
    parser.add_argument(
        "--postgresql", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    )
    args = parser.parse_args()
    for hosts in (int(n) for n in args.hosts.split(",")):
        run_size(args, hosts)


if __name__ == "__main__":
    main()
