"""/metrics: what a scrape shows after real work (a bind that programs a region through
the agent's task runner, Placement calls), that a scrape queries no database, and that
the workers of ``acceleron api --workers 2`` add up."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import requests
from fastapi.testclient import TestClient
from oslo_config import cfg
from prometheus_client.parser import text_string_to_metric_families

from acceleron import metrics
from acceleron.api.app import create_app
from acceleron.db.session import Database, StatementCounter
from acceleron.placement.client import PlacementClient
from acceleron.service import stats
from tests.fixtures.host import Host, bind, profile, upload
from tests.fixtures.ports import free_port
from tests.fixtures.waiting import wait_for

REGION0_TYPE = "ce48969398f05f33946d560708be108a"


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(
    found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


def scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    response = requests.get(f"{url}/metrics", timeout=30)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return samples(response.text)


@pytest.fixture
def host(live_api: str, tmp_path: Path) -> Host:
    found = Host(live_api, tmp_path)
    found.report()
    return found


def test_a_programmed_bind_shows_in_the_metrics(host: Host) -> None:
    before = scrape(host.url)
    function = uuid.uuid4().hex
    upload(host.url, REGION0_TYPE, function, REGION0_TYPE)
    group = {
        "resources:CUSTOM_ACCELERATOR_FPGA": "1",
        "trait:CUSTOM_PROGRAMMABLE": "required",
        "accel:function_id": function,
    }
    arq = bind(host, profile(host.url, [group]), host.region()["rp_uuid"])
    host.run_tasks(
        lambda: (
            requests.get(f"{host.url}/v2/accelerator_requests/{arq}", timeout=30).json()["state"]
            == "Bound"
        )
    )
    after = scrape(host.url)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    route = "/v2/accelerator_requests"
    assert grew("acceleron_api_requests_total", route=route, method="POST", status="201") == 1
    assert grew("acceleron_api_requests_total", route=route, method="PATCH", status="202") == 1
    assert grew("acceleron_api_request_duration_seconds_count", route=route, method="POST") == 1
    assert grew("acceleron_bind_duration_seconds_count", outcome="bound") == 1
    for phase in ("fetch", "verify", "program"):
        assert grew("acceleron_programming_phase_duration_seconds_count", phase=phase) == 1
        assert grew("acceleron_agent_programming_phase_duration_seconds_count", phase=phase) == 1
    assert grew("acceleron_agent_tasks_total", kind="program", outcome="done") == 1
    assert grew("acceleron_bitstream_cache_lookups_total", result="miss") == 1


def test_state_gauges_come_from_the_refresher_and_a_scrape_queries_nothing(
    conf: cfg.ConfigOpts, db: Database
) -> None:
    from acceleron.drivers.fake import FakeDriver
    from acceleron.report import HostReport
    from acceleron.service import inventory

    conf.set_override("host", "host-m")
    conf.set_override("refresh_interval", 3600, group="metrics")
    inventory.reconcile(
        db, HostReport("host-m", "1", tuple(FakeDriver(conf, Path("/")).discover()))
    )
    app = create_app(conf, db)
    with TestClient(app, raise_server_exceptions=False) as api:
        wait_for(lambda: app.state.metrics_refreshes >= 1)  # at start, then hourly here
        stats.refresh(db, placement=True)
        with StatementCounter(db) as counter:
            response = api.get("/metrics")
        assert counter.by_verb == {}
    found = samples(response.text)
    assert value(found, "acceleron_arqs", state="Bound") == 0
    assert (
        value(
            found,
            "acceleron_devices",
            type="QAT",
            health="healthy",
            status="enabled",
            state="present",
        )
        == 1
    )
    assert (
        value(found, "acceleron_deployables", kind="vf_pool", type="QAT", availability="available")
        == 1
    )
    assert value(found, "acceleron_attach_handles", type="QAT", kind="vf_pool", usage="free") == 4
    assert value(found, "acceleron_placement_hosts_unsynced") >= 1
    assert 0 <= value(found, "acceleron_agent_report_age_seconds", host="host-m") < 60
    assert value(found, "acceleron_agent_last_report_timestamp_seconds", host="host-m") > 0


def test_placement_calls_are_counted_by_kind(placement: Any) -> None:
    client = PlacementClient(placement)
    before = samples(metrics.exposition().decode())
    assert client.get_provider(str(uuid.uuid4())) is None
    client.find_provider("nothing-by-that-name")
    after = samples(metrics.exposition().decode())

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("acceleron_placement_requests_total", method="GET", kind="resource_providers") == 2
    assert (
        grew("acceleron_placement_errors_total", kind="resource_providers", error="not_found") == 1
    )


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/resource_providers/0e7c/inventories/CUSTOM_X", "resource_providers/inventories"),
        ("/allocations/5b0f?x=1", "allocations"),
        ("/allocation_candidates?resources=VCPU:1", "allocation_candidates"),
        ("/traits/CUSTOM_Y", "traits"),
        ("/", "/"),
    ],
)
def test_placement_kinds(path: str, kind: str) -> None:
    assert metrics.placement_kind(path) == kind


@pytest.mark.slow
def test_the_workers_of_one_server_add_up(tmp_path: Path) -> None:
    """Twenty requests to a server of two worker processes: a scrape of either worker
    counts all twenty."""
    config = tmp_path / "acceleron.conf"
    config.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\n")
    command = [sys.executable, "-m", "acceleron.cli.main", "--config-file", str(config)]
    subprocess.run([*command, "db", "upgrade"], check=True, capture_output=True, timeout=120)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != metrics.MULTIPROC_ENV}
    server = subprocess.Popen(
        [*command, "api", "--port", str(port), "--workers", "2"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(url), seconds=120)
        base = [scrape(url) for _ in range(4)]
        counted = [
            value(s, "acceleron_api_requests_total", route="/v2", method="GET", status="200")
            for s in base
        ]
        for _ in range(20):
            with requests.Session() as fresh:  # a new connection: either worker may answer
                assert fresh.get(f"{url}/v2", timeout=30).status_code == 200
        time.sleep(0.2)
        totals = {
            value(
                scrape(url), "acceleron_api_requests_total", route="/v2", method="GET", status="200"
            )
            for _ in range(6)
        }
        assert totals == {max(counted) + 20}
    finally:
        server.terminate()
        server.wait(timeout=60)


def _answers(url: str) -> bool:
    try:
        return requests.get(f"{url}/", timeout=2).status_code == 200
    except requests.RequestException:
        return False
