"""The device profile API beside upstream Cyborg 17's, under wrk, both on fresh databases.

Each run starts both services afresh and drives each with ``wrk`` (16 connections, 2
threads, the same Lua scripts for both):

* **show**: ``GET /v2/device_profiles/{uuid}``, one of 200 profiles at random;
* **list**: ``GET /v2/device_profiles`` holding 200 profiles;
* **create**: ``POST /v2/device_profiles``, one new profile a request (unique names).

Acceleron runs as ``make run`` does (``acceleron all-in-one``: SQLite, noauth, one
process, the embedded Placement). Upstream Cyborg 17 (the release the reference cloud
installs, ``.cloud/venvs/cyborg``) runs its WSGI application as the reference cloud
does (``cloud/wsgi_runner.py``: a thread per request; its ``cyborg-api`` command refuses
oslo.service's threading back end) on a fresh MariaDB database made by ``cyborg-dbsync``
(its migrations do not run on SQLite), with no authentication middleware (the caller's
roles come from ``X-Roles``, as behind Keystone's). Beside each rate: the server's CPU
time per request (user + system of its process, from ``/proc``), which moves far less
between runs than a rate on a shared machine; under it, what Cyborg's MariaDB server spent
a request besides (Acceleron's SQLite is in its own process, so in its figure).

Needs ``wrk`` (Debian: ``apt-get install wrk``), MariaDB at 127.0.0.1 (root, no
password) and Cyborg's virtualenv (``python -m cloud up --cyborg`` or the adoption
tests make it).

    .venv/bin/python bench/profile_wrk.py [--runs 2] [--seconds 10] [--connections 16]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from load import GROUPS, Url, all_in_one, call, cpu_seconds, free_port, wait_ready, wait_synced
from scale import placement_server

ROOT = Path(__file__).resolve().parent.parent
CYBORG = ROOT / ".cloud" / "venvs" / "cyborg"
MARIADB = "mysql+pymysql://root@127.0.0.1:3306"
PATH = "/v2/device_profiles"
PROFILES = 200
# Both services read the caller from these (Acceleron's noauth, Cyborg without authtoken).
HEADERS = {
    "Content-Type": "application/json",
    "OpenStack-API-Version": "accelerator latest",
    "X-Roles": "admin,member,reader",
    "X-Project-Id": "bench",
    "X-User-Id": "bench",
}
PASTE = """[pipeline:main]
pipeline = cors http_proxy_to_wsgi request_id api_v2
[app:api_v2]
paste.app_factory = cyborg.api.app:app_factory
[filter:request_id]
paste.filter_factory = oslo_middleware:RequestId.factory
[filter:cors]
paste.filter_factory = oslo_middleware.cors:filter_factory
oslo_config_project = cyborg
[filter:http_proxy_to_wsgi]
paste.filter_factory = oslo_middleware.http_proxy_to_wsgi:HTTPProxyToWSGI.factory
"""
LUA_HEAD = "\n".join(f'wrk.headers["{k}"] = "{v}"' for k, v in HEADERS.items())
SHOW = (
    LUA_HEAD
    + """
local paths = {%s}
request = function() return wrk.format("GET", paths[math.random(#paths)]) end
"""
)
LIST = LUA_HEAD + '\nrequest = function() return wrk.format("GET", "%s") end\n'
CREATE = (
    LUA_HEAD
    + """
local threads = 0
function setup(thread) thread:set("id", threads); threads = threads + 1 end
local n = 0
local groups = '%s'
request = function()
  n = n + 1
  local body = '[{"name": "wrk-' .. id .. '-' .. n .. '", "groups": ' .. groups .. '}]'
  return wrk.format("POST", "%s", nil, body)
end
"""
)


class Service(Url):
    """A service's URL, its API's process and its other processes (Cyborg's conductor);
    ``database``: its database server's processes (Cyborg's MariaDB), counted apart."""

    others: tuple[int, ...] = ()
    database: tuple[int, ...] = ()


@dataclasses.dataclass
class Figure:
    rate: float
    p50_ms: float
    p99_ms: float
    cpu_ms: float
    errors: int
    database_cpu_ms: float = 0.0  # its database server's, where it has one of its own


def _ms(out: str, percentile: str) -> float:
    """wrk's latency at ``percentile`` (``"50%"``) in ms; NaN where it printed none (no
    request answered within its timeout) or a form not known here."""
    found = re.search(rf"^\s*{percentile}\s+([\d.]+)(us|ms|s|m|h)\s*$", out, re.MULTILINE)
    if found is None:
        return math.nan
    value, unit = found.groups()
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1e3, "m": 6e4, "h": 3.6e6}[unit]


def server_cpu(url: Url) -> float:
    """CPU seconds the service's processes have used so far."""
    return sum(cpu_seconds(pid) for pid in (url.pid, *getattr(url, "others", ())))


def _database_cpu(url: Url) -> float:
    """CPU seconds the service's database server has used so far (none: 0)."""
    return sum(cpu_seconds(pid) for pid in getattr(url, "database", ()))


def mariadb_pids() -> tuple[int, ...]:
    """The MariaDB server's processes on this machine."""
    found = subprocess.run(["pgrep", "-x", "mariadbd|mysqld"], capture_output=True, text=True)
    return tuple(int(pid) for pid in found.stdout.split())


def settle(url: Url, timeout: float = 60.0) -> None:
    """Wait until the service is idle (under 5 % of a core for half a second): wrk leaves
    requests behind when it stops, and the next measure must not pay for them."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        cpu = server_cpu(url)
        time.sleep(0.5)
        if server_cpu(url) - cpu < 0.025:
            return


def wrk(url: Url, script: str, seconds: float, connections: int) -> Figure:
    """``wrk`` against ``url`` with the Lua ``script``; its rate, latency and the server's
    CPU time per request."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua") as lua:
        lua.write(script)
        lua.flush()
        cpu = server_cpu(url)
        database = _database_cpu(url)
        done = subprocess.run(
            [
                "wrk",
                "-t",
                "2",
                "-c",
                str(connections),
                "-d",
                f"{seconds:g}s",
                "--latency",
                "-s",
                lua.name,
                url,
            ],
            check=True,
            capture_output=True,
            text=True,
            timeout=seconds + 120,
        )
        if done.stderr:
            print(f"    wrk: {done.stderr.strip()[:500]}")
        out = done.stdout
        cpu = server_cpu(url) - cpu
        database = _database_cpu(url) - database
    requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: .*", out)
    if errors:
        print(f"    {errors.group(0)}")
    settle(url)
    return Figure(
        rate=float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),  # type: ignore[union-attr]
        p50_ms=_ms(out, "50%"),
        p99_ms=_ms(out, "99%"),
        cpu_ms=cpu / max(requests, 1) * 1000,
        errors=int(bad.group(1)) if bad else 0,
        database_cpu_ms=database / max(requests, 1) * 1000,
    )


