"""Microversion guards: every route that appears with a microversion is refused below it,
with one wording, before its body or its policy is looked at; every field guard says the
same. The guarded routes are read from the app itself (each route's ``requires(...)``
dependency says its version), so a new guarded route is tested without being listed
here."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from starlette.routing import BaseRoute

from acceleron import conf as confmod
from acceleron import microversion
from acceleron.api.app import create_app
from acceleron.api.common import Requires
from acceleron.db.session import Database
from acceleron.exceptions import InvalidInput
from acceleron.microversion import Version

ANY = "8411555e-3cbf-47de-988c-b5e30bbfa035"
# What a path parameter is given (any other one: a uuid).
PARAMETERS = {"hostname": "h1", "key": "k", "project_id": "p1"}


def _routes(routes: Iterable[BaseRoute], prefix: str = "") -> Iterator[tuple[str, APIRoute]]:
    """(prefix, route) for every API route, through the routers FastAPI wraps when it
    includes them (their ``original_router``)."""
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            yield from _routes(included.routes, prefix + route.include_context.prefix)  # type: ignore[attr-defined]
        elif isinstance(route, APIRoute):
            yield prefix, route


def _guards(dependant: Dependant) -> Iterator[Requires]:
    """A route's guards, in the order they run (its router's first)."""
    for dependency in dependant.dependencies:
        if isinstance(dependency.call, Requires):
            yield dependency.call
        yield from _guards(dependency)


def _guarded() -> list[tuple[str, str, tuple[Requires, ...]]]:
    """(method, path template, its guards) for every route behind a microversion."""
    settings = confmod.load(
        [], config_files=[], overrides={"DEFAULT": {"state_path": "/nonexistent"}}
    )
    app = create_app(settings, Database("sqlite://"))
    documented = app.openapi()["paths"]
    found = []
    for prefix, route in _routes(app.routes):
        guards = tuple(_guards(route.dependant))
        if not guards:
            continue
        path = prefix + route.path
        assert path in documented or not route.include_in_schema, path  # the walk is right
        found += [(method, path, guards) for method in sorted(route.methods or ())]
    return sorted(found, key=lambda row: (row[1], row[0]))


GUARDED = _guarded()


def at(version: Version) -> dict[str, str]:
    return {"OpenStack-API-Version": f"accelerator {version}"}


def below(version: Version) -> Version:
    return Version(version.major, version.minor - 1)


def url(template: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: PARAMETERS.get(m.group(1), ANY), template)


def fault(response: Any) -> str:
    return str(json.loads(response.json()["error_message"])["faultstring"])


def test_the_guarded_routes_are_found() -> None:
    """The walk finds the routes of every version that added one (2.12 to 2.14 too)."""
    found = {(method, path): max(g.version for g in guards) for method, path, guards in GUARDED}
    assert found[("PATCH", "/v2/device_profiles/{ident}")] == microversion.V2_4
    assert found[("PUT", "/v2/hosts/{hostname}/report")] == microversion.V2_5
    assert found[("POST", "/v2/placement/reconcile")] == microversion.V2_9
    assert found[("POST", "/v2/claims")] == microversion.V2_12
    assert found[("DELETE", "/v2/claims/{consumer}")] == microversion.V2_12
    assert found[("GET", "/v2/devices/{uuid}/binds")] == microversion.V2_13
    assert found[("POST", "/v2/deployables/{uuid}/maintenance")] == microversion.V2_13
    assert found[("GET", "/v2/quotas/{project_id}")] == microversion.V2_14


@pytest.mark.parametrize(
    ("method", "path", "guards"), GUARDED, ids=[f"{m} {p}" for m, p, _ in GUARDED]
)
def test_a_route_is_not_there_below_its_version(
    sqlite_api: TestClient, method: str, path: str, guards: tuple[Requires, ...]
) -> None:
    # An invalid body: the guard answers before the body is validated. Below each guard's
    # version the first guard (in the order they run) that the version does not meet answers.
    for version in sorted({below(g.version) for g in guards}):
        guard = next(g for g in guards if version < g.version)
        response = sqlite_api.request(method, url(path), headers=at(version), content=b"{not json")
        assert response.status_code == guard.status_code, (version, response.text)
        assert fault(response) == f"{guard.what} needs microversion {guard.version} or later."
    response = sqlite_api.request(method, url(path), content=b"{not json")  # no header: 2.0
    assert response.status_code == guards[0].status_code and "needs microversion" in fault(response)
    newest = max(g.version for g in guards)
    response = sqlite_api.request(method, url(path), headers=at(newest), content=b"{not json")
    assert "needs microversion" not in response.text


def test_a_field_guard_says_the_same() -> None:
    microversion.require(microversion.V2_4, microversion.V2_4, "enabled")
    with pytest.raises(InvalidInput, match=r"^enabled: setting it needs microversion 2.4 or"):
        microversion.require(microversion.V2_3, microversion.V2_4, "enabled: setting it")
    with pytest.raises(microversion.NotAcceptable):
        microversion.require(microversion.V2_0, microversion.V2_2, "x", microversion.NotAcceptable)
