"""Device profile validation and normalisation (spec 002), as pure functions."""

from __future__ import annotations

from typing import Any

import pytest

from acceleron import uuids
from acceleron.exceptions import InvalidInput
from acceleron.placement import names
from acceleron.scheduler import query
from acceleron.service import device_profiles as dp

LIMITS = dp.Limits(max_groups=4, max_accelerators=10)
FID = "8411555e-3cbf-47de-988c-b5e30bbfa035"


def test_spec_example_group_is_kept_in_order() -> None:
    groups = [
        {
            "resources:CUSTOM_ACCELERATOR_FPGA": "1",
            "trait:CUSTOM_FPGA_INTEL_ARRIA10": "required",
            "accel:function_id": FID,
        },
        {"resources:CUSTOM_ACCELERATOR_GPU": "2", "trait:CUSTOM_GPU_MODEL_NAME": "forbidden"},
    ]
    assert dp.normalize_groups(groups, LIMITS) == groups
    assert [list(g) for g in dp.normalize_groups(groups, LIMITS)] == [list(g) for g in groups]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("custom_accelerator_fpga", "CUSTOM_ACCELERATOR_FPGA"),
        ("custom-accelerator-fpga", "CUSTOM_ACCELERATOR_FPGA"),
        ("Custom-Fpga_Intel-Arria10", "CUSTOM_FPGA_INTEL_ARRIA10"),
        ("fpga", "FPGA"),
    ],
)
def test_lower_case_and_hyphens_are_translated(raw: str, expected: str) -> None:
    assert dp.normalize_placement_name(raw) == expected
    # A class that is no accelerator's travels beside one (every group asks for one).
    beside = {} if names.is_accelerator_class(expected) else {"resources:FPGA": "1"}
    assert dp.normalize_groups([{**beside, f"resources:{raw}": "1"}], LIMITS) == [
        {**beside, f"resources:{expected}": "1"}
    ]
    if expected.startswith("CUSTOM_"):  # FPGA is a resource class, not a trait
        group = dp.normalize_groups([{"resources:FPGA": "1", f"trait:{raw}": "Required"}], LIMITS)
        assert group == [{"resources:FPGA": "1", f"trait:{expected}": "required"}]


def test_fpga_standard_class_and_standard_trait_are_accepted() -> None:
    group = {"resources:FPGA": "01", "trait:HW_CPU_X86_AVX2": "forbidden"}
    assert dp.normalize_groups([group], LIMITS) == [
        {"resources:FPGA": "1", "trait:HW_CPU_X86_AVX2": "forbidden"}
    ]


def test_every_accel_key_and_its_value_type() -> None:
    group = {
        "resources:FPGA": "1",
        "accel:bitstream_name": "nlb-0.gbs",
        "accel:attach_target": "host",
    }
    assert dp.normalize_groups([group], LIMITS) == [group]
    for key, value in [
        ("accel:bitstream_id", FID),
        ("accel:function_id", FID.replace("-", "")),
        ("accel:function_name", "gzip_v2"),
        ("accel:attach_target", "none"),
        ("accel:attach_target", "VM"),
    ]:
        assert dp.normalize_groups([{"resources:FPGA": "1", key: value}], LIMITS)


def _error(groups: Any, limits: dp.Limits = LIMITS) -> str:
    with pytest.raises(InvalidInput) as info:
        dp.normalize_groups(groups, limits)
    return info.value.message


