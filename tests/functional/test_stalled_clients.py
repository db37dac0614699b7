"""Clients that stall hold nothing the others need, on every backend (a live API).

Forty uploads that announce a mebibyte, send a kibibyte and stop used to hold forty
threads of the one pool every database call shared: on PostgreSQL and MariaDB every
other request, agents' reports included, then waited. bench/attack.py measures the
same with latencies; these tests check the behaviour.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests
from oslo_config import cfg

from acceleron.api.app import create_app
from acceleron.db.session import Database
from tests.fixtures.server import serve

LATEST = {"OpenStack-API-Version": "accelerator latest"}
MIB = 1 << 20


# A live server each, and seconds of a client's silence waited out by design: make
# test's, not make check's.
pytestmark = pytest.mark.slow
PATIENCE = 2.0  # [api] client_timeout of the API these tests talk to


@pytest.fixture
def api_url(conf: cfg.ConfigOpts, db: Database) -> Iterator[str]:
    conf.set_override("client_timeout", PATIENCE, group="api")
    with serve(create_app(conf, db)) as url:
        yield url


def queued(url: str, project: str) -> str:
    """A bitstream of ``project`` waiting for its data; its uuid."""
    headers = {**LATEST, "X-Roles": "member", "X-Project-Id": project}
    created = requests.post(
        f"{url}/v2/bitstreams", json={"name": "b.gbs"}, headers=headers, timeout=30
    )
    assert created.status_code == 201, created.text
    bitstream: str = created.json()["uuid"]
    return bitstream


def stalled_upload(url: str, bitstream: str, project: str) -> socket.socket:
    """An upload that announces a mebibyte, sends a kibibyte and stops."""
    where = urlsplit(url)
    sock = socket.create_connection((where.hostname, where.port), timeout=60)
    head = (
        f"PUT /v2/bitstreams/{bitstream}/data HTTP/1.1\r\nHost: x\r\n"
        f"OpenStack-API-Version: accelerator latest\r\nX-Roles: member\r\n"
        f"X-Project-Id: {project}\r\nContent-Type: application/octet-stream\r\n"
        f"Content-Length: {MIB}\r\n\r\n"
    )
    sock.sendall(head.encode() + b"\0" * 1024)
    return sock


def head(sock: socket.socket) -> tuple[str, dict[str, str]]:
    """The status line and headers the server sent, once it sends them."""
    lines = iter(sock.makefile("rb"))
    status = next(lines).decode().strip()
    headers = {}
    for line in lines:
        if line in (b"\r\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers


def answer(sock: socket.socket) -> str:
    """The status line the server sent, once it sends one."""
    return head(sock)[0]


def test_forty_stalled_uploads_stall_nobody_else(api_url: str) -> None:
    projects = [f"p{n}" for n in range(40)]
    bitstreams = [queued(api_url, p) for p in projects]
    with ExitStack() as stack:
        stalled = [
            stack.enter_context(stalled_upload(api_url, b, p))
            for b, p in zip(bitstreams, projects, strict=True)
        ]
        listing = requests.get(f"{api_url}/v2/device_profiles", headers=LATEST, timeout=10)
        assert listing.status_code == 200
        agent = {**LATEST, "X-Roles": "service", "X-Project-Id": "services"}
        report = {"hostname": "h1", "agent_version": "1", "devices": []}
        reported = requests.put(
            f"{api_url}/v2/hosts/h1/report", json=report, headers=agent, timeout=10
        )
        assert reported.status_code == 200, reported.text
        # Each stalled upload is cut after [api] client_timeout seconds without a byte.
        assert {answer(sock) for sock in stalled} == {"HTTP/1.1 408 Request Timeout"}
    again = requests.get(
        f"{api_url}/v2/bitstreams/{bitstreams[0]}",
        timeout=10,
        headers={**LATEST, "X-Roles": "member", "X-Project-Id": "p0"},
    )
    assert again.json()["status"] == "queued"  # nothing of it was stored


def test_a_project_runs_two_uploads_at_once(api_url: str) -> None:
    """Of three stalled uploads of one project, one is refused at once (which one is
    the server's order), the others run until cut; another project is not affected."""
    bitstreams = [queued(api_url, "busy") for _ in range(3)]
    with ExitStack() as stack:
        stalled = [stack.enter_context(stalled_upload(api_url, b, "busy")) for b in bitstreams]
        calm = queued(api_url, "calm")
        other = {
            **LATEST,
            "X-Roles": "member",
            "X-Project-Id": "calm",
            "Content-Type": "application/octet-stream",
        }
        done = requests.put(
            f"{api_url}/v2/bitstreams/{calm}/data", data=b"\1" * 100, headers=other, timeout=10
        )
        assert done.status_code == 200 and done.json()["status"] == "active"
        heads = [head(sock) for sock in stalled]
    assert sorted(h[0] for h in heads) == ["HTTP/1.1 408 Request Timeout"] * 2 + [
        "HTTP/1.1 429 Too Many Requests"
    ]
    refused = next(h for h in heads if "429" in h[0])
    assert int(refused[1]["retry-after"]) > 0
    busy = {**other, "X-Project-Id": "busy"}  # the stalled ones are cut: it may upload again
    retried = requests.put(
        f"{api_url}/v2/bitstreams/{bitstreams[0]}/data", data=b"\1" * 100, headers=busy, timeout=30
    )
    assert retried.status_code == 200, retried.text


def test_a_stalled_json_body_is_cut_too(api_url: str) -> None:
    where = urlsplit(api_url)
    with socket.create_connection((where.hostname, where.port), timeout=60) as sock:
        sock.sendall(
            b"POST /v2/device_profiles HTTP/1.1\r\nHost: x\r\nContent-Type: "
            b"application/json\r\nContent-Length: 100\r\n\r\n[{"
        )
        assert answer(sock) == "HTTP/1.1 408 Request Timeout"
    name = f"after-{uuid.uuid4().hex[:6]}"
    body: Any = [{"name": name, "groups": [{"resources:FPGA": "1"}]}]
    assert requests.post(f"{api_url}/v2/device_profiles", json=body, timeout=10).ok


def test_a_reader_that_stops_reading_is_cut_off(api_url: str, db: Database) -> None:
    """A download whose reader stops: the server waits [api] client_timeout seconds for
    it, then closes the connection (the bytes buffered on the way still arrive)."""
    if db.backend != "sqlite":
        pytest.skip("the middleware is the same whatever the database: SQLite shows it")
    size = 32 * MIB  # far more than the kernel's buffers hold on the way
    public = {**LATEST, "Content-Type": "application/octet-stream"}
    created = requests.post(
        f"{api_url}/v2/bitstreams",
        headers=LATEST,
        timeout=30,
        json={"name": "big.gbs", "visibility": "public"},
    ).json()
    requests.put(
        f"{api_url}/v2/bitstreams/{created['uuid']}/data",
        data=b"\x5a" * size,
        headers=public,
        timeout=60,
    ).raise_for_status()
    where = urlsplit(api_url)
    with socket.create_connection((where.hostname, where.port), timeout=60) as sock:
        sock.sendall(
            f"GET /v2/bitstreams/{created['uuid']}/data HTTP/1.1\r\nHost: x\r\n"
            f"OpenStack-API-Version: accelerator latest\r\n\r\n".encode()
        )
        time.sleep(3 * PATIENCE)  # reading nothing, for three times the server's patience
        received = 0
        while chunk := sock.recv(1 << 20):
            received += len(chunk)
    assert received < size  # the headers included: it was cut short
