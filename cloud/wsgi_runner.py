"""Serve one OpenStack WSGI application on 127.0.0.1 (the reference cloud's runner).

Usage, with the service's own virtualenv's Python::

    python wsgi_runner.py MODULE:ATTRIBUTE PORT [ARGUMENT ...]

Keystone and nova-api parse ``sys.argv`` when their WSGI module is imported, so a
server that keeps its own arguments there (gunicorn, uwsgi) breaks them: this runner
leaves only the ARGUMENTs after the port there before the import (none for most
services; cyborg-api, which finds no configuration of its own otherwise, is given
``--config-file``). Glance 33 runs only under a WSGI server. The
server is the standard library's, one thread per request: enough for a test cloud on
one machine, not for production. Standard library only: it runs in every service's
virtualenv.
"""

from __future__ import annotations

import importlib
import signal
import socketserver
import sys
import types
from wsgiref import simple_server


class ThreadingServer(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64


class QuietHandler(simple_server.WSGIRequestHandler):
    """Access lines go to stderr (the service's log) in one short line."""

    def log_message(self, format: str, *args: object) -> None:
        sys.stderr.write(f"wsgi {self.address_string()} {format % args}\n")


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        sys.stderr.write(__doc__ or "")
        return 2
    target, port = argv[1], int(argv[2])
    module_name, _, attribute = target.partition(":")
    sys.argv = [sys.argv[0], *argv[3:]]  # the application parses these at import
    module: types.ModuleType = importlib.import_module(module_name)
    application = getattr(module, attribute or "application")
    server = simple_server.make_server(
        "127.0.0.1", port, application, server_class=ThreadingServer, handler_class=QuietHandler
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    sys.stderr.write(f"wsgi_runner: serving {target} on http://127.0.0.1:{port}\n")
    sys.stderr.flush()
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
