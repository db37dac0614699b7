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
import functools
import logging
import os
import random
import socket
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
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
    AcceleronError,
    AllocationConflict,
    Conflict,
    Disabled,
    InvalidInput,
    InvalidPlacementName,
    NotFound,
    PlacementError,
    PlacementUnavailable,
)
from acceleron.placement import names, tree
from acceleron.placement.client import AllocationRequest, Candidates, PlacementClient
from acceleron.scheduler import query, weigher
from acceleron.service import arqs as arq_service
from acceleron.service import fitting, quotas
from acceleron.service.device_profiles import could_exist
from acceleron.uuids import parse

LOG = logging.getLogger(__name__)
CLAIMS, ARQS = table(Claim), table(AcceleratorRequest)
DEPLOYABLES, DEVICES, HOSTS = table(Deployable), table(Device), table(Host)
STATES = ("allocating", "binding", "bound", "failed", "releasing")
ESTABLISHED = ("binding", "bound", "failed")  # made: the consumer's requests are bound
STEPS = ("begun", "placing", "created", "done")
TIMEOUT = 300.0  # [claims] timeout's default
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


class ClaimExists(Conflict):
    """The consumer has a claim already."""


class GivenUp(Conflict):
    """The claim was given up while being made: it outlived ``[claims] timeout``, or its
    release began. Its maker stops (and undoes what it alone knows it did)."""


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
    working: int | None = None
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
            working = claim.id
            _working(working)
    except BaseException as error:
        if working is not None:
            stopped(working)
        if isinstance(error, IntegrityError):
            raise ClaimExists(
                f"Consumer {consumer} has a claim already: release it first (DELETE "
                f"/v2/claims/{consumer})."
            ) from error
        raise
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
    nested: bool = True,
) -> tuple[AllocationRequest, str]:
    """Allocate the best candidate for the claim's consumer (on ``hostname`` when it is
    given); choose again while other consumers win the race. The allocation and its
    compute node's name. Only regions that hold a group's function, or whose region
    type a bitstream it names fits, are candidates (``service.fitting``; ``nested``:
    whether Placement has them as providers of their own); NoFit at once when no
    region anywhere can serve a group."""
    steered, fits = fitting.steer(db, store, groups, claim.project_id, nested)
    for fit in fits:
        if fit is not None and fit.nowhere:
            raise fit.refusal()
    wanted = wanted_functions(groups, store, claim.project_id)
    found = survey(db, groups, wanted, hostname)
    for attempt in range(1, ATTEMPTS + 1):
        best = None
        for params in candidate_queries(steered, found):
            candidates = _fitting(placement.get_allocation_candidates(params), fits)
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
        with db.writer() as conn:  # recorded first: whoever undoes the claim looks for it
            _step(conn, claim, "placing", allocations=_held(best))
        with _active_lock:  # and remembered: the maker may have to drop it itself
            _asked[claim.id] = _held(best)
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


