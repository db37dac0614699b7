"""Server-side claims (Acceleron's extension, microversion 2.12; docs/claims.md).

A claim gives a consumer (a uuid: an instance, a job, a container) the accelerators a
device profile asks for, in one request: the API asks Placement for allocation
candidates with the query Nova would build, ranks them with spec 001's weigher (regions
already holding a wanted function first), allocates the best for the consumer (and asks
again when another consumer won the capacity meanwhile), creates the accelerator
requests and binds them. Anything failing on the way is undone: requests deleted,
allocation dropped, claim gone.

States (the ``state`` column, and what ``show`` derives from the requests):
``allocating`` (being made), ``binding`` (requests bound, some still being programmed
or prepared by the host's agent), ``bound`` (every request Bound), ``failed`` (a bind
failed after the claim was answered: end it), ``releasing`` (being ended).

From POST to bound (``make``): ``begin`` inserts the row (step ``begun``, a new token
of its maker's in ``owner``, a lease in ``lease_until``, in the database's time, renewed
at each step; its deadline ``[claims] timeout`` seconds away); ``allocate`` records
step ``placing`` with what it asks of Placement, then writes the allocation; ``bind``
creates the requests, recording their uuids (step ``created``) in the transaction that
creates them, and binds them, recording step ``done`` (``binding`` or ``bound``, no
owner, no lease) in the bind's own transaction. Each step is a conditional update that
holds only while the claim is its maker's, its lease runs and its deadline has not
passed (``claim_leases.record_step``).

From DELETE to gone, and whatever else ends a claim: ``claim_end.end``, the reason a
parameter (``released``: a DELETE; ``failed``: its maker, after a failure;
``abandoned``: recovery, once the lease of whoever was at work on it has passed). It
takes the claim (``releasing``, a token and a lease of its own, in one transaction),
undoes it from what its row records, step by step, and deletes the row last. One actor
at a time: a claim whose actor's lease runs is not taken (409). Recovery (``recover``)
runs at the API's start, in every reconciler pass, and for a POST that finds an
abandoned claim of its consumer in the way.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Row, insert, select
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
from acceleron.service.claim_leases import lease, let_go, passed, record_step, token
from acceleron.service.device_profiles import could_exist
from acceleron.uuids import parse

LOG = logging.getLogger(__name__)
CLAIMS, ARQS = table(Claim), table(AcceleratorRequest)
STATES = ("allocating", "binding", "bound", "failed", "releasing")
STEPS = ("begun", "placing", "placed", "created", "done")
TIMEOUT = 300.0  # [claims] timeout's default


class ClaimExists(Conflict):
    """The consumer has a claim already."""


@dataclasses.dataclass(frozen=True)
class ClaimRecord:
    """A claim as its caller sees it (``show``): its state follows its requests while
    they are bound; ``allocations`` what it allocated in Placement (None while being
    made, and for a claim made before claims recorded it)."""

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
    """The project a claim is for: the caller's, or the one named when the caller reaches
    every project's claims (``context.all_projects``: the API's ``claim:all_projects``)."""
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


def _consumer(value: str) -> str:
    return parse(value, "consumer_uuid")


def begin(
    db: Database,
    context: RequestContext,
    profile_name: str,
    consumer: str,
    project_id: str | None,
    timeout: float = TIMEOUT,
) -> tuple[Row[Any], list[dict[str, str]]]:
    """Record the claim (``allocating``, step ``begun``, a new token of its maker's and a
    lease, in the database's time); the claim (with its ``deadline``: ``timeout``
    seconds from now, in the database's time) and its profile's groups. ClaimExists
    when the consumer has a claim already. The caller ends its work with ``bind``, or
    ``end`` (``failed``)."""
    consumer = _consumer(consumer)
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
            now = utcnow()
            conn.execute(
                insert(CLAIMS).values(
                    consumer=consumer,
                    project_id=project,
                    device_profile_name=profile_name,
                    state="allocating",
                    step="begun",
                    owner=token(),  # its maker's, from the transaction that makes it
                    lease_until=clock(lease(timeout)),
                    created_at=now,
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
    """Create the claim's requests (their uuids recorded in the claim in the same
    transaction, step ``created``) and bind each to the provider Placement mapped its
    group to; the claim becomes ``binding`` (or ``bound`` when nothing is left to do) in
    the bind's own transaction (step ``done``). ``flat_mode``, ``limits`` and ``trust`` as
    for ``binding.bind``. GivenUp, and nothing done, when the claim is no longer its maker's;
    on any failure the caller ends the claim (``end``, ``failed``), its requests with it."""
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
        record_step(
            conn,
            claim,
            "done",
            state=state,
            hostname=hostname,
            allocations=allocations_of(request),
            owner=None,
            lease_until=None,
        )

    resolved = binding.bind(db, owner, bindings, store, flat_mode, limits, bound_, trust)
    failed = [r for r in resolved if r.status == "failed"]
    if failed:
        reasons = _reasons(db, [r.arq_uuid for r in failed])
        raise Conflict(f"The accelerators could not be bound: {reasons}")


def _reasons(db: Database, uuids: Sequence[str]) -> str:
    with db.reader() as conn:
        rows = conn.execute(
            select(ARQS.c.uuid, ARQS.c.failure_reason).where(ARQS.c.uuid.in_(uuids))
        )
        return "; ".join(f"{r.uuid}: {r.failure_reason}" for r in rows)


# --- the whole flow: a claim made, a claim ended -------------------------------------


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
    """The whole claim (``POST /v2/claims``): recorded (``begin``; a claim of the
    consumer whose actor's lease passed, in the way, ended first), the best candidate
    allocated in Placement (``allocate``, on ``hostname`` when given), its requests
    created and bound (``bind``); on any failure ended (``end``, ``failed``) and the
    error raised, unless the claim's row says it was made (the answer to the bind's
    commit lost: the claim stands). The claim as ``show`` gives it. ``store``,
    ``flat_mode``, ``limits`` and ``trust`` as for ``binding.bind``; blocking
    (Placement, the bitstream store)."""
    claim, groups = _begin(
        db, placement, context, profile_name, consumer, project_id, timeout, policy
    )
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
        if _failed(db, placement, claim, placed, timeout, policy) != "made":
            raise
        if not isinstance(error, Exception):
            raise
        LOG.warning(
            "Claim of %s: the answer to its last commit was lost (%s), but its "
            "row says it was made: it stands",
            claim.consumer,
            error,
        )
    return show(db, context, claim.consumer)


def _failed(
    db: Database,
    placement: PlacementClient,
    claim: Row[Any],
    placed: bool | None,
    timeout: float,
    policy: cleaning.Policy,
) -> str:
    """The maker ends its claim after a failure (``end``, ``failed``); what it found.
    Nothing raises: what cannot be done now (the database away) is left to the next
    DELETE or recovery, its lease given back; its allocation is never dropped unless
    the claim's row, read back, is still its maker's."""
    try:
        return claim_end.end(db, placement, claim, "failed", timeout, policy, placed)
    except Exception:
        LOG.exception("Ending the claim of %s failed: recovery ends it later", claim.consumer)
        let_go(db, [claim])
        return "failed"


def _begin(
    db: Database,
    placement: PlacementClient,
    context: RequestContext,
    profile_name: str,
    consumer: str,
    project_id: str | None,
    timeout: float,
    policy: cleaning.Policy,
) -> tuple[Row[Any], list[dict[str, str]]]:
    """``begin``; a claim in the way whose actor's lease passed is ended, and begun again."""
    try:
        return begin(db, context, profile_name, consumer, project_id, timeout)
    except ClaimExists:
        if not recover_consumer(db, placement, consumer, timeout, policy):
            raise
        return begin(db, context, profile_name, consumer, project_id, timeout)


