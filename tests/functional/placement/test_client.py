"""The Placement client against the real Placement: calls, generations, errors."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from keystoneauth1 import adapter, session, token_endpoint

from acceleron.exceptions import (
    PlacementError,
    PlacementGenerationConflict,
    PlacementProviderExists,
    PlacementProviderInUse,
    PlacementProviderNotFound,
    PlacementUnavailable,
)
from acceleron.placement import inprocess, names
from acceleron.placement.client import Inventory, PlacementClient
from tests.fixtures.placement import CountingAdapter, Meddler
from tests.functional.placement.tree import Region, add_compute_node, add_fpga, region_traits

MV = {"microversion": "1.39", "raise_exc": False}
REGION_A = "9e0a1b6c-8b8a-4b0f-9f37-6c2e1d0b7a11"
GZIP = "f7df405c-bd7b-4a1b-9a41-2d0a8e3b7c5e"
FPGA = names.accelerator_class("fpga")
TWO_REGIONS = [Region("region0", REGION_A, function=GZIP), Region("region1", REGION_A)]


def new_uuid() -> str:
    return str(uuid.uuid4())


def add_fpga_with_two_regions(client: PlacementClient, root: str, host: str) -> dict[str, str]:
    return add_fpga(client, root, host, "0000:5e:00.0", "intel", "PAC Arria10", TWO_REGIONS)


def add_foreign_trait(trait: str) -> Callable[[adapter.Adapter, str], None]:
    """Another writer adds ``trait`` to the provider, or takes it away if it is there.

    Either way the provider's generation changes (Placement leaves it alone when a
    write changes nothing).
    """

    def meddle(raw: adapter.Adapter, rp: str) -> None:
        assert raw.put(f"/traits/{trait}", **MV).status_code in (201, 204)
        current = raw.get(f"/resource_providers/{rp}/traits", **MV).json()
        body = {
            "resource_provider_generation": current["resource_provider_generation"],
            "traits": sorted(set(current["traits"]) ^ {trait}),
        }
        assert raw.put(f"/resource_providers/{rp}/traits", json=body, **MV).status_code == 200

    return meddle


def traits_of(raw: adapter.Adapter, rp: str) -> set[str]:
    return set(raw.get(f"/resource_providers/{rp}/traits", **MV).json()["traits"])


def trait_exists(raw: adapter.Adapter, trait: str) -> bool:
    return bool(raw.get(f"/traits/{trait}", **MV).status_code == 204)


class TestCallCounts:
    def test_new_device_with_two_regions(
        self, client: PlacementClient, counted: CountingAdapter
    ) -> None:
        root = add_compute_node(client, "cn1")
        counted.reset()
        add_fpga_with_two_regions(client, root, "cn1")
        routes = counted.by_route()
        provider_calls = (
            routes["POST /resource_providers"]
            + routes["PUT /resource_providers/{uuid}/inventories"]
            + routes["PUT /resource_providers/{uuid}/traits"]
        )
        assert routes["POST /resource_providers"] == 3
        assert provider_calls == 8  # device: POST + traits; each region: POST + inventory + traits
        assert provider_calls <= 3 * 3
        # First use of each custom name: a look-up, then one PUT per missing name.
        # (13: every UUID-bearing trait in both spellings, spec 004's and 32 hex digits).
        assert routes["PUT /traits/{name}"] == 13
        assert routes["PUT /resource_classes/{name}"] == 1
        assert routes["GET /traits"] <= 2
        assert not [c for c in counted.calls if c.method == "DELETE"]

    def test_names_are_ensured_once_per_client(
        self, client: PlacementClient, counted: CountingAdapter
    ) -> None:
        add_fpga_with_two_regions(client, add_compute_node(client, "cn1"), "cn1")
        root = add_compute_node(client, "cn2")
        counted.reset()
        add_fpga_with_two_regions(client, root, "cn2")
        assert len(counted.calls) == 8  # nothing but the three providers' own calls

    def test_a_new_client_finds_existing_traits_in_one_call(
        self, placement: adapter.Adapter, client: PlacementClient
    ) -> None:
        region = TWO_REGIONS[0]
        client.ensure_traits(region_traits("intel", "PAC Arria10", region))
        fresh = CountingAdapter(placement)
        PlacementClient(fresh).ensure_traits(region_traits("intel", "PAC Arria10", region))
        assert [c.route for c in fresh.calls] == ["GET /traits"]

    def test_tree_read_is_one_call_and_generations_match_the_writes(
        self, client: PlacementClient, counted: CountingAdapter
    ) -> None:
        root = add_compute_node(client, "cn1")
        made = add_fpga_with_two_regions(client, root, "cn1")
        written = {rp: client.generation(rp) for rp in [root, *made.values()]}
        counted.reset()
        tree = PlacementClient(counted).get_tree(root)
        assert len(counted.calls) == 1
        assert {rp.uuid: rp.generation for rp in tree} == written
        assert not counted.writes  # a sync that sees equal generations writes nothing

    def test_writes_with_a_known_generation_need_no_read(
        self, client: PlacementClient, counted: CountingAdapter
    ) -> None:
        rp = client.create_provider(new_uuid(), "rp").uuid
        counted.reset()
        client.set_inventories(rp, {FPGA: Inventory(2)})
        client.set_traits(rp, [names.PROGRAMMABLE])
        client.set_traits(rp, [names.PROGRAMMABLE, "HW_CPU_X86_AVX2"])
        routes = [c.route for c in counted.calls]
        assert routes == [
            "PUT /resource_classes/{name}",
            "PUT /resource_providers/{uuid}/inventories",
            "PUT /traits/{name}",
            "PUT /resource_providers/{uuid}/traits",
            "PUT /resource_providers/{uuid}/traits",
        ]


class TestGenerations:
    def test_conflict_is_retried_after_rereading(self, placement: adapter.Adapter) -> None:
        counted = CountingAdapter(
            Meddler(placement, "/inventories", add_foreign_trait("CUSTOM_OTHER"))
        )
        client = PlacementClient(counted)
        rp = client.create_provider(new_uuid(), "rp").uuid
        client.ensure_resource_classes([FPGA])
        counted.reset()
        generation = client.set_inventories(rp, {FPGA: Inventory(4, max_unit=2)})
        assert [c.route for c in counted.calls] == [
            "PUT /resource_providers/{uuid}/inventories",  # 409: changed meanwhile
            "GET /resource_providers/{uuid}",
            "PUT /resource_providers/{uuid}/inventories",
        ]
        got_generation, inventories = client.get_inventories(rp)
        assert got_generation == generation == 2
        assert inventories == {FPGA: Inventory(4, max_unit=2)}
        assert traits_of(placement, rp) == {"CUSTOM_OTHER"}

    def test_set_traits_conflict_keeps_our_desired_set(self, placement: adapter.Adapter) -> None:
        client = PlacementClient(Meddler(placement, "/traits", add_foreign_trait("CUSTOM_OTHER")))
        rp = client.create_provider(new_uuid(), "rp").uuid
        client.ensure_traits(["CUSTOM_OURS"])
        client.set_traits(rp, ["CUSTOM_OURS"])
        assert traits_of(placement, rp) == {"CUSTOM_OURS"}  # the provider is ours

    def test_update_traits_merges_with_a_concurrent_writer(
        self, placement: adapter.Adapter
    ) -> None:
        client = PlacementClient(Meddler(placement, "/traits", add_foreign_trait("CUSTOM_NOVA")))
        root = client.create_provider(new_uuid(), "cn1").uuid
        client.ensure_traits(["CUSTOM_OURS", "CUSTOM_NOVA"])
        client.update_traits(root, add=["CUSTOM_OURS"])
        assert traits_of(placement, root) == {"CUSTOM_OURS", "CUSTOM_NOVA"}
        client.update_traits(root, remove=["CUSTOM_OURS"])
        assert traits_of(placement, root) == {"CUSTOM_NOVA"}

    def test_update_inventories_merges_with_a_concurrent_writer(
        self, placement: adapter.Adapter
    ) -> None:
        def nova_grows_vcpu(raw: adapter.Adapter, rp: str) -> None:
            nova = PlacementClient(raw)
            generation, current = nova.get_inventories(rp)
            nova.set_inventories(rp, {**current, "VCPU": Inventory(32)}, generation=generation)

        nova = PlacementClient(placement)
        root = nova.create_provider(new_uuid(), "cn1").uuid
        nova.set_inventories(root, {"VCPU": Inventory(16)})
        counted = CountingAdapter(Meddler(placement, "/inventories", nova_grows_vcpu))
        client = PlacementClient(counted)
        client.ensure_resource_classes([FPGA])
        counted.reset()
        client.update_inventories(root, lambda current: {**current, FPGA: Inventory(2)})
        assert [c.route for c in counted.calls] == [
            "GET /resource_providers/{uuid}/inventories",
            "PUT /resource_providers/{uuid}/inventories",  # 409: Nova wrote meanwhile
            "GET /resource_providers/{uuid}/inventories",
            "PUT /resource_providers/{uuid}/inventories",
        ]
        assert client.get_inventories(root)[1] == {"VCPU": Inventory(32), FPGA: Inventory(2)}

    def test_update_traits_without_change_writes_nothing(
        self, client: PlacementClient, counted: CountingAdapter
    ) -> None:
        rp = client.create_provider(new_uuid(), "rp").uuid
        client.set_traits(rp, ["CUSTOM_A"])
        counted.reset()
        client.update_traits(rp, add=["CUSTOM_A"], remove=["CUSTOM_B"])
        assert not counted.writes

    def test_gives_up_when_the_provider_keeps_changing(self, placement: adapter.Adapter) -> None:
        meddler = Meddler(placement, "/traits", add_foreign_trait("CUSTOM_OTHER"), times=99)
        client = PlacementClient(meddler, max_attempts=3)
        rp = client.create_provider(new_uuid(), "rp").uuid
        client.ensure_traits(["CUSTOM_OURS"])
        with pytest.raises(PlacementGenerationConflict, match="kept changing") as caught:
            client.set_traits(rp, ["CUSTOM_OURS"])
        assert caught.value.code == "placement.concurrent_update"
        assert meddler.times == 96
        assert client.generation(rp) is None  # forgotten: the next write reads it again

    def test_stale_explicit_generation_is_retried(self, client: PlacementClient) -> None:
        rp = client.create_provider(new_uuid(), "rp").uuid
        client.set_traits(rp, ["CUSTOM_A"])
        assert client.set_traits(rp, ["CUSTOM_B"], generation=0) == 2


class TestNamesAreNeverDeleted:
    def test_a_trait_another_provider_uses_survives(
        self, placement: adapter.Adapter, client: PlacementClient, counted: CountingAdapter
    ) -> None:
        a = client.create_provider(new_uuid(), "a").uuid
        b = client.create_provider(new_uuid(), "b").uuid
        client.set_traits(a, ["CUSTOM_SHARED", "CUSTOM_ONLY_A"])
        client.set_traits(b, ["CUSTOM_SHARED"])
        client.set_traits(a, [])
        client.delete_provider(a)
        assert traits_of(placement, b) == {"CUSTOM_SHARED"}
        assert trait_exists(placement, "CUSTOM_SHARED")
        assert trait_exists(placement, "CUSTOM_ONLY_A")  # unused now, still never deleted
        assert not [c for c in counted.calls if c.method == "DELETE" and "/traits" in c.path]

    def test_resource_classes_survive_their_providers(
        self, placement: adapter.Adapter, client: PlacementClient
    ) -> None:
        made = add_fpga_with_two_regions(client, add_compute_node(client, "cn1"), "cn1")
        assert client.delete_subtree(made[""]) == 3
        assert placement.get(f"/resource_classes/{FPGA}", **MV).status_code == 200

    def test_the_client_has_no_way_to_delete_names(self) -> None:
        public = {name for name in dir(PlacementClient) if not name.startswith("_")}
        assert not {n for n in public if "delete" in n and ("trait" in n or "class" in n)}

    def test_a_trait_deleted_behind_our_back_is_recreated(
        self, placement: adapter.Adapter, client: PlacementClient
    ) -> None:
        rp = client.create_provider(new_uuid(), "rp").uuid
        client.ensure_traits(["CUSTOM_GONE"])
        assert placement.delete("/traits/CUSTOM_GONE", **MV).status_code == 204
        client.set_traits(rp, ["CUSTOM_GONE"])
        assert traits_of(placement, rp) == {"CUSTOM_GONE"}

    def test_a_class_deleted_behind_our_back_is_recreated(
        self, placement: adapter.Adapter, client: PlacementClient
    ) -> None:
        rp = client.create_provider(new_uuid(), "rp").uuid
        client.ensure_resource_classes(["CUSTOM_ACCELERATOR_GONE"])
        gone = placement.delete("/resource_classes/CUSTOM_ACCELERATOR_GONE", **MV)
        assert gone.status_code == 204
        client.set_inventories(rp, {"CUSTOM_ACCELERATOR_GONE": Inventory(1)})
        assert client.get_inventories(rp)[1] == {"CUSTOM_ACCELERATOR_GONE": Inventory(1)}


def allocate(raw: adapter.Adapter, rp: str, resources: dict[str, int]) -> str:
    consumer = new_uuid()
    body = {
        "allocations": {rp: {"resources": resources}},
        "project_id": new_uuid(),
        "user_id": new_uuid(),
        "consumer_generation": None,
        "consumer_type": "INSTANCE",
    }
    response = raw.put(f"/allocations/{consumer}", json=body, **MV)
    assert response.status_code == 204, response.text
    return consumer


class TestProviders:
    def test_create_read_find_and_tree(self, client: PlacementClient) -> None:
        root = add_compute_node(client, "cn1")
        made = add_fpga_with_two_regions(client, root, "cn1")
        device = client.get_provider(made[""])
        assert device is not None
        assert device.name == "cn1_0000:5e:00.0"
        assert device.parent_uuid == root and device.root_uuid == root
        found = client.find_provider("cn1_0000:5e:00.0_region1")
        assert found is not None and found.uuid == made["region1"]
        assert client.find_provider("nowhere") is None
        assert client.get_provider(new_uuid()) is None
        tree = client.get_tree(made["region0"])
        assert {rp.uuid for rp in tree} == {root, *made.values()}
        assert client.get_tree(new_uuid()) == []

    def test_duplicate(self, client: PlacementClient) -> None:
        rp = client.create_provider(new_uuid(), "rp").uuid
        with pytest.raises(PlacementProviderExists, match="rp"):
            client.create_provider(new_uuid(), "rp")
        with pytest.raises(PlacementProviderExists):
            client.create_provider(rp, "other")

    def test_unknown_parent(self, client: PlacementClient) -> None:
        parent = new_uuid()
        with pytest.raises(PlacementProviderNotFound, match=parent) as caught:
            client.create_provider(new_uuid(), "orphan", parent_uuid=parent)
        assert caught.value.status == 400

    def test_writes_to_a_missing_provider(self, client: PlacementClient) -> None:
        with pytest.raises(PlacementProviderNotFound):
            client.set_traits(new_uuid(), ["CUSTOM_A"])
        with pytest.raises(PlacementProviderNotFound):
            client.set_inventories(new_uuid(), {FPGA: Inventory(1)}, generation=0)

    def test_bad_inventory_is_a_clear_error(self, client: PlacementClient) -> None:
        rp = client.create_provider(new_uuid(), "rp").uuid
        with pytest.raises(PlacementError, match="inventory") as caught:
            client.set_inventories(rp, {FPGA: Inventory(1, reserved=5)})
        assert caught.value.status == 400

    def test_usage_and_allocations_and_safe_removal(
        self, placement: adapter.Adapter, client: PlacementClient
    ) -> None:
        made = add_fpga_with_two_regions(client, add_compute_node(client, "cn1"), "cn1")
        region0 = made["region0"]
        consumer = allocate(placement, region0, {FPGA: 1})
        assert client.get_usages(region0) == {FPGA: 1}
        assert client.get_allocations(region0) == {consumer: {FPGA: 1}}
        assert client.get_usages(made["region1"]) == {FPGA: 0}
        with pytest.raises(PlacementProviderInUse):
            client.set_inventories(region0, {})
        with pytest.raises(PlacementProviderInUse):
            client.delete_provider(region0)
        with pytest.raises(PlacementProviderInUse):
            client.delete_provider(made[""])  # it has children
        with pytest.raises(PlacementProviderInUse):
            client.delete_subtree(made[""])
        assert client.get_provider(region0) is not None
        assert client.get_provider(made["region1"]) is None  # removed before the refusal

    def test_a_consumer_without_a_type_is_rewritten(
        self, placement: adapter.Adapter, client: PlacementClient
    ) -> None:
        """Placement reads a consumer written before consumer types (or by a client that
        sets none, as Nova's servers under Cyborg were) as type ``unknown``, which a
        write may not name: its rewrite (an adoption's allocation move) writes
        INSTANCE instead of echoing it back."""
        made = add_fpga_with_two_regions(client, add_compute_node(client, "cn1"), "cn1")
        consumer = new_uuid()
        body = {
            "allocations": {made["region0"]: {"resources": {FPGA: 1}}},
            "project_id": new_uuid(),
            "user_id": new_uuid(),
            "consumer_generation": None,
        }
        response = placement.put(f"/allocations/{consumer}", json=body, microversion="1.28")
        assert response.status_code == 204, response.text
        read = client.get_consumer(consumer)
        assert read.consumer_type == "unknown"
        client.replace_allocations(consumer, read, {made["region1"]: {FPGA: 1}})
        moved = client.get_consumer(consumer)
        assert moved.allocations == {made["region1"]: {FPGA: 1}}
        assert moved.consumer_type == "INSTANCE"

    def test_delete_is_idempotent(self, client: PlacementClient) -> None:
        made = add_fpga_with_two_regions(client, add_compute_node(client, "cn1"), "cn1")
        tree = client.get_tree(made[""])
        assert client.delete_subtree(made[""], tree) == 3
        assert client.delete_subtree(made[""]) == 0
        assert client.delete_provider(made["region0"]) is False


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _answering(status: str) -> inprocess.WSGIApp:
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        start_response(status, [("Content-Type", "text/plain")])
        return [b"the database is away"]

    return app


class TestUnreachable:
    def test_connection_refused(self) -> None:
        endpoint = f"http://127.0.0.1:{_closed_port()}/placement"
        ks = session.Session(auth=token_endpoint.Token(endpoint, "admin"))
        client = PlacementClient(adapter.Adapter(ks, service_type="placement"))
        with pytest.raises(PlacementUnavailable, match="unreachable while reading"):
            client.get_tree(new_uuid())

    @pytest.mark.parametrize("status", ["500 Internal Server Error", "503 Service Unavailable"])
    def test_server_errors(self, status: str) -> None:
        client = PlacementClient(inprocess.direct_adapter(_answering(status)))
        with pytest.raises(PlacementUnavailable, match="database is away") as caught:
            client.create_provider(new_uuid(), "rp")
        assert caught.value.status == int(status[:3])

    def test_unavailable_is_a_placement_error(self) -> None:
        assert issubclass(PlacementUnavailable, PlacementError)
