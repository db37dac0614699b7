"""Logging through oslo.log (docs/configuration.md, Logging): a live API in this process,
served by uvicorn as in production (handlers on the event loop and in worker threads),
logging to ``[DEFAULT] log_file`` as text or JSON; the lines read back from the file."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests
from keystoneauth1 import adapter
from oslo_config import cfg

from acceleron import logs
from acceleron.api.app import create_app
from acceleron.api.services import services
from acceleron.cli.main import main
from acceleron.db.session import Database
from tests.fixtures.ports import free_port
from tests.fixtures.server import serve
from tests.fixtures.waiting import wait_for

LATEST = {"OpenStack-API-Version": "accelerator latest"}
GROUPS = [{"resources:FPGA": "1"}]


@contextmanager
def kept_logging() -> Iterator[None]:
    """The test process's logging (root handlers, every logger's level) put back as it was
    after the block, which sets it up."""
    manager = logging.Logger.manager
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {
        name: logger.level
        for name, logger in manager.loggerDict.items()
        if isinstance(logger, logging.Logger)
    }
    try:
        yield
    finally:
        for handler in root.handlers:
            if handler not in handlers:
                handler.close()
        root.handlers[:] = handlers
        root.setLevel(level)
        for name, logger in list(manager.loggerDict.items()):
            if isinstance(logger, logging.Logger):
                logger.setLevel(levels.get(name, logging.NOTSET))


@contextmanager
def logging_to(conf: cfg.ConfigOpts, path: Path, **options: Any) -> Iterator[Path]:
    """Logging set up from ``conf`` with ``log_file = path`` and ``options`` for the
    block."""
    for name, value in {"log_file": str(path), **options}.items():
        conf.set_override(name, value)
    with kept_logging():
        logs.setup(conf, "acceleron-api")
        yield path


def create_profile(url: str, user: str, project: str, **headers: str) -> str:
    """A device profile created as ``user`` of ``project``; the request's id."""
    caller = {**LATEST, "X-User-Id": user, "X-Project-Id": project, **headers}
    body: list[dict[str, Any]] = [{"name": f"dp-{user}", "groups": GROUPS}]
    response = requests.post(f"{url}/v2/device_profiles", json=body, headers=caller, timeout=30)
    assert response.status_code == 201, response.text
    return str(response.headers["x-openstack-request-id"])


def lines_of(path: Path, request_id: str) -> list[str]:
    return [line for line in path.read_text().splitlines() if request_id in line]


def logged_whole(path: Path, request_id: str) -> bool:
    """The request's access line (its last, written after the answer went) is there."""
    return any("acceleron.api.access" in line for line in lines_of(path, request_id))


def polled_line(path: Path) -> str:
    """The access line of the poll for host h1's work, or ''."""
    found = [
        line for line in path.read_text().splitlines() if '"POST /v2/hosts/h1/tasks/claim' in line
    ]
    return found[0] if found else ""


def test_every_line_of_a_request_names_it_and_its_caller(
    conf: cfg.ConfigOpts, sqlite_db: Database, tmp_path: Path
) -> None:
    """Eight callers at once: the handlers' lines (logged in worker threads) and the access
    lines (on the event loop) each carry their own request's id, user and project."""
    with (
        logging_to(conf, tmp_path / "acceleron.log") as log,
        serve(create_app(conf, sqlite_db)) as url,
    ):
        with ThreadPoolExecutor(8) as pool:
            callers = [(f"user-{i}", f"project-{i}") for i in range(8)]
            ids = list(pool.map(lambda caller: create_profile(url, *caller), callers))
        wait_for(lambda: all(logged_whole(log, request_id) for request_id in ids))
    for request_id, (user, project) in zip(ids, callers, strict=True):
        lines = lines_of(log, request_id)
        assert any(f"Created device profile dp-{user} " in line for line in lines), lines
        for (
            line
        ) in lines:  # [global id (None: no other service sent one), request id, user, project, ...]
            assert f" [None {request_id} {user} {project} - - - -] " in line, line
    created = [line for line in log.read_text().splitlines() if "Created device profile" in line]
    assert len(created) == 8
    assert all(
        re.search(r" \[None req-[0-9a-f-]{36} user-\d project-\d ", line) for line in created
    )


