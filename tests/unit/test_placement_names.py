"""Names published to Placement: classes, traits, provider names and uuids."""

from __future__ import annotations

import re
import uuid

import os_traits
import pytest

from acceleron.exceptions import InvalidInput, InvalidPlacementName
from acceleron.placement import names
from acceleron.placement.names import Origin, TraitForm

ORIGIN = Origin(driver="intel_fpga", device="compute-1 0000:5e:00.0")
REGION = "9e0a1b6c-8b8a-4b0f-9f37-6c2e1d0b7a11"
REGION_TOKEN = "9E0A1B6C_8B8A_4B0F_9F37_6C2E1D0B7A11"
FUNCTION = "f7df405c-bd7b-4a1b-9a41-2d0a8e3b7c5e"
FUNCTION_TOKEN = "F7DF405C_BD7B_4A1B_9A41_2D0A8E3B7C5E"


class TestNormalize:
    @pytest.mark.parametrize(
        ("raw", "expected"),
        [
            ("intel", "INTEL"),
            ("PAC Arria10", "PAC_ARRIA10"),
            ("pac-arria-10", "PAC_ARRIA_10"),
            ("  Xilinx  ", "XILINX"),
            ("a_b", "A_B"),
        ],
    )
    def test_upper_case_spaces_and_hyphens(self, raw: str, expected: str) -> None:
        assert names.normalize(raw) == expected

    @pytest.mark.parametrize("raw", ["", "   ", "Intel(R)", "arria/10", "café", "a.b"])
    def test_invalid_characters_name_driver_and_device(self, raw: str) -> None:
        with pytest.raises(InvalidPlacementName) as caught:
            names.normalize(raw, what="vendor", origin=ORIGIN)
        error = caught.value
        assert error.driver == "intel_fpga"
        assert error.device == "compute-1 0000:5e:00.0"
        assert error.name == raw
        assert "intel_fpga" in error.message and "0000:5e:00.0" in error.message
        assert "vendor" in error.message

    def test_invalid_name_is_invalid_input(self) -> None:
        with pytest.raises(InvalidInput):
            names.normalize("!")

    @pytest.mark.parametrize(
        ("raw", "expected"),
        [
            (REGION, REGION_TOKEN),
            ("ce48969398f05f33946d560708be108a", "CE48969398F05F33946D560708BE108A"),
            ("  9E0A1B6C8B8A4B0F9F376C2E1D0B7A11 ", "9E0A1B6C8B8A4B0F9F376C2E1D0B7A11"),
            ("gzip-v2", "GZIP_V2"),
        ],
    )
    def test_ids_are_upper_cased_as_reported(self, raw: str, expected: str) -> None:
        trait = names.region_type_trait("fpga", "intel", raw, form=TraitForm.SPEC_001)
        assert trait == f"CUSTOM_FPGA_REGION_INTEL_{expected}"

    @pytest.mark.parametrize(
        ("raw", "expected"),
        [
            ("PAC Arria10", "PAC_ARRIA10"),
            ("pac-arria10", "PAC_ARRIA10"),
            (REGION, "9E0A1B6C8B8A4B0F9F376C2E1D0B7A11"),
            ("9e0a1b6c8b8a4b0f9f376c2e1d0b7a11", "9E0A1B6C8B8A4B0F9F376C2E1D0B7A11"),
            (REGION_TOKEN, "9E0A1B6C8B8A4B0F9F376C2E1D0B7A11"),
            ("dead-beef", "DEAD_BEEF"),
        ],
    )
    def test_fold_key(self, raw: str, expected: str) -> None:
        assert names.fold_key(raw) == expected

    def test_fold_key_refuses_what_cannot_be_a_name(self) -> None:
        with pytest.raises(InvalidPlacementName, match="model"):
            names.fold_key("a/b", what="model")


class TestChecks:
    @pytest.mark.parametrize("name", ["CUSTOM_A", "CUSTOM_FPGA_INTEL_1", "CUSTOM_" + "A" * 248])
    def test_valid_custom(self, name: str) -> None:
        assert names.check_custom(name) == name

    @pytest.mark.parametrize(
        "name",
        [
            "CUSTOM_",
            "custom_a",
            "CUSTOM_a",
            "CUSTOM-A",
            "FOO_A",
            "CUSTOM_" + "A" * 249,
            "CUSTOM_A\n",
        ],
    )
    def test_invalid_custom(self, name: str) -> None:
        with pytest.raises(InvalidPlacementName):
            names.check_custom(name, origin=ORIGIN)

    def test_standard_traits_come_from_os_traits(self) -> None:
        assert names.check_trait(os_traits.HW_CPU_X86_AVX2) == "HW_CPU_X86_AVX2"
        assert names.check_trait(names.OWNER) == "OWNER_CYBORG"
        with pytest.raises(InvalidPlacementName, match="neither a standard trait"):
            names.check_trait("HW_NOT_A_TRAIT", origin=ORIGIN)

    def test_resource_classes(self) -> None:
        assert names.check_resource_class("FPGA") == "FPGA"
        assert names.check_resource_class("CUSTOM_ACCELERATOR_QAT") == "CUSTOM_ACCELERATOR_QAT"
        with pytest.raises(InvalidPlacementName):
            names.check_resource_class("ACCELERATOR_QAT")

    def test_too_long_after_joining(self) -> None:
        with pytest.raises(InvalidPlacementName, match="longer than 255"):
            names.product_trait("fpga", "intel", "x" * 250, origin=ORIGIN)


