"""Who acts on a claim, until when, and how a claim ends (docs/claims.md, "Ending a
claim" and "Interrupted claims").

A claim being made or ended names its one actor (``owner``: a token new for each making
or ending) and its lease (``lease_until``), both written and compared in SQL in the
database's time: no process clock, host name or PID matters, and no process-wide state.
``end`` takes the claim (``releasing``, a token and a lease of its own), deletes the
requests its row records, drops what it allocated, and deletes the row last.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid as uuidlib
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from sqlalchemy import ColumnElement, Connection, Row, and_, bindparam, delete, or_, select, update

from acceleron.context import RequestContext
from acceleron.db.clock import clock
from acceleron.db.models import Claim, Timestamp, table
from acceleron.db.session import Database
from acceleron.exceptions import (
    AcceleronError,
    AllocationConflict,
    Conflict,
    DatabaseUnavailable,
    NotFound,
)
from acceleron.placement.client import CONCURRENT_UPDATE, PlacementClient
from acceleron.service import arqs as arq_service
from acceleron.service import cleaning

LOG = logging.getLogger(__name__)
CLAIMS = table(Claim)
ESTABLISHED = ("binding", "bound", "failed")  # made: the claim's requests are bound
ATTEMPTS = 5  # a claim or an allocation read again, at most, when it changed meanwhile
# Seconds a lease runs from its actor's last step: longer than any one step takes, short
# enough that a claim whose actor stopped waits little.
STEP = 20.0
Why = Literal["released", "failed", "abandoned"]


class Busy(Conflict):
    """Another actor is at work on the claim (making or ending it) and its lease runs."""


class GivenUp(Conflict):
    """The claim is no longer this actor's (its lease passed and another took it, or its
    ending began): the actor stops."""


def lease(timeout: float) -> float:
    return min(STEP, timeout)


def token() -> str:
    return uuidlib.uuid4().hex


def passed(timeout: float) -> ColumnElement[bool]:
    """The claim's lease has passed (one from before leases: ``timeout`` after it began)."""
    return or_(
        CLAIMS.c.lease_until <= clock(),
        and_(CLAIMS.c.lease_until.is_(None), CLAIMS.c.created_at <= clock(-timeout)),
    )


def _act(
    conn: Connection, claim: Row[Any], state: str, gone: str, /, *where: Any, **values: Any
) -> None:
    """Write ``values`` while the row is still ``claim``'s actor's, in ``state``, within
    its lease (and ``where``); GivenUp (``gone``) otherwise."""
    done = conn.execute(
        update(CLAIMS)
        .where(
            CLAIMS.c.id == claim.id,
            CLAIMS.c.state == state,
            CLAIMS.c.owner == claim.owner,
            CLAIMS.c.lease_until > clock(),
            *where,
        )
        .values(updated_at=clock(), **values)
    )
    if done.rowcount != 1:
        raise GivenUp(gone.format(claim.consumer))


def record_step(conn: Connection, claim: Row[Any], step: str, **values: Any) -> None:
    """Record how far the maker got and renew its lease, in the caller's transaction,
    while the claim is its own and before its deadline."""
    deadline = bindparam(None, claim.deadline, type_=Timestamp, unique=True)
    gone = (
        "The claim of {} was given up while being made (it took longer than [claims] "
        "timeout allows, or it is being ended): claim again."
    )
    values = {"lease_until": clock(STEP), **values}
    _act(conn, claim, "allocating", gone, clock() < deadline, step=step, **values)


def renew(conn: Connection, claim: Row[Any], timeout: float, **values: Any) -> None:
    """Renew the ender's lease and record ``values``, in the caller's transaction."""
    gone = (
        "The ending of the claim of {} was taken over by another (it outlived [claims] "
        "timeout): that one finishes it."
    )
    _act(conn, claim, "releasing", gone, lease_until=clock(lease(timeout)), **values)


def let_go(db: Database, claims: Sequence[Row[Any]]) -> None:
    """Give back the actor's leases (it stops unfinished), so that the next DELETE or
    recovery takes the claims at once. Best effort: else the lease passes."""
    try:
        with db.writer() as conn:
            for claim in claims:
                conn.execute(
                    update(CLAIMS)
                    .where(CLAIMS.c.id == claim.id, CLAIMS.c.owner == claim.owner)
                    .values(lease_until=clock(-1))
                )
    except AcceleronError as error:
        LOG.warning("Could not give back the lease of a claim (%s): it passes", error.message)


