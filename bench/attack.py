"""Can clients stall the API? Stalled uploads, then a soak of slow clients, on a real
database server, with the latency of ``GET /v2/device_profiles`` measured throughout.

Starts ``acceleron api`` (noauth, Placement disabled, the local bitstream store) on a
fresh database of the PostgreSQL or MariaDB server at 127.0.0.1, and runs three phases,
each ``--seconds`` long, while 4 clients list device profiles and an agent-like client
(service role) reports a host:

1. **baseline**: nothing else;
2. **stalled uploads**: ``--stalled`` (40) ``PUT /v2/bitstreams/{id}/data`` of one project
   announce 1 MiB, send 1 KiB and hold the connection;
3. **slow clients**: stalled uploads of ``--stalled`` projects (one each), as many slow
   JSON bodies (one byte a second) and slow downloads (a reader that takes one byte a
   second), all at once.

For each phase it prints the listing's and the reports' p50, p99 and max (a request that
got no answer within ``--timeout`` counts as that long), how many timed out, and what the
attackers' connections got (a status, or still open).

    .venv/bin/python bench/attack.py --database postgresql [--seconds 10] [--stalled 40]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from load import body, call, exchange, free_port, wait_ready

SERVERS = {
    "postgresql": "postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
    "mysql": "mysql+pymysql://root@127.0.0.1:3306/",
}
ATTACKER = {"X-Roles": "member", "X-Project-Id": "attacker"}
AGENT = {"X-Roles": "service", "X-Project-Id": "services"}
HOST = "bench-host"


@contextlib.contextmanager
def database(backend: str) -> Iterator[str]:
    """A fresh database on the shared server; its URL."""
    server = make_url(SERVERS[backend])
    name = f"acceleron_attack_{os.getpid()}"
    engine = create_engine(server, isolation_level="AUTOCOMMIT")
    extra = " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin" if backend == "mysql" else ""
    with engine.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}{extra}"))
    url = server.set(database=name)
    if backend == "mysql":
        url = url.update_query_dict({"charset": "utf8mb4"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        force = " WITH (FORCE)" if backend == "postgresql" else ""
        with engine.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name}{force}"))
        engine.dispose()


@contextlib.contextmanager
def api_server(url: str, options: dict[str, str]) -> Iterator[str]:
    """``acceleron api`` on that database, as in a cloud (one worker), with ``options``
    (``OS_<GROUP>__<OPTION>``) set; its base URL."""
    acceleron = Path(sys.executable).parent / "acceleron"
    port = free_port()
    with tempfile.TemporaryDirectory() as state:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
        env.update(OS_DATABASE__CONNECTION=url, OS_DEFAULT__STATE_PATH=state, **options)
        subprocess.run(
            [str(acceleron), "db", "upgrade"], env=env, check=True, stdout=subprocess.DEVNULL
        )
        log = open(Path(state) / "api.log", "w")  # noqa: SIM115
        process = subprocess.Popen(
            [str(acceleron), "api", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            wait_ready(base, process)
            yield base
        finally:
            process.terminate()
            process.wait(timeout=30)
            log.close()


# --- the well-behaved clients, measured ----------------------------------------------------


@dataclasses.dataclass
class Timings:
    latencies: list[float] = dataclasses.field(default_factory=list)
    statuses: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)

    def line(self, name: str) -> str:
        if not self.latencies:
            return f"  {name:<22} no requests"
        ordered = sorted(self.latencies)

        def ms(p: float) -> str:
            return f"{ordered[min(len(ordered) - 1, int(len(ordered) * p))] * 1000:7.0f} ms"

        return (
            f"  {name:<22} {len(ordered):5d} requests  p50 {ms(0.5)}  p99 {ms(0.99)}  "
            f"max {ordered[-1] * 1000:7.0f} ms  {dict(self.statuses)}"
        )


async def measured(
    base: str,
    request: tuple[str, str, bytes],
    headers: dict[str, str],
    until: float,
    timeout: float,
    timings: Timings,
) -> None:
    """One client repeating ``request`` until ``until``, each answer timed."""
    host, port = base.removeprefix("http://").split(":")
    method, path, data = request
    while time.perf_counter() < until:
        started = time.perf_counter()
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, int(port)), timeout
            )
            try:
                status, _ = await asyncio.wait_for(
                    exchange(reader, writer, host, (method, path, data), headers), timeout
                )
                timings.statuses[str(status)] += 1
            finally:
                writer.close()
        except (TimeoutError, OSError, asyncio.IncompleteReadError) as error:
            timings.statuses[type(error).__name__] += 1
        timings.latencies.append(time.perf_counter() - started)
        await asyncio.sleep(0.01)


# --- the attackers -------------------------------------------------------------------------


async def stalled_upload(base: str, bitstream: str, project: str, outcome: Timings) -> None:
    """Announce 1 MiB, send 1 KiB, hold; record what the server answered, if anything."""
    host, port = base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    head = (
        f"PUT /v2/bitstreams/{bitstream}/data HTTP/1.1\r\nHost: {host}\r\n"
        f"OpenStack-API-Version: accelerator latest\r\nX-Roles: member\r\n"
        f"X-Project-Id: {project}\r\nContent-Type: application/octet-stream\r\n"
        f"Content-Length: {1 << 20}\r\n\r\n"
    )
    writer.write(head.encode() + b"\0" * 1024)
    await writer.drain()
    await _await_answer(reader, writer, outcome)


async def slow_json(base: str, outcome: Timings) -> None:
    """A device profile sent one byte a second."""
    host, port = base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    data = body([{"name": f"slow-{uuid.uuid4().hex[:8]}", "groups": [{"resources:FPGA": "1"}]}])
    writer.write(
        (
            f"POST /v2/device_profiles HTTP/1.1\r\nHost: {host}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
        ).encode()
    )
    await writer.drain()

    async def trickle() -> None:
        for byte in data:
            await asyncio.sleep(1)
            writer.write(bytes([byte]))
            await writer.drain()

    sender = asyncio.create_task(trickle())
    try:
        await _await_answer(reader, writer, outcome)
    finally:
        sender.cancel()


async def slow_download(base: str, bitstream: str, outcome: Timings) -> None:
    """A download read one byte a second (the server's buffers fill, then it must wait)."""
    host, port = base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port), limit=1024)
    writer.write(
        (
            f"GET /v2/bitstreams/{bitstream}/data HTTP/1.1\r\nHost: {host}\r\n"
            f"OpenStack-API-Version: accelerator latest\r\n\r\n"
        ).encode()
    )
    await writer.drain()
    try:
        first = await reader.readline()
        outcome.statuses[first.split()[1].decode() if first else "closed"] += 1
        while await reader.read(1):
            await asyncio.sleep(1)
        outcome.statuses["download cut"] += 1
    except (OSError, asyncio.IncompleteReadError):
        outcome.statuses["download cut"] += 1
    finally:
        writer.close()


