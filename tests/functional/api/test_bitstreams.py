"""/v2/bitstreams through HTTP, on SQLite, PostgreSQL and MariaDB (local store), and once
through a real Glance: two-step upload, look-ups, verified download, project scoping."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from fastapi.testclient import TestClient
from oslo_config import cfg
from tests.fixtures.answers import error
from tests.fixtures.bitstreams import ADMIN, PATH, V2_7, create, put_data, upload

from acceleron import conf as confmod
from acceleron.api.app import create_app
from acceleron.bitstreams.transfer import CHUNK_SIZE
from acceleron.db.session import Database

if TYPE_CHECKING:  # imported by pytest_plugins, so that pytest can rewrite its asserts
    from tests.fixtures.glance import GlanceServer

pytest_plugins = ["tests.fixtures.glance"]

V2_6 = {"OpenStack-API-Version": "accelerator 2.6"}
FUNCTION = "5d2e2f3c-8b9a-4c1d-9e0f-1a2b3c4d5e6f"
REGION = "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a"
OTHER_REGION = "0a1b2c3d-4e5f-4071-8293-a4b5c6d7e8f9"


def caller(roles: str, project: str) -> dict[str, str]:
    return {**V2_7, "X-Roles": roles, "X-Project-Id": project}


MEMBER_P1 = caller("member,reader", "p1")
READER_P1 = caller("reader", "p1")
MEMBER_P2 = caller("member,reader", "p2")
SERVICE = caller("service", "services")


def names(api: TestClient, headers: dict[str, str] = ADMIN, **params: str) -> list[str]:
    response = api.get(PATH, params=params, headers=headers)
    assert response.status_code == 200, response.text
    return [b["name"] for b in response.json()["bitstreams"]]


def stored_files(conf: cfg.ConfigOpts) -> list[str]:
    root = Path(conf.bitstreams.local_dir)
    return sorted(p.name for p in root.rglob("*") if p.is_file() and p.name != ".lock")


def test_upload_in_two_steps(api: TestClient, conf: cfg.ConfigOpts) -> None:
    created = create(
        api,
        vendor="8086",
        function_uuid=FUNCTION.replace("-", "").upper(),
        function_name="nlb0",
        region_type_uuid=REGION,
        properties={"accel:shell": "d5005"},
    )
    assert created["status"] == "queued"
    assert (created["size"], created["hash_algo"], created["hash_value"]) == (None, None, None)
    assert (created["function_uuid"], created["region_type_uuid"]) == (FUNCTION, REGION)
    assert (created["visibility"], created["project_id"]) == ("private", "admin")
    assert created["properties"] == {"accel:shell": "d5005"}
    href = f"http://testserver{PATH}/{created['uuid']}"
    assert created["links"] == [{"href": href, "rel": "self"}]
    data = b"\x00bitstream\xff" * 50_000
    response = put_data(api, created, data)
    assert response.status_code == 200, response.text
    active = response.json()
    assert (active["status"], active["size"], active["hash_algo"]) == (
        "active",
        len(data),
        "sha256",
    )
    assert active["hash_value"] == hashlib.sha256(data).hexdigest()
    assert active["updated_at"] is not None
    assert api.get(f"{PATH}/{created['uuid']}", headers=ADMIN).json() == active
    # The same bytes again, as another bitstream: fine, and stored once.
    again = upload(api, data, name="copy.gbs")
    assert again["hash_value"] == active["hash_value"] and again["uuid"] != active["uuid"]
    assert stored_files(conf) == [active["hash_value"]]
    # Data goes in once: other bytes make another bitstream.
    status, code, message = error(put_data(api, created, b"other"))
    assert (status, code) == (409, "acceleron.conflict") and "already" in message


def test_download_streams_the_verified_bytes(api: TestClient) -> None:
    data = bytes(range(256)) * (CHUNK_SIZE * 5 // 2 // 256)  # two and a half chunks
    made = upload(api, data)
    response = api.get(f"{PATH}/{made['uuid']}/data", headers=ADMIN)
    assert response.status_code == 200
    assert response.content == data
    assert response.headers["content-type"] == "application/octet-stream"
    assert response.headers["content-length"] == str(len(data))
    assert response.headers["x-bitstream-hash"] == f"sha256:{hashlib.sha256(data).hexdigest()}"
    empty = upload(api, b"", name="empty.gbs")
    assert api.get(f"{PATH}/{empty['uuid']}/data", headers=ADMIN).content == b""


def test_a_download_of_damaged_bytes_is_refused_before_its_first_byte(
    api: TestClient, conf: cfg.ConfigOpts
) -> None:
    data = b"good" * CHUNK_SIZE  # four chunks
    made = upload(api, data)
    damaged = b"evil" * CHUNK_SIZE
    (Path(conf.bitstreams.local_dir) / made["hash_value"]).write_bytes(damaged)
    status, code, message = error(api.get(f"{PATH}/{made['uuid']}/data", headers=ADMIN))
    assert (status, code) == (409, "acceleron.bitstream_corrupt")
    assert f"Bitstream {made['uuid']} ('nlb.gbs') is corrupt" in message
    assert made["hash_value"] in message and hashlib.sha256(damaged).hexdigest() in message


def test_an_upload_the_server_cannot_spool_is_a_503_naming_the_directory(
    api: TestClient, conf: cfg.ConfigOpts
) -> None:
    """A state_path this server may not write (here a file where the directory should
    be; under systemd, a read-only one: tests/functional/test_sandboxed_api.py) is the
    server's misconfiguration: 503 naming the directory and the option, not a 500."""
    queued = create(api)
    spool = Path(conf.state_path) / "upload-spool"
    spool.parent.mkdir(parents=True, exist_ok=True)
    spool.write_bytes(b"")  # not a directory
    try:
        status, code, message = error(put_data(api, queued, b"bytes"))
    finally:
        spool.unlink()
    assert (status, code) == (503, "acceleron.state_unwritable")
    assert f"cannot write to {spool} (" in message and "[DEFAULT] state_path" in message
    assert put_data(api, queued, b"bytes").status_code == 200


