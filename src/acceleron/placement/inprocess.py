"""The real OpenStack Placement, running inside this process.

Used by the embedded mode and by tests. :func:`placement_app` builds Placement's WSGI
application once per process (its database layer is a process-global enginefacade, so
there can only be one); :func:`direct_adapter` hands back a keystoneauth1 ``Adapter``
whose HTTP requests are answered by a WSGI application without a socket. That is the
same client type the product uses against a remote Placement: only the transport
differs, and nothing global is patched.
"""

from __future__ import annotations

import collections
import dataclasses
import io
import threading
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

import requests
import webob
from keystoneauth1 import adapter, session, token_endpoint
from oslo_config import cfg
from requests.adapters import BaseAdapter
from requests.structures import CaseInsensitiveDict
from sqlalchemy import event, pool

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

# noauth2: the token "admin" carries the admin role.
ADMIN_TOKEN = "admin"
ROLES = {"X-Roles": "admin,member,reader,service"}
DIRECT_ENDPOINT = "http://placement.in-process"

_lock = threading.Lock()
_app: tuple[str, Tuning, WSGIApp] | None = None
_turns: FairLock | None = None  # the turns of the Placement on SQLite in this process


@dataclasses.dataclass(frozen=True)
class Tuning:
    """Placement's options for wide provider trees, as the embedded Placement runs them
    (``[placement] embedded_*``; docs/placement.md, "Placement's options"). ``None``
    leaves Placement's own default, which its configuration may change.

    An 8-card FPGA host has a provider per region: a request for N regions as N groups
    of one makes Placement build 8^N combinations before it keeps those that fit. The
    cap stops the building at that many candidates, breadth-first takes them from every
    host in turn, and the wide-tree workaround drops combinations over a provider's
    capacity while they are built."""

    max_candidates: int | None = 100  # [placement] max_allocation_candidates
    strategy: str | None = "breadth-first"  # allocation_candidates_generation_strategy
    wide_trees: bool | None = True  # [workarounds] optimize_for_wide_provider_trees


PLACEMENT_DEFAULTS = Tuning(None, None, None)


def _tune(conf: cfg.ConfigOpts, tuning: Tuning) -> None:
    if tuning.max_candidates is not None:
        conf.set_override("max_allocation_candidates", tuning.max_candidates, group="placement")
    if tuning.strategy is not None:
        conf.set_override(
            "allocation_candidates_generation_strategy", tuning.strategy, group="placement"
        )
    if tuning.wide_trees is not None:
        conf.set_override(
            "optimize_for_wide_provider_trees", tuning.wide_trees, group="workarounds"
        )


def _load(connection: str, tuning: Tuning) -> WSGIApp:
    from placement import conf as placement_conf
    from placement import db_api, deploy

    conf = cfg.ConfigOpts()
    placement_conf.register_opts(conf)
    # The option is required: it must be a default before parsing, or parsing fails.
    conf.set_default("connection", connection, group="placement_database")
    conf([], project="placement", default_config_files=[])
    conf.set_override("auth_strategy", "noauth2", group="api")
    conf.set_override("sync_on_startup", True, group="placement_database")
    _tune(conf, tuning)
    db_api.configure(conf)
    # oslo.db's sleep(0) at each connection check-in lets eventlet's green threads
    # switch; in a threaded process it hands the GIL to whichever thread waits, and
    # the request waits its turn back (docs/benchmarks.md, "What the shortcuts save").
    db_api.placement_context_manager.configure(thread_checkin=False)
    app: WSGIApp = deploy.loadapp(conf)
    if not connection.startswith("sqlite"):
        return app
    if connection not in ("sqlite://", "sqlite:///:memory:"):
        engine = db_api.get_placement_engine()
        _write_ahead(engine)
        _keep_connections(engine)
    global _turns
    _turns = FairLock()
    return _one_at_a_time(app, _turns)


