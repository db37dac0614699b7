"""Choosing the GPU and position of a MIG instance: best fit, first fit, refusals."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import pytest

from acceleron.exceptions import NoCapacity, NoMigPlacement
from acceleron.mig.geometry import (
    INSTANCE_LIMIT,
    NO_FREE_SLICES,
    NO_VALID_POSITION,
    UNKNOWN_PROFILE,
    Instance,
    Layout,
    product,
)
from acceleron.mig.planner import Choice, Gpu, best_fit, first_fit

H100 = product("H100 80GB")
Planner = Callable[[Sequence[Gpu], str], Choice]


def gpus(*layouts: Sequence[tuple[str, int]], of: str = "H100 80GB") -> list[Gpu]:
    return [
        Gpu(f"gpu{i}", Layout.of(product(of), [Instance(n, s) for n, s in held]))
        for i, held in enumerate(layouts)
    ]


def serve(planner: Planner, fleet: list[Gpu], names: Sequence[str]) -> list[Choice]:
    """Place each request in turn, making what the planner chose."""
    chosen = []
    for name in names:
        choice = planner(fleet, name)
        gpu = fleet[choice.index]
        fleet[choice.index] = Gpu(gpu.name, gpu.layout.adding(choice.instance))
        chosen.append(choice)
    return chosen


def test_a_1g_on_an_empty_gpu_goes_to_slice_6() -> None:
    """Slice 6 keeps the 4g (0-3), one 3g (0-3) and all three 2g positions; slice 0
    would spoil the 4g and a 2g."""
    choice = best_fit(gpus([], []), "1g.10gb")
    assert (choice.gpu, choice.instance) == ("gpu0", Instance("1g.10gb", 6))
    # Lost: the 7g, one 3g, one 1g.20gb and one 1g.10gb; the 4g and 2g are kept.
    assert choice.loss == (1, 0, 1, 0, 1, 1, 0)
    assert first_fit(gpus([], []), "1g.10gb").instance == Instance("1g.10gb", 0)


def test_best_fit_keeps_a_whole_gpu_that_first_fit_spoils() -> None:
    """gpu0 empty, gpu1 holding a 3g: a 1g then a 7g. First fit puts the 1g on gpu0 and
    has no room for the 7g; best fit puts it beside the 3g and serves both."""
    planned = serve(best_fit, gpus([], [("3g.40gb", 0)]), ["1g.10gb", "7g.80gb"])
    assert [(c.gpu, c.instance.start) for c in planned] == [("gpu1", 6), ("gpu0", 0)]
    fleet = gpus([], [("3g.40gb", 0)])
    assert first_fit(fleet, "1g.10gb").gpu == "gpu0"
    with pytest.raises(NoMigPlacement) as refused:
        serve(first_fit, fleet, ["1g.10gb", "7g.80gb"])
    assert refused.value.reason == NO_FREE_SLICES


def test_best_fit_prefers_the_tightest_gpu_on_a_tie() -> None:
    """Two GPUs where a 1g costs the same: the one left with fewer free slices."""
    fleet = gpus([("4g.40gb", 0)], [("4g.40gb", 0), ("1g.10gb", 4)])
    choice = best_fit(fleet, "1g.10gb")
    assert choice.gpu == "gpu1" and choice.instance.start in (5, 6)


def test_the_planner_fills_gpus_without_breaking_the_large_positions() -> None:
    """Seven 1g, then a 4g, a 3g and a 4g on three GPUs: the 1g share one GPU, the 4g
    and 3g the next, the last 4g the third."""
    names = ["1g.10gb"] * 7 + ["4g.40gb", "3g.40gb", "4g.40gb"]
    planned = serve(best_fit, gpus([], [], []), names)
    assert {c.gpu for c in planned[:7]} == {"gpu0"}
    assert [c.gpu for c in planned[7:]] == ["gpu1", "gpu1", "gpu2"]


def test_enough_units_but_no_valid_position_is_the_reason_given() -> None:
    """gpu0 has 6 slices free but no 3g position, gpu1 too few slices: the refusal says
    the milder, "no valid position", and names gpu0's free slices."""
    fleet = gpus([("1g.10gb", 2), ("1g.10gb", 5)], [("4g.40gb", 0), ("2g.20gb", 4)])
    for planner in (best_fit, first_fit):
        with pytest.raises(NoMigPlacement) as refused:
            planner(fleet, "3g.40gb")
        assert refused.value.reason == NO_VALID_POSITION
        assert "1 GPU(s) have its 4 memory slices free" in refused.value.message
        assert "gpu0: 0-1, 3-4, 6-7" in refused.value.message
        assert isinstance(refused.value, NoCapacity)


