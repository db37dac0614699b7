"""A claim's release (``claims.end``, what ``DELETE /v2/claims/{consumer}`` runs), on
every backend, against the real Placement (in-process): it takes out of the consumer's
allocations what the claim allocated and nothing else, even when the consumer's
allocations change between the release's read and its write; its requests and handles
are gone; another project's caller can neither see nor release it; a second release
finds nothing. And what it costs: its statements and transactions, its Placement calls."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from keystoneauth1 import adapter
from sqlalchemy import Connection, Engine, event, select, update

from acceleron.context import RequestContext
from acceleron.db.models import AcceleratorRequest, AttachHandle, Claim, table
from acceleron.db.session import Database
from acceleron.exceptions import NotFound
from acceleron.placement.client import PlacementClient
from acceleron.service import claims
from tests.fixtures.arqs import ADMIN, held
from tests.fixtures.placement import CountingAdapter, Meddler

CLAIMS, ARQS, HANDLES = table(Claim), table(AcceleratorRequest), table(AttachHandle)
OTHER = RequestContext("req", "u2", "p2", frozenset({"member"}))

pytestmark = pytest.mark.placement


def claimed(db: Database, placement: adapter.Adapter) -> claims.ClaimRecord:
    """A claim of profile "fpga" (one region of host-1), bound."""
    made = claims.make(db, PlacementClient(placement), ADMIN, "fpga", str(uuid.uuid4()))
    assert made.state == "bound" and len(made.arqs) == 1
    return made


def nothing_left(db: Database, consumer: str) -> None:
    with db.reader() as conn:
        assert conn.execute(select(CLAIMS.c.id).where(CLAIMS.c.consumer == consumer)).all() == []
        assert conn.execute(select(ARQS.c.uuid)).all() == []
        assert conn.execute(select(HANDLES.c.id).where(HANDLES.c.arq_id.is_not(None))).all() == []


def test_a_release_takes_out_the_claim_s_allocation_alone_when_the_consumer_changes_meanwhile(
    db: Database, placement: adapter.Adapter, published: Any
) -> None:
    """Nova adds the consumer's VCPUs on the compute node just before the release's
    first write (refused: the consumer is no longer at the generation the claim left),
    and again between its read of the consumer and its next write (refused: another
    generation); the release reads again, and the consumer keeps the VCPUs alone."""
    made = claimed(db, placement)
    compute = published["compute"]

    def nova_adds_vcpus(inner: adapter.Adapter, consumer: str) -> None:
        client = PlacementClient(inner)
        read = client.get_consumer(consumer)
        client.replace_allocations(consumer, read, {**read.allocations, compute: {"VCPU": 2}})

    meddler = Meddler(placement, f"/allocations/{made.consumer}", nova_adds_vcpus, times=2)
    claims.end(db, PlacementClient(meddler), ADMIN, made.consumer)
    assert meddler.times == 0  # Nova did write in between
    assert held(placement, made.consumer) == {compute: {"VCPU": 2}}
    nothing_left(db, made.consumer)


def test_a_release_is_its_project_s_and_a_second_one_finds_nothing(
    db: Database, placement: adapter.Adapter, published: Any
) -> None:
    made = claimed(db, placement)
    before = held(placement, made.consumer)
    with pytest.raises(NotFound) as hidden:
        claims.end(db, PlacementClient(placement), OTHER, made.consumer)
    assert "admin" not in hidden.value.message
    assert held(placement, made.consumer) == before
    claims.end(db, PlacementClient(placement), ADMIN, made.consumer)
    assert held(placement, made.consumer) == {}
    nothing_left(db, made.consumer)
    with pytest.raises(NotFound):
        claims.end(db, PlacementClient(placement), ADMIN, made.consumer)


@pytest.fixture
def transactions(db: Database) -> Iterator[list[str]]:
    """The transactions this thread begins on Acceleron's database (readers' and
    writers'), each as the first statement it runs; Placement's own are not counted."""
    began: list[str] = []
    thread = threading.current_thread()

    def begin(conn: Connection) -> None:
        if threading.current_thread() is thread and conn.engine.url == db.url:
            began.append("")

    def statement(conn: Connection, *args: Any) -> None:
        verb = str(args[1]).split(None, 1)[0].upper()
        if began and not began[-1] and conn.engine.url == db.url and verb != "BEGIN":
            began[-1] = verb  # (SQLite's BEGIN is a statement of its own)

    event.listen(Engine, "begin", begin)
    event.listen(Engine, "before_cursor_execute", statement)
    yield began
    event.remove(Engine, "begin", begin)
    event.remove(Engine, "before_cursor_execute", statement)


def test_what_a_release_costs(
    db: Database, placement: adapter.Adapter, published: Any, transactions: list[str]
) -> None:
    """A bound claim of one request: three transactions (the claim read and taken; its
    requests deleted, its lease renewed; its row deleted: the write in Placement follows
    the renewal by far less than half a lease) and, in Placement, the consumer read and
    written at the generation read (never one assumed: a consumer that was made again
    since is at that generation too)."""
    made = claimed(db, placement)
    counted = CountingAdapter(placement)
    transactions.clear()
    claims.end(db, PlacementClient(counted), ADMIN, made.consumer)
    assert transactions == ["SELECT", "UPDATE", "DELETE"], transactions
    assert [c.route for c in counted.calls] == [
        "GET /allocations/{uuid}",
        "PUT /allocations/{uuid}",
    ]
    assert held(placement, made.consumer) == {}


def test_a_claim_made_before_claims_recorded_their_requests_ends_whole(
    db: Database, placement: adapter.Adapter, published: Any
) -> None:
    """A claim established before 0015 (its step ``done``, as the migration marks it, and
    no requests recorded): its ending deletes the consumer's requests in its project, as
    nothing says which are its own, and drops its allocation."""
    made = claimed(db, placement)
    with db.writer() as conn:
        conn.execute(update(CLAIMS).values(requests=None))
    claims.end(db, PlacementClient(placement), ADMIN, made.consumer)
    assert held(placement, made.consumer) == {}
    nothing_left(db, made.consumer)
