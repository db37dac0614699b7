"""A database that fails over under load: two ``acceleron api`` processes on a three-node
MariaDB Galera cluster behind a balancer that sends every connection to one node, the
writing node killed (SIGKILL) and later back (it rejoins by IST or SST); the same on a
PostgreSQL server restarted. Clients bind (create + bind accelerator requests on hosts
reported with the fake driver), release, send agents' host reports and claim agents'
tasks, through both APIs, all along.

The audit: while no node took writes the API answered 503 with Retry-After, never
another 5xx; nothing answered 2xx was lost (every bind answered 202 and not released is
Bound in the database, on a handle it holds); no handle is held twice or leaked; no
request is stuck half-bound. The figures (seconds of 503 per failover, transactions
retried, writes lost, double allocations) are printed: ``make e2e-ha`` runs just these.

Bounded: ``CLIENTS`` threads, at most ``MAX_OPERATIONS`` each, for at most the load's
phases (a few seconds each); no sleeps as waits but the load's own pacing.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
from sqlalchemy import create_engine, select, text
from sqlalchemy.engine import make_url

from acceleron import conf as confmod
from acceleron.db import migrate
from acceleron.db.models import AcceleratorRequest, AttachHandle, Deployable, Device, table
from acceleron.db.session import Database
from acceleron.drivers.fake import FakeDriver
from acceleron.report import HostReport, to_json
from tests.fixtures.dbservers import _wait_for_port, free_port, own_server
from tests.fixtures.galera import galera_cluster
from tests.fixtures.waiting import wait_for

pytestmark = pytest.mark.slow
HEADERS = {"OpenStack-API-Version": "accelerator latest"}
HOSTS = [f"ha-host-{i}" for i in range(4)]
CLIENTS = 4
MAX_OPERATIONS = 400
PATH = "/v2/accelerator_requests"
ARQS, HANDLES = table(AcceleratorRequest), table(AttachHandle)
DEPLOYABLES, DEVICES = table(Deployable), table(Device)


@dataclass
class Backend:
    url: str  # the "acceleron" database, through the balancer for Galera
    fail: Any  # the failover: kill (or stop) the writer
    recover: Any  # bring it back
    name: str


@contextlib.contextmanager
def _galera() -> Iterator[Backend]:
    with galera_cluster() as cluster:
        url = _create_database(cluster.url, "mysql")
        killed: list[int] = []

        def fail() -> None:
            killed.append(cluster.writer())
            cluster.nodes[killed[-1]].kill()

        def recover() -> None:
            cluster.nodes[killed.pop()].start()  # waits until it is Synced again

        yield Backend(url, fail, recover, "galera")


@contextlib.contextmanager
def _postgresql() -> Iterator[Backend]:
    with own_server("postgresql") as server:
        yield Backend(
            _create_database(server.url, "postgresql"), server.stop, server.start, "postgresql"
        )


def _create_database(url: str, backend: str) -> str:
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        extra = " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin" if backend == "mysql" else ""
        conn.execute(text(f"CREATE DATABASE acceleron{extra}"))
    admin.dispose()
    return make_url(url).set(database="acceleron").render_as_string(hide_password=False)


@pytest.fixture(params=["galera", "postgresql"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    with _galera() if request.param == "galera" else _postgresql() as started:
        database = Database(started.url)
        migrate.upgrade(database)
        database.dispose()
        yield started


@contextlib.contextmanager
def two_apis(url: str, tmp_path: Path) -> Iterator[list[str]]:
    """Two ``acceleron api`` processes on the database; their base URLs."""
    config = tmp_path / "acceleron.conf"
    config.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path}\n[database]\nconnection = {url}\n"
        "[metrics]\nrefresh_interval = 3600\n"
    )
    acceleron = Path(sys.executable).parent / "acceleron"
    processes, urls = [], []
    try:
        for index in range(2):
            port = free_port()
            log = tmp_path / f"api-{index}.log"
            with log.open("ab") as out:
                processes.append(subprocess.Popen(
                    [str(acceleron), "--config-file", str(config), "api", "--port", str(port)],
                    stdout=out, stderr=subprocess.STDOUT,
                ))  # fmt: skip
            _wait_for_port(port, log)
            urls.append(f"http://127.0.0.1:{port}")
        yield urls
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)


@dataclass
class Load:
    """What the clients sent and what they were answered."""

    apis: list[str]
    pools: dict[str, str]  # host -> its QAT VF pool's provider
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    statuses: dict[int, int] = field(default_factory=dict)
    unavailable: list[float] = field(default_factory=list)  # when each 503 came
    bad: list[str] = field(default_factory=list)  # 5xx other than 503, 503 without Retry-After
    bound: dict[str, str] = field(default_factory=dict)  # arq -> instance, bind answered 202
    released: set[str] = field(default_factory=set)  # instances whose delete answered 204
    operations: int = 0

    def send(self, turn: int, method: str, path: str, **kwargs: Any) -> requests.Response | None:
        api = self.apis[turn % len(self.apis)]
        try:
            response = requests.request(method, api + path, headers=HEADERS, timeout=60,
                                        **kwargs)  # fmt: skip
        except requests.RequestException as error:
            with self.lock:
                self.bad.append(f"{method} {path}: {error}")
            return None
        with self.lock:
            self.operations += 1
            self.statuses[response.status_code] = self.statuses.get(response.status_code, 0) + 1
            if response.status_code == 503:
                self.unavailable.append(time.monotonic())
                if int(response.headers.get("Retry-After", "0")) <= 0:
                    self.bad.append(f"{method} {path}: 503 without Retry-After")
            elif response.status_code >= 500:
                self.bad.append(f"{method} {path}: {response.status_code} {response.text}")
        return response

    def client(self, index: int) -> None:
        held: list[str] = []  # instances this client bound and has not released
        for turn in range(index, index + MAX_OPERATIONS):
            if self.stop.is_set():
                break
            host = HOSTS[turn % len(HOSTS)]
            if len(held) >= 2:
                deleted = self.send(turn, "DELETE", PATH, params={"instance": held[0]})
                if deleted is not None and deleted.status_code == 204:
                    with self.lock:
                        self.released.add(held.pop(0))
                continue
            if turn % 5 == 0:  # an agent's report, then its claim for work
                self.send(turn, "PUT", f"/v2/hosts/{host}/report", json=report_of(host))
                self.send(turn, "POST", f"/v2/hosts/{host}/tasks/claim")
                continue
            created = self.send(turn, "POST", PATH, json={"device_profile_name": "ha-qat"})
            if created is None or created.status_code != 201:
                continue
            arq = created.json()["arqs"][0]["uuid"]
            instance = str(uuid.uuid4())
            body = {arq: [
                {"path": "/hostname", "op": "add", "value": host},
                {"path": "/device_rp_uuid", "op": "add", "value": self.pools[host]},
                {"path": "/instance_uuid", "op": "add", "value": instance},
            ]}  # fmt: skip
            answer = self.send(turn + 1, "PATCH", PATH, json=body)
            if answer is not None and answer.status_code == 202:
                with self.lock:
                    self.bound[arq] = instance
                held.append(instance)
            elif answer is not None and answer.status_code == 503:
                held.append(instance)  # it may have bound before the connection was lost


_REPORTS: dict[str, dict[str, Any]] = {}


def report_of(host: str) -> dict[str, Any]:
    if host not in _REPORTS:
        conf = confmod.load([], config_files=[], overrides={"DEFAULT": {"host": host}})
        devices = tuple(FakeDriver(conf, Path("/")).discover())
        _REPORTS[host] = to_json(HostReport(host, "1", devices))
    return _REPORTS[host]


def retried(apis: list[str]) -> float:
    """Transactions the APIs ran again (acceleron_db_retries_total, all reasons)."""
    total = 0.0
    for api in apis:
        for line in requests.get(f"{api}/metrics", timeout=10).text.splitlines():
            if line.startswith("acceleron_db_retries_total{"):
                total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_database_failover_loses_nothing(backend: Backend, tmp_path: Path) -> None:
    with two_apis(backend.url, tmp_path) as apis:
        for host in HOSTS:
            put = requests.put(f"{apis[0]}/v2/hosts/{host}/report", json=report_of(host),
                               headers=HEADERS, timeout=60)  # fmt: skip
            assert put.status_code in (200, 201, 202, 204), put.text
        profile: Any = [{"name": "ha-qat", "groups": [{"resources:CUSTOM_ACCELERATOR_QAT": "1"}]}]
        assert requests.post(f"{apis[1]}/v2/device_profiles", json=profile, headers=HEADERS,
                             timeout=60).status_code == 201  # fmt: skip
        database = Database(backend.url)
        with database.reader() as conn:
            rows = conn.execute(
                select(DEVICES.c.hostname, DEPLOYABLES.c.rp_uuid)
                .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
                .where(DEPLOYABLES.c.kind == "vf_pool")
            )
            pools = {row.hostname: row.rp_uuid for row in rows}
        assert set(pools) == set(HOSTS)

        load = Load(apis, pools)
        threads = [threading.Thread(target=load.client, args=(i,)) for i in range(CLIENTS)]
        for thread in threads:
            thread.start()
        wait_for(lambda: load.operations >= 60, seconds=60)  # the load runs
        failed_at = time.monotonic()
        backend.fail()
        with contextlib.suppress(AssertionError):  # the load sees the outage
            wait_for(lambda: load.unavailable and load.unavailable[-1] > failed_at, seconds=10)
        if backend.name == "postgresql":
            backend.recover()  # a primary restarted: the outage is the restart
        done = load.operations
        wait_for(lambda: load.operations >= done + 60, seconds=90)  # writes go on
        if backend.name == "galera":
            backend.recover()  # the killed node rejoins under load
            done = load.operations
            wait_for(lambda: load.operations >= done + 40, seconds=60)
        load.stop.set()
        for thread in threads:
            thread.join(timeout=120)
        assert not any(thread.is_alive() for thread in threads), "a client is stuck"
        retries = retried(apis)

    # The audit, straight from the database.
    with database.reader() as conn:
        arqs = {r.uuid: r for r in conn.execute(select(ARQS))}
        handles = list(conn.execute(select(HANDLES)))
    database.dispose()
    kept = {a: i for a, i in load.bound.items() if i not in load.released}
    lost = [a for a in kept if a not in arqs or arqs[a].state != "Bound"]
    holders: dict[int, int] = {}
    for handle in handles:
        if handle.arq_id is not None:
            holders[handle.arq_id] = holders.get(handle.arq_id, 0) + 1
    by_id = {r.id: r for r in arqs.values()}
    double = [arq for arq, count in holders.items() if count > 1]
    owners = {h.uuid: by_id.get(h.arq_id) if h.arq_id is not None else None for h in handles}
    leaked = [
        h.uuid for h in handles if h.in_use and getattr(owners[h.uuid], "state", None) != "Bound"
    ]
    unheld = [r.uuid for r in arqs.values() if r.state == "Bound" and r.id not in holders]
    stuck = [r.uuid for r in arqs.values() if r.state in ("BindStarted", "Deleting")]
    seconds = (load.unavailable[-1] - load.unavailable[0]) if load.unavailable else 0.0
    sys.stdout.write(
        f"\n{backend.name}: {load.operations} requests {dict(sorted(load.statuses.items()))}; "
        f"503 for {seconds:.1f} s in the failover; transactions retried: {retries:.0f}; "
        f"answered binds {len(load.bound)}, kept {len(kept)}, lost {len(lost)}; "
        f"double allocations {len(double)}; leaked handles {len(leaked)}; stuck {len(stuck)}\n"
    )
    assert not load.bad, load.bad[:10]
    assert (lost, double, leaked, unheld, stuck) == ([], [], [], [], [])
    assert len(kept) > 0
