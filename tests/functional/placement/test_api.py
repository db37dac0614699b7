"""Placement through the API: reports wake the sync, host names are checked, and the
operator endpoints (2.6); against the real Placement, on every database backend."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from keystoneauth1 import adapter
from oslo_config import cfg
from sqlalchemy import select

from acceleron.api.app import create_app
from acceleron.db.models import Host, table
from acceleron.db.session import Database
from acceleron.placement.client import PlacementClient
from acceleron.service.placement import PlacementService
from tests.fixtures.fake_host import HOST, report_body
from tests.fixtures.placement import Unreachable, allocate
from tests.fixtures.waiting import wait_for

V2_6 = {"OpenStack-API-Version": "accelerator 2.6"}
# The fake host's tree with pools ([placement] pools = auto: the contract phase is
# applied): the compute node, both FPGA cards and their four regions (regions are not
# pooled), and one pool each of the vGPU types, the MIG profiles and the QAT VFs.
TREE = 12


MakeApi = Callable[..., TestClient]


@pytest.fixture
def make_api(conf: cfg.ConfigOpts, db: Database, placement: adapter.Adapter) -> Iterator[MakeApi]:
    """An API whose Placement is the real one in this process (or ``through`` an adapter
    wrapping it), in ``mode``."""
    clients: list[TestClient] = []

    def make(mode: str, through: adapter.Adapter | None = None) -> TestClient:
        conf.set_override("mode", mode, "placement")
        conf.set_override("embedded_connection", "sqlite://", "placement")  # the fixture's
        app = create_app(conf, db)
        used = through or placement
        app.state.placement = PlacementService(conf, db, lambda: PlacementClient(used))
        client = TestClient(app, raise_server_exceptions=False)
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


def test_a_changed_report_is_published_by_the_worker(
    make_api: MakeApi, conf: cfg.ConfigOpts, placement: adapter.Adapter
) -> None:
    api = make_api("embedded")
    body = report_body(conf)
    assert api.put(f"/v2/hosts/{HOST}/report", json=body, headers=V2_6).status_code == 200
    client = PlacementClient(placement)
    wait_for(
        lambda: (
            (c := client.find_provider(HOST)) is not None and len(client.get_tree(c.uuid)) == TREE
        )
    )
    plan = api.post("/v2/placement/sync", json={"dry_run": True}, headers=V2_6).json()
    assert plan == {"hosts": [{"hostname": HOST, "skipped": False, "actions": [], "errors": []}]}


def test_sync_endpoint_plans_then_applies(
    make_api: MakeApi, conf: cfg.ConfigOpts, db: Database
) -> None:
    api = make_api("embedded")
    api.app.state.sync_worker.stop()  # type: ignore[attr-defined]
    from acceleron.report import from_json
    from acceleron.service import inventory

    inventory.reconcile(db, from_json(report_body(conf)))
    plan = api.post("/v2/placement/sync", json={"host": HOST, "dry_run": True}, headers=V2_6)
    assert plan.status_code == 200, plan.text
    actions = plan.json()["hosts"][0]["actions"]
    assert [a["op"] for a in actions].count("create") == TREE
    done = api.post("/v2/placement/sync", json={"host": HOST}, headers=V2_6).json()
    assert len(done["hosts"][0]["actions"]) == TREE
    again = api.post("/v2/placement/sync", json={}, headers=V2_6).json()
    assert again["hosts"][0]["actions"] == []


def test_remote_mode_refuses_a_host_the_compute_service_does_not_know(
    make_api: MakeApi, conf: cfg.ConfigOpts, placement: adapter.Adapter
) -> None:
    api = make_api("remote")
    PlacementClient(placement).create_provider(str(uuid.uuid4()), f"{HOST}.example.org")
    response = api.put(f"/v2/hosts/{HOST}/report", json=report_body(conf), headers=V2_6)
    assert response.status_code == 409
    error = response.json()["errors"][0]
    assert error["code"] == "acceleron.unknown_host"
    assert f"Did you mean '{HOST}.example.org'?" in error["detail"]
    named = f"{HOST}.example.org"
    ok = api.put(f"/v2/hosts/{named}/report", json=report_body(conf, named), headers=V2_6)
    assert ok.status_code == 200, ok.text


def test_remote_mode_accepts_a_new_host_while_placement_is_down(
    make_api: MakeApi, conf: cfg.ConfigOpts, db: Database, placement: adapter.Adapter
) -> None:
    down = Unreachable(placement)
    api = make_api("remote", down)
    response = api.put(f"/v2/hosts/{HOST}/report", json=report_body(conf), headers=V2_6)
    assert response.status_code == 200, response.text
    with db.reader() as conn:
        host = conn.execute(select(table(Host)).where(table(Host).c.hostname == HOST)).one()
    assert host.rp_uuid is None and host.synced_generation != host.generation  # pending
    client = PlacementClient(placement)
    compute = client.create_provider(str(uuid.uuid4()), HOST)  # Nova's, while we were away
    down.up = True
    api.app.state.sync_worker.wake()  # type: ignore[attr-defined]
    wait_for(lambda: len(client.get_tree(compute.uuid)) == TREE)


def test_operator_endpoints_need_2_6_an_admin_and_placement(
    make_api: MakeApi, conf: cfg.ConfigOpts, db: Database
) -> None:
    api = make_api("embedded")
    assert api.post("/v2/placement/sync", json={}).status_code == 404
    member = {**V2_6, "X-Roles": "member", "X-Project-Id": "p"}
    assert api.post("/v2/placement/sync", json={}, headers=member).status_code == 403
    response = api.post("/v2/placement/migrate-to-nested", json={}, headers=V2_6)
    assert response.status_code == 200  # nothing flat to move: every host just synced
    conf.set_override("mode", "disabled", "placement")
    with TestClient(create_app(conf, db), raise_server_exceptions=False) as plain:
        response = plain.post("/v2/placement/sync", json={}, headers=V2_6)
        assert response.status_code == 409 and "disabled" in response.json()["errors"][0]["detail"]


def test_migrate_to_nested_moves_every_host_it_can(
    make_api: MakeApi, conf: cfg.ConfigOpts, placement: adapter.Adapter
) -> None:
    hosts = (HOST, "host-2")
    conf.set_override("nested", False, "placement")
    flat = make_api("embedded")
    for host in hosts:
        response = flat.put(f"/v2/hosts/{host}/report", json=report_body(conf, host), headers=V2_6)
        assert response.status_code == 200
    client = PlacementClient(placement)

    def flat_inventory(host: str) -> set[str]:
        compute = client.find_provider(host)
        return set() if compute is None else set(client.get_inventories(compute.uuid)[1])

    wait_for(lambda: all("CUSTOM_ACCELERATOR_FPGA" in flat_inventory(h) for h in hosts))
    flat.app.state.sync_worker.stop()  # type: ignore[attr-defined]
    computes = {h: p.uuid for h in hosts if (p := client.find_provider(h)) is not None}
    consumer = str(uuid.uuid4())
    allocate(placement, computes[HOST], consumer)  # an instance still on host-1
    conf.set_override("nested", True, "placement")
    nested = make_api("embedded")

    def migrate() -> dict[str, dict[str, Any]]:
        response = nested.post("/v2/placement/migrate-to-nested", json={}, headers=V2_6)
        assert response.status_code == 200, response.text
        return {h["hostname"]: h for h in response.json()["hosts"]}

    first = migrate()
    assert first[HOST]["actions"] == []
    assert "still has allocations" in first[HOST]["errors"][0]
    assert "CUSTOM_ACCELERATOR_FPGA" in flat_inventory(HOST)
    assert first["host-2"]["errors"] == [] and first["host-2"]["actions"][0]["op"] == "remove_flat"
    assert flat_inventory("host-2") == set() and len(client.get_tree(computes["host-2"])) == TREE
    placement.delete(f"/allocations/{consumer}", microversion="1.39")
    second = migrate()
    assert second[HOST]["errors"] == [] and second[HOST]["actions"][0]["op"] == "remove_flat"
    assert len(client.get_tree(computes[HOST])) == TREE
    assert second["host-2"] == {"hostname": "host-2", "skipped": False, "actions": [], "errors": []}


def test_disabling_a_device_reserves_it_in_placement(
    make_api: MakeApi, conf: cfg.ConfigOpts, placement: adapter.Adapter
) -> None:
    api = make_api("embedded")
    body = report_body(conf)
    assert api.put(f"/v2/hosts/{HOST}/report", json=body, headers=V2_6).status_code == 200
    devices = api.get("/v2/devices", params={"type": "FPGA"}, headers=V2_6).json()["devices"]
    device = sorted(devices, key=lambda d: d["pci_address"])[0]
    client = PlacementClient(placement)

    from acceleron.placement import names

    region = names.provider_uuid(HOST, device["pci_address"], "region0")

    def reserved() -> int | None:
        """What the card's region0 (2 accelerators; regions are not pooled) has reserved."""
        if client.get_provider(region) is None:
            return None
        # The provider exists a moment before its inventory (the worker is mid-sync).
        inventory = client.get_inventories(region)[1].get("CUSTOM_ACCELERATOR_FPGA")
        return None if inventory is None else inventory.reserved

    wait_for(lambda: reserved() == 0)
    member = {**V2_6, "X-Roles": "member", "X-Project-Id": "p"}
    assert api.post(f"/v2/devices/{device['uuid']}/disable", headers=member).status_code == 403
    response = api.post(f"/v2/devices/{device['uuid']}/disable", headers=V2_6)
    assert response.status_code == 200 and response.json()["status"] == "maintaining"
    wait_for(lambda: reserved() == 2)
    response = api.post(f"/v2/devices/{device['uuid']}/enable", headers=V2_6)
    assert response.json()["status"] == "enabled"
    wait_for(lambda: reserved() == 0)
    assert api.post(f"/v2/devices/{uuid.uuid4()}/enable", headers=V2_6).status_code == 404


