"""Server-side claims (microversion 2.12); the detail is in docs/claims.md.

A claim gives a consumer (a uuid) the accelerators a device profile asks for. Its row
says how far it got (``step``), who acts on it (``owner``: a token) and until when
(``lease_until``, in the database's time); every step is a conditional update that holds
only while the claim is its actor's and the lease runs (``claim_end.record_step``).

From POST to bound (``make``):

1. ``begin`` inserts the row: ``allocating``, step ``begun``, the maker's token and
   lease, a deadline ``[claims] timeout`` away (409 when the consumer has a claim; one
   whose actor's lease passed is ended first);
2. ``claim_allocation.allocate`` surveys Acceleron's records, chooses from its own view
   of a few hosts (else from Placement's candidate queries, cheapest first), records
   step ``placing`` with what it asks, then writes the allocation (chosen again when
   another consumer won the capacity);
3. ``bind`` creates the requests, recording their uuids (step ``created``) in the same
   transaction, and binds them; the bind's transaction records step ``done``
   (``binding``, or ``bound``), with no owner and no lease. ``show`` derives ``bound``
   or ``failed`` (a bind failed after the answer: end it) from the requests.

A failure on the way ends the claim (``failed``), unless its row, read back, says it
was made (the answer to the bind's commit lost): then it stands.

From DELETE to gone (``end``), and whatever else ends a claim: ``claim_end.end``, the
reason a parameter (``released``: a DELETE; ``failed``: its maker after a failure;
``abandoned``: ``recover``, once its actor's lease passed). It takes the claim
(``releasing``, its own token and lease: 409 while another actor's lease runs), deletes
the requests the row records, drops what the claim allocated, and deletes the row last.
Recovery runs at the API's start, in each reconciler pass, and for a POST whose consumer
has an abandoned claim.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

from sqlalchemy import ColumnElement, Connection, Row, insert, select
from sqlalchemy.exc import IntegrityError

from acceleron.bitstreams.base import BitstreamStore
from acceleron.context import RequestContext
from acceleron.db.clock import clock
from acceleron.db.models import AcceleratorRequest, Claim, table, utcnow
from acceleron.db.session import Database
from acceleron.exceptions import AcceleronError, Conflict, Disabled, InvalidInput, NotFound
from acceleron.placement import tree
from acceleron.placement.client import AllocationRequest, PlacementClient
from acceleron.scheduler import query
from acceleron.service import arqs as arq_service
from acceleron.service import binding, claim_end, cleaning, provenance, quotas
from acceleron.service.claim_allocation import MaybeAllocated, allocate, allocations_of
from acceleron.service.claim_end import lease, let_go, passed, record_step, token
from acceleron.service.device_profiles import could_exist
from acceleron.uuids import parse

LOG = logging.getLogger(__name__)
CLAIMS, ARQS = table(Claim), table(AcceleratorRequest)
TIMEOUT = 300.0  # [claims] timeout's default
ENDED = ("undone", "released", "gone meanwhile")  # what recovery did when it succeeded
_ABANDONED = select(CLAIMS, clock().label("now")).where(
    CLAIMS.c.state.in_(("allocating", "releasing"))
)


class ClaimExists(Conflict):
    """The consumer has a claim already."""


@dataclasses.dataclass(frozen=True)
class ClaimRecord:
    """A claim as ``show`` gives it; ``allocations``: None while it is being made."""

    consumer: str
    project_id: str
    device_profile_name: str
    state: str
    hostname: str | None
    failure_reason: str | None
    arqs: tuple[arq_service.ArqRecord, ...]
    created_at: dt.datetime | None
    updated_at: dt.datetime | None
    allocations: Mapping[str, Mapping[str, int]] | None


def _claim_project(context: RequestContext, project_id: str | None) -> str:
    """The caller's project, or the one named when it reaches every project's claims."""
    if project_id is not None and project_id != context.project_id:
        if not context.all_projects:
            raise InvalidInput(
                "project_id: claiming for another project needs "
                "acceleron:claim:all_projects (admins and services)."
            )
        return project_id
    if not context.project_id:
        raise InvalidInput("project_id: the request has no project; name one.")
    return context.project_id


def begin(
    db: Database,
    context: RequestContext,
    profile_name: str,
    consumer: str,
    project_id: str | None,
    timeout: float = TIMEOUT,
) -> tuple[Row[Any], list[dict[str, str]]]:
    """Record the claim (step 1); the claim (with its ``deadline``) and its profile's
    groups. ClaimExists when the consumer has a claim already."""
    consumer = parse(consumer, "consumer_uuid")
    project = _claim_project(context, project_id)
    if not profile_name or not could_exist(profile_name):
        raise NotFound(f"Device profile {profile_name[:64]!r} not found.")
    profiles = arq_service.PROFILES
    try:
        with db.writer() as conn:
            profile = conn.execute(
                select(profiles.c.groups, profiles.c.enabled).where(profiles.c.name == profile_name)
            ).first()
            if profile is None:
                raise NotFound(f"Device profile {profile_name!r} not found.")
            if not profile.enabled:
                raise Disabled(
                    f"Device profile {profile_name!r} is disabled: it takes no new requests "
                    f"(`acceleron profile enable {profile_name}` allows them again)."
                )
            conn.execute(
                insert(CLAIMS).values(
                    consumer=consumer,
                    project_id=project,
                    device_profile_name=profile_name,
                    state="allocating",
                    step="begun",
                    owner=token(),
                    lease_until=clock(lease(timeout)),
                    created_at=utcnow(),
                )
            )
            claim = conn.execute(
                select(CLAIMS, clock(timeout).label("deadline")).where(
                    CLAIMS.c.consumer == consumer
                )
            ).one()
    except IntegrityError as error:
        raise ClaimExists(
            f"Consumer {consumer} has a claim already: end it first (DELETE /v2/claims/{consumer})."
        ) from error
    return claim, list(profile.groups)


def bind(
    db: Database,
    context: RequestContext,
    claim: Row[Any],
    request: AllocationRequest,
    hostname: str,
    store: BitstreamStore | None,
    flat_mode: tree.Options | None = None,
    limits: quotas.Limits | None = None,
    trust: provenance.Trust = provenance.DEFAULT,
) -> None:
    """Create the claim's requests and bind each to the provider Placement mapped its
    group to (step 3; the rest as for ``binding.bind``). GivenUp, nothing done, when the
    claim is no longer its maker's; on a failure the caller ends the claim."""
    owner = dataclasses.replace(context, project_id=claim.project_id)

    def created_(conn: Connection, uuids: list[str]) -> None:
        record_step(conn, claim, "created", requests=uuids)

    created = arq_service.create(db, owner, claim.device_profile_name, limits, created_)
    bindings = []
    for arq in created:
        group = arq.device_profile_group_id
        mapped = request.mappings.get(f"{query.GROUP_PREFIX}{group}")
        if not mapped:
            raise Conflict(f"Placement mapped no provider to group {group}.")
        bindings.append(arq_service.Binding(arq.uuid, hostname, mapped[0], claim.consumer))

    def bound_(conn: Connection, resolved: list[arq_service.Resolved]) -> None:
        if any(r.status == "failed" for r in resolved):
            record_step(conn, claim, "created")  # still the maker's: it undoes the claim
            return
        state = "bound" if len(resolved) == len(created) else "binding"
        values = {"state": state, "hostname": hostname, "owner": None, "lease_until": None}
        record_step(conn, claim, "done", allocations=allocations_of(request), **values)

    resolved = binding.bind(db, owner, bindings, store, flat_mode, limits, bound_, trust)
    failed = [r.arq_uuid for r in resolved if r.status == "failed"]
    if failed:
        with db.reader() as conn:
            rows = conn.execute(
                select(ARQS.c.uuid, ARQS.c.failure_reason).where(ARQS.c.uuid.in_(failed))
            )
            reasons = "; ".join(f"{r.uuid}: {r.failure_reason}" for r in rows)
        raise Conflict(f"The accelerators could not be bound: {reasons}")


