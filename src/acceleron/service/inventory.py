"""The inventory: reconciling a host's report with the database.

One generic diff, keyed by stable ids, applied to every table the same way:

    devices          keyed by PCI address                    (within the host)
    deployables      keyed by (PCI address, deployable key)
    attach_handles   keyed by (PCI address, deployable key, handle address)
    attributes       keyed by (PCI address, deployable key, attribute path)

Each level is diffed against what the database has (``diff``) and applied in
one transaction, parents before children (``_apply``). Only the columns the
report manages are compared, so an unchanged report makes no write at all; its
digest even spares the diff, and an agent that names it by that digest (``confirm``)
spares the API reading the report at all. Something that vanished while a request still
holds it is marked ``lost``, not deleted (with the deployables above it), and is
``present`` again when it comes back; once freed, ``forget_report`` makes the
next report delete it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import uuid as uuidlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

import orjson
from sqlalchemy import Connection, Row, Table, bindparam, delete, insert, select, update

from acceleron import vocabulary
from acceleron.db.models import AttachHandle, Attribute, Deployable, Device, Host, table, utcnow
from acceleron.db.session import Database, retry_on_deadlock
from acceleron.exceptions import ReportUnknown
from acceleron.placement import names
from acceleron.report import HostReport
from acceleron.scheduler.weigher import fold_function
from acceleron.service.attributes import AGENT

LOG = logging.getLogger(__name__)
K = TypeVar("K")

DEVICES, DEPLOYABLES = table(Device), table(Deployable)
HANDLES, ATTRIBUTES, HOSTS = table(AttachHandle), table(Attribute), table(Host)
# An unchanged report refreshes the host's last-report time only this often.
HEARTBEAT = dt.timedelta(minutes=10)


@dataclasses.dataclass
class Diff(Generic[K]):
    """What it takes to turn ``existing`` rows into ``desired`` values."""

    added: dict[K, dict[str, Any]] = dataclasses.field(default_factory=dict)
    changed: dict[K, tuple[Row[Any], dict[str, Any]]] = dataclasses.field(default_factory=dict)
    removed: dict[K, Row[Any]] = dataclasses.field(default_factory=dict)
    kept: dict[K, Row[Any]] = dataclasses.field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.added or self.changed or self.removed)


def diff(
    existing: Mapping[K, Row[Any]], desired: Mapping[K, dict[str, Any]], columns: Iterable[str]
) -> Diff[K]:
    """Compare only ``columns``: the ones the report manages."""
    result: Diff[K] = Diff()
    managed = tuple(columns)
    for key, values in desired.items():
        row = existing.get(key)
        if row is None:
            result.added[key] = values
            continue
        changes = {c: values[c] for c in managed if c in values and getattr(row, c) != values[c]}
        if changes:
            result.changed[key] = (row, changes)
        else:
            result.kept[key] = row
    result.removed = {key: row for key, row in existing.items() if key not in desired}
    return result


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a report changed. ``changed`` False means the database was not written."""

    hostname: str
    changed: bool
    devices: int
    counts: Mapping[str, int]
    generation: int
    digest: str = ""  # the report's: what its agent names it by while it is unchanged


# --- desired state from a report -------------------------------------------------


# The report format that has each device's topology: a report of an older minor leaves
# what was recorded of it as it is (its agent cannot tell).
TOPOLOGY_SINCE = (1, 1)


def _device_values(host: str, device: vocabulary.Device, topology: bool) -> dict[str, Any]:
    values = {
        "uuid": names.provider_uuid(host, device.pci_address),
        "hostname": host,
        "pci_address": device.pci_address,
        "type": device.type,
        "vendor": device.vendor_id,
        "vendor_name": device.vendor_name,
        "product_id": device.product_id,
        "model": device.model,
        "driver_name": device.driver,
        "std_board_info": dict(device.std_board_info),
        "vendor_board_info": dict(device.vendor_board_info),
        "numa_node": device.numa_node,
        "state": "present",
        **_health_values(device.health),
    }
    if topology:
        values.update(pcie_switch=device.pcie_switch, nvlink_domain=device.nvlink_domain)
    return values


REASON_MAX = 4000


def _health_values(health: vocabulary.Health | None) -> dict[str, Any]:
    """The health columns a verdict sets (``health_since`` is stamped on a change)."""
    health = health or vocabulary.Health()
    state = health.state if health.state in vocabulary.HEALTH_STATES else vocabulary.DEGRADED
    reason = health.reason if state != vocabulary.HEALTHY else None
    return {"health": state, "health_reason": reason[:REASON_MAX] if reason else None}


