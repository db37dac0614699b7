"""Device profile groups and spec 001 flavors -> Placement allocation candidate queries."""

from __future__ import annotations

from urllib.parse import parse_qsl

import pytest

from acceleron.exceptions import InvalidInput
from acceleron.scheduler import query
from acceleron.scheduler.query import RequestGroup

PORT = "b2f1c3d4-0000-4000-8000-000000000001"
GZIP = "CUSTOM_FPGA_FUNCTION_INTEL_F7DF405C_BD7B_4A1B_9A41_2D0A8E3B7C5E"


class TestProfileQuery:
    def test_nova_example_byte_for_byte(self) -> None:
        """The example recorded from Nova in docs/design/nova-contract.md."""
        groups = [
            {"resources:FPGA": "1", "trait:CUSTOM_FPGA_INTEL_PAC_ARRIA10": "required"},
            {"resources:CUSTOM_ACCELERATOR_FOO": "2", "trait:CUSTOM_BAR": "forbidden"},
        ]
        flavor = {"VCPU": 2, "MEMORY_MB": 512, "DISK_GB": 1}
        built = query.profile_query(groups, flavor_resources=flavor, limit=1000)
        assert built.querystring() == (
            "group_policy=none&limit=1000"
            "&requireddevice_profile_0=CUSTOM_FPGA_INTEL_PAC_ARRIA10"
            "&requireddevice_profile_1=%21CUSTOM_BAR"
            "&resources=DISK_GB%3A1%2CMEMORY_MB%3A512%2CVCPU%3A2"
            "&resourcesdevice_profile_0=FPGA%3A1"
            "&resourcesdevice_profile_1=CUSTOM_ACCELERATOR_FOO%3A2"
        )

    def test_one_group_has_no_group_policy(self) -> None:
        built = query.profile_query([{"resources:CUSTOM_ACCELERATOR_FPGA": "1"}])
        assert built.params() == [("resourcesdevice_profile_0", "CUSTOM_ACCELERATOR_FPGA:1")]
        assert built.group_policy is None

    def test_accel_and_unknown_keys_are_not_sent(self) -> None:
        group = {
            "resources:CUSTOM_ACCELERATOR_FPGA": "1",
            "accel:bitstream_id": "d5ae3fae-9c3a-4f55-b1e6-3a8e8f4b2a11",
            "accel:function_name": "gzip",
            "something:else": "x",
        }
        assert query.profile_query([group]).params() == [
            ("resourcesdevice_profile_0", "CUSTOM_ACCELERATOR_FPGA:1")
        ]

    def test_required_then_forbidden_each_sorted(self) -> None:
        group = {
            "resources:CUSTOM_ACCELERATOR_FPGA": "1",
            "trait:CUSTOM_Z": "required",
            "trait:CUSTOM_A": "required",
            "trait:CUSTOM_Y": "forbidden",
            "trait:CUSTOM_B": "forbidden",
        }
        params = dict(query.profile_query([group]).params())
        assert params["requireddevice_profile_0"] == "CUSTOM_A,CUSTOM_Z,!CUSTOM_B,!CUSTOM_Y"

    def test_several_classes_in_one_group(self) -> None:
        group = {"resources:CUSTOM_B": "2", "resources:CUSTOM_A": "1"}
        params = dict(query.profile_query([group]).params())
        assert params["resourcesdevice_profile_0"] == "CUSTOM_A:1,CUSTOM_B:2"

    def test_key_suffix_is_ignored_as_in_nova(self) -> None:
        group = {"resources1:CUSTOM_A": "1", "trait2:CUSTOM_T": "required"}
        params = dict(query.profile_query([group]).params())
        assert params == {
            "resourcesdevice_profile_0": "CUSTOM_A:1",
            "requireddevice_profile_0": "CUSTOM_T",
        }

    def test_zero_amounts_are_dropped(self) -> None:
        group = {"resources:CUSTOM_A": "1", "resources:CUSTOM_B": "0"}
        assert dict(query.profile_query([group]).params()) == {
            "resourcesdevice_profile_0": "CUSTOM_A:1"
        }

    def test_port_owner_goes_into_the_suffix(self) -> None:
        built = query.profile_query([{"resources:CUSTOM_A": "1"}], owner=PORT)
        assert built.groups[0].suffix == f"device_profile_0{PORT}"
        assert built.params() == [(f"resourcesdevice_profile_0{PORT}", "CUSTOM_A:1")]

    def test_three_groups_keep_their_index(self) -> None:
        groups = [{f"resources:CUSTOM_{c}": "1"} for c in "ABC"]
        built = query.profile_query(groups)
        assert [g.suffix for g in built.groups] == [
            "device_profile_0",
            "device_profile_1",
            "device_profile_2",
        ]
        assert dict(built.params())["group_policy"] == "none"

    @pytest.mark.parametrize(
        ("group", "message"),
        [
            ({"trait:CUSTOM_T": "required"}, "no resource"),
            ({"resources:CUSTOM_A": "0"}, "no resource"),
            ({"resources:CUSTOM_A": "x"}, "non-negative integer"),
            ({"resources:CUSTOM_A": "-1"}, "non-negative integer"),
            ({"resources:CUSTOM_A": "1", "trait:CUSTOM_T": "preferred"}, "required"),
        ],
    )
    def test_bad_groups(self, group: dict[str, str], message: str) -> None:
        with pytest.raises(InvalidInput, match=message):
            query.profile_query([group])

    def test_trait_values_are_case_insensitive(self) -> None:
        group = {"resources:CUSTOM_A": "1", "trait:CUSTOM_T": "Required"}
        assert dict(query.profile_query([group]).params())["requireddevice_profile_0"] == "CUSTOM_T"


