"""Device health and maintenance, end to end on the real Placement and every database:
a fault reported takes the inventory out (reserved), its clearing puts it back; binds
to an unhealthy or maintained device are refused unless tolerated; bound requests show
the condition; the API shows it all from 2.13."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from keystoneauth1 import adapter
from oslo_config import cfg
from sqlalchemy import select

from acceleron.db.models import Deployable, Device, table
from acceleron.db.session import Database
from acceleron.placement import names
from acceleron.placement.client import PlacementClient
from acceleron.service import device_profiles, inventory
from acceleron.service.publish import Syncer
from acceleron.vocabulary import Health
from tests.fixtures.fake_host import HOST, host_report, syncer
from tests.fixtures.placement import CountingAdapter

DEVICES, DEPLOYABLES = table(Device), table(Deployable)
V2_13 = {"OpenStack-API-Version": "accelerator 2.13"}
V2_12_OLD = {"OpenStack-API-Version": "accelerator 2.9"}
PATH = "/v2/accelerator_requests"
FPGA = {"resources:CUSTOM_ACCELERATOR_FPGA": "1", "trait:CUSTOM_PROGRAMMABLE": "required"}


def first_fpga(db: Database) -> Any:
    with db.reader() as conn:
        device = conn.execute(
            select(DEVICES).where(DEVICES.c.type == "FPGA").order_by(DEVICES.c.pci_address)
        ).first()
        assert device is not None
        mine = DEPLOYABLES.c.device_id == device.id
        regions = list(conn.execute(select(DEPLOYABLES).where(mine).order_by(DEPLOYABLES.c.key)))
    return device, regions


def reserved(placement: adapter.Adapter, rp: str) -> bool:
    """Whether the provider's whole inventory is reserved (nothing can land on it)."""
    _, invs = PlacementClient(placement).get_inventories(rp)
    inv = invs["CUSTOM_ACCELERATOR_FPGA"]
    assert inv.reserved in (0, inv.total)
    return inv.reserved == inv.total


@pytest.fixture
def synced(db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter) -> Syncer:
    inventory.reconcile(db, host_report(conf))
    sync = syncer(db, counted)
    sync.sync_host(HOST)
    return sync


def test_an_unhealthy_device_is_reserved_then_released_by_itself(
    db: Database, conf: cfg.ConfigOpts, placement: adapter.Adapter, synced: Syncer
) -> None:
    device, regions = first_fpga(db)
    assert [reserved(placement, r.rp_uuid) for r in regions] == [False, False]
    sick = {device.pci_address: Health("unhealthy", "PCIe AER: 1 fatal error(s)")}
    assert inventory.reconcile(db, host_report(conf, sick)).changed
    synced.sync_pending()
    assert [reserved(placement, r.rp_uuid) for r in regions] == [True, True]
    device, _ = first_fpga(db)
    assert (device.health, device.health_reason) == ("unhealthy", "PCIe AER: 1 fatal error(s)")
    first_seen = device.health_since
    inventory.reconcile(db, host_report(conf, sick))  # seen again: the time stays
    assert first_fpga(db)[0].health_since == first_seen
    inventory.reconcile(db, host_report(conf))  # the fault cleared
    synced.sync_pending()
    assert [reserved(placement, r.rp_uuid) for r in regions] == [False, False]
    assert (first_fpga(db)[0].health, first_fpga(db)[0].health_reason) == ("healthy", None)


def test_a_fault_scoped_to_one_region_reserves_only_that_region(
    db: Database, conf: cfg.ConfigOpts, placement: adapter.Adapter, synced: Syncer
) -> None:
    device, regions = first_fpga(db)
    port = Health(deployables={regions[1].key: Health("unhealthy", "port errors 0x10")})
    inventory.reconcile(db, host_report(conf, {device.pci_address: port}))
    synced.sync_pending()
    assert [reserved(placement, r.rp_uuid) for r in regions] == [False, True]
    assert first_fpga(db)[1][1].health == "unhealthy"


def test_a_degraded_device_stays_schedulable(
    db: Database, conf: cfg.ConfigOpts, placement: adapter.Adapter, synced: Syncer
) -> None:
    device, regions = first_fpga(db)
    inventory.reconcile(db, host_report(conf, {device.pci_address: Health("degraded", "x")}))
    synced.sync_pending()
    assert not reserved(placement, regions[0].rp_uuid)


