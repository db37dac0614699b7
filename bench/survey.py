"""What a server-side claim reads from Acceleron's own records before it asks Placement
(``claim_allocation.survey``), timed against the number of reported hosts.

Reports N hosts through the service, each with ``claim.INVENTORY`` (4 Intel FPGA cards
of two regions, region0 holding a function, and 4 QAT cards of 4 VFs), into a fresh
database, gives each host a compute node provider uuid (as publishing does; Placement
itself is not needed here), then calls the survey of three profiles back to back:

* one QAT VF (the hosts with a device of the class);
* one FPGA region naming the function region0 holds (its holders and their traits);
* one FPGA region naming a function no region holds.

    .venv/bin/python bench/survey.py [--hosts 100,1000] [--calls 200]
        [--database sqlite] [--baseline REV]

``--database`` takes ``sqlite`` (a file in a temporary directory) or a server URL such
as ``postgresql+psycopg://postgres@127.0.0.1:5432/postgres`` or
``mysql+pymysql://root@127.0.0.1:3306/test``: a database of its own is created there
and dropped at the end. With ``--baseline REV`` the survey of commit ``REV`` runs too, on
a database of its own made by that commit's migrations and service, and is printed
beside this tree's. Each runs in a process of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from oslo_config import cfg
from sqlalchemy import create_engine, text, update
from sqlalchemy.engine import make_url

from acceleron import conf as confmod
from acceleron.db import migrate
from acceleron.db.session import Database
from acceleron.drivers.fake import FakeDriver
from acceleron.report import HostReport
from acceleron.service import claim_allocation, inventory
from claim import INVENTORY
from load import checkout

HERE = Path(__file__).parent
FUNCTION = "d8424dc4a4a3c413f89e433683f9040b"  # what region0 of every card holds
ABSENT = "0123456789abcdef0123456789abcdef"
PROFILES = {
    "one QAT VF": ([{"resources:CUSTOM_ACCELERATOR_QAT": "1"}], None),
    "FPGA region, function held": ([{"resources:CUSTOM_ACCELERATOR_FPGA": "1"}], FUNCTION),
    "FPGA region, function held by none": ([{"resources:CUSTOM_ACCELERATOR_FPGA": "1"}], ABSENT),
}


@contextmanager
def database(where: str) -> Iterator[str]:
    """A fresh, empty database's URL: a SQLite file, or one created on a server."""
    if where == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{tmp}/acceleron.sqlite"
        return
    name = f"bench_survey_{uuid.uuid4().hex[:8]}"
    server = create_engine(where, isolation_level="AUTOCOMMIT")
    with server.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    try:
        yield make_url(where).set(database=name).render_as_string(hide_password=False)
    finally:
        with server.connect() as conn:
            conn.execute(text(f"DROP DATABASE {name}"))
        server.dispose()


def fill(url: str, hosts: int) -> float:
    """Migrate the database and report the hosts into it; the seconds it took."""
    started = time.perf_counter()
    db = Database(url)
    migrate.upgrade(db)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "inventory.yaml"
        path.write_text(INVENTORY)
        conf: cfg.ConfigOpts = confmod.load(
            [], config_files=[], overrides={"DEFAULT": {"state_path": tmp}}
        )
        conf.set_override("inventory_file", str(path), group="fake")
        for n in range(hosts):
            host = f"bench-{n:04d}"
            conf.set_override("host", host)
            devices = tuple(FakeDriver(conf, Path("/")).discover())
            inventory.reconcile(db, HostReport(host, "1", devices))
            with db.writer() as conn:
                conn.execute(
                    update(claim_allocation.HOSTS)
                    .where(claim_allocation.HOSTS.c.hostname == host)
                    .values(rp_uuid=str(uuid.uuid4()))
                )
    db.dispose()
    return time.perf_counter() - started


def measure(url: str, calls: int) -> dict[str, list[float]]:
    """Each profile's survey, ``calls`` times: milliseconds each (this process's code)."""
    db = Database(url)
    found: dict[str, list[float]] = {}
    for title, (groups, function) in PROFILES.items():
        wanted = {"device_profile_0": frozenset({function})} if function else {}
        claim_allocation.survey(db, groups, wanted)  # warm: statements compiled, connection made
        times = []
        for _ in range(calls):
            started = time.perf_counter()
            claim_allocation.survey(db, groups, wanted)
            times.append((time.perf_counter() - started) * 1000)
        found[title] = times
    db.dispose()
    return found


def run_in(source: Path | None, where: str, hosts: int, calls: int) -> dict[str, Any]:
    """In a process of its own, on the code of ``source`` (a ``src``; None: this tree's)
    and a fresh database: ``fill``, then ``measure``."""
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(source), str(HERE)])
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--measure",
            where,
            "--hosts",
            str(hosts),
            "--calls",
            str(calls),
        ],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="100,1000")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--database", default="sqlite")
    parser.add_argument("--baseline", default="none")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        with database(args.measure) as url:
            took = fill(url, int(args.hosts))
            print(json.dumps({"filled": took, "times": measure(url, args.calls)}))
        return
    with checkout(args.baseline) if args.baseline != "none" else _nothing() as source:
        for hosts in (int(n) for n in args.hosts.split(",")):
            runs = {"now": run_in(None, args.database, hosts, args.calls)}
            if source is not None:
                runs[args.baseline[:7]] = run_in(source, args.database, hosts, args.calls)
            print(
                f"\n{hosts} hosts x 8 devices on {args.database.split(':')[0]} (reported "
                f"in {runs['now']['filled']:.0f} s); survey, {args.calls} calls, load "
                f"average {os.getloadavg()[0]:.1f}:"
            )
            for title in PROFILES:
                figures = "   ".join(
                    f"{name}: p50 {statistics.median(t[title]):6.2f} ms"
                    f" p99 {sorted(t[title])[int(len(t[title]) * 0.99) - 1]:6.2f} ms"
                    for name, t in ((n, r["times"]) for n, r in runs.items())
                )
                print(f"    {title:<36} {figures}")


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


if __name__ == "__main__":
    main()
