"""Identical accelerators of a host as one provider (``[placement] pools``, issue 41), on
an 8-GPU host (8 whole H200s: 0-3 on NUMA node 0, 4-7 on node 1, two per PCIe switch,
one NVLink domain) against the real Placement in-process, on every database backend:
Nova's query and bind (the first candidate, its groups' providers bound as Nova binds),
claims, packing, ``accel:affinity``, memory beside MIG slices, and the move of an existing
per-device tree to pools while instances hold accelerators."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from keystoneauth1 import adapter
from oslo_config import cfg
from sqlalchemy import select, update

from acceleron.client.claims import Claimer, ClaimFailed
from acceleron.db.models import AcceleratorRequest, AttachHandle, Deployable, Device, Host, table
from acceleron.db.session import Database
from acceleron.placement.client import Inventory, PlacementClient
from acceleron.scheduler import query
from acceleron.service import device_profiles, pools
from acceleron.service.placement import options_from_conf
from acceleron.service.publish import Syncer
from tests.fixtures.arqs import api_adapter, member
from tests.fixtures.fake_host import HOST, LATEST, reporting_api
from tests.fixtures.server import serve
from tests.fixtures.waiting import wait_for

GPU, HBM = "CUSTOM_ACCELERATOR_GPU", "CUSTOM_ACCELERATOR_MEMORY_HBM"
MIG = "CUSTOM_ACCELERATOR_MIG"
ARQS, HANDLES = table(AcceleratorRequest), table(AttachHandle)
DEPLOYABLES, DEVICES = table(Deployable), table(Device)
H200 = {
    "type": "GPU",
    "count": 4,
    "product_id": "2335",
    "model": "H200",
    "memory_mb": 143771,
    "memory_type": "HBM3e",
}
HGX = {"devices": [{**H200, "numa_node": 0}, {**H200, "numa_node": 1}]}
MIG_GPUS = {
    "devices": [
        {
            "type": "GPU",
            "count": 2,
            "product_id": "2330",
            "model": "H100",
            "numa_node": 0,
            "memory_mb": 81559,
            "memory_type": "HBM3",
            "mig_profiles": [{"name": "1g.10gb", "instances": 7, "memory_mb": 9856}],
        }
    ]
}


def _inventory(conf: cfg.ConfigOpts, tmp_path: Path, inventory: dict[str, Any]) -> None:
    import yaml

    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(inventory))
    conf.set_override("inventory_file", str(path), "fake")


def _pool(client: PlacementClient, rc: str, total: int) -> str | None:
    """The uuid of the host's provider of ``rc`` once it has ``total`` of it."""
    compute = client.find_provider(HOST)
    if compute is None:
        return None
    for provider in client.get_tree(compute.uuid):
        inventory = client.get_inventories(provider.uuid)[1].get(rc)
        if inventory is not None and inventory.total == total:
            return provider.uuid
    return None


def _synced(db: Database) -> bool:
    """Whether host-1's last report is published (its sync recorded)."""
    hosts = table(Host)
    with db.reader() as conn:
        row = conn.execute(select(hosts).where(hosts.c.hostname == HOST)).first()
    return row is not None and row.rp_uuid is not None and row.generation == row.synced_generation


@pytest.fixture
def hgx(
    conf: cfg.ConfigOpts, db: Database, placement: adapter.Adapter, tmp_path: Path
) -> Iterator[tuple[TestClient, str]]:
    """An API publishing the 8-GPU host to the real Placement; the client and the pool."""
    _inventory(conf, tmp_path, HGX)
    conf.set_override("methods", {"GPU": "none"}, "cleaning")  # given back, free at once
    client = PlacementClient(placement)
    with reporting_api(conf, db, placement) as api:
        wait_for(lambda: _pool(client, GPU, 8) is not None and _synced(db))
        with db.writer() as conn:  # what the drivers read from sysfs and NVML
            for n, device in enumerate(
                conn.execute(select(DEVICES).order_by(DEVICES.c.pci_address))
            ):
                conn.execute(
                    update(DEVICES)
                    .where(DEVICES.c.id == device.id)
                    .values(pcie_switch=f"0000:{n // 2:02x}:00.0", nvlink_domain="nvswitch-0")
                )
        for n in (1, 2, 4, 8):
            groups = [{f"resources:{GPU}": "1"} for _ in range(n)]
            device_profiles.create(db, name=f"gpu-{n}x1", groups=groups)
            if n > 1:  # gpu-1x1 is gpu-1x1
                device_profiles.create(db, name=f"gpu-1x{n}", groups=[{f"resources:{GPU}": str(n)}])
        for unit in ("numa", "pcie_switch", "nvlink"):
            device_profiles.create(
                db,
                name=f"gpu-4-{unit}",
                groups=[{f"resources:{GPU}": "4", "accel:affinity": unit}],
            )
        pool = _pool(client, GPU, 8)
        assert pool is not None
        yield api, pool


