"""Work that one API process of a region does at a time

* ``leases``: a row a kind of work (``name``), the API process holding it (``owner``, a
  token new for each process) and until when (``until``, the database's time).

Every API process ran the periodic verification of the hosts' providers and the
reconciler's passes, each reading every host's tree in Placement once an interval: the
region's Placement served them once for each API process.

Revision ID: expand_0009
Revises: expand_0008
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "expand_0009"
down_revision = "expand_0008"
branch_labels = None
depends_on = None

TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("owner", sa.String(32), nullable=False),
        sa.Column("until", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_leases")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )


def downgrade() -> None:
    op.drop_table("leases")
