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


def test_report_then_same_report(api: TestClient, conf: cfg.ConfigOpts) -> None:
    body = report(conf)
    first = api.put("/v2/hosts/host-1/report", json=body, headers=SERVICE)
    assert first.status_code == 200, first.text
    assert first.json()["changed"] is True and first.json()["generation"] == 1
    assert first.json()["counts"]["devices_added"] == 5
    again = api.put("/v2/hosts/host-1/report", json=body, headers=SERVICE).json()
    assert again == {"hostname": "host-1", "changed": False, "devices": 5, "generation": 1,
                     "counts": {}}  # fmt: skip
    host = api.get("/v2/hosts/host-1", headers=V2_5).json()["host"]
    assert (host["hostname"], host["devices"], host["agent_version"]) == ("host-1", 5, "1.0")
    assert [h["hostname"] for h in api.get("/v2/hosts", headers=V2_5).json()["hosts"]] == ["host-1"]


def test_bad_reports_are_400s_naming_the_problem(api: TestClient, conf: cfg.ConfigOpts) -> None:
    body = report(conf)
    response = api.put("/v2/hosts/other/report", json=body, headers=SERVICE)
    assert response.status_code == 400 and "sent to 'other'" in detail(response)
    broken = {**body, "devices": [{**body["devices"][0], "numa_node": "zero"}]}
    response = api.put("/v2/hosts/host-1/report", json=broken, headers=SERVICE)
    assert response.status_code == 400 and "devices.0.numa_node" in detail(response)
    twice = {**body, "devices": [body["devices"][0], body["devices"][0]]}
    response = api.put("/v2/hosts/host-1/report", json=twice, headers=SERVICE)
    assert response.status_code == 400 and "PCI address reported twice" in detail(response)
    unknown = {**body, "devices": [{**body["devices"][0], "type": "TOASTER"}]}
    response = api.put("/v2/hosts/host-1/report", json=unknown, headers=SERVICE)
    assert response.status_code == 400 and "unknown type 'TOASTER'" in detail(response)


def test_hosts_need_2_5_and_a_service_or_admin(api: TestClient, conf: cfg.ConfigOpts) -> None:
    body = report(conf)
    assert api.put("/v2/hosts/host-1/report", json=body).status_code == 404
    member = {**V2_5, "X-Roles": "member", "X-Project-Id": "p1"}
    assert api.put("/v2/hosts/host-1/report", json=body, headers=member).status_code == 403
    assert api.get("/v2/hosts", headers=member).status_code == 403
    assert api.get("/v2/hosts/nope", headers=V2_5).status_code == 404


def test_values_that_would_not_fit_the_database_are_400s(
    api: TestClient, conf: cfg.ConfigOpts
) -> None:
    body = report(conf)
    device = body["devices"][0]
    region = device["deployables"][0]
    for bad, fragment in [
        ({**device, "model": "x\x00y"}, "devices.0.model: control characters"),
        ({**device, "pci_address": "0" * 33}, "devices.0.pci_address: longer than 32"),
        ({**device, "numa_node": 2**40}, "out of range"),
        ({**device, "vendor_board_info": {"k": "a\x00"}}, "vendor_board_info.k: control"),
        ({**device, "deployables": [{**region, "num_accelerators": 2**33}]}, "out of range"),
        ({**device, "deployables": [{**region, "traits": ["T" * 300]}]}, "traits.0: longer"),
        ({**device, "deployables": [{**region, "attributes": {"a": {"b": "\x01"}}}]}, "a.b"),
    ]:
        response = api.put(
            "/v2/hosts/host-1/report", json={**body, "devices": [bad]}, headers=SERVICE
        )
        assert response.status_code == 400, (fragment, response.text)
        assert fragment in detail(response)


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
    lines = [(r.levelno, r.getMessage().split('"')[1])
             for r in caplog.records if r.name == "acceleron.api.access"]  # fmt: skip
    assert lines == [
        (logging.INFO, "PUT /v2/hosts/host-1/report"),
        (logging.DEBUG, "PUT /v2/hosts/host-1/report"),
        (logging.DEBUG, "POST /v2/hosts/host-1/tasks/claim?wait=0"),
    ]