@pytest.mark.parametrize(
    ("groups", "fragment"),
    [
        ([], "non-empty list"),
        ({"resources:FPGA": "1"}, "non-empty list"),
        (["resources:FPGA"], "groups[0]: a group must be an object"),
        ([{}], "groups[0] asks for no resource"),
        ([{"trait:CUSTOM_X": "required"}], "groups[0] asks for no resource"),
        ([{"resources:FPGA": "0"}], "positive integer"),
        ([{"resources:FPGA": "-1"}], "positive integer"),
        ([{"resources:FPGA": "1.5"}], "positive integer"),
        ([{"resources:FPGA": "\u0661"}], "positive integer"),
        ([{"resources:FPGA": 1}], "must be a string"),
        ([{"resources:NOT_A_CLASS": "1"}], "not a resource class"),
        ([{"resources:FPGA": "1", "trait:NOPE": "required"}], "neither a standard trait"),
        ([{"resources:FPGA": "1", "trait:CUSTOM_X": "preferred"}], "'required' or 'forbidden'"),
        ([{"resources:FPGA": "1", "accel:video_ram": "2GB"}], "unknown key 'accel:video_ram'"),
        ([{"resources:FPGA": "1", "accel:function_id": "3AFB"}], "not a UUID"),
        ([{"resources:FPGA": "1", "accel:bitstream_id": "x"}], "not a UUID"),
        ([{"resources:FPGA": "1", "accel:function_name": "a b"}], "may only hold"),
        ([{"resources:FPGA": "1", "accel:function_name": "a.b"}], "may only hold"),
        ([{"resources:FPGA": "1", "accel:attach_target": "vm"}], "must be one of VM, host, none"),
        ([{"resources:FPGA": "1", "other:thing": "x"}], "must start with"),
        ([{"resources": "1"}], "must be 'resources:<class>'"),
        ([{"resources:FP GA": "1"}], "letters, digits"),
        ([{"resources:FP=GA": "1"}], "letters, digits"),
        # "$" would match before a final newline: every rule matches the whole string.
        ([{"resources:CUSTOM_X\n": "1"}], "letters, digits"),
        ([{"resources:FPGA": "1", "trait:CUSTOM_X\n": "required"}], "letters, digits"),
        ([{"resources:FPGA": "1", "accel:function_id": FID + "\n"}], "not a UUID"),
        ([{"resources:FPGA": "1", "accel:bitstream_id": FID + "\n"}], "not a UUID"),
        ([{"resources:FPGA": "1", "accel:function_name": "gzip\n"}], "may only hold"),
        ([{"resources:FPGA": "1", "accel:bitstream_name": "nlb.gbs\n"}], "may only hold"),
        ([{"resources:FPGA": "1", "resources:fpga": "1"}], "repeats 'resources:FPGA'"),
        (
            [{"resources:FPGA": "1", "accel:function_id": FID, "accel:bitstream_id": FID}],
            "names its bitstream in more than one way",
        ),
        ([{"resources:FPGA": "11"}], "asks for 11 accelerators, at most 10"),
        ([{"resources:FPGA": "1"}] * 5, "5 groups given, at most 4"),
    ],
)
def test_bad_groups_are_refused_naming_the_field(groups: Any, fragment: str) -> None:
    assert fragment in _error(groups)


def test_error_names_the_group_and_key() -> None:
    message = _error([{"resources:FPGA": "1"}, {"resources:GPU_X": "1"}])
    assert message.startswith("groups[1]['resources:GPU_X']:")


@pytest.mark.parametrize(
    "name", ["", "a b", "a.b", "x" * 256, "dp:1", "dp1\n", FID, FID.replace("-", ""), None, 3]
)
def test_bad_names(name: Any) -> None:
    with pytest.raises(InvalidInput) as info:
        dp.check_name(name)
    assert info.value.message.startswith("name:")


def test_good_names() -> None:
    for name in ("a", "My_Profile-1", "x" * 255):
        assert dp.check_name(name) == name


def test_descriptions() -> None:
    assert dp.check_description(None) is None
    assert dp.check_description("Image classification, fast") == "Image classification, fast"
    for bad in ("x" * 256, "a\x00b", "line\nbreak", 5):
        with pytest.raises(InvalidInput):
            dp.check_description(bad)


def test_uuid_like() -> None:
    assert uuids.is_uuid_like(FID)
    assert uuids.is_uuid_like(FID.upper())
    assert uuids.is_uuid_like(FID.replace("-", ""))
    assert not uuids.is_uuid_like("my-profile")
    assert not uuids.is_uuid_like(FID[:-1])
    assert not uuids.is_uuid_like("{" + FID + "}")
    assert not uuids.is_uuid_like(FID + "\n")
    assert not uuids.is_uuid_like(FID[:8] + FID[9:])  # dashes all or none
    assert uuids.parse(FID.upper().replace("-", ""), "id") == FID.lower()
    with pytest.raises(InvalidInput, match=r"^function_id: 'urn:uuid:"):
        uuids.parse("urn:uuid:" + FID, "function_id")


def test_a_trailing_newline_cannot_name_a_profile() -> None:
    assert dp.could_exist("dp1")
    assert not dp.could_exist("dp1\n")
    assert not dp.could_exist(FID + "\n")


MAPPING = dp.NameMapping.from_dict(
    {
        "resource_classes": {"custom_accelerator_fpga": "FPGA"},
        "traits": {"CUSTOM_FPGA_INTEL_ARRIA10": "CUSTOM_FPGA_INTEL_PAC_ARRIA10"},
        "properties": [{"key": "accel:function_name", "value": "gzip", "trait": "custom-gzip"}],
    }
)


