"""One UUID rule at every route: the spellings ``uuid.UUID`` accepts but Acceleron does
not (braces, ``urn:uuid:``) are a 400 naming the field, wherever a uuid is taken, in the
path or in the query. The routes come from the app's own OpenAPI document, so a new
route that takes a uuid is covered without being listed here."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from acceleron.api.app import create_app
from acceleron.db.session import Database

LATEST = {"OpenStack-API-Version": "accelerator latest"}
ANY = "8411555e-3cbf-47de-988c-b5e30bbfa035"
SPELLINGS = {"braces": "{" + ANY + "}", "urn": "urn:uuid:" + ANY}
# Path parameters that name a uuid (a device profile's {ident} is a uuid or a name).
PATH_UUIDS = ("{uuid}", "{consumer}", "{again}")
# Query parameters that take a uuid, or a comma-separated list of them (function_uuid and
# region_type_uuid are ids a driver may spell its own way: they are compared, not parsed).
QUERY_UUIDS = {
    "marker",
    "arqs",
    "instance",
    "deployable_uuid",
    "parent_uuid",
    "root_uuid",
    "device_uuid",
    "instance_uuid",
    "rp_uuid",
}
# A body each route takes, so that what is refused is the uuid, not the body.
BODIES: dict[tuple[str, str], object] = {
    ("PATCH", "/v2/accelerator_requests/{uuid}"): [{"op": "remove", "path": "/hostname"}],
    ("POST", "/v2/accelerator_requests/{uuid}/program"): {"bitstream_id": ANY},
    ("POST", "/v2/devices/{uuid}/maintenance"): {"maintenance": False},
    ("POST", "/v2/deployables/{uuid}/maintenance"): {"maintenance": False},
    ("PUT", "/v2/tasks/{uuid}"): {"state": "running"},
    ("PATCH", "/v2/deployables/{uuid}/program"): [
        {"op": "replace", "path": "/program", "value": [{"image_uuid": ANY}]}
    ],
    ("PATCH", "/v2/deployables/{uuid}/program/{again}"): [
        {"op": "replace", "path": "/program", "value": [{"image_uuid": ANY}]}
    ],
}


def _routes() -> list[tuple[str, str, str | None]]:
    """(method, path template, query parameter or None) for each place a uuid is taken."""
    from acceleron import conf as confmod

    conf = confmod.load([], config_files=[], overrides={"DEFAULT": {"state_path": "/nonexistent"}})
    app = create_app(conf, Database("sqlite://"))
    found: list[tuple[str, str, str | None]] = []
    for path, operations in sorted(app.openapi()["paths"].items()):
        for method, operation in operations.items():
            if any(name in path for name in PATH_UUIDS):
                found.append((method.upper(), path, None))
            for param in operation.get("parameters", []):
                name = param["name"]
                if param["in"] == "query" and name in QUERY_UUIDS:
                    found.append((method.upper(), path, name))
    return found


ROUTES = _routes()


def _url(path: str, query: str | None, value: str) -> tuple[str, dict[str, str]]:
    for name in PATH_UUIDS:
        path = path.replace(name, value if query is None else ANY)
    path = path.replace("{ident}", ANY).replace("{key}", "k")
    return path.replace("{hostname}", "h1").replace("{project_id}", "p1"), (
        {query: value} if query else {}
    )


def test_the_routes_are_found() -> None:
    paths = {path for _, path, _ in ROUTES}
    assert "/v2/accelerator_requests/{uuid}" in paths and "/v2/claims/{consumer}" in paths
    assert ("GET", "/v2/accelerator_requests", "instance") in ROUTES


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
@pytest.mark.parametrize(("method", "path", "query"), ROUTES)
def test_a_uuid_in_another_spelling_is_a_400(
    sqlite_api: TestClient, method: str, path: str, query: str | None, spelling: str
) -> None:
    url, params = _url(path, query, SPELLINGS[spelling])
    body = BODIES.get((method, path), {} if method in ("POST", "PUT", "PATCH") else None)
    response = sqlite_api.request(method, url, params=params, json=body, headers=LATEST)
    assert response.status_code == 400, (response.status_code, response.text)
    error = response.json()["errors"][0]
    assert error["code"] == "acceleron.invalid_input", error
    assert "is not a UUID" in error["detail"], error["detail"]


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_a_profile_uuid_in_another_spelling_is_a_400(sqlite_api: TestClient, spelling: str) -> None:
    """In a body too: a device profile's uuid, which pydantic's UUID type would take."""
    body = [
        {"name": f"p-{spelling}", "uuid": SPELLINGS[spelling], "groups": [{"resources:FPGA": "1"}]}
    ]
    response = sqlite_api.post("/v2/device_profiles", json=body, headers=LATEST)
    assert response.status_code == 400, (response.status_code, response.text)
    assert "uuid: " in response.json()["errors"][0]["detail"]
    listed = sqlite_api.get("/v2/device_profiles", headers=LATEST).json()["device_profiles"]
    assert [p for p in listed if p["name"] == f"p-{spelling}"] == []


def test_a_profile_uuid_without_dashes_is_kept_dashed(sqlite_api: TestClient) -> None:
    body = [
        {"name": "p-hex", "uuid": ANY.replace("-", "").upper(), "groups": [{"resources:FPGA": "1"}]}
    ]
    response = sqlite_api.post("/v2/device_profiles", json=body, headers=LATEST)
    assert response.status_code == 201, response.text
    assert response.json()["uuid"] == ANY
