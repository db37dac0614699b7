"""A database that fails over under load: two ``acceleron api`` processes on a three-node
MariaDB Galera cluster behind a balancer that sends every connection to one node, the
writing node killed (SIGKILL) and later back (it rejoins by IST or SST); the same on a
PostgreSQL server restarted. Through both APIs, all along, clients bind (create + bind
accelerator requests on hosts reported with the fake driver) and release, send agents'
host reports and claim agents' tasks; others bind FPGA regions with a bitstream each time
(programmed by each host's agent task runner, the real one with the fake driver) and make
and release claims (``/v2/claims``, in the APIs' embedded Placement, whose own database
stays up: the database that fails over is Acceleron's).

The audit: while no node took writes the API answered 503 with Retry-After, never
another 5xx; nothing answered 2xx was lost (every bind answered 202 and not released is
Bound in the database, on a handle it holds; every claim answered 201 and not released
is there, bound, with its allocation); no handle is held twice or leaked, no released
claim keeps an allocation; no request or claim is stuck half-made; every programming
bind ended Bound. The figures (seconds of 503 per failover, transactions retried, writes
lost, double allocations) are printed: ``make e2e-ha`` runs just these.

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
from acceleron.db.models import (
    AcceleratorRequest,
    AttachHandle,
    Claim,
    Deployable,
    Device,
    table,
)
from acceleron.db.session import Database
from acceleron.drivers.fake import FakeDriver
from acceleron.report import HostReport, to_json
from tests.fixtures.databases import create_server_database, drop_server_database
from tests.fixtures.dbservers import _wait_for_port, own_server
from tests.fixtures.galera import galera_cluster
from tests.fixtures.host import Host, upload
from tests.fixtures.ports import free_port
from tests.fixtures.waiting import wait_for

pytestmark = pytest.mark.slow
HEADERS = {"OpenStack-API-Version": "accelerator latest"}
PLACEMENT = {"X-Auth-Token": "admin", "OpenStack-API-Version": "placement 1.39"}
HOSTS = 4
CLIENTS = 4  # binds, releases, reports, task claims
CLAIMERS = 2  # claims made and released
MAX_OPERATIONS = 400
PATH = "/v2/accelerator_requests"
REGION1 = "9926ab6d6c925a68aabca7d84c545738"  # the fake inventory's programmable region type
FUNCTIONS = ("0f1e2d3c4b5a69788796a5b4c3d2e1f0", "1f2e3d4c5b6a79889706b5c4d3e2f101")
ARQS, HANDLES, CLAIMS = table(AcceleratorRequest), table(AttachHandle), table(Claim)
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
def placement_database() -> Iterator[str]:
    """A database of its own for the APIs' embedded Placement, on the MariaDB server of
    the other tests (it stays up: the database that fails over is Acceleron's; Placement
    runs on PyMySQL, not on psycopg 3)."""
    url = create_server_database("mysql")
    try:
        yield url
    finally:
        drop_server_database("mysql", url)


@contextlib.contextmanager
def two_apis(url: str, placement: str, tmp_path: Path) -> Iterator[list[str]]:
    """Two ``acceleron api`` processes on the database (and one Placement database, each
    running Placement embedded, the second started once the first's answers); their
    base URLs."""
    config = tmp_path / "acceleron.conf"
    config.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path}\n[database]\nconnection = {url}\n"
        "[metrics]\nrefresh_interval = 3600\n"
        f"[placement]\nmode = embedded\nembedded_connection = {placement}\nsync_interval = 1\n"
    )
    acceleron = Path(sys.executable).parent / "acceleron"
    processes, urls = [], []
    try:
        for index in range(2):
            port = free_port()
            log = tmp_path / f"api-{index}.log"
            with log.open("ab") as out:
                processes.append(
                    subprocess.Popen(
                        [str(acceleron), "--config-file", str(config), "api", "--port", str(port)],
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
                )
            _wait_for_port(port, log)
            urls.append(f"http://127.0.0.1:{port}")
            wait_for(lambda: _answers(urls[-1] + "/placement/resource_providers"), seconds=120)
        yield urls
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)


def _answers(url: str) -> bool:
    with contextlib.suppress(requests.RequestException):
        return requests.get(url, headers=PLACEMENT, timeout=30).status_code == 200
    return False


@dataclass
class Load:
    """What the clients sent and what they were answered."""

    apis: list[str]
    pools: dict[str, str]  # host -> its QAT VF pool's provider
    regions: dict[str, str]  # host -> its first FPGA's programmable region's provider
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    statuses: dict[int, int] = field(default_factory=dict)
    unavailable: list[float] = field(default_factory=list)  # when each 503 came
    bad: list[str] = field(default_factory=list)  # 5xx other than 503, 503 without Retry-After
    bound: dict[str, str] = field(default_factory=dict)  # arq -> instance, bind answered 202
    released: set[str] = field(default_factory=set)  # instances whose delete answered 204
    programmed: list[str] = field(default_factory=list)  # programming binds that ended Bound
    unended: list[str] = field(default_factory=list)  # programming binds that did not
    claimed: set[str] = field(default_factory=set)  # consumers whose claim answered 201
    unclaimed: set[str] = field(default_factory=set)  # consumers whose DELETE answered 204
    operations: int = 0

    def send(self, turn: int, method: str, path: str, **kwargs: Any) -> requests.Response | None:
        api = self.apis[turn % len(self.apis)]
        try:
            response = requests.request(method, api + path, headers=HEADERS, timeout=60, **kwargs)
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
        hosts = sorted(self.pools)
        for turn in range(index, index + MAX_OPERATIONS):
            if self.stop.is_set():
                break
            host = hosts[turn % len(hosts)]
            if len(held) >= 2:  # a release is tried until it is done, as Nova does
                self.release(turn, PATH, {"instance": held[0]})
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
            body = {
                arq: [
                    {"path": "/hostname", "op": "add", "value": host},
                    {"path": "/device_rp_uuid", "op": "add", "value": self.pools[host]},
                    {"path": "/instance_uuid", "op": "add", "value": instance},
                ]
            }
            answer = self.send(turn + 1, "PATCH", PATH, json=body)
            if answer is not None and answer.status_code == 202:
                with self.lock:
                    self.bound[arq] = instance
                held.append(instance)
            elif answer is not None and answer.status_code == 503:
                held.append(instance)  # it may have bound before the connection was lost

    def programmer(self, index: int) -> None:
        """Bind the host's programmable region with one bitstream, then the other (each
        bind programs it: the host's task runner does), wait for the bind's end, release."""
        host = sorted(self.regions)[index]
        for turn in range(index, index + MAX_OPERATIONS):
            if self.stop.is_set():
                break
            profile = f"ha-fpga-{turn % len(FUNCTIONS)}"
            created = self.send(turn, "POST", PATH, json={"device_profile_name": profile})
            if created is None or created.status_code != 201:
                continue
            arq, instance = created.json()["arqs"][0]["uuid"], str(uuid.uuid4())
            body = {
                arq: [
                    {"path": "/hostname", "op": "add", "value": host},
                    {"path": "/device_rp_uuid", "op": "add", "value": self.regions[host]},
                    {"path": "/instance_uuid", "op": "add", "value": instance},
                ]
            }
            answer = self.send(turn + 1, "PATCH", PATH, json=body)
            if answer is None or answer.status_code not in (202, 503):
                continue
            state, deadline = "", time.monotonic() + 60
            while answer.status_code == 202 and state not in ("Bound", "BindFailed"):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)  # the clients' pacing between two looks
                shown = self.send(turn, "GET", f"{PATH}/{arq}")
                state = shown.json()["state"] if shown is not None and shown.ok else state
            if answer.status_code == 202:  # a bind answered: it must end, and end Bound
                with self.lock:
                    ended = self.programmed if state == "Bound" else self.unended
                    ended.append(f"{arq} {state or 'never shown'}")
            self.release(turn, PATH, {"instance": instance})

    def claimer(self, index: int) -> None:
        """Claim a MIG slice for a new consumer, hold at most two, release the oldest."""
        held: list[str] = []
        for turn in range(index, index + MAX_OPERATIONS):
            if self.stop.is_set():
                break
            if len(held) >= 2:
                consumer = held.pop(0)
                self.release(turn, f"/v2/claims/{consumer}")
                with self.lock:
                    self.unclaimed.add(consumer)
                continue
            consumer = str(uuid.uuid4())
            body = {"device_profile_name": "ha-mig", "consumer_uuid": consumer}
            made = self.send(turn, "POST", "/v2/claims", json=body)
            if made is not None and made.status_code == 201:
                with self.lock:
                    self.claimed.add(consumer)
            if made is None or made.status_code in (201, 503):
                held.append(consumer)  # it may have been made before the connection was lost
        for consumer in held:  # those answered 201 stay, for the audit
            if consumer not in self.claimed:
                self.release(index, f"/v2/claims/{consumer}")
                with self.lock:
                    self.unclaimed.add(consumer)

    def release(self, turn: int, path: str, params: dict[str, str] | None = None) -> None:
        """DELETE until it is done (204), or there was nothing (404): a 503 (or 409 for a
        claim whose maker is still at work) is tried again, as a client does."""
        for attempt in range(turn, turn + 200):
            answer = self.send(attempt, "DELETE", path, params=params)
            if answer is not None and answer.status_code in (204, 404):
                return
            time.sleep(0.25)  # the clients' pacing: a moment before the next try
        with self.lock:
            self.bad.append(f"DELETE {path} {params}: never done")


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


def _setup(apis: list[str], hosts: list[Host], url: str) -> Load:
    """The hosts reported, the profiles and bitstreams made; the load on them."""
    for host in hosts:
        put = requests.put(
            f"{apis[0]}/v2/hosts/{host.name}/report",
            json=report_of(host.name),
            headers=HEADERS,
            timeout=60,
        )
        assert put.status_code in (200, 201, 202, 204), put.text
    groups: dict[str, dict[str, str]] = {
        "ha-qat": {"resources:CUSTOM_ACCELERATOR_QAT": "1"},
        "ha-mig": {"resources:CUSTOM_ACCELERATOR_MIG": "1"},
    }
    for index, function in enumerate(FUNCTIONS):
        groups[f"ha-fpga-{index}"] = {
            "resources:CUSTOM_ACCELERATOR_FPGA": "1",
            "trait:CUSTOM_PROGRAMMABLE": "required",
            "accel:bitstream_id": upload(apis[0], REGION1, function, REGION1),
        }
    for name, group in groups.items():
        profile: Any = [{"name": name, "groups": [group]}]
        assert (
            requests.post(
                f"{apis[1]}/v2/device_profiles", json=profile, headers=HEADERS, timeout=60
            ).status_code
            == 201
        )
    database = Database(url)
    with database.reader() as conn:
        rows = conn.execute(
            select(DEVICES.c.hostname, DEPLOYABLES.c.rp_uuid)
            .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
            .where(DEPLOYABLES.c.kind == "vf_pool")
        )
        pools = {row.hostname: row.rp_uuid for row in rows}
    database.dispose()
    assert set(pools) == {host.name for host in hosts}
    regions = {host.name: host.region("region1")["rp_uuid"] for host in hosts[:2]}
    wait_for(lambda: _claimable(apis[1]), seconds=120)  # the hosts are in Placement
    return Load(apis, pools, regions)


def _claimable(api: str) -> bool:
    """Whether a claim of the MIG profile is made (it is released at once)."""
    consumer = str(uuid.uuid4())
    body = {"device_profile_name": "ha-mig", "consumer_uuid": consumer}
    made = requests.post(f"{api}/v2/claims", headers=HEADERS, timeout=60, json=body)
    if made.status_code != 201:
        return False
    released = requests.delete(f"{api}/v2/claims/{consumer}", headers=HEADERS, timeout=60)
    assert released.status_code == 204, released.text
    return True


def allocated(api: str, consumer: str) -> bool:
    """Whether the consumer holds an allocation in the APIs' Placement."""
    answer = requests.get(f"{api}/placement/allocations/{consumer}", headers=PLACEMENT, timeout=60)
    assert answer.status_code == 200, answer.text
    return bool(answer.json()["allocations"])


def test_a_database_failover_loses_nothing(backend: Backend, tmp_path: Path) -> None:
    with placement_database() as placement, two_apis(backend.url, placement, tmp_path) as apis:
        hosts = []
        for index in range(HOSTS):  # each host's agent reaches one of the APIs
            (tmp_path / f"host-{index}").mkdir()
            hosts.append(Host(apis[index % 2], tmp_path / f"host-{index}"))
        load = _setup(apis, hosts, backend.url)
        threads = [threading.Thread(target=load.client, args=(i,)) for i in range(CLIENTS)]
        threads += [threading.Thread(target=load.programmer, args=(i,)) for i in range(2)]
        threads += [threading.Thread(target=load.claimer, args=(i,)) for i in range(CLAIMERS)]
        with contextlib.ExitStack() as agents:
            for host in hosts[:2]:
                agents.enter_context(host.working())  # the task runners program the regions
            for thread in threads:
                thread.start()
            wait_for(lambda: load.operations >= 60 and load.programmed, seconds=60)  # it runs
            failed_at = time.monotonic()
            backend.fail()
            with contextlib.suppress(AssertionError):  # the load sees the outage
                wait_for(lambda: load.unavailable and load.unavailable[-1] > failed_at, seconds=10)
            if backend.name == "postgresql":
                backend.recover()  # a primary restarted: the outage is the restart
            done, programmed = load.operations, len(load.programmed)
            wait_for(
                lambda: load.operations >= done + 60 and len(load.programmed) > programmed,
                seconds=90,
            )  # writes and programming go on
            if backend.name == "galera":
                backend.recover()  # the killed node rejoins under load
                done = load.operations
                wait_for(lambda: load.operations >= done + 40, seconds=60)
            load.stop.set()
            for thread in threads:
                thread.join(timeout=120)
        assert not any(thread.is_alive() for thread in threads), "a client is stuck"
        retries = retried(apis)
        kept_claims = load.claimed - load.unclaimed
        unallocated = [c for c in kept_claims if not allocated(apis[0], c)]
        leaked_allocations = [c for c in load.unclaimed if allocated(apis[1], c)]
        database = Database(backend.url)

    # The audit, straight from the database (and the Placement reads above).
    with database.reader() as conn:
        arqs = {r.uuid: r for r in conn.execute(select(ARQS))}
        handles = list(conn.execute(select(HANDLES)))
        claims = {r.consumer: r for r in conn.execute(select(CLAIMS))}
    database.dispose()
    kept = {a: i for a, i in load.bound.items() if i not in load.released}
    lost = [a for a in kept if a not in arqs or arqs[a].state != "Bound"]
    lost += [c for c in kept_claims if c not in claims or claims[c].state != "bound"]
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
    leaked += leaked_allocations + [c for c in load.unclaimed if c in claims]
    unheld = [r.uuid for r in arqs.values() if r.state == "Bound" and r.id not in holders]
    stuck = [f"{r.uuid} {r.state}" for r in arqs.values() if r.state in ("BindStarted", "Deleting")]
    stuck += [
        f"claim {c} {r.state}" for c, r in claims.items() if r.state in ("allocating", "releasing")
    ]
    stuck += load.unended
    seconds = (load.unavailable[-1] - load.unavailable[0]) if load.unavailable else 0.0
    sys.stdout.write(
        f"\n{backend.name}: {load.operations} requests {dict(sorted(load.statuses.items()))}; "
        f"503 for {seconds:.1f} s in the failover; transactions retried: {retries:.0f}; "
        f"answered binds {len(load.bound)}, kept {len(kept)}; programming binds bound "
        f"{len(load.programmed)}; answered claims {len(load.claimed)}, kept {len(kept_claims)}; "
        f"lost {len(lost)}; double allocations {len(double)}; leaked {len(leaked)}; "
        f"stuck {len(stuck)}\n"
    )
    assert not load.bad, load.bad[:10]
    assert (lost, double, leaked, unheld, stuck, unallocated) == ([], [], [], [], [], [])
    assert len(kept) > 0 and len(kept_claims) > 0 and len(load.programmed) > 1
