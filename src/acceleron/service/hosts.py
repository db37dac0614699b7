"""Hosts: the compute hosts whose agents report, and what they last reported."""

from __future__ import annotations

import datetime as dt
from typing import NamedTuple

from sqlalchemy import bindparam, func, select

from acceleron.db.models import Device, Host, table
from acceleron.db.session import Database
from acceleron.exceptions import NotFound


class HostRecord(NamedTuple):
    """A reporting host as the API shows it. Built from a row of ``_COLUMNS`` (the same
    names, in the same order) with ``HostRecord._make(row)``."""

    hostname: str
    devices: int  # the devices its agent last reported
    agent_version: str | None
    last_report_at: dt.datetime | None
    generation: int
    synced_generation: int
    placement_errors: list[str] | None
    created_at: dt.datetime | None
    updated_at: dt.datetime | None


HOSTS, DEVICES = table(Host), table(Device)
_DEVICE_COUNT = (
    select(func.count(DEVICES.c.id))
    .where(DEVICES.c.hostname == HOSTS.c.hostname)
    .scalar_subquery()
    .label("devices")
)
_COLUMNS = [_DEVICE_COUNT if f == "devices" else HOSTS.c[f] for f in HostRecord._fields]
_ALL = select(*_COLUMNS).order_by(HOSTS.c.hostname)
_ONE = select(*_COLUMNS).where(HOSTS.c.hostname == bindparam("host"))
_make = HostRecord._make


def list_hosts(db: Database) -> list[HostRecord]:
    with db.reader() as conn:
        return list(map(_make, conn.execute(_ALL)))


def get(db: Database, hostname: str) -> HostRecord:
    with db.reader() as conn:
        host = conn.execute(_ONE, {"host": hostname}).first()
    if host is None:
        raise NotFound(f"Host {hostname!r} has never reported.")
    return _make(host)
