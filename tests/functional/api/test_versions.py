"""Version documents and what every response carries (docs/design/nova-contract.md, transport)."""

from __future__ import annotations

import logging

import pytest
from fastapi.testclient import TestClient

from acceleron import microversion as mv
from acceleron.api.services import services
from acceleron.logs import ContextFilter

MAX = str(mv.MAX_VERSION)

V2 = {
    "id": "v2.0",
    "status": "CURRENT",
    "min_version": "2.0",
    "max_version": MAX,
    "links": [{"rel": "self", "href": "http://testserver/v2/"}],
}


def test_root_document(api: TestClient) -> None:
    body = api.get("/", headers={"Accept": "application/json"}).json()
    assert body["versions"] == [{**V2, "id": "v2"}]
    assert body["default_version"] == {**V2, "id": "v2"}


@pytest.mark.parametrize("path", ["/v2", "/v2/"])
def test_v2_document(api: TestClient, path: str) -> None:
    assert api.get(path).json() == V2


def test_public_endpoint_is_used_in_links(api: TestClient) -> None:
    services(api.app).conf.set_override("public_endpoint", "https://cloud.test/accelerator", "api")  # type: ignore[arg-type]
    try:
        assert api.get("/v2").json()["links"][0]["href"] == "https://cloud.test/accelerator/v2/"
    finally:
        services(api.app).conf.clear_override("public_endpoint", "api")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("header", "negotiated"),
    [(None, "2.0"), ("accelerator 2.2", "2.2"), ("2.1", "2.1"), ("accelerator latest", MAX)],
)
def test_version_headers(api: TestClient, header: str | None, negotiated: str) -> None:
    headers = {"OpenStack-API-Version": header} if header else {}
    response = api.get("/v2/device_profiles", headers=headers)
    assert response.status_code == 200
    assert response.headers["openstack-api-version"] == f"accelerator {negotiated}"
    assert response.headers["openstack-api-minimum-version"] == "2.0"
    assert response.headers["openstack-api-maximum-version"] == MAX
    assert response.headers["vary"] == "OpenStack-API-Version"


@pytest.mark.parametrize(
    "header", [f"accelerator 2.{mv.MAX_VERSION.minor + 1}", "accelerator 3.0", "accelerator x"]
)
def test_unsupported_versions_are_406(api: TestClient, header: str) -> None:
    response = api.get("/v2/device_profiles", headers={"OpenStack-API-Version": header})
    assert response.status_code == 406
    assert response.json()["errors"][0]["code"] == "acceleron.version_not_acceptable"
    assert response.headers["openstack-api-maximum-version"] == MAX


def test_every_response_has_a_request_id(api: TestClient) -> None:
    ids = set()
    for response in (
        api.get("/"),
        api.get("/v2/device_profiles"),
        api.get("/v2/nothing/here"),
        api.put("/v2/device_profiles"),
        api.get("/v2/device_profiles", headers={"OpenStack-API-Version": "accelerator 9.9"}),
    ):
        request_id = response.headers["x-openstack-request-id"]
        assert request_id.startswith("req-") and len(request_id) == 40
        if response.status_code >= 400:
            assert response.json()["errors"][0]["request_id"] == request_id
        ids.add(request_id)
    assert len(ids) == 5


def test_unknown_paths_and_methods(api: TestClient) -> None:
    assert api.get("/v2/nothing").status_code == 404
    response = api.put("/v2/device_profiles")
    assert response.status_code == 405
    assert response.json()["errors"][0]["code"] == "acceleron.method_not_allowed"


def test_log_lines_carry_the_request_id(api: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.handler.addFilter(ContextFilter())
    with caplog.at_level(logging.INFO):
        response = api.post("/v2/device_profiles", json=[{"name": "p", "groups": GROUPS}])
    request_id = response.headers["x-openstack-request-id"]
    created = [r for r in caplog.records if r.getMessage().startswith("Created device profile")]
    access = [r for r in caplog.records if r.name == "acceleron.api.access"]
    assert created and access
    # The first is logged in the thread pool running the handler, the second by the middleware.
    records = created + access
    assert [r.__dict__["context"].request_id for r in records] == [request_id] * 2


GROUPS = [{"resources:FPGA": "1"}]
