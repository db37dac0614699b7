"""An 8-GPU host through Nova (docs/placement.md, "Multi-accelerator requests").

compute-2 of the reference cloud is an HGX-like host: 8 whole H200, GPUs 0-3 on NUMA
node 0 and 4-7 on node 1 (cloud/templates/inventory-compute-2.yaml). Acceleron
publishes them as one pooled provider and picks the GPUs at bind. Servers with 1, 2, 4
and 8 GPUs, asked as N groups of one and as one group of N, boot through real Nova; each
server's GPUs share a NUMA node wherever one has room, and a partly used node is filled
first so that whole nodes stay free for large requests; a profile can also require it
(``accel:affinity``).
"""

from __future__ import annotations

from typing import Any

from tests.fixtures.e2e import (
    LATEST,
    Flavors,
    active,
    arqs,
    boot,
    check_bound,
    check_gone,
    delete_and_wait,
)

HOST = "compute-2"
H200 = {"resources:CUSTOM_ACCELERATOR_GPU": "1", "trait:CUSTOM_GPU_NVIDIA_H200": "required"}


def groups_of_one(count: int) -> list[dict[str, str]]:
    return [dict(H200) for _ in range(count)]


def one_group_of(count: int) -> list[dict[str, str]]:
    return [{**H200, "resources:CUSTOM_ACCELERATOR_GPU": str(count)}]


def address(arq: dict[str, Any]) -> str:
    info = arq["attach_handle_info"]
    return f"{info['domain']}:{info['bus']}:{info['device']}.{info['function']}"


def gpus_of(admin: Any, server: Any) -> list[dict[str, Any]]:
    """The H200s (device records, with their NUMA node) the server's requests hold."""
    response = admin.accelerator.get("/devices", headers=LATEST, params={"hostname": HOST})
    by_address = {d["pci_address"]: d for d in response.json()["devices"]}
    held = [by_address[address(arq)] for arq in arqs(admin, server.id)]
    assert len({d["uuid"] for d in held}) == len(held), held  # no GPU twice
    assert {d["model"] for d in held} == {"H200"}, held
    return held


def numa_nodes(admin: Any, server: Any) -> list[int]:
    return sorted(d["numa_node"] for d in gpus_of(admin, server))


def boot_on_host(admin: Any, flavor: str, image: str, count: int) -> Any:
    """A server asking for ``count`` H200s: ACTIVE on compute-2, its requests bound."""
    server = active(admin, boot(flavor, image)["id"])
    assert server.compute_host == HOST, f"{count} GPU(s): {server.compute_host}"
    return server


def test_one_two_and_four_gpus_are_packed_on_one_numa_node(
    admin: Any, flavors: Flavors, image: str
) -> None:
    one = boot_on_host(admin, flavors.make(groups_of_one(1)), image, 1)
    check_bound(admin, one, groups=1)
    (node,) = numa_nodes(admin, one)
    # Two groups of one: the node already in use has three free, and is filled first.
    two = boot_on_host(admin, flavors.make(groups_of_one(2)), image, 2)
    check_bound(admin, two, groups=2)
    assert numa_nodes(admin, two) == [node, node]
    # One group of four: only the other node has four free together.
    four = boot_on_host(admin, flavors.make(one_group_of(4)), image, 4)
    check_bound(admin, four, groups=1, per_group=4)
    assert numa_nodes(admin, four) == [1 - node] * 4
    delete_and_wait(admin, one.id, two.id, four.id)
    check_gone(admin, one.id, two.id, four.id)


def test_eight_gpus_as_eight_groups_and_as_one_group(
    admin: Any, flavors: Flavors, image: str
) -> None:
    for flavor, shape in (
        (flavors.make(groups_of_one(8)), (8, 1)),
        (flavors.make(one_group_of(8)), (1, 8)),
    ):
        server = boot_on_host(admin, flavor, image, 8)
        check_bound(admin, server, groups=shape[0], per_group=shape[1])
        assert numa_nodes(admin, server) == [0] * 4 + [1] * 4
        delete_and_wait(admin, server.id)
        check_gone(admin, server.id)


def test_two_four_gpu_servers_each_take_a_whole_numa_node(
    admin: Any, flavors: Flavors, image: str
) -> None:
    first = boot_on_host(admin, flavors.make(groups_of_one(4)), image, 4)
    # The second asks for one NUMA node outright (accel:affinity, passed through by Nova).
    together = [{**group, "accel:affinity": "numa"} for group in groups_of_one(4)]
    second = boot_on_host(admin, flavors.make(together), image, 4)
    check_bound(admin, first, groups=4)
    check_bound(admin, second, groups=4)
    nodes = [numa_nodes(admin, s) for s in (first, second)]
    assert sorted(nodes) == [[0] * 4, [1] * 4], nodes
    delete_and_wait(admin, first.id, second.id)
    check_gone(admin, first.id, second.id)
