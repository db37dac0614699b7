"""The API application: routers, error mapping, auth and policy, in one factory."""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from types import FrameType
from typing import Any

import uvicorn
from fastapi import FastAPI
from fastapi.routing import APIRoute
from oslo_config import cfg
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.types import Message, Receive, Scope, Send

import acceleron
from acceleron import metrics
from acceleron.api import (
    arqs,
    attributes,
    auth,
    bitstreams,
    claims,
    common,
    deployables,
    device_profiles,
    devices,
    errors,
    hosts,
    policy,
    quotas,
    tasks,
    ui,
    versions,
    wakeup,
    workers,
)
from acceleron.api import placement as placement_api
from acceleron.api.capacity import Threads, UploadSlots
from acceleron.api.middleware import ApiMiddleware, BodyLimits, Limit
from acceleron.api.policy import Policy
from acceleron.api.services import Services, services
from acceleron.db import migrate
from acceleron.db import session as db_session
from acceleron.placement import inprocess
from acceleron.service import nova
from acceleron.service import quotas as quota_service
from acceleron.service.nova import NovaNotifier
from acceleron.service.placement import PlacementService

LOG = logging.getLogger(__name__)

DESCRIPTION = """\
Acceleron's REST API: the OpenStack accelerator v2 API (device profiles,
accelerator requests, devices, deployables) plus Acceleron's additions, each
behind a microversion. Send `OpenStack-API-Version: accelerator 2.x`; no
header means 2.0.
"""


# How every server of the API runs uvicorn: logging is Acceleron's own (its access line
# names the request and its caller), and no Server header names the software.
UVICORN_OPTIONS: dict[str, Any] = {"log_config": None, "access_log": False, "server_header": False}


# The routers, in the order their routes are matched (a request is matched against
# each route before its own, at a cost per route): the profiles' (the API whose rate is
# measured against upstream Cyborg's, docs/benchmarks.md), then Nova's and the agents'
# hot paths.
ROUTERS = (
    device_profiles.router,
    versions.router,
    arqs.router,
    tasks.router,
    claims.router,
    hosts.router,
    devices.router,
    deployables.router,
    deployables.spec003_router,
    attributes.router,
    placement_api.router,
    bitstreams.router,
    quotas.router,
    ui.router,
)


def _add_routes(app: FastAPI) -> None:
    """Every router's routes, in the app's own router, in order. FastAPI's
    ``include_router`` keeps each router whole and matches a request through it: every
    router before the one that answers is scanned, and that one twice (its cost:
    docs/benchmarks.md, "What the shortcuts save"). A router's routes already carry its
    prefix, tags, responses and dependencies (``APIRouter.add_api_route``), and none has
    a lifespan of its own;
    what overrides their dependencies is the serving app's ``dependency_overrides``
    (``api.overrides``: each router names it). FastAPI's own routes
    (``/openapi.json``, ``/docs``) come after them: each request is matched against the
    routes in order."""
    framework = list(app.router.routes)
    app.router.routes[:] = [route for router in ROUTERS for route in router.routes]
    app.router.routes.extend(framework)


