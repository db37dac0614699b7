"""The state behind the metrics' gauges, counted in a few ``GROUP BY`` queries.

The API's refresher calls ``refresh`` every ``[metrics] refresh_interval`` seconds; a
scrape reads the gauges it set and never queries the database itself.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from typing import Any

from sqlalchemy import case, func, select

from acceleron import metrics
from acceleron.db.models import (
    AcceleratorRequest,
    AttachHandle,
    Deployable,
    Device,
    Host,
    table,
    utcnow,
)
from acceleron.db.session import Database

ARQS, HANDLES, DEPLOYABLES = table(AcceleratorRequest), table(AttachHandle), table(Deployable)
DEVICES, HOSTS = table(Device), table(Host)
STATES = ("Initial", "BindStarted", "Bound", "BindFailed", "Unbound", "UnbindFailed", "Deleting")

_ARQ_COUNTS = select(ARQS.c.state, func.count()).group_by(ARQS.c.state)
_DEVICE_COUNTS = select(
    DEVICES.c.type, DEVICES.c.health, DEVICES.c.status, DEVICES.c.state, func.count()
).group_by(DEVICES.c.type, DEVICES.c.health, DEVICES.c.status, DEVICES.c.state)
_DEPLOYABLE_COUNTS = (
    select(DEPLOYABLES.c.kind, DEVICES.c.type, DEPLOYABLES.c.availability, func.count())
    .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
    .group_by(DEPLOYABLES.c.kind, DEVICES.c.type, DEPLOYABLES.c.availability)
)
_USED = case(
    (HANDLES.c.arq_id.is_not(None) | HANDLES.c.host_in_use.is_(True), "used"), else_="free"
)
_HANDLE_COUNTS = (
    select(DEVICES.c.type, DEPLOYABLES.c.kind, _USED.label("usage"), func.count())
    .join(DEPLOYABLES, DEPLOYABLES.c.id == HANDLES.c.deployable_id)
    .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
    .group_by(DEVICES.c.type, DEPLOYABLES.c.kind, _USED)
)
_HOSTS = select(
    HOSTS.c.hostname,
    HOSTS.c.last_report_at,
    HOSTS.c.generation,
    HOSTS.c.synced_generation,
    HOSTS.c.updated_at,
)


@dataclasses.dataclass(frozen=True)
class Snapshot:
    arqs: dict[tuple[str, ...], int]
    devices: dict[tuple[str, ...], int]
    deployables: dict[tuple[str, ...], int]
    handles: dict[tuple[str, ...], int]
    hosts: list[Any]
    taken_at: dt.datetime


def _counts(rows: Any) -> dict[tuple[str, ...], int]:
    return {tuple(str(v) for v in row[:-1]): int(row[-1]) for row in rows}


def snapshot(db: Database) -> Snapshot:
    """Every count the gauges show, read in one transaction."""
    with db.reader() as conn:
        arqs: dict[tuple[str, ...], int] = {(state,): 0 for state in STATES}
        arqs.update(_counts(conn.execute(_ARQ_COUNTS)))
        return Snapshot(
            arqs=arqs,
            devices=_counts(conn.execute(_DEVICE_COUNTS)),
            deployables=_counts(conn.execute(_DEPLOYABLE_COUNTS)),
            handles=_counts(conn.execute(_HANDLE_COUNTS)),
            hosts=list(conn.execute(_HOSTS)),
            taken_at=utcnow(),
        )


def refresh(db: Database, placement: bool) -> Snapshot:
    """Read a snapshot and set the gauges from it; ``placement``: whether this API
    publishes to Placement (else no sync lag is shown)."""
    started = time.perf_counter()
    snap = snapshot(db)
    metrics.set_counts(metrics.ARQS, snap.arqs)
    metrics.set_counts(metrics.DEVICES, snap.devices)
    metrics.set_counts(metrics.DEPLOYABLES, snap.deployables)
    metrics.set_counts(metrics.ATTACH_HANDLES, snap.handles)
    now = snap.taken_at
    reported = {h.hostname: h.last_report_at for h in snap.hosts if h.last_report_at}
    metrics.set_counts(
        metrics.AGENT_REPORT_AGE,
        {(host,): max(0.0, (now - at).total_seconds()) for host, at in reported.items()},
    )
    metrics.set_counts(
        metrics.AGENT_LAST_REPORT,
        {(host,): at.replace(tzinfo=dt.UTC).timestamp() for host, at in reported.items()},
    )
    waiting = [h for h in snap.hosts if placement and h.generation > h.synced_generation]
    metrics.PLACEMENT_HOSTS_UNSYNCED.set(len(waiting))
    oldest = min((h.updated_at for h in waiting if h.updated_at), default=None)
    metrics.PLACEMENT_SYNC_LAG.set(0.0 if oldest is None else (now - oldest).total_seconds())
    metrics.REFRESH_SECONDS.set(time.perf_counter() - started)
    return snap
