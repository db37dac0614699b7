"""Errors as HTTP responses, in one place.

Every error body carries two things:

* ``error_message``: a JSON string of ``{faultstring, faultcode, debuginfo}``,
  the shape upstream Cyborg clients (openstacksdk, python-cyborgclient) parse;
* ``errors``: a list with one entry in the OpenStack API working group format,
  whose ``code`` is a stable, documented string clients may match on.

Codes never change once published; add new ones at the end of CODES.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from http import HTTPStatus
from typing import Annotated, Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field, TypeAdapter, ValidationError
from sqlalchemy.exc import DataError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from acceleron import exceptions as exc
from acceleron import microversion

LOG = logging.getLogger(__name__)

# Domain exception -> (HTTP status, stable code). Most specific classes first.
CODES: list[tuple[type[exc.AcceleronError], int, str]] = [
    (exc.DuplicateName, 409, "acceleron.duplicate"),
    (exc.UnknownHost, 409, "acceleron.unknown_host"),
    (exc.ReportUnknown, 409, "acceleron.report_unknown"),
    (exc.UnsupportedFormat, 409, "acceleron.unsupported_format"),
    (exc.InUse, 409, "acceleron.in_use"),
    (exc.Disabled, 409, "acceleron.disabled"),
    (exc.Unhealthy, 409, "acceleron.unhealthy"),
    (exc.InMaintenance, 409, "acceleron.in_maintenance"),
    (exc.NotProvided, 409, "acceleron.not_provided"),
    (exc.Conflict, 409, "acceleron.conflict"),
    (exc.InvalidInput, 400, "acceleron.invalid_input"),
    (exc.NotFound, 404, "acceleron.not_found"),
    (exc.Forbidden, 403, "acceleron.forbidden"),
    (exc.Locked, 423, "acceleron.locked"),
    (exc.SchemaOutOfDate, 503, "acceleron.schema_out_of_date"),
    (exc.PlacementUnavailable, 503, "acceleron.placement_unavailable"),
    (exc.PlacementError, 502, "acceleron.placement_error"),
    (exc.BitstreamStoreError, 502, "acceleron.bitstream_store_error"),
    # Its bytes no longer match their hash: a state of the bitstream, as a queued one
    # (409 acceleron.conflict) is, that no retry changes (docs/api/errors.md).
    (exc.BitstreamCorrupt, 409, "acceleron.bitstream_corrupt"),
    (exc.DatabaseBusy, 503, "acceleron.database_busy"),
    (exc.DatabaseUnavailable, 503, "acceleron.database_unavailable"),
    (exc.Overloaded, 503, "acceleron.overloaded"),
    (exc.OverLimit, 429, "acceleron.over_limit"),
    (exc.QuotaExceeded, 403, "acceleron.quota_exceeded"),
    (exc.QuotaUnavailable, 503, "acceleron.quota_unavailable"),
    (exc.StateUnwritable, 503, "acceleron.state_unwritable"),
]
# Seconds a client is told to wait (Retry-After) before trying again, by error.
RETRY_AFTER: dict[type[exc.AcceleronError], int] = {
    exc.DatabaseBusy: 1,
    exc.DatabaseUnavailable: 5,
    exc.PlacementUnavailable: 5,
    exc.Overloaded: 1,
    exc.OverLimit: 5,
    exc.QuotaUnavailable: 5,
}
# Errors that come from HTTP itself rather than from the domain.
HTTP_CODES = {
    400: "acceleron.invalid_input",
    401: "acceleron.unauthorized",
    403: "acceleron.forbidden",
    404: "acceleron.not_found",
    405: "acceleron.method_not_allowed",
    406: "acceleron.version_not_acceptable",
    408: "acceleron.request_timeout",
    413: "acceleron.too_large",
    415: "acceleron.unsupported_media_type",
    500: "acceleron.internal_error",
    503: "acceleron.service_unavailable",
}


class ErrorItem(BaseModel):
    status: int
    code: str = Field(description="Stable error code, e.g. acceleron.duplicate.")
    title: str
    detail: str
    request_id: str | None


class ErrorBody(BaseModel):
    error_message: str = Field(
        description="JSON string of {faultstring, faultcode, debuginfo}, as older clients parse."
    )
    errors: list[ErrorItem]


# Declared on every router: every 4xx answer has this body (and no 422 is ever sent).
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    "4XX": {"model": ErrorBody, "description": "The request was refused; see errors[0]."}
}


def error_body(status: int, code: str, message: str, request_id: str | None) -> bytes:
    # A message quoting bad input may hold what JSON cannot encode (a lone surrogate).
    message = message.encode("utf-8", "backslashreplace").decode("utf-8")
    fault = {
        "faultstring": message,
        "faultcode": "Client" if status < 500 else "Server",
        "debuginfo": None,
    }
    return orjson.dumps(
        {
            "error_message": orjson.dumps(fault).decode(),
            "errors": [
                {
                    "status": status,
                    "code": code,
                    "title": HTTPStatus(status).phrase,
                    "detail": message,
                    "request_id": request_id,
                }
            ],
        }
    )


def error_response(
    status: int,
    message: str,
    code: str | None = None,
    request_id: str | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    body = error_body(
        status, code or HTTP_CODES.get(status, "acceleron.error"), message, request_id
    )
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def status_and_code(error: exc.AcceleronError) -> tuple[int, str]:
    for cls, status, code in CODES:
        if isinstance(error, cls):
            return status, code
    return 500, "acceleron.internal_error"


def _request_id(request: Request) -> str | None:
    request_id: str | None = request.scope.get("state", {}).get("request_id")
    return request_id


def _describe_validation(errors: Sequence[Any]) -> str:
    parts = []
    for error in errors[:5]:
        loc = [str(p) for p in error.get("loc", ()) if p not in ("body",)]
        where = ".".join(loc) or "body"
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return "Invalid request: " + "; ".join(parts) + "."


def retry_after(error: exc.AcceleronError) -> dict[str, str] | None:
    """The Retry-After header for an error worth retrying as it is."""
    for cls, seconds in RETRY_AFTER.items():
        if isinstance(error, cls):
            return {"Retry-After": str(seconds)}
    return None


async def _domain_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, exc.AcceleronError)
    status, code = status_and_code(error)
    return error_response(status, error.message, code, _request_id(request), retry_after(error))


async def _validation_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, RequestValidationError)
    found = _as_json_says(request, error.errors(), error.body)
    return error_response(400, _describe_validation(found), None, _request_id(request))


_BODY_ADAPTERS: dict[int, tuple[object, TypeAdapter[Any]]] = {}


def _as_json_says(request: Request, errors: Sequence[Any], body: Any) -> Sequence[Any]:
    """``errors`` as a JSON body's validation words them. FastAPI validates a body
    ``from_attributes`` (it may be any object), so a model given what is no JSON object
    "should be a valid dictionary or object to extract fields from"; clients have always
    been told "a valid dictionary or instance of <the model>": its name, from the body
    validated again (a bad body's answer alone: every collection stops at its first
    error, ``acceleron.failfast``)."""
    if not any(item.get("type") == "model_attributes_type" for item in errors):
        return errors
    field = getattr(request.scope.get("route"), "body_field", None)
    if field is None:
        return errors
    known = _BODY_ADAPTERS.get(id(field))
    if known is None or known[0] is not field:  # a route's field lives as long as the app
        info = field.field_info
        constrained: Any = Annotated[info.annotation, info]
        known = _BODY_ADAPTERS[id(field)] = (field, TypeAdapter(constrained))
    try:
        known[1].validate_python(body)
    except ValidationError as again:
        wording = {
            ("body", *item["loc"]): item["msg"]
            for item in again.errors(include_url=False)
            if item["type"] == "model_type"
        }
    else:
        return errors
    return [
        {**item, "msg": wording.get(tuple(item["loc"]), item["msg"])}
        if item.get("type") == "model_attributes_type"
        else item
        for item in errors
    ]


async def _http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, StarletteHTTPException)
    message = (
        error.detail if isinstance(error.detail, str) else HTTPStatus(error.status_code).phrase
    )
    return error_response(
        error.status_code, message, None, _request_id(request), dict(error.headers or {})
    )


async def _version_error(request: Request, error: Exception) -> Response:
    return error_response(406, str(error), None, _request_id(request))


async def _data_error(request: Request, error: Exception) -> Response:
    """The database refused a value the request carried (a NUL character, a number out
    of its column's range): bad input that slipped past the checks, still the caller's."""
    LOG.warning(
        "The database refused a value of %s %s: %s",
        request.method,
        request.url.path,
        getattr(error, "orig", error),
    )
    return error_response(
        400,
        "A value in the request cannot be stored or compared (a NUL character, or a number "
        "out of range?); correct it and try again.",
        None,
        _request_id(request),
    )


async def _unexpected(request: Request, error: Exception) -> Response:
    return unexpected(request.method, request.url.path, _request_id(request))


def unexpected(method: str, path: str, request_id: str | None) -> Response:
    """The answer to an error nothing expected, logged with its traceback (called while
    it is handled)."""
    LOG.exception("Unexpected error handling %s %s", method, path)
    return error_response(
        500, "An unexpected error occurred; the log has the details.", None, request_id
    )


def install(app: FastAPI) -> None:
    app.add_exception_handler(exc.AcceleronError, _domain_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(microversion.NotAcceptable, _version_error)
    app.add_exception_handler(DataError, _data_error)
    app.add_exception_handler(Exception, _unexpected)
