"""Claims and binds per second against API and Placement worker processes, on PostgreSQL.

The cloud layout on one machine: a standalone Placement (its WSGI application served
by ``uvicorn --workers P``) and ``acceleron api --workers A``, each on a PostgreSQL
database of its own (created here, with a unique prefix, and dropped at the end).
For each number of hosts the script

1. reports the hosts (the fake driver, ``INVENTORY``: one FPGA card of two regions,
   region0 holding a function, and one QAT card of 32 VFs) through the service, as
   the API's report handler does, and publishes them to Placement with several syncers
   at once (compute node providers created as the all-in-one does);
2. for each number of Placement workers and of API workers, starts those servers and
   runs, with ``--clients`` connections each:

   * **claims**: ``POST /v2/claims`` (2.12) for one QAT VF, each followed by its
     release (``DELETE /v2/claims/{consumer}``); claims/s counts whole cycles;
   * **create + bind**: Nova's two calls, ``POST /v2/accelerator_requests`` then
     ``PATCH`` binding the request to a host's QAT VF pool (spread over every host);
     the requests are deleted afterwards, not timed.

The machine's load (``uptime``) is printed beside the figures: on a small shared
machine the clients, both servers and PostgreSQL share its cores.

    .venv/bin/python bench/scale.py [--hosts 100,1000] [--api-workers 1,2]
        [--placement-workers 1,2] [--clients 8] [--seconds 5]
        [--postgresql postgresql+psycopg://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from load import Result, binder, body, call, connect, exchange, free_port, wait_ready

INVENTORY = """
devices:
  - type: FPGA
    count: 1
    product_id: "09c4"
    model: PAC_ARRIA10
    regions:
      - {region_type: ce48969398f05f33946d560708be108a, accelerators: 2,
         functions: [d8424dc4a4a3c413f89e433683f9040b]}
      - {region_type: 9926ab6d6c925a68aabca7d84c545738, accelerators: 1}
  - {type: QAT, count: 1, product_id: "37c8", model: C62X, vfs: 32}
"""
QAT = "scale-qat"
PROFILES = {QAT: [{"resources:CUSTOM_ACCELERATOR_QAT": "1"}]}
PLACEMENT_DB_ENV = "ACCELERON_BENCH_PLACEMENT_DB"
SYNCERS = 8  # hosts published to Placement at once


def placement_wsgi() -> Any:
    """The standalone Placement's WSGI application (uvicorn's factory, in each worker):
    Placement on the database named by ``ACCELERON_BENCH_PLACEMENT_DB``, with Placement's
    own defaults (a cloud's Placement; oslo.config's ``OS_<GROUP>__<OPTION>`` variables
    may set its options). Its callers have the roles Acceleron's service user has in a
    cloud (docs/deploy-with-nova.md: ``service`` among them, which Placement's reshaper
    asks for): Placement's noauth2 gives the admin token the ``admin`` role alone."""
    from acceleron.placement import inprocess

    app = inprocess.placement_app(os.environ[PLACEMENT_DB_ENV], inprocess.PLACEMENT_DEFAULTS)
    roles = inprocess.ROLES["X-Roles"]

    def as_service_user(environ: dict[str, Any], start_response: Any) -> Any:
        environ.setdefault("HTTP_X_ROLES", roles)
        return app(environ, start_response)

    return as_service_user


# --- PostgreSQL -------------------------------------------------------------------------


@contextmanager
def databases(server: str, *names: str) -> Iterator[list[str]]:
    """Fresh databases ``names`` on ``server`` (the URL of one of its databases); their
    URLs; dropped afterwards."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    urls = [
        make_url(server).set(database=name).render_as_string(hide_password=False) for name in names
    ]
    try:
        with admin.connect() as conn:
            for name in names:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
                conn.execute(text(f'CREATE DATABASE "{name}"'))
        yield urls
    finally:
        with admin.connect() as conn:
            for name in names:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


# --- servers ------------------------------------------------------------------------------


@contextmanager
def process(argv: list[str], url: str, log: Path, env: dict[str, str]) -> Iterator[str]:
    """A server process, ready at ``url``; stopped (SIGTERM, then SIGKILL) afterwards."""
    with open(log, "a") as out:
        server = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            wait_ready(url, server, timeout=120)
            yield url
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def placement_server(connection: str, workers: int, log: Path) -> Any:
    port = free_port()
    env = {**os.environ, PLACEMENT_DB_ENV: connection}
    argv = [str(Path(sys.executable).parent / "uvicorn"), "--factory", "scale:placement_wsgi",
            "--interface", "wsgi", "--app-dir", str(Path(__file__).parent), "--host",
            "127.0.0.1", "--port", str(port), "--workers", str(workers), "--no-access-log",
            "--log-level", "warning"]  # fmt: skip
    return process(argv, f"http://127.0.0.1:{port}", log, env)


def config(state: Path, connection: str, placement: str) -> str:
    return f"""[DEFAULT]