def bind_body(arq: str, rp: str, instance: str) -> dict[str, Any]:
    return {
        arq: [
            {"path": "/hostname", "op": "add", "value": HOST},
            {"path": "/device_rp_uuid", "op": "add", "value": rp},
            {"path": "/instance_uuid", "op": "add", "value": instance},
        ]
    }


def new_arq(api: TestClient, profile: str) -> str:
    response = api.post(PATH, json={"device_profile_name": profile})
    assert response.status_code == 201, response.text
    return str(response.json()["arqs"][0]["uuid"])


def test_binds_health_and_the_api(
    api: TestClient, db: Database, conf: cfg.ConfigOpts, synced: Syncer
) -> None:
    device, regions = first_fpga(db)
    device_profiles.create(db, name="fpga", groups=[FPGA])
    bound = new_arq(api, "fpga")
    assert (
        api.patch(PATH, json=bind_body(bound, regions[0].rp_uuid, str(uuid.uuid4()))).status_code
        == 202
    )
    sick = {device.pci_address: Health("unhealthy", "GPU fell off the bus")}
    inventory.reconcile(db, host_report(conf, sick))

    # A request bound before the fault stays Bound and shows it.
    arq = api.get(f"{PATH}/{bound}", headers=V2_13).json()
    assert arq["state"] == "Bound"
    assert arq["health"] == {"state": "unhealthy", "reason": "GPU fell off the bus"}
    assert "health" not in api.get(f"{PATH}/{bound}").json()

    # A new bind is refused, clearly.
    refused = api.patch(
        PATH, json=bind_body(new_arq(api, "fpga"), regions[1].rp_uuid, str(uuid.uuid4()))
    )
    assert refused.status_code == 409
    assert refused.json()["errors"][0]["code"] == "acceleron.unhealthy"
    assert "GPU fell off the bus" in refused.json()["errors"][0]["detail"]

    # The device's fields, filter and older words.
    shown = api.get(f"/v2/devices/{device.uuid}", headers=V2_13).json()
    assert (shown["health"], shown["health_reason"]) == ("unhealthy", "GPU fell off the bus")
    assert shown["health_since"] is not None
    assert api.get(f"/v2/devices/{device.uuid}", headers=V2_12_OLD).json()["health"] == "failed"
    listed = api.get("/v2/devices", params={"health": "degraded,unhealthy"}, headers=V2_13)
    assert [d["uuid"] for d in listed.json()["devices"]] == [device.uuid]
    assert api.get("/v2/devices", params={"health": "sick"}, headers=V2_13).status_code == 400
    assert api.get("/v2/devices", params={"health": "unhealthy"}).status_code == 400
    binds = api.get(f"/v2/devices/{device.uuid}/binds", headers=V2_13).json()
    assert [b["arq_uuid"] for b in binds["binds"]] == [bound]


def test_maintenance_drain_and_tolerations(
    api: TestClient,
    db: Database,
    conf: cfg.ConfigOpts,
    placement: adapter.Adapter,
    synced: Syncer,
) -> None:
    device, regions = first_fpga(db)
    device_profiles.create(db, name="fpga", groups=[FPGA])
    held = new_arq(api, "fpga")
    assert (
        api.patch(PATH, json=bind_body(held, regions[0].rp_uuid, str(uuid.uuid4()))).status_code
        == 202
    )
    url = f"/v2/devices/{device.uuid}/maintenance"
    assert api.post(url, json={"maintenance": True}).status_code == 404  # before 2.13
    assert api.post(url, json={"maintenance": True}, headers=V2_13).status_code == 400  # why?
    answer = api.post(url, json={"maintenance": True, "reason": "burn-in: new HBM"}, headers=V2_13)
    assert answer.status_code == 200, answer.text
    shown = answer.json()
    assert (shown["status"], shown["maintenance_reason"]) == ("maintaining", "burn-in: new HBM")
    assert shown["maintenance_since"] is not None
    synced.sync_pending()
    assert [reserved(placement, r.rp_uuid) for r in regions] == [True, True]  # at once, by itself

    # Existing binds stay, new ones are refused.
    assert api.get(f"{PATH}/{held}").json()["state"] == "Bound"
    refused = api.patch(
        PATH, json=bind_body(new_arq(api, "fpga"), regions[1].rp_uuid, str(uuid.uuid4()))
    )
    assert refused.status_code == 409
    assert refused.json()["errors"][0]["code"] == "acceleron.in_maintenance"

    # A profile that tolerates the reason: the inventory is open to it, marked, and binds.
    device_profiles.create(db, name="burn", groups=[{**FPGA, "accel:tolerations": "Burn-In"}])
    synced.sync_pending()  # the profile marked the host in maintenance for the next pass
    assert [reserved(placement, r.rp_uuid) for r in regions] == [False, False]
    _, traits = PlacementClient(placement).get_traits(regions[1].rp_uuid)
    assert {names.MAINTENANCE, "CUSTOM_ACCELERON_MAINTENANCE_BURN_IN"} <= traits
    burn = new_arq(api, "burn")
    assert (
        api.patch(PATH, json=bind_body(burn, regions[1].rp_uuid, str(uuid.uuid4()))).status_code
        == 202
    )
    assert api.get(f"{PATH}/{burn}").json()["state"] == "Bound"

    # Drain: what is still bound; then back in service.
    binds = api.get(f"/v2/devices/{device.uuid}/binds", headers=V2_13).json()["binds"]
    assert sorted(b["arq_uuid"] for b in binds) == sorted([held, burn])
    off = api.post(url, json={"maintenance": False}, headers=V2_13).json()
    assert (off["status"], off["maintenance_reason"], off["maintenance_since"]) == (
        "enabled",
        None,
        None,
    )
    synced.sync_pending()
    _, traits = PlacementClient(placement).get_traits(regions[1].rp_uuid)
    assert names.MAINTENANCE not in traits


