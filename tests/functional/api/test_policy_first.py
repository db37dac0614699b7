"""Policy before the body: every route names a policy rule, and a caller the rule refuses
gets 403 whatever the body and query hold, never a 400 that would teach it the schema.
The routes are walked from the app itself, so that a new route is checked too."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from oslo_config import cfg

from acceleron.api import policy
from acceleron.api.app import create_app
from acceleron.db.session import Database

PUBLIC = {("GET", "/"), ("GET", "/v2")}  # the version documents
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
        if (method.upper(), path) not in PUBLIC
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
    response = api.put("/v2/hosts/h1/report", content=b'{"hostname": 5}',
                       headers={**NOBODY, "X-Roles": roles})  # fmt: skip
    assert response.status_code == 403, response.text
    assert "hostname" not in response.text