def function_values(functions: list[str]) -> dict[str, Any]:
    """A deployable's function columns, from every function it holds (the first is its
    ``function_uuid``; ``function_key`` and ``several_functions`` are what claims look
    regions up by)."""
    return {
        "function_uuid": functions[0] if functions else None,
        "function_key": fold_function(functions[0]) if functions else None,
        "function_uuids": functions,
        "several_functions": len(functions) > 1,
    }


def _deployable_values(
    host: str, device: vocabulary.Device, dep: vocabulary.Deployable
) -> dict[str, Any]:
    functions = list(dict.fromkeys(dep.function_uuids))
    uuid = names.provider_uuid(host, device.pci_address, dep.key)
    values = {
        "uuid": uuid,
        # Its resource provider: the card's own for a whole device, its own otherwise.
        "rp_uuid": names.provider_uuid(host, device.pci_address) if dep.kind == "device" else uuid,
        "key": dep.key,
        "name": names.provider_name(host, device.pci_address, dep.key),
        "kind": dep.kind,
        "num_accelerators": dep.num_accelerators,
        "accelerator_type": dep.accelerator_type,
        "programmable": dep.programmable,
        "memory_mb": dep.memory_mb,
        "memory_type": dep.memory_type,
        "traits": sorted(dep.traits),
        "driver_name": device.driver,
        "region_type": dep.region_type,
        **function_values(functions),
    }
    health = device.health.deployables.get(dep.key)
    values.update(_health_values(health and _with_handles(health)))
    # The hardware rarely knows which image it holds: None means "keep what we recorded".
    if dep.bitstream_id is not None:
        values["bitstream_id"] = dep.bitstream_id
    return values


# How a deployable's health reason begins when only its handles' faults degrade it.
HANDLES_NOT_HEALTHY = "attach handles not healthy: "


def _with_handles(health: vocabulary.Health) -> vocabulary.Health:
    """A deployable's verdict, degraded at least while one of its handles is not
    healthy (its reasons named by slot): its handles' faults take out only those
    handles, and the deployable shows an operator where to look."""
    faults = [f"{address}: {h.reason or h.state}" for address, h in health.handles.items()]
    if not faults or health.state != vocabulary.HEALTHY:
        return health
    return vocabulary.Health(vocabulary.DEGRADED, HANDLES_NOT_HEALTHY + "; ".join(faults))


def _handle_values(
    host: str,
    where: tuple[str, str],
    handle: vocabulary.AttachHandle,
    health: vocabulary.Health | None,
) -> dict[str, Any]:
    return {
        "uuid": names.provider_uuid(host, where[0], f"{where[1]}#{handle.address}"),
        "type": handle.type,
        "address": handle.address,
        "attach_info": dict(handle.info),
        "host_in_use": handle.in_use,
        "state": "present",
        **_health_values(health),
    }


def _flatten(
    attributes: Mapping[str, Any], path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], str | None]]:
    """Nested attributes as (path, value) pairs; a mapping is a parent with no value."""
    for key, value in attributes.items():
        here = (*path, str(key))
        if isinstance(value, Mapping):
            yield here, None
            yield from _flatten(value, here)
        elif value is None or isinstance(value, str):
            yield here, value
        else:
            yield here, orjson.dumps(value).decode()


@dataclasses.dataclass
class Desired:
    devices: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    deployables: dict[tuple[str, str], dict[str, Any]] = dataclasses.field(default_factory=dict)
    parents: dict[tuple[str, str], str | None] = dataclasses.field(default_factory=dict)
    handles: dict[tuple[str, str, str], dict[str, Any]] = dataclasses.field(default_factory=dict)
    attributes: dict[tuple[str, str, tuple[str, ...]], dict[str, Any]] = dataclasses.field(
        default_factory=dict
    )


