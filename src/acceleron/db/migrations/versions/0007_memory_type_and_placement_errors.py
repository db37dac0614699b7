"""deployables.memory_type and hosts.placement_errors

memory_type: the kind of a deployable's memory (DDR, HBM, GDDR...), which names its
memory resource class (spec 001). Every host's next report is diffed in full (its
digest is forgotten), which fills it in.

placement_errors: why the host's last sync left devices out of Placement (an invalid
name, say); while there are any, the host is not shown as synced.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

HOSTS = sa.table("hosts", sa.column("report_digest", sa.String()))


def upgrade() -> None:
    with op.batch_alter_table("deployables") as batch:
        batch.add_column(sa.Column("memory_type", sa.String(length=32), nullable=True))
    with op.batch_alter_table("hosts") as batch:
        batch.add_column(
            sa.Column("placement_errors", sa.JSON(), nullable=False, server_default="[]")
        )
    op.get_bind().execute(sa.update(HOSTS).values(report_digest=None))
