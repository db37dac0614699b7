"""Schema migrations: ``acceleron db upgrade`` and ``acceleron db version``."""

from __future__ import annotations

import logging
import os

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from acceleron.db.session import Database
from acceleron.exceptions import SchemaOutOfDate

LOG = logging.getLogger(__name__)
_SCRIPTS = os.path.join(os.path.dirname(__file__), "migrations")


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", _SCRIPTS)
    return config


def upgrade(db: Database, revision: str = "head") -> None:
    """Bring the schema up to ``revision`` (the newest by default)."""
    config = _config()
    with db.engine.begin() as connection:
        before = MigrationContext.configure(connection).get_current_revision()
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
        after = MigrationContext.configure(connection).get_current_revision()
    if after != before:
        LOG.info("Database schema upgraded: %s -> %s", before or "empty", after)


def current(db: Database) -> str | None:
    """The revision the database is at, or None for an empty database."""
    with db.engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head() -> str:
    revision = ScriptDirectory.from_config(_config()).get_current_head()
    assert revision is not None
    return revision


def check(db: Database) -> None:
    """Raise SchemaOutOfDate unless the database is at the newest revision."""
    at = current(db)
    if at != head():
        raise SchemaOutOfDate(
            f"The database schema is at revision {at or 'none (empty database)'} but this "
            f"Acceleron needs {head()}: run 'acceleron db upgrade' first."
        )
