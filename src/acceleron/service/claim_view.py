"""Acceleron's own view of where a claim may land, without Placement's candidate query.

Each host's Placement sync records what it published (``hosts.published``, written with
the synced generation: ``published``): its providers with accelerators, their capacity
(total less reserved), traits and parent. Acceleron also knows what is held on each
provider: the attach handles its requests hold (through the provider they were
allocated on), what the claims being made asked for, and what the claims being ended
still hold in Placement once their requests are gone (a release drops its allocation
last: counted free before that, the unit drew claims Placement refused, 409, under
contention). From that a claim can choose among the hosts the survey picked and write
its allocation with one ``PUT /allocations/{consumer}``: Placement itself refuses an
allocation beyond a provider's capacity (409), so a view that is behind never allocates
twice, it only chooses badly.

The view is behind where another consumer (Nova, between its allocation and its bind;
anyone writing to Placement) holds capacity on Acceleron's providers. Such a provider
is marked stale (``mark_stale``) when a claim's own allocation there was refused, or when
Placement's answer to a candidate query shows more used than the view counts; a claim
asks Placement's candidate query about a stale provider until an answer of Placement
shows the view right again (``settle_stale``), or for ``STALE_FOR`` seconds. A host whose
last report is not in Placement yet is not in the view either.

No process-wide state: the marks are the providers' ``stale_until`` (the database's
time), read with what is held on each, so every API process sees one process's mark.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, bindparam, case, func, or_, select, update

from acceleron.db.clock import clock
from acceleron.db.models import (
    AcceleratorRequest,
    AttachHandle,
    Claim,
    Host,
    PlacementProvider,
    table,
)
from acceleron.db.session import Database
from acceleron.placement import names, tree
from acceleron.placement.client import AllocationRequest, Candidates, Capacity, ProviderSummary
from acceleron.scheduler.query import RequestGroup

HOSTS, HANDLES, ARQS = table(Host), table(AttachHandle), table(AcceleratorRequest)
CLAIMS, PROVIDERS = table(Claim), table(PlacementProvider)
# How long a provider stays stale when nothing settles it (seconds).
STALE_FOR = 60.0
# How many allocation requests the view offers the weigher at most (as a candidate
# query's ``limit``).
REQUESTS_LIMIT = 20
# How many providers the view tries for the groups of one host at most: a profile of
# many distinct groups over a host of many single-unit providers has more orderings
# than any claim can wait for. Past it the view offers what it found (maybe nothing),
# and the claim asks Placement's candidate query, which caps its own work.
SEARCH_STEPS = 20_000


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


def read(db: Database, roots: Iterable[str]) -> View:
    """The view of the hosts whose compute node providers are ``roots``: the providers
    with accelerators of those whose last report is in Placement, as their sync
    published them (``hosts.published``), with what is used of each (those marked stale
    among them: ``View.stale``). Only accelerator classes are in it (what a request holds
    of a memory class is Placement's to know): a group asking for another finds no room
    here."""
    with db.reader() as conn:
        hosts = conn.execute(_SYNCED, {"roots": sorted(set(roots))}).all()
        published = {rp: s for host in hosts for rp, s in _published(host).items()}
        providers = conn.execute(_USED, {"providers": sorted(published)}).all()
        placing = _placing(conn) if published else {}
    used = {rp: n for rp, _, n in providers}
    summaries = {
        rp: dataclasses.replace(
            summary,
            resources={
                rc: Capacity(c.capacity, used.get(rp, 0) + placing.get(rp, {}).get(rc, 0))
                for rc, c in summary.resources.items()
            },
        )
        for rp, summary in published.items()
    }
    return View(summaries, frozenset(rp for rp, stale, _ in providers if stale))


def published(generation: int, providers: Iterable[tree.DesiredProvider]) -> dict[str, Any]:
    """What the sync of a host's ``generation`` published, as the view reads it (written
    to ``hosts.published`` with the synced generation): each provider with accelerators,
    its accelerator classes' capacity (total less reserved), traits and parent."""
    found = {}
    for p in providers:
        capacity = {
            rc: inv.total - inv.reserved
            for rc, inv in p.inventories.items()
            if names.is_accelerator_class(rc)
        }
        if capacity:
            found[p.uuid] = {
                "capacity": capacity,
                "traits": sorted(p.traits),
                "parent": p.parent_uuid,
            }
    return {"generation": generation, "providers": found}


def _published(host: Any) -> dict[str, ProviderSummary]:
    """The host's providers with accelerators, nothing used yet; none when its last sync
    is not one of this release (it wrote nothing, or what an earlier generation had)."""
    record = host.published or {}
    if record.get("generation") != host.generation:
        return {}
    return {
        rp: ProviderSummary(
            {rc: Capacity(int(n), 0) for rc, n in p["capacity"].items()},
            frozenset(p["traits"]),
            p["parent"],
            host.rp_uuid,
        )
        for rp, p in record["providers"].items()
    }


# Hosts whose providers are as their last report says (the sync published it).
_SYNCED = select(HOSTS.c.rp_uuid, HOSTS.c.generation, HOSTS.c.published).where(
    HOSTS.c.rp_uuid.in_(bindparam("roots", expanding=True)),
    HOSTS.c.generation == HOSTS.c.synced_generation,
)
# The view's providers: whether each is stale, and how many handles requests hold that
# were allocated on it (Placement counts them there, a pool's included).
_USED = (
    select(PROVIDERS.c.uuid, PROVIDERS.c.stale_until > clock(), func.count(HANDLES.c.id))
    .select_from(
        PROVIDERS.outerjoin(ARQS, ARQS.c.device_rp_uuid == PROVIDERS.c.uuid).outerjoin(
            HANDLES, HANDLES.c.arq_id == ARQS.c.id
        )
    )
    .where(PROVIDERS.c.uuid.in_(bindparam("providers", expanding=True)))
    .group_by(PROVIDERS.c.uuid, PROVIDERS.c.stale_until)
)


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


def mark_stale(db: Database, providers: Iterable[str], right: Iterable[str] = ()) -> None:
    """The view of ``providers`` may be behind Placement: claims ask Placement's candidate
    query about them for ``STALE_FOR`` seconds (the database's time), or until settled;
    that of ``right`` is right again. One write, in every API process's view at once."""
    stale = sorted(set(providers))
    changed = sorted({*stale, *right})
    if changed:
        with db.writer() as conn:
            conn.execute(
                update(PROVIDERS)
                .where(PROVIDERS.c.uuid.in_(changed))
                .values(stale_until=case((PROVIDERS.c.uuid.in_(stale), clock(STALE_FOR)))),
            )


def settle_stale(db: Database, view: View, answer: Candidates) -> None:
    """Compare what a candidate query says is used on the view's providers with what the
    view counts: providers with more used are stale, the stale others right again."""
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
    mark_stale(db, behind, view.stale.intersection(right))