def post(url: str, name: str, attempts: int = 5) -> str:
    """Create one profile; its uuid. A 5xx is tried again (``attempts`` in all): Cyborg's
    API answers 500 while its conductor, just started, does not answer its calls yet."""
    data = json.dumps([{"name": name, "groups": GROUPS}]).encode()
    request = urllib.request.Request(url + PATH, data=data, method="POST", headers=HEADERS)
    for attempt in range(1, attempts + 1):
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                answer = json.load(response)
            break
        except urllib.error.HTTPError as error:
            if error.code < 500 or attempt == attempts:
                raise
            print(f"    {name}: {error.code} from {url}, trying again")
    profile = answer[0] if isinstance(answer, list) else answer
    return str(profile["uuid"])


def measure(url: Url, seconds: float, connections: int) -> dict[str, Figure]:
    """Show, list (of ``PROFILES``) and create on a fresh service at ``url``."""
    uuids = [post(url, f"seed-{n:03d}") for n in range(PROFILES)]
    settle(url)
    paths = ", ".join(f'"{PATH}/{u}"' for u in uuids)
    return {
        "show": wrk(url, SHOW % paths, seconds, connections),
        f"list of {PROFILES}": wrk(url, LIST % PATH, seconds, connections),
        "create": wrk(url, CREATE % (json.dumps(GROUPS), PATH), seconds, connections),
    }


@contextmanager
def mariadb_database() -> Iterator[str]:
    """A fresh, empty MariaDB database; its URL; dropped afterwards."""
    import pymysql

    name = f"bench_cyborg_{uuid.uuid4().hex[:8]}"
    admin = pymysql.connect(host="127.0.0.1", user="root", autocommit=True)
    try:
        with admin.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        yield f"{MARIADB}/{name}?charset=utf8mb4"
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
        admin.close()


@contextmanager
def rabbitmq_vhost() -> Iterator[str]:
    """A RabbitMQ virtual host of its own (on the local server); its transport URL."""
    vhost = f"bench-cyborg-{uuid.uuid4().hex[:8]}"
    subprocess.run(["rabbitmqctl", "-q", "add_vhost", vhost], check=True, timeout=60)
    try:
        subprocess.run(
            ["rabbitmqctl", "-q", "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"],
            check=True,
            timeout=60,
        )
        yield f"rabbit://guest:guest@127.0.0.1:5672/{vhost}"
    finally:
        subprocess.run(["rabbitmqctl", "-q", "delete_vhost", vhost], check=True, timeout=60)