@dataclasses.dataclass(frozen=True)
class Sought:
    """A claim a caller releases: its consumer, and what limits the claims it sees."""

    consumer: str
    seen: Sequence[ColumnElement[bool]] = ()


def end(
    db: Database,
    placement: PlacementClient,
    claim: Row[Any] | Sought,
    why: Why,
    timeout: float,
    policy: cleaning.Policy = cleaning.DEFAULT,
    placed: bool | None = None,
) -> str:
    """End the claim for ``why``: ``released`` (a DELETE, the claim ``Sought``),
    ``failed`` (its maker; ``placed``: whether its allocation was made, None: perhaps)
    or ``abandoned`` (recovery, the claim as read). Returns ``undone``, ``released``,
    ``gone meanwhile`` or (its maker, the row saying it was made after all) ``made``.
    Busy when another acts on it, NotFound when a release finds none; on a failure the
    lease is given back and the error raised."""
    taken = _take(db, claim, why, timeout)
    if isinstance(taken, str):
        return taken
    before, claim = taken
    try:
        _unwind(db, placement, claim, timeout, policy, placed)
    except BaseException:
        let_go(db, [claim])
        raise
    LOG.info("Claim of %s ended (%s; it had reached step %s)", claim.consumer, why, claim.step)
    return "undone" if before.state == "allocating" else "released"


def _busy(claim: Row[Any]) -> Busy:
    until = ""
    if claim.lease_until is not None:
        until = f" (at the latest {claim.lease_until:%Y-%m-%dT%H:%M:%S}Z, when it is given up)"
    if claim.state == "allocating":
        return Busy(f"The claim of {claim.consumer} is being made: end it once made{until}.")
    return Busy(
        f"The claim of {claim.consumer} is being ended by another request: it is gone once "
        f"that finishes{until}."
    )


def _condition(why: Why, timeout: float) -> ColumnElement[bool]:
    """When a claim may be taken for ``why`` (its maker's: the owner compared besides)."""
    if why == "failed":
        return CLAIMS.c.state == "allocating"
    if why == "released":
        return or_(CLAIMS.c.state.in_(ESTABLISHED), passed(timeout))
    return CLAIMS.c.state.in_(("allocating", "releasing")) & passed(timeout)


def _refusal(row: Row[Any] | None, claim: Row[Any] | Sought, why: Why) -> str | None:
    """What stands in the way of taking ``row`` (the claim now, ``takeable``: whether
    ``_condition`` holds) for ``why``: None (nothing), ``made`` or ``gone meanwhile``;
    Busy and NotFound raised."""
    if isinstance(claim, Sought):  # released
        if row is None:
            raise NotFound(f"No claim for consumer {claim.consumer}.")
        if not row.takeable:
            raise _busy(row)
        return None
    if row is None:
        return "gone meanwhile"
    if why == "failed" and row.owner != claim.owner:  # no longer its maker's
        made = row.state in ESTABLISHED and row.created_at == claim.created_at
        return "made" if made else "gone meanwhile"  # made: this very claim, bound
    return None if row.takeable else "gone meanwhile"


