"""The reference cloud's load balancer in front of the Acceleron API replicas.

A TCP balancer, as an operator's HAProxy in ``mode tcp`` with ``option redispatch``
would be: each new client connection goes to the next replica in turn, and to the
one after when a replica refuses the connection (it is down). A connection already
open to a replica that dies is closed, and the client's next request opens a new
one: keystoneauth does that on its own. Nothing is retried inside a connection.

In ``--failover`` mode it is the balancer an operator puts in front of a Galera
cluster (HAProxy with one active server and the others ``backup``): every connection
goes to one backend, the writer, until it refuses a connection; then to the next in
the list that accepts, which stays the writer (a node that comes back does not take
the writes back). Connections open to a writer that dies are closed, as above.

In ``--http`` mode (the reference cloud's, in front of Acceleron's replicas) it is HAProxy
in ``mode http`` with ``option redispatch`` and ``retry-on conn-failure empty-response``:
each request goes to the next replica in turn, over connections of its own, so a
client's connection outlives any replica. A request goes to the replica after when one
refuses the connection (nothing was sent yet) or closes it without a byte of answer (it
died with the request in flight: Acceleron's API takes such a replay, see
docs/deploy-with-nova.md). A replica that dies part way through an answer cuts the
client's connection, as HAProxy does. A replica can be drained, as an operator
does before upgrading it: ``POST /-/drain/<port>`` sends it no new request and answers
once none is left in flight on it (the replica may then stop: nothing is cut);
``POST /-/enable/<port>`` takes it back. With every replica refusing, a request is
answered 503 with Retry-After, as HAProxy does with no server up; with every replica
closing without an answer, 502.

Usage: ``python -m cloud.balancer [--failover | --http] LISTEN_PORT BACKEND_PORT
[BACKEND_PORT ...]`` (all on 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import sys
from typing import Any

HOST = "127.0.0.1"
CHUNK = 65536


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(ConnectionError, OSError):
            writer.close()


class Balancer:
    def __init__(self, backends: list[int], *, failover: bool = False) -> None:
        self.backends = backends
        self.failover = failover
        self._turn = itertools.cycle(range(len(backends)))
        self._writer = 0  # failover mode: the index of the backend that takes everything

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        start = self._writer if self.failover else next(self._turn)
        for offset in range(len(self.backends)):
            index = (start + offset) % len(self.backends)
            try:
                connected = await asyncio.wait_for(
                    asyncio.open_connection(HOST, self.backends[index]), 5
                )
            except (OSError, TimeoutError):
                continue
            if self.failover and index != self._writer:
                sys.stderr.write(
                    f"balancer: writer {self.backends[self._writer]} is down, "
                    f"now {self.backends[index]}\n"
                )
                sys.stderr.flush()
                self._writer = index
            return connected
        return None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        backend = await self._connect()
        if backend is None:  # every replica is down: the client sees a refused request
            writer.close()
            return
        await asyncio.gather(pipe(reader, backend[1]), pipe(backend[0], writer))


# Headers of one hop, not passed on (RFC 9110, 7.6.1).
HOP = {
    b"connection",
    b"keep-alive",
    b"transfer-encoding",
    b"te",
    b"trailer",
    b"upgrade",
    b"proxy-connection",
    b"host",
}
DRAIN_WAIT = 300.0  # seconds a drain may wait for the replica's last request


class HttpBalancer:
    """The ASGI application of ``--http`` mode (served by uvicorn)."""

    def __init__(self, backends: list[int]) -> None:
        import httpx

        self.backends = backends
        self.drained: set[int] = set()
        self.in_flight: collections.Counter[int] = collections.Counter()
        self._turn = itertools.cycle(range(len(backends)))
        # No read timeout: agents' long polls for work last as long as the API says.
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=5.0))

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await self.client.aclose()
            await send({"type": "lifespan.shutdown.complete"})
            return
        path: str = scope["path"]
        if path.startswith("/-/"):
            await self.control(path, send)
            return
        body = b""
        while True:  # the whole request body (the API's requests are small)
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        await self.forward(scope, body, send)

    async def forward(self, scope: Any, body: bytes, send: Any) -> None:
        import httpx

        sent = [(k, v) for k, v in scope["headers"] if k not in HOP]
        target = scope["raw_path"].decode() + (
            "?" + scope["query_string"].decode() if scope["query_string"] else ""
        )
        status = 503  # what the client gets when no replica answers: none is up
        # The request takes its turn once and tries every replica from there: requests in
        # flight together take turns too, and a second next() could give it the same one.
        start = next(self._turn)
        for port in self.backends[start:] + self.backends[:start]:
            if port in self.drained:
                continue
            self.in_flight[port] += 1
            try:
                request = self.client.build_request(
                    scope["method"],
                    f"http://{HOST}:{port}{target}",
                    headers=sent,
                    content=body,
                )
                try:
                    response = await self.client.send(request, stream=True)
                except httpx.ConnectError:
                    continue  # refused: nothing was sent, the next replica takes it
                except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as error:
                    status = 502  # it died with the request in flight: the next one takes it
                    sys.stderr.write(
                        f"balancer: {port} closed without answering "
                        f"{scope['method']} {scope['path']} ({error!r}); "
                        "sent to the next\n"
                    )
                    sys.stderr.flush()
                    continue
                try:
                    kept = [(k, v) for k, v in response.headers.raw if k.lower() not in HOP]
                    await send(
                        {
                            "type": "http.response.start",
                            "status": response.status_code,
                            "headers": kept,
                        }
                    )
                    async for chunk in response.aiter_raw():
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    await send({"type": "http.response.body", "body": b""})
                finally:
                    await response.aclose()
                return
            finally:
                self.in_flight[port] -= 1
        headers = [(b"retry-after", b"5"), (b"content-type", b"text/plain")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"no replica answers\n"})

    async def control(self, path: str, send: Any) -> None:
        """``/-/drain/<port>`` (answered once nothing is in flight on it) and
        ``/-/enable/<port>``."""
        _, _, action, port_text = path.split("/", 3)
        port = int(port_text)
        if action == "drain":
            self.drained.add(port)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + DRAIN_WAIT
            while self.in_flight[port] and loop.time() < deadline:
                await asyncio.sleep(0.05)
            status = 409 if self.in_flight[port] else 200
        else:
            self.drained.discard(port)
            status = 200
        sys.stderr.write(f"balancer: {action} {port}: {status}\n")
        sys.stderr.flush()
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})


def serve_http(port: int, backends: list[int]) -> None:
    import uvicorn

    sys.stderr.write(f"balancer (http) on {HOST}:{port} -> {backends}\n")
    sys.stderr.flush()
    uvicorn.run(
        HttpBalancer(backends),
        host=HOST,
        port=port,
        log_level="warning",
        access_log=False,
        timeout_keep_alive=75,
        server_header=False,
        date_header=False,
    )


async def serve(port: int, backends: list[int], *, failover: bool = False) -> None:
    balancer = Balancer(backends, failover=failover)
    server = await asyncio.start_server(balancer.handle, HOST, port, reuse_address=True)
    sys.stderr.write(f"balancer on {HOST}:{port} -> {backends}\n")
    sys.stderr.flush()
    async with server:
        await server.serve_forever()


def main(argv: list[str]) -> int:
    args = argv[1:]
    ports = [int(p) for p in args if not p.startswith("--")]
    if "--http" in args:
        serve_http(ports[0], ports[1:])
    else:
        asyncio.run(serve(ports[0], ports[1:], failover="--failover" in args))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
