"""os_acc without a scheduler, in the reference cloud: the compute host's service
credentials (Keystone, role service) claim the host's accelerators for an instance of
another project (microversion 2.15's hostname), and unplug releases them."""

from __future__ import annotations

import uuid
from typing import Any

import openstack
from keystoneauth1 import adapter
from tests.fixtures.e2e import LATEST, allocations, arqs, provider

from acceleron.client.http import AcceleronClient
from os_acc import Connector

HOST = "compute-1"
PLACEMENT = {"OpenStack-API-Version": "placement 1.14"}


def test_plug_claims_this_hosts_accelerators_for_the_instance(
    admin: Any, member: Any, cloud: Any
) -> None:
    name = f"e2e-osacc-{uuid.uuid4().hex[:6]}"
    made = admin.accelerator.post(
        "/device_profiles",
        headers=LATEST,
        json=[{"name": name, "groups": [{"resources:CUSTOM_ACCELERATOR_QAT": "1"}]}],
    )
    assert made.status_code == 201, made.text
    service = openstack.connect(cloud="acceleron-service")
    api = adapter.Adapter(
        service.session,
        service_type="accelerator",
        interface="public",
        region_name=service.config.region_name,
    )
    connector = Connector(AcceleronClient(api), HOST, timeout=120, poll=0.2)
    vm = {"uuid": str(uuid.uuid4()), "name": "e2e-os-acc", "project_id": member.current_project_id}
    try:
        (plugged,) = connector.plug(vm, None, {"accel:device_profile": name})
        assert plugged["attach_target"] == "VM" and plugged["attach_handle_uuid"]
        (arq,) = arqs(admin, vm["uuid"])
        assert (arq["state"], arq["hostname"]) == ("Bound", HOST)
        assert arq["project_id"] == member.current_project_id
        held = allocations(admin, vm["uuid"])
        assert list(held) == [arq["device_rp_uuid"]]
        nodes = admin.placement.get("/resource_providers", params={"name": HOST}, headers=PLACEMENT)
        (node,) = nodes.json()["resource_providers"]
        assert provider(admin, arq["device_rp_uuid"])["root_provider_uuid"] == node["uuid"]
        # The instance's project sees its claim; another project sees nothing.
        path = f"/claims/{vm['uuid']}"
        assert member.accelerator.get(path, headers=LATEST).json()["state"] == "bound"
        alt = openstack.connect(cloud="acceleron-alt-member")
        assert alt.accelerator.get(path, headers=LATEST).status_code == 404
        assert connector.unplug(vm) == 1
        assert allocations(admin, vm["uuid"]) == {}
        assert arqs(admin, vm["uuid"]) == []
        assert member.accelerator.get(path, headers=LATEST).status_code == 404
    finally:
        connector.unplug(vm)
        admin.accelerator.delete(f"/device_profiles/{name}", headers=LATEST)