async def _await_answer(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, outcome: Timings
) -> None:
    try:
        line = await reader.readline()
        outcome.statuses[line.split()[1].decode() if line else "closed"] += 1
    except OSError as error:
        outcome.statuses[type(error).__name__] += 1
    finally:
        writer.close()


# --- the run -------------------------------------------------------------------------------


def queued_bitstreams(base: str, projects: list[str]) -> list[str]:
    made = []
    for project in projects:
        headers = {"X-Roles": "member", "X-Project-Id": project}
        made.append(call_as(base, "POST", "/v2/bitstreams", {"name": "x.gbs"}, headers)["uuid"])
    return made


def call_as(base: str, method: str, path: str, data: Any, headers: dict[str, str]) -> Any:
    import urllib.request

    request = urllib.request.Request(base + path, data=body(data), method=method)
    for name, value in {
        "OpenStack-API-Version": "accelerator latest",
        "Content-Type": "application/json",
        **headers,
    }.items():
        request.add_header(name, value)
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read() or b"null")


def host_report() -> bytes:
    from acceleron import conf as confmod
    from acceleron.drivers.fake import FakeDriver
    from acceleron.report import HostReport, to_bytes

    conf = confmod.load([], config_files=[], overrides={"DEFAULT": {"host": HOST}})
    return to_bytes(HostReport(HOST, "bench", tuple(FakeDriver(conf, Path("/")).discover())))


