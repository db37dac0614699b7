"""Claims stopped at their step boundaries, against the real Placement (in-process) on
every backend (issue 42): two callers ending one claim, a new claim of the consumer made
in between, a lost acknowledgement of the bind's commit, two API processes on one host
name, and a claim stopped before and after each Placement write and each commit. After
each, the audit: no claim stuck, no capacity lost or held twice, no request orphaned.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import socket
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from keystoneauth1 import adapter
from oslo_config import cfg
from sqlalchemy import Connection, select, update

from acceleron.api.app import create_app
from acceleron.db.models import AcceleratorRequest, AttachHandle, Claim, table, utcnow
from acceleron.db.session import Database
from acceleron.exceptions import AcceleronError, DatabaseUnavailable
from acceleron.placement.client import Consumer, PlacementClient
from acceleron.service import claims
from acceleron.service.placement import PlacementService
from acceleron.service.reconciler import Reconciler
from tests.fixtures.arqs import ADMIN, held
from tests.fixtures.waiting import wait_for

CLAIMS, ARQS, HANDLES = table(Claim), table(AcceleratorRequest), table(AttachHandle)
LATEST = {"OpenStack-API-Version": "accelerator latest"}
FPGA = {"device_profile_name": "fpga"}

pytestmark = pytest.mark.placement


class Hooked(PlacementClient):
    """Placement as it is, but ``hook`` runs (once) before the first call whose method
    and path start as ``when`` says: another caller at work at that step boundary."""

    def __init__(self, inner: adapter.Adapter, when: str, hook: Callable[[], None]) -> None:
        super().__init__(inner)
        self.when, self.hook, self.ran = when, hook, False

    def _fire(self, call: str) -> None:
        if not self.ran and call.startswith(self.when):
            self.ran = True
            self.hook()

    def get_consumer(self, consumer: str) -> Consumer:
        self._fire("GET /allocations")
        return super().get_consumer(consumer)

    def replace_allocations(self, consumer: str, read: Consumer, allocations: Any) -> None:
        self._fire("PUT /allocations")
        super().replace_allocations(consumer, read, allocations)


class Clients:
    """The API, with the Placement client of its next calls chosen by the test."""

    def __init__(self, placement: adapter.Adapter) -> None:
        self.placement = placement
        self.next: list[PlacementClient] = []

    def __call__(self) -> PlacementClient:
        return self.next.pop(0) if self.next else PlacementClient(self.placement)


@pytest.fixture
def clients(placement: adapter.Adapter) -> Clients:
    return Clients(placement)


@pytest.fixture
def app(conf: cfg.ConfigOpts, db: Database, clients: Clients, published: Any) -> FastAPI:
    made = create_app(conf, db)
    made.state.placement = PlacementService(conf, db, clients)
    return made


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app, raise_server_exceptions=False) as test_client:
        wait_for(lambda: app.state.claims_recovered is not None)
        yield test_client


def claim(client: TestClient, consumer: str) -> Any:
    made = client.post("/v2/claims", json={**FPGA, "consumer_uuid": consumer}, headers=LATEST)
    assert made.status_code == 201, made.text
    return made.json()


def audit(db: Database, placement: adapter.Adapter, *consumers: str) -> None:
    """No claim stuck; every claim bound holds what it allocated and its requests hold
    its handles; no request or handle but a live claim's; no allocation but a claim's."""
    with db.reader() as conn:
        rows = conn.execute(select(CLAIMS)).all()
        requests = conn.execute(select(ARQS.c.uuid, ARQS.c.instance_uuid)).all()
        holders = (
            conn.execute(select(ARQS.c.instance_uuid).join(HANDLES, HANDLES.c.arq_id == ARQS.c.id))
            .scalars()
            .all()
        )
    assert [r.consumer for r in rows if r.state in ("allocating", "releasing")] == []
    live = {r.consumer: r for r in rows}
    for row in rows:
        assert held(placement, row.consumer) == row.allocations, row.consumer
        assert sorted(u for u, i in requests if i == row.consumer) == sorted(row.requests)
    assert all(i in live for _, i in requests), requests
    assert sorted(holders) == sorted(i for _, i in requests)
    for consumer in consumers:
        if consumer not in live:
            assert held(placement, consumer) == {}, consumer


def test_a_second_delete_leaves_the_claim_to_the_first_and_a_new_claim_stands(
    db: Database, placement: adapter.Adapter, client: TestClient, clients: Clients
) -> None:
    """Before: the second DELETE seized the claim the first was undoing and deleted it;
    a new claim of the consumer was made; the first DELETE then dropped the new claim's
    allocation (at the generation it assumed) and its requests. After: the second DELETE
    and the new POST are refused (409) while the first is at work; once it is done the
    consumer claims again, and keeps what it claimed."""
    consumer = str(uuid.uuid4())
    claim(client, consumer)
    seen: list[tuple[int, str]] = []

    def meanwhile() -> None:
        second = client.delete(f"/v2/claims/{consumer}", headers=LATEST)
        again = client.post("/v2/claims", json={**FPGA, "consumer_uuid": consumer}, headers=LATEST)
        seen.extend([(second.status_code, second.text), (again.status_code, again.text)])

    for when in ("PUT /allocations", "GET /allocations"):
        clients.next.append(Hooked(placement, when, meanwhile))
        assert client.delete(f"/v2/claims/{consumer}", headers=LATEST).status_code == 204
        assert len(seen) == 2, "no Placement call of the release at that step"
        (second, second_text), (again, again_text) = seen
        assert second == 409 and "being ended" in second_text, second_text
        assert again == 409 and "has a claim already" in again_text, again_text
        seen.clear()
        audit(db, placement, consumer)
        made = claim(client, consumer)
        assert held(placement, consumer) == {
            rp: r["resources"] for rp, r in made["allocations"].items()
        }
        audit(db, placement, consumer)


def test_a_lost_acknowledgement_of_the_bind_keeps_the_claim_and_its_capacity(
    db: Database, placement: adapter.Adapter, client: TestClient, monkeypatch: Any
) -> None:
    """The bind's transaction commits (step done), but the database's answer is lost.
    Before: the maker's undo found the claim no longer its own and dropped its
    allocation, the claim staying bound: its capacity given out twice. After: the maker
    reads the claim back, finds it made, and answers it."""
    writer = db.writer
    lost: list[str] = []

    @contextlib.contextmanager
    def loses_the_answer() -> Iterator[Connection]:
        with writer() as conn:
            yield conn
            row = conn.execute(select(CLAIMS.c.consumer, CLAIMS.c.step)).first()
        if not lost and row is not None and row.step == "done":
            lost.append(row.consumer)
            raise DatabaseUnavailable("The database is unavailable (test): answer lost.")

    monkeypatch.setattr(db, "writer", loses_the_answer)
    consumer = str(uuid.uuid4())
    answer = client.post("/v2/claims", json={**FPGA, "consumer_uuid": consumer}, headers=LATEST)
    assert lost == [consumer]
    monkeypatch.undo()
    assert answer.status_code in (201, 503), answer.text
    shown = client.get(f"/v2/claims/{consumer}", headers=LATEST).json()
    assert shown["state"] == "bound"
    assert held(placement, consumer) != {}
    audit(db, placement, consumer)
    assert client.delete(f"/v2/claims/{consumer}", headers=LATEST).status_code == 204
    audit(db, placement, consumer)


def test_a_claim_of_another_api_process_on_this_host_name_is_left_to_it(
    db: Database, placement: adapter.Adapter, client: TestClient, app: FastAPI
) -> None:
    """Two API containers on the host's network share its host name and boot id; a
    process id of the other is none of this one's. Before: this process's recovery took
    the other's claim for one whose process died, and undid it while it was being made.
    After: only the lease says; it runs, so the claim is the other's."""
    consumer = str(uuid.uuid4())
    claim(client, consumer)
    child = subprocess.Popen(["true"])  # a process id that is no process of this one's
    child.wait()
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    other = f"{socket.gethostname()}/{boot}/{child.pid}/{uuid.uuid4().hex[:12]}"
    with db.writer() as conn:  # being made by the other process, its lease running
        conn.execute(
            update(CLAIMS).values(
                state="allocating", owner=other, lease_until=utcnow() + dt.timedelta(hours=1)
            )
        )
    assert [
        r.consumer for r in Reconciler(db, lambda: PlacementClient(placement), 0).claims()
    ] == []
    busy = client.delete(f"/v2/claims/{consumer}", headers=LATEST)
    assert busy.status_code == 409 and "being made" in busy.text, busy.text
    with db.reader() as conn:
        assert conn.execute(select(CLAIMS.c.state, CLAIMS.c.owner)).one() == ("allocating", other)
    with db.writer() as conn:  # the other process is gone: its lease passes
        conn.execute(update(CLAIMS).values(lease_until=utcnow() - dt.timedelta(hours=1)))
    assert client.delete(f"/v2/claims/{consumer}", headers=LATEST).status_code == 204
    audit(db, placement, consumer)


