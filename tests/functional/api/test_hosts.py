"""/v2/hosts: agents' reports through HTTP, on every database backend."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from oslo_config import cfg
from sqlalchemy import select, update

from acceleron import formats
from acceleron.db.models import Host, table
from acceleron.db.session import Database
from acceleron.drivers.fake import FakeDriver
from acceleron.report import HostReport, to_json
from acceleron.service import inventory
from acceleron.service.inventory import HEARTBEAT

V2_5 = {"OpenStack-API-Version": "accelerator 2.5"}
SERVICE = {**V2_5, "X-Roles": "service", "X-Project-Id": "services"}
HOSTS = table(Host)


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


def test_an_unchanged_report_is_named_by_its_digest(
    api: TestClient, conf: cfg.ConfigOpts, db: Database
) -> None:
    """The API answers a report with its digest; ``.../report/unchanged`` with that digest
    does what the same report again does (nothing written, bar the heartbeat) without the
    report. Any other digest, a host it has not, or an agent of another task format is
    refused with the code the agent reads as "send the whole report"."""
    body = report(conf)
    taken = api.put("/v2/hosts/host-1/report", json=body, headers=SERVICE).json()
    digest = taken["digest"]
    assert len(digest) == 64 and taken["changed"] is True
    before = host_row(db)
    same = api.put("/v2/hosts/host-1/report/unchanged", json={"digest": digest}, headers=SERVICE)
    assert same.status_code == 200, same.text
    assert same.json() == {
        "hostname": "host-1",
        "changed": False,
        "generation": taken["generation"],
        "digest": digest,
    }
    assert host_row(db) == before  # nothing written
    with db.writer() as conn:  # the heartbeat due: the time of the last report, alone
        conn.execute(update(HOSTS).values(last_report_at=before.last_report_at - HEARTBEAT))
    assert api.put("/v2/hosts/host-1/report/unchanged", json={"digest": digest}, headers=SERVICE)
    after = host_row(db)
    assert after.last_report_at > before.last_report_at
    rest = [c.name for c in HOSTS.c if c.name not in ("last_report_at", "updated_at")]
    assert [after._mapping[c] for c in rest] == [before._mapping[c] for c in rest]

    def refused(host: str, named: str, headers: dict[str, str] = SERVICE) -> str:
        path = f"/v2/hosts/{host}/report/unchanged"
        answer = api.put(path, json={"digest": named}, headers=headers)
        assert answer.status_code == 409, answer.text
        return str(answer.json()["errors"][0]["code"])

    assert refused("host-1", "0" * 64) == "acceleron.report_unknown"
    assert refused("host-2", digest) == "acceleron.report_unknown"  # a host it has not
    newer = {**SERVICE, formats.HEADER: "report=1.3, task=1.3"}  # its tasks' format changed
    assert refused("host-1", digest, newer) == "acceleron.report_unknown"
    with db.writer() as conn:  # the inventory changed under the report (a lost handle freed)
        inventory.forget_report(conn, "host-1")
    assert refused("host-1", digest) == "acceleron.report_unknown"
    again = api.put("/v2/hosts/host-1/report", json=body, headers=SERVICE).json()
    assert again["digest"] == digest  # the same report, after the full diff
    member = {**V2_5, "X-Roles": "member", "X-Project-Id": "p1"}
    path = "/v2/hosts/host-1/report/unchanged"
    assert api.put(path, json={"digest": digest}, headers=member).status_code == 403
    assert api.put(path, json={"digest": "f" * 65}, headers=SERVICE).status_code == 400


def host_row(db: Database) -> Any:
    with db.reader() as conn:
        return conn.execute(select(HOSTS).where(HOSTS.c.hostname == "host-1")).one()
