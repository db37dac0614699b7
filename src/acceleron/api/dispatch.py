"""How a request reaches its handler: for routes of the shape every Acceleron handler
has, without FastAPI's per-request machinery.

FastAPI serves each request through its dependency solver: it walks the handler's
parameters, caches each dependency's answer, validates the JSON body a second time
(``common._check_body`` has validated it, failing fast) and builds a context for its
telemetry: a sixth of a device profile create's CPU. A route whose handler takes only
path parameters typed ``str``, dependencies that take only the request (``CallDep``, the
``requires`` guards) and at most one JSON body, and answers a ``Response``, is served
here instead: the guards and dependencies in FastAPI's order, the body as
``common.checked_body`` validated it once. FastAPI still builds the route and its
OpenAPI description from the same handler, and still serves any other route, and any
request whose body is not JSON (``Content-Type: application/json`` with a length):
FastAPI's own rules and errors hold for those.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import typing
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import request_response
from starlette.types import Receive, Scope, Send

from acceleron.api.common import checked_body

Dependency = Callable[[Request], Awaitable[Any]]


@dataclasses.dataclass(frozen=True)
class Shape:
    """What a route's handler takes: its dependencies in FastAPI's order (each with the
    parameter it fills, or None for a guard), its path parameters and its body's."""

    endpoint: Callable[..., Awaitable[Response]]
    dependencies: tuple[tuple[str | None, Dependency], ...]
    path_params: tuple[str, ...]
    body: str | None


def shape_of(route: APIRoute) -> Shape | None:
    """The route's shape, or None where FastAPI's machinery is needed."""
    found = route.dependant
    if (
        _takes_more_than_its_parameters(found)
        or found.request_param_name
        or found.query_params
        or len(found.body_params) > 1
        or (getattr(route, "_embed_body_fields", True) and found.body_params)
        or getattr(route, "max_body_size", None) is not None
        or route.dependency_overrides_provider is not None
        or not inspect.iscoroutinefunction(found.call)
        or not _answers_a_response(found.call)
        or any(field.field_info.annotation is not str for field in found.path_params)
    ):
        return None
    dependencies: list[tuple[str | None, Dependency]] = []
    for sub in found.dependencies:
        if (
            sub.request_param_name is None
            or _takes_more_than_its_parameters(sub)
            or sub.dependencies
            or sub.path_params
            or sub.query_params
            or sub.body_params
            or not _is_async(sub.call)
        ):
            return None  # it takes more than the request
        dependencies.append((sub.name, typing.cast(Dependency, sub.call)))
    return Shape(
        endpoint=found.call,
        dependencies=tuple(dependencies),
        path_params=tuple(field.name for field in found.path_params),
        body=found.body_params[0].name if found.body_params else None,
    )


def _takes_more_than_its_parameters(found: Dependant) -> bool:
    """Whether it takes headers, cookies or what FastAPI hands in besides the request
    (the response, background tasks, a websocket, security scopes)."""
    return bool(
        found.header_params
        or found.cookie_params
        or found.websocket_param_name
        or found.http_connection_param_name
        or found.response_param_name
        or found.background_tasks_param_name
        or found.security_scopes_param_name
    )


def _is_async(call: object) -> bool:
    """A coroutine function, or an object whose ``__call__`` is one (a guard)."""
    return inspect.iscoroutinefunction(call) or inspect.iscoroutinefunction(type(call).__call__)


def _answers_a_response(endpoint: Callable[..., Any]) -> bool:
    try:
        answer = typing.get_type_hints(endpoint).get("return")
    except (NameError, TypeError):
        return False
    return isinstance(answer, type) and issubclass(answer, Response)


def is_json_with_body(scope: Scope) -> bool:
    """Whether the request says it carries a JSON body (``application/json``, exactly)
    of a length: what this module serves. A chunked body, or JSON of another spelling,
    is FastAPI's."""
    media = length = None
    for name, value in scope["headers"]:
        if name == b"content-type":
            media = value
        elif name == b"content-length":
            length = value
    return media == b"application/json" and length is not None and length.strip() not in (b"", b"0")


async def _parse(request: Request) -> None:
    """The JSON body parsed (Starlette keeps it for ``request.json()``), or the error
    FastAPI gives for one it cannot parse."""
    try:
        await request.json()
    except json.JSONDecodeError as error:
        raise RequestValidationError(
            [{"type": "json_invalid", "loc": ("body", error.pos), "msg": "JSON decode error",
              "input": {}, "ctx": {"error": error.msg}}],
            body=error.doc,
        ) from error  # fmt: skip
    except HTTPException:  # the body's own limits (413) and stalls (408)
        raise
    except Exception as error:  # not UTF-8, nested past the parser's depth, ...
        raise HTTPException(400, "There was an error parsing the body") from error


_SERVED = "_acceleron_served_directly"  # set on a route served here (routers outlive apps)


def is_served_directly(route: APIRoute) -> bool:
    return bool(getattr(route, _SERVED, False))


def serve_directly(route: APIRoute) -> None:
    """Serve ``route`` here where its shape allows (see the module); a route already
    served here stays as it is."""
    shape = None if is_served_directly(route) else shape_of(route)
    if shape is None:
        return
    fastapi_app = route.app
    direct = request_response(_handler(shape))

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if shape.body is not None and not is_json_with_body(scope):
            await fastapi_app(scope, receive, send)
        else:
            await direct(scope, receive, send)

    route.app = app
    setattr(route, _SERVED, True)


def _handler(shape: Shape) -> Callable[[Request], Awaitable[Response]]:
    endpoint, dependencies, path_params, body = (
        shape.endpoint, shape.dependencies, shape.path_params, shape.body
    )  # fmt: skip

    async def handle(request: Request) -> Response:
        if body is not None:
            await _parse(request)  # before any dependency, as FastAPI does
        values: dict[str, Any] = {name: request.path_params[name] for name in path_params}
        answers: dict[Dependency, Any] = {}  # each dependency once a request, as in FastAPI
        for name, dependency in dependencies:
            if dependency in answers:
                answer = answers[dependency]
            else:
                answer = answers[dependency] = await dependency(request)
            if name is not None:
                values[name] = answer
        if body is not None:
            values[body] = await checked_body(request)
        return await endpoint(**values)

    return handle
