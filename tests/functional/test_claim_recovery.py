"""A claim interrupted at any step ends in a state it can leave, on every backend, against
the real Placement (in-process): a second DELETE, the reconciler after the claim's
timeout, and the API's start undo a claim whose maker is gone, from what its row
records (docs/claims.md), leaving no request, no held handle and no allocation.

A maker "killed" at a step is one whose steps stop there and whose lease has passed
(in the database's time: nothing else says whether a maker is gone).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from keystoneauth1 import adapter
from oslo_config import cfg
from sqlalchemy import select, update

from acceleron.api.app import create_app
from acceleron.db.models import AcceleratorRequest, AttachHandle, Claim, table, utcnow
from acceleron.db.session import Database
from acceleron.exceptions import AcceleronError
from acceleron.placement.client import PlacementClient
from acceleron.service import arqs, claim_allocation, claim_end, claims
from acceleron.service.placement import PlacementService
from acceleron.service.reconciler import Reconciler
from tests.fixtures.arqs import ADMIN, held
from tests.fixtures.waiting import wait_for

CLAIMS, ARQS, HANDLES = table(Claim), table(AcceleratorRequest), table(AttachHandle)
LATEST = {"OpenStack-API-Version": "accelerator latest"}
STEPS = ("begun", "placing", "placed", "created", "bound")


class Killed(BaseException):
    """The maker dies here."""


class DiesAfterAllocating(PlacementClient):
    def put_allocations(self, consumer: str, allocations: Any, **kwargs: Any) -> None:
        super().put_allocations(consumer, allocations, **kwargs)
        raise Killed


class DiesReading(PlacementClient):
    def get_consumer(self, consumer: str) -> Any:
        raise Killed


class DiesBeforeAllocating(PlacementClient):
    def put_allocations(self, consumer: str, allocations: Any, **kwargs: Any) -> None:
        raise Killed


def lease_passed(db: Database, consumer: str | None = None) -> None:
    """The lease of whoever is at work on the claim (of ``consumer``; all) has passed."""
    where = [] if consumer is None else [CLAIMS.c.consumer == consumer]
    with db.writer() as conn:
        conn.execute(
            update(CLAIMS).where(*where).values(lease_until=utcnow() - dt.timedelta(hours=1))
        )


def interrupted(db: Database, placement: adapter.Adapter, consumer: str, upto: str) -> None:
    """A claim of profile "fpga" whose maker died once it reached ``upto``."""
    claim, groups = claims.begin(db, ADMIN, "fpga", consumer, None)
    client: PlacementClient = {"placing": DiesBeforeAllocating, "placed": DiesAfterAllocating}.get(
        upto, PlacementClient
    )(placement)
    try:
        if upto != "begun":
            request, hostname = claim_allocation.allocate(db, client, claim, groups, "u1")
            if upto == "created":  # what bind does first: its requests, recorded
                arqs.create(
                    db,
                    ADMIN,
                    "fpga",
                    None,
                    lambda conn, uuids: claim_end.record_step(
                        conn, claim, "created", requests=uuids
                    ),
                )
            elif upto == "bound":  # the maker dies after the bind's transaction
                claims.bind(db, ADMIN, claim, request, hostname, None)
    except Killed:
        pass
    lease_passed(db, consumer)


def nothing_left(db: Database, placement: adapter.Adapter, consumer: str) -> None:
    with db.reader() as conn:
        assert conn.execute(select(CLAIMS.c.consumer, CLAIMS.c.state)).all() == []
        assert conn.execute(select(ARQS.c.uuid, ARQS.c.state)).all() == []
        assert conn.execute(select(HANDLES.c.id).where(HANDLES.c.arq_id.is_not(None))).all() == []
    assert held(placement, consumer) == {}


def api(conf: cfg.ConfigOpts, db: Database, placement: adapter.Adapter) -> FastAPI:
    app = create_app(conf, db)
    app.state.placement = PlacementService(conf, db, lambda: PlacementClient(placement))
    return app


@pytest.fixture
def client(
    conf: cfg.ConfigOpts, db: Database, placement: adapter.Adapter, published: Any
) -> Iterator[TestClient]:
    app = api(conf, db, placement)
    with TestClient(app) as test_client:
        # The API's start recovers the claims left behind: once done, it can no longer
        # race a test to the claim the test leaves behind.
        wait_for(lambda: app.state.claims_recovered is not None)
        yield test_client


@pytest.mark.parametrize("upto", STEPS)
def test_a_second_delete_undoes_a_claim_whose_maker_died(
    db: Database, placement: adapter.Adapter, client: TestClient, upto: str
) -> None:
    """Before: 409 "is being made" for ever (and the requests, handle and allocation
    held). After: the DELETE undoes it, whatever step it reached."""
    consumer = str(uuid.uuid4())
    interrupted(db, placement, consumer, upto)
    answer = client.delete(f"/v2/claims/{consumer}", headers=LATEST)
    assert answer.status_code == 204, answer.text
    nothing_left(db, placement, consumer)
    made = client.post(
        "/v2/claims",
        json={"device_profile_name": "fpga", "consumer_uuid": consumer},
        headers=LATEST,
    )
    assert made.status_code == 201, made.text
    assert client.delete(f"/v2/claims/{consumer}", headers=LATEST).status_code == 204
    nothing_left(db, placement, consumer)


def test_a_claim_being_made_is_not_released_and_a_post_takes_an_abandoned_ones_place(
    db: Database, placement: adapter.Adapter, client: TestClient
) -> None:
    consumer = str(uuid.uuid4())
    claim, _ = claims.begin(db, ADMIN, "fpga", consumer, None)  # its maker at work
    busy = client.delete(f"/v2/claims/{consumer}", headers=LATEST)
    assert busy.status_code == 409 and "is being made" in busy.text
    claim_end.let_go(db, [claim])  # the maker stopped, its ending failed (Placement away)
    body = {"device_profile_name": "fpga", "consumer_uuid": consumer}
    made = client.post("/v2/claims", json=body, headers=LATEST)
    assert made.status_code == 201, made.text
    assert client.delete(f"/v2/claims/{consumer}", headers=LATEST).status_code == 204
    nothing_left(db, placement, consumer)


def elsewhere(db: Database, consumer: str) -> None:
    """The claim's maker is another process, at work: its lease runs."""
    with db.writer() as conn:
        conn.execute(
            update(CLAIMS)
            .where(CLAIMS.c.consumer == consumer)
            .values(owner="another-process", lease_until=utcnow() + dt.timedelta(hours=1))
        )