def test_no_gpu_has_the_slices() -> None:
    fleet = gpus([("4g.40gb", 0), ("3g.40gb", 4)], [("7g.80gb", 0)])
    with pytest.raises(NoMigPlacement) as refused:
        best_fit(fleet, "1g.10gb")
    assert refused.value.reason == NO_FREE_SLICES
    assert "No GPU has the 1 memory and 1 compute slices a 1g.10gb needs" in str(refused.value)
    with pytest.raises(NoMigPlacement, match="no GPU to make") as none:
        best_fit([], "1g.10gb")
    assert none.value.reason == NO_FREE_SLICES


def test_instance_limit_and_unknown_profile() -> None:
    fleet = gpus([("1g.10gb+me", 0)])
    with pytest.raises(NoMigPlacement) as refused:
        best_fit(fleet, "1g.10gb+me")
    assert refused.value.reason == INSTANCE_LIMIT
    assert "1 GPU(s) hold 1, as many as one may (gpu0)" in refused.value.message
    with pytest.raises(NoMigPlacement) as unknown:
        first_fit(fleet, "1g.18gb")
    assert unknown.value.reason == UNKNOWN_PROFILE
    assert "(H100 80GB) has a MIG profile '1g.18gb'" in unknown.value.message


def test_mixed_products_each_use_their_own_table() -> None:
    h200 = product("H200 141GB")
    fleet = [
        Gpu("h100", Layout.of(H100)),
        Gpu("h200-full", Layout.of(h200, [Instance("7g.141gb", 0)])),
        Gpu("h200", Layout.of(h200)),
    ]
    assert best_fit(fleet, "3g.71gb") == Choice(
        "h200", 2, Instance("3g.71gb", 4), best_fit(fleet, "3g.71gb").loss
    )
    assert first_fit(fleet, "3g.71gb").gpu == "h200"
    assert best_fit(fleet, "3g.40gb").gpu == "h100"


@pytest.mark.parametrize("planner", [best_fit, first_fit], ids=["best_fit", "first_fit"])
def test_planners_refuse_only_when_no_gpu_fits_and_never_place_wrongly(
    planner: Planner,
) -> None:
    """A seeded random run of requests and releases over 4 GPUs: every choice is a
    position the geometry accepts (``adding`` checks it), and a refusal comes only when
    no GPU fits."""
    rng = random.Random(46)
    names = [p.name for p in H100.profiles]
    fleet = gpus([], [], [], [])
    held: list[tuple[int, Instance]] = []
    refusals = 0
    for _ in range(600):
        if held and rng.random() < 0.45:
            index, instance = held.pop(rng.randrange(len(held)))
            gpu = fleet[index]
            fleet[index] = Gpu(gpu.name, gpu.layout.removing(instance))
            continue
        name = rng.choice(names)
        try:
            choice = planner(fleet, name)
        except NoMigPlacement:
            assert not any(g.layout.fits(name) for g in fleet)
            refusals += 1
            continue
        gpu = fleet[choice.index]
        fleet[choice.index] = Gpu(gpu.name, gpu.layout.adding(choice.instance))
        held.append((choice.index, choice.instance))
    assert refusals > 0 and held  # the run did reach full GPUs
