"""Attributes of deployables (spec 003): key/value pairs, nested through parent_id.

A parent attribute has no value of its own: its children are its value. Nested,
a deployable's attributes are one object (``nest``); flattened, every leaf is one
``{"parent.child": value}`` pair (``flatten``), as upstream's ``attributes_list``
shows them. A dotted key names a nested attribute wherever one is looked up.

Each attribute has a source. An agent's attributes come from its host's reports,
which own them: a report adds, changes and removes them, and nobody else does.
An operator's (``create``, top-level key and value) are the operator's to delete;
no report touches them. A key the deployable already has cannot be created again
(409). Should an agent later report a key an operator set, both rows stay and the
reported value is the deployable's (in its nested attributes and in filters).
"""

from __future__ import annotations

import datetime as dt
import uuid as uuidlib
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, Row, bindparam, delete, insert, literal, or_, select

from acceleron.db.models import NAME_LEN, Attribute, Deployable, table
from acceleron.db.session import Database
from acceleron.exceptions import Conflict, InvalidInput, NotFound
from acceleron.service.listing import (
    TEXT_MAX,
    Filter,
    Listed,
    Page,
    check_id,
    check_text,
    conditions,
    paginate,
)
from acceleron.uuids import parse

ATTRIBUTES = table(Attribute)
DEPLOYABLES = table(Deployable)
_PARENT = ATTRIBUTES.alias("parent_attribute")


class AttributeRecord(NamedTuple):
    """One attribute row (any level of nesting) with the uuids of its deployable and
    parent attribute, as reads and creates hand it out: ``AttributeRecord._make(row)``
    of a ``_SELECT`` row (the same names, in the same order)."""

    uuid: str
    deployable_id: int
    key: str
    value: str | None
    created_at: dt.datetime
    updated_at: dt.datetime | None
    deployable_uuid: str
    parent_uuid: str | None


_make = AttributeRecord._make
_SELECT = select(
    *(ATTRIBUTES.c[field] for field in AttributeRecord._fields[:6]),
    DEPLOYABLES.c.uuid.label("deployable_uuid"),
    _PARENT.c.uuid.label("parent_uuid"),
).select_from(
    ATTRIBUTES.join(DEPLOYABLES, ATTRIBUTES.c.deployable_id == DEPLOYABLES.c.id).outerjoin(
        _PARENT, ATTRIBUTES.c.parent_id == _PARENT.c.id
    )
)
_BY_UUID = _SELECT.where(ATTRIBUTES.c.uuid == bindparam("uuid"))
SORT_KEYS = ("created_at", "key", "uuid")
FILTERS: dict[str, Filter] = {
    "deployable_id": Filter(ATTRIBUTES.c.deployable_id, check_id),
    "deployable_uuid": Filter(DEPLOYABLES.c.uuid, parse),
    "key": Filter(ATTRIBUTES.c.key),
}


def list_attributes(
    db: Database, filters: Mapping[str, str | None], page: Page
) -> Listed[AttributeRecord]:
    """Attributes (every level of nesting) matching the filters, one page of them."""
    statement = _SELECT.where(*conditions(FILTERS, filters))
    with db.reader() as conn:
        return paginate(conn, statement, ATTRIBUTES, page, SORT_KEYS, "attribute", _make)


def get(db: Database, uuid: str) -> AttributeRecord:
    wanted = parse(uuid, "uuid")
    with db.reader() as conn:
        attribute = conn.execute(_BY_UUID, {"uuid": wanted}).first()
    if attribute is None:
        raise NotFound(f"Attribute {wanted} not found.")
    return _make(attribute)


# --- an operator's attributes ---------------------------------------------------------

AGENT, OPERATOR = "agent", "operator"


def _deployable_id(conn: Any, deployable: int | str) -> int:
    """The id of the deployable named by its integer id (upstream's) or its uuid, locked
    against a racing create (on the backends that lock rows)."""
    if isinstance(deployable, int) or deployable.isdigit():
        wanted: Any = check_id(str(deployable), "deployable_id")
        where = DEPLOYABLES.c.id == wanted
    else:
        wanted = parse(deployable, "deployable_id")
        where = DEPLOYABLES.c.uuid == wanted
    found = conn.execute(select(DEPLOYABLES.c.id).where(where).with_for_update()).first()
    if found is None:
        raise NotFound(f"Deployable {wanted} not found.")
    ident: int = found.id
    return ident