def _fitting(candidates: Candidates, fits: Sequence[fitting.Fit | None]) -> Candidates:
    """The candidates whose every group lands on a provider that can serve it."""
    if not any(fits):
        return candidates

    def serves(request: AllocationRequest) -> bool:
        for index, fit in enumerate(fits):
            if fit is None:
                continue
            for rp in request.mappings.get(f"{query.GROUP_PREFIX}{index}", ()):
                summary = candidates.summaries.get(rp)
                if summary is not None and not fit.fits(summary.traits):
                    return False
        return True

    kept = tuple(r for r in candidates.requests if serves(r))
    return dataclasses.replace(candidates, requests=kept)


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
    """Create the claim's requests (their uuids recorded in the claim in the same
    transaction, step ``created``) and bind each to the provider Placement mapped its
    group to; the claim becomes ``binding`` (or ``bound`` when nothing is left to do) in
    the bind's own transaction (step ``done``). ``flat_mode`` and ``limits`` as for
    ``arqs.bind``. GivenUp, and nothing done, when the claim is no longer its maker's;
    on any failure the caller undoes the claim (``give_up``), its requests with it."""
    owner = dataclasses.replace(context, project_id=claim.project_id)

    def created_(conn: Connection, uuids: list[str]) -> None:
        _step(conn, claim, "created", requests=uuids)

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
            _step(conn, claim, "created")  # still the maker's: it undoes the claim
            return
        state = "bound" if len(resolved) == len(created) else "binding"
        _step(conn, claim, "done", state=state, hostname=hostname, allocations=_held(request),
              owner=None, lease_until=None)  # fmt: skip

    resolved = arq_service.bind(db, owner, bindings, store, flat_mode, limits, bound_)
    failed = [r for r in resolved if r.status == "failed"]
    if failed:
        reasons = _reasons(db, [r.arq_uuid for r in failed])
        raise Conflict(f"The accelerators could not be bound: {reasons}")


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
) -> ClaimRecord:
    """The whole claim (``POST /v2/claims``): recorded (``begin``; a claim of the
    consumer whose maker is gone, in the way, undone first), the best candidate
    allocated in Placement (``allocate``, on ``hostname`` when given), its requests
    created and bound (``bind``); on any failure undone (``give_up``) and the error
    raised. The claim as ``show`` gives it. ``store``, ``flat_mode`` and ``limits`` as
    for ``arqs.bind``; blocking (Placement, the bitstream store)."""
    claim, groups = _begin(db, placement, context, profile_name, consumer, project_id, timeout)
    user = context.user_id or "acceleron"
    placed: bool | None = False  # whether this maker's allocation was made
    try:
        request, host = allocate(
            db, placement, claim, groups, user, store, hostname, flat_mode is None
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


# --- who is at work on a claim, and for how long --------------------------------------

_active: set[int] = set()  # the claims this process is at work on (making or undoing)
_asked: dict[int, dict[str, dict[str, int]]] = {}  # what its makers last asked Placement for
_active_lock = threading.Lock()


@functools.cache
def _identity(pid: int) -> str:
    """This process, as a claim's ``owner`` names it: machine (host name and boot), process
    id and a token of this process's own (a process id is reused)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()[:150]}/{boot}/{pid}/{uuidlib.uuid4().hex[:12]}"


def worker() -> str:
    """The ``owner`` this process writes in the claims it works on."""
    return _identity(os.getpid())


def _working(claim_id: int) -> None:
    with _active_lock:
        _active.add(claim_id)


def stopped(claim_id: int) -> None:
    """This process no longer works on the claim (made, undone, or left to recovery)."""
    with _active_lock:
        _active.discard(claim_id)
        _asked.pop(claim_id, None)


def _idle(claim_id: int) -> None:
    """An undo of the claim ended (what its maker asked for stays its maker's to know)."""
    with _active_lock:
        _active.discard(claim_id)


def _alive(owner: str | None, claim_id: int) -> bool:
    """Whether the process named ``owner`` may still be at work on the claim, as far as
    this process can tell: one of this machine's is gone when its process is (or when
    it is this process, and it stopped working on the claim); another machine's is
    trusted until its lease ends."""
    if owner is None:
        return False
    parts = owner.rsplit("/", 3)
    mine = worker().rsplit("/", 3)
    if len(parts) != 4 or not parts[1] or parts[:2] != mine[:2]:
        return True
    if owner == worker():
        with _active_lock:
            return claim_id in _active
    pid = int(parts[2]) if parts[2].isdigit() else 0
    if pid <= 0 or pid == os.getpid():
        return False  # an earlier process with this id
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True  # alive (or its id reused): its lease says


def abandoned(claim: Row[Any], timeout: float, now: dt.datetime | None = None) -> bool:
    """Whether the claim (being made or released) has no maker any more: its lease
    passed, or its maker is gone. One from before leases existed is abandoned
    ``timeout`` seconds after it was made."""
    now = now or utcnow()
    if claim.lease_until is None:
        return bool(claim.created_at + dt.timedelta(seconds=timeout) <= now)
    return bool(claim.lease_until <= now) or not _alive(claim.owner, claim.id)


def _step(conn: Connection, claim: Row[Any], step: str, **values: Any) -> None:
    """Record how far the maker got: only while the claim is still being made by it,
    within its lease (GivenUp otherwise, and the caller's transaction is undone)."""
    now = utcnow()
    done = conn.execute(
        update(CLAIMS)
        .where(
            CLAIMS.c.id == claim.id,
            CLAIMS.c.state == "allocating",
            CLAIMS.c.owner == claim.owner,
            CLAIMS.c.lease_until > now,
        )
        .values(step=step, updated_at=now, **values)
    )
    if done.rowcount != 1:
        raise GivenUp(
            f"The claim of {claim.consumer} was given up while being made (it took longer "
            f"than [claims] timeout allows, or it is being released): claim again."
        )


def _take(db: Database, claim: Row[Any], timeout: float, states: Sequence[str]) -> Row[Any] | None:
    """Take the claim over to undo it (``releasing``, this process at work on it), if it
    is still as it was read (in one of ``states``, same owner); the claim as taken."""
    now = utcnow()
    with db.writer() as conn:
        done = conn.execute(
            update(CLAIMS)
            .where(
                CLAIMS.c.id == claim.id,
                CLAIMS.c.state.in_(states),
                CLAIMS.c.state == claim.state,
                CLAIMS.c.owner.is_not_distinct_from(claim.owner),
            )
            .values(
                state="releasing",
                owner=worker(),
                updated_at=now,
                lease_until=now + dt.timedelta(seconds=timeout),
            )
        )
        if done.rowcount != 1:
            return None
        taken = conn.execute(select(CLAIMS).where(CLAIMS.c.id == claim.id)).one()
    _working(claim.id)
    return taken


# --- undoing ---------------------------------------------------------------------------


def give_up(
    db: Database,
    placement: PlacementClient | None,
    claim: Row[Any],
    placed: bool | None,
    timeout: float = TIMEOUT,
) -> None:
    """The maker undoes its claim after a failure: takes it (``releasing``) and undoes
    what its row records. ``placed``: whether this maker's allocation was made (None:
    perhaps, an answer lost). When the claim is no longer the maker's (given up and taken
    over meanwhile), the one who took it undoes what the row records, and the maker
    drops the allocation it made after that. What cannot be done now (the database
    away) is left to recovery; nothing raises."""
    with _active_lock:
        asked = _asked.get(claim.id)
    try:
        taken = _take(db, claim, timeout, ("allocating",))
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
    request of the consumer in its project), handles freed; the allocation it made
    taken out of the consumer's (``placed`` False: none was made; otherwise as its step
    says: at ``placing``, only when the consumer holds exactly what was asked); the row
    deleted last. What fails raises, and leaves the claim ``releasing`` for a DELETE or
    recovery to finish."""
    try:
        owner = _owner_context(claim)
        if claim.requests:
            arq_service.delete_present(db, owner, list(claim.requests))
        if claim.step in ("done", None):  # established, or of unknown progress
            arq_service.delete_for_instance(db, owner, claim.consumer, True)
        asked = claim.step not in ("begun",) or placed
        if placement is not None and placed is not False and asked:
            exact = claim.step == "placing" and not placed
            _drop(placement, claim.consumer, claim.allocations, exact)
        with db.writer() as conn:
            conn.execute(delete(CLAIMS).where(CLAIMS.c.id == claim.id))
    finally:
        _idle(claim.id)
    LOG.info("Claim of %s undone (it had reached step %s)", claim.consumer, claim.step)


def _drop(
    placement: PlacementClient,
    consumer_uuid: str,
    mine: Mapping[str, Mapping[str, int]] | None,
    exact: bool,
) -> None:
    """Take what the claim allocated out of its consumer's allocations, guarded by the
    consumer's generation (read again when it changed meanwhile). ``exact``: only when
    the consumer holds exactly that (a claim that may not have allocated never touches
    what another put there). A claim that recorded nothing (made before it would):
    every allocation of the consumer."""
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
        taken = _take(db, claim, timeout, ("allocating", "releasing"))
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
    wanted = _consumer(consumer)
    with db.reader() as conn:
        claim = conn.execute(
            select(CLAIMS).where(CLAIMS.c.consumer == wanted, _visible(context))
        ).first()
    if claim is None:
        raise NotFound(f"No claim for consumer {wanted}.")
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
    it with ``undo``): an established one, one being released (whoever began: undoing is
    idempotent), or one being made whose maker is gone. One whose maker is at work is a
    Conflict, that says until when at most."""
    for _ in range(ATTEMPTS):
        claim = lookup(db, context, consumer)
        if claim.state == "allocating" and not abandoned(claim, timeout):
            until = (
                ""
                if claim.lease_until is None
                else f" (at the latest {claim.lease_until:%Y-%m-%dT%H:%M:%S}Z, when it is given up)"
            )
            raise Conflict(
                f"The claim of {claim.consumer} is being made: release it once made{until}."
            )
        taken = _take(db, claim, timeout, (*ESTABLISHED, "allocating", "releasing"))
        if taken is not None:
            return taken
    raise Conflict(f"The claim of {consumer} kept changing: try again.")