def _numa(db: Database, arqs: list[str]) -> list[int]:
    """The NUMA node of the GPU each request holds."""
    with db.reader() as conn:
        rows = conn.execute(
            select(ARQS.c.uuid, DEVICES.c.numa_node)
            .join(HANDLES, HANDLES.c.arq_id == ARQS.c.id)
            .join(DEPLOYABLES, DEPLOYABLES.c.id == HANDLES.c.deployable_id)
            .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
            .where(ARQS.c.uuid.in_(arqs))
        ).all()
    by_uuid = {r.uuid: int(r.numa_node) for r in rows}
    return [by_uuid[a] for a in arqs]


def nova_boot(
    api: TestClient, placement: adapter.Adapter, profile: str, instance: str
) -> tuple[list[dict[str, Any]], Any]:
    """What Nova does for a server with ``profile``: its query (every group numbered,
    ``group_policy=none``, ``limit=1000``), the first candidate allocated, the requests
    created and bound in one PATCH to the providers of their groups. The requests as
    shown after, and the PATCH's answer."""
    client = PlacementClient(placement)
    shown = api.get(f"/v2/device_profiles?name={profile}").json()["device_profiles"][0]
    params = query.profile_query(shown["groups"], limit=1000).params()
    candidates = client.get_allocation_candidates(params)
    assert candidates.requests, f"Placement offers no candidate for {profile}"
    chosen = candidates.requests[0]
    client.put_allocations(instance, chosen.allocations, project_id="p", user_id="u")
    created = api.post("/v2/accelerator_requests", json={"device_profile_name": profile})
    assert created.status_code == 201, created.text
    body: dict[str, Any] = {}
    for arq in created.json()["arqs"]:
        rp = chosen.mappings[f"{query.GROUP_PREFIX}{arq['device_profile_group_id']}"][0]
        body[arq["uuid"]] = [
            {"op": "add", "path": "/hostname", "value": HOST},
            {"op": "add", "path": "/device_rp_uuid", "value": rp},
            {"op": "add", "path": "/instance_uuid", "value": instance},
        ]
    patched = api.patch("/v2/accelerator_requests", json=body)
    arqs = [api.get(f"/v2/accelerator_requests/{a}", headers=LATEST).json() for a in body]
    return arqs, patched


@pytest.mark.parametrize("n", [1, 2, 4, 8])
@pytest.mark.parametrize("shape", ["x1", "1x"])
def test_nova_boots_n_gpus_as_n_groups_or_one_group_on_one_numa_node_where_it_fits(
    hgx: tuple[TestClient, str], db: Database, placement: adapter.Adapter, n: int, shape: str
) -> None:
    api, pool = hgx
    profile = f"gpu-{n}x1" if shape == "x1" else f"gpu-1x{n}"
    candidates = PlacementClient(placement).get_allocation_candidates(
        query.profile_query(
            [{f"resources:{GPU}": "1"}] * n if shape == "x1" else [{f"resources:{GPU}": str(n)}],
            limit=1000,
        ).params()
    )
    assert len(candidates.requests) == 1  # one candidate, every group on the pool
    arqs, patched = nova_boot(api, placement, profile, str(uuid.uuid4()))
    assert patched.status_code == 202, patched.text
    assert [a["state"] for a in arqs] == ["Bound"] * n
    assert {a["device_rp_uuid"] for a in arqs} == {pool}
    nodes = _numa(db, [a["uuid"] for a in arqs])
    assert len(set(nodes)) == (1 if n <= 4 else 2), nodes
    handles = {a["attach_handle_info"]["bus"] + a["attach_handle_info"]["device"] for a in arqs}
    assert len(handles) == n  # n different GPUs


def test_two_4_gpu_servers_each_get_a_numa_node_and_a_2_gpu_one_fills_the_used_node(
    hgx: tuple[TestClient, str], db: Database, placement: adapter.Adapter
) -> None:
    api, _ = hgx
    first, _ = nova_boot(api, placement, "gpu-4x1", str(uuid.uuid4()))
    second, _ = nova_boot(api, placement, "gpu-1x4", str(uuid.uuid4()))
    assert set(_numa(db, [a["uuid"] for a in first])) == {0}
    assert set(_numa(db, [a["uuid"] for a in second])) == {1}


