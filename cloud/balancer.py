"""The reference cloud's load balancer in front of the Acceleron API replicas.

A TCP balancer, as an operator's HAProxy in ``mode tcp`` with ``option redispatch``
would be: each new client connection goes to the next replica in turn, and to the
one after when a replica refuses the connection (it is down). A connection already
open to a replica that dies is closed, and the client's next request opens a new
one: keystoneauth does that on its own. Nothing is retried inside a connection.

Usage: ``python -m cloud.balancer LISTEN_PORT BACKEND_PORT [BACKEND_PORT ...]``
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
    def __init__(self, backends: list[int]) -> None:
        self.backends = backends
        self._turn = itertools.cycle(range(len(backends)))

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        start = next(self._turn)
        for offset in range(len(self.backends)):
            port = self.backends[(start + offset) % len(self.backends)]
            try:
                return await asyncio.wait_for(asyncio.open_connection(HOST, port), 5)
            except (OSError, TimeoutError):
                continue
        return None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        backend = await self._connect()
        if backend is None:  # every replica is down: the client sees a refused request
            writer.close()
            return
        await asyncio.gather(pipe(reader, backend[1]), pipe(backend[0], writer))


async def serve(port: int, backends: list[int]) -> None:
    balancer = Balancer(backends)
    server = await asyncio.start_server(balancer.handle, HOST, port, reuse_address=True)
    sys.stderr.write(f"balancer on {HOST}:{port} -> {backends}\n")
    sys.stderr.flush()
    async with server:
        await server.serve_forever()


def main(argv: list[str]) -> int:
    asyncio.run(serve(int(argv[1]), [int(p) for p in argv[2:]]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
