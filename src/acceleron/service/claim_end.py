"""Ending a claim: one function (``end``), whatever the reason (docs/claims.md, "Ending a
claim"). The reasons (``why``):

* ``released``: ``DELETE /v2/claims/{consumer}``; the claim is established, or the
  lease of whoever was at work on it has passed (otherwise Busy: 409);
* ``failed``: its maker, after a failure while making it (the claim still its own);
* ``abandoned``: a recovery pass (the reconciler, the API's start, a POST for the same
  consumer); the lease of whoever was at work on it has passed.

The steps, each recorded in the claim's row and each safe to run again:

1. taken: ``releasing``, a new token and a lease (``claim_leases.take_for_ending``), in one
   transaction; an unknown outcome of that commit is settled by reading the row back;
2. the requests recorded in the row deleted (handles freed), with the lease renewed and
   the step rolled back to ``placed`` in the same transaction;
3. what the claim allocated taken out of its consumer's allocations: the consumer read
   (its generation), the lease renewed, the write guarded by the generation read;
4. the row deleted, while still the ender's: until then no new claim of the consumer
   can begin, so no step of this ending ever touches another claim's requests or
   allocation.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Literal

from sqlalchemy import ColumnElement, Row, delete, or_, select

from acceleron.context import RequestContext
from acceleron.db.models import Claim, table
from acceleron.db.session import Database
from acceleron.exceptions import AllocationConflict, Conflict, DatabaseUnavailable
from acceleron.placement.client import CONCURRENT_UPDATE, PlacementClient
from acceleron.service import arqs as arq_service
from acceleron.service import cleaning
from acceleron.service.claim_leases import (
    ATTEMPTS,
    let_go,
    passed,
    renew,
    take_for_ending,
    token,
)

LOG = logging.getLogger(__name__)
CLAIMS = table(Claim)
ESTABLISHED = ("binding", "bound", "failed")  # made: the claim's requests are bound
Why = Literal["released", "failed", "abandoned"]


class Busy(Conflict):
    """Another actor is at work on the claim (making or ending it) and its lease runs."""


def end(
    db: Database,
    placement: PlacementClient | None,
    claim: Row[Any],
    why: Why,
    timeout: float,
    policy: cleaning.Policy = cleaning.DEFAULT,
    placed: bool | None = None,
) -> str:
    """End the claim (as read, ``claim``) for the reason ``why``: taken, then undone from
    what its row records, its row deleted last. What happened: ``undone`` (it was being
    made), ``released`` (it was established or being ended), ``gone meanwhile`` (another
    ended it, or took it), or, for its maker (``failed``), ``made``: its row says the
    claim was made (the acknowledgement of its last commit was lost), and nothing was
    undone. ``placed`` (its maker): whether its allocation was made (None: perhaps).
    Busy (``released``) when another actor is at work on it; what fails raises, the
    lease given back so that the next DELETE or recovery finishes it."""
    taken = _take(db, claim, why, timeout)
    if isinstance(taken, str):
        return taken
    try:
        _unwind(db, placement, taken, timeout, policy, placed)
    except BaseException:
        let_go(db, [taken])
        raise
    LOG.info("Claim of %s ended (%s; it had reached step %s)", claim.consumer, why, claim.step)
    return "undone" if claim.state == "allocating" else "released"


def _condition(why: Why, timeout: float) -> ColumnElement[bool]:
    if why == "failed":  # its maker: still its own (``take`` compares the owner)
        return CLAIMS.c.state == "allocating"
    if why == "released":
        return or_(CLAIMS.c.state.in_(ESTABLISHED), passed(timeout))
    return CLAIMS.c.state.in_(("allocating", "releasing")) & passed(timeout)


def _take(db: Database, claim: Row[Any], why: Why, timeout: float) -> Row[Any] | str:
    """The claim taken (its row as taken), or what stood in the way."""
    for _ in range(ATTEMPTS):
        mine = token()
        read = select(CLAIMS).where(CLAIMS.c.id == claim.id, CLAIMS.c.consumer == claim.consumer)
        try:
            with db.writer() as conn:
                take_for_ending(conn, claim, mine, timeout, _condition(why, timeout))
                row = conn.execute(read).first()
        except DatabaseUnavailable:
            LOG.warning(
                "Taking the claim of %s: the commit's outcome is unknown; reading it back",
                claim.consumer,
            )
            with db.reader() as conn:
                row = conn.execute(read).first()
        if row is not None and row.owner == mine and row.state == "releasing":
            return row
        if row is None:
            return "gone meanwhile"
        unchanged = (row.state, row.owner) == (claim.state, claim.owner)
        if why == "failed":
            if row.state in ESTABLISHED and row.created_at == claim.created_at:
                return "made"  # this very claim (not a later one given the same row id)
            if row.state in ESTABLISHED:
                return "gone meanwhile"
            if not unchanged:
                return "gone meanwhile"  # taken over: its ender finishes it
            continue  # as it was: the take's commit did not happen
        if why == "abandoned":
            return "gone meanwhile"
        if unchanged and row.state not in ESTABLISHED:
            raise busy(row)
        claim = row  # it moved on meanwhile (made, or its lease passed): look again
    raise Conflict(f"The claim of {claim.consumer} kept changing: try again.")


def busy(claim: Row[Any]) -> Busy:
    """Another is at work on the claim: until when at most (its lease, database time)."""
    until = ""
    if claim.lease_until is not None:
        until = f" (at the latest {claim.lease_until:%Y-%m-%dT%H:%M:%S}Z, when it is given up)"
    if claim.state == "allocating":
        return Busy(f"The claim of {claim.consumer} is being made: end it once made{until}.")
    return Busy(
        f"The claim of {claim.consumer} is being ended by another request: it is gone once "
        f"that finishes{until}."
    )


def _unwind(
    db: Database,
    placement: PlacementClient | None,
    claim: Row[Any],
    timeout: float,
    policy: cleaning.Policy,
    placed: bool | None,
) -> None:
    """Steps 2 to 4 of ``end``, from what the taken row records."""
    step = claim.step
    if step in ("created", "done", None):
        # Only the requests the row records; a claim made before claims recorded them
        # (no step, or ``done`` from 0015 with no requests): the consumer's in its
        # project, as nothing says which are its own.
        instance = claim.consumer if claim.requests is None else None
        with db.writer() as conn:
            renew(conn, claim, timeout, step="placed", requests=[])
            arq_service.delete_present(
                conn, _owner_context(claim), claim.requests or (), instance, policy
            )
        step = "placed"
    if step in ("placing", "placed") and placement is not None and placed is not False:
        # At ``placing`` its allocation may not have been made: only when the consumer
        # holds exactly what was asked (nothing another put there is touched).
        _drop(db, placement, claim, exact=step == "placing" and not placed, timeout=timeout)
    with db.writer() as conn:
        conn.execute(delete(CLAIMS).where(CLAIMS.c.id == claim.id, CLAIMS.c.owner == claim.owner))


def _drop(
    db: Database, placement: PlacementClient, claim: Row[Any], exact: bool, timeout: float
) -> None:
    """Take what the claim allocated out of its consumer's allocations (a claim that
    recorded nothing, made before it would: every allocation of the consumer): the
    consumer read, the lease renewed (the claim still this ender's, so no new claim of
    the consumer exists), the write guarded by the generation read (read again when it
    changed meanwhile). ``exact``: only when the consumer holds exactly that."""
    mine: Mapping[str, Mapping[str, int]] | None = claim.allocations
    for _ in range(ATTEMPTS):
        consumer = placement.get_consumer(claim.consumer)
        held = {rp: dict(r) for rp, r in consumer.allocations.items()}
        if not held or (exact and held != mine):
            return
        kept = {} if mine is None else _without(held, mine)
        if kept == held:
            return
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
        kept = {rc: n for rc, n in kept.items() if n > 0}
        if kept:
            left[rp] = kept
    return left


def _owner_context(claim: Row[Any]) -> RequestContext:
    """The claim's project, as the service acts for it (it sees that project's only)."""
    return RequestContext("claim", project_id=claim.project_id, roles=frozenset({"member"}))
