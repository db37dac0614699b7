"""deployables.provenance: what Acceleron loaded into a region, for whom, how verified

A JSON record written when a program task ends (the bitstream, the project of the
request that loaded it, whether and by which certificate its signature verified, the
functions it brought, when). A held image is reused for another request only where that
request's project could have loaded it itself (service/provenance.py). Null: Acceleron
loaded nothing there; what the region holds was loaded outside it.

Revision ID: expand_0002
Revises: expand_0001
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "expand_0002"
down_revision = "expand_0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("deployables") as batch:
        batch.add_column(sa.Column("provenance", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("deployables") as batch:
        batch.drop_column("provenance")
