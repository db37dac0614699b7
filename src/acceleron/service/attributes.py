"""Attributes of deployables (spec 003): key/value pairs, nested through parent_id.

A parent attribute has no value of its own: its children are its value. Nested,
a deployable's attributes are one object (``nest``); flattened, every leaf is one
``{"parent.child": value}`` pair (``flatten``), as upstream's ``attributes_list``
shows them. A dotted key names a nested attribute wherever one is looked up.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import Row, bindparam, select

from acceleron.db.models import Attribute, Deployable, table
from acceleron.db.session import Database
from acceleron.exceptions import NotFound
from acceleron.service.listing import (
    Filter,
    Listed,
    Page,
    check_id,
    check_uuid,
    conditions,
    paginate,
)

ATTRIBUTES = table(Attribute)
DEPLOYABLES = table(Deployable)
_PARENT = ATTRIBUTES.alias("parent_attribute")
# Attribute rows with the uuids of their deployable and parent attribute.
_SELECT = select(
    ATTRIBUTES,
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
    "deployable_uuid": Filter(DEPLOYABLES.c.uuid, check_uuid),
    "key": Filter(ATTRIBUTES.c.key),
}


def list_attributes(
    db: Database, filters: Mapping[str, str | None], page: Page
) -> Listed[Row[Any]]:
    """Attribute rows (every level of nesting) matching the filters, one page of them."""
    statement = _SELECT.where(*conditions(FILTERS, filters))
    with db.reader() as conn:
        return paginate(conn, statement, ATTRIBUTES, page, SORT_KEYS, "attribute")


def get(db: Database, uuid: str) -> Row[Any]:
    wanted = check_uuid(uuid, "uuid")
    with db.reader() as conn:
        attribute = conn.execute(_BY_UUID, {"uuid": wanted}).first()
    if attribute is None:
        raise NotFound(f"Attribute {wanted} not found.")
    return attribute


# --- nesting -----------------------------------------------------------------------


def nest(rows: Iterable[Row[Any]]) -> dict[str, Any]:
    """One deployable's attribute rows (in id order) as one nested object."""
    children: dict[int | None, list[Row[Any]]] = defaultdict(list)
    for row in rows:
        children[row.parent_id].append(row)

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