def desired_state(report: HostReport) -> Desired:
    """The rows a report asks for, keyed by stable ids."""
    want = Desired()
    host = report.hostname
    topology = report.version >= TOPOLOGY_SINCE
    for device in report.devices:
        address = device.pci_address
        want.devices[address] = _device_values(host, device, topology)
        for parent, dep in _with_parents(device.deployables, None):
            where = (address, dep.key)
            want.deployables[where] = _deployable_values(host, device, dep)
            want.parents[where] = parent
            scoped = device.health.deployables.get(dep.key, vocabulary.Health()).handles
            for handle in dep.attach_handles:
                values = _handle_values(host, where, handle, scoped.get(handle.address))
                want.handles[(*where, handle.address)] = values
            for path, value in _flatten(dep.attributes):
                want.attributes[(*where, path)] = {"key": path[-1], "value": value}
    return want


def _with_parents(
    deployables: Sequence[vocabulary.Deployable], parent: str | None
) -> Iterator[tuple[str | None, vocabulary.Deployable]]:
    for dep in deployables:
        yield parent, dep
        yield from _with_parents(dep.children, dep.key)


# --- what the database has -----------------------------------------------------------

_DEVICE_COLUMNS = (
    "type",
    "vendor",
    "vendor_name",
    "product_id",
    "model",
    "driver_name",
    "std_board_info",
    "vendor_board_info",
    "numa_node",
    "pcie_switch",
    "nvlink_domain",
    "state",
    "health",
    "health_reason",
)
# ``rp_uuid`` is set when a deployable is first recorded (its own provider's uuid), then
# kept up to date by the Placement sync (a pool's, service.publish._place): not here.
_DEPLOYABLE_COLUMNS = (
    "name",
    "kind",
    "num_accelerators",
    "accelerator_type",
    "programmable",
    "memory_mb",
    "memory_type",
    "traits",
    "driver_name",
    "region_type",
    "function_uuid",
    "function_key",
    "function_uuids",
    "several_functions",
    "bitstream_id",
    "health",
    "health_reason",
)
_HANDLE_COLUMNS = ("type", "attach_info", "host_in_use", "state", "health", "health_reason")


@dataclasses.dataclass
class Existing:
    devices: dict[str, Row[Any]]
    deployables: dict[tuple[str, str], Row[Any]]
    handles: dict[tuple[str, str, str], Row[Any]]
    attributes: dict[tuple[str, str, tuple[str, ...]], Row[Any]]


def load_existing(conn: Connection, host: str) -> Existing:
    devices = {d.pci_address: d for d in conn.execute(_HOST_DEVICES, {"host": host})}
    address = {d.id: d.pci_address for d in devices.values()}
    rows = conn.execute(_HOST_DEPLOYABLES, {"host": host})
    deployables = {(address[d.device_id], d.key): d for d in rows}
    where = {d.id: k for k, d in deployables.items()}
    handles = {
        (*where[h.deployable_id], h.address): h for h in conn.execute(_HOST_HANDLES, {"host": host})
    }
    attributes: dict[tuple[str, str, tuple[str, ...]], Row[Any]] = {}
    attrs = list(conn.execute(_HOST_ATTRIBUTES, {"host": host}))
    by_id = {a.id: a for a in attrs}
    for attr in attrs:
        attributes[(*where[attr.deployable_id], _attribute_path(attr, by_id))] = attr
    return Existing(devices, deployables, handles, attributes)


def _attribute_path(attr: Row[Any], by_id: Mapping[int, Row[Any]]) -> tuple[str, ...]:
    path = [attr.key]
    while attr.parent_id is not None:
        attr = by_id[attr.parent_id]
        path.append(attr.key)
    return tuple(reversed(path))


_ON_HOST = DEVICES.c.hostname == bindparam("host")
_HOST_DEVICES = select(DEVICES).where(_ON_HOST)
_HOST_DEPLOYABLES = (
    select(DEPLOYABLES).join(DEVICES, DEPLOYABLES.c.device_id == DEVICES.c.id).where(_ON_HOST)
)
_HOST_HANDLES = (
    select(HANDLES)
    .join(DEPLOYABLES, HANDLES.c.deployable_id == DEPLOYABLES.c.id)
    .join(DEVICES, DEPLOYABLES.c.device_id == DEVICES.c.id)
    .where(_ON_HOST)
)
# Reports own their agent's attributes only: an operator's are never diffed away.
_HOST_ATTRIBUTES = (
    select(ATTRIBUTES)
    .join(DEPLOYABLES, ATTRIBUTES.c.deployable_id == DEPLOYABLES.c.id)
    .join(DEVICES, DEPLOYABLES.c.device_id == DEVICES.c.id)
    .where(_ON_HOST, ATTRIBUTES.c.source == AGENT)
    .order_by(ATTRIBUTES.c.id)
)


