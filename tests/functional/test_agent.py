"""The agent against a real, live API over HTTP: reports accepted, the API coming up
late, a report the API refuses, and a host name the API does not know."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests
import uvicorn
from oslo_config import cfg

from acceleron import conf as confmod
from acceleron.agent.loop import Agent
from acceleron.api.app import create_app
from acceleron.cli.main import main
from acceleron.db import migrate
from acceleron.db.session import Database
from tests.fixtures.host import agent_conf, make_agent
from tests.fixtures.ports import free_port
from tests.fixtures.server import serve
from tests.fixtures.waiting import wait_for

V2_5 = {"OpenStack-API-Version": "accelerator 2.5"}


def host_view(url: str, host: str) -> dict[str, Any] | None:
    response = requests.get(f"{url}/v2/hosts/{host}", headers=V2_5, timeout=10)
    if response.status_code == 404:
        return None
    response.raise_for_status()
    view: dict[str, Any] = response.json()["host"]
    return view


def recorded(agent: Agent) -> list[str]:
    """The paths of the calls the agent's client sends from now on (appended to)."""
    paths: list[str] = []
    send = agent.client.send

    def recording(method: str, path: str, **kwargs: Any) -> Any:
        paths.append(f"{method} {path}")
        return send(method, path, **kwargs)

    agent.client.send = recording  # type: ignore[method-assign]
    return paths


def test_a_report_is_accepted_and_an_identical_one_named_by_its_digest(
    live_api: str, tmp_path: Path
) -> None:
    """The same report again goes as the digest the API answered the first with; once
    another report of the host came (another agent's, here), the whole report again."""
    host = f"compute-{uuid.uuid4().hex[:8]}"
    agent = make_agent(agent_conf(tmp_path, live_api, host))
    sent = recorded(agent)
    assert agent.report_once() is True
    first = host_view(live_api, host)
    assert first is not None and first["devices"] == 5
    assert agent.report_once() is True
    second = host_view(live_api, host)
    assert second is not None and second["devices"] == 5
    assert second["generation"] == first["generation"]  # nothing changed
    report, unchanged = f"PUT /v2/hosts/{host}/report", f"PUT /v2/hosts/{host}/report/unchanged"
    assert sent == [report, unchanged]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "inventory.yaml").write_text("devices: []\n")
    conf = agent_conf(tmp_path / "other", live_api, host)
    conf.set_override("inventory_file", str(tmp_path / "other" / "inventory.yaml"), "fake")
    assert make_agent(conf).report_once() is True
    gone = host_view(live_api, host)
    assert gone is not None and gone["devices"] == 0
    sent.clear()
    assert agent.report_once() is True
    assert sent == [unchanged, report]  # refused: the whole report
    back = host_view(live_api, host)
    assert back is not None and back["devices"] == 5


def test_an_api_rolled_back_to_a_release_without_digests_is_sent_the_whole_report(
    conf: cfg.ConfigOpts, db: Database, tmp_path: Path
) -> None:
    """Such an API answers the digest 404: the agent sends the whole report at once."""
    app = create_app(conf, db)
    with serve(app) as url:
        host = f"compute-{uuid.uuid4().hex[:8]}"
        agent = make_agent(agent_conf(tmp_path, url, host))
        sent = recorded(agent)
        assert agent.report_once() is True
        for route in [
            r for r in app.router.routes if str(getattr(r, "path", "")).endswith("/unchanged")
        ]:
            app.router.routes.remove(route)  # rolled back
        assert agent.report_once() is True
        report = f"PUT /v2/hosts/{host}/report"
        assert sent == [report, f"{report}/unchanged", report]
        view = host_view(url, host)
        assert view is not None and view["devices"] == 5


def test_agent_once_on_the_command_line(
    live_api: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], keep_logging: None
) -> None:
    host = f"compute-{uuid.uuid4().hex[:8]}"
    path = tmp_path / "acceleron.conf"
    path.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path}\nhost = {host}\n[agent]\napi_endpoint = {live_api}\n"
    )
    assert main(["--config-file", str(path), "agent", "--once"]) == 0
    view = host_view(live_api, host)
    assert view is not None and view["devices"] == 5


def test_agent_once_with_the_api_down_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], keep_logging: None
) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    path = tmp_path / "acceleron.conf"
    path.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\n[agent]\napi_endpoint = {down}\n")
    assert main(["--config-file", str(path), "agent", "--once"]) == 1
    assert capsys.readouterr().err.endswith(
        f"Cannot reach Acceleron at {down} (connection refused). Is it running? `make run` "
        "starts one. That URL comes from [agent] api_endpoint.\n"
    )


