"""Where a claim lands, and its allocation in Placement (docs/claims.md, steps 2 to 4 of
``POST``): Acceleron's records surveyed for a few hosts (``survey``), a choice from
Acceleron's own view of them (``claim_view``) or else from the candidate queries tried
cheapest first (``candidate_queries``), ranked by spec 001's weigher and allocated for
the claim's consumer, chosen again while other consumers win the race (``allocate``).
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
import uuid as uuidlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Row, Select, bindparam, func, select, true, union

from acceleron import metrics
from acceleron.bitstreams.base import BitstreamStore
from acceleron.db.models import Deployable, Device, Host, PlacementProvider, table
from acceleron.db.session import Database
from acceleron.exceptions import (
    AllocationConflict,
    Conflict,
    InvalidPlacementName,
    NoCapacity,
    NoMigPlacement,
    NotProvided,
    PlacementError,
    PlacementUnavailable,
)
from acceleron.placement import names, tree
from acceleron.placement.client import AllocationRequest, Candidates, PlacementClient
from acceleron.scheduler import query, weigher
from acceleron.service import claim_view, fitting, mig_layouts
from acceleron.service.claim_end import ATTEMPTS, record_step

LOG = logging.getLogger(__name__)
DEPLOYABLES, DEVICES, HOSTS = table(Deployable), table(Device), table(Host)
PROVIDERS = table(PlacementProvider)
HOLDERS_LIMIT = 10  # candidates asked for first, among regions holding a wanted function
# Candidates asked for among every provider: the weigher chooses among a sample, and
# Placement encodes (and the API decodes) a few dozen rather than thousands.
CANDIDATES_LIMIT = 20
TREES_TRIED = 2  # hosts' trees asked about one at a time before a wider query
WALKED = 8  # rows a walk from a random point reads (then picks TREES_TRIED trees)


class MaybeAllocated(PlacementUnavailable):
    """Placement failed while allocating for a new consumer: the allocation may have
    been made (an answer lost on the way back), so an undo drops it."""


def allocate(
    db: Database,
    placement: PlacementClient,
    claim: Row[Any],
    groups: Sequence[Mapping[str, str]],
    user_id: str,
    store: BitstreamStore | None = None,
    hostname: str | None = None,
    nested: bool = True,
    options: tree.Options | None = None,
) -> tuple[AllocationRequest, str]:
    """Allocate the best candidate for the claim's consumer (on ``hostname`` when
    given), recording step ``placing`` first; the allocation and its host. Only regions
    a group's function or bitstream fits are candidates (``service.fitting``; ``nested``:
    whether regions are providers of their own). With ``options`` (the sync's, nested)
    Acceleron's view chooses first; where it has none, or once Placement refused one of
    its choices (409), the candidate queries."""
    steered, fits = fitting.with_fit_traits(db, store, groups, claim.project_id, nested)
    for fit in fits:
        if fit is not None and fit.nowhere:
            raise fit.refusal()
    catalogue = None if store is None else fitting.catalogue(store, claim.project_id, groups, fits)
    wanted = weigher.wanted_by(groups, catalogue)
    found = survey(db, groups, wanted, hostname)
    unplaced: list[NoMigPlacement] = []  # why candidates' MIG slices had no position

    def choose(candidates: Candidates) -> AllocationRequest | None:
        placed = mig_layouts.positioned(db, candidates, groups)
        if placed.refusal is not None:
            unplaced.append(placed.refusal)
        return weigher.best(_fitting(placed.candidates, fits), wanted)

    viewed = options is not None and options.nested and nested
    for attempt in range(1, ATTEMPTS + 1):
        # read again after a conflict: the claims made meanwhile are in it
        view = claim_view.read(db, found.holder_trees | found.trees) if viewed else None
        best = None if view is None else choose(view.candidates(query.profile_groups(steered)))
        direct = best is not None
        if best is None:
            best = _queried(db, placement, steered, found, choose, view)
        if best is None:  # the planner's reason, where only positions were missing
            raise (
                unplaced[-1]
                if unplaced
                else _nothing_free(db, steered, hostname, options, view, placement)
            )
        host = _hostname(db, best, placement)
        with db.writer() as conn:  # recorded first: whoever undoes the claim looks for it
            record_step(conn, claim, "placing", allocations=allocations_of(best))
        try:
            placement.put_allocations(
                claim.consumer, best.allocations, project_id=claim.project_id, user_id=user_id
            )
        except PlacementError as error:
            if not isinstance(error, AllocationConflict):
                raise MaybeAllocated(error.message) from error
            # Refused: capacity taken, or the consumer is not new (never touch what it holds).
            if placement.get_consumer_allocations(claim.consumer):
                raise Conflict(
                    f"Consumer {claim.consumer} holds allocations in Placement already: "
                    f"release them, or claim for another consumer."
                ) from error
            metrics.CLAIM_CONFLICTS.labels("view" if direct else "candidates").inc()
            how = "chosen from Acceleron's view" if direct else "a candidate"
            LOG.info(
                "Allocation conflict (attempt %d of %d, %s): %s", attempt, ATTEMPTS, how, error
            )
            if direct:  # the view was behind there: Placement's query chooses from now on
                claim_view.mark_stale(db, best.allocations)
                viewed = False
            else:
                time.sleep(0.02 * attempt)
            continue
        return best, host
    raise Conflict(f"Other consumers took the capacity {ATTEMPTS} times: try again.")


def _queried(
    db: Database,
    placement: PlacementClient,
    groups: Sequence[Mapping[str, str]],
    found: Survey,
    choose: Callable[[Candidates], AllocationRequest | None],
    view: claim_view.View | None,
) -> AllocationRequest | None:
    """The best of the first candidate query's answer that has one; each answer settles
    the view's providers (``claim_view.settle_stale``)."""
    for params in candidate_queries(groups, found):
        answer = placement.get_allocation_candidates(params)
        if view is not None:
            claim_view.settle_stale(db, view, answer)
        if (best := choose(answer)) is not None:
            return best
    return None


def _nothing_free(
    db: Database,
    groups: Sequence[Mapping[str, str]],
    hostname: str | None,
    options: tree.Options | None,
    view: claim_view.View | None,
    placement: PlacementClient,
) -> NoCapacity:
    """Why no candidate: no accelerator of a class asked for is published (NotProvided);
    a group asks for more of a class than any provider of it has; or all are taken."""
    standard = None if options is None else options.standard_classes
    missing = unprovided(db, groups, hostname, standard)
    where = "No host" if hostname is None else f"Host {hostname!r}"
    if missing:
        return NotProvided(
            f"{where} provides {', '.join(missing)}: Acceleron has published no accelerator "
            "of that class in Placement (is the device profile's resource class right, and "
            "has a host with such a device reported?)."
        )
    for index, group in enumerate(query.profile_groups(groups)):
        for rc, amount in sorted(group.resources.items()):
            sizes = _sizes(rc, view, placement) if amount > 1 else []
            if sizes and max(sizes) < amount:
                hint = (
                    f": ask for them as {amount} groups of one, or publish identical devices "
                    f"as one provider ([placement] pools)"
                )
                return NoCapacity(
                    f"Group {index} of the device profile asks for {amount} {rc} in one group, "
                    f"which lands on one provider, but the largest provider of {rc} has "
                    f"{max(sizes)}{'' if options is not None and options.pools else hint}."
                )
    where = "No host has" if hostname is None else f"Host {hostname!r} does not have"
    return NoCapacity(
        f"{where} the accelerators the profile asks for free: they are all in use or "
        "disabled, or none matches its groups."
    )


def _sizes(rc: str, view: claim_view.View | None, placement: PlacementClient) -> list[int]:
    """The capacity of each provider of ``rc`` known: in the view, else in Placement (a
    query for one unit)."""
    summaries = [] if view is None else list(view.summaries.values())
    if not any(rc in s.resources for s in summaries):
        try:
            params = [("resources", f"{rc}:1"), ("limit", "50")]
            summaries = list(placement.get_allocation_candidates(params).summaries.values())
        except PlacementError:
            return []
    return [s.resources[rc].capacity for s in summaries if rc in s.resources]


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


def _hostname(db: Database, request: AllocationRequest, placement: PlacementClient) -> str:
    """The one host of the providers chosen, from Acceleron's records (a deployable's,
    a pool's or a compute node's); else from their compute node's name in Placement."""
    providers = list(request.allocations)
    with db.reader() as conn:
        hosts = set(
            conn.execute(
                union(
                    select(DEVICES.c.hostname)
                    .join(DEPLOYABLES, DEPLOYABLES.c.device_id == DEVICES.c.id)
                    .where(DEPLOYABLES.c.rp_uuid.in_(providers)),
                    select(HOSTS.c.hostname).where(HOSTS.c.rp_uuid.in_(providers)),
                    select(PROVIDERS.c.hostname).where(PROVIDERS.c.uuid.in_(providers)),
                )
            ).scalars()
        )
    if not hosts:  # a pool Placement has before its sync is recorded
        roots = (placement.get_provider(rp) for rp in providers)
        found = (placement.get_provider(r.root_uuid) for r in roots if r and r.root_uuid)
        known = sorted({root.name for root in found if root is not None})
        with db.reader() as conn:
            hosts = set(
                conn.execute(select(HOSTS.c.hostname).where(HOSTS.c.hostname.in_(known))).scalars()
            )
    if len(hosts) != 1:
        raise Conflict(
            f"The allocation chosen spans {len(hosts)} hosts of Acceleron; expected one."
        )
    return str(hosts.pop())


def allocations_of(request: AllocationRequest) -> dict[str, dict[str, int]]:
    """What the claim allocated: provider uuid -> resource class -> amount."""
    return {rp: dict(resources) for rp, resources in request.allocations.items()}


# --- the survey: Acceleron's records read before Placement is asked ---------------------


@dataclasses.dataclass(frozen=True)
class Survey:
    """Where a claim may land, from Acceleron's records: ``TREES_TRIED`` trees (compute
    node providers) of hosts holding a wanted function, with their regions' function
    traits by group suffix (``held``); as many of hosts with a device of a class asked
    for (``trees``); and, read only if asked, the function traits of every region
    holding a wanted function (``everywhere``)."""

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
    """Where the claim may land (on ``hostname`` alone when given), read through indexes
    from a random point: a few rows, whatever the number of hosts."""
    classes = {rc for group in query.profile_groups(groups) for rc in group.resources}
    folded = {s: frozenset(weigher.fold_function(f) for f in fs) for s, fs in wanted.items()}
    with db.reader() as conn:
        root = None
        if hostname is not None:
            root = conn.execute(
                select(HOSTS.c.rp_uuid).where(HOSTS.c.hostname == hostname)
            ).scalar()
            if root is None:
                raise NoCapacity(f"Host {hostname[:255]!r} has no accelerators in Placement.")
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


# A region holds the functions ``tree.functions`` gives: its ``function_uuid`` alone
# (looked up folded, ``function_key``), unless it holds several (``several_functions``).
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
_IN_PLACEMENT = HOSTS.c.rp_uuid.is_not(None)  # (None: a host not published yet)
_PUBLISHED = select(HOSTS.c.rp_uuid).where(_IN_PLACEMENT)
_SEVERAL = _REGIONS.where(DEPLOYABLES.c.several_functions == true(), _IN_PLACEMENT)
_SPELLED = (
    select(DEVICES.c.type, DEVICES.c.vendor_name, DEPLOYABLES.c.function_uuid)
    .distinct()
    .select_from(_HELD)
    .where(DEPLOYABLES.c.function_key.in_(bindparam("functions", expanding=True)), _IN_PLACEMENT)
)


def _walk(conn: Connection, rows: Select[Any], order: Any) -> set[str]:
    """The trees of ``WALKED`` rows of ``rows`` from a random point of ``order`` (an
    indexed column of random uuids) on, and from the start when too few."""
    pivot = str(uuidlib.uuid4())
    found = set(conn.execute(rows.where(order >= pivot).order_by(order).limit(WALKED)).scalars())
    if len(found) < TREES_TRIED:
        found.update(
            conn.execute(rows.where(order < pivot).order_by(order).limit(WALKED)).scalars()
        )
    return found


def _pick(trees: set[str]) -> list[str]:
    return random.sample(sorted(trees), min(TREES_TRIED, len(trees)))


def _holders(conn: Connection, folded: Mapping[str, frozenset[str]], root: str | None) -> list[str]:
    """``TREES_TRIED`` trees, at random, of hosts holding a function of ``folded`` (a
    region listing several is checked later); ``root`` alone when given."""
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
    """By tree, by group suffix: the traits of the functions ``held`` that ``folded``
    lists for that suffix."""
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
        spelled = [
            (None, r.type, r.vendor_name, r.function_uuid) for r in conn.execute(_SPELLED, every)
        ]
        several = list(_functions(conn.execute(_SEVERAL)))
    merged: dict[str, set[str]] = {}
    for by_suffix in _traits([*spelled, *several], folded).values():
        for suffix, traits in by_suffix.items():
            merged.setdefault(suffix, set()).update(traits)
    return _frozen(merged)


def _trees(conn: Connection, classes: set[str], root: str | None) -> frozenset[str]:
    """``TREES_TRIED`` trees, at random, of hosts with a device of a type published in
    one of ``classes`` (any device, when no type is: a memory class); ``root`` alone if
    given."""
    types = [
        t
        for t in conn.execute(select(DEVICES.c.type).distinct()).scalars()
        if _classes_of(t) & classes
    ]
    with_device = _PUBLISHED.select_from(
        DEVICES.join(HOSTS, HOSTS.c.hostname == DEVICES.c.hostname)
    )
    if root is not None:
        if types:
            with_device = with_device.where(DEVICES.c.type.in_(types))
        return frozenset(
            conn.execute(with_device.where(HOSTS.c.rp_uuid == root).limit(1)).scalars()
        )
    found: set[str] = set()
    for type_ in types or [None]:  # no type: any device
        rows = with_device if type_ is None else with_device.where(DEVICES.c.type == type_)
        found |= _walk(conn, rows, DEVICES.c.uuid)
    return frozenset(_pick(found))


def _classes_of(device_type: str, standard: bool | None = None) -> set[str]:
    """The accelerator classes a device type is published in (either spelling, unless
    ``standard`` says which)."""
    spellings = (False, True) if standard is None else (standard,)
    try:
        return {names.accelerator_class(device_type, standard=s) for s in spellings}
    except InvalidPlacementName:
        return set()


def candidate_queries(
    groups: Sequence[Mapping[str, str]],
    found: Survey,
    sample: Callable[[Sequence[str], int], list[str]] = random.sample,
) -> Iterator[list[tuple[str, str]]]:
    """The candidate queries to try in turn, cheapest first (Placement's work grows with
    the providers a query can match; one kept ``in_tree`` costs what one host does): the
    trees of the surveyed holders of a wanted function, their traits required; the
    holders anywhere; the trees of hosts with a device of a class asked for; everything."""
    everything = query.profile_query(groups).params()
    suffixes = [group.suffix for group in query.profile_groups(groups)]

    def required(held: Mapping[str, frozenset[str]]) -> list[tuple[str, str]]:
        return [
            (f"required{suffix}", "in:" + ",".join(sorted(traits)))
            for suffix, traits in sorted(held.items())
            if traits
        ]

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


def unprovided(
    db: Database,
    groups: Sequence[Mapping[str, str]],
    hostname: str | None = None,
    standard: bool | None = None,
) -> list[str]:
    """The accelerator classes ``groups`` ask for that no accelerator Acceleron published
    (on ``hostname`` when given) is counted in, free or not (``standard``: the spelling
    the sync publishes, None: either)."""
    asked = {rc for group in query.profile_groups(groups) for rc in group.resources}
    rows = (
        select(func.coalesce(DEPLOYABLES.c.accelerator_type, DEVICES.c.type))
        .distinct()
        .select_from(_HELD)
        .where(_IN_PLACEMENT, DEPLOYABLES.c.num_accelerators > 0)
    )
    if hostname is not None:
        rows = rows.where(HOSTS.c.hostname == hostname)
    with db.reader() as conn:
        kinds = list(conn.execute(rows).scalars())
    provided = {rc for kind in kinds for rc in _classes_of(kind, standard)}
    return sorted(rc for rc in asked - provided if not names.is_memory_class(rc))