def test_a_2_gpu_server_after_a_1_gpu_one_fills_the_partly_used_node(
    hgx: tuple[TestClient, str], db: Database, placement: adapter.Adapter
) -> None:
    api, _ = hgx
    one, _ = nova_boot(api, placement, "gpu-1x1", str(uuid.uuid4()))
    (node,) = _numa(db, [one[0]["uuid"]])
    # Take one GPU of the other node by hand: both nodes partly used, 3 free on each.
    two, _ = nova_boot(api, placement, "gpu-2x1", str(uuid.uuid4()))
    assert _numa(db, [a["uuid"] for a in two]) == [node, node]
    four, _ = nova_boot(api, placement, "gpu-1x4", str(uuid.uuid4()))
    assert set(_numa(db, [a["uuid"] for a in four])) == {1 - node}  # the whole node left
    last, _ = nova_boot(api, placement, "gpu-1x1", str(uuid.uuid4()))
    assert _numa(db, [last[0]["uuid"]]) == [node]


@pytest.mark.parametrize("unit", ["numa", "nvlink"])
def test_affinity_keeps_each_servers_gpus_in_one_unit(
    hgx: tuple[TestClient, str], db: Database, placement: adapter.Adapter, unit: str
) -> None:
    api, _ = hgx
    column = {"numa": DEVICES.c.numa_node, "nvlink": DEVICES.c.nvlink_domain}[unit]
    for _ in range(2):
        arqs, patched = nova_boot(api, placement, f"gpu-4-{unit}", str(uuid.uuid4()))
        assert patched.status_code == 202 and [a["state"] for a in arqs] == ["Bound"] * 4
        with db.reader() as conn:
            units = (
                conn.execute(
                    select(column)
                    .join(DEPLOYABLES, DEPLOYABLES.c.device_id == DEVICES.c.id)
                    .join(HANDLES, HANDLES.c.deployable_id == DEPLOYABLES.c.id)
                    .join(ARQS, ARQS.c.id == HANDLES.c.arq_id)
                    .where(ARQS.c.uuid.in_([a["uuid"] for a in arqs]))
                )
                .scalars()
                .all()
            )
        assert len(units) == 4 and len(set(units)) == 1


def test_a_host_whose_units_are_too_small_refuses_the_affinity(
    hgx: tuple[TestClient, str], placement: adapter.Adapter
) -> None:
    api, _ = hgx
    arqs, patched = nova_boot(api, placement, "gpu-4-pcie_switch", str(uuid.uuid4()))
    assert patched.status_code == 409, patched.text
    error = patched.json()["errors"][0]["detail"]
    assert "share one PCIe switch (accel:affinity)" in error and "the most any has is 2" in error
    assert all(a["state"] != "Bound" for a in arqs)


def test_an_affinity_the_free_gpus_cannot_meet_is_refused(
    hgx: tuple[TestClient, str], db: Database, placement: adapter.Adapter
) -> None:
    """Placement counts 8 free; the host uses one GPU of each node itself (outside
    Acceleron): no node has 4 free. Placement offers the host, the bind refuses."""
    api, _ = hgx
    with db.writer() as conn:
        for node in (0, 1):
            device = conn.execute(
                select(DEPLOYABLES.c.id)
                .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
                .where(DEVICES.c.numa_node == node)
                .limit(1)
            ).scalar_one()
            conn.execute(
                update(HANDLES).where(HANDLES.c.deployable_id == device).values(host_in_use=True)
            )
    refused, patched = nova_boot(api, placement, "gpu-4-numa", str(uuid.uuid4()))
    assert patched.status_code == 409, patched.text
    error = patched.json()["errors"][0]["detail"]
    assert "share one NUMA node (accel:affinity)" in error and "the most any has is 3" in error
    assert all(r["state"] != "Bound" for r in refused)
    arqs, patched = nova_boot(api, placement, "gpu-1x4", str(uuid.uuid4()))
    assert [a["state"] for a in arqs] == ["Bound"] * 4  # without the key: 3 + 1
    assert sorted(_numa(db, [a["uuid"] for a in arqs])) in ([0, 0, 0, 1], [0, 1, 1, 1])


