"""Acceleron's own view of where a claim may land, without Placement's candidate query
(docs/claims.md, step 2 of ``POST``).

Each host's sync records what it published (``hosts.published``, with its generation);
Acceleron counts what is held on each provider: its requests' handles, what the claims
being made asked for and what the claims being ended still hold. Placement refuses an
allocation beyond capacity (409), so a view that is behind only chooses badly. A provider
Placement showed more used on is stale (``stale_until``, the database's time, seen by
every process) and left to the candidate query until settled, or ``STALE_FOR`` seconds.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy import bindparam, case, func, or_, select, update

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
STALE_FOR = 60.0  # seconds a provider stays stale when nothing settles it
REQUESTS_LIMIT = 20  # allocation requests offered the weigher at most
# Providers tried for the groups of one host at most (many distinct groups over many
# single-unit providers have more orderings than a claim can wait for); past it the
# claim asks Placement's candidate query.
SEARCH_STEPS = 20_000
_ASKS = operator.attrgetter("resources", "required", "forbidden")  # a group, its suffix aside


@dataclasses.dataclass(frozen=True)
class View:
    """Some hosts' providers with accelerators, with what is used of each as far as
    Acceleron knows; ``stale``: those whose view may be behind Placement."""

    summaries: Mapping[str, ProviderSummary]
    stale: frozenset[str] = frozenset()

    def candidates(self, groups: Sequence[RequestGroup]) -> Candidates:
        """The allocation requests Placement would offer for ``groups`` on the providers
        not stale (every group on one host), as a candidate query answers."""
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
        """The distinct allocations of ``groups`` to ``providers`` that fit, one group
        at a time; identical groups side by side take providers in the order listed
        (N groups on N single-unit providers: one allocation, not N! orderings)."""
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
        """Each way to place the groups after ``chosen`` (``taken``: what they hold),
        until ``steps`` reaches ``SEARCH_STEPS``."""
        index = len(chosen)
        if index == len(groups):
            yield list(chosen)
            return
        group, options = groups[index], serving[index]
        if index and _ASKS(groups[index - 1]) == _ASKS(group):
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


def read(db: Database, roots: Iterable[str]) -> View:
    """The view of the hosts whose compute nodes are ``roots`` and whose last report is
    in Placement; accelerator classes only (a group asking for another finds no room)."""
    with db.reader() as conn:
        hosts = conn.execute(_SYNCED, {"roots": sorted(set(roots))}).all()
        published = {rp: s for host in hosts for rp, s in _published(host).items()}
        providers = conn.execute(_USED, {"providers": sorted(published)}).all()
        placing: dict[str, dict[str, int]] = {}
        for allocations in conn.execute(_PLACING).scalars() if published else ():
            for rp, resources in (allocations or {}).items():
                for rc, n in resources.items():
                    placing.setdefault(rp, {})[rc] = placing.get(rp, {}).get(rc, 0) + int(n)
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
    """What a host's sync published, for ``hosts.published``: each provider with
    accelerators, its capacity (total less reserved) by class, traits and parent."""
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
    """The host's providers, nothing used yet; none unless its last sync recorded them."""
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


# Hosts whose last report is in Placement.
_SYNCED = select(HOSTS.c.rp_uuid, HOSTS.c.generation, HOSTS.c.published).where(
    HOSTS.c.rp_uuid.in_(bindparam("roots", expanding=True)),
    HOSTS.c.generation == HOSTS.c.synced_generation,
)
# The view's providers: whether each is stale, and the handles of requests allocated there.
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


# What Placement may hold beyond the requests' handles: claims being made, and claims
# being ended whose requests are gone but whose allocation is not dropped yet.
_PLACING = select(CLAIMS.c.allocations).where(
    CLAIMS.c.allocations.is_not(None),
    or_(
        CLAIMS.c.state == "allocating",
        (CLAIMS.c.state == "releasing") & CLAIMS.c.step.in_(("placing", "placed")),
    ),
)


def mark_stale(db: Database, providers: Iterable[str], right: Iterable[str] = ()) -> None:
    """Mark ``providers`` stale for ``STALE_FOR`` seconds, and ``right`` right again."""
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
    """Providers a candidate query's answer shows more used on than the view counts are
    stale, the stale others right again."""
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
