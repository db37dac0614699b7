"""The MIG table of Hopper GPUs and what a GPU's instances leave free."""

from __future__ import annotations

import re

import pytest

from acceleron.exceptions import InvalidInput
from acceleron.mig.geometry import (
    INSTANCE_LIMIT,
    NO_FREE_SLICES,
    NO_VALID_POSITION,
    PRODUCTS,
    UNKNOWN_PROFILE,
    Instance,
    Layout,
    Product,
    known,
    product,
)

H100 = product("H100 80GB")
H200 = product("H200 141GB")


def layout(*instances: tuple[str, int], of: str = "H100 80GB") -> Layout:
    return Layout.of(product(of), [Instance(name, start) for name, start in instances])


def test_h100_80gb_table_is_nvidias() -> None:
    """Name, profile id, compute and memory slices, instances a GPU, placements: as the
    MIG user guide and ``nvidia-smi mig -lgip``/``-lgipp`` give them for an H100 80GB."""
    assert [
        (p.name, p.id, p.compute_slices, p.memory_slices, p.max_instances, p.placements)
        for p in H100.profiles
    ] == [
        ("7g.80gb", 0, 7, 8, 1, "{0}:8"),
        ("4g.40gb", 5, 4, 4, 1, "{0}:4"),
        ("3g.40gb", 9, 3, 4, 2, "{0,4}:4"),
        ("2g.20gb", 14, 2, 2, 3, "{0,2,4}:2"),
        ("1g.20gb", 15, 1, 2, 4, "{0,2,4,6}:2"),
        ("1g.10gb", 19, 1, 1, 7, "{0,1,2,3,4,5,6}:1"),
        ("1g.10gb+me", 20, 1, 1, 1, "{0,1,2,3,4,5,6}:1"),
    ]
    assert (H100.memory_slices, H100.compute_slices) == (8, 7)


def test_the_other_products_differ_in_names_only() -> None:
    assert [p.name for p in product("H100 94GB").profiles] == [
        "7g.94gb",
        "4g.47gb",
        "3g.47gb",
        "2g.24gb",
        "1g.24gb",
        "1g.12gb",
        "1g.12gb+me",
    ]
    assert [p.name for p in H200.profiles] == [
        "7g.141gb",
        "4g.71gb",
        "3g.71gb",
        "2g.35gb",
        "1g.35gb",
        "1g.18gb",
        "1g.18gb+me",
    ]
    shape = [
        (p.id, p.compute_slices, p.memory_slices, p.max_instances, p.starts) for p in H100.profiles
    ]
    for other in PRODUCTS:
        assert [
            (p.id, p.compute_slices, p.memory_slices, p.max_instances, p.starts)
            for p in other.profiles
        ] == shape


@pytest.mark.parametrize("found", PRODUCTS, ids=lambda p: p.name)
def test_a_profiles_positions_lie_inside_the_gpu_and_never_overlap(found: Product) -> None:
    """What ``capacity`` counts on: each position of a profile is separate from the others."""
    for profile in found.profiles:
        spans = [profile.span(s) for s in profile.starts]
        assert all(span < 1 << 8 for span in spans), profile.name
        assert all(a & b == 0 for i, a in enumerate(spans) for b in spans[i + 1 :]), profile.name


def test_products_by_name_or_pci_id() -> None:
    assert product("2335") is H200 and product("233b") is H200
    assert product("h200 141gb") is H200 and product("H100 80GB") is product("2331")
    assert product("2321").name == "H100 94GB"
    assert known("2330") and not known("1eb8")
    with pytest.raises(InvalidInput, match=r"No MIG table for GPU '1eb8'.*H200 141GB"):
        product("1eb8")
    with pytest.raises(InvalidInput, match=re.escape("no MIG profile '3g.40gb'; it has 7g.141gb")):
        H200.profile("3g.40gb")


def test_an_empty_gpu_offers_every_position() -> None:
    empty = layout()
    for profile in H100.profiles:
        assert empty.free_starts(profile.name) == profile.starts
        assert empty.refusal(profile.name) is None
    assert (empty.free_memory_slices, empty.free_compute_slices) == (8, 7)


