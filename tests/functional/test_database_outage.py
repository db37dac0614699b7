"""A lost database is a 503 with Retry-After and a stable code, on a connection that
stays open; the API answers again as soon as the database is back.

Each backend runs on a server of the test's own (tests/fixtures/dbservers.py), which
the test stops and starts.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from acceleron import conf as confmod
from acceleron.api.app import create_app
from acceleron.db import migrate
from acceleron.db.session import Database
from tests.fixtures.dbservers import Server, own_server
from tests.fixtures.server import serve

pytestmark = pytest.mark.slow
LATEST = {"OpenStack-API-Version": "accelerator latest", "Content-Type": "application/json"}
PROFILE = [{"name": "dp", "groups": [{"resources:CUSTOM_ACCELERATOR_FPGA": "1"}]}]
REPORT = {"hostname": "h1", "agent_version": "1", "devices": []}
REQUESTS: list[tuple[str, str, Any]] = [
    ("GET", "/v2/device_profiles", None),
    ("POST", "/v2/device_profiles", PROFILE),
    ("GET", "/v2/accelerator_requests", None),
    ("POST", "/v2/accelerator_requests", {"device_profile_name": "dp"}),
    ("PUT", "/v2/hosts/h1/report", REPORT),
    ("POST", "/v2/hosts/h1/tasks/claim", None),
    ("GET", "/v2/deployables", None),
]


@pytest.fixture(params=["postgresql", "mysql"])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    with own_server(request.param) as started:
        yield started


def database_on(server: Server) -> Database:
    """A migrated database "acceleron" on the server."""
    admin = create_engine(server.url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        extra = " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin" if server.backend == "mysql" else ""
        conn.execute(text(f"CREATE DATABASE acceleron{extra}"))
    admin.dispose()
    url = make_url(server.url).set(database="acceleron").render_as_string(hide_password=False)
    database = Database(url)
    migrate.upgrade(database)
    return database


def send(conn: http.client.HTTPConnection, method: str, path: str, body: Any) -> Any:
    """One request on a kept-alive connection (a reset one makes the next raise)."""
    conn.request(method, path, body=None if body is None else json.dumps(body), headers=LATEST)
    response = conn.getresponse()
    response.read()
    return response


def test_a_lost_database_is_a_503_with_retry_after(server: Server, tmp_path: Path) -> None:
    database = database_on(server)
    conf = confmod.load([], config_files=[], overrides={"DEFAULT": {"state_path": str(tmp_path)}})
    with serve(create_app(conf, database)) as url:
        where = urlsplit(url)
        conn = http.client.HTTPConnection(where.hostname or "", where.port, timeout=60)
        assert send(conn, "GET", "/v2/device_profiles", None).status == 200
        server.stop()
        for method, path, body in REQUESTS:
            conn.request(
                method, path, body=None if body is None else json.dumps(body), headers=LATEST
            )
            response = conn.getresponse()
            answer = json.loads(response.read())
            assert response.status == 503, (method, path, answer)
            assert int(response.headers["Retry-After"]) > 0
            assert answer["errors"][0]["code"] == "acceleron.database_unavailable"
            assert response.headers.get("Connection") != "close"
        server.start()
        deadline = time.monotonic() + 30
        while (status := send(conn, "GET", "/v2/device_profiles", None).status) != 200:
            assert status == 503 and time.monotonic() < deadline
            time.sleep(0.2)
        assert send(conn, "POST", "/v2/device_profiles", PROFILE).status == 201
        conn.close()
    database.dispose()
