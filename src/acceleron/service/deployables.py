"""Deployables (spec 003): the nodes of each device's tree, the read side.

A deployable is listed with what a reader needs beside its own columns: its
device's uuid, host and type, the uuids of its parent and root, its attributes
(nested) and its attach handles. A list costs three statements whatever its
length: the page, then the attributes and the handles of every row on it.

Filters are columns (``FILTERS``) or, for any other key, attributes: ``key=value``
matches deployables holding that attribute with that value, a dotted key a
nested one; the value ``None`` (or ``null``) matches those without it, so spec
003's "FPGAs with no bitstream loaded" is ``?bitstream_id=None&type=FPGA``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple, TypeVar

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Connection,
    Row,
    Text,
    and_,
    bindparam,
    cast,
    func,
    literal,
    not_,
    or_,
    select,
)

from acceleron.db.models import AttachHandle, Attribute, Deployable, Device, table
from acceleron.db.session import Database
from acceleron.exceptions import InvalidInput, NotFound
from acceleron.service import attributes
from acceleron.service.listing import (
    NULL_WORDS,
    TEXT_MAX,
    Filter,
    Listed,
    Page,
    check_text,
    conditions,
    paginate,
)
from acceleron.uuids import is_uuid_like, parse


class DeployableRecord(NamedTuple):
    """A deployable with what it is read with: its device's uuid and host, its parent's
    and its root's uuids. Built from a row of ``_SELECT`` (the same names, in the same
    order) with ``DeployableRecord._make(row)``."""

    id: int
    uuid: str
    parent_id: int | None
    root_id: int | None
    device_id: int
    key: str
    name: str
    kind: str
    num_accelerators: int
    accelerator_type: str | None
    programmable: bool
    memory_mb: int | None
    memory_type: str | None
    resource_class: str | None
    traits: list[str]
    rp_uuid: str | None
    driver_name: str
    bitstream_id: str | None
    region_type: str | None
    function_uuid: str | None
    function_uuids: list[str]
    assignable: bool
    availability: str
    instance_uuid: str | None
    program_phase: str | None
    program_progress: int | None
    program_error: str | None
    provenance: dict[str, Any] | None
    cleaning: int  # its attach handles not clean (service.cleaning)
    health: str
    health_reason: str | None
    health_since: dt.datetime | None
    status: str
    maintenance_reason: str | None
    maintenance_since: dt.datetime | None
    created_at: dt.datetime
    updated_at: dt.datetime | None
    device_uuid: str
    hostname: str
    parent_uuid: str | None
    root_uuid: str | None


class HandleRecord(NamedTuple):
    """An attach handle of a deployable, as deployables are read with them."""

    uuid: str
    type: str  # PCI, MDEV, MIG or TEST_PCI
    address: str
    in_use: bool
    host_in_use: bool
    state: str  # present or lost
    attach_info: dict[str, Any]
    deployable_id: int


DEPLOYABLES, DEVICES = table(Deployable), table(Device)
ATTRIBUTES, HANDLES = table(Attribute), table(AttachHandle)
_PARENT = DEPLOYABLES.alias("parent_deployable")
_ROOT = DEPLOYABLES.alias("root_deployable")
_SELECT = select(
    *(DEPLOYABLES.c[field] for field in DeployableRecord._fields[:-4]),
    DEVICES.c.uuid.label("device_uuid"),
    DEVICES.c.hostname,
    _PARENT.c.uuid.label("parent_uuid"),
    _ROOT.c.uuid.label("root_uuid"),
).select_from(
    DEPLOYABLES.join(DEVICES, DEPLOYABLES.c.device_id == DEVICES.c.id)
    .outerjoin(_PARENT, DEPLOYABLES.c.parent_id == _PARENT.c.id)
    .outerjoin(_ROOT, DEPLOYABLES.c.root_id == _ROOT.c.id)
)
_BY_UUID = _SELECT.where(DEPLOYABLES.c.uuid == bindparam("uuid"))
_ID_BY_UUID = select(DEPLOYABLES.c.id).where(DEPLOYABLES.c.uuid == bindparam("uuid"))
_OF: BindParameter[int] = bindparam("ids", expanding=True)
_ATTRIBUTES_OF = (
    select(ATTRIBUTES).where(ATTRIBUTES.c.deployable_id.in_(_OF)).order_by(ATTRIBUTES.c.id)
)
_HANDLES_OF = (
    select(*(HANDLES.c[field] for field in HandleRecord._fields))
    .where(HANDLES.c.deployable_id.in_(_OF))
    .order_by(HANDLES.c.id)
)
_make = DeployableRecord._make

SORT_KEYS = ("created_at", "name", "key", "kind", "num_accelerators", "availability",
             "driver_name", "uuid")  # fmt: skip
# Attribute filters a request may combine, and how deep a dotted key may reach.
MAX_ATTRIBUTE_FILTERS = 16
MAX_DEPTH = 8


def fold_id(value: str, param: str) -> str:
    """A region type or function id as the look-ups compare them: a uuid in any
    spelling as its 32 lower-case hex digits, anything else in lower case without
    hyphens and underscores (drivers report either spelling, users write either)."""
    if is_uuid_like(value):
        return parse(value, param).replace("-", "")
    return check_text(64)(value, param).strip().lower().replace("-", "").replace("_", "")


def _folded(column: ColumnElement[Any]) -> ColumnElement[str]:
    """``fold_id`` of a column, in SQL (the same on every backend)."""
    return func.lower(func.replace(func.replace(column, "-", ""), "_", ""))


def _like_escape(value: str) -> str:
    return value.replace("!", "!!").replace("%", "!%").replace("_", "!_")


@dataclasses.dataclass(frozen=True)
class IdFilter(Filter):
    """A region type or function id, matched however it was reported or is written
    (``fold_id``); with ``listed``, a JSON list column, also any id of that list."""

    listed: ColumnElement[Any] | None = None

    def condition(self, value: str, param: str) -> ColumnElement[bool]:
        if value in NULL_WORDS:
            return self.column.is_(None)
        wanted = fold_id(value, param)
        match: ColumnElement[bool] = _folded(self.column) == wanted
        if self.listed is not None:
            # The list as JSON text holds each id in double quotes: '["ab-cd", "ef"]'.
            text = _folded(cast(self.listed, Text))
            match = or_(match, text.like(f'%"{_like_escape(wanted)}"%', escape="!"))
        return match


FILTERS: dict[str, Filter] = {
    "name": Filter(DEPLOYABLES.c.name),
    "kind": Filter(DEPLOYABLES.c.kind),
    "key": Filter(DEPLOYABLES.c.key),
    "parent_uuid": Filter(_PARENT.c.uuid, parse),
    "root_uuid": Filter(_ROOT.c.uuid, parse),
    "device_uuid": Filter(DEVICES.c.uuid, parse),
    "hostname": Filter(DEVICES.c.hostname),
    "type": Filter(DEVICES.c.type),
    "availability": Filter(DEPLOYABLES.c.availability),
    "instance_uuid": Filter(DEPLOYABLES.c.instance_uuid, parse),
    "rp_uuid": Filter(DEPLOYABLES.c.rp_uuid, parse),
    "driver_name": Filter(DEPLOYABLES.c.driver_name),
    "bitstream_id": Filter(DEPLOYABLES.c.bitstream_id),
    "region_type": IdFilter(DEPLOYABLES.c.region_type),
    # Any function the deployable holds, not only the first (function_uuid).
    "function_uuid": IdFilter(DEPLOYABLES.c.function_uuid, listed=DEPLOYABLES.c.function_uuids),
}


@dataclasses.dataclass(frozen=True)
class DeployableInfo:
    """A deployable, its attributes nested, and its attach handles."""

    deployable: DeployableRecord
    attributes: dict[str, Any]
    handles: list[HandleRecord]


# --- attribute filters ------------------------------------------------------------


def _attribute_path(path: list[str], value: str | None) -> ColumnElement[bool]:
    """EXISTS an attribute at ``path`` of the deployable whose value is ``value``
    (any value but NULL when ``value`` is None)."""
    level = ATTRIBUTES.alias()
    where = [level.c.deployable_id == DEPLOYABLES.c.id, level.c.parent_id.is_(None),
             level.c.key == path[0], attributes.in_effect(level)]  # fmt: skip
    for part in path[1:]:
        child = ATTRIBUTES.alias()
        where += [child.c.parent_id == level.c.id, child.c.key == part]
        level = child
    where.append(level.c.value.is_not(None) if value is None else level.c.value == value)
    return select(literal(1)).where(*where).exists()


def attribute_condition(key: str, value: str) -> ColumnElement[bool]:
    """``key=value`` on the attributes: a top-level attribute named ``key``, or the
    nested one a dotted key names. A value in NULL_WORDS: no such attribute, or no value."""
    if not key:
        raise InvalidInput(f"An attribute filter needs a key: '={value[:64]}' was given.")
    check_text(255)(key, "attribute filter key")
    parts = key.split(".")
    paths = [[key]] + ([parts] if 1 < len(parts) <= MAX_DEPTH else [])
    if value in NULL_WORDS:
        return and_(*(not_(_attribute_path(path, None)) for path in paths))
    wanted = check_text(TEXT_MAX)(value, key)
    return or_(*(_attribute_path(path, wanted) for path in paths))


def _attribute_conditions(wanted: Mapping[str, str]) -> list[ColumnElement[bool]]:
    if len(wanted) > MAX_ATTRIBUTE_FILTERS:
        raise InvalidInput(
            f"{len(wanted)} attribute filters given: at most {MAX_ATTRIBUTE_FILTERS} "
            f"may be combined."
        )
    return [attribute_condition(key, value) for key, value in wanted.items()]


# --- reading ------------------------------------------------------------------------


R = TypeVar("R")


def _by_deployable(rows: Iterable[Row[Any]], make: Callable[[Row[Any]], R]) -> dict[int, list[R]]:
    grouped: dict[int, list[R]] = defaultdict(list)
    for row in rows:
        grouped[row.deployable_id].append(make(row))
    return grouped


def _same(row: Row[Any]) -> Row[Any]:
    return row


def _complete(conn: Connection, deployables: list[DeployableRecord]) -> list[DeployableInfo]:
    """The deployables with their attributes and handles: two statements for all of them."""
    if not deployables:
        return []
    ids = {"ids": [dep.id for dep in deployables]}
    attrs = _by_deployable(conn.execute(_ATTRIBUTES_OF, ids), _same)
    handles = _by_deployable(conn.execute(_HANDLES_OF, ids), HandleRecord._make)
    return [
        DeployableInfo(dep, attributes.nest(attrs.get(dep.id, ())), handles.get(dep.id, []))
        for dep in deployables
    ]


def list_deployables(
    db: Database,
    filters: Mapping[str, str | None],
    page: Page,
    attribute_filters: Mapping[str, str] | None = None,
) -> Listed[DeployableInfo]:
    """Deployables matching every column filter (``FILTERS``) and every attribute
    filter, one page of them."""
    statement = _SELECT.where(
        *conditions(FILTERS, filters), *_attribute_conditions(attribute_filters or {})
    )
    with db.reader() as conn:
        listed = paginate(conn, statement, DEPLOYABLES, page, SORT_KEYS, "deployable", _make)
        return Listed(_complete(conn, listed.items), listed.more)


def get(db: Database, uuid: str) -> DeployableInfo:
    wanted = parse(uuid, "uuid")
    with db.reader() as conn:
        row = conn.execute(_BY_UUID, {"uuid": wanted}).first()
        if row is None:
            raise NotFound(f"Deployable {wanted} not found.")
        return _complete(conn, [_make(row)])[0]


def attributes_of(db: Database, uuid: str) -> dict[str, Any]:
    """A deployable's attributes, nested."""
    wanted = parse(uuid, "uuid")
    with db.reader() as conn:
        found = conn.execute(_ID_BY_UUID, {"uuid": wanted}).first()
        if found is None:
            raise NotFound(f"Deployable {wanted} not found.")
        return attributes.nest(conn.execute(_ATTRIBUTES_OF, {"ids": [found.id]}))


def attribute_of(db: Database, uuid: str, key: str) -> Any:
    """The value of one attribute (an object for a parent); a dotted key names a
    nested one."""
    nested = attributes_of(db, uuid)
    try:
        return attributes.lookup(nested, key)
    except KeyError:
        wanted = parse(uuid, "uuid")
        raise NotFound(f"Deployable {wanted} has no attribute {key[:255]!r}.") from None
