"""Acceleron's own view of where a claim may land, without Placement's candidate query.

Acceleron published every provider of a host (``placement.tree``: inventory, reserved,
traits) and knows what is held on each: the attach handles its requests hold, and what
the claims being made asked for. From that a claim can choose among the hosts the
survey picked and write its allocation with one ``PUT /allocations/{consumer}``:
Placement itself refuses an allocation beyond a provider's capacity (409), so a view
that is behind never allocates twice, it only chooses badly.

The view is behind where another consumer (Nova, between its allocation and its bind;
anyone writing to Placement) holds capacity on Acceleron's providers. Such a host is
marked stale (``mark``) when a claim's own allocation there was refused, when
Placement's answer to a candidate query shows more used than the view counts, or when
another reader of the providers' allocations saw a consumer Acceleron has no request
for (``foreign``); a claim asks Placement's candidate query about a stale host until an
answer of Placement shows the view right again (``settle``). A host whose last report
is not synced yet is not in the view either.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, func, select

from acceleron.db.models import AttachHandle, Claim, Deployable, Device, Host, table
from acceleron.db.session import Database
from acceleron.exceptions import InvalidPlacementName
from acceleron.placement import names, tree
from acceleron.placement.client import AllocationRequest, Candidates, Capacity, ProviderSummary
from acceleron.scheduler.query import RequestGroup

DEPLOYABLES, DEVICES, HOSTS = table(Deployable), table(Device), table(Host)
HANDLES, CLAIMS = table(AttachHandle), table(Claim)
# How long a host stays stale when nothing settles it (seconds).
STALE_FOR = 60.0
# How many allocation requests the view offers the weigher at most (as a candidate
# query's ``limit``).
REQUESTS_LIMIT = 20

_stale: dict[str, float] = {}  # compute node provider -> until when (monotonic)
_stale_lock = threading.Lock()


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
        serving = [[rp for rp in providers if self._serves(rp, group)] for group in groups]
        for chosen in itertools.product(*serving):
            allocations: dict[str, dict[str, int]] = {}
            for rp, group in zip(chosen, groups, strict=True):
                mine = allocations.setdefault(rp, {})
                for rc, amount in group.resources.items():
                    mine[rc] = mine.get(rc, 0) + amount
            if all(self._room(rp, resources) for rp, resources in allocations.items()):
                mappings = {g.suffix: (rp,) for rp, g in zip(chosen, groups, strict=True)}
                yield AllocationRequest(allocations, mappings)

    def _serves(self, rp: str, group: RequestGroup) -> bool:
        traits = self.summaries[rp].traits
        return (
            group.required <= traits
            and not group.forbidden & traits
            and self._room(rp, group.resources)
        )

    def _room(self, rp: str, resources: Mapping[str, int]) -> bool:
        have = self.summaries[rp].resources
        return all(rc in have and have[rc].capacity - have[rc].used >= n
                   for rc, n in resources.items())  # fmt: skip


def read(db: Database, roots: Iterable[str], options: tree.Options) -> View:
    """The view of the hosts whose compute node providers are ``roots``: the providers
    with accelerators of those whose last report is in Placement, less those marked
    stale. Only accelerator classes are in it (what a request holds of a memory class
    is Placement's to know): a group asking for another finds no room here."""
    with db.reader() as conn:
        hosts = conn.execute(_SYNCED.where(HOSTS.c.rp_uuid.in_(sorted(set(roots))))).all()
        devices = conn.execute(
            select(DEVICES).where(DEVICES.c.hostname.in_([h.hostname for h in hosts]))
        ).all()
        deployables = conn.execute(
            select(DEPLOYABLES).where(DEPLOYABLES.c.device_id.in_([d.id for d in devices]))
        ).all()
        held = _held(conn, [d.id for d in deployables])
        placing = _placing(conn)
    summaries: dict[str, ProviderSummary] = {}
    for host in hosts:
        mine = [d for d in devices if d.hostname == host.hostname]
        summaries.update(_host(host, mine, deployables, held, placing, options))
    return View(summaries, frozenset(rp for rp in summaries if _is_stale(rp)))


# Hosts whose providers are as their last report says (the sync published it).
_SYNCED = select(HOSTS.c.hostname, HOSTS.c.rp_uuid).where(
    HOSTS.c.rp_uuid.is_not(None), HOSTS.c.generation == HOSTS.c.synced_generation
)


def _host(
    host: Any,
    devices: Sequence[Any],
    deployables: Sequence[Any],
    held: Mapping[int, int],
    placing: Mapping[str, Mapping[str, int]],
    options: tree.Options,
) -> Iterator[tuple[str, ProviderSummary]]:
    """Each provider of the host with accelerators, as the sync publishes it, and what is
    used of its accelerator class: the handles requests hold, and what claims being
    made asked for."""
    ids = {d.id for d in devices}
    mine = [d for d in deployables if d.device_id in ids]
    try:
        providers = tree.desired_tree(host.hostname, host.rp_uuid, devices, mine, options)
    except InvalidPlacementName:
        return  # the sync left something out: Placement's query knows better
    used: dict[str, int] = {}
    classes: dict[str, set[str]] = {}
    by_id = {d.id: d for d in devices}
    for dep in mine:
        device = by_id[dep.device_id]
        rp = (
            names.provider_uuid(host.hostname, device.pci_address)
            if dep.kind == "device"
            else dep.uuid
        )
        used[rp] = used.get(rp, 0) + held.get(dep.id, 0)
        classes.setdefault(rp, set()).update(_accelerator_classes(device, dep, options))
    for provider in providers:
        asked = placing.get(provider.uuid, {})
        resources = {
            rc: Capacity(inv.total - inv.reserved, used.get(provider.uuid, 0) + asked.get(rc, 0))
            for rc, inv in provider.inventories.items()
            if rc in classes.get(provider.uuid, ())
        }
        if resources:
            yield (
                provider.uuid,
                ProviderSummary(resources, provider.traits, provider.parent_uuid, host.rp_uuid),
            )


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


def _placing(conn: Connection) -> dict[str, dict[str, int]]:
    """What the claims being made asked Placement for (their requests hold no handle
    yet), by provider and class."""
    found: dict[str, dict[str, int]] = {}
    rows = conn.execute(
        select(CLAIMS.c.allocations).where(
            CLAIMS.c.state == "allocating", CLAIMS.c.allocations.is_not(None)
        )
    ).scalars()
    for allocations in rows:
        for rp, resources in (allocations or {}).items():
            for rc, n in resources.items():
                found.setdefault(rp, {})[rc] = found.get(rp, {}).get(rc, 0) + int(n)
    return found


# --- stale providers -------------------------------------------------------------------


def mark(providers: Iterable[str]) -> None:
    """The view of these providers may be behind Placement: claims ask Placement's
    candidate query about them for ``STALE_FOR`` seconds, or until settled."""
    until = time.monotonic() + STALE_FOR
    with _stale_lock:
        for rp in providers:
            _stale[rp] = until


def foreign(providers: Iterable[str]) -> None:
    """Another reader of Placement (the reconciler, the sync) saw allocations on these
    providers of a consumer Acceleron has no request for: the view is behind there."""
    mark(providers)


def settle(view: View, answer: Candidates) -> None:
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
    mark(behind)
    with _stale_lock:
        for rp in right:
            _stale.pop(rp, None)


def clear() -> None:
    """Believe the view everywhere again (a fresh Placement: tests, benchmarks)."""
    with _stale_lock:
        _stale.clear()


def _is_stale(rp: str) -> bool:
    with _stale_lock:
        until = _stale.get(rp)
        if until is not None and until <= time.monotonic():
            del _stale[rp]
            return False
        return until is not None