async def phase(base: str, name: str, seconds: float, timeout: float, attackers: list[Any]) -> None:
    """Run the attackers, then measure the well-behaved clients for ``seconds``."""
    outcome = Timings()
    tasks = [asyncio.create_task(a(outcome)) for a in attackers]
    await asyncio.sleep(2 if attackers else 0)  # let them take hold
    until = time.perf_counter() + seconds
    listing, reports = Timings(), Timings()
    lister = ("GET", "/v2/device_profiles", b"")
    report = ("PUT", f"/v2/hosts/{HOST}/report", host_report())
    await asyncio.gather(
        *(measured(base, lister, {}, until, timeout, listing) for _ in range(4)),
        measured(base, report, AGENT, until, timeout, reports),
    )
    print(f"{name}:")
    print(listing.line("GET /v2/device_profiles"))
    print(reports.line("PUT host report (agent)"))
    if attackers:
        await asyncio.sleep(0.1)
        done = sum(outcome.statuses.values())
        print(
            f"  attackers: {len(attackers)}, answered {dict(outcome.statuses)}, "
            f"{len(attackers) - done} still open"
        )
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=sorted(SERVERS), default="postgresql")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--stalled", type=int, default=40)
    parser.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        help="seconds a measured request may take before it counts as lost",
    )
    parser.add_argument(
        "--client-timeout", type=float, help="the server's [api] client_timeout (its default)"
    )
    args = parser.parse_args()
    options = {}
    if args.client_timeout is not None:
        options["OS_API__CLIENT_TIMEOUT"] = str(args.client_timeout)
    with database(args.database) as url, api_server(url, options) as base:
        print(f"acceleron api on {args.database} at {base} {options or ''}")
        for n in range(20):
            call(
                base,
                "POST",
                "/v2/device_profiles",
                [{"name": f"dp-{n}", "groups": [{"resources:FPGA": "1"}]}],
            )
        one_project = queued_bitstreams(base, ["attacker"] * args.stalled)
        many = queued_bitstreams(base, [f"p{n}" for n in range(args.stalled)])
        download = call(
            base, "POST", "/v2/bitstreams", {"name": "big.gbs", "visibility": "public"}
        )["uuid"]
        call(base, "PUT", f"/v2/bitstreams/{download}/data", raw=b"\x5a" * (32 << 20))

        async def run() -> None:
            await phase(base, "baseline", args.seconds, args.timeout, [])
            await phase(
                base,
                f"{args.stalled} stalled uploads of one project",
                args.seconds,
                args.timeout,
                [lambda o, b=b: stalled_upload(base, b, "attacker", o) for b in one_project],
            )
            slow: list[Any] = [
                *(lambda o, b=b, n=n: stalled_upload(base, b, f"p{n}", o)
                  for n, b in enumerate(many)),
                *(lambda o: slow_json(base, o) for _ in range(args.stalled)),
                *(lambda o: slow_download(base, download, o) for _ in range(args.stalled)),
            ]  # fmt: skip
            await phase(
                base,
                f"slow clients ({len(slow)}: stalled uploads of "
                f"{args.stalled} projects, slow JSON bodies, slow downloads)",
                args.seconds,
                args.timeout,
                slow,
            )

        asyncio.run(run())


if __name__ == "__main__":
    main()