class TestBuildQuery:
    def test_explicit_policy_wins(self) -> None:
        groups = [RequestGroup("1", {"CUSTOM_A": 1}), RequestGroup("2", {"CUSTOM_B": 1})]
        built = query.build_query(groups, group_policy="isolate")
        assert dict(built.params())["group_policy"] == "isolate"

    def test_repeated_suffix(self) -> None:
        groups = [RequestGroup("1", {"CUSTOM_A": 1}), RequestGroup("1", {"CUSTOM_B": 1})]
        with pytest.raises(InvalidInput, match="repeat"):
            query.build_query(groups)

    @pytest.mark.parametrize("policy", ["all", "NONE", ""])
    def test_bad_policy(self, policy: str) -> None:
        with pytest.raises(InvalidInput, match="group_policy"):
            query.build_query([RequestGroup("1", {"CUSTOM_A": 1})], group_policy=policy)

    def test_bad_limit(self) -> None:
        with pytest.raises(InvalidInput, match="limit"):
            query.build_query([RequestGroup("1", {"CUSTOM_A": 1})], limit=0)

    def test_querystring_round_trips(self) -> None:
        built = query.profile_query(
            [{"resources:CUSTOM_A": "1", "trait:CUSTOM_T": "forbidden"}], limit=5
        )
        assert parse_qsl(built.querystring()) == built.params()