@contextmanager
def cyborg() -> Iterator[Url]:
    """Upstream Cyborg 17's API and conductor (which writes what the API creates; it
    wants a Placement when it starts: a standalone one, idle) on a fresh database,
    served as the reference cloud does; ``url.pid``: the API's process,
    ``url.others``: the conductor's."""
    with (
        tempfile.TemporaryDirectory(prefix="bench-cyborg-") as tmp,
        mariadb_database() as db,
        rabbitmq_vhost() as transport,
        placement_server(
            f"sqlite:///{tmp}/placement.sqlite", 1, Path(tmp) / "placement.log"
        ) as placement,
    ):
        state = Path(tmp)
        (state / "api-paste.ini").write_text(PASTE)
        conf = state / "cyborg.conf"
        conf.write_text(
            f"[DEFAULT]\ntransport_url = {transport}\nstate_path = {state}\n"
            # A call to a conductor not yet listening fails in 10 s, not 60 (tried again).
            "rpc_response_timeout = 10\n"
            f"[api]\napi_paste_config = {state / 'api-paste.ini'}\n"
            f"[database]\nconnection = {db}\n"
            f"[oslo_concurrency]\nlock_path = {state / 'locks'}\n"
            "[oslo_messaging_notifications]\ndriver = noop\n"
            f"[placement]\nauth_type = admin_token\nendpoint = {placement}\ntoken = admin\n"
        )
        subprocess.run(
            [str(CYBORG / "bin" / "cyborg-dbsync"), "--config-file", str(conf), "upgrade"],
            check=True,
            capture_output=True,
            timeout=240,
        )
        port = free_port()
        argv = [
            str(CYBORG / "bin" / "python"),
            str(ROOT / "cloud" / "wsgi_runner.py"),
            "cyborg.wsgi.api:application",
            str(port),
            "--config-file",
            str(conf),
        ]
        conductor = [str(CYBORG / "bin" / "cyborg-conductor"), "--config-file", str(conf)]
        with open(state / "api.log", "w") as log:
            server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
            worker = subprocess.Popen(conductor, stdout=log, stderr=subprocess.STDOUT)
            url = Service(f"http://127.0.0.1:{port}")
            url.pid, url.others = server.pid, (worker.pid,)
            url.database = mariadb_pids()
            try:
                wait_ready(url, server, timeout=120)
                yield url
            finally:
                for process in (server, worker):
                    process.terminate()
                    process.wait(timeout=30)


@contextmanager
def acceleron(source: Path | None = None) -> Iterator[Url]:
    """``acceleron all-in-one`` in a fresh data directory, its own host in Placement;
    ``source``: another checkout's ``src`` to run instead (a baseline)."""
    with all_in_one(source=source) as url:
        wait_synced(url, [h["hostname"] for h in call(url, "GET", "/v2/hosts")["hosts"]])
        yield url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument(
        "--acceleron-only",
        action="store_true",
        help="measure Acceleron alone (while working on it)",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="SRC",
        help="another checkout's src, measured in each run beside",
    )
    args = parser.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is not installed (Debian: apt-get install wrk)")
    print(f"{os.cpu_count()} cores; wrk -t 2 -c {args.connections} -d {args.seconds:g}s")
    sides: list[tuple[str, Callable[[], AbstractContextManager[Url]]]] = [
        ("cyborg 17", cyborg),
        ("acceleron", acceleron),
    ]
    if args.baseline is not None:
        sides.insert(1, ("baseline", functools.partial(acceleron, args.baseline)))
    if args.acceleron_only:
        sides = sides[1:]
    for run in range(1, args.runs + 1):
        figures = {}
        for side, start in sides:
            with start() as url:
                figures[side] = measure(url, args.seconds, args.connections)
        if args.acceleron_only:
            for side, found in figures.items():
                for what, ours in found.items():
                    cell = f"{ours.rate:7.0f}/s {ours.p50_ms:6.1f} ms {ours.cpu_ms:6.2f} ms CPU"
                    print(f"{side:<10}{what:<12}{cell}")
        else:
            compare(run, figures)


def compare(run: int, figures: dict[str, dict[str, Figure]]) -> None:
    """One run's table: each path's rate and CPU a request, Cyborg's beside Acceleron's
    (and the baseline's, if measured)."""
    load = Path("/proc/loadavg").read_text().split()[0]
    print(f"\nrun {run} (load average {load})")
    print(f"{'':<12}{'cyborg 17':>30}{'acceleron':>30}{'ratio':>8}{'CPU ratio':>11}")
    for what, theirs in figures["cyborg 17"].items():
        ours = figures["acceleron"][what]
        cells = [
            f"{f.rate:7.0f}/s {f.p50_ms:6.1f} ms {f.cpu_ms:6.2f} ms CPU" for f in (theirs, ours)
        ]
        print(
            f"{what:<12}{cells[0]:>30}{cells[1]:>30}{ours.rate / theirs.rate:7.1f}x"
            f"{theirs.cpu_ms / ours.cpu_ms:10.1f}x"
        )
        if theirs.database_cpu_ms:
            print(
                f"    cyborg 17's MariaDB besides: {theirs.database_cpu_ms:.2f} ms CPU "
                f"a request (its SQLite is in Acceleron's figure)"
            )
        if "baseline" in figures:
            base = figures["baseline"][what]
            print(
                f"    baseline: {base.rate:7.0f}/s {base.p50_ms:6.1f} ms "
                f"{base.cpu_ms:6.2f} ms CPU, {base.rate / theirs.rate:.1f}x, "
                f"CPU {theirs.cpu_ms / base.cpu_ms:.1f}x"
            )
        for side, figure in (("cyborg 17", theirs), ("acceleron", ours)):
            if figure.errors:
                print(f"    {side}: {figure.errors} answers not 2xx")


if __name__ == "__main__":
    main()