def test_a_report_the_api_refuses_is_logged_and_the_agent_goes_on(
    live_api: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(f"devices: [{{type: GPU, product_id: '1eb8', model: {'X' * 300}}}]\n")
    conf = agent_conf(tmp_path, live_api, f"compute-{uuid.uuid4().hex[:8]}")
    conf.set_override("inventory_file", str(inventory), group="fake")
    agent = make_agent(conf)
    assert agent.report_once() is False  # no exception: the loop keeps running
    assert "not accepted: the API refused the report (400)" in caplog.text
    assert "longer than 255 characters" in caplog.text


# -- the API is down when the agent starts --------------------------------------------


@contextmanager
def api_on(port: int, state: Path) -> Iterator[str]:
    """A fresh API on SQLite, on a port chosen in advance."""
    conf = confmod.load([], config_files=[], overrides={"DEFAULT": {"state_path": str(state)}})
    database = Database(f"sqlite:///{state / 'acceleron.sqlite'}")
    migrate.upgrade(database)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(conf, database),
            host="127.0.0.1",
            port=port,
            log_config=None,
            access_log=False,
        )
    )
    thread = threading.Thread(target=server.run, name="late-api", daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started or not thread.is_alive())
        assert server.started, "the API did not start"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        database.dispose()


def test_the_agent_converges_when_the_api_comes_up_late(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="acceleron.agent")
    port, host = free_port(), "compute-late"
    conf = agent_conf(
        tmp_path,
        f"http://127.0.0.1:{port}",
        host,
        backoff_initial=0.05,
        backoff_max=0.2,
        report_interval=3600,
    )
    agent = make_agent(conf)
    thread = threading.Thread(target=agent.run, name="agent")
    thread.start()
    try:
        wait_for(lambda: "Report not sent (attempt 3)" in caplog.text)
        state = tmp_path / "api"
        state.mkdir()
        with api_on(port, state) as url:
            wait_for(lambda: host_view(url, host) is not None)
            view = host_view(url, host)
            assert view is not None and view["devices"] == 5
            wait_for(lambda: "The API is reachable again after" in caplog.text)
    finally:
        agent.stop()
        thread.join(timeout=10)
    assert not thread.is_alive()


# -- a host name the API does not know ------------------------------------------------


@pytest.fixture
def unknown_host(remote_live_api: str) -> str:
    """A host name the API refuses with 409 acceleron.unknown_host (Placement knows no
    compute node by that name)."""
    host = f"not-a-compute-node-{uuid.uuid4().hex[:8]}.invalid"
    body: Any = {"hostname": host, "agent_version": "0", "devices": [], "report_version": 1}
    answer = requests.put(
        f"{remote_live_api}/v2/hosts/{host}/report", json=body, headers=V2_5, timeout=10
    )
    assert answer.status_code == 409, answer.text
    assert answer.json()["errors"][0]["code"] == "acceleron.unknown_host"
    return host


@pytest.mark.parametrize("once", [["--once"], []], ids=["once", "service"])
def test_a_host_name_the_api_does_not_know_stops_the_agent_with_code_2(
    remote_live_api: str,
    unknown_host: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    keep_logging: None,
    once: list[str],
) -> None:
    path = tmp_path / "acceleron.conf"
    path.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path}\nhost = {unknown_host}\n"
        f"[agent]\napi_endpoint = {remote_live_api}\nudev = false\n"
    )
    assert main(["--config-file", str(path), "agent", *once]) == 2
    err = capsys.readouterr().err
    assert f"does not know this host, {unknown_host!r}, as a compute node" in err
    assert "Set [DEFAULT] host to that name in acceleron.conf" in err


# -- stopping -------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("api_up", [True, False], ids=["reporting", "backing-off"])
def test_a_signal_stops_the_agent_with_code_0(
    live_api: str, tmp_path: Path, signum: signal.Signals, api_up: bool
) -> None:
    host = f"compute-{uuid.uuid4().hex[:8]}"
    url = live_api if api_up else f"http://127.0.0.1:{free_port()}"
    path = tmp_path / "acceleron.conf"
    path.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path}\nhost = {host}\n"
        f"[agent]\napi_endpoint = {url}\nbackoff_initial = 0.05\nbackoff_max = 0.1\n"
    )
    command = [sys.executable, "-m", "acceleron.cli.main", "--config-file", str(path), "agent"]
    log = tmp_path / "agent.log"
    with log.open("w") as stderr:
        process = subprocess.Popen(command, stderr=stderr)
        try:
            if api_up:
                wait_for(lambda: host_view(live_api, host) is not None, 60)
            else:
                wait_for(lambda: "Report not sent (attempt 2)" in log.read_text(), 60)
            process.send_signal(signum)
            process.wait(timeout=15)
        finally:
            process.kill()
    err = log.read_text()
    assert process.returncode == 0, err
    assert f"Agent stopping ({signum.name})" in err