class TestResourceClasses:
    @pytest.mark.parametrize(
        ("kind", "expected"),
        [
            ("fpga", "CUSTOM_ACCELERATOR_FPGA"),
            ("GPU", "CUSTOM_ACCELERATOR_GPU"),
            ("qat", "CUSTOM_ACCELERATOR_QAT"),
            ("smart-nic", "CUSTOM_ACCELERATOR_SMART_NIC"),
        ],
    )
    def test_custom_by_default(self, kind: str, expected: str) -> None:
        assert names.accelerator_class(kind) == expected

    @pytest.mark.parametrize(
        ("kind", "expected"),
        [
            ("fpga", "FPGA"),
            ("gpu", "PGPU"),
            ("pgpu", "PGPU"),
            ("vgpu", "VGPU"),
            ("qat", "CUSTOM_ACCELERATOR_QAT"),
        ],
    )
    def test_upstream_standard_classes(self, kind: str, expected: str) -> None:
        assert names.accelerator_class(kind, standard=True) == expected

    def test_memory(self) -> None:
        assert names.memory_class("ddr") == "CUSTOM_ACCELERATOR_MEMORY_DDR"
        assert names.memory_class("HBM 2") == "CUSTOM_ACCELERATOR_MEMORY_HBM_2"

    def test_bad_type(self) -> None:
        with pytest.raises(InvalidPlacementName, match="device type"):
            names.accelerator_class("fpga#1", origin=ORIGIN)


class TestTraits:
    def test_device_type_and_product(self) -> None:
        assert names.device_type_trait("fpga", "intel") == "CUSTOM_FPGA_INTEL"
        assert names.device_type_trait("GPU", "AMD") == "CUSTOM_GPU_AMD"
        assert (
            names.product_trait("fpga", "Intel", "PAC Arria10") == "CUSTOM_FPGA_INTEL_PAC_ARRIA10"
        )
        assert names.family_trait("fpga", "intel", "arria10") == "CUSTOM_FPGA_INTEL_ARRIA10"

    def test_region_type_forms(self) -> None:
        assert (
            names.region_type_trait("fpga", "intel", REGION)
            == f"CUSTOM_FPGA_INTEL_REGION_{REGION_TOKEN}"
        )
        assert (
            names.region_type_trait("fpga", "intel", REGION, form=TraitForm.SPEC_001)
            == f"CUSTOM_FPGA_REGION_INTEL_{REGION_TOKEN}"
        )
        bare = REGION_TOKEN.replace("_", "")
        assert names.region_type_traits("fpga", "intel", REGION) == (
            f"CUSTOM_FPGA_INTEL_REGION_{bare}",
            f"CUSTOM_FPGA_INTEL_REGION_{REGION_TOKEN}",
            f"CUSTOM_FPGA_REGION_INTEL_{bare}",
            f"CUSTOM_FPGA_REGION_INTEL_{REGION_TOKEN}",
        )

    def test_function_forms(self) -> None:
        bare = FUNCTION_TOKEN.replace("_", "")
        assert names.function_traits("fpga", "intel", FUNCTION) == (
            f"CUSTOM_FPGA_INTEL_FUNCTION_{bare}",
            f"CUSTOM_FPGA_INTEL_FUNCTION_{FUNCTION_TOKEN}",
            f"CUSTOM_FPGA_FUNCTION_INTEL_{bare}",
            f"CUSTOM_FPGA_FUNCTION_INTEL_{FUNCTION_TOKEN}",
            f"CUSTOM_FPGA_FUNCTION_ID_INTEL_{bare}",
            f"CUSTOM_FPGA_FUNCTION_ID_INTEL_{FUNCTION_TOKEN}",
        )
        upstream = names.function_trait("fpga", "intel", FUNCTION, form=TraitForm.UPSTREAM)
        assert upstream == f"CUSTOM_FPGA_FUNCTION_ID_INTEL_{FUNCTION_TOKEN}"

    def test_ids_are_published_in_both_spellings_however_reported(self) -> None:
        """Upstream's (32 hex digits: a flavor written for upstream Cyborg matches) and
        spec 004's (groups joined by underscores), from either spelling."""
        compact = "ce48969398f05f33946d560708be108a"
        assert names.function_traits("fpga", "intel", compact)[-2:] == (
            "CUSTOM_FPGA_FUNCTION_ID_INTEL_CE48969398F05F33946D560708BE108A",
            "CUSTOM_FPGA_FUNCTION_ID_INTEL_CE489693_98F0_5F33_946D_560708BE108A",
        )
        for spelling in (str(uuid.UUID(compact)), str(uuid.UUID(compact)).upper(), compact):
            assert names.region_type_traits("fpga", "intel", spelling) == (
                names.region_type_traits("fpga", "intel", compact)
            )
        assert names.id_spellings("not-a-uuid") == ("NOT_A_UUID",)

    def test_bad_region_id_names_driver_and_device(self) -> None:
        with pytest.raises(InvalidPlacementName) as caught:
            names.region_type_traits("fpga", "intel", "id/1", origin=ORIGIN)
        assert caught.value.driver == "intel_fpga"
        assert "region id" in caught.value.message

    def test_programmable_and_functionality(self) -> None:
        assert names.PROGRAMMABLE == "CUSTOM_PROGRAMMABLE"
        assert names.functionality_trait("fpga", "compute") == "CUSTOM_FPGA_COMPUTE"
        assert names.functionality_trait("FPGA", "Network") == "CUSTOM_FPGA_NETWORK"
        assert names.functionality_trait("fpga", "storage") == "CUSTOM_FPGA_STORAGE"
        with pytest.raises(InvalidPlacementName, match="COMPUTE"):
            names.functionality_trait("fpga", "crypto", origin=ORIGIN)

    def test_owner_is_a_standard_trait(self) -> None:
        assert names.OWNER in os_traits.get_traits()

    def test_every_custom_name_is_valid(self) -> None:
        made = [
            names.device_type_trait("fpga", "intel"),
            names.product_trait("fpga", "intel", "pac arria10"),
            *names.region_type_traits("fpga", "intel", REGION),
            *names.function_traits("fpga", "intel", FUNCTION),
            names.functionality_trait("fpga", "compute"),
            names.PROGRAMMABLE,
            names.accelerator_class("fpga"),
            names.memory_class("ddr"),
        ]
        for name in made:
            assert re.fullmatch(r"CUSTOM_[A-Z0-9_]+", name) and len(name) <= 255


