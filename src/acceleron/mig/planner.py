"""Where to carve a MIG instance: which GPU, which position.

``best_fit`` is the planner: of every free position on every GPU, it takes the one that
costs the least of what the GPUs could still be carved into, the largest profiles
counted first. For each profile of the product (7g first, 1g last) it counts how many
instances the GPU could still take side by side before and after the placement; the
placement whose losses, read largest profile first, are the smallest wins. So a 1g goes
to a GPU already carved before it spoils a whole one, and on an empty GPU to slice 6,
which keeps the 4g (slices 0-3) and the three 2g positions. Ties go to the GPU left with
the fewest free memory slices (the tightest fit), then the first GPU and position.

``first_fit`` is the baseline: the first GPU, in the order given, and its lowest free
position.

Both refuse with ``NoMigPlacement``: its reason is the mildest any GPU had (see
``geometry.REASONS``), so "enough units but no valid position" is told apart from "no
GPU has N free slices". Pure: the caller reads the GPUs' instances and makes the one
chosen.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from acceleron.exceptions import NoMigPlacement
from acceleron.mig.geometry import (
    INSTANCE_LIMIT,
    NO_FREE_SLICES,
    NO_VALID_POSITION,
    REASONS,
    Instance,
    Layout,
    Profile,
    capacity,
)


@dataclasses.dataclass(frozen=True)
class Gpu:
    """A GPU as the planner sees it: a name to report and the instances it holds."""

    name: str
    layout: Layout


@dataclasses.dataclass(frozen=True)
class Choice:
    """Where to make the instance: ``gpus[index]`` (called ``gpu``) at ``instance``."""

    gpu: str
    index: int
    instance: Instance
    # How many instances of each profile (the product's order: largest first) the GPU
    # can no longer take side by side once this one is made.
    loss: tuple[int, ...] = ()


def first_fit(gpus: Sequence[Gpu], name: str) -> Choice:
    """The first GPU that can take profile ``name``, at its lowest free position."""
    for index, gpu in enumerate(gpus):
        if gpu.layout.product.has(name):
            starts = gpu.layout.free_starts(name)
            if starts:
                return Choice(gpu.name, index, Instance(name, starts[0]))
    raise refusal(gpus, name)


def best_fit(gpus: Sequence[Gpu], name: str) -> Choice:
    """The free position, on any GPU, whose placement costs the largest profiles least."""
    best: tuple[tuple[int, ...], int, int, int] | None = None
    chosen: Choice | None = None
    for index, gpu in enumerate(gpus):
        layout = gpu.layout
        if not layout.product.has(name):
            continue
        starts = layout.free_starts(name)
        if not starts:
            continue
        profile = layout.product.profile(name)
        before = _capacities(layout, layout.mask, layout.free_compute_slices, None)
        for start in starts:
            mask = layout.mask | profile.span(start)
            after = _capacities(
                layout, mask, layout.free_compute_slices - profile.compute_slices, profile
            )
            loss = tuple(b - a for b, a in zip(before, after, strict=True))
            key = (loss, layout.free_memory_slices - profile.memory_slices, index, start)
            if best is None or key < best:
                best = key
                chosen = Choice(gpu.name, index, Instance(name, start), loss)
    if chosen is None:
        raise refusal(gpus, name)
    return chosen


def _capacities(
    layout: Layout, mask: int, free_compute: int, added: Profile | None
) -> tuple[int, ...]:
    """How many of each profile the GPU could take side by side, with ``mask`` taken
    and ``free_compute`` left, and one more ``added`` instance counted."""
    counts = layout.counts
    return tuple(
        capacity(p, mask, free_compute, counts[p.name] + (p is added))
        for p in layout.product.profiles
    )


def refusal(gpus: Sequence[Gpu], name: str) -> NoMigPlacement:
    """Why none of ``gpus`` can take profile ``name``: the mildest reason any had, with
    the GPUs that had it."""
    if not gpus:
        return NoMigPlacement(NO_FREE_SLICES, f"There is no GPU to make a {name} on.")
    found: dict[str, list[tuple[Gpu, str]]] = {}
    for gpu in gpus:
        why = gpu.layout.refusal(name)
        if why is not None:
            found.setdefault(why.reason, []).append((gpu, why.message))
    reason = max(found, key=REASONS.index)
    those = found[reason]
    if reason == NO_VALID_POSITION:
        profile = those[0][0].layout.product.profile(name)
        where = "; ".join(f"{g.name}: {g.layout.free_slices_text()}" for g, _ in those[:8])
        return NoMigPlacement(
            reason,
            f"No GPU can take a {name}: {len(those)} GPU(s) have its "
            f"{profile.memory_slices} memory slices free, but none where it may start "
            f"({profile.placements}); free memory slices: {where}"
            f"{' ...' if len(those) > 8 else ''}.",
        )
    if reason == NO_FREE_SLICES:
        profile = those[0][0].layout.product.profile(name)
        most = max(those, key=lambda item: item[0].layout.free_memory_slices)[0]
        return NoMigPlacement(
            reason,
            f"No GPU has the {profile.memory_slices} memory and {profile.compute_slices} "
            f"compute slices a {name} needs free; the most free is on {most.name}: "
            f"{most.layout.free_memory_slices} memory and "
            f"{most.layout.free_compute_slices} compute slices.",
        )
    if reason == INSTANCE_LIMIT:
        profile = those[0][0].layout.product.profile(name)
        return NoMigPlacement(
            reason,
            f"No GPU can take a {name}: {len(those)} GPU(s) hold {profile.max_instances}, "
            f"as many as one may ({', '.join(g.name for g, _ in those[:8])}).",
        )
    # UNKNOWN_PROFILE: no GPU has the profile at all.
    products = sorted({g.layout.product.name for g, _ in those})
    return NoMigPlacement(
        reason, f"None of the GPUs ({', '.join(products)}) has a MIG profile {name!r}."
    )
