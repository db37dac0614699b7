"""Migrations upgrade an empty database to exactly the models, on every backend."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from acceleron.db import migrate
from acceleron.db.models import Base
from acceleron.db.session import Database


def test_upgrade_from_empty_matches_the_models(migrated_db: Database) -> None:
    assert migrate.current(migrated_db) == migrate.head()
    with migrated_db.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        differences = compare_metadata(context, Base.metadata)
    assert differences == []


def test_every_table_is_created(migrated_db: Database) -> None:
    tables = set(inspect(migrated_db.engine).get_table_names())
    assert set(Base.metadata.tables) <= tables
    assert "alembic_version" in tables


def test_upgrade_again_is_a_no_op(migrated_db: Database) -> None:
    migrate.upgrade(migrated_db)
    migrate.check(migrated_db)