class TestProviders:
    @pytest.mark.parametrize(
        ("raw", "expected"),
        [
            ("0000:5e:00.0", "0000:5e:00.0"),
            ("0000:5E:00.0", "0000:5e:00.0"),
            ("5e:00.0", "0000:5e:00.0"),
            ("10000:3b:1f.7", "10000:3b:1f.7"),
            ("platform-fpga0", "platform-fpga0"),
        ],
    )
    def test_canonical_address(self, raw: str, expected: str) -> None:
        assert names.canonical_address(raw) == expected

    @pytest.mark.parametrize("raw", ["", "  ", "0000:5e:00.0 extra"])
    def test_bad_address(self, raw: str) -> None:
        with pytest.raises(InvalidPlacementName, match="device address"):
            names.canonical_address(raw, origin=ORIGIN)

    def test_names(self) -> None:
        assert names.provider_name("compute-1", "5e:00.0") == "compute-1_0000:5e:00.0"
        assert (
            names.provider_name("compute-1", "0000:5e:00.0", "region0")
            == "compute-1_0000:5e:00.0_region0"
        )

    @pytest.mark.parametrize(("host", "key"), [("compute-1\n", ""), ("compute-1", "region0\n")])
    def test_a_trailing_newline_is_refused(self, host: str, key: str) -> None:
        with pytest.raises(InvalidPlacementName, match="it is empty or holds spaces"):
            names.provider_name(host, "5e:00.0", key, origin=ORIGIN)

    def test_uuid_is_deterministic_and_documented(self) -> None:
        first = names.provider_uuid("compute-1", "0000:5e:00.0", "region0")
        assert first == names.provider_uuid("compute-1", "5E:00.0", "region0")
        expected = uuid.uuid5(names.PROVIDER_NAMESPACE, "compute-1\n0000:5e:00.0\nregion0")
        assert first == str(expected)
        device = uuid.uuid5(names.PROVIDER_NAMESPACE, "compute-1\n0000:5e:00.0\n")
        assert names.provider_uuid("compute-1", "0000:5e:00.0") == str(device)

    def test_namespace_never_changes(self) -> None:
        assert str(names.PROVIDER_NAMESPACE) == str(
            uuid.uuid5(uuid.NAMESPACE_URL, "urn:acceleron:placement:resource-provider")
        )

    def test_uuids_differ_by_host_address_and_key(self) -> None:
        seen = {
            names.provider_uuid(host, address, key)
            for host in ("compute-1", "compute-2")
            for address in ("0000:5e:00.0", "0000:5f:00.0")
            for key in ("", "region0", "region1")
        }
        assert len(seen) == 12

    def test_separator_cannot_be_forged(self) -> None:
        with pytest.raises(InvalidPlacementName):
            names.provider_uuid("compute-1\n0000:5e:00.0", "region0")
        with pytest.raises(InvalidPlacementName, match="deployable key"):
            names.provider_name("compute-1", "0000:5e:00.0", "region 0")

    def test_long_names_are_cut_with_a_hash(self) -> None:
        host = "h" * 150 + ".example.org"
        first = names.provider_name(host, "0000:5e:00.0", "vgpu-type-" + "a" * 40)
        second = names.provider_name(host, "0000:5e:00.0", "vgpu-type-" + "b" * 40)
        assert len(first) == names.PROVIDER_NAME_MAX
        assert len(second) == names.PROVIDER_NAME_MAX
        assert first != second
        assert first == names.provider_name(host, "0000:5e:00.0", "vgpu-type-" + "a" * 40)


