"""Reading the API's error answers, for every client of the API."""

from __future__ import annotations

import dataclasses
import json
from typing import Any


@dataclasses.dataclass(frozen=True)
class ApiErrorBody:
    """errors[0] of an error answer; code is None for a body that is not the API's."""

    detail: str
    code: str | None = None


def parse_error(text: str, reason: str = "") -> ApiErrorBody:
    """errors[0].detail and .code of an error body (or a WSGI fault's faultstring), or
    the raw text when it has no such."""
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    try:
        first = body["errors"][0]
        return ApiErrorBody(detail=str(first["detail"]), code=first.get("code"))
    except (KeyError, IndexError, TypeError, AttributeError):
        pass
    try:
        return ApiErrorBody(detail=str(json.loads(body["error_message"])["faultstring"]))
    except (ValueError, KeyError, TypeError, AttributeError):
        return ApiErrorBody(detail=text.strip()[:500] or reason or "no detail")


def detail(response: Any) -> str:
    """An API answer's status and message, for an error."""
    return f"{response.status_code} {parse_error(response.text, response.reason).detail}"