# --- every step boundary ---------------------------------------------------------------


class Killed(BaseException):
    """The process dies here: nothing it runs after reaches the database or Placement."""


class Faults:
    """One fault, armed at one point of a claim's making and ending: the ``n``-th commit
    (counted over both) dies before it, dies after it, or loses its answer (committed,
    then the database reported unavailable); or the ``n``-th write to Placement dies
    before or after it. Once dead, every database and Placement call dies too."""

    KINDS = (
        "die before commit",
        "die after commit",
        "lose answer",
        "die before write",
        "die after write",
    )

    def __init__(self, db: Database, monkeypatch: Any) -> None:
        self.point: tuple[str, int] | None = None
        self.commits = self.writes = 0
        self.dead = False
        writer, reader = db.writer, db.reader

        @contextlib.contextmanager
        def faulty_writer() -> Iterator[Connection]:
            self.alive()
            with writer() as conn:
                yield conn
                self.commits += 1
                self.fault("die before commit", self.commits)
            self.fault("die after commit", self.commits)
            if self.point == ("lose answer", self.commits):
                raise DatabaseUnavailable("The database is unavailable (test): answer lost.")

        @contextlib.contextmanager
        def faulty_reader() -> Iterator[Connection]:
            self.alive()
            with reader() as conn:
                yield conn

        monkeypatch.setattr(db, "writer", faulty_writer)
        monkeypatch.setattr(db, "reader", faulty_reader)

    def alive(self) -> None:
        if self.dead:
            raise Killed

    def fault(self, kind: str, n: int) -> None:
        if self.point == (kind, n):
            self.dead = True
            raise Killed

    def arm(self, point: tuple[str, int] | None) -> None:
        self.point, self.commits, self.writes, self.dead = point, 0, 0, False


