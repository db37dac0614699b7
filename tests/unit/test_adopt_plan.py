"""The adoption's plan (``service.adopt_plan.plan``): pure, rows in, a plan out."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import pytest

from acceleron.exceptions import InvalidInput
from acceleron.placement.client import Consumer, Inventory
from acceleron.service import adopt_plan, adopt_revert, cyborg_db
from acceleron.service.device_profiles import NameMapping

HOST = "compute-1"
CARD = "0000:0c:00.0"
OLD, NEW, COMPUTE = "rp-cyborg", "rp-acceleron", "rp-compute"
MAPPING = NameMapping(traits={"CUSTOM_FAKE_DEVICE": "CUSTOM_FPGA_INTEL"})


def _cyborg(*arqs: cyborg_db.CyborgArq) -> cyborg_db.Cyborg:
    return cyborg_db.Cyborg(
        devices=[cyborg_db.CyborgDevice(1, "dev-1", HOST, CARD)],
        deployables=[cyborg_db.CyborgDeployable(1, "dep-1", f"{HOST}_{CARD}", 1, OLD, "FPGA")],
        handles=[cyborg_db.CyborgHandle(i, f"ah-{i}", 1, f"0000:0c:00.{i}") for i in (1, 2)],
        profiles=[
            cyborg_db.CyborgProfile(
                1,
                "dp-uuid",
                "dp1",
                None,
                [{"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}],
            )
        ],
        arqs=list(arqs) or [_bound("arq-1", "i1", 1)],
    )


def _bound(uuid: str, instance: str, handle: int, state: str = "Bound") -> cyborg_db.CyborgArq:
    return cyborg_db.CyborgArq(uuid, state, "p1", 1, 0, HOST, OLD, instance, handle)


def _ours(**changes: object) -> adopt_plan.AcceleronState:
    handles = {
        (HOST, f"0000:0c:00.{i}"): adopt_plan.AcceleronHandle(
            10 + i, HOST, f"0000:0c:00.{i}", 5, NEW, None
        )
        for i in (1, 2)
    }
    provider = adopt_plan.AcceleronProvider(
        NEW,
        f"{HOST}_{CARD}_region0",
        HOST,
        {"CUSTOM_ACCELERATOR_FPGA": Inventory(2)},
        frozenset({"CUSTOM_FPGA_INTEL"}),
    )
    ours = adopt_plan.AcceleronState(frozenset({(HOST, CARD)}), handles, {NEW: provider})
    return dataclasses.replace(ours, **changes)  # type: ignore[arg-type]


def _placement(**allocations: dict[str, int]) -> adopt_plan.PlacementView:
    held = allocations or {"i1": {"FPGA": 1}}
    old = adopt_plan.CyborgProvider(
        OLD,
        f"{HOST}_{CARD}",
        COMPUTE,
        {"FPGA": Inventory(2)},
        held,
        frozenset({"CUSTOM_FAKE_DEVICE"}),
    )
    consumers = {c: _consumer({COMPUTE: {"VCPU": 2}, OLD: dict(r)}) for c, r in held.items()}
    return adopt_plan.PlacementView({OLD: old}, consumers, frozenset())


def _consumer(allocations: dict[str, dict[str, int]]) -> Consumer:
    return Consumer(allocations, 1, "project-1", "user-1", "INSTANCE")


def test_a_bound_request_keeps_its_handle_and_its_server_moves_in_one_write() -> None:
    plan = adopt_plan.plan(_cyborg(), _ours(), _placement(), MAPPING)
    assert plan.problems == []
    (profile,) = plan.profiles
    # The class Acceleron publishes the same handles as, and the trait the mapping names.
    assert profile.after == [
        {"resources:CUSTOM_ACCELERATOR_FPGA": "1", "trait:CUSTOM_FPGA_INTEL": "required"}
    ]
    (arq,) = plan.arqs
    assert (arq.uuid, arq.state, arq.instance_uuid) == ("arq-1", "Bound", "i1")
    assert arq.handle is not None and arq.handle.address == "0000:0c:00.1"
    assert arq.resource_class == "CUSTOM_ACCELERATOR_FPGA"
    (move,) = plan.moves
    assert move.targets == {NEW: {"CUSTOM_ACCELERATOR_FPGA": 1}}
    (provider,) = plan.providers
    # Acceleron wants no provider of its name here: only reserved, then deleted.
    assert provider.rename is None and provider.reserve
    assert plan.publish == [HOST]
    text = "\n".join(plan.lines())
    assert '- {"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}' in text
    assert "move consumer i1" in text and f"delete provider {HOST}_{CARD}" in text


def test_a_provider_with_the_name_acceleron_wants_is_renamed_first() -> None:
    ours = _ours()
    card = adopt_plan.AcceleronProvider("rp-card", f"{HOST}_{CARD}", HOST, {}, frozenset())
    plan = adopt_plan.plan(
        _cyborg(), _ours(providers={**ours.providers, "rp-card": card}), _placement(), MAPPING
    )
    assert plan.providers[0].rename == f"{adopt_plan.RENAMED_PREFIX}{OLD}"


def test_a_move_keeps_every_other_allocation() -> None:
    allocations = {COMPUTE: {"VCPU": 2, "MEMORY_MB": 512}, OLD: {"FPGA": 1}}
    moved = adopt_plan.moved(allocations, [OLD], {NEW: {"CUSTOM_ACCELERATOR_FPGA": 1}})
    assert moved == {COMPUTE: {"VCPU": 2, "MEMORY_MB": 512}, NEW: {"CUSTOM_ACCELERATOR_FPGA": 1}}


def test_a_group_that_does_not_fit_acceleron_s_provider_is_refused() -> None:
    plan = adopt_plan.plan(_cyborg(), _ours(), _placement())  # no trait mapping
    assert any("arq-1" in p and "no trait CUSTOM_FAKE_DEVICE" in p for p in plan.problems)


@pytest.mark.parametrize(
    "cyborg, ours, placement, named",
    [
        (
            _cyborg(_bound("arq-9", "i9", 1, "BindStarted")),
            _ours(),
            _placement(),
            "arq-9 (BindStarted, instance i9): a bind is in progress",
        ),
        (
            _cyborg(),
            _ours(devices=frozenset()),
            _placement(),
            f"device dev-1 on {HOST} at {CARD}: no Acceleron agent reports it",
        ),
        (
            _cyborg(),
            _ours(handles={}),
            _placement(),
            "attach handle ah-1 on compute-1 at 0000:0c:00.1: held by a request",
        ),
        (
            _cyborg(),
            _ours(),
            _placement(i1={"FPGA": 1}, i2={"FPGA": 1}),
            "consumer i2 holds {'FPGA': 1}, its bound requests explain nothing",
        ),
        (
            _cyborg(),
            _ours(),
            _placement(i1={"FPGA": 2}),
            "consumer i1 holds {'FPGA': 2}, its bound requests explain {'FPGA': 1}",
        ),
        (
            _cyborg(),
            _ours(profiles=[adopt_plan.AcceleronProfile("other-uuid", "dp1")]),
            _placement(),
            "Acceleron has a device profile dp1 (other-uuid) already",
        ),
    ],
)
def test_what_cannot_be_mapped_is_named(
    cyborg: cyborg_db.Cyborg,
    ours: adopt_plan.AcceleronState,
    placement: adopt_plan.PlacementView,
    named: str,
) -> None:
    plan = adopt_plan.plan(cyborg, ours, placement, MAPPING)
    assert any(named in p for p in plan.problems), plan.problems


def test_a_handle_acceleron_gave_to_another_request_is_refused() -> None:
    ours = _ours()
    taken = dataclasses.replace(ours.handles[(HOST, "0000:0c:00.1")], arq_uuid="someone")
    plan = adopt_plan.plan(
        _cyborg(),
        _ours(handles={**ours.handles, (HOST, "0000:0c:00.1"): taken}),
        _placement(),
        MAPPING,
    )
    assert any("held by request someone" in p for p in plan.problems)


FIRST_RUN = adopt_plan.Earlier(
    profiles=frozenset({"dp-uuid"}),
    arqs=frozenset({"arq-1"}),
    providers={
        OLD: {
            "uuid": OLD,
            "name": f"{HOST}_{CARD}",
            "parent_uuid": COMPUTE,
            "inventories": {"FPGA": Inventory(2).to_json()},
            "traits": [],
        }
    },
    renames=MAPPING,
)
ADOPTED = [{"resources:CUSTOM_ACCELERATOR_FPGA": "1", "trait:CUSTOM_FPGA_INTEL": "required"}]


def _after_first_run(**changes: object) -> adopt_plan.AcceleronState:
    """Acceleron once a first run adopted dp1 and arq-1 and deleted Cyborg's provider."""
    profile = adopt_plan.AcceleronProfile("dp-uuid", "dp1", ADOPTED)
    ours = _ours(profiles=[profile], arqs={"arq-1": NEW}, earlier=FIRST_RUN)
    return dataclasses.replace(ours, **changes)  # type: ignore[arg-type]


