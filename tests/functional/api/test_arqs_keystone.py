"""Keystone mode: binding, unbinding and deleting bound ARQs need a service token."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from keystonemiddleware.fixture import AuthTokenFixture
from sqlalchemy import select
from tests.fixtures.keystone import token

from acceleron import conf as confmod
from acceleron.api.app import create_app
from acceleron.db.models import Deployable, table
from acceleron.db.session import Database
from acceleron.drivers.fake import FakeDriver
from acceleron.report import HostReport
from acceleron.service import device_profiles, inventory

PATH = "/v2/accelerator_requests"


@pytest.fixture
def api(tmp_path: Path, sqlite_db: Database, tokens: AuthTokenFixture) -> Iterator[TestClient]:
    config = tmp_path / "acceleron.conf"
    config.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path}\nauth_strategy = keystone\nhost = host-1\n"
        "[keystone_authtoken]\nwww_authenticate_uri = http://keystone.test/identity\n"
    )
    conf = confmod.load([], config_files=[str(config)])
    devices = tuple(FakeDriver(conf, Path("/")).discover())
    inventory.reconcile(sqlite_db, HostReport("host-1", "1", devices))
    device_profiles.create(
        sqlite_db, name="dp", groups=[{"resources:CUSTOM_ACCELERATOR_FPGA": "1"}]
    )
    with TestClient(create_app(conf, sqlite_db), raise_server_exceptions=False) as client:
        yield client


def test_bound_requests_need_the_compute_services_token(
    api: TestClient, sqlite_db: Database, tokens: AuthTokenFixture
) -> None:
    user = token(tokens, "member")
    with_service = {
        **user,
        "X-Service-Token": token(tokens, "service", project="service")["X-Auth-Token"],
    }
    arq = api.post(PATH, json={"device_profile_name": "dp"}, headers=user).json()["arqs"][0]
    with sqlite_db.reader() as conn:
        rp = (
            conn.execute(
                select(table(Deployable).c.rp_uuid).where(table(Deployable).c.kind == "region")
            )
            .scalars()
            .first()
        )
    ops = [
        {"path": "/hostname", "op": "add", "value": "host-1"},
        {"path": "/device_rp_uuid", "op": "add", "value": rp},
        {"path": "/instance_uuid", "op": "add", "value": str(uuid.uuid4())},
    ]
    one = f"{PATH}/{arq['uuid']}"
    # The collection PATCH and the request's own (openstacksdk's) follow one rule.
    for path in (PATH, one):
        refused = api.patch(path, json={arq["uuid"]: ops}, headers=user)
        assert refused.status_code == 403 and "service token" in refused.text
        assert api.patch(path, json={arq["uuid"]: ops}, headers=with_service).status_code == 202
        assert api.delete(one, headers=user).status_code == 403
        unbind = {arq["uuid"]: [{"path": "/hostname", "op": "remove"}]}
        assert api.patch(path, json=unbind, headers=user).status_code == 403
        assert api.patch(path, json=unbind, headers=with_service).status_code == 202
    assert api.delete(one, headers=user).status_code == 204  # unbound now


def test_with_a_service_token_an_instances_requests_are_found_in_any_project(
    api: TestClient, tokens: AuthTokenFixture
) -> None:
    """Nova makes an instance's requests with the token of whoever runs the operation (an
    admin evacuating it) and deletes them with the owner's, beside its service token."""
    admin = token(tokens, "admin", "member", project="admin-project")
    owner = token(tokens, "member", project="owner-project")
    nova = {**owner, "X-Service-Token": token(tokens, "service", project="service")["X-Auth-Token"]}
    made = api.post(PATH, json={"device_profile_name": "dp"}, headers=admin).json()["arqs"][0]
    # Not yet bound to an instance: look it up by its uuid.
    assert api.get(f"{PATH}/{made['uuid']}", headers=owner).status_code == 404
    assert api.get(f"{PATH}/{made['uuid']}", headers=nova).status_code == 200
    listed = api.get(PATH, headers=owner).json()["arqs"]
    assert [a["uuid"] for a in listed] == []  # the owner alone still sees nothing
    assert api.delete(f"{PATH}?arqs={made['uuid']}", headers=nova).status_code == 204
    assert api.get(f"{PATH}/{made['uuid']}", headers=admin).status_code == 404