# --- applying a diff ----------------------------------------------------------------


def _insert(conn: Connection, tbl: Table, rows: Sequence[dict[str, Any]]) -> list[int]:
    """Insert rows; their new ids, in order."""
    if not rows:
        return []
    statement = insert(tbl).returning(tbl.c.id, sort_by_parameter_order=True)
    return [row.id for row in conn.execute(statement, list(rows))]


def _update(conn: Connection, tbl: Table, changes: Iterable[tuple[int, dict[str, Any]]]) -> int:
    count = 0
    for row_id, values in changes:
        conn.execute(
            update(tbl).where(tbl.c.id == row_id).values({**values, "updated_at": utcnow()})
        )
        count += 1
    return count


def _delete(conn: Connection, tbl: Table, ids: Iterable[int]) -> int:
    wanted = sorted(set(ids))
    if wanted:
        conn.execute(delete(tbl).where(tbl.c.id.in_(wanted)))
    return len(wanted)


def _mark_lost(conn: Connection, tbl: Table, rows: Iterable[Row[Any]]) -> int:
    return _update(conn, tbl, ((r.id, {"state": "lost"}) for r in rows if r.state != "lost"))


def _changed(found: Diff[Any]) -> Iterator[tuple[int, dict[str, Any]]]:
    return ((row.id, changes) for row, changes in found.changed.values())


def _ids(found: Diff[K], added: Mapping[K, int]) -> dict[K, int]:
    ids = {key: row.id for key, row in found.kept.items()}
    ids.update((key, row.id) for key, (row, _) in found.changed.items())
    ids.update(added)
    return ids


def _apply_devices(
    conn: Connection, old: Existing, want: Desired
) -> tuple[Diff[str], dict[str, int]]:
    found = diff(old.devices, want.devices, _DEVICE_COLUMNS)
    _stamp_health(found, "device")
    keys = list(found.added)
    added = dict(zip(keys, _insert(conn, DEVICES, [found.added[k] for k in keys]), strict=True))
    _update(conn, DEVICES, _changed(found))
    return found, _ids(found, added)


def _stamp_health(found: Diff[Any], what: str) -> None:
    """A health state seen for the first time is stamped with the time (``health_since``)
    and logged: the event an operator looks for."""
    now = utcnow()
    for key, values in found.added.items():
        values["health_since"] = now
        if values["health"] != vocabulary.HEALTHY:
            LOG.warning("New %s %s is %s: %s", what, key, values["health"], values["health_reason"])
    for key, (row, changes) in found.changed.items():
        if "health" not in changes:
            continue
        changes["health_since"] = now
        log = LOG.info if changes["health"] == vocabulary.HEALTHY else LOG.warning
        log(
            "Health of %s %s: %s -> %s%s",
            what,
            key,
            row.health,
            changes["health"],
            f" ({changes.get('health_reason') or row.health_reason})"
            if changes["health"] != vocabulary.HEALTHY
            else "",
        )


def _depth(key: tuple[str, str], parents: Mapping[tuple[str, str], str | None]) -> int:
    parent = parents.get(key)
    return 0 if parent is None else 1 + _depth((key[0], parent), parents)


def _apply_deployables(
    conn: Connection, old: Existing, want: Desired, device_ids: Mapping[str, int]
) -> tuple[Diff[tuple[str, str]], dict[tuple[str, str], int]]:
    found = diff(old.deployables, want.deployables, _DEPLOYABLE_COLUMNS)
    _stamp_health(found, "deployable")
    ids = _ids(found, {})
    for depth in sorted({_depth(k, want.parents) for k in found.added}):
        keys = [k for k in found.added if _depth(k, want.parents) == depth]
        # A new deployable whose bitstream the driver does not know has none recorded yet
        # (one insert takes rows of the same keys).
        rows = [
            {
                "bitstream_id": None,
                **found.added[k],
                "device_id": device_ids[k[0]],
                **_links(k, want, ids),
            }
            for k in keys
        ]
        ids.update(zip(keys, _insert(conn, DEPLOYABLES, rows), strict=True))
    moved = (
        (row.id, links)
        for key, row in old.deployables.items()
        if key in want.deployables
        and (links := _links(key, want, ids))
        != {"parent_id": row.parent_id, "root_id": row.root_id}
    )
    _update(conn, DEPLOYABLES, [*_changed(found), *moved])
    return found, ids


