"""An agent's long poll for work is woken when a task is queued for its host: in the
same process on every backend, and across processes with PostgreSQL's LISTEN/NOTIFY.

The polling fallback is pushed out of reach (60 s) so that only a wake-up can answer a
waiting poll before its own ``wait`` runs out."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from oslo_config import cfg
from tests.fixtures.waiting import wait_for

from acceleron.api import wakeup
from acceleron.api.app import create_app
from acceleron.api.services import services
from acceleron.db.session import Database
from acceleron.service import tasks

V2_8 = {"OpenStack-API-Version": "accelerator 2.8"}
HOST = "waiting-host"


@pytest.fixture
def no_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wakeup, "POLL", 60.0)


def queue(db: Database, host: str = HOST) -> str:
    with db.writer() as conn:
        return tasks.create(conn, hostname=host, kind="create_mdev", params={"n": 1})


class Poll:
    """``POST /v2/hosts/{host}/tasks/claim?wait=30`` in a thread, as an idle agent."""

    def __init__(self, api: TestClient, host: str = HOST) -> None:
        self.answer: list[dict[str, Any]] | None = None
        self._thread = threading.Thread(target=self._run, args=(api, host))
        self._thread.start()
        waker = services(api.app).task_wakeup  # type: ignore[arg-type]
        wait_for(lambda: waker.waiters(host) == 1)

    def _run(self, api: TestClient, host: str) -> None:
        answer = api.post(f"/v2/hosts/{host}/tasks/claim", params={"wait": 30}, headers=V2_8)
        self.answer = answer.json()["tasks"]

    def result(self) -> list[dict[str, Any]]:
        self._thread.join(40)
        assert self.answer is not None
        return self.answer


def test_a_queued_task_wakes_the_waiting_poll(
    api: TestClient, db: Database, no_fallback: None
) -> None:
    poll = Poll(api)
    uuid = queue(db)
    assert [(t["uuid"], t["state"]) for t in poll.result()] == [(uuid, "running")]


def test_a_rolled_back_task_or_another_hosts_leaves_the_poll_waiting(
    api: TestClient, db: Database, no_fallback: None
) -> None:
    poll = Poll(api)
    with pytest.raises(RuntimeError), db.writer() as conn:
        tasks.create(conn, hostname=HOST, kind="create_mdev", params={})
        raise RuntimeError("rolled back")
    queue(db, "another-host")
    waker = services(api.app).task_wakeup  # type: ignore[arg-type]
    assert waker.waiters(HOST) == 1  # still waiting
    uuid = queue(db)
    assert [t["uuid"] for t in poll.result()] == [uuid]


def test_polling_stays_the_fallback(conf: cfg.ConfigOpts, db: Database) -> None:
    conf.set_override("task_wakeup", "poll", group="api")
    with TestClient(create_app(conf, db)) as api:
        poll = Poll(api)
        uuid = queue(db)
        assert [t["uuid"] for t in poll.result()] == [uuid]


@pytest.fixture
def other_process(db: Database) -> Iterator[Database]:
    """The same database through an engine of its own: as another API process sees it."""
    if db.backend != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's")
    other = Database(db.url.render_as_string(hide_password=False))
    other.notify_channels = True  # what [api] task_wakeup = notify does in that process
    yield other
    other.dispose()


def test_a_task_queued_by_another_api_process_wakes_the_poll(
    api: TestClient, db: Database, other_process: Database, no_fallback: None
) -> None:
    waker = services(api.app).task_wakeup  # type: ignore[arg-type]
    wait_for(lambda: waker.listening)
    poll = Poll(api)
    uuid = queue(other_process)
    assert [t["uuid"] for t in poll.result()] == [uuid]


def test_a_poll_signals_reach_looks_once_and_an_unwoken_one_ends_empty(
    api: TestClient, db: Database, other_process: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where every API process's signals reach this one, an idle poll costs one look at
    the database, whatever its wait; a task queued while it waits still wakes it."""
    waker = services(api.app).task_wakeup  # type: ignore[arg-type]
    wait_for(lambda: waker.listening)
    looks = []
    claim = tasks.claim

    def counted(*args: Any) -> list[tasks.TaskRecord]:
        looks.append(args[1])
        return claim(*args)

    monkeypatch.setattr(tasks, "claim", counted)
    answer = api.post(f"/v2/hosts/{HOST}/tasks/claim", params={"wait": 1.5}, headers=V2_8)
    assert answer.status_code == 200 and answer.json()["tasks"] == []
    assert looks == [HOST]
    poll = Poll(api)
    uuid = queue(other_process)
    assert [t["uuid"] for t in poll.result()] == [uuid]
    assert looks == [HOST] * 3  # the second poll's first look, and the look once woken
