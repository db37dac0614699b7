"""A minimal stand-in for Neutron: it answers only the read calls Nova makes for a
server booted with ``--nic none``, each with an empty list.

This is **not** Neutron and not a fake of it for anything else: Neutron is outside
Acceleron, and the reference cloud boots servers without networks. Even then, Nova
34 asks the network service for the project's networks and for the ports of an
instance (``GET /v2.0/networks?...``, ``GET /v2.0/ports?device_id=...``), and an empty
list is a true answer for a cloud with no networks. Anything else (a write, an
unknown path) gets 501, so a test that needs real networking fails loudly instead of
passing against this. Every request is logged to stderr.

Usage: ``python -m cloud.neutron_standin PORT``.
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# Collections Nova lists, by path element; the JSON key is the same with "_".
COLLECTIONS = frozenset(
    {"networks", "ports", "subnets", "security-groups", "extensions", "floatingips", "qos"}
)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path in ("", "/"):
            host = self.headers.get("Host", "127.0.0.1")
            self._send(
                200,
                {
                    "versions": [
                        {
                            "id": "v2.0",
                            "status": "CURRENT",
                            "links": [{"rel": "self", "href": f"http://{host}/v2.0/"}],
                        }
                    ]
                },
            )
            return
        parts = path.strip("/").split("/")
        if parts[0] == "v2.0" and len(parts) == 2 and parts[1] in COLLECTIONS:
            self._send(200, {parts[1].replace("-", "_"): []})
            return
        self._refuse()

    def do_POST(self) -> None:
        self._refuse()

    def do_PUT(self) -> None:
        self._refuse()

    def do_DELETE(self) -> None:
        self._refuse()

    def _refuse(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self._send(
            501,
            {
                "NeutronError": {
                    "type": "NotImplemented",
                    "detail": "",
                    "message": "The reference cloud has no Neutron: "
                    f"{self.command} {self.path} is not answered.",
                }
            },
        )

    def _send(self, status: int, body: dict[str, object]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main(argv: list[str]) -> int:
    port = int(argv[1])
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    sys.stderr.write(f"neutron stand-in on http://127.0.0.1:{port}\n")
    sys.stderr.flush()
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
