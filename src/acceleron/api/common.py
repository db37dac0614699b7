"""What every handler uses: typed dependencies and the JSON response helpers."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Annotated, Any

import orjson
from fastapi import Depends, Request
from starlette.responses import Response

from acceleron.api import microversion
from acceleron.api.policy import Policy
from acceleron.context import RequestContext
from acceleron.db.session import Database


def _db(request: Request) -> Database:
    db: Database = request.app.state.db
    return db


def _version(request: Request) -> microversion.Version:
    version: microversion.Version = request.state.api_version
    return version


@dataclasses.dataclass(frozen=True)
class Caller:
    """The authenticated caller and the policy that says what it may do."""

    context: RequestContext
    policy: Policy

    def authorize(self, rule: str, target: dict[str, object] | None = None) -> None:
        self.policy.authorize(rule, self.context, target)


async def _caller(request: Request) -> Caller:
    context = await request.app.state.auth.context(request)
    return Caller(context, request.app.state.policy)


Db = Annotated[Database, Depends(_db)]
ApiVersion = Annotated[microversion.Version, Depends(_version)]
CallerDep = Annotated[Caller, Depends(_caller)]


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