def test_once_cyborg_s_providers_are_gone_there_is_nothing_to_do() -> None:
    # arq-1 is gone from Acceleron since (its server deleted): it is not adopted again.
    done = adopt_plan.plan(
        _cyborg(), _after_first_run(arqs={}), adopt_plan.PlacementView(present=frozenset({NEW}))
    )
    assert done.problems == [] and done.nothing_to_do
    assert [(a.uuid, a.done) for a in done.arqs] == [("arq-1", True)]
    # What is shown of the profile is what Acceleron has: no diff that is not true.
    text = "\n".join(done.lines())
    assert f"group 0: + {json.dumps(ADOPTED[0])}" in text and '+ {"resources:FPGA"' not in text


def test_a_run_after_cyborg_changed_adopts_what_is_new_with_the_earlier_renames() -> None:
    new = cyborg_db.CyborgProfile(2, "dp2-uuid", "dp2", None, [{"resources:FPGA": "1"}])
    cyborg = _cyborg(
        _bound("arq-1", "i1", 1),
        cyborg_db.CyborgArq("arq-2", "Initial", "p2", 2, 0, None, None, None, None),
    )
    cyborg = dataclasses.replace(cyborg, profiles=[*cyborg.profiles, new])
    again = adopt_plan.plan(
        cyborg, _after_first_run(), adopt_plan.PlacementView(present=frozenset({NEW}))
    )
    assert again.problems == []
    created = [p for p in again.profiles if not p.done]
    assert [(p.name, p.after) for p in created] == [
        ("dp2", [{"resources:CUSTOM_ACCELERATOR_FPGA": "1"}])
    ]
    assert [(a.uuid, a.done) for a in again.arqs] == [("arq-1", True), ("arq-2", False)]
    assert again.renames.traits == MAPPING.traits  # the first run's, without --mapping


