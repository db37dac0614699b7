"""Shared fixtures: real databases, migrated once per run, emptied after each test.

Tests that take ``db`` (or anything built on it) run once per backend: SQLite,
PostgreSQL and MariaDB. Each run, and under pytest-xdist each worker of a run,
creates its own database (a SQLite file, a database on the servers at 127.0.0.1)
and drops it at the end, so workers never share one. A backend whose server is not
there is skipped with a message.

``ACCELERON_TEST_DATABASES`` (for example ``sqlite,postgresql,mysql``, as CI sets it,
or ``sqlite`` as ``make check`` does) selects the backends: only those run, and each
of them is demanded, so a server that is not there fails the run. Server URLs can be
changed with ``ACCELERON_TEST_POSTGRESQL_URL`` and ``ACCELERON_TEST_MYSQL_URL``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from oslo_config import cfg

from acceleron import conf as confmod
from acceleron.db import migrate
from acceleron.db.models import Base
from acceleron.db.session import Database
from tests.fixtures import signing
from tests.fixtures.databases import (
    SERVERS,
    create_server_database,
    demanded_backends,
    drop_server_database,
    selected_backends,
)

# The end-to-end suite needs the reference cloud: only `make e2e` (ACCELERON_E2E=1) runs it.
collect_ignore = [] if os.environ.get("ACCELERON_E2E") else ["e2e"]


@pytest.fixture(scope="session", params=selected_backends())
def database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The URL of an empty database of one backend, for this test run (or worker) only."""
    backend: str = request.param
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('sqlite') / 'acceleron.sqlite'}"
        return
    try:
        url = create_server_database(backend)
    except Exception as error:  # the server is not there
        message = f"{backend} server at {SERVERS[backend]} is not reachable: {error}"
        if backend in demanded_backends():
            pytest.fail(f"ACCELERON_TEST_DATABASES demands {backend}, but the {message}")
        pytest.skip(message)
    try:
        yield url
    finally:
        drop_server_database(backend, url)


@pytest.fixture(scope="session")
def migrated_db(database_url: str) -> Iterator[Database]:
    database = Database(database_url)
    migrate.upgrade(database)
    yield database
    database.dispose()


def empty_tables(database: Database) -> None:
    with database.writer() as conn:
        for table in reversed(Base.metadata.sorted_tables):
            # MariaDB checks self-references row by row: unlink the tree first.
            links = {fk.parent.name: None for fk in table.foreign_keys if fk.column.table is table}
            if links:
                conn.execute(table.update().values(links))
            conn.execute(table.delete())


@pytest.fixture
def db(migrated_db: Database) -> Iterator[Database]:
    """A migrated database of each backend, emptied after the test."""
    yield migrated_db
    empty_tables(migrated_db)


@pytest.fixture
def conf(tmp_path: Path) -> cfg.ConfigOpts:
    """A configuration with no file read and its state in the test's own directory."""
    return confmod.load([], config_files=[], overrides={"DEFAULT": {"state_path": str(tmp_path)}})


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Iterator[Database]:
    """A migrated SQLite database of its own, for tests about something else than SQL."""
    database = Database(f"sqlite:///{tmp_path / 'acceleron.sqlite'}")
    migrate.upgrade(database)
    yield database
    database.dispose()


@pytest.fixture
def keep_logging() -> Iterator[None]:
    """Put the root logger back as it was after a command that sets logging up."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture(scope="session")
def ca() -> signing.Signer:
    """A certificate authority for bitstream signers (made once: key generation is slow)."""
    return signing.certificate_authority()


@pytest.fixture(scope="session")
def signer(ca: signing.Signer) -> signing.Signer:
    """A signing certificate issued by ``ca``."""
    return signing.leaf(ca)


@pytest.fixture
def certs(tmp_path: Path, ca: signing.Signer, signer: signing.Signer) -> Path:
    """A certificate directory ([bitstreams] certificate_dir) holding ``ca`` and ``signer``."""
    directory = tmp_path / "certificates"
    ca.save(directory)
    signer.save(directory)
    return directory


# The fixtures that run the real Placement in-process (tests/fixtures/placement.py).
PLACEMENT_FIXTURES = frozenset({"placement", "placement_app"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that runs the real Placement (the tests of tests/functional/placement/,
    and any other that takes its fixture) is marked ``placement``: ``make check`` leaves
    them to ``make test`` (they take a third of its CPU otherwise)."""
    placement_dir = str(Path(__file__).parent / "functional" / "placement")
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = set(callspec.params) if callspec is not None else set()  # not fixtures
        names = set(getattr(item, "fixturenames", ())) - params
        if names & PLACEMENT_FIXTURES or str(item.path).startswith(placement_dir):
            item.add_marker(pytest.mark.placement)
