"""Who is at work on a claim, and until when, in the database's time (docs/claims.md,
"Interrupted claims").

A claim being made or ended names its one actor (``owner``: a random token, new for
each making or ending, written in the transaction that takes the claim) and until when
it may act (``lease_until``), both in the claim's row. Time is the database's
(``clock``): every lease is written and compared in SQL, so the clocks of the API
processes never matter, and neither do their host names or process ids. A lease runs
``STEP`` seconds (at most ``[claims] timeout``) from its actor's last step: the actor
renews it at each step (``record_step``, ``renew``) and gives it back when it stops
without finishing (``let_go``); a claim is abandoned only once its lease has passed. A
maker's steps also hold only until its deadline (``[claims] timeout`` after it began,
in the database's time: ``deadline`` in the row ``begin`` returns).
No process-wide state: what a process knows of a claim is the row it holds.
"""

from __future__ import annotations

import logging
import uuid as uuidlib
from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, Connection, Row, and_, bindparam, or_, update

from acceleron.db.clock import clock
from acceleron.db.models import Claim, Timestamp, table
from acceleron.db.session import Database
from acceleron.exceptions import AcceleronError, Conflict

LOG = logging.getLogger(__name__)
CLAIMS = table(Claim)
ATTEMPTS = 5  # a claim or an allocation read again, at most, when it changed meanwhile
# Seconds a lease runs from its actor's last step: longer than any one step takes (a
# transaction, a call to Placement), short enough that a claim whose actor stopped
# (killed, or its database away when it would give its lease back) waits little.
STEP = 20.0


class GivenUp(Conflict):
    """The claim is no longer this actor's: its lease passed and another took it over,
    or (its maker) its ending began. The actor stops."""


def lease(timeout: float) -> float:
    """Seconds a lease runs from a step, ``[claims] timeout`` being ``timeout``."""
    return min(STEP, timeout)


def token() -> str:
    """A new actor's token: unguessable, unique to one making or ending of one claim."""
    return uuidlib.uuid4().hex


def passed(timeout: float) -> ColumnElement[bool]:
    """The claim's lease has passed (one from before leases: ``timeout`` after it began)."""
    return or_(
        CLAIMS.c.lease_until <= clock(),
        and_(CLAIMS.c.lease_until.is_(None), CLAIMS.c.created_at <= clock(-timeout)),
    )


def _holds(claim: Row[Any], state: str) -> ColumnElement[bool]:
    """The row is still ``claim``'s actor's, in ``state``, and its lease runs."""
    return and_(
        CLAIMS.c.id == claim.id,
        CLAIMS.c.state == state,
        CLAIMS.c.owner == claim.owner,
        CLAIMS.c.lease_until > clock(),
    )


def record_step(conn: Connection, claim: Row[Any], step: str, **values: Any) -> None:
    """Record how far the maker got, and renew its lease, in the caller's transaction:
    only while the claim is still being made by it, within its lease and before its
    deadline (GivenUp otherwise, and the caller's transaction is undone)."""
    deadline = bindparam(None, claim.deadline, type_=Timestamp, unique=True)
    renewed = {"lease_until": clock(STEP), "updated_at": clock(), **values}
    done = conn.execute(
        update(CLAIMS)
        .where(_holds(claim, "allocating"), clock() < deadline)
        .values(step=step, **renewed)
    )
    if done.rowcount != 1:
        raise GivenUp(
            f"The claim of {claim.consumer} was given up while being made (it took longer "
            f"than [claims] timeout allows, or it is being ended): claim again."
        )


def renew(conn: Connection, claim: Row[Any], timeout: float, **values: Any) -> None:
    """Renew the ending actor's lease (``timeout`` seconds from the database's now) and
    record ``values``, in the caller's transaction; GivenUp when the claim is no longer
    its own (its lease passed and another took it over)."""
    done = conn.execute(
        update(CLAIMS)
        .where(_holds(claim, "releasing"))
        .values(lease_until=clock(lease(timeout)), updated_at=clock(), **values)
    )
    if done.rowcount != 1:
        raise GivenUp(
            f"The ending of the claim of {claim.consumer} was taken over by another "
            f"(it outlived [claims] timeout): that one finishes it."
        )


def take_for_ending(
    conn: Connection, claim: Row[Any], mine: str, timeout: float, where: ColumnElement[bool]
) -> bool:
    """Take the claim to end it, in the caller's transaction: ``releasing``, the new
    token ``mine`` and a lease of ``timeout`` seconds, if it is still as ``claim`` was
    read (same consumer, state and owner: a row id SQLite may give again) and ``where``
    holds; whether it was."""
    done = conn.execute(
        update(CLAIMS)
        .where(
            CLAIMS.c.id == claim.id,
            CLAIMS.c.consumer == claim.consumer,
            CLAIMS.c.state == claim.state,
            CLAIMS.c.owner.is_not_distinct_from(claim.owner),
            where,
        )
        .values(
            state="releasing", owner=mine, lease_until=clock(lease(timeout)), updated_at=clock()
        )
    )
    return bool(done.rowcount == 1)


def let_go(db: Database, claims: Sequence[Row[Any]]) -> None:
    """Give back the actor's leases (it stops without finishing: its ending failed, the
    database or Placement away), so that the next DELETE or recovery pass takes the claims
    at once rather than after their lease. Best effort: what cannot be written now, the
    lease's end settles."""
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