class FaultyPlacement(PlacementClient):
    def __init__(self, inner: adapter.Adapter, faults: Faults) -> None:
        super().__init__(inner)
        self.faults = faults

    def _written(self, write: Callable[[], None]) -> None:
        self.faults.alive()
        self.faults.writes += 1
        n = self.faults.writes
        self.faults.fault("die before write", n)
        write()
        self.faults.fault("die after write", n)

    def get_consumer(self, consumer: str) -> Consumer:
        self.faults.alive()
        return super().get_consumer(consumer)

    def put_allocations(self, consumer: str, allocations: Any, **kwargs: Any) -> None:
        self._written(
            lambda: super(FaultyPlacement, self).put_allocations(consumer, allocations, **kwargs)
        )

    def replace_allocations(self, consumer: str, read: Consumer, allocations: Any) -> None:
        self._written(
            lambda: super(FaultyPlacement, self).replace_allocations(consumer, read, allocations)
        )


def test_a_claim_stopped_at_any_step_boundary_leaves_nothing_stuck_lost_or_doubled(
    db: Database, placement: adapter.Adapter, published: Any, monkeypatch: Any
) -> None:
    """A claim made and ended, with one fault at each boundary in turn (before and after
    each commit and each write to Placement, and each commit's answer lost); then the
    process is back (leases passed: the database's time moved on), recovery and two
    reconciler passes run, and the audit finds nothing wrong; the consumer then claims
    again and ends its claim, and nothing is left."""
    faults = Faults(db, monkeypatch)
    client = FaultyPlacement(placement, faults)

    def cycle(consumer: str) -> None:
        claims.make(db, client, ADMIN, "fpga", consumer)
        claims.end(db, client, ADMIN, consumer)

    faults.arm(None)
    cycle(str(uuid.uuid4()))
    commits, writes = faults.commits, faults.writes
    assert (commits, writes) == (7, 2)  # begun, placing, created, done; taken, requests,
    # row; the allocation made and dropped
    points = [(k, n) for k in Faults.KINDS[:3] for n in range(1, commits + 1)]
    points += [(k, n) for k in Faults.KINDS[3:] for n in range(1, writes + 1)]
    outcomes: dict[str, int] = {}
    for point in points:
        consumer = str(uuid.uuid4())
        faults.arm(point)
        try:
            cycle(consumer)
            outcome = "done"
        except Killed:
            outcome = "killed"
        except AcceleronError as error:
            outcome = type(error).__name__
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        faults.arm(None)  # back: leases pass, recovery and the reconciler run
        with db.writer() as conn:
            conn.execute(update(CLAIMS).values(lease_until=utcnow() - dt.timedelta(hours=1)))
        claims.recover(db, PlacementClient(placement), 60)
        passes = Reconciler(db, lambda: PlacementClient(placement), 0)
        passes.run()
        passes.run()
        audit(db, placement, consumer)
        with db.reader() as conn:
            standing = conn.execute(select(CLAIMS.c.consumer)).scalars().all()
        for stood in standing:  # made before the fault: it stands, and ends
            claims.end(db, PlacementClient(placement), ADMIN, stood)
        cycle(consumer)
        audit(db, placement, consumer)
        with db.reader() as conn:
            assert conn.execute(select(CLAIMS.c.id)).all() == [], point
            assert conn.execute(select(ARQS.c.id)).all() == [], point
    # Each death kills; a lost answer is a 503 (DatabaseUnavailable), but for the take of
    # the ending (read back: it goes on) and the bind's (read back: the claim stands).
    assert outcomes == {"killed": 18, "DatabaseUnavailable": 5, "done": 2}, outcomes
