"""Deployables: accelerator type, programmable, memory; attach handles: host_in_use

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("deployables") as batch:
        batch.add_column(sa.Column("accelerator_type", sa.String(length=32), nullable=True))
        batch.add_column(
            sa.Column("programmable", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column("memory_mb", sa.Integer(), nullable=True))
    with op.batch_alter_table("attach_handles") as batch:
        batch.add_column(
            sa.Column("host_in_use", sa.Boolean(), nullable=False, server_default=sa.false())
        )
