"""Spec 001's weigher: regions that already hold the function first, then free capacity."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from acceleron.placement.client import (
    AllocationRequest,
    Candidates,
    Capacity,
    ProviderSummary,
)
from acceleron.scheduler.weigher import (
    best,
    carries,
    fold_function,
    host_weight,
    rank,
    score,
    wanted_by,
    wanted_functions,
)

GZIP = "0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"
ZSTD = "f9e8d7c6b5a4938271605f4e3d2c1b0a"
RC = "CUSTOM_ACCELERATOR_FPGA"


def summary(capacity: int, used: int, *traits: str) -> ProviderSummary:
    return ProviderSummary({RC: Capacity(capacity, used)}, frozenset(traits), "dev", "host")


def request(*rps: str) -> AllocationRequest:
    return AllocationRequest(
        allocations={rp: {RC: 1} for rp in rps},
        mappings={f"device_profile_{i}": (rp,) for i, rp in enumerate(rps)},
    )


def trait(function: str, spelling: str = "spec004") -> str:
    folded = fold_function(function)
    return {
        "spec004": f"CUSTOM_FPGA_INTEL_FUNCTION_{folded}",
        "spec001": f"CUSTOM_FPGA_FUNCTION_INTEL_{folded}",
        "upstream": f"CUSTOM_FPGA_FUNCTION_ID_INTEL_{folded}",
    }[spelling]


@pytest.mark.parametrize("spelling", ["spec004", "spec001", "upstream"])
def test_a_function_trait_is_recognised_in_every_spelling(spelling: str) -> None:
    assert carries({"CUSTOM_PROGRAMMABLE", trait(GZIP, spelling)}, {GZIP})
    assert not carries({trait(ZSTD, spelling)}, {GZIP})
    assert not carries({trait(GZIP, spelling)}, set())


def test_a_region_holding_the_function_ranks_first_even_when_fuller() -> None:
    candidates = Candidates(
        requests=(request("empty"), request("holder"), request("other")),
        summaries={
            "empty": summary(4, 0, "CUSTOM_PROGRAMMABLE"),
            "holder": summary(4, 3, "CUSTOM_PROGRAMMABLE", trait(GZIP)),
            "other": summary(4, 0, trait(ZSTD)),
        },
    )
    wanted = {"device_profile_0": {GZIP}}
    assert [r.mappings["device_profile_0"][0] for r in rank(candidates, wanted)] == [
        "holder",
        "empty",
        "other",
    ]
    assert score(candidates.requests[1], candidates, wanted) == (1, 0)


def test_then_free_capacity_then_placements_order() -> None:
    candidates = Candidates(
        requests=(request("a"), request("b"), request("c")),
        summaries={"a": summary(2, 1), "b": summary(4, 0), "c": summary(4, 0)},
    )
    assert [r.mappings["device_profile_0"][0] for r in rank(candidates, {})] == ["b", "c", "a"]


def test_groups_count_one_by_one() -> None:
    both = request("g-holder", "z-holder")
    one = request("g-holder", "plain")
    candidates = Candidates(
        requests=(one, both),
        summaries={
            "g-holder": summary(1, 0, trait(GZIP)),
            "z-holder": summary(1, 0, trait(ZSTD, "upstream")),
            "plain": summary(8, 0),
        },
    )
    wanted = {"device_profile_0": {GZIP}, "device_profile_1": {ZSTD}}
    assert rank(candidates, wanted)[0] is both


def test_wanted_functions_come_from_the_profile_groups() -> None:
    groups = [
        {"resources:CUSTOM_ACCELERATOR_FPGA": "1", "accel:function_id": GZIP},
        {"resources:CUSTOM_ACCELERATOR_QAT": "1"},
        {"resources:CUSTOM_ACCELERATOR_FPGA": "1", "accel:function_id": "not-a-uuid"},
    ]
    assert wanted_functions(groups) == {"device_profile_0": frozenset({GZIP})}


def test_a_group_names_its_function_by_id_or_else_through_the_catalogue() -> None:
    asked: list[tuple[str, str]] = []

    def catalogue(key: str, value: str) -> list[str | None]:
        asked.append((key, value))
        known: dict[str, list[str | None]] = {"gzip": [GZIP, None], "zstd.gbs": [ZSTD]}
        return known.get(value, [])

    groups = [
        {"accel:function_id": GZIP, "accel:function_name": "ignored"},
        {"accel:function_name": "gzip", "accel:bitstream_name": "zstd.gbs"},
        {"accel:bitstream_name": "zstd.gbs"},
        {"accel:bitstream_id": "unknown"},
        {"resources:CUSTOM_ACCELERATOR_QAT": "1"},
    ]
    assert wanted_by(groups, catalogue) == {
        "device_profile_0": frozenset({GZIP}),
        "device_profile_1": frozenset({GZIP}),
        "device_profile_2": frozenset({ZSTD}),
    }
    assert asked == [
        ("accel:function_name", "gzip"),
        ("accel:bitstream_name", "zstd.gbs"),
        ("accel:bitstream_id", "unknown"),
    ]
    assert wanted_by(groups, None) == {"device_profile_0": frozenset({GZIP})}


def test_the_nova_host_weight_is_the_share_of_functions_held() -> None:
    assert host_weight({GZIP}, {GZIP}) == 1.0
    assert host_weight({GZIP.replace("-", "")}, {GZIP, ZSTD}) == 0.5
    assert host_weight(set(), {GZIP}) == 0.0
    assert host_weight({GZIP}, set()) == 0.0


def test_the_nova_weigher_needs_nova() -> None:
    with pytest.raises(ImportError, match="needs Nova installed"):
        import acceleron.scheduler.nova_weigher  # noqa: F401


def test_a_claim_takes_one_of_the_best_at_random() -> None:
    candidates = Candidates(
        requests=(request("a"), request("b"), request("c")),
        summaries={"a": summary(4, 0), "b": summary(2, 0), "c": summary(4, 0)},
    )
    seen: list[list[str]] = []

    def choose(options: Sequence[AllocationRequest]) -> AllocationRequest:
        seen.append([o.mappings["device_profile_0"][0] for o in options])
        return options[-1]

    chosen = best(candidates, {}, choose)
    assert seen == [["a", "c"]] and chosen is candidates.requests[2]
    assert best(Candidates(requests=()), {}) is None
