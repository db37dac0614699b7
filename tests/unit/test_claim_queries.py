"""The candidate queries a server-side claim sends to Placement, cheapest first."""

from __future__ import annotations

from collections.abc import Sequence

from acceleron.service.claim_allocation import (
    CANDIDATES_LIMIT,
    HOLDERS_LIMIT,
    TREES_TRIED,
    Survey,
    candidate_queries,
)

QAT = [{"resources:CUSTOM_ACCELERATOR_QAT": "1"}]
FPGA = [
    {"resources:CUSTOM_ACCELERATOR_FPGA": "1", "accel:function_id": "f" * 32},
    {"resources:CUSTOM_ACCELERATOR_QAT": "1"},
]
TRAITS = frozenset({"CUSTOM_FPGA_INTEL_FUNCTION_" + "F" * 32, "CUSTOM_FUNCTION_ID_" + "F" * 32})
EVERY = TRAITS | {"CUSTOM_FPGA_XILINX_FUNCTION_" + "F" * 32}
TREES = frozenset(f"tree-{n}" for n in range(5))


def first(trees: Sequence[str], count: int) -> list[str]:
    return list(trees[:count])


def test_a_cloud_of_hosts_is_asked_about_a_few_hosts_then_everything() -> None:
    queries = list(candidate_queries(QAT, Survey({}, TREES), first))
    wide = [
        ("limit", str(CANDIDATES_LIMIT)),
        ("resourcesdevice_profile_0", "CUSTOM_ACCELERATOR_QAT:1"),
    ]
    assert queries == [
        *([*wide, ("in_treedevice_profile_0", f"tree-{n}")] for n in range(TREES_TRIED)),
        wide,
    ]


def test_the_hosts_asked_about_are_chosen_at_random_each_time() -> None:
    chosen = {
        tuple(q[-1][1] for q in list(candidate_queries(QAT, Survey({}, TREES)))[:-1])
        for _ in range(50)
    }
    assert len(chosen) > 1
    assert all(len(set(trees)) == TREES_TRIED and set(trees) <= TREES for trees in chosen)


def test_holders_of_the_function_come_first_every_group_in_the_same_tree() -> None:
    """The holders the survey chose, with the traits their regions carry; then the
    regions holding it anywhere, with every holder's traits (read only then)."""
    asked: list[str] = []

    def everywhere() -> dict[str, frozenset[str]]:
        asked.append("everywhere")
        return {"device_profile_0": EVERY}

    survey = Survey(
        {"holder": {"device_profile_0": TRAITS}}, frozenset({"other"}), everywhere=everywhere
    )
    assert next(candidate_queries(FPGA, survey, first)) and not asked  # no more reads first
    queries = list(candidate_queries(FPGA, survey, first))
    assert asked == ["everywhere"]
    required = [
        ("requireddevice_profile_0", "in:" + ",".join(sorted(traits))) for traits in (TRAITS, EVERY)
    ]
    trees = [sorted(v for k, v in q if k.startswith("in_tree")) for q in queries]
    assert trees == [["holder", "holder"], [], ["other", "other"], []]
    assert [[r in q for r in required] for q in queries] == [
        [True, False],
        [False, True],
        [False, False],
        [False, False],
    ]
    assert [dict(q)["limit"] for q in queries] == [str(HOLDERS_LIMIT)] * 2 + [
        str(CANDIDATES_LIMIT)
    ] * 2


def test_without_hosts_known_placement_is_asked_once() -> None:
    assert len(list(candidate_queries(QAT, Survey({}, frozenset())))) == 1


def test_a_named_host_is_the_only_tree_asked_about() -> None:
    """2.15's hostname: the holders there, then anything there; never the whole cloud."""
    survey = Survey({"here": {"device_profile_0": TRAITS}}, frozenset({"here"}), only="here")
    queries = list(candidate_queries(FPGA, survey, first))
    trees = [sorted(v for k, v in q if k.startswith("in_tree")) for q in queries]
    assert trees == [["here", "here"], ["here", "here"]]
    alone = Survey({}, frozenset({"here"}), only="here")
    assert [
        sorted(v for k, v in q if k.startswith("in_tree"))
        for q in candidate_queries(FPGA, alone, first)
    ] == [["here", "here"]]
