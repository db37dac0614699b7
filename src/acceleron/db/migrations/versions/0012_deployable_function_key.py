"""deployables.function_key: the function id as traits spell it, indexed

A claim naming a function looks up the regions holding it by this key instead of
folding every region's function id in SQL (a scan of every deployable, three times
per claim). Existing rows get theirs here.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

DEPLOYABLES = sa.table(
    "deployables",
    sa.column("id", sa.Integer()),
    sa.column("function_uuid", sa.String()),
    sa.column("function_key", sa.String()),
)


def _fold(function: str) -> str:
    """The rule of this revision: upper-case hex, separators dropped."""
    return function.strip().replace("-", "").replace("_", "").upper()


def upgrade() -> None:
    with op.batch_alter_table("deployables") as batch:
        batch.add_column(sa.Column("function_key", sa.String(length=64), nullable=True))
        batch.create_index(batch.f("ix_deployables_function_key"), ["function_key"])
    conn = op.get_bind()
    rows = conn.execute(
        sa.select(DEPLOYABLES.c.id, DEPLOYABLES.c.function_uuid).where(
            DEPLOYABLES.c.function_uuid.is_not(None)
        )
    ).all()
    if rows:
        conn.execute(
            sa.update(DEPLOYABLES)
            .where(DEPLOYABLES.c.id == sa.bindparam("row_id"))
            .values(function_key=sa.bindparam("key")),
            [{"row_id": row.id, "key": _fold(row.function_uuid)} for row in rows],
        )


def downgrade() -> None:
    with op.batch_alter_table("deployables") as batch:
        batch.drop_index(batch.f("ix_deployables_function_key"))
        batch.drop_column("function_key")
