"""Quotas from Keystone's unified limits: the cloud's Acceleron runs with ``[quota]
driver = unified_limits`` and the accelerator service's registered limits (100 of each
class, cloud/launcher.py); a project limit set in Keystone is what the API, the CLI,
claims and Nova's boots meet (docs/quotas.md)."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openstack
import pytest
from cloud.base import REGION, Cloud
from tests.fixtures.e2e import (
    Flavors,
    allocations,
    arqs,
    check_gone,
    delete_and_wait,
    wait_status,
)

QUOTAS = {"OpenStack-API-Version": "accelerator 2.14"}
CLAIMS = {"OpenStack-API-Version": "accelerator 2.12"}
FPGA = "CUSTOM_ACCELERATOR_FPGA"
ACCELERON = str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "acceleron")


@dataclass
class Tenant:
    """A project of its own (so that its limit touches no other test) and its member."""

    id: str
    username: str
    password: str
    conn: openstack.connection.Connection


@pytest.fixture
def tenant(cloud: Cloud, admin: Any) -> Iterator[Tenant]:
    name = f"e2e-quota-{uuid.uuid4().hex[:6]}"
    project = admin.identity.create_project(name=name, domain_id="default")
    password = secrets.token_urlsafe(12)
    user = admin.identity.create_user(
        name=name, password=password, domain_id="default", default_project_id=project.id
    )
    member = admin.identity.find_role("member", ignore_missing=False)
    admin.identity.assign_project_role_to_user(project, user, member)
    conn = openstack.connect(
        auth_url=cloud.auth_url,
        username=name,
        password=password,
        project_id=project.id,
        user_domain_name="Default",
        region_name=REGION,
        load_yaml_config=False,
        load_envvars=False,
    )
    yield Tenant(project.id, name, password, conn)
    for limit in admin.identity.limits(project_id=project.id):
        admin.identity.delete_limit(limit)
    admin.identity.delete_user(user)
    admin.identity.delete_project(project)


def set_limit(admin: Any, project: str, resource: str, count: int) -> None:
    """A project limit in Keystone, against the accelerator service."""
    (service,) = admin.identity.services(type="accelerator")
    admin.identity.create_limit(
        service_id=service.id,
        project_id=project,
        region_id=REGION,
        resource_name=resource,
        resource_limit=count,
    )


def quota(conn: Any, project: str) -> dict[str, Any]:
    response = conn.accelerator.get(f"/quotas/{project}", headers=QUOTAS)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()["quota_set"]
    return body


def quota_cli(cloud: Cloud, tenant: Tenant) -> list[dict[str, Any]]:
    """``acceleron quota show`` with the tenant's credentials (OS_* variables)."""
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/tmp"),
        "OS_AUTH_URL": cloud.auth_url,
        "OS_USERNAME": tenant.username,
        "OS_PASSWORD": tenant.password,
        "OS_PROJECT_ID": tenant.id,
        "OS_USER_DOMAIN_NAME": "Default",
        "OS_REGION_NAME": REGION,
    }
    done = subprocess.run(
        [ACCELERON, "quota", "show", "-f", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    rows: list[dict[str, Any]] = json.loads(done.stdout)
    return rows


def boot(conn: Any, flavor: str, image: str) -> str:
    """A server of the connection's project (no network), not waited for; its id."""
    found = conn.compute.find_flavor(flavor, ignore_missing=False)
    server = conn.compute.create_server(
        name=f"e2e-{uuid.uuid4().hex[:6]}", flavor_id=found.id, image_id=image, networks="none"
    )
    server_id: str = server.id
    return server_id


def refused(response: Any, usage: int) -> None:
    """A 403 acceleron.quota_exceeded naming the limit (1), the usage and the request."""
    assert response.status_code == 403, response.text
    body = response.json()
    (error,) = body["errors"]
    assert error["code"] == "acceleron.quota_exceeded", body
    assert f"class:{FPGA}" in error["detail"], body
    assert f"limit 1, usage {usage}, requested 1" in error["detail"], body


def test_a_keystone_project_limit_is_enforced(
    cloud: Cloud, admin: Any, tenant: Tenant, flavors: Flavors, image: str
) -> None:
    """class:CUSTOM_ACCELERATOR_FPGA = 1 for a project, in Keystone: the API and the CLI
    show it; the project's first accelerator is claimed, the second is refused with
    nothing left behind, through the API (a claim, a request) and through Nova."""
    flavor = flavors.make([{f"resources:{FPGA}": "1"}])
    set_limit(admin, tenant.id, f"class:{FPGA}", 1)
    shown = quota(tenant.conn, tenant.id)
    assert shown["driver"] == "unified_limits"
    limits = {q["resource"]: (q["limit"], q["usage"]) for q in shown["quotas"]}
    assert limits[f"class:{FPGA}"] == (1, 0), shown
    rows = quota_cli(cloud, tenant)
    assert {"resource": f"class:{FPGA}", "limit": 1, "usage": 0} in rows, rows

    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    made = tenant.conn.accelerator.post(
        "/claims", json={"device_profile_name": flavor, "consumer_uuid": first}, headers=CLAIMS
    )
    assert made.status_code == 201, made.text
    try:
        assert [a["state"] for a in arqs(admin, first)] == ["Bound"]
        assert quota(tenant.conn, tenant.id)["quotas"][0]["usage"] == 1

        # A second claim: refused, no request, no allocation, no claim left.
        again = tenant.conn.accelerator.post(
            "/claims",
            json={"device_profile_name": flavor, "consumer_uuid": second},
            headers=CLAIMS,
        )
        refused(again, usage=1)
        assert arqs(admin, second) == []
        assert allocations(admin, second) == {}
        assert tenant.conn.accelerator.get(f"/claims/{second}", headers=CLAIMS).status_code == 404

        # A plain request: refused at creation.
        before = tenant.conn.accelerator.get("/accelerator_requests").json()["arqs"]
        created = tenant.conn.accelerator.post(
            "/accelerator_requests", json={"device_profile_name": flavor}
        )
        refused(created, usage=1)
        after = tenant.conn.accelerator.get("/accelerator_requests").json()["arqs"]
        assert [a["uuid"] for a in after] == [a["uuid"] for a in before]

        # Through Nova: its conductor asks Acceleron for the requests and is refused.
        # Nova 34 keeps only the status of the answer: the server goes to ERROR with
        # "Failed to create accelerator requests: Invalid response from Cyborg:
        # <Response [403]>" (the message naming the limit stays in Acceleron's answer).
        server = wait_status(admin, boot(tenant.conn, flavor, image), "ACTIVE")
        assert server.status == "ERROR", server
        fault = server.fault["message"]
        assert "Failed to create accelerator requests" in fault, server.fault
        assert "403" in fault, server.fault
        assert arqs(admin, server.id) == []
        # Nova keeps the scheduler's allocation of a server in ERROR (the accelerator's
        # included) until the server is deleted: its own doing, not Acceleron's.
        delete_and_wait(tenant.conn, server.id)
        deadline = time.monotonic() + 60
        while allocations(admin, server.id):  # Nova finishes a delete a little later
            assert time.monotonic() < deadline, allocations(admin, server.id)
            time.sleep(1)
        rows = quota_cli(cloud, tenant)
        assert {"resource": f"class:{FPGA}", "limit": 1, "usage": 1} in rows, rows
    finally:
        released = tenant.conn.accelerator.delete(f"/claims/{first}", headers=CLAIMS)
        assert released.status_code == 204, released.text
    check_gone(admin, first, second)
    assert quota(tenant.conn, tenant.id)["quotas"][0]["usage"] == 0
