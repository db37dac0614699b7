"""The fake driver's GPUs marked ``mig: dynamic``: carved on demand, with the real geometry."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from oslo_config import cfg

from acceleron.drivers.errors import DriverConfigError, DriverError, TargetNotFound
from acceleron.drivers.fake import FakeDriver
from acceleron.exceptions import NoMigPlacement
from acceleron.mig.geometry import NO_FREE_SLICES, NO_VALID_POSITION
from acceleron.vocabulary import AttachHandle, Device

H200 = """
devices:
  - type: GPU
    count: 2
    product_id: "2335"
    model: H200
    memory_mb: 143771
    memory_type: HBM3e
    mig: dynamic
    mig_instances:
      - {profile: 1g.18gb, start: 2}
      - {profile: 1g.18gb, start: 5}
  - type: GPU                 # the older form, made in advance, still read
    product_id: "2330"
    model: H100
    mig_profiles:
      - {name: 1g.10gb, instances: 2, memory_mb: 9856}
"""


def driver(driver_conf: cfg.ConfigOpts, tmp_path: Path, text: str = H200) -> FakeDriver:
    path = tmp_path / "inventory.yaml"
    path.write_text(text)
    driver_conf.set_override("inventory_file", str(path), group="fake")
    return FakeDriver(driver_conf, tmp_path)


def gpu(fake: FakeDriver, index: int = 0) -> Device:
    return fake.discover()[index]


def held(device: Device) -> list[tuple[str, int]]:
    """The instances a partitionable GPU's slot handles say it holds."""
    (dep,) = device.deployables
    return sorted(
        (h.info["mig_profile"], int(h.info["gpu_instance_start"]))
        for h in dep.attach_handles
        if h.in_use
    )


def slot(device: Device, number: int) -> AttachHandle:
    return device.deployables[0].attach_handles[number]


def test_a_dynamic_gpu_is_one_partitionable_deployable_of_slots(
    driver_conf: cfg.ConfigOpts, tmp_path: Path
) -> None:
    fake = driver(driver_conf, tmp_path)
    first, second, h100 = fake.discover()
    (dep,) = first.deployables
    assert (dep.key, dep.kind, dep.num_accelerators, dep.accelerator_type) == (
        "mig",
        "mig_gpu",
        7,  # one slot per compute slice: the most instances an H200 holds
        "MIG_INSTANCE",
    )
    assert dep.attributes == {"mig_product": "H200 141GB"}
    # The instances found on it sit in the first slots, in use; the others are free.
    assert [h.in_use for h in dep.attach_handles] == [True, True] + [False] * 5
    assert held(first) == [("1g.18gb", 2), ("1g.18gb", 5)]
    assert {h.type for h in dep.attach_handles} == {"MIG"}
    assert dep.attach_handles[0].info["gpu_instance_profile_id"] == "19"
    assert dep.attach_handles[0].info["mig_uuid"] == dep.attach_handles[0].address
    assert "mig_profile" not in dep.attach_handles[2].info
    assert first.vendor_board_info == {
        "memory_mb": 143771,
        "mig": "dynamic",
        "mig_product": "H200 141GB",
        "mig_free_memory_slices": "0-1, 3-4, 6-7",
        "mig_free_compute_slices": 5,
    }
    # Each GPU of the entry has its own slots (the same instances at start).
    assert slot(second, 0).address != slot(first, 0).address
    assert [d.key for d in h100.deployables] == ["mig/1g.10gb"]
    assert "mig" not in h100.vendor_board_info


def test_enough_slices_but_no_valid_position_on_the_fake(
    driver_conf: cfg.ConfigOpts, tmp_path: Path
) -> None:
    """6 memory slices free, none of the 3g.71gb's positions: refused as on hardware,
    with the reason; nothing is made."""
    fake = driver(driver_conf, tmp_path)
    with pytest.raises(NoMigPlacement) as refused:
        fake.make_mig(gpu(fake), "3g.71gb")
    assert refused.value.reason == NO_VALID_POSITION
    with pytest.raises(NoMigPlacement):
        fake.make_mig_instance(gpu(fake), slot(gpu(fake), 2), "3g.71gb")
    with pytest.raises(DriverError, match=re.escape("overlaps the 1g.18gb at 5")):
        fake.make_mig(gpu(fake), "3g.71gb", 4)
    assert held(gpu(fake)) == [("1g.18gb", 2), ("1g.18gb", 5)]


