"""claims.allocations: what a claim allocated in Placement, shown from 2.16

A claim's client reads its allocations from the claim rather than asking Placement
once more. Claims made before this revision show none (null): Placement has them.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("claims") as batch:
        batch.add_column(sa.Column("allocations", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("claims") as batch:
        batch.drop_column("allocations")
