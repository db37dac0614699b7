"""A claim's allocation in Placement: the best candidate, by spec 001's weigher, allocated
for the claim's consumer (chosen again while other consumers win the race).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import Row, select, union

from acceleron import metrics
from acceleron.bitstreams.base import BitstreamStore
from acceleron.db.models import Deployable, Device, Host, PlacementProvider, table
from acceleron.db.session import Database
from acceleron.exceptions import (
    AllocationConflict,
    Conflict,
    NoCapacity,
    NoMigPlacement,
    NotProvided,
    PlacementError,
    PlacementUnavailable,
)
from acceleron.placement import tree
from acceleron.placement.client import AllocationRequest, Candidates, PlacementClient
from acceleron.scheduler import query, weigher
from acceleron.service import claim_view, fitting, mig_layouts
from acceleron.service.claim_end import ATTEMPTS, record_step
from acceleron.service.claim_survey import (
    Survey,
    candidate_queries,
    survey,
    unprovided,
    wanted_functions,
)

LOG = logging.getLogger(__name__)
DEPLOYABLES, DEVICES, HOSTS = table(Deployable), table(Device), table(Host)
PROVIDERS = table(PlacementProvider)


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
    """Allocate the best candidate for the claim's consumer (on ``hostname`` when it is
    given); choose again while other consumers win the race. The allocation and its
    compute node's name. Only regions that hold a group's function, or whose region
    type a bitstream it names fits, are candidates (``service.fitting``; ``nested``:
    whether Placement has them as providers of their own); NoFit at once when no
    region anywhere can serve a group.

    With ``options`` (the sync's, nested) the candidates come from Acceleron's own view
    of the hosts the survey chose (``claim_view``) first, without Placement's candidate
    query; where the view has none, or once Placement refused one of its choices (409),
    from the candidate queries (``claim_survey.candidate_queries``)."""
    steered, fits = fitting.with_fit_traits(db, store, groups, claim.project_id, nested)
    for fit in fits:
        if fit is not None and fit.nowhere:
            raise fit.refusal()
    wanted = wanted_functions(groups, store, claim.project_id)
    found = survey(db, groups, wanted, hostname)
    choose = _Chooser(db, groups, fits, wanted)
    viewed = options is not None and options.nested and nested
    for attempt in range(1, ATTEMPTS + 1):
        view = None  # read again after a conflict: the claims made meanwhile are in it
        if viewed:
            view = claim_view.read(db, found.holder_trees | found.trees)
        best = None if view is None else choose(view.candidates(query.profile_groups(steered)))
        direct = best is not None
        if best is None:
            best = _queried(db, placement, steered, found, choose, view)
        if best is None:  # the planner's reason, where only positions were missing
            raise (
                choose.unplaced[-1]
                if choose.unplaced
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
            # A new consumer's allocation refused: capacity taken, or the consumer is not
            # new (Placement refuses it every time: say so, and never touch what it holds).
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


@dataclasses.dataclass
class _Chooser:
    """The best of some candidates, among those whose MIG slices have a position on
    their GPUs (``mig_layouts``); why the others had none, in ``unplaced``."""

    db: Database
    groups: Sequence[Mapping[str, str]]
    fits: Sequence[fitting.Fit | None]
    wanted: Mapping[str, frozenset[str]]
    unplaced: list[NoMigPlacement] = dataclasses.field(default_factory=list)

    def __call__(self, candidates: Candidates) -> AllocationRequest | None:
        placed = mig_layouts.positioned(self.db, candidates, self.groups)
        if placed.refusal is not None:
            self.unplaced.append(placed.refusal)
        return _chosen(placed.candidates, self.fits, self.wanted)


def _chosen(
    candidates: Candidates, fits: Sequence[fitting.Fit | None], wanted: Mapping[str, frozenset[str]]
) -> AllocationRequest | None:
    return weigher.best(_fitting(candidates, fits), wanted)


def _queried(
    db: Database,
    placement: PlacementClient,
    groups: Sequence[Mapping[str, str]],
    found: Survey,
    choose: Callable[[Candidates], AllocationRequest | None],
    view: claim_view.View | None,
) -> AllocationRequest | None:
    """The best candidate of the first candidate query that has one; what each answer
    says is used settles the view's providers (``claim_view.settle_stale``)."""
    for params in candidate_queries(groups, found):
        answer = placement.get_allocation_candidates(params)
        if view is not None:
            claim_view.settle_stale(db, view, answer)
        best = choose(answer)
        if best is not None:
            return best
    return None


def _nothing_free(
    db: Database,
    groups: Sequence[Mapping[str, str]],
    hostname: str | None,
    options: tree.Options | None,
    view: claim_view.View | None = None,
    placement: PlacementClient | None = None,
) -> NoCapacity:
    """Why no candidate: no accelerator of a class asked for is published at all
    (NotProvided); a group asks for more of a class than any provider of it has (the
    ``view`` of the hosts surveyed says); or those that are are taken, disabled or match
    no group."""
    missing = unprovided(
        db, groups, hostname, None if options is None else options.standard_classes
    )
    where = "No host" if hostname is None else f"Host {hostname!r}"
    if missing:
        return NotProvided(
            f"{where} provides {', '.join(missing)}: Acceleron has published no accelerator "
            "of that class in Placement (is the device profile's resource class right, and "
            "has a host with such a device reported?)."
        )
    pooled = options is not None and options.pools
    too_big = _larger_than_any(groups, view, pooled, placement)
    if too_big:
        return NoCapacity(too_big)
    where = "No host has" if hostname is None else f"Host {hostname!r} does not have"
    return NoCapacity(
        f"{where} the accelerators the profile asks for free: they are all in use or "
        "disabled, or none matches its groups."
    )


def _larger_than_any(
    groups: Sequence[Mapping[str, str]],
    view: claim_view.View | None,
    pooled: bool = False,
    placement: PlacementClient | None = None,
) -> str | None:
    """Why a group no provider can serve cannot be served: it asks for more of a class
    than the largest provider of it has (a group lands on one provider), from the
    ``view`` of the hosts surveyed, else from Placement (a query for one unit, whose
    summaries give each provider's capacity); None when every group fits some provider,
    or no provider of the class is known."""
    for index, group in enumerate(query.profile_groups(groups)):
        for rc, amount in sorted(group.resources.items()):
            if amount < 2:
                continue
            sizes = _sizes(rc, view, placement)
            if sizes and max(sizes) < amount:
                hint = (
                    ""
                    if pooled
                    else (
                        f": ask for them as {amount} groups of one, or publish identical devices "
                        f"as one provider ([placement] pools)"
                    )
                )
                return (
                    f"Group {index} of the device profile asks for {amount} {rc} in one group, "
                    f"which lands on one provider, but the largest provider of {rc} has "
                    f"{max(sizes)}{hint}."
                )
    return None


def _sizes(rc: str, view: claim_view.View | None, placement: PlacementClient | None) -> list[int]:
    """The capacity of each provider of ``rc`` known: in the view, else in Placement."""
    if view is not None:
        sizes = [s.resources[rc].capacity for s in view.summaries.values() if rc in s.resources]
        if sizes:
            return sizes
    if placement is None:
        return []
    try:
        answer = placement.get_allocation_candidates([("resources", f"{rc}:1"), ("limit", "50")])
    except PlacementError:
        return []
    return [s.resources[rc].capacity for s in answer.summaries.values() if rc in s.resources]


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
    """The host of the accelerators chosen (one host), from Acceleron's own records: the
    host of each deployable's provider, of each pool, or (flat mode) of each compute
    node's; else (a pool Placement has before its sync is recorded) the name of their
    compute node in Placement, a host Acceleron knows."""
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
    if not hosts:
        hosts = _roots(db, placement, providers)
    if len(hosts) != 1:
        raise Conflict(
            f"The allocation chosen spans {len(hosts)} hosts of Acceleron; expected one."
        )
    return str(hosts.pop())


def _roots(db: Database, placement: PlacementClient, providers: Sequence[str]) -> set[str]:
    """The hosts Acceleron knows whose compute nodes in Placement are the roots of
    ``providers``."""
    names: set[str] = set()
    for rp in providers:
        found = placement.get_provider(rp)
        root = placement.get_provider(found.root_uuid) if found and found.root_uuid else None
        if root is not None:
            names.add(root.name)
    with db.reader() as conn:
        known = conn.execute(select(HOSTS.c.hostname).where(HOSTS.c.hostname.in_(sorted(names))))
        return set(known.scalars())


def allocations_of(request: AllocationRequest) -> dict[str, dict[str, int]]:
    """What the claim allocated: provider uuid -> resource class -> amount."""
    return {rp: dict(resources) for rp, resources in request.allocations.items()}
