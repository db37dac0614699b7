"""A server's app, once started, moves what its start built out of the garbage
collector's passes (``app.settle_heap``); a test's app does not."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from oslo_config import cfg

from acceleron.api.app import create_app
from acceleron.db.session import Database


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """Whatever a test froze is given back to the collector after it."""
    assert gc.get_freeze_count() == 0
    yield
    gc.unfreeze()


@pytest.mark.usefixtures("unfrozen")
def test_a_server_app_freezes_what_its_start_built(conf: cfg.ConfigOpts, db: Database) -> None:
    conf.set_override("mode", "embedded", "placement")
    conf.set_override("embedded_connection", "sqlite://", "placement")  # the fixtures' one
    app = create_app(conf, db, settle=True)
    with TestClient(app) as client:
        assert app.state.settled.wait(60)
        frozen = gc.get_freeze_count()
        assert frozen > 10_000  # the modules, the routes, the embedded Placement
        assert client.get("/v2/device_profiles").status_code == 200


@pytest.mark.usefixtures("unfrozen")
def test_an_app_not_asked_to_settle_freezes_nothing(conf: cfg.ConfigOpts, db: Database) -> None:
    app = create_app(conf, db)
    with TestClient(app) as client:
        assert client.get("/v2/device_profiles").status_code == 200
        assert not app.state.settled.is_set()
        assert gc.get_freeze_count() == 0
