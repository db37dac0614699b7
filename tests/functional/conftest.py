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


@pytest.fixture(scope="module")
def live_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A live API server on SQLite for clients that speak real HTTP; yields its URL."""
    from acceleron import conf as confmod
    from acceleron.db import migrate
    from tests.fixtures.server import serve

    state = tmp_path_factory.mktemp("live")
    conf = confmod.load([], config_files=[], overrides={"DEFAULT": {"state_path": str(state)}})
    database = Database(f"sqlite:///{state / 'acceleron.sqlite'}")
    migrate.upgrade(database)
    with serve(create_app(conf, database)) as url:
        yield url
    database.dispose()
