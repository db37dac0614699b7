"""Keystone mode: tokens validated by keystonemiddleware (with its own test fixture),
and policy rules overridden by a policy file."""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from keystonemiddleware.fixture import AuthTokenFixture
from tests.fixtures.keystone import keystone_client, token

from acceleron import conf as confmod
from acceleron.api.app import create_app
from acceleron.api.auth import AuthMisconfigured
from acceleron.db.session import Database

PATH = "/v2/device_profiles"
GROUPS = [{"resources:FPGA": "1"}]


@pytest.fixture
def keystone_api(
    tmp_path: Path, sqlite_db: Database, tokens: AuthTokenFixture
) -> Iterator[TestClient]:
    with keystone_client(tmp_path, sqlite_db) as client:
        yield client


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


def test_the_embedded_placement_takes_keystone_tokens_not_the_word_admin(
    tmp_path: Path, sqlite_db: Database, tokens: AuthTokenFixture, placement: Any
) -> None:
    """Under Keystone, the all-in-one's Placement is not open to its noauth2 token."""
    extra = "[placement]\nmode = embedded\nembedded_connection = sqlite://\n"
    path = "/placement/resource_providers"
    with keystone_client(tmp_path, sqlite_db, extra=extra) as client:
        assert client.get("/placement/").status_code == 200  # the version document
        for headers in ({}, {"X-Auth-Token": "admin"}):
            assert client.get(path, headers=headers).status_code == 401
        refused = client.get(path, headers=token(tokens, "member", "reader"))
        assert refused.status_code == 403
        assert "acceleron:placement:embedded" in refused.json()["errors"][0]["detail"]
        for role in ("admin", "service"):
            allowed = client.get(path, headers=token(tokens, role))
            assert allowed.status_code == 200, allowed.text
            assert allowed.json() == {"resource_providers": []}
        created = client.post(path, json={"name": "rp"}, headers=token(tokens, "service"))
        assert created.status_code in (200, 201), created.text


def test_keystone_mode_needs_www_authenticate_uri(tmp_path: Path, sqlite_db: Database) -> None:
    conf = confmod.load([], config_files=[], overrides={"DEFAULT": {"auth_strategy": "keystone"}})
    with pytest.raises(AuthMisconfigured, match="www_authenticate_uri"):
        create_app(conf, sqlite_db)


def test_a_policy_file_overrides_the_rules_it_names(
    tmp_path: Path, sqlite_db: Database, tokens: AuthTokenFixture
) -> None:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text('"acceleron:device_profile:create": "role:member"\n')
    extra = f"[oslo_policy]\npolicy_file = {policy_file}\n"
    member = token(tokens, "member")
    with keystone_client(tmp_path, sqlite_db, extra=extra) as client:
        created = client.post(PATH, json=[{"name": "x", "groups": GROUPS}], headers=member)
        assert created.status_code == 201, created.text
        # Rules the file does not name keep their defaults: deleting is still for admins.
        refused = client.delete(f"{PATH}/x", headers=member)
        assert refused.status_code == 403
        assert "acceleron:device_profile:delete" in refused.json()["errors"][0]["detail"]


def closed_port() -> int:
    """A local port nothing listens on (it was free a moment ago)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_keystone_unreachable_is_a_503_not_a_401_or_500(
    tmp_path: Path, sqlite_db: Database
) -> None:
    keystone = f"http://127.0.0.1:{closed_port()}/identity"
    extra = (
        f"auth_type = password\nauth_url = {keystone}\nusername = acceleron\n"
        "password = secret\nproject_name = service\nuser_domain_id = default\n"
        "project_domain_id = default\n"
    )
    with keystone_client(tmp_path, sqlite_db, keystone, extra) as client:
        response = client.get(PATH, headers={"X-Auth-Token": uuid.uuid4().hex})
    assert response.status_code == 503
    body = response.json()
    error = body["errors"][0]
    assert error["code"] == "acceleron.service_unavailable"
    assert error["detail"].startswith("Cannot validate the token with Keystone right now")
    assert json.loads(body["error_message"])["faultstring"] == error["detail"]
    assert error["request_id"] == response.headers["x-openstack-request-id"]


def test_the_embedded_placement_follows_its_policy_rule(
    tmp_path: Path, sqlite_db: Database, tokens: AuthTokenFixture, placement: Any
) -> None:
    """Who may call the embedded Placement is a policy rule like any other: an operator's
    policy file can open it to a role of its own, or close it to services."""
    rules = tmp_path / "policy.yaml"
    rules.write_text('"acceleron:placement:embedded": "role:placement_reader"\n')
    extra = (
        "[placement]\nmode = embedded\nembedded_connection = sqlite://\n"
        f"[oslo_policy]\npolicy_file = {rules}\n"
    )
    path = "/placement/resource_providers"
    with keystone_client(tmp_path, sqlite_db, extra=extra) as client:
        assert client.get(path, headers=token(tokens, "service")).status_code == 403
        allowed = client.get(path, headers=token(tokens, "placement_reader"))
        assert allowed.status_code == 200, allowed.text
