"""The health of one attach handle

* ``attach_handles.health``: the driver's verdict on the handle alone (``healthy``,
  ``degraded`` or ``unhealthy``): the GPU instance in one slot of a GPU carved on demand;
* ``attach_handles.health_reason``: why, when it is not healthy.

A fault inside one GPU instance made its whole GPU unhealthy: every slice of it was
reserved, where only that instance's should be.

Revision ID: expand_0007
Revises: expand_0006
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "expand_0007"
down_revision = "expand_0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attach_handles") as batch:
        batch.add_column(
            sa.Column("health", sa.String(16), nullable=False, server_default="healthy")
        )
        batch.add_column(sa.Column("health_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attach_handles") as batch:
        batch.drop_column("health_reason")
        batch.drop_column("health")