def _write_ahead(engine: Any) -> None:
    """An SQLite file as Acceleron's own is kept (``db/session.py``): a write-ahead log,
    synced at checkpoints rather than at every commit (still safe from corruption).
    Placement opens a connection per transaction, and each commit would otherwise wait
    for the disk several times."""

    def pragmas(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.execute("PRAGMA journal_mode=WAL")  # kept in the file: one change
        dbapi_connection.execute("PRAGMA synchronous=NORMAL")

    event.listen(engine, "connect", pragmas)


def _keep_connections(engine: Any) -> None:
    """Keep the SQLite file's connections open between transactions. oslo.db gives a
    file database no pool (``NullPool``): Placement would open a connection, run its
    connect-time statements, and close it again, for every transaction of every
    request. Closing the last connection to a write-ahead log checkpoints it
    (docs/benchmarks.md, "What the shortcuts save"). The new pool's connections are
    made by the old one and detached from it: its connect listeners (the pragmas above,
    oslo.db's own) have set each up."""
    made_by = engine.pool

    def connect() -> Any:
        connection = made_by.connect()
        connection.detach()  # the old pool forgets it: closing it is the new pool's
        return connection.dbapi_connection

    engine.pool = pool.QueuePool(connect, pool_size=2, max_overflow=8, dialect=engine.dialect)


def _one_at_a_time(app: WSGIApp, turns: FairLock | None = None) -> WSGIApp:
    """Placement on SQLite in this process answers one request at a time. Its SQLite
    database is one connection shared by every thread (an in-memory one must be), and
    two threads' transactions on one connection would undo each other's work. On a
    database server each request has a connection of its own: no lock. Requests take
    their turns in the order they came (``FairLock``)."""
    calls = turns or FairLock()

    def serialized(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        with calls:
            return list(app(environ, start_response))

    return serialized


def turns() -> FairLock | None:
    """The turns requests take at the Placement on SQLite in this process (None: none
    runs here, or it runs on a database server). A thread holding its turn may send
    requests meanwhile: they are answered in that turn (``placement.batch`` takes one
    to gather the writes that came while it waited)."""
    return _turns


class FairLock:
    """A lock handed to its waiters in the order they came. ``threading.Lock`` is not:
    a thread sending requests back to back (a reconciler's pass over every provider,
    a sync of a thousand hosts) takes it again before a waiter wakes, and a claim
    waited seconds behind a pass at 1,000 hosts. The thread holding it may take it
    again (its requests in its turn)."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._busy = False
        self._holder: int | None = None  # the thread whose turn it is
        self._depth = 0  # how many times more it took it
        self._waiters: collections.deque[threading.Lock] = collections.deque()

    @property
    def waiting(self) -> int:
        """How many threads wait for their turn."""
        return len(self._waiters)

    def __enter__(self) -> None:
        me = threading.get_ident()
        with self._mutex:
            if self._busy and self._holder == me:
                self._depth += 1
                return
            if not self._busy:
                self._busy, self._holder = True, me
                return
            turn = threading.Lock()
            turn.acquire()
            self._waiters.append(turn)
        try:
            turn.acquire()  # released by the thread whose turn ends: this one's begins
        except BaseException:
            with self._mutex:
                handed = turn not in self._waiters
                if not handed:
                    self._waiters.remove(turn)
            if handed:
                with self._mutex:
                    self._holder = me
                self.__exit__()
            raise
        with self._mutex:
            self._holder = me

    def __exit__(self, *_exc: object) -> None:
        with self._mutex:
            if self._depth:
                self._depth -= 1
                return
            self._holder = None
            if self._waiters:
                self._waiters.popleft().release()  # still busy: the next one's turn
            else:
                self._busy = False


def placement_app(connection: str = "sqlite://", tuning: Tuning = Tuning()) -> WSGIApp:
    """Placement's WSGI application on ``connection``, built on the first call only.

    ``sqlite://`` keeps everything in memory. Asking for another connection or other
    options later in the same process is an error: Placement's configuration and
    database layer are the process's.
    """
    global _app
    with _lock:
        if _app is None:
            _app = (connection, tuning, _load(connection, tuning))
        elif _app[:2] != (connection, tuning):
            raise RuntimeError(
                f"Placement already runs in this process on {_app[0]!r} with {_app[1]}; "
                f"it cannot also run on {connection!r} with {tuning}."
            )
        return _app[2]


def placement_engine() -> Any:
    """The SQLAlchemy engine of the in-process Placement (after :func:`placement_app`)."""
    from placement import db_api

    return db_api.get_placement_engine()


class WSGITransport(BaseAdapter):
    """A ``requests`` transport that hands each request to a WSGI application."""

    def __init__(self, app: WSGIApp) -> None:
        super().__init__()
        self.app = app

    def send(  # type: ignore[override]
        self, request: requests.PreparedRequest, **kwargs: Any
    ) -> requests.Response:
        parts = urlsplit(request.url or "")
        body = request.body or b""
        if isinstance(body, str):
            body = body.encode()
        wsgi_request = webob.Request.blank(
            parts.path + (f"?{parts.query}" if parts.query else ""),
            method=request.method,
            headers=dict(request.headers),
            body=body,
            base_url=f"{parts.scheme}://{parts.netloc}",
        )
        answer = wsgi_request.get_response(self.app)
        return self._response(request, answer)

    @staticmethod
    def _response(request: requests.PreparedRequest, answer: Any) -> requests.Response:
        response = requests.Response()
        response.status_code = answer.status_code
        response.reason = answer.status.partition(" ")[2]
        response.headers = CaseInsensitiveDict(answer.headerlist)
        response.raw = io.BytesIO(answer.body)  # what ``content`` reads, as from a socket
        response.url = request.url or ""
        response.request = request
        response.encoding = answer.charset
        return response

    def close(self) -> None:
        """Nothing to release: no socket was opened."""


def direct_adapter(
    app: WSGIApp, *, endpoint: str = DIRECT_ENDPOINT, token: str = ADMIN_TOKEN
) -> adapter.Adapter:
    """A keystoneauth1 Adapter for the ``placement`` service answered by ``app``."""
    transport = requests.Session()
    # No socket, so no proxy and no netrc: without this, each request reads the
    # environment's proxy settings and stats ~/.netrc (a syscall that gives the GIL away).
    transport.trust_env = False
    transport.mount(endpoint, WSGITransport(app))
    ks_session = session.Session(auth=token_endpoint.Token(endpoint, token), session=transport)
    # Placement's noauth2 takes the caller's roles from X-Roles: Acceleron calls as a
    # service would (the reshaper is for services alone), and with the admin's.
    return adapter.Adapter(
        ks_session, service_type="placement", raise_exc=False, additional_headers=ROLES
    )
