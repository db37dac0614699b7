"""Who publishes a host's pending change to Placement

* ``hosts.sync_owner``: the token of the API process publishing the host's pending
  change to Placement, null when none is;
* ``hosts.sync_until``: until when that process's lease runs (the database's time):
  another process takes the host once it has passed.

Every API process's sync pass took every pending host, so two processes published one
host at once, each writing what the other had written.

Revision ID: expand_0006
Revises: expand_0005
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "expand_0006"
down_revision = "expand_0005"
branch_labels = None
depends_on = None

TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    with op.batch_alter_table("hosts") as batch:
        batch.add_column(sa.Column("sync_owner", sa.String(32), nullable=True))
        batch.add_column(sa.Column("sync_until", TIMESTAMP, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("hosts") as batch:
        batch.drop_column("sync_until")
        batch.drop_column("sync_owner")
