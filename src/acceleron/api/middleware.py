"""The one ASGI middleware: request ids, microversion negotiation, body sizes, stalled
clients, access log.

Written against raw ASGI (not Starlette's BaseHTTPMiddleware) because it runs
on every request and must stay cheap.

A client that stops sending its request body, or stops reading the answer, for
``[api] client_timeout`` seconds is cut off: the body's reader gets 408, and an
answer being sent is abandoned (the connection closes). Nothing waits on a stalled
client for longer.

Every request body has a limit, whatever its route, method and Content-Type, and
nothing reads a byte of it past that limit: ``[oslo_middleware] max_request_body_size``
(oslo's sizelimit, as every OpenStack API service) unless the route has its own for
the body's media type (``BodyLimits.own``: a host report's JSON, a bitstream upload's
``application/octet-stream``; any other media type there has the ordinary limit). A
larger Content-Length is answered 413 before anything else happens, and a body sent
without one (chunked) is cut with 413 once it grows past the limit, whoever reads it
(a handler, FastAPI, the JSON checks of ``api.common``, the embedded Placement).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import re
import time

from prometheus_client import Counter, Histogram
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from acceleron import logs, metrics, microversion
from acceleron.api import errors, overrides

ACCESS_LOG = logging.getLogger("acceleron.api.access")

_VERSION_HEADERS = [
    (microversion.MIN_HEADER.encode(), str(microversion.MIN_VERSION).encode()),
    (microversion.MAX_HEADER.encode(), str(microversion.MAX_VERSION).encode()),
    (b"vary", microversion.HEADER.encode()),
]
_HEADER_KEY = microversion.HEADER.lower().encode()


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def is_versioned(path: str) -> bool:
    return path == "/v2" or path.startswith("/v2/")


@dataclasses.dataclass(frozen=True)
class Limit:
    """At most ``size`` bytes of body, as ``option`` says; ``message``: the refusal's
    own words (else it names the size and the option)."""

    size: int
    option: str
    message: str | None = None

    def refusal(self, what: str) -> HTTPException:
        return HTTPException(
            413,
            self.message
            or f"The request body is too large: {what}, at most {self.size} are taken "
            f"({self.option}).",
        )


def media_type(scope: Scope) -> str | None:
    """The request's Content-Type without its parameters, in lower case; None if none."""
    value = _header(scope, b"content-type")
    return None if value is None else value.split(";")[0].strip().lower()


@dataclasses.dataclass(frozen=True)
class OwnLimit:
    """A route's own limit, for bodies of one media type."""

    method: str
    pattern: re.Pattern[str]
    media_type: str
    limit: Limit


@dataclasses.dataclass(frozen=True)
class BodyLimits:
    """The limit of every request body, and the routes that have their own for a media
    type."""

    default: Limit
    own: tuple[OwnLimit, ...] = ()

    @classmethod
    def of(cls, default: Limit, own: dict[tuple[str, str, str], Limit]) -> BodyLimits:
        """``own`` maps (method, route path such as ``/v2/hosts/{hostname}/report``,
        media type such as ``application/json``) to that route's limit for a body of
        that media type."""
        routes = tuple(
            OwnLimit(method, compile_path(path)[0], media, limit)
            for (method, path, media), limit in own.items()
        )
        return cls(default, routes)

    def limit(self, scope: Scope) -> Limit:
        method, path = scope["method"], scope["path"]
        for own in self.own:
            matched = method == own.method and own.pattern.match(path)
            if matched and media_type(scope) == own.media_type:
                return own.limit
        return self.default


def _content_length(scope: Scope) -> int | None:
    value = _header(scope, b"content-length")
    return int(value) if value is not None and value.strip().isdigit() else None


class ClientStalled(Exception):
    """The client read nothing of the answer for ``[api] client_timeout`` seconds."""


def _patient(receive: Receive, send: Send, timeout: float, limit: Limit) -> tuple[Receive, Send]:
    """``receive`` and ``send`` that give up on a client stalled for ``timeout`` seconds:
    while the request body is still coming, and while each piece of the answer goes;
    and a ``receive`` that refuses (413) a body that grows past ``limit``."""
    body_done = False
    received = 0

    async def receive_body() -> Message:
        nonlocal body_done
        if body_done:  # only a disconnect may come now: wait for it as long as it takes
            return await receive()
        try:  # asyncio.timeout, unlike wait_for, makes no task of its own: cheaper
            async with asyncio.timeout(timeout):
                message = await receive()
        except TimeoutError:
            raise HTTPException(
                408,
                f"The request body stalled: nothing came for {timeout:g} s ([api] client_timeout).",
            ) from None
        body_done = message["type"] != "http.request" or not message.get("more_body")
        if message["type"] == "http.request":
            nonlocal received
            received += len(message.get("body", b""))
            if received > limit.size:
                raise limit.refusal(f"more than {limit.size} bytes came")
        return message

    async def send_answer(message: Message) -> None:
        if message["type"] != "http.response.body":
            await send(message)
            return
        try:
            async with asyncio.timeout(timeout):
                await send(message)
        except TimeoutError:
            raise ClientStalled() from None

    return receive_body, send_answer


