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
(a bind failed after the claim was answered: release it). Releasing deletes the claim.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
import uuid as uuidlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy import (
    Connection,
    Row,
    Select,
    bindparam,
    delete,
    insert,
    select,
    true,
    update,
)
from sqlalchemy.exc import IntegrityError

from acceleron.bitstreams.base import BitstreamStore
from acceleron.bitstreams.model import Query
from acceleron.context import RequestContext
from acceleron.db.models import AcceleratorRequest, Claim, Deployable, Device, Host, table, utcnow
from acceleron.db.session import Database
from acceleron.exceptions import (
    AllocationConflict,
    Conflict,
    Disabled,
    Forbidden,
    InvalidInput,
    InvalidPlacementName,
    NotFound,
    PlacementError,
    PlacementUnavailable,
)
from acceleron.placement import names, tree
from acceleron.placement.client import AllocationRequest, PlacementClient
from acceleron.scheduler import query, weigher
from acceleron.service import arqs as arq_service
from acceleron.service import quotas
from acceleron.service.device_profiles import could_exist

LOG = logging.getLogger(__name__)
CLAIMS, ARQS = table(Claim), table(AcceleratorRequest)
DEPLOYABLES, DEVICES, HOSTS = table(Deployable), table(Device), table(Host)
STATES = ("allocating", "binding", "bound", "failed")
ATTEMPTS = 5  # choices made again after an allocation conflict
# How many candidates are asked for first, among the regions that hold a wanted function.
HOLDERS_LIMIT = 10
# How many candidates are asked for among every provider: the weigher chooses among a
# sample, and Placement encodes (and the API decodes) a few dozen rather than thousands.
CANDIDATES_LIMIT = 20
# How many hosts' trees are asked about one at a time before a wider query.
TREES_TRIED = 2


class NoCapacity(Conflict):
    """No host has what the profile asks for free."""


class MaybeAllocated(PlacementUnavailable):
    """Placement failed while allocating for a new consumer: the allocation may have
    been made (an answer lost on the way back), so an undo drops it."""


@dataclasses.dataclass(frozen=True)
class ClaimView:
    claim: Row[Any]
    state: str
    failure_reason: str | None
    arqs: tuple[arq_service.ArqRecord, ...]


def _owner(context: RequestContext, project_id: str | None) -> str:
    """The project a claim is for: the caller's, or (admins and services) the one named."""
    if project_id is not None and project_id != context.project_id:
        if not (context.is_admin or "service" in context.roles):
            raise InvalidInput("project_id: only an admin or a service may claim for another.")
        return project_id
    if not context.project_id:
        raise InvalidInput("project_id: the request has no project; name one.")
    return context.project_id


def _consumer(value: str) -> str:
    try:
        return str(uuidlib.UUID(value))
    except ValueError:
        raise InvalidInput(f"consumer_uuid: {value[:64]!r} is not a UUID.") from None


def begin(
    db: Database,
    context: RequestContext,
    profile_name: str,
    consumer: str,
    project_id: str | None,
) -> tuple[Row[Any], list[dict[str, str]]]:
    """Record the claim (``allocating``); the claim and its profile's groups. Conflict
    when the consumer has a claim already."""
    consumer = _consumer(consumer)
    project = _owner(context, project_id)
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
                )
            )
            claim = conn.execute(select(CLAIMS).where(CLAIMS.c.consumer == consumer)).one()
    except IntegrityError as error:
        raise Conflict(
            f"Consumer {consumer} has a claim already: release it first (DELETE "
            f"/v2/claims/{consumer})."
        ) from error
    return claim, list(profile.groups)