def test_the_reconciler_undoes_a_claim_past_its_timeout(
    db: Database, placement: adapter.Adapter, published: Any
) -> None:
    consumer = str(uuid.uuid4())
    interrupted(db, placement, consumer, "created")
    elsewhere(db, consumer)
    passes = Reconciler(db, lambda: PlacementClient(placement), 0, claim_timeout=60)
    assert [leak.kind for leak in passes.run()] == ["allocation"]  # within its lease: waits
    assert claims.recover(db, PlacementClient(placement), 60, dry_run=True) == []
    lease_passed(db)
    (dry,) = claims.recover(db, PlacementClient(placement), 60, dry_run=True)
    assert dry.action == "would undo"
    found = passes.run()
    assert [(leak.kind, leak.consumer, leak.action) for leak in found] == [
        ("claim", consumer, "undone")
    ]
    assert len(found[0].requests) == 1 and found[0].allocations
    nothing_left(db, placement, consumer)
    assert passes.run() == []


def test_a_release_killed_halfway_is_finished_by_a_delete_or_the_reconciler(
    db: Database, placement: adapter.Adapter, client: TestClient
) -> None:
    """Before: a claim "bound" with no requests (its allocation left) until a DELETE."""
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    for consumer in (first, second):
        interrupted(db, placement, consumer, "bound")
        with pytest.raises(Killed):  # the DELETE's first steps, then death
            claims.end(db, DiesReading(placement), ADMIN, consumer)
        lease_passed(db, consumer)
    shown = client.get(f"/v2/claims/{first}", headers=LATEST).json()
    assert shown["state"] == "releasing" and shown["accelerator_requests"] == []
    assert client.delete(f"/v2/claims/{first}", headers=LATEST).status_code == 204
    assert held(placement, first) == {}
    found = Reconciler(db, lambda: PlacementClient(placement), 0).run()
    assert [(leak.kind, leak.consumer, leak.action) for leak in found] == [
        ("claim", second, "released")
    ]
    nothing_left(db, placement, second)