def create_app(
    conf: cfg.ConfigOpts,
    db: db_session.Database | None = None,
    check_schema: bool = True,
    *,
    settle: bool = False,
) -> FastAPI:
    """The API's app. ``settle``: once started, what the start built is frozen out of the
    garbage collector's passes (``settle_heap``), for a server process (not a test's
    app: its objects would outlive it)."""
    database = db or db_session.from_conf(conf)
    placement = None if conf.placement.mode == "disabled" else PlacementService(conf, database)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if check_schema:
            migrate.check(database)
        service: PlacementService | None = app.state.placement
        if service is not None and service.mode == "embedded":  # load it beside the start
            threading.Thread(
                target=service.embedded_app, name="placement-load", daemon=True
            ).start()
        async with workers.running(app, service, conf):
            if settle:
                threading.Thread(
                    target=settle_heap,
                    args=(service, app.state.settled),
                    name="settle-heap",
                    daemon=True,
                ).start()
            yield
        if db is None:
            database.dispose()

    app = FastAPI(
        title="Acceleron API",
        version=acceleron.__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        redoc_url=None,
        # FastAPI's own OpenTelemetry layer asks OpenTelemetry for its three global
        # providers at every request; Acceleron's metrics are its Prometheus ones
        # (GET /metrics), and nothing here sets an OpenTelemetry provider up.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    parts = app.state.services = Services(
        conf=conf,
        db=database,
        policy=Policy(conf),
        auth=auth.from_conf(conf),
        nova=NovaNotifier(lambda: nova.adapter_from_conf(conf)),
        limits=quota_service.from_conf(conf),
        threads=Threads.from_conf(conf),
        uploads=UploadSlots(conf.bitstreams.max_uploads_per_project),
        task_wakeup=wakeup.TaskWakeup(database, conf.api.task_wakeup),
        stopping=threading.Event(),
    )
    # What is built on first use, or swapped while the app runs (a test's Placement).
    app.state.placement = placement
    app.state.sync_worker = None  # workers.SyncWorker, from the start (lifespan)
    app.state.bitstreams = None  # built on first use: common.Call.bitstreams
    app.state.reconciler = None  # built on first use: placement_api.reconciler_of
    app.state.claims_recovered = None  # the claims recovered at the start, once done
    app.state.metrics_refreshes = 0
    app.state.settled = threading.Event()  # set once settle_heap has run
    errors.install(app)
    _add_routes(app)
    if conf.metrics.enabled:
        app.add_route("/metrics", serve_metrics, ["GET"], include_in_schema=False)
    if placement is not None and placement.mode == "embedded":
        app.mount("/placement", EmbeddedPlacement(placement, parts.auth, parts.policy))
    check_policy(app)
    app.add_middleware(
        ApiMiddleware, client_timeout=conf.api.client_timeout, body_limits=body_limits(conf)
    )
    return app


def check_policy(app: FastAPI) -> None:
    """Refuse (``policy.UnguardedRoute``) an app with a route no policy rule guards: each
    route names its rule and checks it (``CallDep``), or is public
    (``policy.PUBLIC_ROUTES``); the embedded Placement admits its callers itself."""
    for route in app.routes:
        if isinstance(route, Mount) and isinstance(route.app, EmbeddedPlacement):
            continue
        if not isinstance(route, Route):  # an APIRoute is one too
            raise policy.UnguardedRoute(f"No policy rule can guard the route {route!r}.")
        checks = isinstance(route, APIRoute) and common.checks_its_rule(route.dependant)
        methods = route.methods or {"*"}  # every method: no rule names "*"
        for method in sorted(methods - {"HEAD"} if "GET" in methods else methods):
            policy.check_route(method, route.path, checks)  # HEAD is served as the GET


def body_limits(conf: cfg.ConfigOpts) -> BodyLimits:
    """oslo's limit on every request body, but for a host report's JSON (larger) and a
    bitstream upload's bytes (``application/octet-stream``, [bitstreams] max_size_mb):
    any other media type on those routes has oslo's limit too."""
    return BodyLimits.of(
        Limit(
            conf.oslo_middleware.max_request_body_size, "[oslo_middleware] max_request_body_size"
        ),
        {
            ("PUT", "/v2/hosts/{hostname}/report", "application/json"): Limit(
                conf.api.max_host_report_size, "[api] max_host_report_size"
            ),
            ("PUT", "/v2/bitstreams/{uuid}/data", bitstreams.OCTET_STREAM): bitstreams.upload_limit(
                conf
            ),
        },
    )


async def serve_metrics(request: Request) -> Response:
    """Prometheus' scrape: the values in memory (or the workers' files), no query."""
    return Response(metrics.exposition(), media_type=metrics.CONTENT_TYPE)


