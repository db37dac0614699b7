"""Nova is told when binds end: POST /os-server-external-events to a local endpoint that
records what it receives (the compute API's side of the contract)."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from oslo_config import cfg
from sqlalchemy import select

from acceleron.api.app import create_app
from acceleron.api.services import services
from acceleron.db.models import Deployable, table
from acceleron.db.session import Database
from acceleron.drivers.fake import FakeDriver
from acceleron.report import HostReport
from acceleron.service import device_profiles, inventory
from acceleron.service.arqs import Resolved
from acceleron.service.nova import NovaNotifier, adapter_from_conf


class FakeCompute(BaseHTTPRequestHandler):
    """Records each request; answers what ``server.answers`` says, in turn."""

    def do_POST(self) -> None:
        server: Any = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server.received.append({"path": self.path, "headers": dict(self.headers), "body": body})
        status = server.answers.pop(0) if server.answers else 200
        events = [{**e, "code": 422 if status == 207 else 200} for e in body["events"]]
        payload = json.dumps({"events": events}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def compute() -> Iterator[Any]:
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), FakeCompute)
    server.received, server.answers = [], []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()


@pytest.fixture
def nova_conf(conf: cfg.ConfigOpts, compute: Any) -> cfg.ConfigOpts:
    conf.set_override("auth_type", "none", "nova")
    conf.set_override("endpoint_override", f"http://127.0.0.1:{compute.server_port}/v2.1", "nova")
    return conf


def test_events_after_a_bind(nova_conf: cfg.ConfigOpts, sqlite_db: Database, compute: Any) -> None:
    nova_conf.set_override("host", "host-1")
    report = HostReport("host-1", "1", tuple(FakeDriver(nova_conf, Path("/")).discover()))
    inventory.reconcile(sqlite_db, report)
    device_profiles.create(
        sqlite_db, name="dp", groups=[{"resources:CUSTOM_ACCELERATOR_FPGA": "1"}]
    )
    with sqlite_db.reader() as conn:
        region = conn.execute(
            select(table(Deployable)).where(table(Deployable).c.kind == "region")
        ).first()
    assert region is not None
    instance = str(uuid.uuid4())
    with TestClient(create_app(nova_conf, sqlite_db)) as api:
        arq = api.post("/v2/accelerator_requests", json={"device_profile_name": "dp"})
        arq_uuid = arq.json()["arqs"][0]["uuid"]
        ops = [
            {"path": f"/{k}", "op": "add", "value": v}
            for k, v in (
                ("hostname", "host-1"),
                ("device_rp_uuid", region.rp_uuid),
                ("instance_uuid", instance),
            )
        ]
        assert api.patch("/v2/accelerator_requests", json={arq_uuid: ops}).status_code == 202
        services(api.app).nova.drain()  # type: ignore[arg-type]
    [request] = compute.received
    assert request["path"] == "/v2.1/os-server-external-events"
    assert request["headers"]["OpenStack-API-Version"] == "compute 2.82"
    assert request["body"] == {
        "events": [
            {
                "name": "accelerator-request-bound",
                "server_uuid": instance,
                "tag": arq_uuid,
                "status": "completed",
            }
        ]
    }


def test_422_is_tolerated_and_5xx_retried(nova_conf: cfg.ConfigOpts, compute: Any) -> None:
    notifier = NovaNotifier(lambda: adapter_from_conf(nova_conf), first_delay=0.01)
    notifier.start()
    try:
        compute.answers = [207]  # the instance is not on a host yet: not retried
        notifier.notify([Resolved("i-1", "a-1", "failed")])
        notifier.drain()
        assert len(compute.received) == 1
        compute.answers = [500, 503, 200]
        notifier.notify([Resolved("i-2", "a-2", "completed")])
        notifier.drain()
        assert [r["body"]["events"][0]["tag"] for r in compute.received] == ["a-1"] + ["a-2"] * 3
        assert [e["tag"] for e in notifier.sent] == ["a-1", "a-2"]
    finally:
        notifier.stop()


def test_no_nova_configured_sends_nothing(conf: cfg.ConfigOpts) -> None:
    assert adapter_from_conf(conf) is None
    notifier = NovaNotifier(lambda: adapter_from_conf(conf))
    notifier.start()
    notifier.notify([Resolved("i", "a", "completed")])
    notifier.drain()
    notifier.stop()
    assert notifier.sent == []
