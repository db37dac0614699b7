"""attach_handles (deployable_id, arq_id): a deployable's free handles, by index

A bind looks for a free handle of one deployable (``arq_id IS NULL``) and counts them
after. SQLite answered both through the unique arq_id index, walking every free
handle of every host.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attach_handles") as batch:
        batch.create_index(
            batch.f("ix_attach_handles_deployable_id_arq_id"), ["deployable_id", "arq_id"]
        )


def downgrade() -> None:
    with op.batch_alter_table("attach_handles") as batch:
        batch.drop_index(batch.f("ix_attach_handles_deployable_id_arq_id"))
