"""Acceleron's own view of where a claim may land, without Placement's candidate query.

Acceleron published every provider of a host (``placement.tree``: inventory, reserved,
traits) and knows what is held on each: the attach handles its requests hold, what
the claims being made asked for, and what the claims being ended still hold in
Placement once their requests are gone (a release drops its allocation last: counted
free before that, the unit drew claims Placement refused, 409, under contention).
From that a claim can choose among the hosts the survey picked and write its
allocation with one ``PUT /allocations/{consumer}``:
Placement itself refuses an allocation beyond a provider's capacity (409), so a view
that is behind never allocates twice, it only chooses badly.

The view is behind where another consumer (Nova, between its allocation and its bind;
anyone writing to Placement) holds capacity on Acceleron's providers. Such a provider
is marked stale (``mark_stale``) when a claim's own allocation there was refused, or when
Placement's answer to a candidate query shows more used than the view counts; a claim
asks Placement's candidate query about a stale provider until an answer of Placement
shows the view right again (``settle_stale``), or for ``STALE_FOR`` seconds. A host whose
last report is not in Placement yet is not in the view either.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, func, or_, select

from acceleron.db.models import (
    AttachHandle,
    Claim,
    Deployable,
    Device,
    Host,
    PlacementProvider,
    table,
)
from acceleron.db.session import Database
from acceleron.exceptions import InvalidPlacementName
from acceleron.placement import names, tree
from acceleron.placement.client import AllocationRequest, Candidates, Capacity, ProviderSummary
from acceleron.scheduler.query import RequestGroup

DEPLOYABLES, DEVICES, HOSTS = table(Deployable), table(Device), table(Host)
HANDLES, CLAIMS = table(AttachHandle), table(Claim)
PROVIDERS = table(PlacementProvider)
# How long a host stays stale when nothing settles it (seconds).
STALE_FOR = 60.0
# How many allocation requests the view offers the weigher at most (as a candidate
# query's ``limit``).
REQUESTS_LIMIT = 20
# How many providers the view tries for the groups of one host at most: a profile of
# many distinct groups over a host of many single-unit providers has more orderings
# than any claim can wait for. Past it the view offers what it found (maybe nothing),
# and the claim asks Placement's candidate query, which caps its own work.
SEARCH_STEPS = 20_000

_stale: dict[str, float] = {}  # compute node provider -> until when (monotonic)
_lock = threading.Lock()


@dataclasses.dataclass(frozen=True)
class View:
    """The providers with accelerators of some hosts, as Acceleron published them, with
    what is used of each as far as Acceleron knows (``root_uuid``: its compute node);
    ``stale``: those whose view may be behind Placement."""

    summaries: Mapping[str, ProviderSummary]
    stale: frozenset[str] = frozenset()

    def candidates(self, groups: Sequence[RequestGroup]) -> Candidates:
        """The allocation requests Placement would offer for ``groups`` on these hosts'
        providers that are not stale (every group on one host; groups may share a
        provider while it has room), as a candidate query answers: the weigher ranks
        them the same way."""
        by_root: dict[str, list[str]] = {}
        for rp, summary in sorted(self.summaries.items()):
            if rp not in self.stale and summary.root_uuid is not None:
                by_root.setdefault(summary.root_uuid, []).append(rp)
        found: list[AllocationRequest] = []
        for root in sorted(by_root):
            found.extend(itertools.islice(self._on(by_root[root], groups), REQUESTS_LIMIT))
        return Candidates(tuple(found[:REQUESTS_LIMIT]), self.summaries)

    def _on(
        self, providers: Sequence[str], groups: Sequence[RequestGroup]
    ) -> Iterator[AllocationRequest]:
        """The distinct allocations of ``groups`` to ``providers`` that fit, found by
        placing one group at a time and leaving a provider as soon as it lacks room.
        Identical groups side by side take providers in the order listed, one placement
        per set of providers: N groups of one region on N single-region providers are
        one allocation, not the N! orderings (nor the N^N tries) of it."""
        serving = [[rp for rp in providers if self._serves(rp, group)] for group in groups]
        seen: set[frozenset[tuple[str, frozenset[tuple[str, int]]]]] = set()
        steps = itertools.count()
        for chosen in self._placements(serving, groups, [], {}, steps):
            allocations: dict[str, dict[str, int]] = {}
            for rp, group in zip(chosen, groups, strict=True):
                mine = allocations.setdefault(rp, {})
                for rc, amount in group.resources.items():
                    mine[rc] = mine.get(rc, 0) + amount
            key = frozenset((rp, frozenset(r.items())) for rp, r in allocations.items())
            if key not in seen:
                seen.add(key)
                mappings = {g.suffix: (rp,) for rp, g in zip(chosen, groups, strict=True)}
                yield AllocationRequest(allocations, mappings)

    def _placements(
        self,
        serving: Sequence[Sequence[str]],
        groups: Sequence[RequestGroup],
        chosen: list[str],
        taken: dict[str, dict[str, int]],
        steps: Iterator[int],
    ) -> Iterator[list[str]]:
        """Each way to place the groups after ``chosen`` (what ``taken`` holds so far),
        until ``steps`` (a provider tried, each) reaches ``SEARCH_STEPS``."""
        index = len(chosen)
        if index == len(groups):
            yield list(chosen)
            return
        group, options = groups[index], serving[index]
        if index and _alike(groups[index - 1], group):
            options = options[options.index(chosen[-1]) :]  # same list: it is there
        for rp in options:
            if next(steps) >= SEARCH_STEPS:
                return
            mine = taken.setdefault(rp, {})
            wanted = {rc: mine.get(rc, 0) + n for rc, n in group.resources.items()}
            if not self._room(rp, wanted):
                continue
            before = dict(mine)
            mine.update(wanted)
            chosen.append(rp)
            yield from self._placements(serving, groups, chosen, taken, steps)
            chosen.pop()
            taken[rp] = before

    def _serves(self, rp: str, group: RequestGroup) -> bool:
        traits = self.summaries[rp].traits
        return (
            group.required <= traits
            and not group.forbidden & traits
            and self._room(rp, group.resources)
        )

    def _room(self, rp: str, resources: Mapping[str, int]) -> bool:
        have = self.summaries[rp].resources
        return all(
            rc in have and have[rc].capacity - have[rc].used >= n for rc, n in resources.items()
        )


def _alike(one: RequestGroup, other: RequestGroup) -> bool:
    """Whether two groups ask the same (their suffixes aside)."""
    return (one.resources, one.required, one.forbidden) == (
        other.resources,
        other.required,
        other.forbidden,
    )


def read(db: Database, roots: Iterable[str], options: tree.Options) -> View:
    """The view of the hosts whose compute node providers are ``roots``: the providers
    with accelerators of those whose last report is in Placement (those marked stale
    among them: ``View.stale``). Only accelerator classes are in it (what a request
    holds of a memory class is Placement's to know): a group asking for another finds
    no room here. A host's providers are rendered once per generation of its report."""
    with db.reader() as conn:
        hosts = conn.execute(_SYNCED.where(HOSTS.c.rp_uuid.in_(sorted(set(roots))))).all()
        found = {host.hostname: _rendered.get(_key(host, options)) for host in hosts}
        missing = [host for host in hosts if found[host.hostname] is None]
        if missing:
            found.update(_render(conn, missing, options))
        published = [p for p in found.values() if p is not None]
        held = _held(conn, [d for p in published for d in p.providers])
        placing = _placing(conn)
    summaries: dict[str, ProviderSummary] = {}
    for host in published:
        used: dict[str, int] = {}
        for deployable, rp in host.providers.items():
            used[rp] = used.get(rp, 0) + held.get(deployable, 0)
        for rp, summary in host.summaries.items():
            asked = placing.get(rp, {})
            resources = {
                rc: Capacity(c.capacity, used.get(rp, 0) + asked.get(rc, 0))
                for rc, c in summary.resources.items()
            }
            summaries[rp] = dataclasses.replace(summary, resources=resources)
    return View(summaries, frozenset(rp for rp in summaries if _is_stale(rp)))


@dataclasses.dataclass(frozen=True)
class _Published:
    """A host's providers with accelerators as the sync renders them (nothing used yet),
    and the provider of each of its deployables (by id)."""

    summaries: Mapping[str, ProviderSummary]
    providers: Mapping[int, str]


# Hosts whose providers are as their last report says (the sync published it).
_SYNCED = select(
    HOSTS.c.id, HOSTS.c.created_at, HOSTS.c.hostname, HOSTS.c.rp_uuid, HOSTS.c.generation
).where(HOSTS.c.rp_uuid.is_not(None), HOSTS.c.generation == HOSTS.c.synced_generation)
RENDERED_KEPT = 4096  # hosts' renderings kept (all of them dropped past that)
_rendered: dict[tuple[Any, ...], _Published] = {}


def _key(host: Any, options: tree.Options) -> tuple[Any, ...]:
    """A host's report as rendered: its row (a host removed and reported again is a new
    one), the generation of its report, its compute node and the sync's options."""
    functionality = tuple(sorted(options.functionality.items()))
    return (
        host.id,
        host.created_at,
        host.hostname,
        host.rp_uuid,
        host.generation,
        options.standard_classes,
        functionality,
        options.pools,
    )


def _render(
    conn: Connection, hosts: Sequence[Any], options: tree.Options
) -> dict[str, _Published | None]:
    """The providers of ``hosts``, rendered from their rows as the sync does (None for a
    host the sync could not render whole: Placement's query knows better), kept."""
    devices = conn.execute(
        select(DEVICES).where(DEVICES.c.hostname.in_([h.hostname for h in hosts]))
    ).all()
    deployables = conn.execute(
        select(DEPLOYABLES).where(DEPLOYABLES.c.device_id.in_([d.id for d in devices]))
    ).all()
    recorded: dict[str, set[str]] = {}
    for hostname, uuid in conn.execute(
        select(PROVIDERS.c.hostname, PROVIDERS.c.uuid).where(
            PROVIDERS.c.hostname.in_([h.hostname for h in hosts]),
            PROVIDERS.c.retired.is_(False),
        )
    ):
        recorded.setdefault(hostname, set()).add(uuid)
    rendered: dict[str, _Published | None] = {}
    with _lock:
        if len(_rendered) + len(hosts) > RENDERED_KEPT:
            _rendered.clear()
    for host in hosts:
        mine = [d for d in devices if d.hostname == host.hostname]
        ids = {d.id for d in mine}
        published = _host(host, mine, [d for d in deployables if d.device_id in ids], options)
        if published is not None and not set(published.summaries) <= recorded.get(
            host.hostname, set()
        ):
            published = None  # published in another shape (pools switched): Placement knows
        rendered[host.hostname] = published
        if published is not None:
            with _lock:
                _rendered[_key(host, options)] = published
    return rendered


def _host(
    host: Any, devices: Sequence[Any], deployables: Sequence[Any], options: tree.Options
) -> _Published | None:
    """The host's providers with accelerators, as the sync publishes them, with their
    accelerator class's capacity (total less reserved)."""
    try:
        providers = tree.desired_tree(host.hostname, host.rp_uuid, devices, deployables, options)
    except InvalidPlacementName:
        return None
    of: dict[int, str] = {}
    classes: dict[str, set[str]] = {}
    by_id = {d.id: d for d in devices}
    pooled = {member: p.uuid for p in providers for member in p.members}
    for dep in deployables:
        device = by_id[dep.device_id]
        whole = dep.kind == "device"  # its inventory is on the device's provider
        rp = names.provider_uuid(host.hostname, device.pci_address) if whole else dep.uuid
        rp = pooled.get(dep.id, rp)  # or on its pool
        of[dep.id] = rp
        classes.setdefault(rp, set()).update(_accelerator_classes(device, dep, options))
    summaries = {}
    for provider in providers:
        resources = {
            rc: Capacity(inv.total - inv.reserved, 0)
            for rc, inv in provider.inventories.items()
            if rc in classes.get(provider.uuid, ())
        }
        if resources:
            summaries[provider.uuid] = ProviderSummary(
                resources, provider.traits, provider.parent_uuid, host.rp_uuid
            )
    return _Published(summaries, of)


def _accelerator_classes(device: Any, dep: Any, options: tree.Options) -> set[str]:
    """The deployable's accelerator class, as the sync names it (none without any)."""
    if dep.num_accelerators <= 0:
        return set()
    where = f"{device.hostname} {device.pci_address}"
    origin = names.Origin(driver=device.driver_name, device=where)
    kind = dep.accelerator_type or device.type
    return {names.accelerator_class(kind, standard=options.standard_classes, origin=origin)}


def _held(conn: Connection, deployable_ids: Sequence[int]) -> dict[int, int]:
    """How many handles requests hold, by deployable."""
    if not deployable_ids:
        return {}
    rows = conn.execute(
        select(HANDLES.c.deployable_id, func.count())
        .where(HANDLES.c.deployable_id.in_(deployable_ids), HANDLES.c.arq_id.is_not(None))
        .group_by(HANDLES.c.deployable_id)
    ).all()
    return {int(d): int(n) for d, n in rows}


# Claims whose allocation Placement may hold while no request of theirs holds a handle:
# those being made, and those being ended whose requests are gone (step ``placed``) but
# whose allocation is not dropped yet (a claim ends its requests first).
_PLACING = select(CLAIMS.c.allocations).where(
    CLAIMS.c.allocations.is_not(None),
    or_(
        CLAIMS.c.state == "allocating",
        (CLAIMS.c.state == "releasing") & CLAIMS.c.step.in_(("placing", "placed")),
    ),
)


def _placing(conn: Connection) -> dict[str, dict[str, int]]:
    """What the claims being made, or being ended, hold or asked for in Placement beyond
    their requests' handles (``_PLACING``), by provider and class."""
    found: dict[str, dict[str, int]] = {}
    rows = conn.execute(_PLACING).scalars()
    for allocations in rows:
        for rp, resources in (allocations or {}).items():
            for rc, n in resources.items():
                found.setdefault(rp, {})[rc] = found.get(rp, {}).get(rc, 0) + int(n)
    return found


# --- stale providers -------------------------------------------------------------------


def mark_stale(providers: Iterable[str]) -> None:
    """The view of these providers may be behind Placement: claims ask Placement's
    candidate query about them for ``STALE_FOR`` seconds, or until settled."""
    until = time.monotonic() + STALE_FOR
    with _lock:
        for rp in providers:
            _stale[rp] = until


def settle_stale(view: View, answer: Candidates) -> None:
    """Compare what a candidate query says is used on the view's providers with what the
    view counts: providers with more used are stale, the others right again."""
    behind: list[str] = []
    right: list[str] = []
    for rp, summary in answer.summaries.items():
        mine = view.summaries.get(rp)
        if mine is None:
            continue
        counted = mine.resources
        more = any(
            c.used > counted[rc].used for rc, c in summary.resources.items() if rc in counted
        )
        (behind if more else right).append(rp)
    mark_stale(behind)
    with _lock:
        for rp in right:
            _stale.pop(rp, None)


def clear() -> None:
    """Believe the view everywhere again (a fresh Placement: tests, benchmarks)."""
    with _lock:
        _stale.clear()


def _is_stale(rp: str) -> bool:
    with _lock:
        until = _stale.get(rp)
        if until is not None and until <= time.monotonic():
            del _stale[rp]
            return False
        return until is not None
