"""Endpoints and connection failures, as every client of the API (the CLI, the agent,
os_acc) meets them. Nothing heavy is imported here: the CLI loads it on every command."""

from __future__ import annotations


def base_url(endpoint: str) -> str:
    """The API root from an endpoint that may end in /v2 (as catalogs often register it,
    and as the all-in-one's banner shows it)."""
    url = endpoint.rstrip("/")
    return url.removesuffix("/v2")


def root_cause(error: BaseException) -> str:
    """The innermost reason of a chain of wrapped errors: "Connection refused", not three
    layers of HTTP library messages."""
    inner = error
    while (cause := inner.__cause__ or inner.__context__) is not None:
        inner = cause
    if isinstance(inner, OSError) and inner.strerror:
        return inner.strerror
    return str(inner) or str(error)