def test_a_bad_affinity_is_refused_with_the_values(hgx: tuple[TestClient, str]) -> None:
    api, _ = hgx
    body = [{"name": "bad", "groups": [{f"resources:{GPU}": "2", "accel:affinity": "rack"}]}]
    response = api.post("/v2/device_profiles", json=body)
    assert response.status_code == 400
    assert "must be one of numa, pcie_switch, nvlink" in response.text
    groups = [{f"resources:{GPU}": "1", "accel:affinity": unit} for unit in ("numa", "nvlink")]
    mixed = [{"name": "mixed", "groups": groups}]
    response = api.post("/v2/device_profiles", json=mixed)
    assert response.status_code == 400 and "name one" in response.text


@pytest.mark.parametrize("n", [1, 2, 4, 8])
@pytest.mark.parametrize("shape", ["x1", "1x"])
def test_claims_of_n_gpus(hgx: tuple[TestClient, str], db: Database, n: int, shape: str) -> None:
    api, pool = hgx
    profile = f"gpu-{n}x1" if shape == "x1" else f"gpu-1x{n}"
    with serve(api.app) as url:  # type: ignore[arg-type]
        claim = Claimer(api_adapter(url)).claim(profile, str(uuid.uuid4()))
    assert claim.allocations == {pool: {GPU: n}}
    assert [a["state"] for a in claim.arqs] == ["Bound"] * n
    nodes = _numa(db, [a["uuid"] for a in claim.arqs])
    assert len(set(nodes)) == (1 if n <= 4 else 2)


def test_claims_pack_honour_affinity_and_say_why_nothing_fits(
    hgx: tuple[TestClient, str], db: Database
) -> None:
    api, _ = hgx
    with serve(api.app) as url:  # type: ignore[arg-type]
        claimer = Claimer(api_adapter(url))
        one = claimer.claim("gpu-1x1", str(uuid.uuid4()))
        (node,) = _numa(db, [one.arqs[0]["uuid"]])
        four = claimer.claim("gpu-4-numa", str(uuid.uuid4()))
        assert set(_numa(db, [a["uuid"] for a in four.arqs])) == {1 - node}
        claimer.release(four.consumer)
        with db.writer() as conn:  # the host uses a GPU of the other node itself
            device = conn.execute(
                select(DEPLOYABLES.c.id)
                .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
                .where(DEVICES.c.numa_node == 1 - node)
                .limit(1)
            ).scalar_one()
            conn.execute(
                update(HANDLES).where(HANDLES.c.deployable_id == device).values(host_in_use=True)
            )
        with pytest.raises(ClaimFailed) as refused:
            claimer.claim("gpu-4-numa", str(uuid.uuid4()))
        assert "share one NUMA node" in str(refused.value)
        assert "the most any has is 3" in str(refused.value)
        two = claimer.claim("gpu-2x1", str(uuid.uuid4()))
        assert len(set(_numa(db, [a["uuid"] for a in two.arqs]))) == 1


def test_a_group_larger_than_any_provider_says_so(
    conf: cfg.ConfigOpts, db: Database, placement: adapter.Adapter, tmp_path: Path
) -> None:
    """One provider per GPU (pools off): a group of 2 fits no provider; the claim says
    the largest has 1, not that all are in use."""
    _inventory(conf, tmp_path, HGX)
    conf.set_override("pools", "false", "placement")
    client = PlacementClient(placement)
    with reporting_api(conf, db, placement) as api:
        wait_for(lambda: _pool(client, GPU, 1) is not None and _synced(db))
        device_profiles.create(db, name="gpu-1x2", groups=[{f"resources:{GPU}": "2"}])
        with serve(api.app) as url, pytest.raises(ClaimFailed) as refused:  # type: ignore[arg-type]
            Claimer(api_adapter(url)).claim("gpu-1x2", str(uuid.uuid4()))
    assert f"the largest provider of {GPU} has 1" in str(refused.value)
    assert "in use" not in str(refused.value)


def test_a_second_project_sees_nothing_of_the_first(
    hgx: tuple[TestClient, str], placement: adapter.Adapter
) -> None:
    api, _ = hgx
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    created = api.post(
        "/v2/accelerator_requests", json={"device_profile_name": "gpu-2x1"}, headers=member(a)
    )
    assert created.status_code == 201
    seen = api.get("/v2/accelerator_requests", headers=member(b)).json()["arqs"]
    assert seen == []


