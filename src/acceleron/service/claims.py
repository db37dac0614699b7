"""Server-side claims (Acceleron's extension, microversion 2.12; docs/claims.md).

A claim gives a consumer (a uuid: an instance, a job, a container) the accelerators a
device profile asks for, in one request: the API asks Placement for allocation
candidates with the query Nova would build, ranks them with spec 001's weigher (regions
already holding a wanted function first), allocates the best for the consumer (and asks
again when another consumer won the capacity meanwhile), creates the accelerator
requests and binds them. Anything failing on the way is undone: requests deleted,
allocation dropped, claim gone.

States (the ``state`` column, and what ``show`` derives from the requests):
``allocating`` (Placement is asked), ``binding`` (requests bound, some still being
programmed or prepared by the host's agent), ``bound`` (every request Bound), ``failed``
(a bind failed after the claim was answered: release it), ``releasing`` (being undone:
a release, or a claim given up). Releasing deletes the claim.

Whatever is killed when, a claim ends in a state it can leave. Its row records how far
it got (``step``: ``begun``; ``placing``, with the allocation asked of Placement in
``allocations``; ``created``, with its requests' uuids in ``requests``, written in the
transaction that creates them; ``done``, written in the transaction that binds them),
which process is at work on it (``owner``) and until when (``lease_until``, ``[claims]
timeout`` after it began). Each step of its maker is a conditional update that holds
only while the claim is the maker's and its lease runs: a claim given up can no longer
move on. A claim whose maker is gone (its lease passed; or its process, on this
machine, died or gave up) is taken over with a conditional update (``releasing``) and
undone from its record, by a DELETE, a POST for the same consumer, the reconciler's
passes and the API's start (``recover``). Undoing is idempotent: requests recorded (or,
established, the consumer's) deleted, handles freed; the allocation recorded taken out
of the consumer's, guarded by its generation; the row deleted last.
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
from acceleron.db.models import AcceleratorRequest, Claim, table, utcnow
from acceleron.db.session import Database
from acceleron.exceptions import AcceleronError, Conflict, Disabled, InvalidInput, NotFound
from acceleron.placement import tree
from acceleron.placement.client import AllocationRequest, PlacementClient
from acceleron.scheduler import query
from acceleron.service import arqs as arq_service
from acceleron.service import binding, quotas
from acceleron.service.claim_allocation import MaybeAllocated, allocate, held
from acceleron.service.claim_leases import (
    ATTEMPTS,
    abandoned,
    record_step,
    seize,
    stopped,
    take,
    worker,
    working,
)
from acceleron.service.claim_undo import give_up, undo
from acceleron.service.device_profiles import could_exist
from acceleron.uuids import parse

LOG = logging.getLogger(__name__)
CLAIMS, ARQS = table(Claim), table(AcceleratorRequest)
STATES = ("allocating", "binding", "bound", "failed", "releasing")
ESTABLISHED = ("binding", "bound", "failed")  # made: the consumer's requests are bound
STEPS = ("begun", "placing", "created", "done")
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


def _owner(context: RequestContext, project_id: str | None) -> str:
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
    """Record the claim (``allocating``, step ``begun``, this process at work on it for
    ``timeout`` seconds at most); the claim and its profile's groups. ClaimExists when
    the consumer has a claim already. The caller ends its work with ``undo`` or
    ``bind``, and says it stopped with ``stopped``."""
    consumer = _consumer(consumer)
    project = _owner(context, project_id)
    if not profile_name or not could_exist(profile_name):
        raise NotFound(f"Device profile {profile_name[:64]!r} not found.")
    profiles = arq_service.PROFILES
    began: int | None = None
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
                    owner=worker(),
                    lease_until=now + dt.timedelta(seconds=timeout),
                    created_at=now,
                )
            )
            claim = conn.execute(select(CLAIMS).where(CLAIMS.c.consumer == consumer)).one()
            # At work on it before the commit: a recovery pass of this process that
            # reads the claim once committed never takes it for one left behind.
            began = claim.id
            working(began)
    except BaseException as error:
        if began is not None:
            stopped(began)
        if isinstance(error, IntegrityError):
            raise ClaimExists(
                f"Consumer {consumer} has a claim already: release it first (DELETE "
                f"/v2/claims/{consumer})."
            ) from error
        raise
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
) -> None:
    """Create the claim's requests (their uuids recorded in the claim in the same
    transaction, step ``created``) and bind each to the provider Placement mapped its
    group to; the claim becomes ``binding`` (or ``bound`` when nothing is left to do) in
    the bind's own transaction (step ``done``). ``flat_mode`` and ``limits`` as for
    ``binding.bind``. GivenUp, and nothing done, when the claim is no longer its maker's;
    on any failure the caller undoes the claim (``give_up``), its requests with it."""
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
        record_step(conn, claim, "done", state=state, hostname=hostname, allocations=held(request),
              owner=None, lease_until=None)  # fmt: skip

    resolved = binding.bind(db, owner, bindings, store, flat_mode, limits, bound_)
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


# --- the whole flow: a claim made, a claim released ----------------------------------


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
) -> ClaimRecord:
    """The whole claim (``POST /v2/claims``): recorded (``begin``; a claim of the
    consumer whose maker is gone, in the way, undone first), the best candidate
    allocated in Placement (``allocate``, on ``hostname`` when given), its requests
    created and bound (``bind``); on any failure undone (``give_up``) and the error
    raised. The claim as ``show`` gives it. ``store``, ``flat_mode`` and ``limits`` as
    for ``binding.bind``; blocking (Placement, the bitstream store)."""
    claim, groups = _begin(db, placement, context, profile_name, consumer, project_id, timeout)
    user = context.user_id or "acceleron"
    placed: bool | None = False  # whether this maker's allocation was made
    try:
        request, host = allocate(
            db, placement, claim, groups, user, store, hostname, flat_mode is None, options
        )
        placed = True
        bind(db, context, claim, request, host, store, flat_mode, limits)
    except BaseException as error:
        if isinstance(error, MaybeAllocated):
            placed = None
        give_up(db, placement, claim, placed, timeout)
        raise
    finally:
        stopped(claim.id)
    return show(db, context, claim.consumer)


def _begin(
    db: Database,
    placement: PlacementClient,
    context: RequestContext,
    profile_name: str,
    consumer: str,
    project_id: str | None,
    timeout: float,
) -> tuple[Row[Any], list[dict[str, str]]]:
    """``begin``; a claim in the way whose maker is gone is undone, and begun again."""
    try:
        return begin(db, context, profile_name, consumer, project_id, timeout)
    except ClaimExists:
        if not recover_consumer(db, placement, consumer, timeout):
            raise
        return begin(db, context, profile_name, consumer, project_id, timeout)


def remove(
    db: Database,
    placement: PlacementClient,
    context: RequestContext,
    consumer: str,
    timeout: float = TIMEOUT,
) -> None:
    """Release the consumer's claim (``DELETE /v2/claims/{consumer}``): taken
    (``release``) and undone (``undo``). Blocking (Placement)."""
    claim = release(db, context, consumer, timeout)
    try:
        undo(db, placement, claim)
    finally:
        stopped(claim.id)


@dataclasses.dataclass(frozen=True)
class Recovered:
    """A claim whose maker was gone, and what a recovery pass did about it."""

    consumer: str
    state: str  # as found: allocating or releasing
    step: str | None
    allocations: Mapping[str, Mapping[str, int]]
    requests: tuple[str, ...]
    age: float  # seconds since it last moved
    action: str  # undone, released, would undo, would release, or failed: why


_UNFINISHED = select(CLAIMS).where(CLAIMS.c.state.in_(("allocating", "releasing")))


def recover(
    db: Database,
    placement: PlacementClient | None,
    timeout: float = TIMEOUT,
    *,
    dry_run: bool = False,
    now: dt.datetime | None = None,
) -> list[Recovered]:
    """Finish or undo every claim being made or released whose maker is gone (see
    ``abandoned``): a claim being made is undone (its maker never answered 201), a
    release finished. ``dry_run`` changes nothing. What fails is said, and the next
    pass tries again."""
    now = now or utcnow()
    with db.reader() as conn:
        rows = conn.execute(_UNFINISHED.order_by(CLAIMS.c.id)).all()
    done = []
    for claim in rows:
        if not abandoned(claim, timeout, now):
            continue
        verb = "undo" if claim.state == "allocating" else "release"
        action = f"would {verb}"
        if not dry_run:
            action = _recover(db, placement, claim, timeout)
        moved = claim.updated_at or claim.created_at
        done.append(Recovered(claim.consumer, claim.state, claim.step, claim.allocations or {},
                              tuple(claim.requests or ()), round((now - moved).total_seconds(), 1),
                              action))  # fmt: skip
    return done


def _recover(
    db: Database, placement: PlacementClient | None, claim: Row[Any], timeout: float
) -> str:
    try:
        taken = take(db, claim, timeout, ("allocating", "releasing"))
        if taken is None:
            return "gone meanwhile"
        undo(db, placement, taken)
    except AcceleronError as error:
        LOG.error("Could not undo the claim of %s: %s", claim.consumer, error.message)
        return f"failed: {error.message}"
    LOG.warning("Claim of %s %s: its maker was gone (step %s)", claim.consumer,
                "undone" if claim.state == "allocating" else "released", claim.step)  # fmt: skip
    return "undone" if claim.state == "allocating" else "released"


def recover_consumer(
    db: Database, placement: PlacementClient | None, consumer: str, timeout: float = TIMEOUT
) -> bool:
    """Undo the consumer's claim if its maker is gone (a POST for the consumer finds it in
    the way); whether it was."""
    with db.reader() as conn:
        claim = conn.execute(_UNFINISHED.where(CLAIMS.c.consumer == _consumer(consumer))).first()
    if claim is None or not abandoned(claim, timeout):
        return False
    return _recover(db, placement, claim, timeout) in ("undone", "released", "gone meanwhile")


def _visible(context: RequestContext) -> Any:
    if context.all_projects:
        return CLAIMS.c.id.is_not(None)
    return CLAIMS.c.project_id == (context.project_id or "")


def lookup(db: Database, context: RequestContext, consumer: str) -> Row[Any]:
    """The consumer's claim, as the caller sees it (NotFound for another project's)."""
    with db.reader() as conn:
        return _seen(conn, context, _consumer(consumer))


def _seen(conn: Connection, context: RequestContext, consumer: str) -> Row[Any]:
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
    return ClaimRecord(claim.consumer, claim.project_id, claim.device_profile_name, state,
                       claim.hostname, reason, arqs, claim.created_at, claim.updated_at,
                       held)  # fmt: skip


def release(
    db: Database, context: RequestContext, consumer: str, timeout: float = TIMEOUT
) -> Row[Any]:
    """The claim to release, checked visible and taken (``releasing``; the caller undoes
    it with ``undo``), read and taken in one transaction: an established one, one being
    released (whoever began: undoing is idempotent), or one being made whose maker is
    gone. One whose maker is at work is a Conflict, that says until when at most."""
    wanted = _consumer(consumer)
    for _ in range(ATTEMPTS):
        with db.writer() as conn:
            claim = _seen(conn, context, wanted)
            if claim.state == "allocating" and not abandoned(claim, timeout):
                raise _being_made(claim)
            taken = seize(conn, claim, timeout, (*ESTABLISHED, "allocating", "releasing"))
        if taken is not None:
            working(taken.id)
            return taken
    raise Conflict(f"The claim of {consumer} kept changing: try again.")


def _being_made(claim: Row[Any]) -> Conflict:
    until = (
        ""
        if claim.lease_until is None
        else f" (at the latest {claim.lease_until:%Y-%m-%dT%H:%M:%S}Z, when it is given up)"
    )
    return Conflict(f"The claim of {claim.consumer} is being made: release it once made{until}.")
