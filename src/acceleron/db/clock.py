"""The database's time, in SQL: leases are written and compared there, so the clocks of
the API processes never matter (claims' leases, a host's sync lease)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import ColumnElement, DateTime, bindparam
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement


class _Clock(FunctionElement[dt.datetime]):
    """The database's UTC time now, plus a number of microseconds (a bound value)."""

    type = DateTime()
    inherit_cache = True
    name = "acceleron_clock"


@compiles(_Clock)
def _clock_default(element: _Clock, compiler: SQLCompiler, **kw: Any) -> str:
    return f"(CURRENT_TIMESTAMP + ({compiler.process(element.clauses, **kw)}) / 1000000)"


@compiles(_Clock, "sqlite")
def _clock_sqlite(element: _Clock, compiler: SQLCompiler, **kw: Any) -> str:
    shift = compiler.process(element.clauses, **kw)
    return f"strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+.6f seconds', ({shift}) / 1000000.0))"


@compiles(_Clock, "postgresql")
def _clock_postgresql(element: _Clock, compiler: SQLCompiler, **kw: Any) -> str:
    shift = compiler.process(element.clauses, **kw)
    return (
        f"(timezone('utc', clock_timestamp()) + "
        f"make_interval(secs => CAST(({shift}) AS double precision) / 1000000))"
    )


@compiles(_Clock, "mysql")
@compiles(_Clock, "mariadb")
def _clock_mysql(element: _Clock, compiler: SQLCompiler, **kw: Any) -> str:
    return f"(UTC_TIMESTAMP(6) + INTERVAL ({compiler.process(element.clauses, **kw)}) MICROSECOND)"


def clock(seconds: float = 0.0) -> ColumnElement[dt.datetime]:
    """The database's time (naive UTC, as the claims' timestamps are) ``seconds`` from now."""
    return _Clock(bindparam(None, int(seconds * 1_000_000), unique=True))
