"""Where a claim may land: Acceleron's own records read before Placement is asked
(``survey``), and the candidate queries tried in turn, cheapest first
(``candidate_queries``; docs/claims.md).
"""

from __future__ import annotations

import dataclasses
import random
import uuid as uuidlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Select, bindparam, func, select, true

from acceleron.bitstreams.base import BitstreamStore
from acceleron.bitstreams.model import Query
from acceleron.db.models import Deployable, Device, Host, table
from acceleron.db.session import Database
from acceleron.exceptions import InvalidPlacementName, NoCapacity, NotFound
from acceleron.placement import names, tree
from acceleron.scheduler import query, weigher

DEPLOYABLES, DEVICES, HOSTS = table(Deployable), table(Device), table(Host)
# How many candidates are asked for first, among the regions that hold a wanted function.
HOLDERS_LIMIT = 10
# How many candidates are asked for among every provider: the weigher chooses among a
# sample, and Placement encodes (and the API decodes) a few dozen rather than thousands.
CANDIDATES_LIMIT = 20
# How many hosts' trees are asked about one at a time before a wider query.
TREES_TRIED = 2


def wanted_functions(
    groups: Sequence[Mapping[str, str]], store: BitstreamStore | None, project: str
) -> dict[str, frozenset[str]]:
    """The functions each group wants, by request group suffix, for the weigher: named
    by id, or found in the bitstream catalogue by function name or bitstream (what the
    project sees)."""
    return weigher.wanted_by(groups, None if store is None else _catalogue(store, project))


def _catalogue(store: BitstreamStore, project: str) -> weigher.Catalogue:
    """The store's look-up of a group's ``CATALOGUE_KEYS``, as the project sees it."""

    def functions(key: str, value: str) -> list[str | None]:
        if key == "accel:function_name":
            items = store.find(Query(function_name=value, project=project))
        elif key == "accel:bitstream_name":
            items = store.find(Query(name=value, project=project))
        else:
            try:
                items = [store.get(value, project)]
            except NotFound:
                items = []
        return [b.function_uuid for b in items]

    return functions


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
    folded = {
        suffix: frozenset(weigher.fold_function(f) for f in fs) for suffix, fs in wanted.items()
    }
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
        found.update(
            conn.execute(rows.where(order < pivot).order_by(order).limit(WALKED)).scalars()
        )
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
    """``TREES_TRIED`` compute node providers, at random, of the hosts with a device of
    a type published in one of ``classes`` (of any host with a device, when no device
    type is published in one of them: a memory class, say); ``root`` alone if given."""
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
    if not types:
        return frozenset(_pick(_walk(conn, with_device, DEVICES.c.uuid)))
    found: set[str] = set()
    for type_ in types:
        found |= _walk(conn, with_device.where(DEVICES.c.type == type_), DEVICES.c.uuid)
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
    (on ``hostname`` when given) is counted in, free or not: a claim for them can never
    land, however long one waits. ``standard``: whether the sync publishes standard
    classes (``FPGA``) rather than custom ones (None: either spelling counts)."""
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
