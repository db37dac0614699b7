"""Where a claim's MIG instances can go: the instances each partitionable GPU holds, as
its slot handles record them, and the candidates whose GPUs have a valid position for
every slice asked of them (``acceleron.mig.planner``).

Placement counts a GPU's units, not where they sit: a candidate can have the units of a
3g and no position for it. A claim chooses among the candidates that have one; when
none has, it is refused with the planner's reason (``NoMigPlacement``, 409). Instances
being made (their bind's task not done yet) are not placed here: the agent's planner,
which runs after them, has the last word.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from sqlalchemy import select

from acceleron.db.models import AttachHandle, Deployable, Device, table
from acceleron.db.session import Database
from acceleron.exceptions import InvalidInput, NoMigPlacement
from acceleron.mig import geometry, planner, units
from acceleron.placement.client import AllocationRequest, Candidates
from acceleron.scheduler import query

HANDLES, DEPLOYABLES, DEVICES = table(AttachHandle), table(Deployable), table(Device)


def mig_groups(groups: Sequence[Mapping[str, str]]) -> dict[int, str]:
    """The MIG profile each group asks for, by group index."""
    return {i: g[units.PROFILE_KEY] for i, g in enumerate(groups) if units.PROFILE_KEY in g}


def layouts(db: Database, providers: Sequence[str]) -> dict[str, geometry.Layout]:
    """The instances each partitionable GPU among ``providers`` holds, by provider (a GPU
    whose recorded instances break its table is left out: its agent's word decides)."""
    if not providers:
        return {}
    rows = (
        select(DEPLOYABLES.c.rp_uuid, DEVICES.c.product_id, HANDLES.c.attach_info)
        .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
        .outerjoin(HANDLES, HANDLES.c.deployable_id == DEPLOYABLES.c.id)
        .where(DEPLOYABLES.c.rp_uuid.in_(sorted(set(providers))), DEPLOYABLES.c.kind == units.KIND)
    )
    infos: dict[str, tuple[str, list[Mapping[str, str]]]] = {}
    with db.reader() as conn:
        for rp, product_id, info in conn.execute(rows):
            found = infos.setdefault(str(rp), (str(product_id), []))
            if info and info.get(units.INFO_PROFILE):
                found[1].append(info)
    result = {}
    for rp, (product_id, held) in infos.items():
        try:
            result[rp] = units.layout(geometry.product(product_id), held)
        except InvalidInput:
            continue
    return result


@dataclasses.dataclass
class Positioned:
    """The candidates whose MIG slices all have a position; why the last one refused
    had none."""

    candidates: Candidates
    refusal: NoMigPlacement | None = None


def positioned(
    db: Database, candidates: Candidates, groups: Sequence[Mapping[str, str]]
) -> Positioned:
    """The candidates whose partitionable GPUs can take the slices their groups ask of
    them, each GPU planned for its groups in order (two slices of one claim on one GPU
    take two positions)."""
    wanted = mig_groups(groups)
    if not wanted or not candidates.requests:
        return Positioned(candidates)
    rps = [
        rp
        for request in candidates.requests
        for index in wanted
        for rp in request.mappings.get(f"{query.GROUP_PREFIX}{index}", ())
    ]
    known = layouts(db, rps)
    kept: list[AllocationRequest] = []
    refusal: NoMigPlacement | None = None
    for request in candidates.requests:
        why = _refusal(request, wanted, known)
        if why is None:
            kept.append(request)
        else:
            refusal = refusal or why
    return Positioned(dataclasses.replace(candidates, requests=tuple(kept)), refusal)


def _refusal(
    request: AllocationRequest, wanted: Mapping[int, str], known: Mapping[str, geometry.Layout]
) -> NoMigPlacement | None:
    planned = dict(known)
    for index, profile in sorted(wanted.items()):
        for rp in request.mappings.get(f"{query.GROUP_PREFIX}{index}", ()):
            layout = planned.get(rp)
            if layout is None:
                continue
            try:
                choice = planner.best_fit([planner.Gpu(rp, layout)], profile)
            except NoMigPlacement as error:
                return error
            planned[rp] = layout.adding(choice.instance)
    return None