def test_a_provider_of_cyborg_s_missing_from_placement_is_a_problem() -> None:
    """Not in Placement, and no adoption deleted it: a wrong endpoint or region."""
    the_plan = adopt_plan.plan(_cyborg(), _ours(), adopt_plan.PlacementView(), MAPPING)
    assert any(OLD in p and "is not in Placement" in p for p in the_plan.problems)


def test_a_re_run_against_another_placement_is_a_problem() -> None:
    """Cyborg's providers gone (as after an adoption), and Acceleron's too: this is not
    the Placement the adoption worked in."""
    the_plan = adopt_plan.plan(_cyborg(), _after_first_run(), adopt_plan.PlacementView())
    assert any("none of them is in Placement" in p for p in the_plan.problems)


def test_a_group_out_of_range_is_refused() -> None:
    odd = cyborg_db.CyborgArq("arq-7", "Initial", "p1", 1, 3, None, None, None, None)
    the_plan = adopt_plan.plan(
        _cyborg(_bound("arq-1", "i1", 1), odd), _ours(), _placement(), MAPPING
    )
    assert any("arq-7" in p and "has no group 3" in p for p in the_plan.problems)


def test_a_bind_left_in_bind_started_past_nova_s_timeout_is_adopted_unbound() -> None:
    now = dt.datetime(2026, 12, 1, 12, 0, 0)
    stuck = dataclasses.replace(
        _bound("arq-5", "i5", 2, "BindStarted"), updated_at=now - dt.timedelta(seconds=301)
    )
    settings = adopt_plan.Settings(MAPPING, now=now)
    the_plan = adopt_plan.plan(
        _cyborg(_bound("arq-1", "i1", 1), stuck), _ours(), _placement(), settings=settings
    )
    assert the_plan.problems == []
    (step,) = [a for a in the_plan.arqs if a.uuid == "arq-5"]
    assert (step.state, step.instance_uuid, step.handle) == ("Unbound", None, None)
    assert step.reason is not None and "BindStarted since 2026-12-01 11:54:59" in step.reason
    young = dataclasses.replace(stuck, updated_at=now - dt.timedelta(seconds=299))
    the_plan = adopt_plan.plan(
        _cyborg(_bound("arq-1", "i1", 1), young), _ours(), _placement(), settings=settings
    )
    assert any("arq-5" in p and "--bind-timeout" in p for p in the_plan.problems)


def test_the_document_holds_what_the_way_back_needs() -> None:
    the_plan = adopt_plan.plan(_cyborg(), _ours(), _placement(), MAPPING)
    document = adopt_revert.document(the_plan)
    (provider,) = document["cyborg_providers"]
    assert provider["parent_uuid"] == COMPUTE and provider["traits"] == ["CUSTOM_FAKE_DEVICE"]
    assert provider["inventories"]["FPGA"]["total"] == 2
    (server,) = document["servers"]
    assert (server["project_id"], server["user_id"]) == ("project-1", "user-1")
    assert server["before"] == {OLD: {"FPGA": 1}}
    assert server["after"] == {NEW: {"CUSTOM_ACCELERATOR_FPGA": 1}}
    assert [p["uuid"] for p in document["acceleron_providers"]] == [NEW]
    # What an earlier run recorded wins: Cyborg's provider as it was before any change.
    earlier = adopt_plan.plan(_cyborg(), _ours(earlier=FIRST_RUN), _placement(), MAPPING)
    (provider,) = adopt_revert.document(earlier)["cyborg_providers"]
    assert provider["traits"] == []


def test_a_sqlite_file_that_does_not_exist_is_refused_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "cyborg.sqlite"
    with pytest.raises(InvalidInput) as refused:
        cyborg_db.read_cyborg(f"sqlite:///{missing}")
    assert str(missing) in refused.value.message and "does not exist" in refused.value.message
    assert not missing.exists()


@pytest.mark.parametrize(
    "info, address",
    [
        ('{"domain": "0000", "bus": "0c", "device": "0", "function": "1"}', "0000:0c:00.1"),
        ('{"domain": "0000", "bus": "5E", "device": "1f", "function": "7"}', "0000:5e:1f.7"),
        ('{"domain": "0000", "bus": "0c"}', None),
        ("0000:0c:00.0", None),
        (None, None),
    ],
)
def test_cyborg_s_pci_addresses_are_read_in_canonical_form(
    info: str | None, address: str | None
) -> None:
    assert cyborg_db.pci_address(info) == address
