"""Cleaning between tenants, and each device's history of tenancies

* ``attach_handles.cleaning``: null when the handle may be handed out; ``waiting`` (given
  back, its region still used by another request), ``cleaning`` (a clean task is at work)
  or ``failed`` (its device or region went into maintenance) otherwise;
* ``deployables.cleaning``: how many of its handles are not clean, which Placement holds
  reserved (server default 0: the previous release inserts rows without it);
* ``hosts.task_format``: the task format the host's agent last claimed tasks with (an
  agent too old to clean is not handed clean tasks);
* ``tenancies``: each handle's tenancy once given back: the project, the instance, what
  the region held, how and when it was cleaned (service/tenancies.py).

Revision ID: expand_0003
Revises: expand_0002
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "expand_0003"
down_revision = "expand_0002"
branch_labels = None
depends_on = None

TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    with op.batch_alter_table("attach_handles") as batch:
        batch.add_column(sa.Column("cleaning", sa.String(16), nullable=True))
    with op.batch_alter_table("deployables") as batch:
        batch.add_column(sa.Column("cleaning", sa.Integer(), nullable=False, server_default="0"))
    with op.batch_alter_table("hosts") as batch:
        batch.add_column(sa.Column("task_format", sa.String(16), nullable=True))
    op.create_table(
        "tenancies",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("deployable_id", sa.Integer(), nullable=True),
        sa.Column("deployable", sa.String(length=255), nullable=False),
        sa.Column("handle", sa.String(length=255), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=True),
        sa.Column("instance_uuid", sa.String(length=36), nullable=True),
        sa.Column("arq_uuid", sa.String(length=36), nullable=False),
        sa.Column("bound_at", TIMESTAMP, nullable=True),
        sa.Column("released_at", TIMESTAMP, nullable=False),
        sa.Column("held", sa.JSON(), nullable=True),
        sa.Column("method", sa.String(length=16), nullable=False),
        sa.Column("cleaning", sa.String(length=16), nullable=False),
        sa.Column("task_uuid", sa.String(length=36), nullable=True),
        sa.Column("cleaned_at", TIMESTAMP, nullable=True),
        sa.Column("cleaning_seconds", sa.Float(), nullable=True),
        sa.Column("cleaning_error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["device_id"],
            ["devices.id"],
            name=op.f("fk_tenancies_device_id_devices"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["deployable_id"],
            ["deployables.id"],
            name=op.f("fk_tenancies_deployable_id_deployables"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tenancies")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    op.create_index(
        op.f("ix_tenancies_device_id_released_at"), "tenancies", ["device_id", "released_at"]
    )
    op.create_index(op.f("ix_tenancies_released_at"), "tenancies", ["released_at"])
    op.create_index(op.f("ix_tenancies_task_uuid"), "tenancies", ["task_uuid"])


def downgrade() -> None:
    op.drop_table("tenancies")
    with op.batch_alter_table("hosts") as batch:
        batch.drop_column("task_format")
    with op.batch_alter_table("deployables") as batch:
        batch.drop_column("cleaning")
    with op.batch_alter_table("attach_handles") as batch:
        batch.drop_column("cleaning")