DEFAULT_LIMITS = BodyLimits(Limit(114_688, "[oslo_middleware] max_request_body_size"))


class ApiMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        client_timeout: float = 30.0,
        body_limits: BodyLimits = DEFAULT_LIMITS,
    ) -> None:
        self.app = app
        self.client_timeout = client_timeout
        self.body_limits = body_limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = new_request_id()
        token = logs.begin(request_id, _header(scope, b"x-openstack-request-id"))
        app_token = overrides.serving(scope)
        limit = self.body_limits.limit(scope)
        receive, send = _patient(receive, send, self.client_timeout, limit)
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        extra = [(b"x-openstack-request-id", request_id.encode())]
        status = 500
        started = time.perf_counter()

        started_answer = False

        async def send_with_headers(message: Message) -> None:
            nonlocal status, started_answer
            if message["type"] == "http.response.start":
                status = message["status"]
                started_answer = True
                message["headers"] = [*message.get("headers", ()), *extra]
            await send(message)

        try:
            length = _content_length(scope)
            if length is not None and length > limit.size:
                refused = limit.refusal(f"{length} bytes (Content-Length)")
                response = errors.error_response(413, refused.detail, None, request_id)
                await response(scope, receive, send_with_headers)
                return
            if is_versioned(scope["path"]):
                try:
                    version = microversion.negotiate(_header(scope, _HEADER_KEY))
                except microversion.NotAcceptable as error:
                    extra.extend(_VERSION_HEADERS)
                    response = errors.error_response(406, str(error), None, request_id)
                    await response(scope, receive, send_with_headers)
                    return
                state["api_version"] = version
                extra.append((_HEADER_KEY, f"{microversion.SERVICE_TYPE} {version}".encode()))
                extra.extend(_VERSION_HEADERS)
            try:
                await self.app(scope, receive, send_with_headers)
            except (ClientStalled, asyncio.CancelledError):
                raise
            except Exception:
                if started_answer:  # too late for an answer of its own
                    raise
                # Here, not in Starlette's outermost handler: the line names the request
                # and its caller, and the answer carries the request id.
                response = errors.unexpected(scope["method"], scope["path"], request_id)
                await response(scope, receive, send_with_headers)
        except ClientStalled:
            ACCESS_LOG.warning(
                "The client stopped reading the answer for %g s: cut off", self.client_timeout
            )
        finally:
            seconds = time.perf_counter() - started
            _count(scope, status, seconds)
            _log_access(scope, status, seconds)
            logs.end(token)
            overrides.done(app_token)


_VERSION_4 = (0x4 << 76) | (0x2 << 62)  # RFC 9562's version (4) and variant bits
_NOT_VERSION = ~((0xF << 76) | (0x3 << 62))


def new_request_id() -> str:
    """A request id as OpenStack services make them, ``req-<random uuid4>``. Drawn from
    ``random``, not the system's randomness: an id names a request and guards nothing,
    and ``uuid4`` costs a system call each (docs/benchmarks.md, "What the shortcuts
    save"; Python seeds the generator afresh in a forked process)."""
    h = f"{random.getrandbits(128) & _NOT_VERSION | _VERSION_4:032x}"
    return f"req-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def routine(request: Request) -> None:
    """Log this request's access line at DEBUG: an agent's poll that found no work, a
    report that changed nothing. They come every few seconds from every host, and ask
    nothing of an operator."""
    request.state.routine = True


def route_of(scope: Scope) -> str:
    """The route template that answered (``/v2/accelerator_requests/{uuid}``), so that
    the metrics' labels stay few: the embedded Placement is one, an unknown path another."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    if scope["path"].startswith("/placement"):
        return "/placement"
    return "unmatched"


# The metrics' children by (route, method, status), as ``labels`` gives them: finding
# one afresh checked and joined the labels under a lock, twice a request. Few: routes
# are templates, and an unknown path is one.
_COUNTED: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}


def _count(scope: Scope, status: int, seconds: float) -> None:
    key = (route_of(scope), scope["method"], status)
    children = _COUNTED.get(key)
    if children is None:
        route, method = key[0], key[1]
        children = _COUNTED[key] = (
            metrics.REQUESTS.labels(route, method, str(status)),
            metrics.REQUEST_SECONDS.labels(route, method),
        )
    children[0].inc()
    children[1].observe(seconds)


def _log_access(scope: Scope, status: int, seconds: float) -> None:
    level = logging.DEBUG if scope["state"].get("routine") else logging.INFO
    if not ACCESS_LOG.isEnabledFor(level):
        return
    query = scope.get("query_string", b"")
    path = scope["path"] + ("?" + query.decode("latin-1") if query else "")
    client = scope.get("client") or ("-", 0)
    args = (client[0], scope["method"], path, status, seconds * 1000)
    # The record made here, not by ``log``, which looks the caller up in the stack
    # first: every request pays for one, and the line's caller is always this one.
    record = ACCESS_LOG.makeRecord(
        ACCESS_LOG.name, level, __file__, 0, _ACCESS_LINE, args, None, "_log_access"
    )
    ACCESS_LOG.handle(record)


_ACCESS_LINE = '%s "%s %s" %d %.1fms'
