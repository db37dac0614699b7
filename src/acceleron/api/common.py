"""What every handler uses: typed dependencies and the JSON response helpers."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import uuid as uuidlib
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import orjson
from fastapi import Depends, Request
from fastapi.params import Depends as DependsParam
from starlette.exceptions import HTTPException
from starlette.responses import Response

from acceleron.api import microversion
from acceleron.api.capacity import Threads, is_service
from acceleron.api.policy import Policy
from acceleron.bitstreams.base import BitstreamStore
from acceleron.context import RequestContext
from acceleron.db.session import Database
from acceleron.exceptions import InvalidInput

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

    def authorize(self, rule: str, target: dict[str, object] | None = None) -> None:
        self.policy.authorize(rule, self.context, target)

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

    async def run_blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(db, *args)`` on the outbound threads whatever the backend: for service
        calls that may wait on another service (Glance, as the bitstream store)."""
        return await self.threads.outbound(fn, self.db, *args)

    async def outbound(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the outbound threads: the bitstream store, Placement."""
        return await self.threads.outbound(fn, *args)

    @property
    def threads(self) -> Threads:
        threads: Threads = self.request.app.state.threads
        return threads

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

            state.bitstreams = from_conf(state.conf, state.db)
        store: BitstreamStore = state.bitstreams
        return store


# A \u escape of a UTF-16 surrogate: the only way a JSON text can name one.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


async def _check_characters(request: Request) -> None:
    """Refuse a JSON body whose strings hold a lone UTF-16 surrogate ("\\ud800"): JSON
    can write one, but it is no character, and no database or JSON encoder takes it.
    (A pair of them writes one character beyond U+FFFF, which is fine.)"""
    if request.method not in ("POST", "PUT", "PATCH"):
        return
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        return
    body = await request.body()  # read and cached already: FastAPI parsed it
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


async def _call(request: Request) -> Call:
    state = request.app.state
    await _check_characters(request)
    return Call(
        request=request,
        context=await state.auth.context(request),
        version=request.state.api_version,
        db=state.db,
        policy=state.policy,
    )


# One dependency per handler: FastAPI's dependency solving costs per dependency.
CallDep = Annotated[Call, Depends(_call)]


def requires(version: microversion.Version, what: str, status_code: int = 404) -> DependsParam:
    """A route (or router) dependency: the route exists from microversion ``version``
    on; an older request is answered ``status_code`` saying that ``what`` needs it.
    It runs before the body is read and before policy: below its version the route
    is not there. Use as ``dependencies=[requires(V2_7, "The bitstreams API")]``."""
    message = microversion.needs(what, version)

    async def check(request: Request) -> None:
        if request.state.api_version < version:
            raise HTTPException(status_code, message)

    return DependsParam(check)


def base_url(request: Request) -> str:
    """Where clients reach the API: ``[api] public_endpoint`` or the request's own URL."""
    configured: str | None = request.app.state.conf.api.public_endpoint
    return (configured or str(request.base_url)).rstrip("/")


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


def same_uuid(a: str, b: str) -> bool:
    """Whether two spellings name one uuid (or, not being uuids, are equal)."""
    try:
        return uuidlib.UUID(a) == uuidlib.UUID(b)
    except ValueError:
        return a == b
