"""Agents and APIs of two releases side by side: the host report and task formats are
versioned (``acceleron.formats``, docs/agent.md "Versions and rolling upgrades").

An older agent's calls are written out here as it sends them (report format 1.0, no
formats header); a newer agent's carry a later minor with fields this API does not know,
or a major it does not read."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from oslo_config import cfg

from acceleron import formats
from acceleron.agent.client import ReportClient, ReportRefused, connect
from acceleron.agent.tasks import Settings, TaskRunner
from acceleron.api.app import create_app
from acceleron.db.session import Database
from acceleron.report import HostReport, to_json
from acceleron.service import tasks
from acceleron.vocabulary import Deployable, Device

V2_5 = {"OpenStack-API-Version": "accelerator 2.5"}
V2_8 = {"OpenStack-API-Version": "accelerator 2.8"}
LATEST = {"OpenStack-API-Version": "accelerator latest"}
HOST = "host-1"
REPORT = formats.show(formats.REPORT_VERSION)  # what this API reads, newest minor

# A report as an agent of release 0.1.0 sends it: format 1.0, before minors existed.
OLD_REPORT: dict[str, Any] = {
    "hostname": HOST,
    "agent_version": "0.1.0",
    "report_version": 1,
    "devices": [
        {
            "pci_address": "0000:af:00.0",
            "type": "FPGA",
            "vendor_id": "8086",
            "vendor_name": "Intel",
            "product_id": "0b30",
            "model": "PAC",
            "driver": "fake",
            "deployables": [
                {"key": "region0", "kind": "region", "name": "region0", "num_accelerators": 1}
            ],
        }
    ],
}
# The same from a newer agent: a later minor, with fields this API does not know, at the
# top and inside a device.
NEWER_REPORT: dict[str, Any] = {
    **OLD_REPORT,
    "agent_version": "9.0.0",
    "report_minor": 7,
    "uptime_seconds": 12,
    "devices": [{**OLD_REPORT["devices"][0], "firmware": {"version": "3"}}],
}


# A GPU partitioned on demand: its deployable's kind came with report format 1.2.
MIG_GPU = Device(
    "0000:17:00.0", "GPU", "10de", "NVIDIA", "2330", "H100", "fake",
    deployables=(Deployable("mig", "mig_gpu", 7, accelerator_type="MIG_INSTANCE"),),
)  # fmt: skip


def detail(response: Any) -> str:
    return str(response.json()["errors"][0]["detail"])


def test_an_older_agents_report_is_read(api: TestClient) -> None:
    answer = api.put(f"/v2/hosts/{HOST}/report", json=OLD_REPORT, headers=V2_5)
    assert answer.status_code == 200, answer.text
    assert answer.json()["devices"] == 1
    assert (
        answer.headers[formats.HEADER]
        == f"report={REPORT}, task={formats.show(formats.TASK_VERSION)}"
    )


def test_a_newer_minor_is_read_and_its_unknown_fields_ignored(api: TestClient) -> None:
    first = api.put(f"/v2/hosts/{HOST}/report", json=NEWER_REPORT, headers=V2_5)
    assert first.status_code == 200, first.text
    assert first.json()["changed"] is True
    # The fields ignored change nothing: the older agent's report is the same inventory.
    again = api.put(f"/v2/hosts/{HOST}/report", json=OLD_REPORT, headers=V2_5)
    assert again.json()["changed"] is False


def test_a_major_this_api_does_not_read_is_409_naming_both(api: TestClient) -> None:
    body = {**OLD_REPORT, "agent_version": "9.0.0", "report_version": 2}
    answer = api.put(f"/v2/hosts/{HOST}/report", json=body, headers=V2_5)
    assert answer.status_code == 409, answer.text
    assert answer.json()["errors"][0]["code"] == "acceleron.unsupported_format"
    assert "format 2.0" in detail(answer) and f"1.x (up to {REPORT})" in detail(answer)


def test_the_version_document_says_the_formats(api: TestClient) -> None:
    assert (
        api.get("/v2").headers[formats.HEADER]
        == f"report={REPORT}, task={formats.show(formats.TASK_VERSION)}"
    )


def test_a_partitionable_gpu_is_reported_from_1_2_and_left_out_before(api: TestClient) -> None:
    """Report 1.2 brings the ``mig_gpu`` kind: written for a reader of 1.1 such a
    deployable is left out (an API of 1.1 refuses the kind), and an API of 1.2 reads it."""
    report = HostReport(HOST, "9.0.0", (MIG_GPU,))
    older = to_json(report, (1, 1))
    assert older["report_minor"] == 1 and older["devices"][0]["deployables"] == []
    for body, kinds in ((older, []), (to_json(report), ["mig_gpu"])):
        answer = api.put(f"/v2/hosts/{HOST}/report", json=body, headers=V2_5)
        assert answer.status_code == 200, answer.text
        shown = api.get("/v2/deployables", params={"hostname": HOST}, headers=LATEST)
        assert [d["kind"] for d in shown.json()["deployables"]] == kinds


# --- tasks ------------------------------------------------------------------------------


def queue(db: Database, kind: str, host: str = HOST) -> str:
    with db.writer() as conn:
        return tasks.create(conn, hostname=host, kind=kind, params={"pci_address": "x"})


def claim(api: TestClient, header: str | None) -> Any:
    headers = {**V2_8, **({formats.HEADER: header} if header is not None else {})}
    return api.post(f"/v2/hosts/{HOST}/tasks/claim", headers=headers)


@pytest.fixture
def newer_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    """This API writes task format 1.1, whose new kind ``reset_device`` 1.0 lacks."""
    monkeypatch.setattr(formats, "TASK_KINDS", {**formats.TASK_KINDS, "reset_device": (1, 1)})
    monkeypatch.setattr(formats, "OURS", formats.Formats.of([(1, 0)], [(1, 1)]))


@pytest.mark.parametrize("header", [None, "report=1.0, task=1.0"], ids=["unversioned", "1.0"])
def test_an_older_agent_gets_only_the_kinds_it_knows(
    api: TestClient, db: Database, newer_kind: None, header: str | None
) -> None:
    old = queue(db, "create_mdev")
    new = queue(db, "reset_device")
    answer = claim(api, header)
    assert answer.status_code == 200, answer.text
    assert [t["uuid"] for t in answer.json()["tasks"]] == [old]
    assert answer.headers[formats.HEADER] == "report=1.0, task=1.1"
    assert tasks.get(db, new).state == "pending"  # waits for an agent that knows it
    newer = claim(api, "report=1.0, task=1.1")
    assert [t["uuid"] for t in newer.json()["tasks"]] == [old, new]
    assert tasks.get(db, new).state == "running"


def test_an_agent_of_task_format_1_2_gets_no_mig_tasks(api: TestClient, db: Database) -> None:
    """Task format 1.3 brings make_mig and destroy_mig: an agent of 1.2 is handed
    neither (they wait, pending), an agent of 1.3 both."""
    clean = queue(db, "clean")
    made, destroyed = queue(db, "make_mig"), queue(db, "destroy_mig")
    older = claim(api, "report=1.1, task=1.2")
    assert [t["uuid"] for t in older.json()["tasks"]] == [clean]
    assert tasks.get(db, made).state == tasks.get(db, destroyed).state == "pending"
    newer = claim(api, "report=1.1, task=1.3")
    assert [t["uuid"] for t in newer.json()["tasks"]] == [clean, made, destroyed]


def test_an_agent_of_another_task_major_is_409_naming_both(api: TestClient, db: Database) -> None:
    queue(db, "create_mdev")
    answer = claim(api, "report=2.0, task=2.0")
    assert answer.status_code == 409, answer.text
    assert answer.json()["errors"][0]["code"] == "acceleron.unsupported_format"
    assert "task format 2.x (up to 2.0)" in detail(answer)
    assert f"1.x (up to {formats.show(formats.TASK_VERSION)})" in detail(answer)


def test_a_newer_agents_task_report_fields_are_ignored(api: TestClient, db: Database) -> None:
    uuid = queue(db, "create_mdev")
    claim(api, None)
    body = {"state": "done", "result": {}, "progress": 100, "seconds_spent": 3.5}
    answer = api.put(f"/v2/tasks/{uuid}", json=body, headers=V2_8)
    assert answer.status_code == 200, answer.text
    assert answer.json()["state"] == "done"


# --- the agent's side, over real HTTP ---------------------------------------------------


@pytest.fixture
def live(conf: cfg.ConfigOpts, db: Database) -> Iterator[str]:
    from tests.fixtures.server import serve

    with serve(create_app(conf, db)) as url:
        yield url


def client(url: str, tmp_path: Path, ours: formats.Formats) -> ReportClient:
    from acceleron import conf as confmod

    overrides: dict[str, dict[str, object]] = {
        "DEFAULT": {"state_path": str(tmp_path), "host": HOST},
        "agent": {"api_endpoint": url},
    }
    made = connect(confmod.load([], config_files=[], overrides=overrides))
    made.ours = ours
    return made


NEXT_MINOR = (formats.REPORT_VERSION[0], formats.REPORT_VERSION[1] + 1)


@dataclasses.dataclass(frozen=True)
class NewerReport(HostReport):
    """A report of the next minor format, as a newer agent writes it: one field more."""

    uptime_seconds: int = dataclasses.field(default=12, metadata={"since": NEXT_MINOR})
    report_minor: int = NEXT_MINOR[1]


def test_a_newer_agent_writes_the_minor_the_api_reads(live: str, tmp_path: Path) -> None:
    newer = client(live, tmp_path, formats.Formats.of([NEXT_MINOR], [(1, 1)]))
    report = NewerReport(HOST, "9.0.0", ())
    assert newer.report(report)["hostname"] == HOST
    assert newer.theirs == formats.OURS  # learnt from the answer
    assert newer._version(formats.REPORT) == formats.REPORT_VERSION
    sent: list[bytes] = []
    send = newer.send

    def spy(method: str, path: str, **kwargs: Any) -> Any:
        sent.append(kwargs.get("data", b""))
        return send(method, path, **kwargs)

    newer.send = spy  # type: ignore[method-assign]
    newer.report(NewerReport(HOST, "9.0.1", ()))  # another: sent whole, not by its digest
    minor = f'"report_minor":{formats.REPORT_VERSION[1]}'.encode()
    assert b"uptime_seconds" not in sent[0] and minor in sent[0]
    # Its word on a task leaves out what task format 1.0 lacks (unknown to this API).
    assert newer.claim_tasks(HOST, 0) == []


def test_a_fresh_agents_first_report_keeps_its_partitionable_gpus(
    live: str, tmp_path: Path, api: TestClient
) -> None:
    """Before an answer says what the API reads, an agent writes the oldest minor; a
    report holding a kind a newer minor brought asks the API's version document first,
    so its first report does not leave the GPU out."""
    fresh = client(live, tmp_path, formats.OURS)
    assert fresh.theirs is None
    fresh.report(HostReport(HOST, "9.0.0", (MIG_GPU,)))
    shown = api.get("/v2/deployables", params={"hostname": HOST}, headers=LATEST)
    assert [d["kind"] for d in shown.json()["deployables"]] == ["mig_gpu"]


def test_an_agent_of_another_major_is_told_both_and_sends_nothing(
    live: str, tmp_path: Path
) -> None:
    newer = client(live, tmp_path, formats.Formats.of([(2, 0)], [(2, 0)]))
    with pytest.raises(ReportRefused) as refused:
        newer.report(HostReport(HOST, "9.0.0", (), report_version=2))
    assert refused.value.code == "acceleron.unsupported_format"
    assert "report format 2.x (up to 2.0)" in str(refused.value)
    assert f"1.x (up to {REPORT})" in str(refused.value)


def test_a_task_kind_the_agent_does_not_know_is_failed_and_recorded(
    live: str, db: Database, tmp_path: Path
) -> None:
    # Queued by an API of a newer release beside this one: this API hands it out as it is.
    uuid = queue(db, "future_kind")
    agent = client(live, tmp_path, formats.OURS)
    settings = Settings(HOST, tmp_path / "cache", tmp_path / "journal.json", wait=0)
    runner = TaskRunner(settings, [], agent)
    [task] = agent.claim_tasks(HOST, 0)
    runner.execute(task)
    recorded = tasks.get(db, uuid)
    assert recorded.state == "failed"
    assert recorded.error is not None
    assert "does not know tasks of kind 'future_kind'" in recorded.error
    assert f"task format {formats.show(formats.TASK_VERSION)}" in recorded.error
    assert agent.claim_tasks(HOST, 0) == []  # not handed out again


# --- report 1.1: where each device sits -------------------------------------------------

TOPOLOGY = {"pcie_switch": "0000:ae:00.0", "nvlink_domain": "nvlink-0000:af:00.0"}
# The same as an agent of report format 1.1 sends it.
TOPOLOGY_REPORT: dict[str, Any] = {
    **OLD_REPORT,
    "agent_version": "0.2.0",
    "report_minor": 1,
    "devices": [{**OLD_REPORT["devices"][0], **TOPOLOGY}],
}


def device_at(api: TestClient, version: str) -> dict[str, Any]:
    headers = {"OpenStack-API-Version": f"accelerator {version}"}
    (device,) = api.get("/v2/devices", params={"hostname": HOST}, headers=headers).json()["devices"]
    return dict(device)


def put(api: TestClient, report: dict[str, Any]) -> dict[str, Any]:
    answer = api.put(f"/v2/hosts/{HOST}/report", json=report, headers=V2_5)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_a_device_shows_where_it_sits_from_2_18(api: TestClient) -> None:
    put(api, TOPOLOGY_REPORT)
    shown = device_at(api, "2.18")
    assert {key: shown[key] for key in TOPOLOGY} == TOPOLOGY
    assert list(shown)[-2:] == ["pcie_switch", "nvlink_domain"]
    assert not set(TOPOLOGY) & set(device_at(api, "2.17"))


def test_an_older_agents_report_leaves_the_topology_recorded(api: TestClient) -> None:
    """A report of 1.0 cannot tell where its devices sit: what was recorded stays. One of
    1.1 without them says there is none."""
    put(api, OLD_REPORT)
    assert {key: device_at(api, "2.18")[key] for key in TOPOLOGY} == dict.fromkeys(TOPOLOGY)
    put(api, TOPOLOGY_REPORT)
    assert put(api, OLD_REPORT)["changed"] is False
    assert {key: device_at(api, "2.18")[key] for key in TOPOLOGY} == TOPOLOGY
    without = {**TOPOLOGY_REPORT, "devices": OLD_REPORT["devices"]}
    assert put(api, without)["changed"] is True
    assert {key: device_at(api, "2.18")[key] for key in TOPOLOGY} == dict.fromkeys(TOPOLOGY)


def test_a_topology_that_does_not_fit_is_refused(api: TestClient) -> None:
    device = {**OLD_REPORT["devices"][0], "nvlink_domain": "n" * 65}
    answer = api.put(
        f"/v2/hosts/{HOST}/report", headers=V2_5, json={**TOPOLOGY_REPORT, "devices": [device]}
    )
    assert answer.status_code == 400, answer.text
    assert "nvlink_domain: longer than 64 characters" in detail(answer)
