"""Keystone mode: tokens validated by keystonemiddleware (with its own test fixture)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from keystonemiddleware.fixture import AuthTokenFixture

from acceleron import conf as confmod
from acceleron.api.app import create_app
from acceleron.api.auth import AuthMisconfigured
from acceleron.db.session import Database

PATH = "/v2/device_profiles"
GROUPS = [{"resources:FPGA": "1"}]


@pytest.fixture
def tokens() -> Iterator[AuthTokenFixture]:
    fixture = AuthTokenFixture()
    fixture.setUp()
    yield fixture
    fixture.cleanUp()


@pytest.fixture
def keystone_api(
    tmp_path: Path, sqlite_db: Database, tokens: AuthTokenFixture
) -> Iterator[TestClient]:
    config = tmp_path / "acceleron.conf"
    config.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path}\nauth_strategy = keystone\n"
        "[keystone_authtoken]\nwww_authenticate_uri = http://keystone.test/identity\n"
    )
    conf = confmod.load([], config_files=[str(config)])
    with TestClient(create_app(conf, sqlite_db), raise_server_exceptions=False) as client:
        yield client


def token(tokens: AuthTokenFixture, *roles: str, project: str = "p1") -> dict[str, str]:
    token_id = uuid.uuid4().hex
    tokens.add_token_data(token_id, project_id=project, user_id="u1", role_list=list(roles))
    return {"X-Auth-Token": token_id}


def test_version_documents_need_no_token(keystone_api: TestClient) -> None:
    assert keystone_api.get("/").status_code == 200
    assert keystone_api.get("/v2").status_code == 200


def test_no_token_or_a_bad_one_is_401(keystone_api: TestClient) -> None:
    for headers in ({}, {"X-Auth-Token": "not-a-token"}):
        response = keystone_api.get(PATH, headers=headers)
        assert response.status_code == 401
        assert response.json()["errors"][0]["code"] == "acceleron.unauthorized"
        assert "www-authenticate" in response.headers


def test_roles_come_from_the_token_not_from_headers(
    keystone_api: TestClient, tokens: AuthTokenFixture
) -> None:
    member = token(tokens, "member")
    assert keystone_api.get(PATH, headers=member).status_code == 200
    # A member cannot make itself an admin with the headers noauth trusts.
    spoofed = {**member, "X-Roles": "admin"}
    response = keystone_api.post(PATH, json=[{"name": "x", "groups": GROUPS}], headers=spoofed)
    assert response.status_code == 403
    admin = token(tokens, "admin", "member", "reader")
    created = keystone_api.post(PATH, json=[{"name": "x", "groups": GROUPS}], headers=admin)
    assert created.status_code == 201
    reader = token(tokens, "reader", project="p2")
    assert keystone_api.get(PATH, headers=reader).json()["device_profiles"][0]["name"] == "x"


def test_keystone_mode_needs_www_authenticate_uri(tmp_path: Path, sqlite_db: Database) -> None:
    conf = confmod.load([], config_files=[], overrides={"DEFAULT": {"auth_strategy": "keystone"}})
    with pytest.raises(AuthMisconfigured, match="www_authenticate_uri"):
        create_app(conf, sqlite_db)
