"""What a claim's view of the hosts reads, in the database rather than in each process

* ``hosts.published``: what the host's last Placement sync published, as a claim's
  view reads it (its providers with accelerators: capacity, traits, parent), with the
  generation it published; null until a sync of this release has published the host;
* ``placement_providers.stale_until``: until when claims ask Placement's candidate
  query about the provider rather than trust the view (the database's time);
* an index on ``accelerator_requests.device_rp_uuid``: the view counts what requests
  hold on each provider of the hosts it reads.

Each API process kept both in memory: one process learnt a provider was stale while
the others kept choosing it.

Revision ID: expand_0008
Revises: expand_0007
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "expand_0008"
down_revision = "expand_0007"
branch_labels = None
depends_on = None

TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    with op.batch_alter_table("hosts") as batch:
        batch.add_column(sa.Column("published", sa.JSON(), nullable=True))
    with op.batch_alter_table("placement_providers") as batch:
        batch.add_column(sa.Column("stale_until", TIMESTAMP, nullable=True))
    with op.batch_alter_table("accelerator_requests") as batch:
        batch.create_index(batch.f("ix_accelerator_requests_device_rp_uuid"), ["device_rp_uuid"])


def downgrade() -> None:
    with op.batch_alter_table("accelerator_requests") as batch:
        batch.drop_index(batch.f("ix_accelerator_requests_device_rp_uuid"))
    with op.batch_alter_table("placement_providers") as batch:
        batch.drop_column("stale_until")
    with op.batch_alter_table("hosts") as batch:
        batch.drop_column("published")
