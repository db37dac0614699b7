"""What every handler uses: typed dependencies and the JSON response helpers.

``CallDep``, the one dependency of every handler, admits a request in this order:
who calls (authentication), whether the route's policy rule lets them
(``policy.rule_of``; a route without one is refused, and the app does not start with
one: ``policy.check_route``), and whether a JSON body holds a lone surrogate. FastAPI
then validates the path parameters and the body against the handler's types, once,
after every dependency: a caller the policy refuses learns nothing of the schema. Every
list and mapping of a body stops at its first error (``acceleron.failfast``), so a body
of many wrong items (50,000 of them fit in ``[oslo_middleware] max_request_body_size``)
costs one error, not 50,000: pydantic's validation holds the GIL however it is run, so
the only way to keep it from stalling the event loop is to make it short.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import orjson
from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant
from fastapi.params import Depends as DependsParam
from starlette.exceptions import HTTPException
from starlette.responses import Response

from acceleron import microversion
from acceleron.api.capacity import Threads, is_service
from acceleron.api.policy import Policy, rule_of
from acceleron.api.services import Services, services
from acceleron.bitstreams.base import BitstreamStore
from acceleron.context import RequestContext
from acceleron.db.session import Database
from acceleron.exceptions import Forbidden, InvalidInput
from acceleron.service.placement import PlacementService

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Call:
    """What a handler knows about the request it serves: who calls, at which
    microversion, and the database and policy to serve it with."""

    request: Request
    context: RequestContext
    version: microversion.Version
    db: Database
    policy: Policy

    def authorize(self, rule: str, target: dict[str, object] | None = None, why: str = "") -> None:
        self.policy.authorize(rule, self.context, target, why)

    def allows(self, rule: str, target: dict[str, object] | None = None) -> bool:
        return self.policy.allows(rule, self.context, target)

    def scoped(self, rule: str) -> RequestContext:
        """The caller's context, scoped to every project if ``rule`` lets it (the
        ``all_projects`` the service layer scopes its look-ups by)."""
        return dataclasses.replace(self.context, all_projects=self.allows(rule))

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(db, *args)``, a service function, from an async handler.

        On SQLite it runs inline. The API process is the embedded mode's only
        writer (agents report over HTTP), so nothing waits for a lock or a network,
        and under the GIL a thread hand-off would only add cost (it halved create
        throughput). On PostgreSQL and MariaDB it runs on the threads kept for
        database work (``capacity.DatabaseThreads``: nothing slow ever holds one, and
        a share waits for agents and Nova), so the event loop keeps serving while the
        database answers.
        """
        if self.db.backend == "sqlite":
            return fn(self.db, *args)
        return await self.threads.database(is_service(self.context), fn, self.db, *args)

    async def run_counted(self, fn: Callable[..., T], *args: Any, store: bool = False) -> T:
        """``fn(db, *args)`` for a service call that counts against the limits (and,
        with ``store``, looks bitstreams up): on the outbound threads when the limits
        come from Keystone (``Services.counting_waits``), else as ``run`` (or
        ``run_with_store``)."""
        if self.services.counting_waits:
            return await self.run_blocking(fn, *args)
        if store:
            return await self.run_with_store(fn, *args)
        return await self.run(fn, *args)

    async def run_blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(db, *args)`` on the outbound threads whatever the backend: for service
        calls that may wait on another service (Glance, as the bitstream store)."""
        return await self.threads.outbound(fn, self.db, *args)

    async def outbound(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the outbound threads: the bitstream store, Placement."""
        return await self.threads.outbound(fn, *args)

    @property
    def services(self) -> Services:
        """The app's parts (``api.services``)."""
        return services(self.request.app)

    @property
    def placement(self) -> PlacementService | None:
        """The Placement sync's service; None when Placement is disabled. On
        ``app.state``, not in ``services``: a test may put its own there."""
        found: PlacementService | None = self.request.app.state.placement
        return found

    @property
    def threads(self) -> Threads:
        return self.services.threads

    async def run_with_store(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(db, *args)`` for a service call that looks bitstreams up: inline like
        ``run`` with the local store, in the thread pool with Glance."""
        if self.bitstreams.backend == "local":
            return await self.run(fn, *args)
        return await self.run_blocking(fn, *args)

    @property
    def base_url(self) -> str:
        return base_url(self.request)

    @property
    def bitstreams(self) -> BitstreamStore:
        """The configured bitstream store, built on first use (a misconfigured Glance fails
        the requests that need it, not the API's start)."""
        state = self.request.app.state
        if state.bitstreams is None:
            from acceleron.bitstreams.factory import from_conf

            state.bitstreams = from_conf(self.services.conf, self.services.db)
        store: BitstreamStore = state.bitstreams
        return store


# A \u escape of a UTF-16 surrogate: the only way a JSON text can name one.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _is_json(request: Request) -> bool:
    """Whether FastAPI took the body for JSON (and parsed it, before any dependency)."""
    if request.method not in ("POST", "PUT", "PATCH"):
        return False
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


async def _check_characters(body: bytes) -> None:
    """Refuse a JSON body whose strings hold a lone UTF-16 surrogate ("\\ud800"): JSON
    can write one, but it is no character, and no database or JSON encoder takes it.
    (A pair of them writes one character beyond U+FFFF, which is fine.)"""
    if not _SURROGATE_ESCAPE.search(body):
        return
    try:
        json.dumps(json.loads(body), ensure_ascii=False).encode()
    except UnicodeEncodeError:
        raise InvalidInput(
            "The JSON body holds a lone UTF-16 surrogate (a \\ud800 to \\udfff escape "
            "without its pair), which is not a character; send text as valid Unicode."
        ) from None
    except ValueError:
        return  # not JSON: FastAPI has answered that already


async def _check_characters_of(request: Request) -> None:
    """A JSON body's characters (``_check_characters``); FastAPI read and parsed the body
    before any dependency ran, and validates it against the route's schema after them."""
    if not _is_json(request):
        return
    body = await request.body()
    if body:
        await _check_characters(body)


async def _call(request: Request) -> Call:
    parts = services(request.app)
    call = Call(
        request=request,
        context=await parts.auth.context(request),
        version=request.state.api_version,
        db=parts.db,
        policy=parts.policy,
    )
    path = getattr(request.scope.get("route"), "path", "")
    rule = rule_of(request.method, path)
    if rule is None:  # the app does not start with such a route (policy.check_route)
        raise Forbidden(f"No policy rule guards {request.method} {path}.")
    call.authorize(rule)  # before the body: a refused caller learns nothing of its schema
    await _check_characters_of(request)
    return call


def checks_its_rule(dependant: Dependant) -> bool:
    """Whether a route's handler (its FastAPI ``dependant``) takes ``CallDep``, which
    checks the route's policy rule before anything else."""
    return any(sub.call is _call or checks_its_rule(sub) for sub in dependant.dependencies)


# One dependency per handler: FastAPI's dependency solving costs per dependency.
CallDep = Annotated[Call, Depends(_call)]


@dataclasses.dataclass(frozen=True)
class Requires:
    """A route's guard (made by :func:`requires`): the route exists from microversion
    ``version`` on; an older request is answered ``status_code`` saying that ``what``
    needs it. Its fields tell whoever reads the app's routes which version each needs
    (the guards' test)."""

    version: microversion.Version
    what: str
    status_code: int = 404

    @property
    def message(self) -> str:
        return microversion.needs(self.what, self.version)

    async def __call__(self, request: Request) -> None:
        if request.state.api_version < self.version:
            raise HTTPException(self.status_code, self.message)


def requires(version: microversion.Version, what: str, status_code: int = 404) -> DependsParam:
    """A route (or router) dependency: the route exists from microversion ``version``
    on; an older request is answered ``status_code`` saying that ``what`` needs it.
    It runs before policy and before the body is validated: below its version the route
    is not there. Use as ``dependencies=[requires(V2_7, "The bitstreams API")]``."""
    return DependsParam(Requires(version, what, status_code))


def base_url(request: Request) -> str:
    """Where clients reach the API: ``[api] public_endpoint`` or the request's own URL."""
    configured = services(request.app).public_endpoint
    return (configured or _own_base_url(request)).rstrip("/")


_BASE_URLS: dict[tuple[object, ...], str] = {}


def _own_base_url(request: Request) -> str:
    """Starlette's ``request.base_url``, kept by what it is made of (the scheme, the Host
    header, the server's address, the root path): it copies the scope and parses a URL
    at each request, a fiftieth of a show. At most 256 kept (the Host header is the
    client's)."""
    scope = request.scope
    host = next((v for k, v in scope["headers"] if k == b"host"), None)
    server = scope.get("server")
    key = (scope.get("scheme"), host, server and tuple(server), scope.get("root_path"),
           scope.get("app_root_path"))  # fmt: skip
    found = _BASE_URLS.get(key)
    if found is None:
        if len(_BASE_URLS) >= 256:
            _BASE_URLS.clear()
        found = _BASE_URLS[key] = str(request.base_url)
    return found


def timestamp(value: dt.datetime | None) -> str | None:
    return None if value is None else value.replace(tzinfo=dt.UTC).isoformat()


def json_response(
    data: Any, status_code: int = 200, headers: dict[str, str] | None = None
) -> Response:
    return Response(
        orjson.dumps(data), status_code=status_code, media_type="application/json", headers=headers
    )


def split_list(value: str | None) -> list[str] | None:
    """``a,b,,c`` -> ``["a", "b", "c"]``; None stays None."""
    if value is None:
        return None
    return [item for item in (part.strip() for part in value.split(",")) if item]
