"""Device and deployable health (state, reason, since) and maintenance (reason, since)

Health words become healthy, degraded and unhealthy ("ok" and "failed" were the old
words of devices.health). Deployables get a health of their own (a region whose port
failed) and an operator status, so one region can be put in maintenance.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# Microseconds on every backend, as the models' Timestamp.
TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def _health_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("health_reason", sa.Text(), nullable=True),
        sa.Column("health_since", TIMESTAMP, nullable=True),
        sa.Column("maintenance_reason", sa.String(length=255), nullable=True),
        sa.Column("maintenance_since", TIMESTAMP, nullable=True),
    ]


def upgrade() -> None:
    with op.batch_alter_table("devices") as batch:
        for column in _health_columns():
            batch.add_column(column)
    with op.batch_alter_table("deployables") as batch:
        batch.add_column(
            sa.Column("health", sa.String(length=16), nullable=False, server_default="healthy")
        )
        batch.add_column(
            sa.Column("status", sa.String(length=16), nullable=False, server_default="enabled")
        )
        for column in _health_columns():
            batch.add_column(column)
    devices = sa.table("devices", sa.column("health", sa.String(16)))
    for old, new in (("ok", "healthy"), ("failed", "unhealthy")):
        op.execute(devices.update().where(devices.c.health == old).values(health=new))
