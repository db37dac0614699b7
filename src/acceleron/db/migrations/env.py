"""Alembic environment: runs on the connection ``acceleron.db.migrate`` hands it."""

from __future__ import annotations

from alembic import context

from acceleron.db.models import Base

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