def test_a_host_that_left_a_device_out_is_not_synced_and_says_why(
    make_api: MakeApi, conf: cfg.ConfigOpts, capsys: pytest.CaptureFixture[str]
) -> None:
    """The API (2.10) and ``acceleron host list/show`` show the error; deployables show
    their memory type from 2.10."""
    import json

    from acceleron.cli.main import main
    from tests.fixtures.server import serve

    api = make_api("embedded")
    body = report_body(conf)
    body["devices"][0]["vendor_name"] = "Intel/Altera"  # no trait can be made of it
    assert api.put(f"/v2/hosts/{HOST}/report", json=body, headers=V2_6).status_code == 200
    latest = {"OpenStack-API-Version": "accelerator 2.10"}

    def host(headers: dict[str, str]) -> dict[str, Any]:
        shown: dict[str, Any] = api.get(f"/v2/hosts/{HOST}", headers=headers).json()["host"]
        return shown

    wait_for(lambda: host(latest)["placement_errors"] != [])
    shown = host(latest)
    assert shown["placement_synced"] is False
    [error] = shown["placement_errors"]
    assert "'Intel/Altera'" in error and body["devices"][0]["pci_address"] in error
    older = host({"OpenStack-API-Version": "accelerator 2.9"})
    assert older["placement_synced"] is False and "placement_errors" not in older
    with serve(api.app) as url:  # type: ignore[arg-type]
        assert (
            main(
                [
                    "--os-url",
                    url,
                    "host",
                    "list",
                    "-f",
                    "value",
                    "-c",
                    "hostname",
                    "-c",
                    "placement_synced",
                    "-c",
                    "placement_errors",
                ]
            )
            == 0
        )
        out = capsys.readouterr().out
        assert out.startswith(f"{HOST} False ") and "Intel/Altera" in out
        assert main(["--os-url", url, "host", "show", HOST, "-f", "json"]) == 0
        assert json.loads(capsys.readouterr().out)["placement_errors"] == [error]
    gpus = api.get("/v2/deployables", params={"kind": "mig_profile"}, headers=latest).json()
    assert {d["memory_type"] for d in gpus["deployables"]} == {"HBM"}
    before = api.get("/v2/deployables", params={"kind": "mig_profile"}, headers=V2_6).json()
    assert "memory_type" not in before["deployables"][0]
