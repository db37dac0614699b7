"""claims.step, requests, owner, lease_until: a claim's progress, so that it can be finished

A claim is made in several steps (its row, Placement's allocation, its requests, their
bind) and released in several. Each step is recorded in the claim's row with the
process at work on it and a lease, so that a second DELETE, a restart of the API or the
reconciler finishes or undoes a claim whose maker is gone (docs/claims.md). ``state``
is indexed: those passes look for the claims being made or released.

Claims made before this revision have no step (an established one is ``done``).

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

CLAIMS = sa.table("claims", sa.column("state", sa.String()), sa.column("step", sa.String()))
# Microseconds on every backend (MariaDB's DATETIME drops them unless told).
TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    with op.batch_alter_table("claims") as batch:
        batch.add_column(sa.Column("step", sa.String(16), nullable=True))
        batch.add_column(sa.Column("requests", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("owner", sa.String(255), nullable=True))
        batch.add_column(sa.Column("lease_until", TIMESTAMP, nullable=True))
        batch.create_index(batch.f("ix_claims_state"), ["state"])
    op.execute(
        sa.update(CLAIMS).where(CLAIMS.c.state.in_(("binding", "bound"))).values(step="done")
    )


def downgrade() -> None:
    with op.batch_alter_table("claims") as batch:
        batch.drop_index(batch.f("ix_claims_state"))
        batch.drop_column("lease_until")
        batch.drop_column("owner")
        batch.drop_column("requests")
        batch.drop_column("step")
