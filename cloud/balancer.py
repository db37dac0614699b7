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

Usage: ``python -m cloud.balancer [--failover] LISTEN_PORT BACKEND_PORT [BACKEND_PORT ...]``
(all on 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import sys

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
                sys.stderr.write(f"balancer: writer {self.backends[self._writer]} is down, "
                                 f"now {self.backends[index]}\n")  # fmt: skip
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


async def serve(port: int, backends: list[int], *, failover: bool = False) -> None:
    balancer = Balancer(backends, failover=failover)
    server = await asyncio.start_server(balancer.handle, HOST, port, reuse_address=True)
    sys.stderr.write(f"balancer on {HOST}:{port} -> {backends}\n")
    sys.stderr.flush()
    async with server:
        await server.serve_forever()


def main(argv: list[str]) -> int:
    args = argv[1:]
    failover = "--failover" in args
    ports = [int(p) for p in args if p != "--failover"]
    asyncio.run(serve(ports[0], ports[1:], failover=failover))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