def test_maintenance_reasons_tolerations_and_traits() -> None:
    assert names.reason_name("Burn-In: new HBM") == "burn-in"
    assert names.tolerated("burn-in: new HBM", ["BURN-IN", "x"])
    assert not names.tolerated("reflash", ["burn-in"]) and not names.tolerated("", ["burn-in"])
    assert names.maintenance_traits("burn-in: x") == {
        "CUSTOM_ACCELERON_MAINTENANCE",
        "CUSTOM_ACCELERON_MAINTENANCE_BURN_IN",
    }
    assert names.maintenance_traits("why? it broke") == {"CUSTOM_ACCELERON_MAINTENANCE"}
    groups = [{"resources:FPGA": "1"}, {"resources:FPGA": "1", "accel:tolerations": "burn-in"}]
    assert names.untolerant(groups) == [
        {"resources:FPGA": "1", "trait:CUSTOM_ACCELERON_MAINTENANCE": "forbidden"},
        groups[1],
    ]


def test_the_family_trait_names_the_family_not_the_product() -> None:
    assert names.family_trait("FPGA", "INTEL", "PAC_ARRIA10") == "CUSTOM_FPGA_INTEL_ARRIA10"
    assert names.family_trait("fpga", "intel", "pac arria10") == "CUSTOM_FPGA_INTEL_ARRIA10"
    assert names.family_trait("FPGA", "INTEL", "PAC_D5005") == "CUSTOM_FPGA_INTEL_STRATIX10"
    assert names.family_trait("GPU", "NVIDIA", "H100") == "CUSTOM_GPU_NVIDIA_HOPPER"
    assert names.family_trait("FPGA", "XILINX", "U250") == "CUSTOM_FPGA_XILINX_ULTRASCALE_PLUS"
    assert names.family_trait("FPGA", "INTEL", "OFS") is None  # not in the table
    assert names.family_trait("FPGA", "Intel/Altera", "X") is None
    assert names.product_trait("FPGA", "INTEL", "PAC_ARRIA10") == "CUSTOM_FPGA_INTEL_PAC_ARRIA10"


def test_only_accelerator_classes_count_as_accelerators() -> None:
    """One helper says how many accelerators (requests) a group is: memory (in MB) and
    any other class travel with the group's allocation."""
    for accelerator in ("CUSTOM_ACCELERATOR_MIG", "CUSTOM_ACCELERATOR_QAT", "FPGA", "PGPU", "VGPU"):
        assert names.is_accelerator_class(accelerator)
    for other in (
        "CUSTOM_ACCELERATOR_MEMORY_HBM",
        "CUSTOM_ACCELERATOR_",
        "CUSTOM_A",
        "VCPU",
        "MEMORY_MB",
        "VGPU_DISPLAY_HEAD",
        "SRIOV_NET_VF",
    ):
        assert not names.is_accelerator_class(other)
    group = {
        "resources:CUSTOM_ACCELERATOR_MIG": "1",
        "resources:CUSTOM_ACCELERATOR_MEMORY_HBM": "100",
        "trait:CUSTOM_GPU_NVIDIA": "required",
        "resources:FPGA": "2",
        "accel:function_name": "gzip",
    }
    assert names.accelerators(group) == ["CUSTOM_ACCELERATOR_MIG", "FPGA", "FPGA"]
    assert names.accelerator_amounts(group) == {"CUSTOM_ACCELERATOR_MIG": 1, "FPGA": 2}
    assert names.accelerators({"resources:CUSTOM_ACCELERATOR_MEMORY_HBM": "20000"}) == []