def test_enough_slices_but_no_valid_position() -> None:
    """Two 1g at slices 2 and 5 leave 6 memory and 5 compute slices free, more than a
    3g.40gb needs, but both of its positions (0-3 and 4-7) are partly taken."""
    gpu = layout(("1g.10gb", 2), ("1g.10gb", 5))
    assert (gpu.free_memory_slices, gpu.free_compute_slices) == (6, 5)
    assert gpu.free_starts("3g.40gb") == () and not gpu.fits("3g.40gb")
    refusal = gpu.refusal("3g.40gb")
    assert refusal is not None and refusal.reason == NO_VALID_POSITION
    assert "(0-1, 3-4, 6-7)" in refusal.message and "{0,4}:4" in refusal.message
    assert gpu.free_starts("2g.20gb") == (0,)
    assert gpu.free_starts("1g.20gb") == (0, 6)
    assert gpu.free_starts("1g.10gb") == (0, 1, 3, 4, 6)


def test_no_free_slices() -> None:
    full = layout(("4g.40gb", 0), ("3g.40gb", 4))
    refusal = full.refusal("1g.10gb")
    assert refusal is not None and refusal.reason == NO_FREE_SLICES
    assert "the GPU has 0 and 0 free" in refusal.message
    # Three 2g and a 1g take all 7 compute slices: memory slice 7 stays free, unusable.
    compute_bound = layout(("2g.20gb", 0), ("2g.20gb", 2), ("2g.20gb", 4), ("1g.10gb", 6))
    assert (compute_bound.free_memory_slices, compute_bound.free_compute_slices) == (1, 0)
    assert not compute_bound.fits("1g.10gb")


def test_a_profiles_instance_limit() -> None:
    gpu = layout(("1g.10gb+me", 0))
    refusal = gpu.refusal("1g.10gb+me")
    assert refusal is not None and refusal.reason == INSTANCE_LIMIT
    assert gpu.free_starts("1g.10gb+me") == () and gpu.free_starts("1g.10gb") == tuple(range(1, 7))
    with pytest.raises(InvalidInput, match=re.escape("already holds 1 1g.10gb+me")):
        gpu.adding(Instance("1g.10gb+me", 3))
    unknown = gpu.refusal("1g.18gb")
    assert unknown is not None and unknown.reason == UNKNOWN_PROFILE


@pytest.mark.parametrize(
    ("instances", "error"),
    [
        ([("3g.40gb", 2)], "cannot start at memory slice 2.*placements are \\{0,4\\}:4"),
        ([("1g.10gb", 7)], "cannot start at memory slice 7"),
        ([("4g.40gb", 4)], "cannot start at memory slice 4"),
        ([("3g.40gb", 4), ("1g.10gb", 5)], "at memory slice 5 overlaps the 3g.40gb at 4"),
        ([("1g.20gb", 6), ("1g.10gb", 6)], "overlaps the 1g.20gb at 6"),
        ([("7g.80gb", 0), ("1g.10gb", 0)], "needs 1 memory and 1 compute slices"),
        ([("1g.18gb", 0)], "no MIG profile '1g.18gb'"),
    ],
)
def test_layouts_the_hardware_refuses(instances: list[tuple[str, int]], error: str) -> None:
    with pytest.raises(InvalidInput, match=error):
        layout(*instances)


def test_removing_an_instance_frees_its_positions() -> None:
    gpu = layout(("1g.10gb", 2), ("1g.10gb", 5))
    freed = gpu.removing(Instance("1g.10gb", 5))
    assert freed.free_starts("3g.40gb") == (4,)
    assert freed.removing(Instance("1g.10gb", 2)).free_starts("7g.80gb") == (0,)
    with pytest.raises(
        InvalidInput, match=re.escape("No 1g.10gb instance starts at memory slice 5")
    ):
        freed.removing(Instance("1g.10gb", 5))


def test_capacity_counts_instances_side_by_side() -> None:
    gpu = layout(("1g.10gb", 2), ("1g.10gb", 5))
    assert {p.name: gpu.capacity(p) for p in H100.profiles} == {
        "7g.80gb": 0,
        "4g.40gb": 0,
        "3g.40gb": 0,
        "2g.20gb": 1,  # at 0; 2-3 and 4-5 are spoilt
        "1g.20gb": 2,  # at 0 and 6
        "1g.10gb": 5,  # 0, 1, 3, 4, 6 (compute: 5 left)
        "1g.10gb+me": 1,
    }
    # Compute bounds it too: a 4g leaves 3 compute slices, and 4 memory slices.
    assert layout(("4g.40gb", 0)).capacity(H100.profile("1g.10gb")) == 3


def test_h200_layout() -> None:
    gpu = layout(("3g.71gb", 4), ("2g.35gb", 0), of="2335")
    assert gpu.free_starts("1g.18gb") == (2, 3)
    assert gpu.free_starts("1g.35gb") == (2,)
    assert not gpu.fits("4g.71gb")