def test_a_request_id_another_service_sent_is_the_global_one(
    conf: cfg.ConfigOpts, sqlite_db: Database, tmp_path: Path
) -> None:
    nova = "req-3f2a6b9c-1d4e-4f5a-8b6c-7d8e9f0a1b2c"
    with (
        logging_to(conf, tmp_path / "acceleron.log") as log,
        serve(create_app(conf, sqlite_db)) as url,
    ):
        request_id = create_profile(url, "nova", "services", **{"X-OpenStack-Request-ID": nova})
        not_an_id = create_profile(url, "other", "services", **{"X-OpenStack-Request-ID": "x y"})
        wait_for(lambda: logged_whole(log, request_id) and logged_whole(log, not_an_id))
    assert request_id != nova
    assert all(f"[{nova} {request_id} nova services " in line for line in lines_of(log, request_id))
    assert all(f"[None {not_an_id} other services " in line for line in lines_of(log, not_an_id))


def test_json_lines_carry_the_context(
    conf: cfg.ConfigOpts, sqlite_db: Database, tmp_path: Path
) -> None:
    with (
        logging_to(conf, tmp_path / "acceleron.json", use_json=True) as log,
        serve(create_app(conf, sqlite_db)) as url,
    ):
        request_id = create_profile(url, "alice", "project-a")
        wait_for(lambda: logged_whole(log, request_id))
    records = [json.loads(line) for line in log.read_text().splitlines()]
    mine = [r for r in records if r.get("context", {}).get("request_id") == request_id]
    assert {r["name"] for r in mine} >= {
        "acceleron.service.device_profiles",
        "acceleron.api.access",
    }
    for record in mine:
        assert (record["context"]["user"], record["context"]["project"]) == ("alice", "project-a")
        assert record["context"]["roles"] == ["admin", "member", "reader"]
        assert record["context"]["is_admin"] is True
    # Lines outside any request carry no context.
    assert all(r.get("context") in (None, {}) for r in records if r not in mine)


@pytest.mark.parametrize("debug", [False, True])
def test_debug_lines_only_with_debug(
    conf: cfg.ConfigOpts, sqlite_db: Database, tmp_path: Path, debug: bool
) -> None:
    """A poll for work that found none is logged at DEBUG: only with ``debug = true``."""
    service = {
        "OpenStack-API-Version": "accelerator 2.8",
        "X-Roles": "service",
        "X-Project-Id": "services",
    }
    with (
        logging_to(conf, tmp_path / "acceleron.log", debug=debug) as log,
        serve(create_app(conf, sqlite_db)) as url,
    ):
        poll = requests.post(f"{url}/v2/hosts/h1/tasks/claim?wait=0", headers=service, timeout=30)
        assert poll.json() == {"tasks": []}
        created = create_profile(url, "alice", "project-a")
        wait_for(lambda: logged_whole(log, created))
    polled = lines_of(log, poll.headers["x-openstack-request-id"])
    if debug:
        assert any(" DEBUG acceleron.api.access " in line for line in polled), polled
    else:
        assert polled == []
        assert " DEBUG " not in log.read_text()
    assert any(" INFO acceleron.api.access " in line for line in lines_of(log, created))


def test_a_request_that_waits_on_the_event_loop_keeps_its_own_context(
    conf: cfg.ConfigOpts, sqlite_db: Database, tmp_path: Path
) -> None:
    """An agent's poll for work waits on the event loop while another caller's request is
    served on the same thread: the poll's lines still name the poll and the agent (a
    thread-local context would name the last caller the loop served)."""
    agent = {
        "OpenStack-API-Version": "accelerator 2.8",
        "X-Roles": "service",
        "X-User-Id": "agent",
        "X-Project-Id": "services",
    }
    app = create_app(conf, sqlite_db)
    with (
        logging_to(conf, tmp_path / "acceleron.log", debug=True) as log,
        serve(app) as url,
        ThreadPoolExecutor(1) as pool,
    ):
        claim = f"{url}/v2/hosts/h1/tasks/claim?wait=30"
        polling = pool.submit(requests.post, claim, headers=agent, timeout=60)
        wait_for(lambda: services(app).task_wakeup.waiters("h1") == 1)
        created = create_profile(url, "alice", "project-a")
        services(app).stopping.set()  # the poll answers now, with no work
        services(app).task_wakeup.wake_all()
        poll = polling.result()
        assert poll.json() == {"tasks": []}
        polled = poll.headers["x-openstack-request-id"]
        wait_for(lambda: logged_whole(log, created) and polled_line(log))
    assert f" {polled} agent services " in polled_line(log)
    assert all(" agent services " in line for line in lines_of(log, polled))
    assert all(" alice project-a " in line for line in lines_of(log, created))