def create(db: Database, deployable: int | str, key: str, value: str) -> AttributeRecord:
    """An operator's attribute on a deployable; Conflict if it has the key already."""
    check_text(NAME_LEN)(key, "key")
    if not key:
        raise InvalidInput("key: an attribute needs a key.")
    if len(value) > TEXT_MAX:
        raise InvalidInput(f"value: at most {TEXT_MAX} characters.")
    with db.writer() as conn:
        deployable_id = _deployable_id(conn, deployable)
        taken = conn.execute(
            select(ATTRIBUTES.c.source).where(
                ATTRIBUTES.c.deployable_id == deployable_id,
                ATTRIBUTES.c.parent_id.is_(None),
                ATTRIBUTES.c.key == key,
            )
        ).first()
        if taken is not None:
            whose = "its agent reports it" if taken.source == AGENT else "an operator set it"
            raise Conflict(f"The deployable already has attribute {key!r} ({whose}).")
        uuid = str(uuidlib.uuid4())
        conn.execute(
            insert(ATTRIBUTES).values(
                uuid=uuid, deployable_id=deployable_id, key=key, value=value, source=OPERATOR
            )
        )
        return _make(conn.execute(_BY_UUID, {"uuid": uuid}).one())


def delete_attribute(db: Database, uuid: str) -> None:
    """Delete an operator's attribute. An agent's belongs to its reports (Conflict)."""
    wanted = parse(uuid, "uuid")
    with db.writer() as conn:
        found = conn.execute(
            select(ATTRIBUTES.c.id, ATTRIBUTES.c.source).where(ATTRIBUTES.c.uuid == wanted)
        ).first()
        if found is None:
            raise NotFound(f"Attribute {wanted} not found.")
        if found.source == AGENT:
            raise Conflict(
                f"Attribute {wanted} is reported by its deployable's agent, whose next report "
                "would bring it back: only attributes an operator created can be deleted."
            )
        conn.execute(delete(ATTRIBUTES).where(ATTRIBUTES.c.id == found.id))


def in_effect(attribute: Any) -> ColumnElement[bool]:
    """Whether a top-level row of ``attribute`` (an alias of attributes) is the
    deployable's: an agent's always, an operator's unless the agent reports its key."""
    reported = ATTRIBUTES.alias()
    shadowed = (
        select(literal(1))
        .where(
            reported.c.deployable_id == attribute.c.deployable_id,
            reported.c.parent_id.is_(None),
            reported.c.key == attribute.c.key,
            reported.c.source == AGENT,
        )
        .exists()
    )
    return or_(attribute.c.source == AGENT, ~shadowed)


# --- nesting -----------------------------------------------------------------------


def nest(rows: Iterable[Row[Any]]) -> dict[str, Any]:
    """One deployable's attribute rows (in id order) as one nested object. An operator's
    attribute whose key the agent also reports gives way to the reported one."""
    children: dict[int | None, list[Row[Any]]] = defaultdict(list)
    for row in rows:
        children[row.parent_id].append(row)
    reported = {row.key for row in children[None] if row.source == AGENT}
    children[None] = [r for r in children[None] if r.source == AGENT or r.key not in reported]

    def build(parent: int | None) -> dict[str, Any]:
        return {
            row.key: build(row.id) if row.id in children else row.value
            for row in children.get(parent, ())
        }

    return build(None)


def flatten(nested: Mapping[str, Any], prefix: str = "") -> list[dict[str, Any]]:
    """Leaves of a nested object as ``[{"a.b": value}, ...]``, in order."""
    pairs: list[dict[str, Any]] = []
    for key, value in nested.items():
        if isinstance(value, Mapping):
            pairs.extend(flatten(value, f"{prefix}{key}."))
        else:
            pairs.append({f"{prefix}{key}": value})
    return pairs


def lookup(nested: Mapping[str, Any], key: str) -> Any:
    """The value (a string, None, or an object) of ``key``; a dotted key may name a
    nested attribute. KeyError when there is none."""
    if key in nested:
        return nested[key]
    node: Any = nested
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise KeyError(key)
        node = node[part]
    return node