def test_the_api_undoes_at_its_start_the_claims_of_a_process_that_died(
    db: Database, conf: cfg.ConfigOpts, placement: adapter.Adapter, published: Any
) -> None:
    # One that died after its bind's transaction is made (bound): nothing to recover.
    consumers = {upto: str(uuid.uuid4()) for upto in STEPS if upto != "bound"}
    for upto, consumer in consumers.items():
        interrupted(db, placement, consumer, upto)
    app = api(conf, db, placement)
    with TestClient(app):
        wait_for(lambda: app.state.claims_recovered is not None)
    recovered = {leak.consumer: leak.action for leak in app.state.claims_recovered}
    assert recovered == dict.fromkeys(consumers.values(), "undone")
    for consumer in consumers.values():
        nothing_left(db, placement, consumer)


def test_a_maker_whose_claim_was_given_up_stops_and_leaves_nothing(
    db: Database, placement: adapter.Adapter, published: Any
) -> None:
    """Its lease ran out while it asked Placement; another process undid the claim. The
    maker's next step is refused; the claim no longer its own, it touches nothing, and
    the allocation it made after the claim was undone is the reconciler's to free."""
    consumer = str(uuid.uuid4())
    claim, groups = claims.begin(db, ADMIN, "fpga", consumer, None, timeout=60)
    undone: list[claims.Recovered] = []

    def taker() -> list[claims.Recovered]:
        lease_passed(db, consumer)
        return claims.recover(db, PlacementClient(placement), 60)

    class TakenOverMeanwhile(PlacementClient):
        def put_allocations(self, consumer: str, allocations: Any, **kwargs: Any) -> None:
            undone.extend(taker())  # before this allocation lands
            super().put_allocations(consumer, allocations, **kwargs)

    client = TakenOverMeanwhile(placement)
    request, hostname = claim_allocation.allocate(db, client, claim, groups, "u1")
    assert [r.action for r in undone] == ["undone"]
    with pytest.raises(claim_end.GivenUp):
        claims.bind(db, ADMIN, claim, request, hostname, None)
    assert claim_end.end(db, client, claim, "failed", claims.TIMEOUT, placed=True) == (
        "gone meanwhile"
    )
    assert held(placement, consumer) != {}
    passes = Reconciler(db, lambda: PlacementClient(placement), 0)
    passes.run()
    assert [(leak.kind, leak.action) for leak in passes.run()] == [("allocation", "freed")]
    nothing_left(db, placement, consumer)
    assert isinstance(claim_end.GivenUp("x"), AcceleronError)


def test_another_project_can_neither_see_nor_undo_a_stuck_claim(
    db: Database, placement: adapter.Adapter, client: TestClient
) -> None:
    """A stuck claim of project admin: a member of project p2 gets 404 on it (show and
    DELETE, the message naming nothing of it) and it stays as it was; its own project's
    DELETE undoes it."""
    consumer = str(uuid.uuid4())
    interrupted(db, placement, consumer, "created")
    other = {**LATEST, "X-Project-Id": "p2", "X-Roles": "member"}
    with db.reader() as conn:
        before = conn.execute(select(CLAIMS.c.state, CLAIMS.c.step)).all()
    for method in ("GET", "DELETE"):
        answer = client.request(method, f"/v2/claims/{consumer}", headers=other)
        assert answer.status_code == 404, answer.text
        assert "admin" not in answer.text
    with db.reader() as conn:
        assert conn.execute(select(CLAIMS.c.state, CLAIMS.c.step)).all() == before
    assert held(placement, consumer) != {}
    assert client.delete(f"/v2/claims/{consumer}", headers=LATEST).status_code == 204
    nothing_left(db, placement, consumer)