def test_memory_beside_two_mig_slices_in_one_group(
    conf: cfg.ConfigOpts, db: Database, placement: adapter.Adapter, tmp_path: Path
) -> None:
    _inventory(conf, tmp_path, MIG_GPUS)
    client = PlacementClient(placement)
    with reporting_api(conf, db, placement) as api:
        wait_for(lambda: _pool(client, MIG, 14) is not None and _synced(db))
        pool = _pool(client, MIG, 14)
        assert pool is not None
        memory = client.get_inventories(pool)[1]["CUSTOM_ACCELERATOR_MEMORY_HBM"]
        assert (memory.total, memory.max_unit) == (14 * 9856, 14 * 9856)
        group = {f"resources:{MIG}": "2", f"resources:{HBM}": str(2 * 9856)}
        device_profiles.create(db, name="two-slices", groups=[group])
        arqs, patched = nova_boot(api, placement, "two-slices", str(uuid.uuid4()))
        assert patched.status_code == 202 and [a["state"] for a in arqs] == ["Bound"] * 2
        with serve(api.app) as url:  # type: ignore[arg-type]
            claim = Claimer(api_adapter(url)).claim("two-slices", str(uuid.uuid4()))
        assert claim.allocations == {pool: {MIG: 2, HBM: 2 * 9856}}


def test_an_existing_per_device_tree_moves_to_pools_with_allocations_held(
    conf: cfg.ConfigOpts, db: Database, placement: adapter.Adapter, tmp_path: Path
) -> None:
    """Published one provider per GPU (pools off, as the previous release did), one
    server holding a GPU; pools on: the pool counts 8 and reserves the held one, the old
    provider stays fully reserved while held, and goes once released."""
    _inventory(conf, tmp_path, HGX)
    conf.set_override("pools", "false", "placement")
    conf.set_override("methods", {"GPU": "none"}, "cleaning")  # given back, free at once
    conf.set_override("retired_provider_delay", 0, "placement")
    client = PlacementClient(placement)
    with reporting_api(conf, db, placement) as api:
        wait_for(lambda: _pool(client, GPU, 1) is not None and _synced(db))
        device_profiles.create(db, name="gpu", groups=[{f"resources:{GPU}": "1"}])
        device_profiles.create(db, name="gpu-1x4", groups=[{f"resources:{GPU}": "4"}])
        instance = str(uuid.uuid4())
        arqs, _ = nova_boot(api, placement, "gpu", instance)
        assert arqs[0]["state"] == "Bound"
        old = arqs[0]["device_rp_uuid"]
        # Another server scheduled on a GPU's own provider, bound only after the move.
        late = next(
            p.uuid
            for p in client.get_tree(client.find_provider(HOST).uuid)  # type: ignore[union-attr]
            if p.uuid != old and GPU in client.get_inventories(p.uuid)[1]
        )
        late_instance = str(uuid.uuid4())
        client.put_allocations(late_instance, {late: {GPU: 1}}, project_id="p", user_id="u")
    conf.set_override("pools", "true", "placement")
    with reporting_api(conf, db, placement) as api:
        api.app.state.sync_worker.stop()  # type: ignore[attr-defined]
        synced = api.post("/v2/placement/sync", json={"host": HOST}, headers=LATEST)
        assert synced.status_code == 200, synced.text
        pool = _pool(client, GPU, 8)
        assert pool is not None
        assert client.get_inventories(pool)[1][GPU].reserved == 1
        kept = client.get_inventories(old)[1][GPU]
        assert kept.reserved == kept.total == 1  # retired: fully reserved, still held
        assert client.get_usages(old)[GPU] == 1
        others = [p.uuid for p in client.get_tree(client.find_provider(HOST).uuid)]  # type: ignore[union-attr]
        assert len(others) == 4  # the compute node, the pool, the two held GPUs' old providers
        created = api.post("/v2/accelerator_requests", json={"device_profile_name": "gpu"})
        arq = created.json()["arqs"][0]["uuid"]
        ops = [{"op": "add", "path": "/hostname", "value": HOST},
               {"op": "add", "path": "/device_rp_uuid", "value": late},
               {"op": "add", "path": "/instance_uuid", "value": late_instance}]  # fmt: skip
        assert api.patch("/v2/accelerator_requests", json={arq: ops}).status_code == 202
        shown = api.get(f"/v2/accelerator_requests/{arq}", headers=LATEST).json()
        assert shown["state"] == "Bound" and shown["device_rp_uuid"] == late
        seven, patched = nova_boot(api, placement, "gpu-1x4", str(uuid.uuid4()))
        assert patched.status_code == 202 and [a["state"] for a in seven] == ["Bound"] * 4
        assert old not in {a["device_rp_uuid"] for a in seven}
        response = api.delete(f"/v2/accelerator_requests?instance={instance}")
        assert response.status_code in (202, 204), response.text
        placement.delete(f"/allocations/{instance}", microversion="1.39", raise_exc=False)
        assert not _synced(db)  # the unit held through the old provider is back: to publish
        synced = api.post("/v2/placement/sync", json={"host": HOST}, headers=LATEST)
        assert synced.status_code == 200, synced.text
        moved = client.get_provider(old)  # unused now: out of the tree, fully reserved
        assert moved is not None and moved.parent_uuid is None
        synced = api.post("/v2/placement/sync", json={"host": HOST}, headers=LATEST)
        assert synced.status_code == 200, synced.text
        assert client.get_provider(old) is None  # a later pass deletes it (delay 0 here)
        assert client.get_provider(late) is not None  # still held: kept, fully reserved
        assert client.get_inventories(pool)[1][GPU].reserved == 1  # the late server's GPU