def test_instances_made_and_destroyed_show_in_the_next_scan(
    driver_conf: cfg.ConfigOpts, tmp_path: Path
) -> None:
    fake = driver(driver_conf, tmp_path)
    assert fake.make_mig(gpu(fake), "2g.35gb") == 0  # the only 2g position left
    assert fake.make_mig(gpu(fake), "1g.18gb", 6) == 6
    assert held(gpu(fake)) == [("1g.18gb", 2), ("1g.18gb", 5), ("1g.18gb", 6), ("2g.35gb", 0)]
    assert gpu(fake).vendor_board_info["mig_free_memory_slices"] == "3-4, 7"
    with pytest.raises(NoMigPlacement) as refused:
        fake.make_mig(gpu(fake), "2g.35gb")  # 3 memory and 2 compute slices free, but
    assert refused.value.reason == NO_VALID_POSITION  # 2-3 and 4-5 are partly taken
    with pytest.raises(NoMigPlacement) as too_big:
        fake.make_mig(gpu(fake), "4g.71gb")
    assert too_big.value.reason == NO_FREE_SLICES

    fake.destroy_mig(gpu(fake), "1g.18gb", 5)
    fake.destroy_mig(gpu(fake), "1g.18gb", 6)
    assert fake.make_mig(gpu(fake), "3g.71gb") == 4
    # A new driver (the agent restarted) reads the same instances from the state file.
    again = FakeDriver(driver_conf, tmp_path)
    assert held(gpu(again)) == [("1g.18gb", 2), ("2g.35gb", 0), ("3g.71gb", 4)]
    # The second GPU of the entry was not touched.
    assert held(gpu(again, 1)) == [("1g.18gb", 2), ("1g.18gb", 5)]
    with pytest.raises(TargetNotFound, match=re.escape("no 1g.18gb instance starts at memory")):
        fake.destroy_mig(gpu(fake), "1g.18gb", 5)


def test_a_slots_instance_is_made_once_and_destroyed_alone(
    driver_conf: cfg.ConfigOpts, tmp_path: Path
) -> None:
    """Made for a slot where the planner says, again for the same slot: the same one;
    destroyed: that one only, and twice is nothing."""
    fake = driver(driver_conf, tmp_path, H200.replace("count: 2", "count: 1"))
    free = slot(gpu(fake), 4)
    made = fake.make_mig_instance(gpu(fake), free, "1g.18gb")
    assert made == {
        "mig_uuid": free.address,
        "mig_profile": "1g.18gb",
        "gpu_instance_profile_id": "19",
        "gpu_instance_start": "3",  # best fit: between the two, spoiling nothing more
    }
    assert fake.make_mig_instance(gpu(fake), free, "1g.18gb") == made
    with pytest.raises(DriverError, match=re.escape("holds a 1g.18gb, not a 2g.35gb")):
        fake.make_mig_instance(gpu(fake), free, "2g.35gb")
    assert slot(gpu(fake), 4).in_use and slot(gpu(fake), 4).info["gpu_instance_start"] == "3"
    fake.destroy_mig_instance(gpu(fake), slot(gpu(fake), 4))
    fake.destroy_mig_instance(gpu(fake), slot(gpu(fake), 4))
    assert held(gpu(fake)) == [("1g.18gb", 2), ("1g.18gb", 5)]
    assert not slot(gpu(fake), 4).in_use


def test_only_dynamic_gpus_are_carved(driver_conf: cfg.ConfigOpts, tmp_path: Path) -> None:
    fake = driver(driver_conf, tmp_path)
    with pytest.raises(TargetNotFound, match="no simulated GPU marked mig: dynamic"):
        fake.make_mig(gpu(fake, 2), "1g.10gb")


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("{type: GPU, product_id: '2335', mig: static}", "mig takes one value, dynamic"),
        ("{type: QAT, product_id: '2335', mig: dynamic}", "on a GPU only"),
        ("{type: GPU, product_id: '1eb8', mig: dynamic}", "needs a product_id with a MIG table"),
        ("{type: GPU, product_id: '2335', mig_instances: []}", "mig_instances needs mig"),
        ("{type: GPU, product_id: '2335', mig_vgpu: true}", "mig_vgpu needs mig: dynamic"),
        (
            "{type: GPU, product_id: '2335', mig: dynamic, mig_vgpu: 'yes'}",
            "mig_vgpu is true or false",
        ),
        (
            "{type: GPU, product_id: '2335', mig: dynamic, mig_profiles: []}",
            "mig_profiles and mig cannot be combined",
        ),
        (
            "{type: GPU, product_id: '2335', mig: dynamic, "
            "mig_instances: [{profile: 3g.71gb, start: 2}]}",
            "cannot start at memory slice 2",
        ),
        (
            "{type: GPU, product_id: '2330', mig: dynamic, "
            "mig_instances: [{profile: 3g.40gb, start: 0}, {profile: 4g.40gb, start: 0}]}",
            "overlaps the 3g.40gb at 0",
        ),
        (
            "{type: GPU, product_id: '2330', mig: dynamic, mig_instances: [{profile: 1g.18gb}]}",
            "mig_instances: KeyError",
        ),
        (
            "{type: GPU, product_id: '2330', mig: dynamic, mig_instances: [{size: 1}]}",
            "mig_instances entries take",
        ),
    ],
)
def test_bad_dynamic_entries(
    driver_conf: cfg.ConfigOpts, tmp_path: Path, entry: str, message: str
) -> None:
    with pytest.raises(DriverConfigError, match=message):
        driver(driver_conf, tmp_path, f"devices: [{entry}]")
