"""Indexes for a claim's survey: a few holders at random, and the multi-function regions

A claim picks ``TREES_TRIED`` hosts at random among those holding a wanted function
(and among those with a device of a class asked for). It read every holder to do so
(4,000 regions at 1,000 hosts, 20 ms). It now walks the regions of that function
(``function_key``), or the devices of that type, in ``uuid`` order from a random
point, which these indexes serve; the regions of the hosts chosen are then read
through their compute node provider (``hosts.rp_uuid``).

``deployables.several_functions`` marks the few regions holding several functions,
which ``function_key`` (the first) does not find alone: they were found by a scan of
every deployable. Existing rows get theirs here.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-26
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

DEPLOYABLES = sa.table(
    "deployables",
    sa.column("id", sa.Integer()),
    sa.column("function_uuid", sa.String()),
    sa.column("function_uuids", sa.JSON()),
    sa.column("several_functions", sa.Boolean()),
)


def _several(function: str, listed: Any) -> bool:
    """The rule of this revision: the list counts when it starts with ``function``."""
    if isinstance(listed, str):  # a driver without JSON decoding
        listed = json.loads(listed)
    listed = list(listed or [])
    return listed[:1] == [function] and len(listed) > 1


def upgrade() -> None:
    with op.batch_alter_table("deployables") as batch:
        batch.add_column(
            sa.Column("several_functions", sa.Boolean(), nullable=False, server_default="0")
        )
        batch.create_index(batch.f("ix_deployables_several_functions"), ["several_functions"])
        batch.drop_index(batch.f("ix_deployables_function_key"))
        batch.create_index(batch.f("ix_deployables_function_key_uuid"), ["function_key", "uuid"])
    with op.batch_alter_table("devices") as batch:
        batch.drop_index(batch.f("ix_devices_type"))
        batch.create_index(batch.f("ix_devices_type_uuid"), ["type", "uuid"])
    with op.batch_alter_table("hosts") as batch:
        batch.create_index(batch.f("ix_hosts_rp_uuid"), ["rp_uuid"])
    conn = op.get_bind()
    rows = conn.execute(
        sa.select(
            DEPLOYABLES.c.id, DEPLOYABLES.c.function_uuid, DEPLOYABLES.c.function_uuids
        ).where(DEPLOYABLES.c.function_uuid.is_not(None))
    ).all()
    several = [{"row_id": r.id} for r in rows if _several(r.function_uuid, r.function_uuids)]
    if several:
        conn.execute(
            sa.update(DEPLOYABLES)
            .where(DEPLOYABLES.c.id == sa.bindparam("row_id"))
            .values(several_functions=True),
            several,
        )


def downgrade() -> None:
    with op.batch_alter_table("hosts") as batch:
        batch.drop_index(batch.f("ix_hosts_rp_uuid"))
    with op.batch_alter_table("devices") as batch:
        batch.drop_index(batch.f("ix_devices_type_uuid"))
        batch.create_index(batch.f("ix_devices_type"), ["type"])
    with op.batch_alter_table("deployables") as batch:
        batch.drop_index(batch.f("ix_deployables_function_key_uuid"))
        batch.create_index(batch.f("ix_deployables_function_key"), ["function_key"])
        batch.drop_index(batch.f("ix_deployables_several_functions"))
        batch.drop_column("several_functions")
