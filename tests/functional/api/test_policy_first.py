"""Policy before the body: every route names a policy rule, and a caller the rule refuses
gets 403 whatever the body and query hold, never a 400 that would teach it the schema.
The routes are walked from the app itself, so that a new route is checked too; and the
app refuses to start with a route no rule guards (issue 40)."""

from __future__ import annotations

import re

import pytest
from fastapi import APIRouter
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from oslo_config import cfg
from starlette.responses import Response
from starlette.routing import Route

from acceleron.api import app as app_module
from acceleron.api import common, policy
from acceleron.api.app import create_app
from acceleron.db.session import Database

UUID = "3f0c9b2e-5d41-4a8e-9c17-6b2d80e4a513"
NOBODY = {
    "OpenStack-API-Version": "accelerator latest",
    "Content-Type": "application/json",
    "X-Roles": "nobody",
    "X-Project-Id": "p1",
    "X-User-Id": "u1",
}
BAD_QUERY = {"limit": "many", "marker": "x", "sort_dir": "sideways", "wait": "forever"}


def routes(conf: cfg.ConfigOpts, db: Database) -> list[tuple[str, str]]:
    spec = create_app(conf, db, check_schema=False).openapi()
    return sorted(
        (method.upper(), path)
        for path, operations in spec["paths"].items()
        for method in operations
        if (method.upper(), path) not in policy.PUBLIC_ROUTES
    )


def test_every_route_names_its_rule(conf: cfg.ConfigOpts, db: Database) -> None:
    found = routes(conf, db)
    assert len(found) > 40, "the walk found too few routes"
    assert [route for route in found if policy.rule_of(*route) is None] == []


def test_a_refused_caller_learns_nothing_of_the_schema(
    api: TestClient, conf: cfg.ConfigOpts, db: Database
) -> None:
    answers = {}
    for method, template in routes(conf, db):
        path = re.sub(r"\{[^}]+\}", UUID, template)
        body = (
            b'{"bogus": [1, 2, 3], "hostname": 5}' if method in ("POST", "PUT", "PATCH") else None
        )
        response = api.request(method, path, params=BAD_QUERY, content=body, headers=NOBODY)
        answers[f"{method} {template}"] = response.status_code
        if response.status_code == 403:
            assert response.json()["errors"][0]["code"] == "acceleron.forbidden"
    assert {route: status for route, status in answers.items() if status != 403} == {}


@pytest.mark.parametrize("roles", ["member", "reader"])
def test_a_member_reporting_a_host_gets_403_not_the_schema(api: TestClient, roles: str) -> None:
    response = api.put(
        "/v2/hosts/h1/report", content=b'{"hostname": 5}', headers={**NOBODY, "X-Roles": roles}
    )
    assert response.status_code == 403, response.text
    assert "hostname" not in response.text


# Routes a change might add: one no rule names, one whose rule its handler never checks.
unguarded = APIRouter()


@unguarded.post("/v2/extra")
async def extra(call: common.CallDep) -> Response:
    return Response(status_code=204)


unchecked = APIRouter()


@unchecked.get("/v2/devices/{uuid}/binds")
async def binds(uuid: str) -> Response:
    return Response(status_code=204)


@pytest.mark.parametrize(
    ("router", "message"),
    [
        (unguarded, "The route POST /v2/extra has no policy rule"),
        (
            unchecked,
            "The route GET /v2/devices/{uuid}/binds does not check its policy rule "
            "(acceleron:device:get_one): its handler must take CallDep.",
        ),
    ],
)
def test_the_app_refuses_to_start_with_a_route_no_rule_guards(
    conf: cfg.ConfigOpts,
    sqlite_db: Database,
    monkeypatch: pytest.MonkeyPatch,
    router: APIRouter,
    message: str,
) -> None:
    monkeypatch.setattr(app_module, "ROUTERS", (*app_module.ROUTERS, router))
    with pytest.raises(policy.UnguardedRoute, match=re.escape(message)):
        create_app(conf, sqlite_db, check_schema=False)


def test_every_route_of_the_app_is_guarded_or_public(
    conf: cfg.ConfigOpts, sqlite_db: Database
) -> None:
    conf.set_override("enabled", True, "metrics")
    app = create_app(conf, sqlite_db, check_schema=False)
    served = set()
    for route in app.routes:
        if not isinstance(route, Route):
            continue
        for method in route.methods or ():
            served.add((method, route.path))
            if (method, route.path) in policy.PUBLIC_ROUTES or method == "HEAD":
                continue
            assert policy.rule_of(method, route.path) is not None, (method, route.path)
            assert isinstance(route, APIRoute) and common.checks_its_rule(route.dependant)
    assert served >= policy.PUBLIC_ROUTES, "a public route that is no longer served"


def test_a_handler_reached_without_a_rule_refuses(
    conf: cfg.ConfigOpts, sqlite_db: Database
) -> None:
    """The last guard, for a route added once the app is made (nothing does that)."""
    app = create_app(conf, sqlite_db, check_schema=False)
    app.router.routes.extend(unguarded.routes)
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.post("/v2/extra", headers={"OpenStack-API-Version": "accelerator 2.0"})
    assert response.status_code == 403, response.text
    assert "No policy rule guards POST /v2/extra" in response.json()["errors"][0]["detail"]
