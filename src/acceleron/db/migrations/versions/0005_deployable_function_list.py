"""Deployables: function_uuids, every function a region implements

function_uuid keeps the first one (filters and older readers use it). Rows that
have a function get it as a one-item list, and every host's next report is
diffed in full (its digest is forgotten), which fills in the rest.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

DEPLOYABLES = sa.table(
    "deployables",
    sa.column("id", sa.Integer()),
    sa.column("function_uuid", sa.String()),
    sa.column("function_uuids", sa.JSON()),
)
HOSTS = sa.table("hosts", sa.column("report_digest", sa.String()))


def upgrade() -> None:
    with op.batch_alter_table("deployables") as batch:
        batch.add_column(
            sa.Column("function_uuids", sa.JSON(), nullable=False, server_default="[]")
        )
    conn = op.get_bind()
    with_function = conn.execute(
        sa.select(DEPLOYABLES.c.id, DEPLOYABLES.c.function_uuid).where(
            DEPLOYABLES.c.function_uuid.is_not(None)
        )
    ).all()
    if with_function:
        conn.execute(
            sa.update(DEPLOYABLES)
            .where(DEPLOYABLES.c.id == sa.bindparam("row_id"))
            .values(function_uuids=sa.bindparam("functions", type_=sa.JSON())),
            [{"row_id": row.id, "functions": [row.function_uuid]} for row in with_function],
        )
    conn.execute(sa.update(HOSTS).values(report_digest=None))