def test_affinity_with_one_provider_per_device_checks_what_placement_chose(
    conf: cfg.ConfigOpts, db: Database, placement: adapter.Adapter, tmp_path: Path
) -> None:
    """Pools off: the bind names each GPU's own provider; two of one NUMA node are bound,
    one of each node refused."""
    _inventory(conf, tmp_path, HGX)
    conf.set_override("pools", "false", "placement")
    with reporting_api(conf, db, placement) as api:
        wait_for(lambda: _synced(db))
        groups = [{f"resources:{GPU}": "1", "accel:affinity": "numa"}] * 2
        device_profiles.create(db, name="pair", groups=groups)
        with db.reader() as conn:
            rows = conn.execute(
                select(DEVICES.c.numa_node, DEPLOYABLES.c.rp_uuid)
                .join(DEPLOYABLES, DEPLOYABLES.c.device_id == DEVICES.c.id)
                .order_by(DEVICES.c.pci_address)
            ).all()
        node0 = [r.rp_uuid for r in rows if r.numa_node == 0]
        node1 = [r.rp_uuid for r in rows if r.numa_node == 1]

        def bind(providers: list[str]) -> Any:
            created = api.post("/v2/accelerator_requests", json={"device_profile_name": "pair"})
            instance = str(uuid.uuid4())
            body = {
                arq["uuid"]: [
                    {"op": "add", "path": "/hostname", "value": HOST},
                    {"op": "add", "path": "/device_rp_uuid", "value": rp},
                    {"op": "add", "path": "/instance_uuid", "value": instance},
                ]
                for arq, rp in zip(created.json()["arqs"], providers, strict=True)
            }
            return api.patch("/v2/accelerator_requests", json=body)

        refused = bind([node0[0], node1[0]])
        assert refused.status_code == 409
        assert "devices of 2 different ones" in refused.json()["errors"][0]["detail"]
        assert bind(node0[:2]).status_code == 202


def test_a_host_in_pools_stays_so_for_an_api_that_has_not_seen_the_switch(
    conf: cfg.ConfigOpts, db: Database, placement: adapter.Adapter, tmp_path: Path
) -> None:
    """With pools = auto, API processes see the contract phase applied at slightly
    different moments: one that has not yet (its pools off) keeps a host another has
    published in pools as it is, rather than publishing it per device again under the
    servers being scheduled there. An operator's pools = false still moves it back."""
    _inventory(conf, tmp_path, HGX)
    conf.set_override("pools", "true", "placement")
    client = PlacementClient(placement)
    with reporting_api(conf, db, placement):
        wait_for(lambda: _pool(client, GPU, 8) is not None and _synced(db))
    per_device = dataclasses.replace(options_from_conf(conf), pools=False)

    def sync(keep_pools: bool) -> None:
        syncer = Syncer(
            db,
            lambda: PlacementClient(placement),
            per_device,
            pools=lambda: False,
            keep_pools=keep_pools,
        )
        assert syncer.sync_host(HOST, force=True).errors == []

    sync(keep_pools=True)  # [placement] pools = auto, the switch not seen yet
    assert _pool(client, GPU, 8) is not None and _pool(client, GPU, 1) is None
    sync(keep_pools=False)  # pools = false
    assert _pool(client, GPU, 8) is None and _pool(client, GPU, 1) is not None


class _RecordChecking(PlacementClient):
    """A client that notes, at each inventory it writes, whether the sync had recorded
    the provider's members (``pools.members``) by then."""

    def __init__(self, placement: adapter.Adapter, db: Database) -> None:
        super().__init__(placement)
        self.db = db
        self.recorded: dict[str, bool] = {}

    def set_inventories(
        self, uuid: str, inventories: Mapping[str, Inventory], *, generation: int | None = None
    ) -> int:
        self._note(uuid)
        return super().set_inventories(uuid, inventories, generation=generation)

    def reshape(self, inventories: Mapping[str, tuple[int, Mapping[str, Inventory]]]) -> None:
        for provider in inventories:
            self._note(provider)
        super().reshape(inventories)

    def _note(self, uuid: str) -> None:
        with self.db.reader() as conn:
            self.recorded[uuid] = pools.members(conn, uuid) is not None