def wanted_functions(
    groups: Sequence[Mapping[str, str]], store: BitstreamStore | None, project: str
) -> dict[str, frozenset[str]]:
    """The functions each group wants, by request group suffix, for the weigher: named
    by id, or found in the bitstream catalogue by function name or bitstream (what the
    project sees)."""
    found = dict(weigher.wanted_functions(groups))
    for index, group in enumerate(groups):
        suffix = f"{query.GROUP_PREFIX}{index}"
        if suffix in found or store is None:
            continue
        if "accel:function_name" in group:
            items = store.find(Query(function_name=group["accel:function_name"], project=project))
        elif "accel:bitstream_name" in group:
            items = store.find(Query(name=group["accel:bitstream_name"], project=project))
        elif "accel:bitstream_id" in group:
            try:
                items = [store.get(group["accel:bitstream_id"], project)]
            except NotFound:
                items = []
        else:
            continue
        functions = frozenset(b.function_uuid for b in items if b.function_uuid)
        if functions:
            found[suffix] = functions
    return found


@dataclasses.dataclass(frozen=True)
class Survey:
    """What Acceleron's own records say about where a claim may land, read before
    Placement is asked: the compute node providers (trees) of ``TREES_TRIED`` hosts
    holding a wanted function, chosen at random, each with the function traits its
    regions carry by request group suffix (``held``); as many trees of hosts with a
    device of a class asked for (``trees``); and, read only when a claim asks (its
    first queries found nothing free), the function traits of every region holding a
    wanted function, by suffix (``everywhere``)."""

    held: Mapping[str, Mapping[str, frozenset[str]]]
    trees: frozenset[str]
    only: str | None = None  # the one tree the claim must land in (a host named)
    everywhere: Callable[[], Mapping[str, frozenset[str]]] = lambda: {}

    @property
    def holder_trees(self) -> frozenset[str]:
        return frozenset(self.held)


def survey(
    db: Database,
    groups: Sequence[Mapping[str, str]],
    wanted: Mapping[str, frozenset[str]],
    hostname: str | None = None,
) -> Survey:
    """Where the claim may land, from Acceleron's records; on ``hostname`` alone when it
    is given. The hosts are found through indexes from a random point: a claim reads a
    few rows, whatever the number of hosts."""
    root = None if hostname is None else _host_tree(db, hostname)
    classes = {rc for group in query.profile_groups(groups) for rc in group.resources}
    folded = {suffix: frozenset(weigher.fold_function(f) for f in fs)
              for suffix, fs in wanted.items()}  # fmt: skip
    with db.reader() as conn:
        chosen = _holders(conn, folded, root) if folded else []
        rows = conn.execute(_REGIONS.where(HOSTS.c.rp_uuid.in_(chosen))).all() if chosen else []
        held = _traits(_functions(rows), folded)
        trees = _trees(conn, classes, root)
    return Survey(
        {tree_: _frozen(by_suffix) for tree_, by_suffix in held.items() if tree_},
        trees,
        only=root,
        everywhere=lambda: _everywhere(db, folded),
    )


def _host_tree(db: Database, hostname: str) -> str:
    """The compute node provider of ``hostname``, as Acceleron published it."""
    with db.reader() as conn:
        root = conn.execute(select(HOSTS.c.rp_uuid).where(HOSTS.c.hostname == hostname)).scalar()
    if root is None:
        raise NoCapacity(f"Host {hostname[:255]!r} has no accelerators in Placement.")
    return str(root)


def check_hostname(context: RequestContext, hostname: str | None) -> None:
    """Naming the host a claim lands on is for admins and services (os_acc on a compute
    node), as forcing a host is in Nova."""
    if hostname is not None and not (context.is_admin or "service" in context.roles):
        raise Forbidden("hostname: only an admin or a service may name the host of a claim.")


