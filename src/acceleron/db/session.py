"""Engines and transactions.

``Database.reader()`` and ``Database.writer()`` are the only ways service code
reaches the database: each use is one transaction on a Connection, committed on
success and rolled back on error. Service code speaks SQLAlchemy Core (the ORM
models in ``models.py`` are the table definitions): plain rows cost half of what
ORM objects do, which matters on the API's hot paths.

A write may ``signal`` (channel, payload) to whoever listens once it commits: the
listeners registered on the Database in this process (``listen``) and, where
``notify_channels`` is on (PostgreSQL), every process that LISTENs on the channel
(``pg_notify`` is sent inside the transaction, so PostgreSQL delivers it at the
commit and never for a rollback).

A transaction the database rolled back so that it may run again (a deadlock victim, a
lock wait timeout, a PostgreSQL serialization failure, a Galera certification failure:
1213 "WSREP detected deadlock/conflict" at commit) is run again whole by
``retry_on_deadlock``, a bounded number of times with jittered backoff; outside such an
operation it becomes DatabaseBusy (503 with Retry-After), never an unmapped error. A
database that cannot be reached or dropped the connection (a writer node killed, a
primary restarted) becomes DatabaseUnavailable (503 with Retry-After): nothing is retried
across a lost connection, whose COMMIT may or may not have happened.

On SQLite the writer takes the write lock when it begins (``BEGIN IMMEDIATE``)
so concurrent writers queue on ``busy_timeout`` instead of failing half-way
when a read lock cannot be upgraded; WAL lets readers run beside a writer.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import os
import random
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Generic, ParamSpec, TypeVar

import orjson
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError

from acceleron import metrics
from acceleron.exceptions import DatabaseBusy, DatabaseUnavailable

LOG = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")
K = TypeVar("K")

Signal = tuple[str, str]  # channel, payload
Listener = Callable[[frozenset[Signal]], None]
_SIGNALS = "acceleron.signals"  # Connection.info key: what this transaction signals
_NOTIFY = text("SELECT pg_notify(:channel, :payload)")


def signal(conn: Connection, channel: str, payload: str) -> None:
    """Tell the listeners of ``channel`` about ``payload`` once this write transaction
    commits (nothing is told if it rolls back)."""
    conn.info.setdefault(_SIGNALS, set()).add((channel, payload))


def _json_dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def _sqlite_engine(url: URL, busy_timeout: int, begin: str) -> Engine:
    database = url.database or ""
    if database and database != ":memory:":
        os.makedirs(os.path.dirname(os.path.abspath(database)), exist_ok=True)
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": busy_timeout},
        json_serializer=_json_dumps,
        json_deserializer=orjson.loads,
    )

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
        # On the driver's connection, not through SQLAlchemy's execution (its context,
        # events, result): docs/benchmarks.md, "What the shortcuts save".
        conn.connection.driver_connection.execute(begin)

    return engine


class _TimedLock:
    """A lock that gives up after the busy timeout, as SQLite itself would."""

    def __init__(self, timeout: float) -> None:
        self._lock = threading.Lock()
        self._timeout = timeout

    def __enter__(self) -> None:
        if not self._lock.acquire(timeout=self._timeout):
            raise DatabaseBusy(
                f"The database stayed locked by another writer for {self._timeout} s."
            )

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


# The read transaction open in this thread or task (``Database.reader``), for nested
# readers to join.
_READING: contextvars.ContextVar[tuple[Database, Connection] | None] = contextvars.ContextVar(
    "acceleron_reading", default=None
)


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
        self.backend = self.url.get_backend_name()  # asked by every request: kept
        if self.backend == "sqlite":
            self.engine = _sqlite_engine(self.url, sqlite_busy_timeout, "BEGIN IMMEDIATE")
            self._read_engine = _sqlite_engine(self.url, sqlite_busy_timeout, "BEGIN")
            # SQLite has one writer at a time. Threads of this process queue here for it;
            # left to SQLite's busy handler they would sleep-poll with growing back-off.
            self._write_lock: contextlib.AbstractContextManager[Any] = _TimedLock(
                sqlite_busy_timeout
            )
            self._connect: Callable[[], contextlib.AbstractContextManager[Connection]] = (
                self._kept_writer
            )
        else:
            # MariaDB/MySQL: READ COMMITTED takes far fewer gap locks than the default
            # REPEATABLE READ (fewer deadlocks) and lets a re-read see committed rows.
            isolation = "READ COMMITTED" if self.backend in ("mysql", "mariadb") else None
            self.engine = create_engine(
                self.url,
                # A server that does not answer is given up on (PyMySQL: 10 s already).
                connect_args={"connect_timeout": 10} if self.backend == "postgresql" else {},
                isolation_level=isolation,
                pool_size=pool_size,
                max_overflow=max_overflow,
                pool_recycle=pool_recycle,
                pool_pre_ping=True,
                json_serializer=_json_dumps,
                json_deserializer=orjson.loads,
            )
            self._read_engine = self.engine
            self._write_lock = contextlib.nullcontext()
            self._connect = self.engine.connect
        self._kept: Connection | None = None
        self._kept_read: Connection | None = None
        self._kept_read_lock = threading.Lock()
        self._listeners: list[Listener] = []
        # Send each signal with pg_notify too (PostgreSQL only): other processes hear it.
        self.notify_channels = False
        self._writes = 0
        self._writes_lock = threading.Lock()

    @property
    def writes(self) -> int:
        """How many write transactions of this process have ended (committed or not) on
        this database: a read after this count was read holds every write of this
        process it counts (``ReadCache``)."""
        return self._writes

    def listen(self, listener: Listener) -> None:
        """Call ``listener`` (in the committing thread) with what each write signalled."""
        self._listeners.append(listener)

    def unlisten(self, listener: Listener) -> None:
        with contextlib.suppress(ValueError):
            self._listeners.remove(listener)

    @contextlib.contextmanager
    def writer(self) -> Iterator[Connection]:
        """One read-write transaction; what it signalled is told once it commits."""
        with self._write_lock, _outage_as_domain_error(), self._connect() as connection:
            try:
                with connection.begin():
                    yield connection
                    signals = connection.info.pop(_SIGNALS, None)
                    if signals and self.notify_channels:
                        for channel, payload in sorted(signals):
                            connection.execute(_NOTIFY, {"channel": channel, "payload": payload})
            finally:
                connection.info.pop(_SIGNALS, None)  # a rollback's signals are dropped
                with self._writes_lock:  # committed or rolled back: ended
                    self._writes += 1
        if signals:
            self.tell(frozenset(signals))

    @contextlib.contextmanager
    def _kept_writer(self) -> Iterator[Connection]:
        """SQLite's one writer at a time (under the write lock): the same connection for
        every write of this process, as long as it lasts, not one from the pool each time
        (docs/benchmarks.md, "What the shortcuts save")."""
        kept = self._kept
        if kept is None or kept.closed or kept.invalidated:
            kept = self._kept = self.engine.connect()
        yield kept

    def tell(self, signals: frozenset[Signal]) -> None:
        """Hand signals to this process's listeners (a listener's error is logged)."""
        for listener in list(self._listeners):
            try:
                listener(signals)
            except Exception:
                LOG.exception("A listener of %s failed", sorted(signals))

    @contextlib.contextmanager
    def reader(self) -> Iterator[Connection]:
        """One read-only transaction. A reader opened inside another of this database (in
        the same thread or task) joins it: one snapshot and one transaction, not another
        connection and its BEGIN and end (a device profile's show reads the profile, the
        local store's bitstreams and the steering: docs/benchmarks.md, "What the
        shortcuts save")."""
        joined = _READING.get()
        if joined is not None and joined[0] is self:
            yield joined[1]
            return
        with _outage_as_domain_error(), self._read_transaction() as connection:
            token = _READING.set((self, connection))
            try:
                yield connection
            finally:
                _READING.reset(token)

    def _read_transaction(self) -> contextlib.AbstractContextManager[Connection]:
        if self.backend == "sqlite" and self._kept_read_lock.acquire(blocking=False):
            return self._kept_read_transaction()
        return self._read_engine.begin()

    @contextlib.contextmanager
    def _kept_read_transaction(self) -> Iterator[Connection]:
        """SQLite: a read transaction on the connection kept for reads, which whoever
        finds it free takes (the event loop's thread, which serves the reads, almost
        always); another reader meanwhile takes one from the pool (docs/benchmarks.md,
        "What the shortcuts save")."""
        try:
            kept = self._kept_read
            if kept is None or kept.closed:
                kept = self._kept_read = self._read_engine.connect()
            with kept.begin():
                yield kept
        finally:
            self._kept_read_lock.release()

    def dispose(self) -> None:
        with self._write_lock:
            if self._kept is not None:
                self._kept.close()
                self._kept = None
        with self._kept_read_lock:
            if self._kept_read is not None:
                self._kept_read.close()
                self._kept_read = None
        self.engine.dispose()
        if self._read_engine is not self.engine:
            self._read_engine.dispose()


@contextlib.contextmanager
def _outage_as_domain_error() -> Iterator[None]:
    """A database that cannot be reached, or that dropped the connection, becomes
    DatabaseUnavailable; a pool with no connection free in time, DatabaseBusy. (A lost
    race, deadlock or lock timeout, stays as it is: ``retry_on_deadlock`` runs the
    operation again.) The details go to the log, not to API clients."""
    try:
        yield
    except sa_exc.TimeoutError as error:
        LOG.warning("No database connection came free in time: %s", error)
        raise DatabaseBusy("Every database connection stayed busy; retry shortly.") from error
    except (sa_exc.OperationalError, sa_exc.InterfaceError) as error:
        if is_retryable(error):
            if _RETRYING.get():
                raise  # retry_on_deadlock runs the whole operation again
            LOG.warning("A transaction lost to another (%s); not retried here", error.orig)
            raise DatabaseBusy(
                "The database rolled this change back for a conflicting one; retry shortly."
            ) from error
        if "database is locked" in str(error.orig):  # SQLite's busy timeout ran out
            raise DatabaseBusy("The database stayed locked by another writer.") from error
        LOG.warning("The database is unavailable: %s", error.orig)
        raise DatabaseUnavailable(
            "The database is unavailable (unreachable, or it dropped the connection); retry later."
        ) from error


class ReadCache(Generic[K]):
    """What a process read from a database and keeps for its next reads (one ``K``, made
    empty by ``make``, per database): until this process writes to that database
    (anything: a new one is made at the next ``get``), or for ``seconds`` (what other
    processes write). ``get`` before the read transaction whose reads go into it: it then
    holds nothing older than this process's writes it counted."""

    def __init__(self, seconds: float, make: Callable[[], K]) -> None:
        self.seconds = seconds
        self._make = make
        self._kept: weakref.WeakKeyDictionary[Database, tuple[int, float, K]] = (
            weakref.WeakKeyDictionary()
        )

    def get(self, db: Database) -> K:
        now, writes = self.clock(), db.writes
        found = self._kept.get(db)
        if found is None or found[0] != writes or now >= found[1]:
            found = self._kept[db] = (writes, now + self.seconds, self._make())
        return found[2]

    clock = staticmethod(time.monotonic)  # (a test moves it on)


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


# What each backend says when a transaction lost to another one and may simply run again.
_RETRYABLE_MYSQL = (1213, 1205)  # deadlock, lock wait timeout
_RETRYABLE_SQLSTATE = ("40P01", "40001")  # PostgreSQL: deadlock, serialization failure


# Inside an operation that retry_on_deadlock runs again on such an error.
_RETRYING: contextvars.ContextVar[bool] = contextvars.ContextVar("retrying", default=False)


def retry_reason(error: DBAPIError) -> str | None:
    """Why the database rolled this transaction back so that it may run again (None:
    it did not)."""
    orig = error.orig
    sqlstate = getattr(orig, "sqlstate", None)
    if sqlstate in _RETRYABLE_SQLSTATE:
        return "deadlock" if sqlstate == "40P01" else "serialization"
    args: tuple[Any, ...] = getattr(orig, "args", ())
    if not args or args[0] not in _RETRYABLE_MYSQL:
        return None
    if args[0] == 1205:
        return "lock_wait_timeout"
    # Galera answers a write set that lost certification with 1213 and this message.
    return "certification" if "WSREP" in str(args[1:]) else "deadlock"


def is_retryable(error: DBAPIError) -> bool:
    return retry_reason(error) is not None


ATTEMPTS = 10


def retry_on_deadlock(fn: Callable[P, R]) -> Callable[P, R]:
    """Run a whole write operation again (up to ATTEMPTS times, with jittered backoff)
    when the database chose it as a deadlock victim: its transaction was rolled back."""

    @functools.wraps(fn)
    def retrying(*args: P.args, **kwargs: P.kwargs) -> R:
        token = _RETRYING.set(True)
        try:
            for attempt in range(ATTEMPTS):
                try:
                    return fn(*args, **kwargs)
                except DBAPIError as error:
                    reason = retry_reason(error)
                    if reason is None:
                        raise
                    if attempt == ATTEMPTS - 1:
                        raise DatabaseBusy(
                            f"The database rolled this request back for a conflicting one "
                            f"{ATTEMPTS} times; retry shortly."
                        ) from error
                    metrics.DB_RETRIES.labels(reason).inc()
                    LOG.info("%s: %s; running it again", fn.__qualname__, reason)
                    time.sleep(random.uniform(0, min(0.5, 0.01 * 2**attempt)))
            raise AssertionError("unreachable")
        finally:
            _RETRYING.reset(token)

    return retrying


class StatementCounter:
    """Counts the statements run on a database while active, by verb (SELECT, INSERT...).

    For tests and benchmarks that must show, for example, that an unchanged host
    report writes nothing::

        with StatementCounter(db) as counted:
            ...
        assert counted.writes == 0
    """

    WRITES = ("INSERT", "UPDATE", "DELETE")
    # Transaction control is not counted: only statements that read or write data.
    _CONTROL = frozenset({"BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE"})

    def __init__(self, db: Database) -> None:
        self._engines = {db.engine, db._read_engine}
        self.by_verb: dict[str, int] = {}

    def _count(self, *args: Any) -> None:
        verb = str(args[2]).lstrip().split(None, 1)[0].upper()
        if verb not in self._CONTROL:
            self.by_verb[verb] = self.by_verb.get(verb, 0) + 1

    @property
    def writes(self) -> int:
        return sum(self.by_verb.get(verb, 0) for verb in self.WRITES)

    def __enter__(self) -> StatementCounter:
        for engine in self._engines:
            event.listen(engine, "before_cursor_execute", self._count)
        return self

    def __exit__(self, *exc: object) -> None:
        for engine in self._engines:
            event.remove(engine, "before_cursor_execute", self._count)
