"""A device's history: each tenancy of one of its attach handles, once given back.

A row is written when a request gives its handle back (``record``): the project, the
instance, the request, when it was bound and released, what the region held then (its
provenance), and the cleaning chosen; the cleaning's end fills in how it went
(``cleaned``). Admins read a device's newest tenancies first (``history``); rows older
than ``[cleaning] history_days`` are deleted (``prune``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any, NamedTuple

from sqlalchemy import Connection, delete, insert, select, update

from acceleron.db.models import Device, Tenancy, table, utcnow
from acceleron.db.session import Database, retry_on_deadlock
from acceleron.exceptions import NotFound
from acceleron.uuids import parse

TENANCIES, DEVICES = table(Tenancy), table(Device)
PENDING, DONE, FAILED, SKIPPED = "pending", "done", "failed", "skipped"
MAX_LIMIT = 1000


class TenancyRecord(NamedTuple):
    deployable: str
    handle: str
    project_id: str | None
    instance_uuid: str | None
    arq_uuid: str
    bound_at: dt.datetime | None
    released_at: dt.datetime
    held: dict[str, Any] | None
    method: str
    cleaning: str
    task_uuid: str | None
    cleaned_at: dt.datetime | None
    cleaning_seconds: float | None
    cleaning_error: str | None


def record(
    conn: Connection,
    given_back: Any,
    arq: Any,
    method: str,
    cleaning: str,
    error: str | None = None,
) -> None:
    """The tenancy of ``arq`` on the handle ``given_back`` (a row of ``cleaning.HELD``)
    ends now; ``cleaning``: pending, or skipped with ``error`` saying why when it is not
    none."""
    conn.execute(
        insert(TENANCIES).values(
            device_id=given_back.device_id,
            deployable_id=given_back.deployable_id,
            deployable=given_back.deployable_key,
            handle=given_back.address,
            project_id=arq.project_id,
            instance_uuid=arq.instance_uuid,
            arq_uuid=arq.uuid,
            bound_at=arq.bind_started_at,
            released_at=utcnow(),
            held=given_back.provenance,
            method=method,
            cleaning=cleaning,
            cleaning_error=error,
        )
    )


def started(conn: Connection, deployable_id: int, handles: Sequence[str], task: str) -> None:
    """The pending tenancies of these handles are cleaned by ``task`` now."""
    conn.execute(
        update(TENANCIES)
        .where(
            TENANCIES.c.deployable_id == deployable_id,
            TENANCIES.c.handle.in_(list(handles)),
            TENANCIES.c.cleaning == PENDING,
            TENANCIES.c.task_uuid.is_(None),
        )
        .values(task_uuid=task)
    )


def pending_methods(conn: Connection, deployable_id: int) -> set[str]:
    """The cleanings chosen by the deployable's tenancies that wait for one."""
    return set(
        conn.execute(
            select(TENANCIES.c.method).where(
                TENANCIES.c.deployable_id == deployable_id,
                TENANCIES.c.cleaning == PENDING,
                TENANCIES.c.task_uuid.is_(None),
            )
        ).scalars()
    )


def failed(conn: Connection, deployable_id: int, handles: Sequence[str]) -> list[tuple[str, str]]:
    """The tasks and cleanings of the deployable's tenancies whose cleaning failed on
    these handles."""
    rows = conn.execute(
        select(TENANCIES.c.task_uuid, TENANCIES.c.method)
        .distinct()
        .where(
            TENANCIES.c.deployable_id == deployable_id,
            TENANCIES.c.handle.in_(list(handles)),
            TENANCIES.c.cleaning == FAILED,
            TENANCIES.c.task_uuid.is_not(None),
        )
    )
    return [(row.task_uuid, row.method) for row in rows]


def cleaned(
    conn: Connection, task: str, outcome: str, seconds: float | None, error: str | None
) -> None:
    """The tenancies cleaned by ``task`` are ``outcome`` (done or failed)."""
    conn.execute(
        update(TENANCIES)
        .where(TENANCIES.c.task_uuid == task, TENANCIES.c.cleaning == PENDING)
        .values(
            cleaning=outcome,
            cleaned_at=utcnow(),
            cleaning_seconds=seconds,
            cleaning_error=error[:4000] if error else None,
        )
    )


def retried(conn: Connection, task: str, again: str) -> None:
    """Tenancies whose cleaning ``task`` failed are cleaned again by ``again``."""
    conn.execute(
        update(TENANCIES)
        .where(TENANCIES.c.task_uuid == task, TENANCIES.c.cleaning == FAILED)
        .values(cleaning=PENDING, task_uuid=again, cleaned_at=None, cleaning_error=None)
    )


def history(db: Database, uuid: str, limit: int = 100) -> list[TenancyRecord]:
    """The device's tenancies, newest first, at most ``limit``."""
    wanted = parse(uuid, "uuid")
    columns = [TENANCIES.c[name] for name in TenancyRecord._fields]
    with db.reader() as conn:
        device = conn.execute(select(DEVICES.c.id).where(DEVICES.c.uuid == wanted)).first()
        if device is None:
            raise NotFound(f"Device {wanted} not found.")
        rows = conn.execute(
            select(*columns)
            .where(TENANCIES.c.device_id == device.id)
            .order_by(TENANCIES.c.released_at.desc(), TENANCIES.c.id.desc())
            .limit(max(1, min(limit, MAX_LIMIT)))
        )
        return [TenancyRecord._make(row) for row in rows]


@retry_on_deadlock
def prune(db: Database, days: int, now: dt.datetime | None = None) -> int:
    """Delete the tenancies released more than ``days`` ago, cleaned or not; how many."""
    before = (now or utcnow()) - dt.timedelta(days=days)
    with db.writer() as conn:
        done = conn.execute(
            delete(TENANCIES).where(
                TENANCIES.c.released_at < before, TENANCIES.c.cleaning != PENDING
            )
        )
        return done.rowcount or 0
