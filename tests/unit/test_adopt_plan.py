"""The adoption's plan (``service.adopt.plan``): pure, rows in, a plan out."""

from __future__ import annotations

import dataclasses

import pytest

from acceleron.placement.client import Inventory
from acceleron.service import adopt
from acceleron.service.device_profiles import NameMapping

HOST = "compute-1"
CARD = "0000:0c:00.0"
OLD, NEW, COMPUTE = "rp-cyborg", "rp-acceleron", "rp-compute"
MAPPING = NameMapping(traits={"CUSTOM_FAKE_DEVICE": "CUSTOM_FPGA_INTEL"})


def _cyborg(*arqs: adopt.CyborgArq) -> adopt.Cyborg:
    return adopt.Cyborg(
        devices=[adopt.CyborgDevice(1, "dev-1", HOST, CARD)],
        deployables=[adopt.CyborgDeployable(1, "dep-1", f"{HOST}_{CARD}", 1, OLD, "FPGA")],
        handles=[adopt.CyborgHandle(i, f"ah-{i}", 1, f"0000:0c:00.{i}") for i in (1, 2)],
        profiles=[
            adopt.CyborgProfile(
                1,
                "dp-uuid",
                "dp1",
                None,
                [{"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}],
            )
        ],
        arqs=list(arqs) or [_bound("arq-1", "i1", 1)],
    )


def _bound(uuid: str, instance: str, handle: int, state: str = "Bound") -> adopt.CyborgArq:
    return adopt.CyborgArq(uuid, state, "p1", 1, 0, HOST, OLD, instance, handle)


def _ours(**changes: object) -> adopt.Ours:
    handles = {
        (HOST, f"0000:0c:00.{i}"): adopt.OurHandle(10 + i, HOST, f"0000:0c:00.{i}", 5, NEW, None)
        for i in (1, 2)
    }
    provider = adopt.OurProvider(
        NEW,
        f"{HOST}_{CARD}_region0",
        HOST,
        {"CUSTOM_ACCELERATOR_FPGA": Inventory(2)},
        frozenset({"CUSTOM_FPGA_INTEL"}),
    )
    ours = adopt.Ours(frozenset({(HOST, CARD)}), handles, {NEW: provider})
    return dataclasses.replace(ours, **changes)  # type: ignore[arg-type]


def _placement(**allocations: dict[str, int]) -> adopt.PlacementView:
    held = allocations or {"i1": {"FPGA": 1}}
    old = adopt.OldProvider(OLD, f"{HOST}_{CARD}", COMPUTE, {"FPGA": Inventory(2)}, held)
    consumers = {c: {COMPUTE: {"VCPU": 2}, OLD: dict(r)} for c, r in held.items()}
    return adopt.PlacementView({OLD: old}, consumers, frozenset())


def test_a_bound_request_keeps_its_handle_and_its_server_moves_in_one_write() -> None:
    plan = adopt.plan(_cyborg(), _ours(), _placement(), MAPPING)
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
    card = adopt.OurProvider("rp-card", f"{HOST}_{CARD}", HOST, {}, frozenset())
    plan = adopt.plan(
        _cyborg(), _ours(providers={**ours.providers, "rp-card": card}), _placement(), MAPPING
    )
    assert plan.providers[0].rename == f"{adopt.RENAMED_PREFIX}{OLD}"


def test_a_move_keeps_every_other_allocation() -> None:
    allocations = {COMPUTE: {"VCPU": 2, "MEMORY_MB": 512}, OLD: {"FPGA": 1}}
    moved = adopt.moved(allocations, [OLD], {NEW: {"CUSTOM_ACCELERATOR_FPGA": 1}})
    assert moved == {COMPUTE: {"VCPU": 2, "MEMORY_MB": 512}, NEW: {"CUSTOM_ACCELERATOR_FPGA": 1}}


def test_a_group_that_does_not_fit_acceleron_s_provider_is_refused() -> None:
    plan = adopt.plan(_cyborg(), _ours(), _placement())  # no trait mapping
    assert any("arq-1" in p and "no trait CUSTOM_FAKE_DEVICE" in p for p in plan.problems)


@pytest.mark.parametrize(
    "cyborg, ours, placement, named",
    [
        (
            _cyborg(_bound("arq-9", "i9", 1, "BindStarted")),
            _ours(),
            _placement(),
            "arq-9 (BindStarted, instance i9): a bind or delete is in progress",
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
            _ours(profiles=[adopt.OurProfile("other-uuid", "dp1")]),
            _placement(),
            "Acceleron has a device profile dp1 (other-uuid) already",
        ),
    ],
)
def test_what_cannot_be_mapped_is_named(
    cyborg: adopt.Cyborg, ours: adopt.Ours, placement: adopt.PlacementView, named: str
) -> None:
    plan = adopt.plan(cyborg, ours, placement, MAPPING)
    assert any(named in p for p in plan.problems), plan.problems


def test_a_handle_acceleron_gave_to_another_request_is_refused() -> None:
    ours = _ours()
    taken = dataclasses.replace(ours.handles[(HOST, "0000:0c:00.1")], arq_uuid="someone")
    plan = adopt.plan(
        _cyborg(),
        _ours(handles={**ours.handles, (HOST, "0000:0c:00.1"): taken}),
        _placement(),
        MAPPING,
    )
    assert any("held by request someone" in p for p in plan.problems)


def test_once_cyborg_s_providers_are_gone_there_is_nothing_to_do() -> None:
    done = adopt.plan(
        _cyborg(),
        _ours(profiles=[adopt.OurProfile("dp-uuid", "dp1")], arqs=frozenset()),
        adopt.PlacementView(present=frozenset({NEW})),
        MAPPING,
    )
    # The requests may have gone since (servers deleted): they are not adopted again.
    assert done.problems == [] and done.nothing_to_do and done.arqs == []


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
    assert adopt.pci_address(info) == address