def test_a_new_pool_gets_its_inventory_once_its_members_are_recorded(
    conf: cfg.ConfigOpts, db: Database, placement: adapter.Adapter, tmp_path: Path
) -> None:
    """A pool Placement offered before the sync recorded its members would be a provider
    no bind can resolve (400 to Nova and to claims: seen when pools were switched on
    under load). A new pool is created without inventory, recorded, then given it."""
    _inventory(conf, tmp_path, HGX)
    conf.set_override("pools", "false", "placement")
    client = PlacementClient(placement)
    with reporting_api(conf, db, placement):
        wait_for(lambda: _pool(client, GPU, 1) is not None and _synced(db))
    checking = _RecordChecking(placement, db)
    options = dataclasses.replace(options_from_conf(conf), pools=True)
    syncer = Syncer(db, lambda: checking, options)
    assert syncer.sync_host(HOST, force=True).errors == []
    pool = _pool(client, GPU, 8)
    assert pool is not None and checking.recorded[pool] is True
    assert _synced(db)


class _FreeWatching(PlacementClient):
    """A client that notes, after each write of inventories or deletion of a provider,
    how many GPUs the host's providers offer (total less reserved less used)."""

    def __init__(self, placement: adapter.Adapter) -> None:
        super().__init__(placement)
        self.reader = PlacementClient(placement)
        self.free: list[int] = []

    def set_inventories(
        self, uuid: str, inventories: Mapping[str, Inventory], *, generation: int | None = None
    ) -> int:
        try:
            return super().set_inventories(uuid, inventories, generation=generation)
        finally:
            self._note()

    def update_inventories(self, uuid: str, *args: Any, **kwargs: Any) -> int:
        try:
            return super().update_inventories(uuid, *args, **kwargs)
        finally:
            self._note()

    def reshape(self, inventories: Mapping[str, tuple[int, Mapping[str, Inventory]]]) -> None:
        try:
            super().reshape(inventories)
        finally:
            self._note()

    def delete_provider(self, uuid: str) -> bool:
        try:
            return super().delete_provider(uuid)
        finally:
            self._note()

    def _note(self) -> None:
        compute = self.reader.find_provider(HOST)
        assert compute is not None
        free = 0
        for provider in self.reader.get_tree(compute.uuid):
            inventory = self.reader.get_inventories(provider.uuid)[1].get(GPU)
            if inventory is not None:
                used = self.reader.get_usages(provider.uuid).get(GPU, 0)
                free += max(0, inventory.total - inventory.reserved - used)
        self.free.append(free)


def test_a_host_switched_to_pools_offers_its_free_gpus_throughout(
    conf: cfg.ConfigOpts, db: Database, placement: adapter.Adapter, tmp_path: Path
) -> None:
    """The switch to pools under load: the pool's inventory and the retirement of the
    per-device providers are one reshape, so Placement offers the 7 free GPUs of the
    host at every step, neither none (claims and servers refused meanwhile: seen in
    the rolling upgrade's run) nor 14 (a GPU offered twice)."""
    _inventory(conf, tmp_path, HGX)
    conf.set_override("pools", "false", "placement")
    conf.set_override("methods", {"GPU": "none"}, "cleaning")
    client = PlacementClient(placement)
    with reporting_api(conf, db, placement) as api:
        wait_for(lambda: _pool(client, GPU, 1) is not None and _synced(db))
        device_profiles.create(db, name="gpu", groups=[{f"resources:{GPU}": "1"}])
        arqs, _ = nova_boot(api, placement, "gpu", str(uuid.uuid4()))
        assert arqs[0]["state"] == "Bound"
    compute = client.find_provider(HOST)
    assert compute is not None
    per_device = [p.uuid for p in client.get_tree(compute.uuid) if p.uuid != compute.uuid]
    watching = _FreeWatching(placement)
    options = dataclasses.replace(options_from_conf(conf), pools=True)
    assert Syncer(db, lambda: watching, options).sync_host(HOST, force=True).errors == []
    pool = _pool(client, GPU, 8)
    assert pool is not None and client.get_inventories(pool)[1][GPU].reserved == 1
    assert watching.free and set(watching.free) == {7}, watching.free
    assert len(client.get_tree(compute.uuid)) == 3
    # The retired providers keep their inventory, fully reserved, never emptied: an
    # allocation Placement lets through as the switch writes stays one it can free.
    for old in per_device:
        inventory = client.get_inventories(old)[1][GPU]
        assert inventory.reserved == inventory.total == 1, old


