"""The reference cloud's HTTP balancer (cloud/balancer.py --http): a request whose replica
dies with it in flight goes to the next replica; the client never sees a 500.

The replicas are sockets on 127.0.0.1: one answers, one reads the request and closes
without a byte of answer (a replica killed mid-request), one port refuses."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from cloud.balancer import HttpBalancer

from tests.fixtures.ports import free_port


async def _answering(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    body = await reader.readexactly(length)
    answer = b'{"got": "' + body + b'"}'
    head = b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
    writer.write(head + b"Content-Length: %d\r\n\r\n" % len(answer) + answer)
    await writer.drain()
    writer.close()


class Dying:
    """A replica that takes the request and dies before answering it."""

    def __init__(self) -> None:
        self.requests: list[bytes] = []

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.requests.append(await reader.readuntil(b"\r\n\r\n"))
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        writer.close()  # linger 0: a reset, as the kernel sends for a killed process


async def _call(balancer: HttpBalancer, method: str, body: bytes) -> tuple[int, bytes]:
    scope = {"type": "http", "method": method, "path": "/v2/accelerator_requests",
             "raw_path": b"/v2/accelerator_requests", "query_string": b"",
             "headers": [(b"content-type", b"application/json"),
                         (b"content-length", str(len(body)).encode())]}  # fmt: skip
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await balancer(scope, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


async def _scenario(method: str, body: bytes, order: str) -> tuple[int, bytes, int]:
    """The balancer in front of replicas in ``order`` ("d": dying, "u": up, "r": refusing);
    the client's status and body, and how many requests the dying replica took."""
    dying = Dying()
    up = await asyncio.start_server(_answering, "127.0.0.1", 0)
    down = await asyncio.start_server(dying, "127.0.0.1", 0)
    ports = {"u": up.sockets[0].getsockname()[1], "d": down.sockets[0].getsockname()[1]}
    balancer = HttpBalancer([ports[c] if c in ports else free_port() for c in order])
    try:
        status, answer = await _call(balancer, method, body)
    finally:
        await balancer.client.aclose()
        for server in (up, down):
            server.close()
            await server.wait_closed()
    return status, answer, len(dying.requests)


def test_a_request_cut_by_a_dying_replica_goes_to_the_next() -> None:
    assert asyncio.run(_scenario("POST", b"profile", "du")) == (201, b'{"got": "profile"}', 1)


def test_no_replica_answering_is_502_and_none_up_503() -> None:
    assert asyncio.run(_scenario("PATCH", b"[]", "dd"))[::2] == (502, 2)
    assert asyncio.run(_scenario("GET", b"", "rr"))[::2] == (503, 0)
    assert asyncio.run(_scenario("GET", b"", "ru"))[::2] == (201, 0)


def test_concurrent_requests_each_try_every_replica() -> None:
    """Requests in flight together, one replica down: each tries the other replica, even
    when the others' turns came between its two tries (a shared turn gave one request
    the refusing replica twice, and the client a 503)."""

    async def scenario() -> list[int]:
        up = await asyncio.start_server(_answering, "127.0.0.1", 0)
        balancer = HttpBalancer([free_port(), up.sockets[0].getsockname()[1]])
        try:
            answers = await asyncio.gather(*(_call(balancer, "GET", b"") for _ in range(20)))
        finally:
            await balancer.client.aclose()
            up.close()
            await up.wait_closed()
        return [status for status, _ in answers]

    assert asyncio.run(scenario()) == [201] * 20