def test_projects_see_their_own_and_public_ones(api: TestClient) -> None:
    mine = upload(api, b"p1", MEMBER_P1, name="mine.gbs")
    assert (mine["project_id"], mine["visibility"]) == ("p1", "private")
    shared = upload(api, b"pub", ADMIN, name="shared.gbs", visibility="public")
    assert names(api, MEMBER_P1) == ["mine.gbs", "shared.gbs"]
    assert names(api, READER_P1) == ["mine.gbs", "shared.gbs"]
    assert names(api, MEMBER_P2) == ["shared.gbs"]
    assert names(api, ADMIN) == names(api, SERVICE) == ["mine.gbs", "shared.gbs"]
    # Another project's private bitstream does not exist for p2.
    for method, suffix in (("GET", ""), ("GET", "/data"), ("DELETE", "")):
        response = api.request(method, f"{PATH}/{mine['uuid']}{suffix}", headers=MEMBER_P2)
        assert error(response)[:2] == (404, "acceleron.not_found"), (method, suffix)
    # Agents (the service role) read and download every one.
    assert api.get(f"{PATH}/{mine['uuid']}/data", headers=SERVICE).content == b"p1"
    assert api.get(f"{PATH}/{shared['uuid']}/data", headers=MEMBER_P2).content == b"pub"


def test_delete(api: TestClient, conf: cfg.ConfigOpts) -> None:
    made = upload(api, b"bytes")
    queued = create(api, name="queued.gbs")
    assert api.delete(f"{PATH}/{made['uuid']}", headers=ADMIN).status_code == 204
    assert api.delete(f"{PATH}/{queued['uuid']}", headers=ADMIN).status_code == 204
    assert stored_files(conf) == []
    assert error(api.get(f"{PATH}/{made['uuid']}", headers=ADMIN))[:2] == (
        404,
        "acceleron.not_found",
    )
    assert error(api.delete(f"{PATH}/{made['uuid']}", headers=ADMIN))[0] == 404


