"""Placement's options for wide trees as the embedded Placement runs them (``[placement]
embedded_*``, issue 41), against the real Placement in-process: two hosts of 8 FPGA
cards, a provider per region (regions are not pooled: each may hold another function).

Nova asks for N regions as N numbered groups of one. In Placement's defaults the query
for 8 groups builds 8^8 combinations a host before it keeps those that fit (no answer in
300 s); with the cap of 100, breadth-first and the wide-tree workaround it answers with
candidates from both hosts."""

from __future__ import annotations

from acceleron.placement import names
from acceleron.placement.client import PlacementClient
from acceleron.placement.inprocess import Tuning
from acceleron.scheduler import query
from tests.functional.placement.tree import Region, add_compute_node, add_fpga

REGION_TYPE = "9e0a1b6c-8b8a-4b0f-9f37-6c2e1d0b7a11"
FPGA = names.accelerator_class("fpga")


def _fpga_host(client: PlacementClient, host: str) -> tuple[str, set[str]]:
    """A compute node with 8 cards of one region; its uuid and the regions'."""
    root = add_compute_node(client, host)
    regions = set()
    for card in range(8):
        made = add_fpga(
            client,
            root,
            host,
            f"0000:{card + 1:02x}:00.0",
            "intel",
            "PAC Arria10",
            [Region("region0", REGION_TYPE)],
        )
        regions.add(made["region0"])
    return root, regions


def test_eight_regions_as_eight_groups_come_from_every_host(client: PlacementClient) -> None:
    hosts = dict(_fpga_host(client, f"fpga-{n}") for n in range(2))
    groups = [{f"resources:{FPGA}": "1"} for _ in range(8)]
    found = client.get_allocation_candidates(query.profile_query(groups, limit=1000).params())

    assert len(found.requests) == Tuning().max_candidates  # the cap, not 2 x 8! of them
    used = [set(request.allocations) for request in found.requests]
    assert all(regions in used for regions in hosts.values())  # breadth-first: both hosts
    for request in found.requests:  # each candidate takes one host's 8 regions once each
        assert set(request.allocations) in hosts.values()
        assert all(amounts == {FPGA: 1} for amounts in request.allocations.values())


def test_the_options_come_from_the_placement_section() -> None:
    from acceleron import conf as confmod
    from acceleron.service.placement import embedded_tuning

    conf = confmod.load(
        [],
        config_files=[],
        overrides={
            "placement": {
                "embedded_max_candidates": -1,
                "embedded_candidate_strategy": "depth-first",
                "embedded_wide_trees": False,
            }
        },
    )
    assert embedded_tuning(conf) == Tuning(-1, "depth-first", False)
    assert embedded_tuning(confmod.load([], config_files=[])) == Tuning()
