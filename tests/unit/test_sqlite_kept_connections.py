"""SQLite's writes (``Database.writer``) take one connection in turn, kept between them:
a write that failed leaves nothing behind on it, a connection that broke is replaced, and
``dispose`` closes it. Reads keep one too, for whoever finds it free; a reader that finds
it taken (another thread's) uses the pool."""

from __future__ import annotations

import threading
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


def test_reads_take_the_kept_connection_when_it_is_free(db: Database) -> None:
    with db.reader() as first:
        pass
    assert not first.in_transaction()
    with db.reader() as second:
        pass
    assert second is first


def test_a_reader_that_finds_it_taken_uses_the_pool(db: Database) -> None:
    with db.writer() as conn:
        conn.execute(text("INSERT INTO t VALUES (1)"))
    taken = threading.Event()
    done = threading.Event()
    found: list[object] = []

    def hold() -> None:
        with db.reader() as held:
            found.append(held)
            taken.set()
            done.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert taken.wait(10)
        with db.reader() as other:
            assert other is not found[0]
            assert [row.k for row in other.execute(text("SELECT k FROM t"))] == [1]
    finally:
        done.set()
        holder.join(10)
    with db.reader() as again:
        assert again is found[0]  # free again


def test_a_failed_read_leaves_it_free_and_out_of_its_transaction(db: Database) -> None:
    with pytest.raises(RuntimeError), db.reader() as conn:
        raise RuntimeError("the service function failed")
    assert not conn.in_transaction()
    with db.reader() as again:
        assert again is conn
    db.dispose()
    assert conn.closed