def test_a_tolerating_profile_coming_or_going_marks_the_hosts_in_maintenance(
    api: TestClient, db: Database, placement: adapter.Adapter, synced: Syncer
) -> None:
    """A profile that tolerates a reason, enabled, disabled or deleted, changes what the
    hosts in maintenance publish: each marks them for the sync's next pass. A profile
    tolerating nothing marks nothing."""
    device, regions = first_fpga(db)
    url = f"/v2/devices/{device.uuid}/maintenance"
    assert (
        api.post(url, json={"maintenance": True, "reason": "burn-in"}, headers=V2_13).status_code
        == 200
    )
    synced.sync_pending()

    def open_after_a_pass() -> list[bool]:
        synced.sync_pending()
        return [not reserved(placement, r.rp_uuid) for r in regions]

    device_profiles.create(db, name="plain", groups=[FPGA])
    assert [h for h in synced.sync_pending() if not h.skipped] == []
    device_profiles.create(db, name="burn", groups=[{**FPGA, "accel:tolerations": "burn-in"}])
    assert open_after_a_pass() == [True, True]
    device_profiles.update(db, "burn", enabled=False)
    assert open_after_a_pass() == [False, False]
    device_profiles.update(db, "burn", enabled=True)
    assert open_after_a_pass() == [True, True]
    device_profiles.delete_profiles(db, ["burn"])
    assert open_after_a_pass() == [False, False]


def test_one_region_in_maintenance(
    api: TestClient, db: Database, placement: adapter.Adapter, synced: Syncer
) -> None:
    _, regions = first_fpga(db)
    url = f"/v2/deployables/{regions[1].uuid}/maintenance"
    answer = api.post(url, json={"maintenance": True, "reason": "reflash"}, headers=V2_13)
    assert answer.status_code == 200, answer.text
    assert (answer.json()["status"], answer.json()["maintenance_reason"]) == (
        "maintaining",
        "reflash",
    )
    synced.sync_pending()
    assert [reserved(placement, r.rp_uuid) for r in regions] == [False, True]


def test_tolerations_are_checked(db: Database) -> None:
    from acceleron.exceptions import InvalidInput

    with pytest.raises(InvalidInput, match="maintenance reason names"):
        device_profiles.create(db, name="bad", groups=[{**FPGA, "accel:tolerations": "a b"}])


def test_the_agent_reports_a_fault_injected_in_the_fake_driver(
    live_api: str, tmp_path: Path
) -> None:
    import json

    import requests

    from tests.fixtures.host import agent_conf, make_agent

    host = f"compute-{uuid.uuid4().hex[:8]}"
    conf = agent_conf(tmp_path, live_api, host)
    agent = make_agent(conf)
    assert agent.report_once()
    address = agent.drivers[0].discover()[0].pci_address
    fault = {"state": "unhealthy", "reason": "injected", "deployables": {}}
    Path(conf.fake.state_file).write_text(json.dumps({"devices": {address: {"health": fault}}}))
    assert agent.report_once()
    listed = requests.get(
        f"{live_api}/v2/devices",
        headers=V2_13,
        timeout=10,
        params={"hostname": host, "health": "unhealthy"},
    ).json()
    assert [(d["pci_address"], d["health_reason"]) for d in listed["devices"]] == [
        (address, "injected")
    ]