class TestFlavor:
    def test_device_as_a_service(self) -> None:
        request = query.groups_from_flavor(
            {
                "resources:CUSTOM_ACCELERATOR_FPGA": "1",
                "trait:CUSTOM_FPGA_INTEL_ARRIA10": "required",
                "trait:CUSTOM_PROGRAMMABLE": "required",
            }
        )
        assert request.groups == [
            {
                "resources:CUSTOM_ACCELERATOR_FPGA": "1",
                "trait:CUSTOM_FPGA_INTEL_ARRIA10": "required",
                "trait:CUSTOM_PROGRAMMABLE": "required",
            }
        ]
        assert request.flavor_resources == {}
        assert request.query().params() == [
            ("requireddevice_profile_0", "CUSTOM_FPGA_INTEL_ARRIA10,CUSTOM_PROGRAMMABLE"),
            ("resourcesdevice_profile_0", "CUSTOM_ACCELERATOR_FPGA:1"),
        ]

    def test_orchestration_programmed_function_is_not_sent(self) -> None:
        request = query.groups_from_flavor(
            {
                "resources:CUSTOM_ACCELERATOR_FPGA": "1",
                "trait:CUSTOM_FPGA_INTEL_REGION_ABC": "required",
                "trait:CUSTOM_PROGRAMMABLE": "required",
                f"function:{GZIP}": "required",
            }
        )
        group = request.groups[0]
        assert group["accel:function_trait"] == GZIP
        assert group["accel:function_id"] == "f7df405c-bd7b-4a1b-9a41-2d0a8e3b7c5e"
        assert dict(request.query().params())["requireddevice_profile_0"] == (
            "CUSTOM_FPGA_INTEL_REGION_ABC,CUSTOM_PROGRAMMABLE"
        )

    @pytest.mark.parametrize(
        "trait",
        [
            "CUSTOM_FPGA_FUNCTION_INTEL_F7DF405CBD7B4A1B9A412D0A8E3B7C5E",
            "CUSTOM_FPGA_FUNCTION_ID_INTEL_f7df405cbd7b4a1b9a412d0a8e3b7c5e",
        ],
    )
    def test_function_id_from_a_trait_with_the_id_as_published(self, trait: str) -> None:
        request = query.groups_from_flavor(
            {"resources:CUSTOM_ACCELERATOR_FPGA": "1", f"function:{trait}": "required"}
        )
        assert request.groups[0]["accel:function_id"] == "f7df405c-bd7b-4a1b-9a41-2d0a8e3b7c5e"

    @pytest.mark.parametrize(
        "trait",
        [
            "CUSTOM_FN_F7DF405CBD7B4A1B9A412D0A8E3B7C5E00",  # 34 hex digits
            "CUSTOM_FN_F7DF405C_BD7B4A1B_9A41_2D0A8E3B7C5E",  # groups mixed
        ],
    )
    def test_no_function_id_from_a_tail_that_is_no_uuid(self, trait: str) -> None:
        request = query.groups_from_flavor(
            {"resources:CUSTOM_ACCELERATOR_FPGA": "1", f"function:{trait}": "required"}
        )
        assert "accel:function_id" not in request.groups[0]

    def test_function_without_uuid_keeps_only_the_trait(self) -> None:
        request = query.groups_from_flavor(
            {"resources:CUSTOM_ACCELERATOR_FPGA": "1", "function:CUSTOM_FN_GZIP": "required"}
        )
        assert request.groups[0]["accel:function_trait"] == "CUSTOM_FN_GZIP"
        assert "accel:function_id" not in request.groups[0]

    def test_function_name_and_bitstream(self) -> None:
        bitstream = "d5ae3fae-9c3a-4f55-b1e6-3a8e8f4b2a11"
        request = query.groups_from_flavor(
            {
                "resources1:CUSTOM_ACCELERATOR_FPGA": "1",
                "function_name1:gzip": "required",
                "resources2:CUSTOM_ACCELERATOR_FPGA": "1",
                f"bitstream2:{bitstream}": "required",
                "resources3:CUSTOM_ACCELERATOR_FPGA": "1",
                "bitstream3": bitstream,
            }
        )
        assert request.groups[0]["accel:function_name"] == "gzip"
        assert request.groups[1]["accel:bitstream_id"] == bitstream
        assert request.groups[2]["accel:bitstream_id"] == bitstream

    def test_granular_groups_in_numeric_order(self) -> None:
        request = query.groups_from_flavor(
            {
                "resources10:CUSTOM_ACCELERATOR_GPU": "1",
                "resources2:CUSTOM_ACCELERATOR_FPGA": "1",
                "traits2:CUSTOM_FPGA_INTEL_ARRIA10": "required",
                "others2": f"function:{GZIP}=required",
                "resources_net:CUSTOM_ACCELERATOR_NIC": "1",
                "trait10:CUSTOM_GPU_NVIDIA": "forbidden",
            }
        )
        assert request.groups == [
            {
                "resources:CUSTOM_ACCELERATOR_FPGA": "1",
                "trait:CUSTOM_FPGA_INTEL_ARRIA10": "required",
                "accel:function_trait": GZIP,
                "accel:function_id": "f7df405c-bd7b-4a1b-9a41-2d0a8e3b7c5e",
            },
            {"resources:CUSTOM_ACCELERATOR_GPU": "1", "trait:CUSTOM_GPU_NVIDIA": "forbidden"},
            {"resources:CUSTOM_ACCELERATOR_NIC": "1"},
        ]
        params = dict(request.query().params())
        assert params["group_policy"] == "none"
        assert params["requireddevice_profile_1"] == "!CUSTOM_GPU_NVIDIA"

    def test_others_as_a_single_key(self) -> None:
        request = query.groups_from_flavor(
            {"resources1:CUSTOM_ACCELERATOR_FPGA": "1", f"others1:function:{GZIP}": "required"}
        )
        assert request.groups[0]["accel:function_trait"] == GZIP

    def test_compute_resources_and_other_keys_stay_with_the_flavor(self) -> None:
        request = query.groups_from_flavor(
            {
                "resources:VCPU": "2",
                "resources:MEMORY_MB": "0",
                "resources:CUSTOM_ACCELERATOR_QAT": "4",
                "hw:cpu_policy": "dedicated",
                "accel:device_profile": "dp1",
                "group_policy": "isolate",
            }
        )
        assert request.groups == [{"resources:CUSTOM_ACCELERATOR_QAT": "4"}]
        assert request.flavor_resources == {"VCPU": 2, "MEMORY_MB": 0}
        params = dict(request.query(limit=3).params())
        assert params == {
            "group_policy": "isolate",
            "limit": "3",
            "resources": "VCPU:2",
            "resourcesdevice_profile_0": "CUSTOM_ACCELERATOR_QAT:4",
        }

    def test_host_traits_alone_make_no_group(self) -> None:
        request = query.groups_from_flavor(
            {"resources:VCPU": "2", "trait:HW_CPU_X86_AVX2": "required"}
        )
        assert request.groups == []

    def test_standard_accelerator_classes_form_a_group(self) -> None:
        request = query.groups_from_flavor({"resources:VGPU": "1"})
        assert request.groups == [{"resources:VGPU": "1"}]

    @pytest.mark.parametrize(
        ("specs", "message"),
        [
            ({"resources1:CUSTOM_A": "1", "function1:CUSTOM_F": "preferred"}, "required"),
            ({"resources1:CUSTOM_A": "1", "others1": "garbage"}, "expected"),
            ({"resources:VCPU": "many"}, "non-negative integer"),
        ],
    )
    def test_bad_flavors(self, specs: dict[str, str], message: str) -> None:
        with pytest.raises(InvalidInput, match=message):
            query.groups_from_flavor(specs)