def make(
    db: Database,
    placement: PlacementClient,
    context: RequestContext,
    profile_name: str,
    consumer: str,
    project_id: str | None = None,
    hostname: str | None = None,
    *,
    store: BitstreamStore | None = None,
    flat_mode: tree.Options | None = None,
    limits: quotas.Limits | None = None,
    timeout: float = TIMEOUT,
    options: tree.Options | None = None,
    trust: provenance.Trust = provenance.DEFAULT,
    policy: cleaning.Policy = cleaning.DEFAULT,
) -> ClaimRecord:
    """``POST /v2/claims``: the claim made, as ``show`` gives it; on a failure ended
    (``failed``) and the error raised, unless its row says it was made (the answer to
    the bind's commit lost: it stands). Blocking (Placement, the bitstream store)."""
    try:
        claim, groups = begin(db, context, profile_name, consumer, project_id, timeout)
    except ClaimExists:  # one whose actor's lease passed is ended, and begun again
        mine = CLAIMS.c.consumer == parse(consumer, "consumer_uuid")
        with db.reader() as conn:
            stuck = conn.execute(_ABANDONED.where(mine, passed(timeout))).first()
        if stuck is None or _recover(db, placement, stuck, timeout, policy) not in ENDED:
            raise
        claim, groups = begin(db, context, profile_name, consumer, project_id, timeout)
    user = context.user_id or "acceleron"
    placed: bool | None = False  # whether this maker's allocation was made
    try:
        request, host = allocate(
            db, placement, claim, groups, user, store, hostname, flat_mode is None, options
        )
        placed = True
        bind(db, context, claim, request, host, store, flat_mode, limits, trust)
    except BaseException as error:
        if isinstance(error, MaybeAllocated):
            placed = None
        try:  # nothing raises here: what cannot be done now is left to recovery
            found = claim_end.end(db, placement, claim, "failed", timeout, policy, placed)
        except Exception:
            LOG.exception("Ending the claim of %s failed: recovery ends it later", claim.consumer)
            let_go(db, [claim])
            found = "failed"
        if found != "made" or not isinstance(error, Exception):
            raise
        LOG.warning(
            "Claim of %s: the answer to its last commit was lost (%s), but its "
            "row says it was made: it stands",
            claim.consumer,
            error,
        )
    return show(db, context, claim.consumer)