def _links(
    key: tuple[str, str], want: Desired, ids: Mapping[tuple[str, str], int]
) -> dict[str, int | None]:
    """parent_id and root_id of a deployable (both None for a top-level one)."""
    parent = want.parents.get(key)
    if parent is None:
        return {"parent_id": None, "root_id": None}
    root = (key[0], parent)
    while (up := want.parents.get(root)) is not None:
        root = (key[0], up)
    return {"parent_id": ids[(key[0], parent)], "root_id": ids[root]}


def _apply_handles(
    conn: Connection, old: Existing, want: Desired, dep_ids: Mapping[tuple[str, str], int]
) -> Diff[tuple[str, str, str]]:
    found = diff(old.handles, want.handles, _HANDLE_COLUMNS)
    rows = [{**values, "deployable_id": dep_ids[key[:2]]} for key, values in found.added.items()]
    if rows:  # nothing refers to a handle's id: one executemany, no RETURNING
        conn.execute(insert(HANDLES), rows)
    _update(conn, HANDLES, _changed(found))
    return found


def _apply_attributes(
    conn: Connection, old: Existing, want: Desired, dep_ids: Mapping[tuple[str, str], int]
) -> Diff[tuple[str, str, tuple[str, ...]]]:
    found = diff(old.attributes, want.attributes, ("value",))
    ids = _ids(found, {})
    for size in sorted({len(key[2]) for key in found.added}):
        keys = [k for k in found.added if len(k[2]) == size]
        rows = [
            {
                **found.added[k],
                "uuid": str(uuidlib.uuid4()),
                "deployable_id": dep_ids[k[:2]],
                "parent_id": ids[(*k[:2], k[2][:-1])] if size > 1 else None,
            }
            for k in keys
        ]
        ids.update(zip(keys, _insert(conn, ATTRIBUTES, rows), strict=True))
    _update(conn, ATTRIBUTES, _changed(found))
    # Children first: a removed parent's children are removed with it.
    removed = sorted(found.removed.items(), key=lambda item: -len(item[0][2]))
    for _, row in removed:
        _delete(conn, ATTRIBUTES, [row.id])
    return found


def _remove(
    conn: Connection,
    old: Existing,
    handles: Diff[tuple[str, str, str]],
    deployables: Diff[tuple[str, str]],
    devices: Diff[str],
) -> dict[str, int]:
    """Delete what vanished, bottom-up; what a request still holds is marked lost."""
    held = [row for row in handles.removed.values() if row.arq_id is not None]
    counts = {"lost": _mark_lost(conn, HANDLES, held)}
    counts["removed"] = _delete(
        conn, HANDLES, (row.id for row in handles.removed.values() if row.arq_id is None)
    )
    holding = _with_ancestors(
        old,
        {row.deployable_id for row in held}
        | {
            row.deployable_id
            for key, row in old.handles.items()
            if key[:2] in deployables.removed and row.arq_id is not None
        },
    )
    by_depth = sorted(
        (row for row in deployables.removed.values() if row.id not in holding),
        key=lambda row: -_stored_depth(row, old),
    )
    for row in by_depth:
        counts["removed"] += _delete(conn, DEPLOYABLES, [row.id])
    kept_devices = {row.device_id for row in deployables.removed.values() if row.id in holding}
    gone = devices.removed.values()
    counts["lost"] += _mark_lost(conn, DEVICES, (d for d in gone if d.id in kept_devices))
    counts["removed"] += _delete(conn, DEVICES, (d.id for d in gone if d.id not in kept_devices))
    return counts


def _with_ancestors(old: Existing, ids: set[int]) -> set[int]:
    """``ids`` and every deployable above them: a kept child still points at its parent
    and root, so they are kept too (they go once nothing below them is held)."""
    by_id = {d.id: d for d in old.deployables.values()}
    kept: set[int] = set()
    for dep_id in ids:
        current: int | None = dep_id
        while current is not None and current not in kept:
            kept.add(current)
            row = by_id.get(current)
            current = row.parent_id if row is not None else None
    return kept


def _stored_depth(row: Row[Any], old: Existing) -> int:
    by_id = {d.id: d for d in old.deployables.values()}
    depth = 0
    while row.parent_id is not None and row.parent_id in by_id:
        row, depth = by_id[row.parent_id], depth + 1
    return depth