def test_rewrite_keeps_key_positions() -> None:
    group = {
        "resources:CUSTOM_ACCELERATOR_FPGA": "1",
        "trait:CUSTOM_FPGA_INTEL_ARRIA10": "required",
        "accel:function_name": "gzip",
        "accel:attach_target": "VM",
    }
    rewritten, used = dp.rewrite_group(group, MAPPING)
    assert list(rewritten.items()) == [
        ("resources:FPGA", "1"),
        ("trait:CUSTOM_FPGA_INTEL_PAC_ARRIA10", "required"),
        ("trait:CUSTOM_GZIP", "required"),
        ("accel:attach_target", "VM"),
    ]
    assert used == set(MAPPING.entries())


def test_rewrite_property_rule_matches_value_only() -> None:
    group = {"resources:FPGA": "1", "accel:function_name": "zstd"}
    assert dp.rewrite_group(group, MAPPING) == (group, set())


def test_mapping_entries_describe_each_rule() -> None:
    assert MAPPING.entries() == [
        "resource_classes: CUSTOM_ACCELERATOR_FPGA -> FPGA",
        "traits: CUSTOM_FPGA_INTEL_ARRIA10 -> CUSTOM_FPGA_INTEL_PAC_ARRIA10",
        "properties[0]: accel:function_name=gzip -> trait:CUSTOM_GZIP",
    ]


@pytest.mark.parametrize(
    ("group", "first", "second", "merged"),
    [
        (  # a renamed key lands on one the group already has
            {"resources:CUSTOM_ACCELERATOR_FPGA": "1", "resources:FPGA": "2"},
            "resources:CUSTOM_ACCELERATOR_FPGA",
            "resources:FPGA",
            "resources:FPGA",
        ),
        (  # ... in either order
            {"resources:FPGA": "2", "resources:CUSTOM_ACCELERATOR_FPGA": "1"},
            "resources:FPGA",
            "resources:CUSTOM_ACCELERATOR_FPGA",
            "resources:FPGA",
        ),
        (  # a property becomes a trait the group already forbids
            {
                "resources:FPGA": "1",
                "trait:CUSTOM_GZIP": "forbidden",
                "accel:function_name": "gzip",
            },
            "trait:CUSTOM_GZIP",
            "accel:function_name",
            "trait:CUSTOM_GZIP",
        ),
    ],
)
def test_rewrite_refuses_keys_that_would_collide(
    group: dict[str, str], first: str, second: str, merged: str
) -> None:
    with pytest.raises(InvalidInput) as info:
        dp.rewrite_group(group, MAPPING, 3)
    assert info.value.message == (
        f"groups[3]: {first!r} and {second!r} would both become {merged!r}."
    )


def test_rewrite_can_swap_two_names() -> None:
    swap = dp.NameMapping.from_dict({"traits": {"CUSTOM_A": "CUSTOM_B", "CUSTOM_B": "CUSTOM_A"}})
    group = {"resources:FPGA": "1", "trait:CUSTOM_A": "required", "trait:CUSTOM_B": "forbidden"}
    assert dp.rewrite_group(group, swap)[0] == {
        "resources:FPGA": "1",
        "trait:CUSTOM_B": "required",
        "trait:CUSTOM_A": "forbidden",
    }


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ([], "must be an object"),
        ({"nope": {}}, "Unknown mapping section"),
        ({"traits": ["a"]}, "traits: must map"),
        ({"properties": [{"key": "accel:x"}]}, "properties[0]: needs"),
        ({"properties": {"key": "accel:function_name"}}, "properties: must be a list"),
        (
            {"properties": [{"key": "accel:video_ram", "trait": "CUSTOM_X"}]},
            "properties[0]: key 'accel:video_ram' is not an accel key",
        ),
        (
            {"properties": [{"key": "function_name", "vaule": "gzip", "trait": "CUSTOM_X"}]},
            "properties[0]: unknown field(s) vaule",
        ),
        ({"traits": {"custom-a": "CUSTOM_B", "CUSTOM_A": "CUSTOM_C"}}, "given twice"),
    ],
)
def test_bad_mappings(data: Any, fragment: str) -> None:
    with pytest.raises(InvalidInput) as info:
        dp.NameMapping.from_dict(data)
    assert fragment in info.value.message


