"""Health and maintenance of devices and deployables: the write side, and who is affected.

Health comes from the agents' reports (``service.inventory``); this module is what an
operator does about it: put a device or a single deployable (a region) in maintenance
with a reason, or take it out again, and see what is still bound to it (the drain).
Either way the host's generation is bumped, so its Placement providers follow at once:
a maintained or unhealthy provider reserves its whole inventory (``placement.tree``).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from sqlalchemy import Connection, Row, Select, Table, bindparam, select, update

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
from acceleron.exceptions import InvalidInput, NotFound
from acceleron.service import cleaning, devices
from acceleron.service.devices import DeviceRecord
from acceleron.uuids import parse

LOG = logging.getLogger(__name__)
DEVICES, DEPLOYABLES, HOSTS = table(Device), table(Deployable), table(Host)
HANDLES, ARQS = table(AttachHandle), table(AcceleratorRequest)
REASON_MAX = 255
# The words older microversions (2.5 to 2.12) show for a health state.
OLD_WORDS = {"healthy": "ok", "degraded": "degraded", "unhealthy": "failed"}


def _reason(on: bool, reason: Any) -> str | None:
    if not on:
        return None
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidInput("reason: say why the device goes into maintenance.")
    if len(reason) > REASON_MAX:
        raise InvalidInput(f"reason: at most {REASON_MAX} characters.")
    return reason.strip()


def _bump(conn: Connection, hostname: str) -> None:
    """The host's inventory changed: its Placement providers must follow."""
    conn.execute(
        update(HOSTS).where(HOSTS.c.hostname == hostname).values(generation=HOSTS.c.generation + 1)
    )


def set_device_maintenance(db: Database, uuid: str, on: bool, reason: Any = None) -> DeviceRecord:
    """Put a device in maintenance (``reason`` required, kept with the time) or take it
    out. Existing binds stay; new ones are refused unless their profile tolerates the
    reason. Doing it again with another reason updates the reason, not the time."""
    wanted, why = parse(uuid, "uuid"), _reason(on, reason)
    row = _set_maintenance(db, DEVICES, devices.BY_UUID, wanted, on, why, "Device")
    device = devices.make(row)
    LOG.info(
        "Device %s (%s %s) maintenance %s%s",
        device.uuid,
        device.hostname,
        device.pci_address,
        "on" if on else "off",
        f": {why}" if why else "",
    )
    return device


def set_deployable_maintenance(db: Database, uuid: str, on: bool, reason: Any = None) -> None:
    """The same for one deployable (an FPGA region, a MIG profile) of a device."""
    wanted, why = parse(uuid, "uuid"), _reason(on, reason)
    by_uuid = (
        select(DEPLOYABLES, DEVICES.c.hostname)
        .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
        .where(DEPLOYABLES.c.uuid == bindparam("uuid"))
    )
    dep = _set_maintenance(db, DEPLOYABLES, by_uuid, wanted, on, why, "Deployable")
    LOG.info(
        "Deployable %s (%s) maintenance %s%s",
        dep.uuid,
        dep.name,
        "on" if on else "off",
        f": {why}" if why else "",
    )


def _set_maintenance(
    db: Database,
    rows: Table,
    by_uuid: Select[Any],
    wanted: str,
    on: bool,
    why: str | None,
    noun: str,
) -> Row[Any]:
    """Maintenance on or off for the row of ``rows`` that ``by_uuid`` finds (its host's
    generation bumped when it changed, so the sync reserves or releases); the row after."""
    with db.writer() as conn:
        row = conn.execute(by_uuid, {"uuid": wanted}).first()
        if row is None:
            raise NotFound(f"{noun} {wanted} not found.")
        values = _maintenance_values(row, on, why)
        if values:
            conn.execute(update(rows).where(rows.c.id == row.id).values(values))
            _bump(conn, row.hostname)
            if not on:  # what failed to clean there is cleaned again before it serves
                column = DEPLOYABLES.c.device_id if rows is DEVICES else DEPLOYABLES.c.id
                ids = conn.execute(select(DEPLOYABLES.c.id).where(column == row.id)).scalars()
                cleaning.retry(conn, list(ids))
            row = conn.execute(by_uuid, {"uuid": wanted}).one()
    return row


def _maintenance_values(row: Row[Any], on: bool, reason: str | None) -> dict[str, Any]:
    now = utcnow()
    if on:
        values: dict[str, Any] = {}
        if row.status != "maintaining":
            values.update(status="maintaining", maintenance_since=now)
        if row.maintenance_reason != reason:
            values["maintenance_reason"] = reason
    elif row.status == "maintaining" or row.maintenance_reason is not None:
        values = {"status": "enabled", "maintenance_reason": None, "maintenance_since": None}
    else:
        values = {}
    if values:
        values["updated_at"] = now
    return values


@dataclasses.dataclass(frozen=True)
class Bound:
    """An accelerator request holding an attach handle of a device: what a drain waits for."""

    arq_uuid: str
    state: str
    instance_uuid: str | None
    deployable: str
    attach_handle: str


def bound_to_device(conn: Connection, device_id: int) -> list[Bound]:
    """The requests holding a handle of the device, in handle order."""
    query = (
        select(
            ARQS.c.uuid, ARQS.c.state, ARQS.c.instance_uuid, DEPLOYABLES.c.name, HANDLES.c.address
        )
        .join(HANDLES, HANDLES.c.arq_id == ARQS.c.id)
        .join(DEPLOYABLES, DEPLOYABLES.c.id == HANDLES.c.deployable_id)
        .where(DEPLOYABLES.c.device_id == device_id)
        .order_by(HANDLES.c.id)
    )
    return [Bound(*row) for row in conn.execute(query)]


def device_with_binds(db: Database, uuid: str) -> tuple[DeviceRecord, list[Bound]]:
    """A device and the requests bound to it (what ``acceleron device drain`` watches)."""
    wanted = parse(uuid, "uuid")
    with db.reader() as conn:
        device = conn.execute(devices.BY_UUID, {"uuid": wanted}).first()
        if device is None:
            raise NotFound(f"Device {wanted} not found.")
        return devices.make(device), bound_to_device(conn, device.id)