# A region holds the functions ``tree.functions`` gives: its ``function_uuid`` alone
# (looked up folded, ``function_key``), unless it holds several (``several_functions``:
# those few are read and checked one by one).
_HELD = DEPLOYABLES.join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id).join(
    HOSTS, HOSTS.c.hostname == DEVICES.c.hostname
)
_REGIONS = (
    select(
        DEVICES.c.type,
        DEVICES.c.vendor_name,
        DEPLOYABLES.c.function_uuid,
        DEPLOYABLES.c.function_uuids,
        HOSTS.c.rp_uuid,
    )
    .select_from(_HELD)
    .where(DEPLOYABLES.c.function_uuid.is_not(None))
)
# In Placement (None: a host not published yet, whose traits Placement may not know).
_IN_PLACEMENT = HOSTS.c.rp_uuid.is_not(None)
_PUBLISHED = select(HOSTS.c.rp_uuid).where(_IN_PLACEMENT)
_SEVERAL = _REGIONS.where(DEPLOYABLES.c.several_functions == true(), _IN_PLACEMENT)
_SPELLED = (
    select(DEVICES.c.type, DEVICES.c.vendor_name, DEPLOYABLES.c.function_uuid)
    .distinct()
    .select_from(_HELD)
    .where(DEPLOYABLES.c.function_key.in_(bindparam("functions", expanding=True)), _IN_PLACEMENT)
)
# How many rows a walk from a random point reads (then picks TREES_TRIED trees of them).
WALKED = 8


def _walk(conn: Connection, rows: Select[Any], order: Any) -> set[str]:
    """The trees of the first ``WALKED`` rows of ``rows`` in ``order`` (an indexed
    column of random uuids) from a random point on, and from the start when that found
    fewer than ``TREES_TRIED``: a few trees at random, read through the index."""
    pivot = str(uuidlib.uuid4())
    found = set(conn.execute(rows.where(order >= pivot).order_by(order).limit(WALKED)).scalars())
    if len(found) < TREES_TRIED:
        found.update(conn.execute(rows.where(order < pivot).order_by(order).limit(WALKED))
                     .scalars())  # fmt: skip
    return found


def _pick(trees: set[str]) -> list[str]:
    return random.sample(sorted(trees), min(TREES_TRIED, len(trees)))


def _holders(conn: Connection, folded: Mapping[str, frozenset[str]], root: str | None) -> list[str]:
    """``TREES_TRIED`` trees, at random, of hosts holding a function of ``folded``
    (some may hold none after all: a region listing several, checked later); ``root``
    alone when given."""
    if root is not None:
        return [root]
    holders = _PUBLISHED.select_from(_HELD)
    found: set[str] = set()
    for key in sorted(set().union(*folded.values())):
        found |= _walk(conn, holders.where(DEPLOYABLES.c.function_key == key), DEPLOYABLES.c.uuid)
    found.update(t for t in _traits(_functions(conn.execute(_SEVERAL)), folded) if t)
    return _pick(found)


def _functions(rows: Iterable[Any]) -> Iterator[tuple[str | None, str, str, str]]:
    """Each function of each region in ``rows``: its tree, device type, vendor, id."""
    for row in rows:
        for function in tree.functions(row):
            yield row.rp_uuid, row.type, row.vendor_name, function


def _traits(
    held: Iterable[tuple[str | None, str, str, str]], folded: Mapping[str, frozenset[str]]
) -> dict[str | None, dict[str, set[str]]]:
    """By tree, by request group suffix: the function traits of the functions ``held``
    (as ``_functions`` gives them) that ``folded`` lists for that suffix."""
    found: dict[str | None, dict[str, set[str]]] = {}
    spelled: dict[tuple[str, str, str], tuple[str, ...]] = {}  # cards alike: named once
    for tree_, device_type, vendor, function in held:
        key = weigher.fold_function(function)
        for suffix in (s for s, keys in folded.items() if key in keys):
            what = (device_type, vendor, function)
            if what not in spelled:
                spelled[what] = names.function_traits(*what)
            found.setdefault(tree_, {}).setdefault(suffix, set()).update(spelled[what])
    return found


def _frozen(by_suffix: Mapping[str, set[str]]) -> dict[str, frozenset[str]]:
    return {suffix: frozenset(traits) for suffix, traits in by_suffix.items()}


