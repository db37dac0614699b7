"""The generic inventory diff and the desired state of a report, as pure functions."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from acceleron.report import HostReport
from acceleron.service import inventory
from acceleron.vocabulary import AttachHandle, Deployable, Device


def row(**values: Any) -> Any:
    return SimpleNamespace(**values)


def test_diff_sorts_keys_into_added_changed_removed_kept() -> None:
    existing = {
        "a": row(id=1, x=1, y="same", unmanaged="kept"),
        "b": row(id=2, x=1, y="old", unmanaged="kept"),
        "c": row(id=3, x=1, y="z", unmanaged="kept"),
    }
    desired = {
        "a": {"x": 1, "y": "same", "unmanaged": "ignored"},
        "b": {"x": 1, "y": "new"},
        "d": {"x": 4, "y": "w"},
    }
    found = inventory.diff(existing, desired, ("x", "y"))
    assert found.added == {"d": {"x": 4, "y": "w"}}
    assert {k: changes for k, (_, changes) in found.changed.items()} == {"b": {"y": "new"}}
    assert set(found.removed) == {"c"}
    assert set(found.kept) == {"a"}
    assert found


def test_equal_states_make_an_empty_diff() -> None:
    existing = {("p", "r"): row(id=1, v={"a": [1, 2]}, n=None)}
    found = inventory.diff(existing, {("p", "r"): {"v": {"a": [1, 2]}, "n": None}}, ("v", "n"))
    assert not found and set(found.kept) == {("p", "r")}


def test_a_value_left_out_of_desired_is_not_compared() -> None:
    # bitstream_id None from a driver means "keep what was recorded": it is left out.
    existing = {"r": row(id=1, bitstream_id="recorded")}
    assert not inventory.diff(existing, {"r": {}}, ("bitstream_id",))


def test_nested_attributes_flatten_to_paths() -> None:
    attributes = {"fme": {"bitstream_id": "0x23", "ports": 2}, "kpi": "fast", "none": None}
    assert list(inventory._flatten(attributes)) == [
        (("fme",), None),
        (("fme", "bitstream_id"), "0x23"),
        (("fme", "ports"), "2"),
        (("kpi",), "fast"),
        (("none",), None),
    ]


def tree_report() -> HostReport:
    vf = AttachHandle("PCI", "0000:5e:00.1", {"domain": "0000"})
    region = Deployable(
        key="region0",
        kind="region",
        num_accelerators=1,
        programmable=True,
        region_type="ce48969398f05f33946d560708be108a",
        # The same function twice (two ports holding it) and a second one.
        function_uuids=("d8424dc4a4a3c413f89e433683f9040b",) * 2
        + ("f7df405cbd7acf7222f144b0b93acd18",),
        attributes={"fme": {"bitstream_id": "0x23"}},
        attach_handles=(vf,),
    )
    pool = Deployable("vf_pool", "vf_pool", 0, children=(region,))
    card = Device(
        "0000:5e:00.0",
        "FPGA",
        "8086",
        "INTEL",
        "09c4",
        "PAC_ARRIA10",
        "intel_fpga",
        deployables=(pool,),
    )
    return HostReport("host-1", "1.0", (card,))


def test_desired_state_keys_and_links() -> None:
    want = inventory.desired_state(tree_report())
    assert list(want.devices) == ["0000:5e:00.0"]
    assert list(want.deployables) == [("0000:5e:00.0", "vf_pool"), ("0000:5e:00.0", "region0")]
    assert want.parents == {
        ("0000:5e:00.0", "vf_pool"): None,
        ("0000:5e:00.0", "region0"): "vf_pool",
    }
    assert list(want.handles) == [("0000:5e:00.0", "region0", "0000:5e:00.1")]
    assert list(want.attributes) == [
        ("0000:5e:00.0", "region0", ("fme",)),
        ("0000:5e:00.0", "region0", ("fme", "bitstream_id")),
    ]
    region = want.deployables[("0000:5e:00.0", "region0")]
    assert region["function_uuid"] == "d8424dc4a4a3c413f89e433683f9040b"
    assert region["function_uuids"] == [
        "d8424dc4a4a3c413f89e433683f9040b",
        "f7df405cbd7acf7222f144b0b93acd18",
    ]
    assert region["name"] == "host-1_0000:5e:00.0_region0"
    assert "bitstream_id" not in region
    # uuids are derived from host, address and key: the same on every report.
    assert (
        region["uuid"]
        == inventory.desired_state(tree_report()).deployables[("0000:5e:00.0", "region0")]["uuid"]
    )
