"""Spec 001's flavors, turned into queries by scheduler/query.py, against the real Placement.

Two hosts:

* cn1: an Intel PAC Arria10 with region0 (region type A, programmed with gzip,
  functionality COMPUTE) and region1 (type A, blank); an NVIDIA T4 with two vGPU
  types; a QAT card whose 16 VFs form one pool.
* cn2: an Intel PAC Arria10 with one region of type B; a Xilinx card with one region
  pre-programmed with gzip and not programmable (fixed function).

Each test checks the exact providers Placement maps to each request group.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pytest

from acceleron.placement import names
from acceleron.placement.client import PlacementClient
from acceleron.placement.names import TraitForm
from acceleron.scheduler import query
from acceleron.scheduler.query import CandidateQuery
from tests.functional.placement.tree import (
    Region,
    add_compute_node,
    add_fpga,
    add_gpu,
    add_qat,
)

REGION_A = "9e0a1b6c-8b8a-4b0f-9f37-6c2e1d0b7a11"
REGION_B = "1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
REGION_X = "77777777-1111-4222-8333-444444444444"
GZIP = "f7df405c-bd7b-4a1b-9a41-2d0a8e3b7c5e"
INTEL_ARRIA10 = names.product_trait("fpga", "intel", "PAC Arria10")
FPGA = names.accelerator_class("fpga")


@dataclass(frozen=True)
class Cloud:
    cn1: str
    cn2: str
    cn1_fpga: Mapping[str, str]
    cn1_gpu: Mapping[str, str]
    cn1_qat: Mapping[str, str]
    cn2_fpga: Mapping[str, str]
    cn2_xilinx: Mapping[str, str]


@pytest.fixture
def cloud(client: PlacementClient) -> Cloud:
    cn1, cn2 = add_compute_node(client, "cn1"), add_compute_node(client, "cn2")
    intel = ("intel", "PAC Arria10")
    return Cloud(
        cn1=cn1,
        cn2=cn2,
        cn1_fpga=add_fpga(
            client,
            cn1,
            "cn1",
            "0000:5e:00.0",
            *intel,
            [
                Region("region0", REGION_A, function=GZIP, functionality="compute"),
                Region("region1", REGION_A),
            ],
        ),
        cn1_gpu=add_gpu(
            client, cn1, "cn1", "0000:3b:00.0", "nvidia", "T4", {"T4-2B": 4, "T4-8Q": 2}
        ),
        cn1_qat=add_qat(client, cn1, "cn1", "0000:b1:00.0", "C62x", 16),
        cn2_fpga=add_fpga(
            client, cn2, "cn2", "0000:5e:00.0", *intel, [Region("region0", REGION_B)]
        ),
        cn2_xilinx=add_fpga(
            client,
            cn2,
            "cn2",
            "0000:af:00.0",
            "xilinx",
            "U250",
            [Region("region0", REGION_X, function=GZIP, programmable=False)],
        ),
    )


def mapped(client: PlacementClient, built: CandidateQuery) -> set[tuple[str, ...]]:
    """Each candidate as the providers of its groups, in group order (Placement 1.34 mappings)."""
    found = client.get_allocation_candidates(built.params())
    suffixes = [g.suffix for g in built.groups]
    result = set()
    for request in found.requests:
        assert all(len(request.mappings[s]) == 1 for s in suffixes)
        result.add(tuple(request.mappings[s][0] for s in suffixes))
    return result


def flavor(specs: Mapping[str, str]) -> CandidateQuery:
    return query.groups_from_flavor(specs).query()


class TestDeviceAsAService:
    def test_any_intel_arria10_region(self, client: PlacementClient, cloud: Cloud) -> None:
        built = flavor(
            {
                f"resources:{FPGA}": "1",
                f"trait:{INTEL_ARRIA10}": "required",
                f"trait:{names.PROGRAMMABLE}": "required",
            }
        )
        assert mapped(client, built) == {
            (cloud.cn1_fpga["region0"],),
            (cloud.cn1_fpga["region1"],),
            (cloud.cn2_fpga["region0"],),
        }

    @pytest.mark.parametrize("form", [TraitForm.SPEC_001, TraitForm.SPEC_004])
    def test_by_region_type_in_either_spelling(
        self, client: PlacementClient, cloud: Cloud, form: TraitForm
    ) -> None:
        region_trait = names.region_type_trait("fpga", "intel", REGION_A, form=form)
        built = flavor(
            {
                f"resources:{FPGA}": "1",
                f"trait:{region_trait}": "required",
                f"trait:{names.PROGRAMMABLE}": "required",
            }
        )
        assert mapped(client, built) == {
            (cloud.cn1_fpga["region0"],),
            (cloud.cn1_fpga["region1"],),
        }

    def test_forbidden_functionality(self, client: PlacementClient, cloud: Cloud) -> None:
        built = flavor(
            {
                f"resources:{FPGA}": "1",
                f"trait:{INTEL_ARRIA10}": "required",
                f"trait:{names.functionality_trait('fpga', 'compute')}": "forbidden",
            }
        )
        assert mapped(client, built) == {
            (cloud.cn1_fpga["region1"],),
            (cloud.cn2_fpga["region0"],),
        }

    def test_a_device_without_inventory_is_never_a_candidate(
        self, client: PlacementClient, cloud: Cloud
    ) -> None:
        built = flavor({f"resources:{FPGA}": "1"})
        providers = {rps[0] for rps in mapped(client, built)}
        assert cloud.cn1_fpga[""] not in providers
        assert len(providers) == 4  # every region, Intel and Xilinx


class TestAcceleratedFunctionAsAService:
    def test_pre_programmed_needs_the_function_trait(
        self, client: PlacementClient, cloud: Cloud
    ) -> None:
        function = names.function_trait("fpga", "intel", GZIP, form=TraitForm.SPEC_001)
        built = flavor({f"resources:{FPGA}": "1", f"trait:{function}": "required"})
        assert mapped(client, built) == {(cloud.cn1_fpga["region0"],)}

    def test_pre_programmed_fixed_function_hardware(
        self, client: PlacementClient, cloud: Cloud
    ) -> None:
        function = names.function_trait("fpga", "xilinx", GZIP)
        built = flavor(
            {
                f"resources:{FPGA}": "1",
                f"trait:{function}": "required",
                f"trait:{names.PROGRAMMABLE}": "forbidden",
            }
        )
        assert mapped(client, built) == {(cloud.cn2_xilinx["region0"],)}

    def test_orchestration_programmed_does_not_require_the_function(
        self, client: PlacementClient, cloud: Cloud
    ) -> None:
        function = names.function_trait("fpga", "intel", GZIP, form=TraitForm.SPEC_001)
        region_trait = names.region_type_trait("fpga", "intel", REGION_A)
        request = query.groups_from_flavor(
            {
                f"resources:{FPGA}": "1",
                f"trait:{region_trait}": "required",
                f"trait:{names.PROGRAMMABLE}": "required",
                f"function:{function}": "required",
            }
        )
        assert request.groups[0]["accel:function_trait"] == function
        built = request.query()
        assert mapped(client, built) == {
            (cloud.cn1_fpga["region0"],),
            (cloud.cn1_fpga["region1"],),
        }
        # What a weigher needs: the summaries tell which candidate already has the function.
        found = client.get_allocation_candidates(built.params())
        programmed = {rp for rp, s in found.summaries.items() if function in s.traits}
        assert programmed == {cloud.cn1_fpga["region0"]}

    def test_function_name_is_for_acceleron_only(
        self, client: PlacementClient, cloud: Cloud
    ) -> None:
        region_trait = names.region_type_trait("fpga", "intel", REGION_B, form=TraitForm.SPEC_001)
        request = query.groups_from_flavor(
            {
                f"resources:{FPGA}": "1",
                f"trait:{region_trait}": "required",
                f"trait:{names.PROGRAMMABLE}": "required",
                "function_name:gzip": "required",
            }
        )
        assert request.groups[0]["accel:function_name"] == "gzip"
        assert mapped(client, request.query()) == {(cloud.cn2_fpga["region0"],)}


class TestSeveralGroups:
    def test_fpga_region_and_vgpu_with_group_policy_none(
        self, client: PlacementClient, cloud: Cloud
    ) -> None:
        vgpu_type = names.product_trait("vgpu", "nvidia", "T4-2B")
        built = flavor(
            {
                f"resources1:{FPGA}": "1",
                f"trait1:{INTEL_ARRIA10}": "required",
                f"trait1:{names.PROGRAMMABLE}": "required",
                f"resources2:{names.accelerator_class('vgpu')}": "2",
                f"trait2:{vgpu_type}": "required",
            }
        )
        assert dict(built.params())["group_policy"] == "none"
        vgpu = cloud.cn1_gpu["T4-2B"]
        assert mapped(client, built) == {
            (cloud.cn1_fpga["region0"], vgpu),
            (cloud.cn1_fpga["region1"], vgpu),
        }

    def test_two_regions_of_one_device(self, client: PlacementClient, cloud: Cloud) -> None:
        group = {f"resources:{FPGA}": "1", f"trait:{INTEL_ARRIA10}": "required"}
        built = query.profile_query([group, group])
        r0, r1 = cloud.cn1_fpga["region0"], cloud.cn1_fpga["region1"]
        assert mapped(client, built) == {(r0, r1), (r1, r0)}

    def test_device_profile_with_flavor_resources(
        self, client: PlacementClient, cloud: Cloud
    ) -> None:
        groups = [
            {
                f"resources:{FPGA}": "1",
                f"trait:{names.region_type_trait('fpga', 'intel', REGION_A)}": "required",
                "accel:bitstream_id": "d5ae3fae-9c3a-4f55-b1e6-3a8e8f4b2a11",
            },
            {f"resources:{names.accelerator_class('qat')}": "4"},
        ]
        built = query.profile_query(groups, flavor_resources={"VCPU": 2}, limit=10)
        found = client.get_allocation_candidates(built.params())
        assert len(found.requests) == 2
        for request in found.requests:
            assert request.mappings[""] == (cloud.cn1,)
            assert request.mappings["device_profile_0"][0] in {
                cloud.cn1_fpga["region0"],
                cloud.cn1_fpga["region1"],
            }
            assert request.mappings["device_profile_1"] == (cloud.cn1_qat["vf_pool"],)
            assert request.allocations[cloud.cn1] == {"VCPU": 2}


class TestPools:
    def test_qat_vfs_from_the_pool(self, client: PlacementClient, cloud: Cloud) -> None:
        built = flavor(
            {
                f"resources:{names.accelerator_class('qat')}": "4",
                f"trait:{names.product_trait('qat', 'intel', 'C62x')}": "required",
            }
        )
        assert mapped(client, built) == {(cloud.cn1_qat["vf_pool"],)}

    def test_more_vfs_than_the_pool_has(self, client: PlacementClient, cloud: Cloud) -> None:
        built = flavor({f"resources:{names.accelerator_class('qat')}": "17"})
        assert mapped(client, built) == set()

    def test_vgpu_type_capacity(self, client: PlacementClient, cloud: Cloud) -> None:
        built = flavor({f"resources:{names.accelerator_class('vgpu')}": "3"})
        assert mapped(client, built) == {(cloud.cn1_gpu["T4-2B"],)}