def end(
    db: Database,
    placement: PlacementClient,
    context: RequestContext,
    consumer: str,
    timeout: float = TIMEOUT,
    policy: cleaning.Policy = cleaning.DEFAULT,
) -> None:
    """End the consumer's claim (``DELETE /v2/claims/{consumer}``: ``end``, ``released``;
    its handles cleaned as ``policy`` says): an established one, or one whose actor's
    lease passed. Busy (409) while its maker or another ender is at work on it; NotFound
    for a claim the caller does not see. Blocking (Placement)."""
    claim_end.end(db, placement, lookup(db, context, consumer), "released", timeout, policy)


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


_UNFINISHED = select(CLAIMS, clock().label("now")).where(
    CLAIMS.c.state.in_(("allocating", "releasing"))
)


def recover(
    db: Database,
    placement: PlacementClient | None,
    timeout: float = TIMEOUT,
    *,
    dry_run: bool = False,
    policy: cleaning.Policy = cleaning.DEFAULT,
) -> list[Recovered]:
    """End every claim being made or ended whose actor's lease has passed (in the
    database's time; ``end``, ``abandoned``): a claim being made is undone (its maker
    never answered 201), an ending finished. ``dry_run`` changes nothing. What fails is
    said, and the next pass tries again."""
    with db.reader() as conn:
        rows = conn.execute(_UNFINISHED.where(passed(timeout)).order_by(CLAIMS.c.id)).all()
    done = []
    for claim in rows:
        now = claim.now
        verb = "undo" if claim.state == "allocating" else "release"
        action = f"would {verb}"
        if not dry_run:
            action = _recover(db, placement, claim, timeout, policy)
        moved = claim.updated_at or claim.created_at
        done.append(
            Recovered(
                claim.consumer,
                claim.state,
                claim.step,
                claim.allocations or {},
                tuple(claim.requests or ()),
                round((now - moved).total_seconds(), 1),
                action,
            )
        )
    return done


def _recover(
    db: Database,
    placement: PlacementClient | None,
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


def recover_consumer(
    db: Database,
    placement: PlacementClient | None,
    consumer: str,
    timeout: float = TIMEOUT,
    policy: cleaning.Policy = cleaning.DEFAULT,
) -> bool:
    """End the consumer's claim if its actor's lease passed (a POST for the consumer finds
    it in the way); whether it was."""
    with db.reader() as conn:
        claim = conn.execute(
            _UNFINISHED.where(CLAIMS.c.consumer == _consumer(consumer), passed(timeout))
        ).first()
    if claim is None:
        return False
    return _recover(db, placement, claim, timeout, policy) in (
        "undone",
        "released",
        "gone meanwhile",
    )


def _visible(context: RequestContext) -> Any:
    if context.all_projects:
        return CLAIMS.c.id.is_not(None)
    return CLAIMS.c.project_id == (context.project_id or "")


def lookup(db: Database, context: RequestContext, consumer: str) -> Row[Any]:
    """The consumer's claim, as the caller sees it (NotFound for another project's)."""
    with db.reader() as conn:
        return _visible_claim(conn, context, _consumer(consumer))


def _visible_claim(conn: Connection, context: RequestContext, consumer: str) -> Row[Any]:
    claim = conn.execute(
        select(CLAIMS).where(CLAIMS.c.consumer == consumer, _visible(context))
    ).first()
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
    held = None if claim.state == "allocating" else claim.allocations
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
        held,
    )
