"""Lists of the inventory (devices, deployables, attributes): the shared machinery.

Query values checked before they reach the database, filters that become WHERE
clauses, and keyset pages (``sort_key``/``sort_dir``, ``limit`` and ``marker``,
the uuid of the last item seen). Everything is filtered, sorted and cut in the
database; nothing is loaded to be filtered in Python.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar, overload

from sqlalchemy import (
    ColumnElement,
    Connection,
    Row,
    Select,
    Table,
    and_,
    or_,
    select,
)

from acceleron.exceptions import InvalidInput
from acceleron.placement import names
from acceleron.text import has_control
from acceleron.uuids import parse
from acceleron.vocabulary import HEALTH_STATES

T = TypeVar("T")

# A filter value that means "no value" (spec 003: ?bitstream_id=None).
NULL_WORDS = frozenset({"None", "null"})
SORT_DIRS = ("asc", "desc")
# Longest value checked against a column without a length (TEXT): what reports may hold.
TEXT_MAX = 65_535
ADDRESS_MAX = 32
# The largest id an INTEGER column holds on every backend.
ID_MAX = 2**31 - 1


# --- checking query values ----------------------------------------------------------

# A check takes the value and the parameter it came in, and returns it normalised:
# what the column is compared with.
Check = Callable[[str, str], Any]
TextCheck = Callable[[str, str], str]


def check_text(max_length: int) -> TextCheck:
    def check(value: str, param: str) -> str:
        if len(value) > max_length or has_control(value):
            raise InvalidInput(
                f"{param}: {value[:64]!r} is not a valid value (at most {max_length} "
                f"characters, no control characters)."
            )
        return value

    return check


def check_choice(choices: Sequence[str]) -> TextCheck:
    def check(value: str, param: str) -> str:
        if value not in choices:
            raise InvalidInput(f"{param}: {value[:64]!r} is not one of {', '.join(choices)}.")
        return value

    return check


def check_address(value: str, param: str) -> str:
    """A device address as stored: a PCI address in its canonical form (``0C:00.0`` ->
    ``0000:0c:00.0``), any other kept as it is."""
    try:
        address = names.canonical_address(value)
    except InvalidInput:
        address = ""
    if not address or len(address) > ADDRESS_MAX:
        raise InvalidInput(
            f"{param}: {value[:64]!r} is not a device address (a PCI address is "
            f"domain:bus:slot.function, e.g. 0000:0c:00.0)."
        )
    return address


def check_vendor(value: str, param: str) -> str:
    """A PCI vendor id as stored: lower-case hex without ``0x`` (``0x8086`` -> ``8086``)."""
    return check_text(16)(value.lower().removeprefix("0x"), param)


def check_id(value: str, param: str) -> int:
    """An integer id that fits the INTEGER columns of every backend."""
    if not (value.isascii() and value.isdigit() and len(value) <= 10) or int(value) > ID_MAX:
        raise InvalidInput(f"{param}: {value[:64]!r} is not an id (0 to {ID_MAX}).")
    return int(value)


def column_check(column: ColumnElement[Any]) -> Check:
    """Text no longer than the column holds."""
    return check_text(getattr(column.type, "length", None) or TEXT_MAX)


@dataclasses.dataclass(frozen=True)
class Filter:
    """A query parameter that compares a column: ``None``/``null`` means IS NULL."""

    column: ColumnElement[Any]
    check: Check | None = None  # default: text that fits the column

    def condition(self, value: str, param: str) -> ColumnElement[bool]:
        if value in NULL_WORDS:
            return self.column.is_(None)
        check = self.check or column_check(self.column)
        condition: ColumnElement[bool] = self.column == check(value, param)
        return condition


class HealthFilter(Filter):
    """``health=unhealthy`` or several states at once: ``health=degraded,unhealthy``."""

    def condition(self, value: str, param: str) -> Any:
        states = [s.strip().lower() for s in value.split(",") if s.strip()]
        bad = [s for s in states if s not in HEALTH_STATES]
        if bad or not states:
            raise InvalidInput(
                f"{param}: {', '.join(bad) or value!r} is not a health state; give one or more "
                f"of {', '.join(HEALTH_STATES)}, separated by commas."
            )
        return self.column.in_(states)


def conditions(
    filters: Mapping[str, Filter], values: Mapping[str, str | None]
) -> list[ColumnElement[bool]]:
    """The WHERE clauses of the parameters given (None: not given)."""
    unknown = sorted(set(values) - set(filters))
    if unknown:
        raise InvalidInput(f"Unknown filter(s): {', '.join(unknown)}.")
    return [
        filters[param].condition(value, param)
        for param, value in values.items()
        if value is not None
    ]


# --- pages ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Page:
    """Which part of a list to return: its order, its size and where the last one ended."""

    sort_key: str = "created_at"
    sort_dir: str = "asc"
    limit: int = 1000
    marker: str | None = None


def make_page(
    *,
    max_limit: int,
    sort_key: str | None = None,
    sort_dir: str | None = None,
    limit: int | None = None,
    marker: str | None = None,
) -> Page:
    """A checked page; ``limit`` is capped at ``max_limit`` (and defaults to it)."""
    if limit is not None and limit < 1:
        raise InvalidInput(f"limit: must be a positive integer, not {limit}.")
    return Page(
        sort_key=sort_key or Page.sort_key,
        sort_dir=check_choice(SORT_DIRS)(sort_dir, "sort_dir") if sort_dir else Page.sort_dir,
        limit=min(limit or max_limit, max_limit),
        marker=parse(marker, "marker") if marker is not None else None,
    )


@dataclasses.dataclass(frozen=True)
class Listed(Generic[T]):
    """One page of a list; ``more`` says whether another page follows it."""

    items: list[T]
    more: bool


@overload
def paginate(
    conn: Connection,
    statement: Select[Any],
    tbl: Table,
    page: Page,
    sort_keys: Sequence[str],
    noun: str,
) -> Listed[Row[Any]]: ...


@overload
def paginate(
    conn: Connection,
    statement: Select[Any],
    tbl: Table,
    page: Page,
    sort_keys: Sequence[str],
    noun: str,
    make: Callable[[Row[Any]], T],
) -> Listed[T]: ...


def paginate(
    conn: Connection,
    statement: Select[Any],
    tbl: Table,
    page: Page,
    sort_keys: Sequence[str],
    noun: str,
    make: Callable[[Row[Any]], Any] | None = None,
) -> Listed[Any]:
    """Run ``statement`` (rows of ``tbl``, perhaps joined) sorted and cut to ``page``;
    each row made into a record by ``make`` (a record type's ``_make``), or left a row.

    Keyset pagination: the rows after the marker's (sort value, id), ties broken by
    id, so a page never repeats or skips a row whatever the sort key. Sort keys are
    NOT NULL columns of ``tbl``.
    """
    if page.sort_key not in sort_keys:
        raise InvalidInput(f"sort_key: {page.sort_key!r} is not one of {', '.join(sort_keys)}.")
    column, ident = tbl.c[page.sort_key], tbl.c.id
    if page.marker is not None:
        statement = statement.where(_after_marker(conn, tbl, column, page, noun))
    if page.sort_dir == "desc":
        statement = statement.order_by(column.desc(), ident.desc())
    else:
        statement = statement.order_by(column.asc(), ident.asc())
    rows = list(conn.execute(statement.limit(page.limit + 1)))
    more = len(rows) > page.limit
    if more:
        del rows[page.limit :]
    return Listed(rows if make is None else list(map(make, rows)), more=more)


def _after_marker(
    conn: Connection, tbl: Table, column: ColumnElement[Any], page: Page, noun: str
) -> ColumnElement[bool]:
    found = conn.execute(select(column, tbl.c.id).where(tbl.c.uuid == page.marker)).first()
    if found is None:
        raise InvalidInput(f"marker: there is no {noun} with uuid {page.marker!r}.")
    value, ident = found
    if page.sort_dir == "desc":
        return or_(column < value, and_(column == value, tbl.c.id < ident))
    return or_(column > value, and_(column == value, tbl.c.id > ident))
