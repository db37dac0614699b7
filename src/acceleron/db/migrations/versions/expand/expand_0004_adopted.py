"""What ``acceleron adopt cyborg`` took over, one row per object of Cyborg's

* ``adopted``: a device profile, an accelerator request, a provider of Cyborg's (as
  Placement had it before the adoption first changed it) or a server's allocation (as it
  was on Cyborg's providers), by kind and uuid: a later run adopts only what is not
  there, and the way back reads what Cyborg's providers and allocations were
  (service/adopt.py).

Revision ID: expand_0004
Revises: expand_0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "expand_0004"
down_revision = "expand_0003"
branch_labels = None
depends_on = None

TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "adopted",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_adopted")),
        sa.UniqueConstraint("kind", "uuid", name=op.f("uq_adopted_kind_uuid")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )


def downgrade() -> None:
    op.drop_table("adopted")