def test_a_line_outside_any_request_names_none(
    conf: cfg.ConfigOpts, placement: adapter.Adapter, tmp_path: Path
) -> None:
    """The embedded Placement leaves its request's context in oslo.context's store of the
    thread that called it (the Placement sync's): the thread's next lines are no part of
    that request, and say so."""
    with logging_to(conf, tmp_path / "acceleron.log") as log:
        assert placement.get("/resource_providers").status_code == 200
        logging.getLogger("acceleron.service.publish").info("Published nothing")
    (line,) = [line for line in log.read_text().splitlines() if "Published nothing" in line]
    assert " INFO acceleron.service.publish [-] Published nothing" in line


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (
            "log_file = {tmp}/missing/acceleron.log",
            "Cannot log to {tmp}/missing/acceleron.log: No such file or directory.\n",
        ),
        (
            "use_journal = true",
            "use_journal = true needs systemd's Python bindings, which are not installed where "
            "Acceleron runs: pip install systemd-python (it builds against libsystemd-dev), or "
            "log to standard error, which systemd also sends to the journal.\n",
        ),
    ],
    ids=["log_file", "use_journal"],
)
def test_a_log_that_cannot_be_written_stops_the_command_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, message: str
) -> None:
    if option.startswith("use_journal") and importlib.util.find_spec("systemd") is not None:
        pytest.skip("systemd's Python bindings are installed here")
    path = tmp_path / "acceleron.conf"
    path.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\n{option.format(tmp=tmp_path)}\n")
    with kept_logging():
        assert main(["--config-file", str(path), "agent", "--once"]) == 1
    assert capsys.readouterr().err == message.format(tmp=tmp_path)


