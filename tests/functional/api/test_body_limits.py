"""Request bodies are capped before they are read: ``[oslo_middleware]
max_request_body_size`` (oslo's sizelimit) for every JSON body, by its Content-Length or
by the bytes of a chunked one; host reports and bitstream uploads have their own limits.
And the large inputs tried against the API stay refused (or bounded) at once."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from oslo_config import cfg
from tests.fixtures.bitstreams import upload

from acceleron.api.app import create_app
from acceleron.db.session import Database

LIMIT = 114_688  # oslo.middleware's default
LATEST = {"OpenStack-API-Version": "accelerator latest"}
JSON = {**LATEST, "Content-Type": "application/json"}
PROFILES = "/v2/device_profiles"
GROUP = {"resources:CUSTOM_ACCELERATOR_FPGA": "1"}


def refused_as_too_large(response: Any, option: str) -> None:
    assert response.status_code == 413, response.text
    error = response.json()["errors"][0]
    assert error["code"] == "acceleron.too_large"
    assert option in error["detail"]


def padded(data: Any, size: int) -> bytes:
    """``data`` as JSON of exactly ``size`` bytes (trailing blanks are JSON too)."""
    text = json.dumps(data).encode()
    assert len(text) <= size
    return text + b" " * (size - len(text))


def chunks(data: bytes, size: int = 16_384) -> Iterator[bytes]:
    """A body sent without Content-Length (chunked)."""
    for start in range(0, len(data), size):
        yield data[start : start + size]


def test_a_body_past_its_content_length_limit_is_a_413(api: TestClient) -> None:
    body = padded([{"name": "p", "groups": [GROUP]}], LIMIT + 1)
    refused_as_too_large(
        api.post(PROFILES, content=body, headers=JSON), "[oslo_middleware] max_request_body_size"
    )
    # Whoever sends it: it is refused before the caller is even looked at.
    member = {**JSON, "X-Roles": "member"}
    refused_as_too_large(
        api.put("/v2/hosts/h1/report?x", content=b"[" * (5 << 20), headers=member),
        "[api] max_host_report_size",
    )


def test_a_chunked_body_is_cut_at_the_limit(api: TestClient) -> None:
    body = padded([{"name": "p", "groups": [GROUP]}], 3 * LIMIT)
    response = api.post(PROFILES, content=chunks(body), headers=JSON)
    refused_as_too_large(response, "[oslo_middleware] max_request_body_size")
    assert "more than 114688 bytes came" in response.json()["errors"][0]["detail"]


def test_a_body_of_the_limit_exactly_is_taken(api: TestClient) -> None:
    body = padded([{"name": "p", "groups": [GROUP]}], LIMIT)
    assert api.post(PROFILES, content=body, headers=JSON).status_code == 201
    also = padded([{"name": "q", "groups": [GROUP]}], LIMIT)
    assert api.post(PROFILES, content=chunks(also), headers=JSON).status_code == 201


def test_the_limit_is_the_option(conf: cfg.ConfigOpts, db: Database) -> None:
    conf.set_override("max_request_body_size", 1000, "oslo_middleware")
    with TestClient(create_app(conf, db), raise_server_exceptions=False) as client:
        body = padded([{"name": "p", "groups": [GROUP]}], 1001)
        refused_as_too_large(
            client.post(PROFILES, content=body, headers=JSON), "at most 1000 are taken"
        )


def test_host_reports_have_their_own_limit(conf: cfg.ConfigOpts, db: Database) -> None:
    report = {"hostname": "h1", "agent_version": "1", "devices": []}
    conf.set_override("max_host_report_size", 3 * LIMIT, "api")
    with TestClient(create_app(conf, db), raise_server_exceptions=False) as client:
        path = "/v2/hosts/h1/report"
        taken = client.put(path, content=padded(report, 2 * LIMIT), headers=JSON)
        assert taken.status_code == 200, taken.text
        too_large = client.put(path, content=chunks(padded(report, 4 * LIMIT)), headers=JSON)
        refused_as_too_large(too_large, "[api] max_host_report_size")


def test_bitstream_uploads_keep_their_own_limit(api: TestClient) -> None:
    data = bytes(range(256)) * (3 * LIMIT // 256)
    assert upload(api, data)["size"] == len(data)
    assert upload(api, b"".join([data]))["status"] == "active"


# A route with its own limit for one media type, another type sent there, and the
# answer to a body of it past the ordinary limit sent chunked: 415 where nothing reads it.
OTHER_TYPES = [("upload", "application/json", 413), ("upload", "text/plain", 415),
               ("upload", None, 415), ("report", "application/octet-stream", 413),
               ("report", None, 413)]  # fmt: skip


def test_a_route_s_own_limit_is_for_its_media_type_only(conf: cfg.ConfigOpts, db: Database) -> None:
    """The upload's large limit is for octets, the host report's for JSON: any other body
    sent there has the ordinary limit (an upload's JSON body was read whole, issue 40)."""
    conf.set_override("max_host_report_size", 3 * LIMIT, "api")
    with TestClient(create_app(conf, db), raise_server_exceptions=False) as client:
        paths = {"upload": upload_path(client), "report": "/v2/hosts/h1/report"}
        too_large = b"x" * (2 * LIMIT)
        for route, media, chunked in OTHER_TYPES:
            headers = {**LATEST, "Content-Type": media} if media else LATEST
            response = client.put(paths[route], content=too_large, headers=headers)
            refused_as_too_large(response, "[oslo_middleware] max_request_body_size")
            response = client.put(paths[route], content=chunks(too_large), headers=headers)
            assert response.status_code == chunked, (route, media, response.text)
        octets = {**LATEST, "Content-Type": "Application/Octet-Stream; x=1"}
        taken = client.put(paths["upload"], content=chunks(too_large), headers=octets)
        assert taken.status_code == 200 and taken.json()["size"] == len(too_large), taken.text


def upload_path(client: TestClient) -> str:
    created = client.post("/v2/bitstreams", json={"name": "b.gbs"}, headers=LATEST)
    assert created.status_code == 201, created.text
    return f"/v2/bitstreams/{created.json()['uuid']}/data"


def test_the_embedded_placement_answers_413_not_500(conf: cfg.ConfigOpts, db: Database) -> None:
    conf.set_override("mode", "embedded", "placement")
    conf.set_override("embedded_connection", "sqlite://", "placement")
    with TestClient(create_app(conf, db), raise_server_exceptions=False) as client:
        path = "/placement/resource_providers"
        body = padded({"name": "rp"}, 2 * LIMIT)
        for content in (body, chunks(body)):
            response = client.post(path, content=content, headers=JSON)
            refused_as_too_large(response, "[oslo_middleware] max_request_body_size")
        admin = {**JSON, "X-Auth-Token": "admin", "OpenStack-API-Version": "placement 1.20"}
        name = f"rp-{uuid.uuid4()}"  # the embedded Placement's database outlives the app
        created = client.post(path, content=padded({"name": name}, LIMIT), headers=admin)
        assert created.status_code in (200, 201), created.text


# The inputs tried against the API, each refused at once: first by the body's limit,
# and with the limit raised out of the way, by what the API checks next.
INPUTS = [
    ("POST", PROFILES, [{"name": "g", "groups": [GROUP] * 10_000}],
     "groups: 10000 groups given, at most"),
    ("POST", PROFILES, [{"name": f"p{i}", "groups": [GROUP]} for i in range(5_000)],
     "exactly one device profile, not 5000"),
    ("PATCH", "/v2/accelerator_requests",
     {str(uuid.UUID(int=i)): [{"op": "add", "path": "/hostname", "value": "h"}]
      for i in range(5_000)}, "a bind needs"),
    ("POST", PROFILES, None, "There was an error parsing the body"),  # 100,000 levels
    ("POST", "/v2/attributes", {"deployable_uuid": str(uuid.UUID(int=1)), "key": "k",
                                "value": "v" * (1 << 20)}, "at most 65535 characters"),
]  # fmt: skip


def _body(data: Any) -> bytes:
    return b"[" * 100_000 + b"]" * 100_000 if data is None else json.dumps(data).encode()


@pytest.mark.parametrize(("method", "path", "data", "message"), INPUTS)
def test_large_inputs_are_refused_at_once(
    api: TestClient,
    conf: cfg.ConfigOpts,
    db: Database,
    method: str,
    path: str,
    data: Any,
    message: str,
) -> None:
    body = _body(data)
    assert len(body) > LIMIT
    refused_as_too_large(
        api.request(method, path, content=body, headers=JSON),
        "[oslo_middleware] max_request_body_size",
    )
    conf.set_override("max_request_body_size", 64 << 20, "oslo_middleware")
    with TestClient(create_app(conf, db), raise_server_exceptions=False) as roomy:
        response = roomy.request(method, path, content=body, headers=JSON)
    assert response.status_code == 400, response.text
    assert message in response.json()["errors"][0]["detail"]


def test_a_long_marker_and_a_huge_limit_are_refused_or_bounded(api: TestClient) -> None:
    marker = "x" * 60_000  # a 100 KB request line is refused by the HTTP server itself
    response = api.get("/v2/devices", params={"marker": marker}, headers=JSON)
    assert response.status_code == 400 and "is not a UUID" in response.text
    assert marker not in response.text  # the message quotes it shortened
    for path in ("/v2/devices", "/v2/deployables", "/v2/accelerator_requests"):
        listed = api.get(path, params={"limit": "10000000"}, headers=JSON)
        assert listed.status_code == 200, listed.text