def end(
    db: Database,
    placement: PlacementClient,
    context: RequestContext,
    consumer: str,
    timeout: float = TIMEOUT,
    policy: cleaning.Policy = cleaning.DEFAULT,
) -> None:
    """``DELETE /v2/claims/{consumer}``: an established claim, or one whose actor's
    lease passed, ended (``released``). Busy (409) while another acts on it; NotFound
    for a claim the caller does not see. Blocking (Placement)."""
    sought = claim_end.Sought(parse(consumer, "consumer_uuid"), _seen(context))
    claim_end.end(db, placement, sought, "released", timeout, policy)


@dataclasses.dataclass(frozen=True)
class Recovered:
    """A claim whose actor's lease had passed, and what a recovery pass did about it."""

    consumer: str
    state: str  # as found: allocating or releasing
    step: str | None
    allocations: Mapping[str, Mapping[str, int]]
    requests: tuple[str, ...]
    age: float  # seconds since it last moved
    action: str  # undone, released, would undo, would release, or failed: why


def recover(
    db: Database,
    placement: PlacementClient,
    timeout: float = TIMEOUT,
    *,
    dry_run: bool = False,
    policy: cleaning.Policy = cleaning.DEFAULT,
) -> list[Recovered]:
    """End every claim being made or ended whose actor's lease passed (``abandoned``);
    ``dry_run`` changes nothing. What fails is said, and the next pass tries again."""
    with db.reader() as conn:
        rows = conn.execute(_ABANDONED.where(passed(timeout)).order_by(CLAIMS.c.id)).all()
    done = []
    for claim in rows:
        verb = "undo" if claim.state == "allocating" else "release"
        action = f"would {verb}" if dry_run else _recover(db, placement, claim, timeout, policy)
        age = round((claim.now - (claim.updated_at or claim.created_at)).total_seconds(), 1)
        found = (claim.consumer, claim.state, claim.step, claim.allocations or {})
        done.append(Recovered(*found, tuple(claim.requests or ()), age, action))
    return done


def _recover(
    db: Database,
    placement: PlacementClient,
    claim: Row[Any],
    timeout: float,
    policy: cleaning.Policy,
) -> str:
    try:
        action = claim_end.end(db, placement, claim, "abandoned", timeout, policy)
    except AcceleronError as error:
        LOG.error("Could not end the claim of %s: %s", claim.consumer, error.message)
        return f"failed: {error.message}"
    if action != "gone meanwhile":
        LOG.warning(
            "Claim of %s %s: its lease had passed (step %s)", claim.consumer, action, claim.step
        )
    return action


def _seen(context: RequestContext) -> list[ColumnElement[bool]]:
    """The claims the caller sees: its project's, or every project's."""
    return [] if context.all_projects else [CLAIMS.c.project_id == (context.project_id or "")]


def lookup(db: Database, context: RequestContext, consumer: str) -> Row[Any]:
    """The consumer's claim, as the caller sees it (NotFound for another project's)."""
    consumer = parse(consumer, "consumer_uuid")
    mine = CLAIMS.c.consumer == consumer
    with db.reader() as conn:
        claim = conn.execute(select(CLAIMS).where(mine, *_seen(context))).first()
    if claim is None:
        raise NotFound(f"No claim for consumer {consumer}.")
    return claim


def show(db: Database, context: RequestContext, consumer: str) -> ClaimRecord:
    """The claim with its requests; its state follows them while they are bound."""
    claim = lookup(db, context, consumer)
    arqs = tuple(arq_service.of_instance(db, claim.consumer))
    state, reason = claim.state, claim.failure_reason
    if state == "binding" and arqs:
        failed = [a for a in arqs if a.state == "BindFailed"]
        if failed:
            state = "failed"
            reason = "; ".join(f"{a.uuid}: {a.failure_reason}" for a in failed)
        elif all(a.state == "Bound" for a in arqs):
            state = "bound"
    return ClaimRecord(
        claim.consumer,
        claim.project_id,
        claim.device_profile_name,
        state,
        claim.hostname,
        reason,
        arqs,
        claim.created_at,
        claim.updated_at,
        None if claim.state == "allocating" else claim.allocations,
    )
