"""No request body is read past its route's limit, whatever its Content-Type (issue 40).

A real all-in-one process is sent, on every route it serves (walked from the app
itself, with the embedded Placement, ``/metrics``, ``/ui`` and a path that is none), a
body past that route's limit: as ``application/json``, as ``application/octet-stream``
and with no Content-Type, each announced by a 3 GB Content-Length and sent chunked. The
client streams real bytes until the answer comes (raw sockets: the test controls the
framing), so a server that reads past the limit is seen sending no answer while the
client keeps going; it gives up once it has sent the limit and what the sockets can
hold (``CAP``). Each case's answer is decided in advance:

* a 3 GB Content-Length: 413 before anything else, on every route and path;
* chunked, where something reads the body (FastAPI, for a route that takes one; the
  JSON checks of every handler, for a JSON body of a POST, PUT or PATCH; the embedded
  Placement, which reads it whole; a bitstream upload's spool): 413 once past the limit;
* chunked, where nothing reads it: the route's own answer, the same as with no body.

And the process's memory (VmRSS) grows by less than 50 MB over all of it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import re
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from fastapi import FastAPI
from fastapi.routing import APIRoute
from oslo_config import cfg
from starlette.routing import Mount, Route

from acceleron.api.app import create_app
from acceleron.db.session import Database
from tests.fixtures.allinone import AllInOne, all_in_one

pytestmark = pytest.mark.slow

JSON = "application/json"
OCTETS = "application/octet-stream"
MEDIA_TYPES = (JSON, OCTETS, None)
ANNOUNCED = 3_000_000_000  # what the client sent
MAX_SIZE_MB = 2  # [bitstreams] max_size_mb of the server under test
# What a client may send before an answer must have come: the largest limit of the
# server under test ([api] max_host_report_size), and more than the client's send and
# the server's receive buffers hold.
CAP = (4 << 20) + (64 << 20)
DEADLINE = 60.0  # seconds a case may take before the test gives up on it
PIECE = b"x" * 65_536
UUID = "3f0c9b2e-5d41-4a8e-9c17-6b2d80e4a513"
LATEST = {"OpenStack-API-Version": "accelerator latest"}  # noauth: the admin of "admin"
WRITES = frozenset({"POST", "PUT", "PATCH"})
UPLOAD = "/v2/bitstreams/{uuid}/data"


@dataclasses.dataclass(frozen=True)
class Target:
    """A method and path the server serves (or refuses), and whether the server reads
    a body sent to it (past its limit: a 413) with each media type."""

    method: str
    path: str
    reads: frozenset[str | None]


# What is sent to the embedded Placement (which reads every body whole) and what the
# routes refuse: methods they do not serve, paths that are none.
PLACEMENT = [("GET", "/"), ("POST", "/resource_providers"), ("PUT", f"/resource_providers/{UUID}")]
REFUSED = [
    ("POST", "/metrics"),
    ("POST", "/ui"),
    ("PUT", "/v2"),
    ("POST", "/v2/nowhere"),
    ("PUT", "/nowhere"),
]


def served(app: FastAPI) -> list[Target]:
    """Every route of ``app`` with each of its methods, its parameters filled in; the
    embedded Placement; methods the routes refuse; paths that are none."""
    targets = [Target(method, path, frozenset()) for method, path in REFUSED]
    for route in app.routes:
        if isinstance(route, APIRoute):
            targets += [
                Target(method, fill(route.path), _reads(route, method))
                for method in sorted(route.methods or ())
            ]
        elif isinstance(route, Route):
            targets += [
                Target(method, route.path, frozenset())
                for method in sorted(route.methods or ())
                if method != "HEAD"
            ]
        elif isinstance(route, Mount):
            targets += [
                Target(method, route.path + path, frozenset(MEDIA_TYPES))
                for method, path in PLACEMENT
            ]
    return targets


def _reads(route: APIRoute, method: str) -> frozenset[str | None]:
    """The media types whose bodies ``route`` reads: all where it takes a body (FastAPI
    reads it, whatever its type); JSON for a POST, PUT or PATCH (``api.common``'s
    checks). An upload to a bitstream that is none is refused before its body is read."""
    if route.body_field is not None:
        return frozenset(MEDIA_TYPES)
    return frozenset({JSON}) if method in WRITES else frozenset()


def fill(template: str) -> str:
    return re.sub(r"\{[^}]+\}", UUID, template)


@dataclasses.dataclass(frozen=True)
class Case:
    method: str
    path: str
    media: str | None
    chunked: bool
    headers: tuple[tuple[str, str], ...] = tuple(LATEST.items())

    def __str__(self) -> str:
        framing = "chunked" if self.chunked else "Content-Length"
        return f"{self.method} {self.path} {self.media or 'no type'} {framing}"


def send(port: int, case: Case) -> str:
    """The status the server answers ``case`` with, the body streamed until it does; or
    why there was none. More than ``CAP`` bytes of body sent with no answer: the server
    reads past its limit."""
    head = [
        f"{case.method} {case.path} HTTP/1.1",
        "Host: 127.0.0.1",
        *(f"{k}: {v}" for k, v in case.headers),
    ]
    if case.media is not None:
        head.append(f"Content-Type: {case.media}")
    head.append("Transfer-Encoding: chunked" if case.chunked else f"Content-Length: {ANNOUNCED}")
    piece = b"%x\r\n%s\r\n" % (len(PIECE), PIECE) if case.chunked else PIECE
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65_536)
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        sock.setblocking(False)
        return _stream(sock, piece)


def _stream(sock: socket.socket, piece: bytes) -> str:
    answer, sent, pending = b"", 0, memoryview(piece)
    deadline = time.monotonic() + DEADLINE
    while b"\r\n" not in answer:
        left = deadline - time.monotonic()
        if left <= 0:
            return f"no answer in {DEADLINE:g} s"
        if sent >= CAP:
            return f"no answer after {sent} bytes of body: read past the limit"
        readable, writable, _ = select.select([sock], [sock], [], left)
        try:
            if readable:
                data = sock.recv(4096)
                if not data:
                    return "closed without an answer"
                answer += data
            elif writable:  # a piece at a time, each whole: a chunk's framing holds
                done = sock.send(pending)
                sent, pending = sent + done, pending[done:] or memoryview(piece)
        except (BrokenPipeError, ConnectionResetError):
            return _answer_left(sock, answer)
    return answer.split(b" ", 2)[1].decode()


def _answer_left(sock: socket.socket, answer: bytes) -> str:
    """The status line the server sent before it closed, if any came."""
    sock.setblocking(True)
    with contextlib.suppress(OSError):
        answer += sock.recv(4096)
    return answer.split(b" ", 2)[1].decode() if b"\r\n" in answer else "reset without an answer"


def without_body(port: int, case: Case) -> str:
    """The status of ``case`` sent with an empty body: what a route that reads no body
    answers whatever comes."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=DEADLINE)
    headers = dict(case.headers)
    if case.media is not None:
        headers["Content-Type"] = case.media
    try:
        connection.request(case.method, case.path, body=b"", headers=headers)
        return str(connection.getresponse().status)
    finally:
        connection.close()


