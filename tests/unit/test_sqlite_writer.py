"""SQLite's writes (``Database.writer``) take one connection in turn, kept between them:
a write that failed leaves nothing behind on it, a connection that broke is replaced, and
``dispose`` closes it."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from acceleron.db.session import Database


@pytest.fixture
def db(tmp_path: Path) -> Database:
    database = Database(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with database.writer() as conn:
        conn.execute(text("CREATE TABLE t (k INTEGER PRIMARY KEY)"))
    return database


def keys(db: Database) -> list[int]:
    with db.reader() as conn:
        return [row.k for row in conn.execute(text("SELECT k FROM t ORDER BY k"))]


def test_writes_take_the_same_connection_in_turn(db: Database) -> None:
    with db.writer() as first:
        first.execute(text("INSERT INTO t VALUES (1)"))
    with db.writer() as second:
        second.execute(text("INSERT INTO t VALUES (2)"))
    assert second is first and not first.in_transaction()
    assert keys(db) == [1, 2]


def test_a_failed_write_leaves_nothing_on_the_kept_connection(db: Database) -> None:
    with pytest.raises(RuntimeError), db.writer() as conn:
        conn.execute(text("INSERT INTO t VALUES (1)"))
        raise RuntimeError("the service function failed")
    assert not conn.in_transaction()
    with db.writer() as again:
        again.execute(text("INSERT INTO t VALUES (2)"))
    assert again is conn and keys(db) == [2]


def test_a_broken_connection_is_replaced(db: Database) -> None:
    with pytest.raises(RuntimeError), db.writer() as conn:
        conn.execute(text("INSERT INTO t VALUES (1)"))
        broken = conn.connection.driver_connection
        conn.invalidate()
        raise RuntimeError("the connection broke")
    with db.writer() as again:
        again.execute(text("INSERT INTO t VALUES (2)"))
        assert again.connection.driver_connection is not broken
    assert keys(db) == [2]


def test_dispose_closes_it_and_a_later_write_opens_another(db: Database) -> None:
    with db.writer() as conn:
        conn.execute(text("INSERT INTO t VALUES (1)"))
    db.dispose()
    assert conn.closed
    with db.writer() as again:
        again.execute(text("INSERT INTO t VALUES (2)"))
    assert again is not conn and keys(db) == [1, 2]
    db.dispose()
