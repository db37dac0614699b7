"""Claims against an API that publishes to no Placement ([placement] mode = disabled)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from oslo_config import cfg

from acceleron.api.app import create_app
from acceleron.db.session import Database

LATEST = {"OpenStack-API-Version": "accelerator latest"}


@pytest.fixture
def no_placement(conf: cfg.ConfigOpts, db: Database) -> Iterator[TestClient]:
    conf.set_override("mode", "disabled", group="placement")
    with TestClient(create_app(conf, db), raise_server_exceptions=False) as client:
        yield client


def test_releasing_a_claim_that_cannot_exist_is_a_404(no_placement: TestClient) -> None:
    """os_acc releases an instance's claim at every unplug: without Placement there is
    none to release, which is a 404 (nothing to do), not a 409."""
    consumer = str(uuid.uuid4())
    gone = no_placement.delete(f"/v2/claims/{consumer}", headers=LATEST)
    assert gone.status_code == 404, gone.text
    body = {"device_profile_name": "p", "consumer_uuid": consumer}
    refused = no_placement.post("/v2/claims", json=body, headers=LATEST)
    assert refused.status_code == 409 and "Placement is disabled" in refused.text