def rss_kb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    assert found is not None, status
    return int(found.group(1))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AllInOne]:
    config = {"OS_BITSTREAMS__MAX_SIZE_MB": str(MAX_SIZE_MB)}
    with all_in_one(tmp_path_factory.mktemp("bounds"), config=config) as aio:
        yield aio


def walked(conf: cfg.ConfigOpts) -> list[Target]:
    """The routes of an app made as the all-in-one makes its own."""
    conf.set_override("mode", "embedded", "placement")
    conf.set_override("embedded_connection", "sqlite://", "placement")
    return served(create_app(conf, Database("sqlite://"), check_schema=False))


def test_every_route_refuses_a_body_past_its_limit(server: AllInOne, conf: cfg.ConfigOpts) -> None:
    targets = walked(conf)
    assert len(targets) > 60, "the walk found too few routes"
    assert {t.path for t in targets} >= {"/metrics", "/ui", "/placement/", fill(UPLOAD)}
    cases = [
        Case(t.method, t.path, media, chunked)
        for t in targets
        for media in MEDIA_TYPES
        for chunked in (False, True)
    ]
    port, pid = server.port, _pid(server)
    reads = {(t.method, t.path): t.reads for t in targets}
    expected = {}
    for case in cases:  # decided first: this pass warms the server up, too
        if not case.chunked or case.media in reads[case.method, case.path]:
            expected[case] = "413"
        else:
            expected[case] = without_body(port, case)
    assert all(int(status) < 500 for status in expected.values()), expected
    before = rss_kb(pid)
    answers = {case: send(port, case) for case in cases}
    grown = rss_kb(pid) - before
    assert {str(c): a for c, a in answers.items() if a != expected[c]} == {}
    assert grown < 50 << 10, f"the server's RSS grew by {grown} kB"


def _pid(server: AllInOne) -> int:
    assert server.process is not None
    return server.process.pid


def caller(roles: str, project: str) -> tuple[tuple[str, str], ...]:
    return (*LATEST.items(), ("X-Roles", roles), ("X-Project-Id", project))


MEMBER_P1 = caller("member,reader", "p1")


def test_an_upload_is_read_only_once_its_caller_may(server: AllInOne) -> None:
    """The issue's attack, by a member: its own bitstream's upload takes up to
    [bitstreams] max_size_mb of octets, and any other type only the ordinary limit; a
    caller who may not upload to it, or a type it does not take, is refused before a
    byte is read."""
    created = requests.post(
        f"{server.url}/v2/bitstreams",
        json={"name": "b.gbs"},
        headers=dict(MEMBER_P1),
        timeout=DEADLINE,
    )
    assert created.status_code == 201, created.text
    path = fill(UPLOAD).replace(UUID, created.json()["uuid"])
    expected = {
        Case("PUT", path, OCTETS, True, MEMBER_P1): "413",  # past max_size_mb
        Case("PUT", path, OCTETS, False, MEMBER_P1): "413",
        Case("PUT", path, JSON, True, MEMBER_P1): "413",  # past the ordinary limit
        Case("PUT", path, JSON, False, MEMBER_P1): "413",
        Case("PUT", path, None, True, MEMBER_P1): "415",
        Case("PUT", path, None, False, MEMBER_P1): "413",
        Case("PUT", path, OCTETS, True, caller("member,reader", "p2")): "404",
        Case("PUT", path, OCTETS, True, caller("reader", "p1")): "403",
    }
    answers = {case: send(server.port, case) for case in expected}
    assert {str(c): a for c, a in answers.items() if a != expected[c]} == {}
    shown = requests.get(
        f"{server.url}{path.removesuffix('/data')}", headers=dict(MEMBER_P1), timeout=DEADLINE
    )
    assert shown.json()["status"] == "queued"
    assert list((server.data_dir / "upload-spool").glob("*")) == []