def settle_heap(placement: PlacementService | None, settled: threading.Event) -> None:
    """What the start built stays for the process's life (modules, the configuration, the
    routes, the embedded Placement): collected once, then moved out of the garbage
    collector's passes (``gc.freeze``). A full collection then scans what requests made
    alone, instead of every object of the all-in-one, which held the event loop every
    few seconds under load (docs/benchmarks.md, "What the shortcuts save"). Sets
    ``settled``."""
    if placement is not None and placement.mode == "embedded":
        # Loaded beside the start: wait for it (a failed load is the requests' to report).
        with contextlib.suppress(Exception):
            placement.embedded_app()
    gc.collect()
    gc.freeze()
    settled.set()


class Server(uvicorn.Server):
    """uvicorn's server that, as soon as it is asked to stop, tells the app (agents' long
    polls for work end at once instead of holding the shutdown) and calls ``on_stop``."""

    def __init__(
        self, config: uvicorn.Config, app: FastAPI, on_stop: Sequence[Callable[[], None]] = ()
    ) -> None:
        super().__init__(config)
        self._app = app
        self._on_stop = on_stop

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        parts = services(self._app)
        parts.stopping.set()
        parts.task_wakeup.wake_all()
        for stop in self._on_stop:
            stop()
        super().handle_exit(sig, frame)


class EmbeddedPlacement:
    """The embedded Placement's WSGI app under ``/placement`` (built on first use).

    Placement itself runs with ``noauth2`` (the token ``admin`` is its admin). Under
    ``auth_strategy = keystone`` that token is not taken from outside: a request needs
    a valid Keystone token that the policy rule ``acceleron:placement:embedded`` allows
    (by default the admin or service role, what Placement's own default policy asks of
    most of its API), which is then exchanged for Placement's own."""

    RULE = "placement:embedded"

    def __init__(
        self, service: PlacementService, authenticator: auth.Authenticator, rules: Policy
    ) -> None:
        self._service = service
        self._keystone = isinstance(authenticator, auth.KeystoneAuth)
        self._auth = authenticator
        self._policy = rules
        self._app: Any = None  # a2wsgi's WSGIMiddleware, an ASGI app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._keystone and scope["type"] == "http" and not _is_root(scope):
            scope = await self._admit(scope)
        if scope["type"] == "http":  # read whole here: past its limit, a 413 (not a 500)
            receive = await _read_whole(receive)
        if self._app is None:
            from a2wsgi import WSGIMiddleware

            wsgi: Any = await run_in_threadpool(self._service.embedded_app)
            self._app = WSGIMiddleware(wsgi)
        await self._app(scope, receive, send)

    async def _admit(self, scope: Scope) -> Scope:
        context = await self._auth.context(Request(scope))
        why = " The embedded Placement takes the tokens this rule allows (admin, service)."
        self._policy.authorize(self.RULE, context, why=why)
        kept = [
            (k, v) for k, v in scope["headers"] if k not in (b"x-auth-token", b"x-service-token")
        ]
        return {**scope, "headers": [*kept, (b"x-auth-token", inprocess.ADMIN_TOKEN.encode())]}


async def _read_whole(receive: Receive) -> Receive:
    """The request body read now (the middleware refuses it with 413 past its limit, which
    a WSGI app reading it in a thread could only turn into a 500), then given again."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return receive
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    whole: list[Message] = [{"type": "http.request", "body": b"".join(chunks)}]

    async def again() -> Message:
        return whole.pop() if whole else await receive()

    return again


def _is_root(scope: Scope) -> bool:
    """A mounted app's root (Placement's version document needs no token)."""
    return scope["path"].removeprefix(scope.get("root_path", "")) in ("", "/")


def from_environment() -> FastAPI:
    """The app for uvicorn worker processes: config files from ACCELERON_CONFIG_FILES."""
    import json
    import os

    from acceleron import conf as confmod
    from acceleron import logs

    files = json.loads(os.environ.get("ACCELERON_CONFIG_FILES", "null"))
    conf = confmod.load([], config_files=files)
    logs.setup(conf, "acceleron-api", warn_unknown=False)  # the parent process warned
    return create_app(conf, settle=True)
