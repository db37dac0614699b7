"""What overrides the routes' dependencies: the serving app's ``dependency_overrides``.

A router's routes are made once, when its module is imported, and serve every app made
from them (``api.app.create_app``; the tests make many). FastAPI asks a route's
``dependency_overrides_provider`` for its ``dependency_overrides`` at each request, so
every router names ``PROVIDER``, which answers those of the app serving the request
(``ApiMiddleware`` names it for the request's life: ``serving``).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any

from starlette.types import Scope

_SERVING: contextvars.ContextVar[Any] = contextvars.ContextVar("acceleron_app", default=None)


class _Provider:
    @property
    def dependency_overrides(self) -> dict[Callable[..., Any], Callable[..., Any]]:
        overrides: dict[Callable[..., Any], Callable[..., Any]] = getattr(
            _SERVING.get(), "dependency_overrides", {}
        )
        return overrides


PROVIDER = _Provider()


def serving(scope: Scope) -> contextvars.Token[Any]:
    """Name the app serving this request (Starlette's ``scope["app"]``) until ``done``."""
    return _SERVING.set(scope.get("app"))


def done(token: contextvars.Token[Any]) -> None:
    _SERVING.reset(token)