def _everywhere(db: Database, folded: Mapping[str, frozenset[str]]) -> dict[str, frozenset[str]]:
    """By suffix, the function traits of every region holding a function ``folded``
    lists for it (its first, by ``function_key``, however spelled; or among several)."""
    every = {"functions": sorted(set().union(*folded.values()))}
    with db.reader() as conn:
        spelled = [(None, r.type, r.vendor_name, r.function_uuid)
                   for r in conn.execute(_SPELLED, every)]  # fmt: skip
        several = list(_functions(conn.execute(_SEVERAL)))
    merged: dict[str, set[str]] = {}
    for by_suffix in _traits([*spelled, *several], folded).values():
        for suffix, traits in by_suffix.items():
            merged.setdefault(suffix, set()).update(traits)
    return _frozen(merged)


def _trees(conn: Connection, classes: set[str], root: str | None) -> frozenset[str]:
    """``TREES_TRIED`` compute node providers, at random, of the hosts with a device of
    a type published in one of ``classes`` (of any host with a device, when no device
    type is published in one of them: a memory class, say); ``root`` alone if given."""
    types = [t for t in conn.execute(select(DEVICES.c.type).distinct()).scalars()
             if _classes_of(t) & classes]  # fmt: skip
    with_device = _PUBLISHED.select_from(
        DEVICES.join(HOSTS, HOSTS.c.hostname == DEVICES.c.hostname)
    )
    if root is not None:
        if types:
            with_device = with_device.where(DEVICES.c.type.in_(types))
        return frozenset(conn.execute(with_device.where(HOSTS.c.rp_uuid == root).limit(1))
                         .scalars())  # fmt: skip
    if not types:
        return frozenset(_pick(_walk(conn, with_device, DEVICES.c.uuid)))
    found: set[str] = set()
    for type_ in types:
        found |= _walk(conn, with_device.where(DEVICES.c.type == type_), DEVICES.c.uuid)
    return frozenset(_pick(found))


def _classes_of(device_type: str) -> set[str]:
    """The accelerator classes a device type is published in (either spelling)."""
    try:
        return {names.accelerator_class(device_type, standard=s) for s in (False, True)}
    except InvalidPlacementName:
        return set()


def candidate_queries(
    groups: Sequence[Mapping[str, str]],
    found: Survey,
    sample: Callable[[Sequence[str], int], list[str]] = random.sample,
) -> Iterator[list[tuple[str, str]]]:
    """The candidate queries to try in turn, each with a ``limit``, cheapest first.

    Placement's work grows with the providers a query can match, whatever its
    ``limit``; a query kept to one host's tree (``in_tree``) costs what one host does.
    So: when a group wants a function that some region holds already, first the trees
    of the hosts holding it that the survey chose, the function traits of their regions
    required; then the regions holding it wherever they are (their traits read from
    the database only now). The weigher would rank them first anyway. Then the hosts
    with a device of a class asked for; then everything. A cloud with free capacity
    answers the first query; a full one costs a few more."""
    everything = query.profile_query(groups).params()
    suffixes = [group.suffix for group in query.profile_groups(groups)]

    def required(held: Mapping[str, frozenset[str]]) -> list[tuple[str, str]]:
        return [(f"required{suffix}", "in:" + ",".join(sorted(traits)))
                for suffix, traits in sorted(held.items()) if traits]  # fmt: skip

    def in_tree(root: str) -> list[tuple[str, str]]:  # every group on that host
        return [(f"in_tree{suffix}", root) for suffix in suffixes]

    def some(trees: frozenset[str]) -> list[str]:
        ordered = sorted(trees)
        return sample(ordered, min(TREES_TRIED, len(ordered)))

    narrow = [("limit", str(HOLDERS_LIMIT)), *everything]
    for root in some(found.holder_trees):
        yield [*narrow, *required(found.held[root]), *in_tree(root)]
    if found.held and found.only is None:
        anywhere = required(found.everywhere())
        if anywhere:
            yield [*narrow, *anywhere]
    wide = [("limit", str(CANDIDATES_LIMIT)), *everything]
    for root in some(found.trees):
        yield [*wide, *in_tree(root)]
    if found.only is None:
        yield wide


