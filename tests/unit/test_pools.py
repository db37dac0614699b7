"""Pools, pure: the providers ``placement.tree`` renders for identical devices, and the
devices ``service.pools.plan`` picks for one instance's requests."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from acceleron.exceptions import InvalidInput, NoCapacity
from acceleron.placement import tree
from acceleron.service import pools

GPU, HBM = "CUSTOM_ACCELERATOR_GPU", "CUSTOM_ACCELERATOR_MEMORY_HBM"


def gpu(n: int, **values: Any) -> tuple[SimpleNamespace, SimpleNamespace]:
    """Device ``n`` of an 8-GPU host and its whole-GPU deployable (rows)."""
    device = SimpleNamespace(
        id=n,
        hostname="h",
        pci_address=f"0000:{0x10 + n:02x}:00.0",
        type="GPU",
        vendor_name="NVIDIA",
        model=values.pop("model", "H200"),
        driver_name="fake",
        state="present",
        health="healthy",
        status="enabled",
        maintenance_reason=None,
    )
    dep = SimpleNamespace(
        id=100 + n,
        device_id=n,
        parent_id=None,
        kind="device",
        uuid=f"dep-{n}",
        name=f"h_{device.pci_address}_device",
        num_accelerators=1,
        accelerator_type="GPU",
        memory_mb=143771,
        memory_type="HBM",
        traits=[],
        region_type=None,
        function_uuid=None,
        function_uuids=[],
        programmable=False,
        health="healthy",
        status="enabled",
        maintenance_reason=None,
        cleaning=0,
    )
    for key, value in values.items():
        setattr(device if hasattr(device, key) and key != "health" else dep, key, value)
    return device, dep


def render(
    rows: list[tuple[SimpleNamespace, SimpleNamespace]], held: Any = None
) -> list[tree.DesiredProvider]:
    return tree.desired_tree(
        "h", "compute", [d for d, _ in rows], [p for _, p in rows], tree.Options(pools=True), held
    )


def test_identical_gpus_are_one_provider_of_8_with_their_memory_whole() -> None:
    (pool,) = render([gpu(n) for n in range(8)])
    assert pool.parent_uuid == "compute" and pool.members == tuple(range(100, 108))
    assert (pool.inventories[GPU].total, pool.inventories[GPU].max_unit) == (8, 8)
    memory = pool.inventories[HBM]
    assert (memory.total, memory.max_unit, memory.reserved) == (8 * 143771, 8 * 143771, 0)
    assert pool.name.startswith("h_GPU_") and pool.uuid == render([gpu(0)])[0].uuid


def test_another_model_is_another_pool() -> None:
    rows = [gpu(n) for n in range(3)] + [gpu(3, model="H100")]
    assert sorted(len(p.members) for p in render(rows)) == [1, 3]


def test_the_pool_reserves_the_unusable_and_units_held_through_other_providers() -> None:
    rows = [gpu(n) for n in range(4)]
    rows[0][0].state = "lost"  # its whole GPU reserved
    rows[1][1].cleaning = 1  # being cleaned
    pool_uuid = render(rows)[0].uuid
    held = {102: {"old-per-device": 1}, 103: {pool_uuid: 1}}  # 102 through its old provider
    (pool,) = render(rows, held)
    assert (pool.inventories[GPU].total, pool.inventories[GPU].reserved) == (4, 3)
    assert pool.inventories[HBM].reserved == 3 * 143771


def test_a_unit_held_through_a_pool_it_left_stays_counted_there() -> None:
    rows = [gpu(n) for n in range(2)]
    old = render(rows)[0].uuid
    rows[1] = gpu(1, model="H100")  # reported as another model since: another pool
    providers = render(rows, {101: {old: 1}})
    stays = next(p for p in providers if p.uuid == old)
    moved = next(p for p in providers if p.uuid != old)
    assert stays.members == (100,) and stays.inventories[GPU].total == 2  # 1 + the held one
    assert (moved.inventories[GPU].total, moved.inventories[GPU].reserved) == (1, 1)


def slot(n: int, free: int = 1, numa: int | None = None, switch: str | None = None) -> Any:
    return pools.Slot(
        n,
        free,
        {
            "numa_node": None if numa is None else str(numa),
            "pcie_switch": switch,
            "nvlink_domain": None,
        },
    )


HGX = [slot(n, numa=n // 4, switch=f"s{n // 2}") for n in range(8)]


def test_packing_fills_the_partly_used_node_and_keeps_whole_ones() -> None:
    partly = [s for s in HGX if s.id != 5]  # GPU 5 of node 1 taken
    order = pools.plan({"p": 2}, {"p": partly}, None)["p"]
    assert order[:2] == [6, 7]  # node 1's switch with both free, node 0 left whole
    assert pools.plan({"p": 4}, {"p": partly}, None)["p"][:4] == [0, 1, 2, 3]
    spread = pools.plan({"p": 6}, {"p": partly}, None)["p"]
    assert spread[:4] == [0, 1, 2, 3] and set(spread[4:6]) <= {4, 6, 7}


def test_affinity_restricts_to_one_unit_or_says_what_the_host_has() -> None:
    assert sorted(pools.plan({"p": 2}, {"p": HGX}, "pcie_switch")["p"]) == [0, 1]
    with pytest.raises(NoCapacity, match="the most any has is 2"):
        pools.plan({"p": 3}, {"p": HGX}, "pcie_switch", "h")
    unknown = [slot(n) for n in range(4)]  # no NUMA node known: shares none
    with pytest.raises(NoCapacity, match="share one NUMA node"):
        pools.plan({"p": 2}, {"p": unknown}, "numa_node")


def test_affinity_values() -> None:
    assert pools.affinity({"accel:affinity": "NVLink"}) == "nvlink_domain"
    assert pools.affinity({}) is None
    with pytest.raises(InvalidInput, match="use one of numa, pcie_switch, nvlink"):
        pools.affinity({"accel:affinity": "socket"})
