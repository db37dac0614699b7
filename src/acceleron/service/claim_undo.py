"""Undoing one claim: from what its row records, each step idempotent (docs/claims.md,
"Interrupted claims"): its requests deleted, what it allocated taken out of its
consumer's allocations, its row deleted last.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Row, delete

from acceleron.context import RequestContext
from acceleron.db.models import Claim, table
from acceleron.db.session import Database
from acceleron.exceptions import AllocationConflict, Conflict
from acceleron.placement.client import Consumer, PlacementClient
from acceleron.service import arqs as arq_service
from acceleron.service.claim_leases import ATTEMPTS, asked_for, idle, stopped, take

LOG = logging.getLogger(__name__)
CLAIMS = table(Claim)
# The generation of a consumer that Placement made for a claim's allocation, while no one
# else has written its allocations: Placement makes a consumer at 0 and counts every
# write of its allocations, the claim's own included.
CLAIMED_GENERATION = 1


def give_up(
    db: Database,
    placement: PlacementClient | None,
    claim: Row[Any],
    placed: bool | None,
    timeout: float,
) -> None:
    """The maker undoes its claim after a failure: takes it (``releasing``) and undoes
    what its row records. ``placed``: whether this maker's allocation was made (None:
    perhaps, an answer lost). When the claim is no longer the maker's (given up and taken
    over meanwhile), the one who took it undoes what the row records, and the maker
    drops the allocation it made after that. What cannot be done now (the database
    away) is left to recovery; nothing raises."""
    asked = asked_for(claim.id)
    try:
        taken = take(db, claim, timeout, ("allocating",))
        if taken is not None:
            undo(db, placement, taken, placed)
        elif placed is not False and placement is not None and asked is not None:
            _drop(placement, claim.consumer, asked, exact=placed is None)
    except Exception:
        LOG.exception("Undoing the claim of %s failed: recovery undoes it later", claim.consumer)
    finally:
        stopped(claim.id)


def undo(
    db: Database, placement: PlacementClient | None, claim: Row[Any], placed: bool | None = None
) -> None:
    """Undo a claim this process took (``releasing``) from what its row records, each
    step idempotent: the requests it created deleted (an established claim's: every
    request of the consumer in its project too, in the same transaction), handles
    freed; the allocation it made taken out of the consumer's (``placed`` False: none
    was made; otherwise as its step says: at ``placing``, only when the consumer holds
    exactly what was asked); the row deleted last. What fails raises, and leaves the
    claim ``releasing`` for a DELETE or recovery to finish."""
    try:
        # Established, or of unknown progress: every request of the consumer too.
        instance = claim.consumer if claim.step in ("done", None) else None
        arq_service.delete_present(db, _owner_context(claim), claim.requests or (), instance)
        asked = claim.step not in ("begun",) or placed
        if placement is not None and placed is not False and asked:
            exact = claim.step == "placing" and not placed
            _drop(placement, claim.consumer, claim.allocations, exact, claim.project_id)
        with db.writer() as conn:
            conn.execute(delete(CLAIMS).where(CLAIMS.c.id == claim.id))
    finally:
        idle(claim.id)
    LOG.info("Claim of %s undone (it had reached step %s)", claim.consumer, claim.step)


def _drop(
    placement: PlacementClient,
    consumer_uuid: str,
    mine: Mapping[str, Mapping[str, int]] | None,
    exact: bool,
    project_id: str | None = None,
) -> None:
    """Take what the claim allocated out of its consumer's allocations, guarded by the
    consumer's generation (read again when it changed meanwhile). ``exact``: only when
    the consumer holds exactly that (a claim that may not have allocated never touches
    what another put there). A claim that recorded nothing (made before it would):
    every allocation of the consumer. ``project_id``: the claim's; with it, a claim
    that did allocate first drops the consumer's allocations unread, guarded by the
    generation the claim's own write left (``CLAIMED_GENERATION``): one call to
    Placement where no one else wrote them since."""
    if (
        mine is not None
        and project_id is not None
        and not exact
        and _drop_untouched(placement, consumer_uuid, mine, project_id)
    ):
        return
    for _ in range(ATTEMPTS):
        consumer = placement.get_consumer(consumer_uuid)
        held = {rp: dict(r) for rp, r in consumer.allocations.items()}
        if not held or (exact and held != mine):
            return
        kept = {} if mine is None else _without(held, mine)
        if kept == held:
            return
        try:
            placement.replace_allocations(consumer_uuid, consumer, kept)
            return
        except AllocationConflict:
            continue  # the consumer changed meanwhile: read it again
    raise Conflict(f"The allocations of {consumer_uuid} kept changing: try again.")


def _drop_untouched(
    placement: PlacementClient,
    consumer_uuid: str,
    mine: Mapping[str, Mapping[str, int]],
    project_id: str,
) -> bool:
    """Drop every allocation of the consumer if it is still as the claim's own write left
    it (then it holds ``mine`` and nothing else); False when Placement refuses (another
    writer since, or nothing left), and nothing is done."""
    untouched = Consumer(mine, CLAIMED_GENERATION, project_id, "acceleron", "INSTANCE")
    try:
        placement.replace_allocations(consumer_uuid, untouched, {})
    except AllocationConflict:
        return False
    return True


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