state_path = {state}
auth_strategy = noauth
[database]
connection = {connection}
[placement]
mode = remote
auth_type = admin_token
endpoint = {placement}
token = admin
verify_interval = 0
"""


def api_server(conf_file: Path, workers: int, log: Path) -> Any:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    argv = [str(Path(sys.executable).parent / "acceleron"), "--config-file", str(conf_file),
            "api", "--host", "127.0.0.1", "--port", str(port),
            "--workers", str(workers)]  # fmt: skip
    return process(argv, f"http://127.0.0.1:{port}", log, env)


# --- filling ------------------------------------------------------------------------------


def fill(conf_file: Path, hostnames: list[str]) -> tuple[float, float]:
    """Report the hosts (the service's reconcile, as the report handler runs it) and
    publish them to Placement, ``SYNCERS`` at a time; the seconds each took."""
    from acceleron import conf as confmod
    from acceleron.db import session as db_session
    from acceleron.drivers.fake import FakeDriver
    from acceleron.report import HostReport
    from acceleron.service import device_profiles, inventory
    from acceleron.service.placement import PlacementService, options_from_conf

    conf = confmod.load([], config_files=[str(conf_file)])
    db = db_session.from_conf(conf)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        inventory_file = Path(tmp) / "inventory.yaml"
        inventory_file.write_text(INVENTORY)
        conf.set_override("inventory_file", str(inventory_file), "fake")
        for name in hostnames:
            conf.set_override("host", name)
            devices = tuple(FakeDriver(conf, Path("/")).discover())
            inventory.reconcile(db, HostReport(name, "bench", devices))
    reported = time.monotonic() - started
    service = PlacementService(conf, db)

    def publish(names: list[str]) -> None:
        from acceleron.service.publish import Syncer

        syncer = Syncer(db, service.client, options_from_conf(conf), create_compute_nodes=True)
        for name in names:
            errors = syncer.sync_host(name).errors
            if errors:
                raise RuntimeError(f"publishing {name}: {errors}")

    started = time.monotonic()
    with ThreadPoolExecutor(SYNCERS) as pool:
        list(pool.map(publish, [hostnames[i::SYNCERS] for i in range(SYNCERS)]))
    for name, groups in PROFILES.items():
        device_profiles.create(db, name=name, groups=groups)
    db.dispose()
    return reported, time.monotonic() - started


# --- load -----------------------------------------------------------------------------------


async def _claimer(url: str, deadline: float, result: Result) -> None:
    host, reader, writer = await connect(url)
    try:
        while time.perf_counter() < deadline:
            consumer = str(uuid.uuid4())
            started = time.perf_counter()
            made = (
                "POST",
                "/v2/claims",
                body({"device_profile_name": QAT, "consumer_uuid": consumer}),
            )
            status, _ = await exchange(reader, writer, host, made)
            result.latencies.append(time.perf_counter() - started)
            result.statuses[status] += 1
            if status == 201:
                result.requests += 1
                await exchange(reader, writer, host, ("DELETE", f"/v2/claims/{consumer}", b""))
    finally:
        writer.close()


async def _deleter(url: str, instances: list[str]) -> None:
    host, reader, writer = await connect(url)
    try:
        while instances:
            instance = instances.pop()
            path = f"/v2/accelerator_requests?instance={instance}"
            await exchange(reader, writer, host, ("DELETE", path, b""))
    finally:
        writer.close()


def drive(
    name: str, url: str, clients: int, seconds: float, pools: list[tuple[str, str]]
) -> Result:
    result = Result(name, 0, 0.0, [], collections.Counter())
    instances: list[str] = []

    async def main() -> None:
        deadline = time.perf_counter() + seconds
        if name == "claims":
            await asyncio.gather(*(_claimer(url, deadline, result) for _ in range(clients)))
        else:
            await asyncio.gather(
                *(
                    binder(url, QAT, pools, i, 7, deadline, result, instances)
                    for i in range(clients)
                )
            )

    started = time.perf_counter()
    asyncio.run(main())
    result.seconds = time.perf_counter() - started

    async def clean() -> None:
        await asyncio.gather(*(_deleter(url, instances) for _ in range(clients)))

    asyncio.run(clean())
    return result


def vf_pools(url: str) -> list[tuple[str, str]]:
    """(hostname, provider) of every QAT VF pool."""
    found = call(url, "GET", "/v2/deployables?kind=vf_pool&limit=100000")["deployables"]
    return [(d["hostname"], d["rp_uuid"]) for d in found if d.get("rp_uuid")]


def load_average() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="100,1000", help="host counts, e.g. 100,1000")
    parser.add_argument("--api-workers", default="1,2", help="API worker counts, e.g. 1,2")
    parser.add_argument(
        "--placement-workers", default="1,2", help="Placement worker counts, e.g. 1,2"
    )
    parser.add_argument("--clients", type=int, default=8, help="connections per run")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per run")
    parser.add_argument(
        "--postgresql", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    )
    parser.add_argument("--log", help="where the servers log (default: a temporary file)")
    args = parser.parse_args()
    counts = [int(n) for n in args.hosts.split(",")]
    api_workers = [int(n) for n in args.api_workers.split(",")]
    placement_workers = [int(n) for n in args.placement_workers.split(",")]
    rows = []
    for hosts in counts:
        rows += run_size(args, hosts, api_workers, placement_workers)
    print(
        f"\n{args.clients} clients, {args.seconds:g} s per run; claims: POST /v2/claims "
        f"(one QAT VF) + its release; binds: POST + PATCH (Nova's two calls)"
    )
    print(
        f"{'hosts':>6} {'placement':>9} {'api':>4} {'claims/s':>9} {'claim p50':>10} "
        f"{'binds/s':>8} {'bind p50':>9} {'load':>5}"
    )
    for row in rows:
        print(row)


def run_size(
    args: argparse.Namespace, hosts: int, api_workers: list[int], placement_workers: list[int]
) -> list[str]:
    from acceleron.db import migrate
    from acceleron.db.session import Database

    prefix = f"bench_scale_{uuid.uuid4().hex[:8]}"
    rows = []
    names = (f"{prefix}_placement", f"{prefix}_acceleron")
    with (
        tempfile.TemporaryDirectory(prefix="acceleron-scale-") as tmp,
        databases(args.postgresql, *names) as urls,
    ):
        state, log = Path(tmp), Path(args.log or Path(tmp) / "servers.log")
        acceleron_db = urls[1]
        placement_db = urls[0].replace("+psycopg:", "+psycopg2:")  # what Placement runs on
        db = Database(acceleron_db)
        migrate.upgrade(db)
        db.dispose()
        # Placement's schema, once, before its workers start (each would make it).
        env = {**os.environ, PLACEMENT_DB_ENV: placement_db}
        subprocess.run(
            [sys.executable, "-c", "import scale; scale.placement_wsgi()"],
            cwd=Path(__file__).parent,
            env=env,
            check=True,
        )
        hostnames = [f"scale-{n:04d}" for n in range(hosts)]
        with placement_server(placement_db, max(placement_workers), log) as placement:
            conf_file = state / "acceleron.conf"
            conf_file.write_text(config(state, acceleron_db, placement))
            reported, published = fill(conf_file, hostnames)
        print(
            f"{hosts} hosts reported in {reported:.1f} s, published to Placement in "
            f"{published:.1f} s (load {load_average()})",
            flush=True,
        )
        for p_workers in placement_workers:
            with placement_server(placement_db, p_workers, log) as placement:
                conf_file.write_text(config(state, acceleron_db, placement))
                for a_workers in api_workers:
                    with api_server(conf_file, a_workers, log) as api:
                        pools = vf_pools(api)
                        claims = drive("claims", api, args.clients, args.seconds, pools)
                        binds = drive("binds", api, args.clients, args.seconds, pools)
                    bad = {s: n for r in (claims, binds) for s, n in r.statuses.items() if s >= 400}
                    row = (
                        f"{hosts:>6} {p_workers:>9} {a_workers:>4} {claims.rate:>9.1f} "
                        f"{claims.percentile(50):>8.1f}ms {binds.rate:>8.1f} "
                        f"{binds.percentile(50):>7.1f}ms {load_average():>5}"
                        + (f"   failures by status: {bad}" if bad else "")
                    )
                    print(row, flush=True)
                    rows.append(row)
    return rows


if __name__ == "__main__":
    main()
