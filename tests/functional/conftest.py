"""Fixtures for tests through the HTTP API, on every database backend."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from oslo_config import cfg

from acceleron.api.app import create_app
from acceleron.db.session import Database

LATEST = {"OpenStack-API-Version": "accelerator latest"}


@pytest.fixture
def api(conf: cfg.ConfigOpts, db: Database) -> Iterator[TestClient]:
    """The API application on a real database, as an admin in noauth mode."""
    with TestClient(create_app(conf, db), raise_server_exceptions=False) as client:
        yield client
