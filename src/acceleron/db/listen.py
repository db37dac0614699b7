"""PostgreSQL's LISTEN: signals sent by other processes (``session.signal`` with
``Database.notify_channels``), handed to this process's listeners.

One thread holds one connection of its own (not from the pool) that LISTENs on the
channels. When the connection is lost it reconnects with backoff, and then tells
every channel with the payload ``"*"``: whatever was sent meanwhile is unknown.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from acceleron.db.session import Database

LOG = logging.getLogger(__name__)
ANYTHING = "*"  # the payload told after a reconnection: anything may have happened


class ChannelListener:
    """LISTENs on ``channels`` for ``db`` (PostgreSQL) until ``stop``."""

    def __init__(self, db: Database, channels: Iterable[str]) -> None:
        if db.backend != "postgresql":
            raise ValueError("LISTEN needs PostgreSQL")
        self._db = db
        self._channels = tuple(channels)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="db-listen", daemon=True)
        self.listening = threading.Event()  # set while a LISTEN connection is up

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=5)

    def _connect(self) -> psycopg.Connection[tuple[object, ...]]:
        url = self._db.url
        args = url.translate_connect_args(username="user", database="dbname")
        params = {k: v for k, v in url.query.items() if isinstance(v, str)}
        conninfo = make_conninfo(connect_timeout=10, **args, **params)
        conn = psycopg.connect(conninfo, autocommit=True)
        for channel in self._channels:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        return conn

    def _run(self) -> None:
        backoff = 0.5
        while not self._stopping.is_set():
            try:
                with self._connect() as conn:
                    self.listening.set()
                    backoff = 0.5
                    self._db.tell(frozenset((c, ANYTHING) for c in self._channels))
                    while not self._stopping.is_set():
                        for heard in conn.notifies(timeout=0.5):  # told as each arrives
                            self._db.tell(frozenset({(heard.channel, heard.payload)}))
            except psycopg.Error as error:
                LOG.warning("Listening for database signals failed (%s); retrying", error)
            self.listening.clear()
            self._stopping.wait(backoff)
            backoff = min(backoff * 2, 30.0)