def apply(conn: Connection, old: Existing, want: Desired) -> dict[str, int]:
    """Make the database hold ``want`` for one host; what was written, counted."""
    devices, device_ids = _apply_devices(conn, old, want)
    deployables, dep_ids = _apply_deployables(conn, old, want, device_ids)
    handles = _apply_handles(conn, old, want, dep_ids)
    attributes = _apply_attributes(conn, old, want, dep_ids)
    counts = _remove(conn, old, handles, deployables, devices)
    for name, found in (
        ("devices", devices),
        ("deployables", deployables),
        ("attach_handles", handles),
        ("attributes", attributes),
    ):
        counts[f"{name}_added"] = len(found.added)
        counts[f"{name}_changed"] = len(found.changed)
    counts["attributes_removed"] = len(attributes.removed)
    return counts


# --- the report --------------------------------------------------------------------

_HOST_BY_NAME = select(HOSTS).where(HOSTS.c.hostname == bindparam("host"))


@retry_on_deadlock
def reconcile(
    db: Database,
    report: HostReport,
    now: dt.datetime | None = None,
    task_format: str | None = None,
) -> Outcome:
    """Apply a host report; ``task_format``: the task format its agent and this API
    share (what tasks it may be handed). An unchanged report writes nothing (bar a rare
    heartbeat)."""
    now = now or utcnow()
    digest = report.digest()
    with db.reader() as conn:
        host = conn.execute(_HOST_BY_NAME, {"host": report.hostname}).first()
    if (
        host is not None
        and host.report_digest == digest
        and host.task_format == task_format
        and not _heartbeat_due(host, now)
    ):
        return Outcome(report.hostname, False, len(report.devices), {}, host.generation, digest)
    with db.writer() as conn:
        host = _ensure_host(conn, report.hostname)
        counts: dict[str, int] = {}
        if host.report_digest != digest:
            counts = apply(conn, load_existing(conn, report.hostname), desired_state(report))
        changed = any(counts.values())
        generation = host.generation + 1 if changed else host.generation
        conn.execute(
            update(HOSTS)
            .where(HOSTS.c.id == host.id)
            .values(
                report_digest=digest,
                last_report_at=now,
                generation=generation,
                agent_version=report.agent_version,
                task_format=task_format,
            )
        )
    if changed:
        LOG.info(
            "Inventory of %s changed: %s",
            report.hostname,
            ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if v),
        )
    return Outcome(report.hostname, changed, len(report.devices), counts, generation, digest)


def confirm(
    db: Database,
    hostname: str,
    digest: str,
    task_format: str | None = None,
    now: dt.datetime | None = None,
) -> int:
    """The host's report is the one of ``digest`` again (its agent found nothing changed):
    as ``reconcile`` does with an unchanged report, nothing written bar a rare heartbeat,
    without the report sent, read or hashed. The host's generation. ReportUnknown when
    ``digest`` is not its last report's here, or its agent's task format changed."""
    now = now or utcnow()
    with db.reader() as conn:
        host = conn.execute(_HOST_BY_NAME, {"host": hostname}).first()
    if host is None or host.report_digest != digest or host.task_format != task_format:
        raise ReportUnknown(
            f"The last report of {hostname!r} here is not the one named: send the whole report."
        )
    if _heartbeat_due(host, now):
        with db.writer() as conn:
            conn.execute(
                update(HOSTS)
                .where(HOSTS.c.id == host.id, HOSTS.c.report_digest == digest)
                .values(last_report_at=now)
            )
    return int(host.generation)


def forget_report(conn: Connection, hostname: str) -> None:
    """Forget the digest of the host's last report, in the caller's transaction: its
    next report is diffed in full even if unchanged. For when the database changed
    under the report, e.g. a lost handle was freed: the full diff then deletes what
    is lost and no longer held."""
    conn.execute(update(HOSTS).where(HOSTS.c.hostname == hostname).values(report_digest=None))


def _heartbeat_due(host: Row[Any], now: dt.datetime) -> bool:
    return host.last_report_at is None or now - host.last_report_at >= HEARTBEAT


def _ensure_host(conn: Connection, hostname: str) -> Row[Any]:
    host = conn.execute(_HOST_BY_NAME, {"host": hostname}).first()
    if host is None:
        conn.execute(insert(HOSTS).values(hostname=hostname))
        host = conn.execute(_HOST_BY_NAME, {"host": hostname}).one()
    return host