def _take(
    db: Database, claim: Row[Any] | Sought, why: Why, timeout: float
) -> tuple[Row[Any], Row[Any]] | str:
    """The claim as found and as taken (``releasing``, a new token and a lease), read and
    taken in one transaction; or what stood in the way. A lost commit is read back."""
    if isinstance(claim, Sought):
        where = (CLAIMS.c.consumer == claim.consumer, *claim.seen)
    else:
        where = (CLAIMS.c.id == claim.id, CLAIMS.c.consumer == claim.consumer)
    condition = _condition(why, timeout)
    read = select(CLAIMS, condition.label("takeable")).where(*where)
    for _ in range(ATTEMPTS):
        mine, row = token(), None
        try:
            with db.writer() as conn:
                row = conn.execute(read).first()
                if (refused := _refusal(row, claim, why)) is not None or row is None:
                    return refused or "gone meanwhile"
                conn.execute(
                    update(CLAIMS)
                    .where(CLAIMS.c.id == row.id, CLAIMS.c.state == row.state, condition)
                    .where(CLAIMS.c.owner.is_not_distinct_from(row.owner))
                    .values(state="releasing", owner=mine, lease_until=clock(lease(timeout)))
                    .values(updated_at=clock())
                )
                taken = conn.execute(read).first()
        except DatabaseUnavailable:
            LOG.warning("Taking the claim of %s: commit unknown; reading back", claim.consumer)
            with db.reader() as conn:
                taken = conn.execute(read).first()
        if row is not None and taken is not None and taken.owner == mine:
            return row, taken
    raise Conflict(f"The claim of {claim.consumer} kept changing: try again.")


def _unwind(
    db: Database,
    placement: PlacementClient,
    claim: Row[Any],
    timeout: float,
    policy: cleaning.Policy,
    placed: bool | None,
) -> None:
    """The taken claim undone from what its row records, its row deleted last."""
    step, renewed = claim.step, None
    if step in ("created", "done", None):
        # The requests the row records; a claim from before it recorded them: the
        # consumer's in its project.
        instance = claim.consumer if claim.requests is None else None
        owner = RequestContext("claim", project_id=claim.project_id, roles=frozenset({"member"}))
        renewed = time.monotonic()
        with db.writer() as conn:
            renew(conn, claim, timeout, step="placed", requests=[])
            arq_service.delete_present(conn, owner, claim.requests or (), instance, policy)
        step = "placed"
    if step in ("placing", "placed") and placed is not False:
        # At ``placing`` its allocation may not be made: only an exact match is dropped.
        exact = step == "placing" and not placed
        _drop(db, placement, claim, exact, timeout, renewed)
    with db.writer() as conn:
        conn.execute(delete(CLAIMS).where(CLAIMS.c.id == claim.id, CLAIMS.c.owner == claim.owner))


def _drop(
    db: Database,
    placement: PlacementClient,
    claim: Row[Any],
    exact: bool,
    timeout: float,
    renewed: float | None,
) -> None:
    """Take what the claim allocated (all, for a claim that recorded nothing) out of its
    consumer's allocations, the write guarded by the generation read; ``exact``: only
    when the consumer holds exactly that. Each write is made with half a lease left at
    least: renewed first unless it was renewed since ``renewed`` (``time.monotonic()``
    before that renewal) and half a lease has not gone by (a lease runs in the
    database's time, at the rate of this clock; no one takes a claim whose lease runs)."""
    mine: Mapping[str, Mapping[str, int]] | None = claim.allocations
    for _ in range(ATTEMPTS):
        consumer = placement.get_consumer(claim.consumer)
        held = {rp: dict(r) for rp, r in consumer.allocations.items()}
        if not held or (exact and held != mine):
            return
        kept = {} if mine is None else _without(held, mine)
        if kept == held:
            return
        if renewed is None or time.monotonic() - renewed > lease(timeout) / 2:
            renewed = time.monotonic()
            with db.writer() as conn:
                renew(conn, claim, timeout)
        try:
            placement.replace_allocations(claim.consumer, consumer, kept)
            return
        except AllocationConflict as error:
            if error.code != CONCURRENT_UPDATE:  # refused, not changed: say why
                raise Conflict(
                    f"Placement refused to free what {claim.consumer} holds: {error}"
                ) from error
            continue  # the consumer changed meanwhile: read it again
    raise Conflict(f"The allocations of {claim.consumer} kept changing: try again.")


def _without(
    held: Mapping[str, Mapping[str, int]], mine: Mapping[str, Mapping[str, int]]
) -> dict[str, dict[str, int]]:
    """``held`` less ``mine``, by provider and class (nothing below zero, no empty one)."""
    left: dict[str, dict[str, int]] = {}
    for rp, resources in held.items():
        kept = {rc: n - mine.get(rp, {}).get(rc, 0) for rc, n in resources.items()}
        if any(n > 0 for n in kept.values()):
            left[rp] = {rc: n for rc, n in kept.items() if n > 0}
    return left
