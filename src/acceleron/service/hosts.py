"""Hosts: the compute hosts whose agents report, and what they last reported."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Row, bindparam, func, select

from acceleron.db.models import Device, Host, table
from acceleron.db.session import Database
from acceleron.exceptions import NotFound

HOSTS, DEVICES = table(Host), table(Device)
_DEVICE_COUNT = (
    select(func.count(DEVICES.c.id))
    .where(DEVICES.c.hostname == HOSTS.c.hostname)
    .scalar_subquery()
    .label("devices")
)
_ALL = select(HOSTS, _DEVICE_COUNT).order_by(HOSTS.c.hostname)
_ONE = select(HOSTS, _DEVICE_COUNT).where(HOSTS.c.hostname == bindparam("host"))


def list_hosts(db: Database) -> list[Row[Any]]:
    with db.reader() as conn:
        return list(conn.execute(_ALL))


def get(db: Database, hostname: str) -> Row[Any]:
    with db.reader() as conn:
        host = conn.execute(_ONE, {"host": hostname}).first()
    if host is None:
        raise NotFound(f"Host {hostname!r} has never reported.")
    return host
