"""The candidate queries a server-side claim sends to Placement, cheapest first."""

from __future__ import annotations

from collections.abc import Sequence

from acceleron.service.claims import (
    CANDIDATES_LIMIT,
    HOLDERS_LIMIT,
    TREES_TRIED,
    Survey,
    candidate_queries,
)

QAT = [{"resources:CUSTOM_ACCELERATOR_QAT": "1"}]
FPGA = [{"resources:CUSTOM_ACCELERATOR_FPGA": "1", "accel:function_id": "f" * 32},
        {"resources:CUSTOM_ACCELERATOR_QAT": "1"}]  # fmt: skip
TRAITS = frozenset({"CUSTOM_FPGA_INTEL_FUNCTION_" + "F" * 32, "CUSTOM_FUNCTION_ID_" + "F" * 32})
TREES = frozenset(f"tree-{n}" for n in range(5))


def first(trees: Sequence[str], count: int) -> list[str]:
    return list(trees[:count])


def test_a_cloud_of_hosts_is_asked_about_a_few_hosts_then_everything() -> None:
    queries = candidate_queries(QAT, Survey({}, frozenset(), TREES), first)
    wide = [("limit", str(CANDIDATES_LIMIT)), ("resourcesdevice_profile_0",
                                               "CUSTOM_ACCELERATOR_QAT:1")]  # fmt: skip
    assert queries == [
        *([*wide, ("in_treedevice_profile_0", f"tree-{n}")] for n in range(TREES_TRIED)),
        wide,
    ]


def test_the_hosts_asked_about_are_chosen_at_random_each_time() -> None:
    chosen = {
        tuple(q[-1][1] for q in candidate_queries(QAT, Survey({}, frozenset(), TREES))[:-1])
        for _ in range(50)
    }
    assert len(chosen) > 1
    assert all(len(set(trees)) == TREES_TRIED and set(trees) <= TREES for trees in chosen)


def test_holders_of_the_function_come_first_every_group_in_the_same_tree() -> None:
    survey = Survey({"device_profile_0": TRAITS}, frozenset({"holder"}), frozenset({"other"}))
    queries = candidate_queries(FPGA, survey, first)
    required = ("requireddevice_profile_0", "in:" + ",".join(sorted(TRAITS)))
    trees = [sorted(v for k, v in q if k.startswith("in_tree")) for q in queries]
    assert trees == [["holder", "holder"], [], ["other", "other"], []]
    assert [required in q for q in queries] == [True, True, False, False]
    assert [dict(q)["limit"] for q in queries] == [str(HOLDERS_LIMIT)] * 2 + [
        str(CANDIDATES_LIMIT)
    ] * 2


def test_without_hosts_known_placement_is_asked_once() -> None:
    assert len(candidate_queries(QAT, Survey({}, frozenset(), frozenset()))) == 1


def test_a_named_host_is_the_only_tree_asked_about() -> None:
    """2.15's hostname: the holders there, then anything there; never the whole cloud."""
    survey = Survey({"device_profile_0": TRAITS}, frozenset({"here"}), frozenset({"here"}),
                    only="here")  # fmt: skip
    queries = candidate_queries(FPGA, survey, first)
    trees = [sorted(v for k, v in q if k.startswith("in_tree")) for q in queries]
    assert trees == [["here", "here"], ["here", "here"]]
    alone = Survey({"device_profile_0": TRAITS}, frozenset(), frozenset({"here"}), only="here")
    assert [sorted(v for k, v in q if k.startswith("in_tree"))
            for q in candidate_queries(FPGA, alone, first)] == [["here", "here"]]  # fmt: skip
