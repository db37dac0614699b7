"""Fixtures for tests through the HTTP API, on every database backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from oslo_config import cfg
from sqlalchemy.engine import make_url

from acceleron.api.app import create_app
from acceleron.db.session import Database
from tests.fixtures import databases
from tests.fixtures.arqs import inventory_of_host, published
from tests.fixtures.devices import seeded
from tests.fixtures.keystone import tokens
from tests.fixtures.placement import placement, placement_app

__all__ = ["inventory_of_host", "placement", "placement_app", "published", "seeded", "tokens"]

LATEST = {"OpenStack-API-Version": "accelerator latest"}


@pytest.fixture
def api(conf: cfg.ConfigOpts, db: Database) -> Iterator[TestClient]:
    """The API application on a real database, as an admin in noauth mode."""
    with TestClient(create_app(conf, db), raise_server_exceptions=False) as client:
        yield client


@pytest.fixture(scope="module")
def sqlite_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The API in-process on a SQLite database of its own, for tests whose answers do
    not depend on the database (guards, validation)."""
    from acceleron import conf as confmod
    from acceleron.db import migrate

    state = tmp_path_factory.mktemp("api")
    settings = confmod.load([], config_files=[], overrides={"DEFAULT": {"state_path": str(state)}})
    database = Database(f"sqlite:///{state / 'acceleron.sqlite'}")
    migrate.upgrade(database)
    with TestClient(create_app(settings, database), raise_server_exceptions=False) as client:
        yield client
    database.dispose()


@pytest.fixture
def fresh_db(database_url: str, tmp_path: Path) -> Iterator[Database]:
    """An empty database of its own on the backend of ``database_url``."""
    backend = make_url(database_url).get_backend_name()
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'fresh.sqlite'}"
    else:
        url = databases.create_server_database(backend)
    database = Database(url)
    try:
        yield database
    finally:
        database.dispose()
        if backend != "sqlite":
            databases.drop_server_database(backend, url)


@pytest.fixture(scope="module")
def live_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A live API server on SQLite for clients that speak real HTTP; yields its URL."""
    from tests.fixtures.server import serve_on_sqlite, trust_built_in

    with serve_on_sqlite(tmp_path_factory.mktemp("live"), trust_built_in) as url:
        yield url


@pytest.fixture(scope="module")
def remote_live_api(tmp_path_factory: pytest.TempPathFactory, placement_app: Any) -> Iterator[str]:
    """A live API publishing to the (in-process, real) Placement in remote mode: a host
    Placement has no compute node for is refused, as in a cloud."""
    from acceleron import conf as confmod
    from acceleron.db import migrate
    from acceleron.placement import inprocess
    from acceleron.placement.client import PlacementClient
    from acceleron.service.placement import PlacementService
    from tests.fixtures.server import serve

    state = tmp_path_factory.mktemp("remote")
    conf = confmod.load(
        [],
        config_files=[],
        overrides={
            "DEFAULT": {"state_path": str(state)},
            "placement": {"mode": "remote"},
        },
    )
    database = Database(f"sqlite:///{state / 'acceleron.sqlite'}")
    migrate.upgrade(database)
    app = create_app(conf, database)
    app.state.placement = PlacementService(
        conf, database, lambda: PlacementClient(inprocess.direct_adapter(placement_app))
    )
    with serve(app) as url:
        yield url
    database.dispose()