def test_memory_is_not_counted_as_accelerators() -> None:
    """A memory class asks for MB: 16 GiB of HBM beside one GPU is one accelerator."""
    groups = [
        {
            "resources:CUSTOM_ACCELERATOR_GPU": "1",
            "resources:CUSTOM_ACCELERATOR_MEMORY_HBM": "16384",
        }
    ]
    assert dp.normalize_groups(groups, LIMITS) == groups
    assert "asks for 11 accelerators" in _error(
        [{"resources:CUSTOM_ACCELERATOR_GPU": "11", "resources:CUSTOM_ACCELERATOR_MEMORY_HBM": "1"}]
    )


def test_a_group_is_limited_to_its_accelerators_alone() -> None:
    """Each accelerator is one request: a group asks for at most
    ``max_accelerators_per_group``; memory and other classes are not counted, and a group
    of no accelerator is refused."""
    limits = dp.Limits(max_groups=4, max_accelerators=100, max_accelerators_per_group=3)
    mig, hbm = "resources:CUSTOM_ACCELERATOR_MIG", "resources:CUSTOM_ACCELERATOR_MEMORY_HBM"
    within = [{mig: "3", hbm: "100000", "resources:VCPU": "64"}]
    assert dp.normalize_groups(within, limits) == within
    message = _error([{mig: "1"}, {mig: "4", hbm: "1"}], limits)
    assert message.startswith("groups[1] asks for 4 accelerators")
    assert "more than the 3 one group may ask for" in message
    assert "[device_profiles] max_accelerators_per_group" in message
    assert "asks for no accelerator" in _error([{hbm: "100"}], limits)
    assert "asks for no accelerator" in _error([{"resources:CUSTOM_A": "1"}], limits)
    # The total over all groups stays bounded by max_accelerators.
    total = _error([{mig: "3"}] * 4, dp.Limits(4, 10, 3))
    assert "asks for 12 accelerators" in total and "max_accelerators)" in total


def test_traits_the_rule_an_operator_expects() -> None:
    """A standard trait must be one os-traits knows; a custom trait must be well formed,
    known to Placement or not (upstream's tempest profiles name CUSTOM_FAKE_DEVICE,
    CUSTOM_FPGA_1 and CUSTOM_FUNCTION_ID_3AFB, which no host publishes; a claim for one
    is a 409 naming it, tests/functional/test_all_in_one.py)."""
    for trait in (
        "CUSTOM_FAKE_DEVICE",
        "CUSTOM_FPGA_1",
        "CUSTOM_FUNCTION_ID_3AFB",
        "HW_CPU_X86_AVX2",
    ):
        group = {"resources:FPGA": "1", f"trait:{trait}": "required"}
        assert dp.normalize_groups([group], LIMITS) == [group]
    for wrong in ("HW_CPU_X86_AVX3", "CUSTOM_", "CUSTOM_X.Y"):
        with pytest.raises(InvalidInput):
            dp.normalize_groups([{"resources:FPGA": "1", f"trait:{wrong}": "required"}], LIMITS)


def test_a_group_of_n_fpga_regions_is_split_into_n_groups_of_one_in_its_place() -> None:
    region = {
        "resources:CUSTOM_ACCELERATOR_FPGA": "3",
        "trait:CUSTOM_FPGA_INTEL": "required",
        "accel:bitstream_id": "9e1c6f5e-2b0c-4a0e-9d1f-5a8f2b3c4d5e",
    }
    one = {**region, "resources:CUSTOM_ACCELERATOR_FPGA": "1"}
    qat = {"resources:CUSTOM_ACCELERATOR_QAT": "2"}
    assert query.split_regions([qat, region, qat]) == [qat, one, one, one, qat]
    assert query.split_regions([{"resources:FPGA": "2"}]) == [{"resources:FPGA": "1"}] * 2


def test_a_group_of_regions_with_another_class_or_of_one_region_is_kept() -> None:
    beside = {
        "resources:CUSTOM_ACCELERATOR_FPGA": "2",
        "resources:CUSTOM_ACCELERATOR_MEMORY_DDR": "8",
    }
    single = {"resources:CUSTOM_ACCELERATOR_FPGA": "1"}
    gpus = {"resources:CUSTOM_ACCELERATOR_GPU": "4"}
    huge = {"resources:CUSTOM_ACCELERATOR_FPGA": "9" * 12}  # left whole: refused later
    assert query.split_regions([beside, single, gpus, huge]) == [beside, single, gpus, huge]
