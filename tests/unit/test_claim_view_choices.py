"""The claim's own view choosing where N groups go (``claim_view.View.candidates``): the
distinct allocations that fit, found without trying every combination: an 8-card FPGA
host asked for 8 regions as 8 groups of one took 5.4 s in the view before."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from acceleron.placement.client import Capacity, ProviderSummary
from acceleron.scheduler.query import RequestGroup
from acceleron.service.claim_view import View

FPGA, GPU, ROOT = "CUSTOM_ACCELERATOR_FPGA", "CUSTOM_ACCELERATOR_GPU", "compute-1"
Allocation = frozenset[tuple[str, frozenset[tuple[str, int]]]]


def provider(capacity: int, used: int = 0, rc: str = FPGA, *traits: str) -> ProviderSummary:
    return ProviderSummary({rc: Capacity(capacity, used)}, frozenset(traits), ROOT, ROOT)


def groups(*wanted: tuple[str, int, frozenset[str]]) -> list[RequestGroup]:
    return [
        RequestGroup(f"device_profile_{i}", {rc: n}, required)
        for i, (rc, n, required) in enumerate(wanted)
    ]


def allocations(view: View, asked: Sequence[RequestGroup]) -> set[Allocation]:
    found = view.candidates(asked).requests
    keys = {frozenset((rp, frozenset(r.items())) for rp, r in a.allocations.items()) for a in found}
    assert len(keys) == len(found)  # no allocation offered twice
    for request in found:  # every group is mapped to a provider it is allocated on
        assert {g.suffix for g in asked} == set(request.mappings)
        assert all(rps[0] in request.allocations for rps in request.mappings.values())
    return keys


def brute_force(view: View, asked: Sequence[RequestGroup]) -> set[Allocation]:
    """Every combination, kept where each provider has room: the long way."""
    found = set()
    serving = [
        [
            rp
            for rp, s in view.summaries.items()
            if g.required <= s.traits and all(rc in s.resources for rc in g.resources)
        ]
        for g in asked
    ]
    for chosen in itertools.product(*serving):
        totals: dict[str, dict[str, int]] = {}
        for rp, g in zip(chosen, asked, strict=True):
            for rc, n in g.resources.items():
                totals.setdefault(rp, {})[rc] = totals.get(rp, {}).get(rc, 0) + n
        summaries = view.summaries
        if all(
            summaries[rp].resources[rc].capacity - summaries[rp].resources[rc].used >= n
            for rp, t in totals.items()
            for rc, n in t.items()
        ):
            found.add(frozenset((rp, frozenset(t.items())) for rp, t in totals.items()))
    return found


def test_eight_groups_of_one_on_eight_regions_are_one_allocation() -> None:
    view = View({f"region-{n}": provider(1) for n in range(8)})
    found = allocations(view, groups(*[(FPGA, 1, frozenset())] * 8))
    assert found == {frozenset((f"region-{n}", frozenset({(FPGA, 1)})) for n in range(8))}


def test_groups_take_distinct_sets_and_share_a_provider_with_room() -> None:
    view = View({"a": provider(1), "b": provider(1), "c": provider(1, used=1), "pool": provider(4)})
    two = groups((FPGA, 1, frozenset()), (FPGA, 1, frozenset()))
    found = allocations(view, two)
    assert frozenset({("pool", frozenset({(FPGA, 2)}))}) in found
    assert not any(rp == "c" for a in found for rp, _ in a)  # c is full
    assert found == brute_force(view, two)


@settings(max_examples=150, deadline=None)
@given(
    capacities=st.lists(
        st.tuples(st.integers(1, 3), st.integers(0, 2), st.booleans()), min_size=1, max_size=5
    ),
    wanted=st.lists(st.tuples(st.integers(1, 2), st.booleans()), min_size=1, max_size=4),
)
def test_the_view_finds_what_every_combination_finds(
    capacities: list[tuple[int, int, bool]], wanted: list[tuple[int, bool]]
) -> None:
    view = View(
        {
            f"rp-{n}": provider(cap, min(used, cap), FPGA, *(["CUSTOM_X"] if x else []))
            for n, (cap, used, x) in enumerate(capacities)
        }
    )
    asked = groups(*[(FPGA, n, frozenset({"CUSTOM_X"}) if x else frozenset()) for n, x in wanted])
    expected = brute_force(view, asked)
    found = allocations(view, asked)
    assert found <= expected
    assert len(found) == min(len(expected), 20)  # REQUESTS_LIMIT of them at most


def test_a_search_past_its_steps_offers_what_it_found() -> None:
    """17 distinct groups of one on 16 single-unit providers: no allocation fits, and
    there are 16! orderings to try; the view gives up after SEARCH_STEPS and offers
    nothing (the claim then asks Placement, which caps its own work)."""
    view = View({f"region-{n:02d}": provider(1) for n in range(16)})
    distinct = [
        RequestGroup(f"device_profile_{i}", {FPGA: 1}, frozenset(), frozenset({f"CUSTOM_NOT_{i}"}))
        for i in range(17)
    ]
    assert view.candidates(distinct).requests == ()
    eight = [*distinct[:8]]  # the budget still finds what is there to find
    assert len(view.candidates(eight).requests) == 20