def allocate(
    db: Database,
    placement: PlacementClient,
    claim: Row[Any],
    groups: Sequence[Mapping[str, str]],
    user_id: str,
    store: BitstreamStore | None = None,
    hostname: str | None = None,
) -> tuple[AllocationRequest, str]:
    """Allocate the best candidate for the claim's consumer (on ``hostname`` when it is
    given); choose again while other consumers win the race. The allocation and its
    compute node's name."""
    wanted = wanted_functions(groups, store, claim.project_id)
    found = survey(db, groups, wanted, hostname)
    for attempt in range(1, ATTEMPTS + 1):
        best = None
        for params in candidate_queries(groups, found):
            candidates = placement.get_allocation_candidates(params)
            best = weigher.best(candidates, wanted)
            if best is not None:
                break
        if best is None:
            where = "No host has" if hostname is None else f"Host {hostname!r} does not have"
            raise NoCapacity(
                f"{where} the accelerators the profile asks for free: they are all in use "
                "or disabled, or none matches its groups."
            )
        hostname = _hostname(db, best)
        try:
            placement.put_allocations(
                claim.consumer, best.allocations, project_id=claim.project_id, user_id=user_id
            )
        except PlacementError as error:
            if not isinstance(error, AllocationConflict):
                raise MaybeAllocated(error.message) from error
            # A new consumer's allocation refused: capacity taken, or the consumer is not
            # new (Placement refuses it every time: say so, and never touch what it holds).
            if placement.get_consumer_allocations(claim.consumer):
                raise Conflict(
                    f"Consumer {claim.consumer} holds allocations in Placement already: "
                    f"release them, or claim for another consumer."
                ) from error
            LOG.info("Allocation conflict (attempt %d of %d): %s", attempt, ATTEMPTS, error)
            time.sleep(0.02 * attempt)
            continue
        return best, hostname
    raise Conflict(f"Other consumers took the capacity {ATTEMPTS} times: try again.")


def _hostname(db: Database, request: AllocationRequest) -> str:
    """The host of the accelerators chosen (one host), from Acceleron's own records: the
    host of each deployable's provider, or (flat mode) of each compute node's."""
    providers = list(request.allocations)
    with db.reader() as conn:
        hosts = set(
            conn.execute(
                select(DEVICES.c.hostname)
                .join(DEPLOYABLES, DEPLOYABLES.c.device_id == DEVICES.c.id)
                .where(DEPLOYABLES.c.rp_uuid.in_(providers))
                .union(select(HOSTS.c.hostname).where(HOSTS.c.rp_uuid.in_(providers)))
            ).scalars()
        )
    if len(hosts) != 1:
        raise Conflict(
            f"The allocation chosen spans {len(hosts)} hosts of Acceleron; expected one."
        )
    return str(hosts.pop())


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
    """Create the claim's requests and bind each to the provider Placement mapped its
    group to; the claim becomes ``binding`` (or ``bound`` when nothing is left to do).
    ``flat_mode`` and ``limits`` as for ``arqs.bind``; requests created here are deleted
    again when the bind is refused (over a quota, say)."""
    owner = dataclasses.replace(context, project_id=claim.project_id)
    created = arq_service.create(db, owner, claim.device_profile_name, limits)
    try:
        bindings = []
        for arq in created:
            group = arq.device_profile_group_id
            mapped = request.mappings.get(f"{query.GROUP_PREFIX}{group}")
            if not mapped:
                raise Conflict(f"Placement mapped no provider to group {group}.")
            bindings.append(arq_service.Binding(arq.uuid, hostname, mapped[0], claim.consumer))
        resolved = arq_service.bind(db, owner, bindings, store, flat_mode, limits)
        failed = [r for r in resolved if r.status == "failed"]
        if failed:
            reasons = _reasons(db, [r.arq_uuid for r in failed])
            raise Conflict(f"The accelerators could not be bound: {reasons}")
    except BaseException:
        # Exactly the requests this claim made go (never another's of the same consumer).
        try:
            arq_service.delete_arqs(db, _owner_context(claim), [a.uuid for a in created])
        except Exception:
            LOG.exception("Undoing the claim of %s: deleting its requests failed", claim.consumer)
        raise
    state = "bound" if len(resolved) == len(created) else "binding"
    with db.writer() as conn:
        conn.execute(
            update(CLAIMS)
            .where(CLAIMS.c.id == claim.id)
            .values(state=state, hostname=hostname, allocations=_held(request), updated_at=utcnow())
        )


