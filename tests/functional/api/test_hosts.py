"""/v2/hosts: agents' reports through HTTP, on every database backend."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from oslo_config import cfg

from acceleron.drivers.fake import FakeDriver
from acceleron.report import HostReport, to_json

V2_5 = {"OpenStack-API-Version": "accelerator 2.5"}
SERVICE = {**V2_5, "X-Roles": "service", "X-Project-Id": "services"}


def report(conf: cfg.ConfigOpts, host: str = "host-1") -> dict[str, Any]:
    conf.set_override("host", host)
    return to_json(HostReport(host, "1.0", tuple(FakeDriver(conf, Path("/")).discover())))


def detail(response: Any) -> str:
    return str(response.json()["errors"][0]["detail"])


def test_routine_agent_calls_are_logged_at_debug(
    api: TestClient, conf: cfg.ConfigOpts, caplog: pytest.LogCaptureFixture
) -> None:
    """A report that changed nothing and a poll for work that found none come every
    few seconds from every host: their access lines are not for the INFO log."""
    caplog.set_level(logging.DEBUG, logger="acceleron.api.access")
    body = report(conf)
    for _ in range(2):
        assert api.put("/v2/hosts/host-1/report", json=body, headers=SERVICE).status_code == 200
    v2_8 = {**SERVICE, "OpenStack-API-Version": "accelerator 2.8"}
    claimed = api.post("/v2/hosts/host-1/tasks/claim?wait=0", headers=v2_8)
    assert claimed.json() == {"tasks": []}
    lines = [
        (r.levelno, r.getMessage().split('"')[1])
        for r in caplog.records
        if r.name == "acceleron.api.access"
    ]
    assert lines == [
        (logging.INFO, "PUT /v2/hosts/host-1/report"),
        (logging.DEBUG, "PUT /v2/hosts/host-1/report"),
        (logging.DEBUG, "POST /v2/hosts/host-1/tasks/claim?wait=0"),
    ]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda d: d.update(model="m\x07"), "devices.0.model: control characters"),
        (
            lambda d: d["deployables"][0]["attributes"].update(note="n" * 70_000),
            "devices.0.deployables.0.attributes.note: longer than 65535 characters",
        ),
        (
            lambda d: d["deployables"][0]["attach_handles"][1]["info"].update(bus="1\x1b"),
            "devices.0.deployables.0.attach_handles.1.info.bus: control characters",
        ),
        (
            lambda d: d["deployables"][1].update(num_accelerators=2**31),
            "devices.0.deployables.1.num_accelerators: 2147483648 is out of range",
        ),
    ],
)
def test_every_value_of_a_report_is_checked_however_deep(
    api: TestClient, conf: cfg.ConfigOpts, change: Any, said: str
) -> None:
    body = report(conf)
    change(body["devices"][0])
    answer = api.put("/v2/hosts/host-1/report", json=body, headers=SERVICE)
    assert answer.status_code == 400, answer.text
    assert said in detail(answer)
    assert api.get("/v2/hosts", headers=SERVICE).json()["hosts"] == []
