"""Tasks: work the API hands to a host's agent, kept in the database.

A bind that must program a region, or prepare an mdev, creates a task for the
host's agent; the agent takes its pending tasks (``claim``), reports phases and
progress while it works (``update``) and finishes them ``done`` or ``failed``.
Because tasks live in the database, neither an API nor an agent restart loses
one: an agent that restarts takes up its unfinished tasks again, and a bind
whose task never finishes is failed by the reaper (``bind_tasks.reap``).

States: pending -> running -> done | failed; pending or running -> cancelled.

Agents of different releases: a claim names the task kinds the agent's task format has
(``acceleron.formats``), and only those are handed out; a task of another kind this
release knows waits, pending, for an agent that can do it (or for the reaper). A kind
this release does not know (queued by an API of a newer release beside it) is handed
out as it is: the agent does it, or fails it saying it does not know it.
"""

from __future__ import annotations

import datetime as dt
import uuid as uuidlib
from collections.abc import Collection, Mapping
from typing import Any, NamedTuple

from sqlalchemy import Connection, bindparam, insert, or_, select, update

from acceleron import formats
from acceleron.db.models import Task, table, utcnow
from acceleron.db.session import Database, retry_on_deadlock, signal
from acceleron.exceptions import Conflict, InvalidInput, NotFound
from acceleron.uuids import parse


class TaskRecord(NamedTuple):
    """A task as the service hands it out. Built from a row of ``_COLUMNS`` (the same
    names, in the same order) with ``TaskRecord._make(row)``."""

    id: int
    uuid: str
    hostname: str
    kind: str
    state: str
    phase: str | None
    progress: int | None
    params: dict[str, Any]
    result: dict[str, Any] | None
    error: str | None
    attempts: int
    arq_id: int | None
    deployable_id: int | None
    created_at: dt.datetime | None
    updated_at: dt.datetime | None


TASKS = table(Task)
KINDS = ("program", "create_mdev", "remove_mdev", "clean", "make_mig", "destroy_mig")
STATES = ("pending", "running", "done", "failed", "cancelled")
OPEN = ("pending", "running")
IS_OPEN = or_(*(TASKS.c.state == s for s in OPEN))  # no IN list to expand per call
FINISHED = ("done", "failed", "cancelled")
# Phases an agent reports, in order, for a programming task.
PHASES = ("queued", "fetch", "verify", "program", "clean", "report")
# Signalled with the host's name when a task is queued for it: the host's agent, waiting
# for work in a long poll, is woken (``Database.listen``; PostgreSQL's LISTEN across APIs).
CHANNEL = "acceleron_tasks"

_COLUMNS = [TASKS.c[name] for name in TaskRecord._fields]
_BY_UUID = select(*_COLUMNS).where(TASKS.c.uuid == bindparam("uuid"))
_OPEN_FOR_HOST = (
    select(*_COLUMNS)
    .where(TASKS.c.hostname == bindparam("host"), TASKS.c.state.in_(OPEN))
    .order_by(TASKS.c.id)
)
_make = TaskRecord._make


def create(
    conn: Connection,
    *,
    hostname: str,
    kind: str,
    params: Mapping[str, Any],
    arq_id: int | None = None,
    deployable_id: int | None = None,
) -> str:
    """A new pending task, inside the caller's transaction; its uuid."""
    uuid = str(uuidlib.uuid4())
    conn.execute(
        insert(TASKS).values(
            uuid=uuid,
            hostname=hostname,
            kind=kind,
            state="pending",
            phase="queued",
            progress=0,
            params=dict(params),
            arq_id=arq_id,
            deployable_id=deployable_id,
        )
    )
    signal(conn, CHANNEL, hostname)
    return uuid


_CANCEL_FOR_ARQ = (
    update(TASKS)
    .where(TASKS.c.arq_id == bindparam("arq"), IS_OPEN)
    .values(state="cancelled", updated_at=bindparam("now"))
)


def cancel_for_arq(conn: Connection, arq_id: int) -> None:
    conn.execute(_CANCEL_FOR_ARQ, {"arq": arq_id, "now": utcnow()})


def claim(db: Database, hostname: str, kinds: Collection[str] | None = None) -> list[TaskRecord]:
    """The host's unfinished tasks, oldest first; pending ones become running (an agent
    that restarts gets back the ones it was running: it must not redo finished work).
    Only tasks of ``kinds`` (the agent's task format's; None: all) and of kinds this
    release does not know are handed out. Nothing pending (an idle agent's frequent
    question) costs one read."""
    with db.reader() as conn:
        tasks = _for_agent(conn.execute(_OPEN_FOR_HOST, {"host": hostname}), kinds)
    pending = [t.id for t in tasks if t.state == "pending"]
    if not pending:
        return tasks
    return _start_pending(db, hostname, pending, kinds)


def _for_agent(rows: Any, kinds: Collection[str] | None) -> list[TaskRecord]:
    tasks = map(_make, rows)
    if kinds is None:
        return list(tasks)
    return [t for t in tasks if t.kind in kinds or t.kind not in formats.TASK_KINDS]


_START = (
    update(TASKS)
    .where(TASKS.c.id.in_(bindparam("ids", expanding=True)), TASKS.c.state == "pending")
    .values(state="running", attempts=TASKS.c.attempts + 1, updated_at=bindparam("now"))
)


@retry_on_deadlock
def _start_pending(
    db: Database, hostname: str, ids: list[int], kinds: Collection[str] | None
) -> list[TaskRecord]:
    with db.writer() as conn:
        conn.execute(_START, {"ids": ids, "now": utcnow()})
        return _for_agent(conn.execute(_OPEN_FOR_HOST, {"host": hostname}), kinds)


def get(db: Database, uuid: str) -> TaskRecord:
    with db.reader() as conn:
        return lock(conn, uuid)


def check_progress(state: str, phase: str | None, progress: int | None) -> None:
    if state not in ("running", "done", "failed"):
        raise InvalidInput(f"state: an agent reports running, done or failed, not {state!r}.")
    if phase is not None and phase not in PHASES:
        raise InvalidInput(f"phase: one of {', '.join(PHASES)}, not {phase!r}.")
    if progress is not None and not 0 <= progress <= 100:
        raise InvalidInput(f"progress: a percentage (0 to 100), not {progress}.")


def record(
    conn: Connection,
    task: TaskRecord,
    *,
    state: str,
    phase: str | None,
    progress: int | None,
    result: Mapping[str, Any] | None,
    error: str | None,
) -> TaskRecord:
    """Store an agent's report on a task (in the caller's transaction); the task after."""
    if task.state in FINISHED:
        if task.state == state:  # the agent resent its last word: nothing to do
            return task
        raise Conflict(f"Task {task.uuid} is already {task.state}.")
    values: dict[str, Any] = {"state": state, "updated_at": utcnow()}
    if phase is not None:
        values["phase"] = phase
    if progress is not None:
        values["progress"] = progress
    if result is not None:
        values["result"] = dict(result)
    if error is not None:
        values["error"] = error
    conn.execute(update(TASKS).where(TASKS.c.id == task.id).values(values))
    return _make(conn.execute(_BY_UUID, {"uuid": task.uuid}).one())


def lock(conn: Connection, uuid: str) -> TaskRecord:
    """A task, read in the caller's transaction."""
    task = conn.execute(_BY_UUID, {"uuid": parse(uuid, "uuid")}).first()
    if task is None:
        raise NotFound(f"Task {uuid!r} not found.")
    return _make(task)
