"""Version documents and what every response carries (docs/design/nova-contract.md,
transport): what the contract (tests/contract/versions.yaml) cannot state."""

from __future__ import annotations

import logging
import multiprocessing
import re
import uuid

import pytest
from fastapi.testclient import TestClient
from oslo_config import cfg

from acceleron.api.app import create_app
from acceleron.api.middleware import new_request_id
from acceleron.db.session import Database
from acceleron.logs import ContextFilter

# What oslo.middleware takes as another service's request id (X-OpenStack-Request-ID).
OSLO_REQUEST_ID = re.compile(r"req-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def test_public_endpoint_is_used_in_links(conf: cfg.ConfigOpts, db: Database) -> None:
    conf.set_override("public_endpoint", "https://cloud.test/accelerator", "api")
    try:
        with TestClient(create_app(conf, db)) as api:
            links = api.get("/v2").json()["links"]
    finally:
        conf.clear_override("public_endpoint", "api")
    assert links[0]["href"] == "https://cloud.test/accelerator/v2/"


def test_links_follow_each_requests_own_address(api: TestClient) -> None:
    """Without ``[api] public_endpoint``, links name the host and scheme each request came
    to (behind a proxy, what it forwarded), whatever came before."""
    hosts = ["cloud-a.test", "cloud-b.test:8443", "cloud-a.test"]
    hrefs = [api.get("/v2", headers={"Host": host}).json()["links"][0]["href"] for host in hosts]
    assert hrefs == [f"http://{host}/v2/" for host in hosts]
    forwarded = {"Host": "cloud-a.test", "X-Forwarded-Proto": "https"}
    assert api.get("/v2", headers=forwarded).json()["links"][0]["href"] == (
        "http://cloud-a.test/v2/"  # the test client is no trusted proxy: its header is ignored
    )


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
        assert OSLO_REQUEST_ID.fullmatch(request_id), request_id
        assert uuid.UUID(request_id[4:]).version == 4
        if response.status_code >= 400:
            assert response.json()["errors"][0]["request_id"] == request_id
        ids.add(request_id)
    assert len(ids) == 5


def _ids(queue: multiprocessing.Queue[list[str]]) -> None:
    queue.put([new_request_id() for _ in range(1000)])


def test_request_ids_differ_in_forked_workers() -> None:
    """Processes forked from one (a server's workers may be) draw their ids each from a
    generator of its own: none repeats another's."""
    fork = multiprocessing.get_context("fork")
    queue: multiprocessing.Queue[list[str]] = fork.Queue()
    children = [fork.Process(target=_ids, args=(queue,)) for _ in range(2)]
    for child in children:
        child.start()
    drawn = [queue.get(timeout=60) for _ in children] + [[new_request_id() for _ in range(1000)]]
    for child in children:
        child.join(timeout=60)
    assert len({i for ids in drawn for i in ids}) == 3000


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
