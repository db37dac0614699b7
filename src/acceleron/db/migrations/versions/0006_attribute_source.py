"""attributes.source: who set an attribute, its host's agent or an operator

Every existing attribute came from an agent's report. Reports reconcile only the
agent's attributes, so an operator's (POST /v2/attributes) outlives them.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attributes") as batch:
        batch.add_column(
            sa.Column("source", sa.String(length=16), nullable=False, server_default="agent")
        )
