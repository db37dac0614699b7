"""Devices, the physical cards of the inventory: the read side."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any, NamedTuple

from sqlalchemy import Integer, bindparam, cast, func, select, update

from acceleron.db.models import Deployable, Device, Host, table, utcnow
from acceleron.db.session import Database
from acceleron.exceptions import NotFound
from acceleron.service import cleaning
from acceleron.service.listing import (
    Filter,
    HealthFilter,
    Listed,
    Page,
    check_address,
    check_vendor,
    conditions,
    paginate,
)
from acceleron.uuids import parse

# --- devices --------------------------------------------------------------------------


class DeviceRecord(NamedTuple):
    """A device as every read and write hands it out. Built from a row of ``COLUMNS``
    (the same names, in the same order) with ``DeviceRecord._make(row)``."""

    id: int
    uuid: str
    hostname: str
    pci_address: str
    type: str
    vendor: str
    vendor_name: str
    product_id: str
    model: str
    driver_name: str
    std_board_info: dict[str, Any] | None
    vendor_board_info: dict[str, Any] | None
    numa_node: int | None
    pcie_switch: str | None  # its nearest PCIe switch's PCI address
    nvlink_domain: str | None  # the name its NVLink peers share
    status: str  # enabled or maintaining
    state: str  # present or lost
    health: str  # vocabulary.HEALTH_STATES
    health_reason: str | None
    health_since: dt.datetime | None
    maintenance_reason: str | None
    maintenance_since: dt.datetime | None
    created_at: dt.datetime
    updated_at: dt.datetime | None
    cleaning: int  # its attach handles not clean (service.cleaning)


DEVICES, HOSTS, DEPLOYABLES = table(Device), table(Host), table(Deployable)
LOG = logging.getLogger(__name__)
SORT_KEYS = ("created_at", "hostname", "pci_address", "type", "vendor", "model",
             "driver_name", "status", "state", "health", "uuid")  # fmt: skip
FILTERS: dict[str, Filter] = {
    # A type, status or state no device has (well formed: text the column holds) lists
    # nothing, as any other value that matches nothing does.
    "type": Filter(DEVICES.c.type),
    "vendor": Filter(DEVICES.c.vendor, check_vendor),
    "hostname": Filter(DEVICES.c.hostname),
    "status": Filter(DEVICES.c.status),
    "state": Filter(DEVICES.c.state),
    "pci_address": Filter(DEVICES.c.pci_address, check_address),
    "health": HealthFilter(DEVICES.c.health),
}
_CLEANING = (  # an integer on every backend (MariaDB's SUM is a DECIMAL)
    select(cast(func.coalesce(func.sum(DEPLOYABLES.c.cleaning), 0), Integer))
    .where(DEPLOYABLES.c.device_id == DEVICES.c.id)
    .scalar_subquery()
    .label("cleaning")
)
COLUMNS = [_CLEANING if f == "cleaning" else DEVICES.c[f] for f in DeviceRecord._fields]
_SELECT = select(*COLUMNS)
BY_UUID = _SELECT.where(DEVICES.c.uuid == bindparam("uuid"))
make = DeviceRecord._make


def list_devices(
    db: Database, filters: Mapping[str, str | None], page: Page
) -> Listed[DeviceRecord]:
    """Devices matching every filter given (``FILTERS``), one page of them."""
    statement = _SELECT.where(*conditions(FILTERS, filters))
    with db.reader() as conn:
        return paginate(conn, statement, DEVICES, page, SORT_KEYS, "device", make)


def get(db: Database, uuid: str) -> DeviceRecord:
    wanted = parse(uuid, "uuid")
    with db.reader() as conn:
        device = conn.execute(BY_UUID, {"uuid": wanted}).first()
    if device is None:
        raise NotFound(f"Device {wanted} not found.")
    return make(device)


def set_status(db: Database, uuid: str, status: str) -> DeviceRecord:
    """Enable a device (``enabled``) or take it out of service (``maintaining``): a device
    in maintenance reserves its whole inventory in Placement, so nothing new lands on it."""
    wanted = parse(uuid, "uuid")
    with db.writer() as conn:
        row = conn.execute(BY_UUID, {"uuid": wanted}).first()
        if row is None:
            raise NotFound(f"Device {wanted} not found.")
        device = make(row)
        if device.status != status:
            now = utcnow()
            since = now if status == "maintaining" else None
            conn.execute(
                update(DEVICES)
                .where(DEVICES.c.id == device.id)
                .values(
                    status=status, maintenance_since=since, maintenance_reason=None, updated_at=now
                )
            )
            # The host's inventory changed: its Placement providers must follow.
            conn.execute(
                update(HOSTS)
                .where(HOSTS.c.hostname == device.hostname)
                .values(generation=HOSTS.c.generation + 1)
            )
            if status == "enabled":  # what failed to clean is cleaned before it serves
                ids = select(DEPLOYABLES.c.id).where(DEPLOYABLES.c.device_id == device.id)
                cleaning.retry(conn, list(conn.execute(ids).scalars()))
            device = make(conn.execute(BY_UUID, {"uuid": wanted}).one())
    LOG.info("Device %s (%s %s) is %s", device.uuid, device.hostname, device.pci_address, status)
    return device
