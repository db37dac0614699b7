"""Engines and transactions.

``Database.reader()`` and ``Database.writer()`` are the only ways service code
gets a session; each use is one transaction, committed on success and rolled
back on error. On SQLite the writer takes the write lock when it begins
(``BEGIN IMMEDIATE``) so concurrent writers queue on ``busy_timeout`` instead
of failing half-way when a read lock cannot be upgraded; WAL lets readers run
beside a writer.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session, sessionmaker


def _sqlite_engine(url: URL, busy_timeout: int, begin: str) -> Engine:
    database = url.database or ""
    if database and database != ":memory:":
        os.makedirs(os.path.dirname(os.path.abspath(database)), exist_ok=True)
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": busy_timeout})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the sqlite3 module, decide when transactions begin.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={busy_timeout * 1000}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql(begin)

    return engine


class Database:
    """The engines of one database URL and the transactions made from them."""

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 10,
        max_overflow: int = 20,
        pool_recycle: int = 3600,
        sqlite_busy_timeout: int = 30,
    ) -> None:
        self.url = make_url(url)
        if self.url.get_backend_name() == "sqlite":
            self.engine = _sqlite_engine(self.url, sqlite_busy_timeout, "BEGIN IMMEDIATE")
            self._read_engine = _sqlite_engine(self.url, sqlite_busy_timeout, "BEGIN")
        else:
            self.engine = create_engine(
                self.url,
                pool_size=pool_size,
                max_overflow=max_overflow,
                pool_recycle=pool_recycle,
                pool_pre_ping=True,
            )
            self._read_engine = self.engine
        self._writer = sessionmaker(self.engine, expire_on_commit=False)
        self._reader = sessionmaker(self._read_engine, expire_on_commit=False)

    @property
    def backend(self) -> str:
        return self.url.get_backend_name()

    @contextlib.contextmanager
    def writer(self) -> Iterator[Session]:
        with self._writer.begin() as session:
            yield session

    @contextlib.contextmanager
    def reader(self) -> Iterator[Session]:
        with self._reader.begin() as session:
            yield session

    def dispose(self) -> None:
        self.engine.dispose()
        if self._read_engine is not self.engine:
            self._read_engine.dispose()


def from_conf(conf: Any) -> Database:
    """The Database described by the ``[database]`` section of a configuration."""
    db = conf.database
    return Database(
        db.connection,
        pool_size=db.max_pool_size,
        max_overflow=db.max_overflow,
        pool_recycle=db.connection_recycle_time,
        sqlite_busy_timeout=db.sqlite_busy_timeout,
    )