class _Overtaken(PlacementClient):
    """A client whose first reshape lets ``other`` run first (after this one read the
    providers it writes)."""

    def __init__(self, placement: adapter.Adapter, other: Callable[[], object]) -> None:
        super().__init__(placement)
        self.other: Callable[[], object] | None = other

    def reshape(self, inventories: Mapping[str, tuple[int, Mapping[str, Inventory]]]) -> None:
        other, self.other = self.other, None
        if other is not None:
            other()
        super().reshape(inventories)


def test_a_switch_to_pools_overtaken_by_another_api_process_completes(
    conf: cfg.ConfigOpts,
    db: Database,
    placement: adapter.Adapter,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two API processes may sync a host at once: one switches it to pools (deleting
    the per-device providers) while the other reads them for its reshape. The second
    reads the tree again and completes, rather than taking the vanished provider for
    Placement refusing to reshape."""
    _inventory(conf, tmp_path, HGX)
    conf.set_override("pools", "false", "placement")
    client = PlacementClient(placement)
    with reporting_api(conf, db, placement):
        wait_for(lambda: _pool(client, GPU, 1) is not None and _synced(db))
    options = dataclasses.replace(options_from_conf(conf), pools=True)

    def other() -> None:
        first = Syncer(db, lambda: PlacementClient(placement), options)
        assert first.sync_host(HOST, force=True).errors == []

    overtaken = _Overtaken(placement, other)
    assert Syncer(db, lambda: overtaken, options).sync_host(HOST, force=True).errors == []
    assert overtaken.other is None  # the other process did run in between
    assert "refused a reshape" not in caplog.text
    pool = _pool(client, GPU, 8)
    assert pool is not None and client.get_inventories(pool)[1][GPU].reserved == 0
    assert len(client.get_tree(client.find_provider(HOST).uuid)) == 2  # type: ignore[union-attr]
    assert _synced(db)


FPGA = "CUSTOM_ACCELERATOR_FPGA"
EIGHT_CARDS = {
    "devices": [
        {
            "type": "FPGA",
            "count": 8,
            "product_id": "09c4",
            "model": "PAC_ARRIA10",
            "numa_node": 0,
            "regions": [{"region_type": "9926ab6d6c925a68aabca7d84c545738", "accelerators": 1}],
        }
    ]
}


@pytest.mark.parametrize("groups", [[{f"resources:{FPGA}": "1"}] * 8, [{f"resources:{FPGA}": "8"}]])
def test_eight_regions_as_eight_groups_boot_through_nova_and_claim(
    conf: cfg.ConfigOpts,
    db: Database,
    placement: adapter.Adapter,
    tmp_path: Path,
    groups: list[dict[str, str]],
) -> None:
    """An 8-card FPGA host keeps a provider per region. 8 regions as 8 groups of one,
    or as one group of 8 (stored as 8 groups of one): Nova's query (in the embedded
    Placement's options) and its bind give the server the 8 regions, and once they are
    back a claim takes the 8 again."""
    _inventory(conf, tmp_path, EIGHT_CARDS)
    conf.set_override("methods", {"FPGA": "none"}, "cleaning")  # given back, free at once
    client = PlacementClient(placement)
    with reporting_api(conf, db, placement) as api:
        wait_for(lambda: _pool(client, FPGA, 1) is not None and _synced(db))
        made = device_profiles.create(db, name="fpga-8x1", groups=groups)
        assert made.groups == [{f"resources:{FPGA}": "1"}] * 8
        instance = str(uuid.uuid4())
        arqs, patched = nova_boot(api, placement, "fpga-8x1", instance)
        assert patched.status_code == 202 and [a["state"] for a in arqs] == ["Bound"] * 8
        assert len({a["device_rp_uuid"] for a in arqs}) == 8
        response = api.delete(f"/v2/accelerator_requests?instance={instance}")
        assert response.status_code in (202, 204), response.text
        placement.delete(f"/allocations/{instance}", microversion="1.39", raise_exc=False)
        with serve(api.app) as url:  # type: ignore[arg-type]
            claim = Claimer(api_adapter(url)).claim("fpga-8x1", str(uuid.uuid4()))
        assert [a["state"] for a in claim.arqs] == ["Bound"] * 8
        assert claim.allocations is not None and len(claim.allocations) == 8