@pytest.mark.slow
def test_log_dir_alone_gives_each_program_its_file_worker_processes_included(
    tmp_path: Path,
) -> None:
    """``acceleron api --workers 2`` with ``log_dir`` and no ``log_file``: every worker
    process writes ``acceleron-api.log`` (oslo.log alone names it after the running
    script, ``<string>`` in a worker process)."""
    logs_dir = tmp_path / "logs"
    logs_dir.mkdir()  # as systemd's LogsDirectory= makes it
    path = tmp_path / "acceleron.conf"
    path.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\nlog_dir = {logs_dir}\n")
    with kept_logging():
        assert main(["--config-file", str(path), "db", "upgrade"]) == 0
    port = free_port()
    command = [
        str(Path(sys.executable).parent / "acceleron"),
        "--config-file",
        str(path),
        "api",
        "--port",
        str(port),
        "--workers",
        "2",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    with (tmp_path / "stderr").open("wb") as stderr:
        process = subprocess.Popen(command, stderr=stderr, env=env)

    def started() -> int:  # uvicorn logs one line as each worker process starts
        assert process.poll() is None, (tmp_path / "stderr").read_text()
        text = "".join(log.read_text() for log in logs_dir.iterdir())
        return text.count("INFO acceleron.server [-] Started server process")

    answers: list[requests.Response] = []

    def answered() -> bool:  # a worker listens once its application has started
        try:
            answers.append(requests.get(f"http://127.0.0.1:{port}/v2", timeout=10))
        except requests.ConnectionError:
            return False
        return True

    try:
        wait_for(lambda: started() == 2, 60)
        wait_for(answered, 60)
        request_id = answers[0].headers["x-openstack-request-id"]
        wait_for(lambda: logged_whole(logs_dir / "acceleron-api.log", request_id))
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert sorted(log.name for log in logs_dir.iterdir()) == ["acceleron-api.log"]


def test_an_unexpected_errors_line_names_its_request(
    conf: cfg.ConfigOpts, sqlite_db: Database, tmp_path: Path
) -> None:
    """The line of a 500 carries the request's id, and the answer its header (the line
    showed ``[-]`` and the header was missing: Starlette's handler of unexpected errors
    runs outside the middleware that names the request)."""
    app = create_app(conf, sqlite_db)

    def boom() -> None:
        raise RuntimeError("boom")

    app.add_api_route("/v2/boom", boom)
    with logging_to(conf, tmp_path / "acceleron.log") as log, serve(app) as url:
        response = requests.get(f"{url}/v2/boom", headers=LATEST, timeout=30)
        assert response.status_code == 500
        request_id = response.headers["x-openstack-request-id"]
        wait_for(lambda: logged_whole(log, request_id))
    (line,) = [line for line in log.read_text().splitlines() if "Unexpected error" in line]
    assert f" ERROR acceleron.api.errors [None {request_id} " in line, line
    assert response.json()["errors"][0]["request_id"] == request_id


def test_uvicorns_server_lines_are_acceleron_s(
    conf: cfg.ConfigOpts, sqlite_db: Database, tmp_path: Path
) -> None:
    with logging_to(conf, tmp_path / "acceleron.log") as log:
        logging.getLogger("uvicorn.error").info("Started server process [%d]", 1)
    text = log.read_text()
    assert "INFO acceleron.server [-] Started server process [1]" in text
    assert "uvicorn.error" not in text


@pytest.mark.parametrize("where", ["stderr", "log_file"])
def test_a_refused_api_start_says_so_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """An empty database: the refusal once on standard error (it was logged with the
    exception appended: the message twice), and once in the log file given with oslo.log's
    own --log-file (which was ignored)."""
    path = tmp_path / "acceleron.conf"
    path.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\n")
    log = tmp_path / "api.log"
    given = ["--log-file", str(log)] if where == "log_file" else []
    refusal = "The database is empty: run 'acceleron db upgrade' first."
    with kept_logging():
        code = main(["--config-file", str(path), *given, "api", "--port", str(free_port())])
    assert code == 1
    assert capsys.readouterr().err == f"{refusal}\n"
    if where == "log_file":
        (line,) = log.read_text().splitlines()
        assert line.endswith(f" ERROR acceleron [-] {refusal}"), line


def test_oslo_logs_command_line_options_reach_the_service(tmp_path: Path) -> None:
    from acceleron import conf as confmod
    from acceleron.cli.main import AcceleronApp, log_arguments

    app = AcceleronApp()
    parser = app.build_option_parser("", "0")
    options, _ = parser.parse_known_args(
        [
            "--logfile",
            "f.log",
            "--log-dir",
            "d",
            "--debug",
            "--use-syslog",
            "--use-json",
            "--syslog-log-facility",
            "LOG_LOCAL1",
            "api",
        ]
    )
    conf = confmod.load(log_arguments(options), config_files=[])
    assert (conf.log_file, conf.log_dir, conf.debug) == ("f.log", "d", True)
    assert (conf.use_syslog, conf.use_json, conf.use_journal) == (True, True, False)
    assert conf.syslog_log_facility == "LOG_LOCAL1"


def test_the_command_lines_log_options_reach_the_worker_processes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``acceleron --log-file F api --workers 2``: the worker processes read the files and
    the environment, not the command line; the options it set go there."""
    from acceleron import conf as confmod
    from acceleron.cli.server import _command_line_to_environment

    for name in ("OS_DEFAULT__LOG_FILE", "OS_DEFAULT__DEBUG", "OS_DEFAULT__USE_JSON"):
        monkeypatch.setenv(name, "")  # recorded: what the command sets is undone after
        monkeypatch.delenv(name)
    log = str(tmp_path / "api.log")
    conf = confmod.load(["--log-file", log, "--debug"], config_files=[])
    _command_line_to_environment(conf)
    assert os.environ["OS_DEFAULT__LOG_FILE"] == log
    assert os.environ["OS_DEFAULT__DEBUG"] == "True"
    assert "OS_DEFAULT__USE_JSON" not in os.environ  # not given: the files' value stands
    worker = confmod.load([], config_files=[])
    assert (worker.log_file, worker.debug) == (log, True)


def test_a_misspelt_option_is_warned_about_at_start(tmp_path: Path) -> None:
    """oslo.config ignores an option nothing registered: a typo took effect as the
    default, in silence."""
    from acceleron import conf as confmod

    path = tmp_path / "acceleron.conf"
    path.write_text("[api]\nprot = 7000\n[placment]\nmode = remote\n")
    conf = confmod.load([], config_files=[str(path)])
    with logging_to(conf, tmp_path / "acceleron.log") as log:
        pass
    found = (
        re.search(r" WARNING acceleron\.conf \[-\] (.*)$", line)
        for line in log.read_text().splitlines()
    )
    assert [said[1] for said in found if said] == [
        f"[api] prot in {path}: no such option or section; ignored (misspelt?)",
        f"[placment] in {path}: no such option or section; ignored (misspelt?)",
    ]
