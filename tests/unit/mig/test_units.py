"""A partitionable GPU's units: a profile written out as what Nova's query reads, and
what instances no request holds take, as the sync reserves it."""

from __future__ import annotations

import types

import pytest

from acceleron.exceptions import InvalidInput
from acceleron.mig import geometry, units
from acceleron.placement import tree


def test_a_profile_is_written_out_as_its_units_and_its_products_trait() -> None:
    group = units.expand({units.PROFILE_KEY: "3g.71gb"}, "groups[0]")
    assert group == {
        units.PROFILE_KEY: "3g.71gb",
        "resources:CUSTOM_ACCELERATOR_MIG_INSTANCE": "1",
        "resources:CUSTOM_MIG_COMPUTE_SLICE": "3",
        "resources:CUSTOM_MIG_MEMORY_SLICE": "4",
        "trait:CUSTOM_MIG_H200_141GB": "required",
        "trait:CUSTOM_MIG_PARTITIONABLE": "required",
    }
    assert units.expand(group, "groups[0]") == group  # a stored group: itself
    assert units.expand({"resources:CUSTOM_ACCELERATOR_GPU": "1"}, "g") == {
        "resources:CUSTOM_ACCELERATOR_GPU": "1"
    }


@pytest.mark.parametrize(
    ("group", "message"),
    [
        ({units.PROFILE_KEY: "5g.50gb"}, "no GPU has a MIG profile '5g.50gb'; the profiles are"),
        (
            {units.PROFILE_KEY: "1g.10gb", "resources:CUSTOM_MIG_MEMORY_SLICE": "2"},
            "asks for resources:CUSTOM_MIG_MEMORY_SLICE=1; the group says 2",
        ),
    ],
)
def test_what_a_profile_cannot_be(group: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidInput, match=message.replace("(", r"\(")):
        units.expand(group, "groups[0]")


def test_every_profile_name_belongs_to_one_product() -> None:
    names = [p.name for product in geometry.PRODUCTS for p in product.profiles]
    assert len(names) == len(set(names))
    assert units.find("1g.12gb+me")[0].name == "H100 94GB"


def test_what_unheld_instances_take() -> None:
    infos = [
        {units.INFO_PROFILE: "3g.40gb", units.INFO_START: "4"},
        {units.INFO_PROFILE: "1g.10gb", units.INFO_START: "0"},
        {units.INFO_PROFILE: "made elsewhere"},
    ]
    assert units.taken(infos) == units.Taken(3, 4, 5)
    layout = units.layout(geometry.product("2330"), infos)
    assert layout.free_slices_text() == "1-3" and not layout.fits("3g.40gb")


def _rows(kind: str, health: str = "healthy") -> tuple[types.SimpleNamespace, ...]:
    device = types.SimpleNamespace(
        id=1,
        hostname="h",
        pci_address="0000:17:00.0",
        type="GPU",
        vendor_name="NVIDIA",
        model="H100",
        product_id="2330",
        driver_name="fake",
        state="present",
        health=health,
        status="enabled",
    )
    dep = types.SimpleNamespace(
        id=7,
        device_id=1,
        kind=kind,
        num_accelerators=7,
        accelerator_type=units.ACCELERATOR_TYPE,
        memory_mb=None,
        cleaning=1,
        health="healthy",
        status="enabled",
        traits=[],
        region_type=None,
        function_uuid=None,
        programmable=False,
    )
    return device, dep


def test_the_provider_of_a_partitionable_gpu() -> None:
    device, dep = _rows(units.KIND)
    options = tree.Options(mig_taken={7: units.Taken(2, 2, 3)})
    found = {
        rc: (i.total, i.reserved, i.max_unit)
        for rc, i in tree.inventories(device, dep, options).items()
    }
    assert found == {
        units.INSTANCE_CLASS: (7, 3, 7),  # two found on it, one slot being cleaned
        units.COMPUTE_CLASS: (7, 2, 7),
        units.MEMORY_CLASS: (8, 3, 8),
    }
    traits = tree.deployable_traits(device, dep, options)
    assert {units.PARTITIONABLE, "CUSTOM_MIG_H100_80GB"} <= traits
    device, dep = _rows(units.KIND, health="unhealthy")
    reserved = {rc: i.reserved for rc, i in tree.inventories(device, dep, options).items()}
    assert reserved == {units.INSTANCE_CLASS: 7, units.COMPUTE_CLASS: 7, units.MEMORY_CLASS: 8}


def test_a_partitionable_gpu_is_never_in_a_pool() -> None:
    """Each GPU has its own layout: with pools, it is still a provider of its own."""
    device, dep = _rows(units.KIND)
    extra = {"parent_id": None, "uuid": "6f0c0f55-96b4-4a8e-9a36-1f4e1fb3c2d1", "name": "h_mig"}
    dep = types.SimpleNamespace(**vars(dep), **extra)
    found = tree.desired_tree("h", "compute", [device], [dep], tree.Options(pools=True))
    assert [p.uuid for p in found if units.COMPUTE_CLASS in p.inventories] == [dep.uuid]
    assert not any(p.members for p in found)
