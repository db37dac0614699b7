"""The task runner's failure handling, with a recording stand-in for the API client:
a task interrupted by the API going away stays unfinished (no journal, no report); a
driver that breaks fails its task instead of stopping the agent; the journal stays small."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from acceleron.agent import tasks
from acceleron.agent.client import ApiUnreachable
from acceleron.drivers import gbs
from acceleron.drivers.fake import FakeDriver
from tests.fixtures.tasks import REGION_TYPE, Api, conf, program_task


def runner(tmp_path: Path, api: Api, driver: FakeDriver) -> tasks.TaskRunner:
    return tasks.TaskRunner(tasks.Settings.from_conf(conf(tmp_path)), [driver], api)  # type: ignore[arg-type]


def test_an_api_gone_mid_fetch_leaves_the_task_unfinished(tmp_path: Path) -> None:
    data = gbs.build(REGION_TYPE, ("ab" * 16,), b"\0" * 1000)
    driver = FakeDriver(conf(tmp_path), Path("/"))
    api = Api(data, fail_download=True)
    work = runner(tmp_path, api, driver)
    work.execute(program_task(driver, data))
    assert work.journal.get("t1") is None  # not done, not failed: it comes back
    assert [u["state"] for u in api.updates] == ["running"]  # only "fetch" started

    api.fail_download = False
    work.execute(program_task(driver, data))
    done = work.journal.get("t1")
    assert done is not None
    seconds = done["result"].pop("phase_seconds")  # the API observes them
    assert set(seconds) == {"fetch", "verify", "program"}
    assert done == {
        "state": "done",
        "result": {
            "bitstream_id": "b1",
            "function_uuid": "ab" * 16,
            "functions": ["ab" * 16],
            "signature": {"verified": False, "reason": "unsigned"},
        },
    }
    assert api.updates[-1]["state"] == "done" and api.updates[-1]["phase"] == "report"


def test_a_broken_driver_fails_its_task_not_the_agent(tmp_path: Path) -> None:
    data = gbs.build(REGION_TYPE, ("cd" * 16,), b"\0" * 100)
    driver = FakeDriver(conf(tmp_path), Path("/"))

    def broken(*args: Any) -> None:
        raise ZeroDivisionError("the vendor tool's wrapper has a bug")

    driver.program = broken  # type: ignore[method-assign,assignment]
    api = Api(data)
    runner(tmp_path, api, driver).execute(program_task(driver, data))
    assert api.updates[-1]["state"] == "failed"
    assert "ZeroDivisionError" in api.updates[-1]["error"]


def test_the_journal_keeps_the_latest_tasks(tmp_path: Path) -> None:
    journal = tasks.Journal(tmp_path / "journal.json", keep=5)
    for n in range(25):
        journal.put(f"t{n}", {"state": "done"})
    assert journal.get("t19") is None and journal.get("t20") is not None
    assert len(json.loads((tmp_path / "journal.json").read_text())) == 5
    (tmp_path / "journal.json").write_text("{not json")
    assert journal.get("t1") is None  # an unreadable journal is ignored, with a warning


class Outage:
    """An API that answers nothing until it has been probed ``down`` times; the runner
    is stopped at its first claim after that."""

    def __init__(self, down: int) -> None:
        self.down = down
        self.calls: list[str] = []
        self.runner: tasks.TaskRunner | None = None

    def claim_tasks(self, hostname: str, wait: float) -> list[dict[str, Any]]:
        self.calls.append("claim")
        if self.calls.count("probe") < self.down:
            raise ApiUnreachable("cannot reach http://api: Connection refused")
        assert self.runner is not None
        self.runner.stop()
        return []

    def probe(self) -> bool:
        self.calls.append("probe")
        return self.calls.count("probe") >= self.down


def test_the_runner_probes_an_api_that_went_away_instead_of_sleeping(tmp_path: Path) -> None:
    """A backoff of a minute is cut short by the first probe that finds the API back."""
    settings = tasks.Settings(
        hostname="h",
        cache_dir=tmp_path,
        journal=tmp_path / "j.json",
        backoff_initial=60,
        backoff_max=600,
        probe_interval=0.01,
    )
    api = Outage(down=3)
    work = tasks.TaskRunner(settings, [], api)  # type: ignore[arg-type]
    api.runner = work
    thread = threading.Thread(target=work.run, daemon=True)
    thread.start()
    thread.join(timeout=30)  # without probing: a minute at least
    stopped = not thread.is_alive()
    work.stop()
    assert stopped, api.calls
    assert api.calls == ["claim", "probe", "probe", "probe", "claim"]