def _held(request: AllocationRequest) -> dict[str, dict[str, int]]:
    """What the claim allocated: provider uuid -> resource class -> amount."""
    return {rp: dict(resources) for rp, resources in request.allocations.items()}


def _reasons(db: Database, uuids: Sequence[str]) -> str:
    with db.reader() as conn:
        rows = conn.execute(
            select(ARQS.c.uuid, ARQS.c.failure_reason).where(ARQS.c.uuid.in_(uuids))
        )
        return "; ".join(f"{r.uuid}: {r.failure_reason}" for r in rows)


def _owner_context(claim: Row[Any]) -> RequestContext:
    """The claim's project, as the service acts for it (it sees that project's only)."""
    return RequestContext("claim", project_id=claim.project_id, roles=frozenset({"member"}))


def undo(db: Database, placement: PlacementClient | None, claim: Row[Any], allocated: bool) -> None:
    """Undo what a claim did, every step whatever the others do (what cannot be undone
    now is logged; the reconciler frees a leaked allocation later). ``allocated``:
    whether this claim made the consumer's allocation (one it did not make, say another
    consumer's of the same uuid, is never dropped). The claim's requests are deleted as
    its project's: another project's are never touched."""
    if claim.state != "allocating":  # an established claim: its requests are bound
        try:
            arq_service.delete_for_instance(db, _owner_context(claim), claim.consumer, True)
        except Exception:
            LOG.exception("Releasing the claim of %s: deleting its requests failed",
                          claim.consumer)  # fmt: skip
    if placement is not None and allocated:
        try:
            placement.delete_allocations(claim.consumer)
        except Exception:
            LOG.exception("Undoing the claim of %s: dropping its allocation failed",
                          claim.consumer)  # fmt: skip
    with db.writer() as conn:
        conn.execute(delete(CLAIMS).where(CLAIMS.c.id == claim.id))


def _visible(context: RequestContext) -> Any:
    if context.is_admin or "service" in context.roles:
        return CLAIMS.c.id.is_not(None)
    return CLAIMS.c.project_id == (context.project_id or "")


def lookup(db: Database, context: RequestContext, consumer: str) -> Row[Any]:
    """The consumer's claim, as the caller sees it (NotFound for another project's)."""
    wanted = _consumer(consumer)
    with db.reader() as conn:
        claim = conn.execute(
            select(CLAIMS).where(CLAIMS.c.consumer == wanted, _visible(context))
        ).first()
    if claim is None:
        raise NotFound(f"No claim for consumer {wanted}.")
    return claim


def show(db: Database, context: RequestContext, consumer: str) -> ClaimView:
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
    return ClaimView(claim, state, reason, arqs)


def release(db: Database, context: RequestContext, consumer: str) -> Row[Any]:
    """The claim to release (the caller undoes it with ``undo``), checked visible; one
    still being made cannot be released yet."""
    claim = lookup(db, context, consumer)
    if claim.state == "allocating":
        raise Conflict(f"The claim of {claim.consumer} is being made: release it once made.")
    return claim