def test_uploads_above_max_size_mb_are_refused(conf: cfg.ConfigOpts, db: Database) -> None:
    conf.set_override("max_size_mb", 1, group="bitstreams")  # read when the app is made
    with TestClient(create_app(conf, db), raise_server_exceptions=False) as api:
        refused_above_max_size_mb(api, conf)


def refused_above_max_size_mb(api: TestClient, conf: cfg.ConfigOpts) -> None:
    queued = create(api)
    too_big = b"x" * (CHUNK_SIZE + 1)
    status, code, message = error(put_data(api, queued, too_big))  # Content-Length says so
    assert (status, code) == (413, "acceleron.too_large") and "1 MiB" in message
    # Sent in chunks, without a length: refused once past the limit, nothing kept.
    chunks = iter([b"y" * 300_000] * 4)
    assert error(put_data(api, queued, chunks))[:2] == (413, "acceleron.too_large")
    assert stored_files(conf) == []
    shown = api.get(f"{PATH}/{queued['uuid']}", headers=ADMIN).json()
    assert shown["status"] == "queued"
    exactly = put_data(api, queued, iter([b"z" * CHUNK_SIZE]))
    assert exactly.status_code == 200 and exactly.json()["size"] == CHUNK_SIZE


def test_data_must_be_octet_stream(api: TestClient) -> None:
    queued = create(api)
    path = f"{PATH}/{queued['uuid']}/data"
    for headers in ({"Content-Type": "application/json"}, {}):
        response = api.put(path, content=b"{}", headers={**ADMIN, **headers})
        assert error(response)[:2] == (415, "acceleron.unsupported_media_type")


# --- the same endpoints on the Glance backend ------------------------------------------


@pytest.fixture
def glance_api(
    conf: cfg.ConfigOpts, sqlite_db: Database, glance_server: GlanceServer
) -> Iterator[TestClient]:
    confmod.register_keystoneauth(conf, "glance")
    conf.set_override("backend", "glance", group="bitstreams")
    conf.set_override("auth_type", "none", group="glance")
    conf.set_override("endpoint_override", glance_server.endpoint, group="glance")
    with TestClient(create_app(conf, sqlite_db), raise_server_exceptions=False) as client:
        yield client


@pytest.mark.slow
def test_glance_backend(
    glance_api: TestClient, glance_server: GlanceServer, conf: cfg.ConfigOpts
) -> None:
    function = str(uuid.uuid4())  # the tests share one Glance
    created = create(
        glance_api, MEMBER_P1, function_uuid=function, region_type_uuid=REGION, vendor="8086"
    )
    assert (created["status"], created["project_id"]) == ("queued", "p1")
    data = b"glance bytes" * 100_000
    active = put_data(glance_api, created, data, MEMBER_P1).json()
    assert (active["status"], active["size"], active["hash_algo"]) == (
        "active",
        len(data),
        "sha512",
    )
    assert active["hash_value"] == hashlib.sha512(data).hexdigest()
    assert names(glance_api, MEMBER_P1, function_uuid=function) == ["nlb.gbs"]
    assert names(glance_api, MEMBER_P2, function_uuid=function) == []
    response = glance_api.get(f"{PATH}/{created['uuid']}/data", headers=SERVICE)
    assert response.content == data
    assert response.headers["x-bitstream-hash"] == f"sha512:{active['hash_value']}"
    # Bytes damaged in Glance: refused before the first byte, the spooled copy gone.
    damaged = data[:-5] + b"evil!"
    (glance_server.workdir / "images" / created["uuid"]).write_bytes(damaged)
    status, code, message = error(glance_api.get(f"{PATH}/{created['uuid']}/data", headers=SERVICE))
    assert (status, code) == (409, "acceleron.bitstream_corrupt")
    assert active["hash_value"] in message and hashlib.sha512(damaged).hexdigest() in message
    assert list((Path(conf.state_path) / "download-spool").iterdir()) == []
    assert error(glance_api.delete(f"{PATH}/{created['uuid']}", headers=MEMBER_P2))[0] == 404
    assert glance_api.delete(f"{PATH}/{created['uuid']}", headers=MEMBER_P1).status_code == 204
    assert names(glance_api, ADMIN, function_uuid=function) == []
