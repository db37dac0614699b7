"""initial schema

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-22 04:57:59.326124
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# Microseconds on every backend (MariaDB's DATETIME drops them unless told).
TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "bitstreams",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("vendor", sa.String(length=64), nullable=True),
        sa.Column("function_uuid", sa.String(length=64), nullable=True),
        sa.Column("function_name", sa.String(length=255), nullable=True),
        sa.Column("region_type_uuid", sa.String(length=64), nullable=True),
        sa.Column("properties", sa.JSON(), nullable=False),
        sa.Column("owner", sa.String(length=255), nullable=True),
        sa.Column("visibility", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_bitstreams")),
        sa.UniqueConstraint("uuid", name=op.f("uq_bitstreams_uuid")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    with op.batch_alter_table("bitstreams", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_bitstreams_function_name"), ["function_name"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_bitstreams_function_uuid"), ["function_uuid"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_bitstreams_name"), ["name"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_bitstreams_region_type_uuid"), ["region_type_uuid"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_bitstreams_sha256"), ["sha256"], unique=False)

    op.create_table(
        "device_profiles",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("description", sa.String(length=255), nullable=True),
        sa.Column("groups", sa.JSON(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_device_profiles")),
        sa.UniqueConstraint("name", name=op.f("uq_device_profiles_name")),
        sa.UniqueConstraint("uuid", name=op.f("uq_device_profiles_uuid")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    op.create_table(
        "devices",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("hostname", sa.String(length=255), nullable=False),
        sa.Column("pci_address", sa.String(length=32), nullable=False),
        sa.Column("type", sa.String(length=32), nullable=False),
        sa.Column("vendor", sa.String(length=16), nullable=False),
        sa.Column("vendor_name", sa.String(length=64), nullable=False),
        sa.Column("product_id", sa.String(length=16), nullable=False),
        sa.Column("model", sa.String(length=255), nullable=False),
        sa.Column("driver_name", sa.String(length=64), nullable=False),
        sa.Column("std_board_info", sa.JSON(), nullable=False),
        sa.Column("vendor_board_info", sa.JSON(), nullable=False),
        sa.Column("numa_node", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("health", sa.String(length=16), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_devices")),
        sa.UniqueConstraint(
            "hostname", "pci_address", name=op.f("uq_devices_hostname_pci_address")
        ),
        sa.UniqueConstraint("uuid", name=op.f("uq_devices_uuid")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    with op.batch_alter_table("devices", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_devices_hostname"), ["hostname"], unique=False)
        batch_op.create_index(batch_op.f("ix_devices_type"), ["type"], unique=False)
        batch_op.create_index(batch_op.f("ix_devices_vendor"), ["vendor"], unique=False)

    op.create_table(
        "hosts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("hostname", sa.String(length=255), nullable=False),
        sa.Column("rp_uuid", sa.String(length=36), nullable=True),
        sa.Column("agent_version", sa.String(length=64), nullable=True),
        sa.Column("report_digest", sa.String(length=64), nullable=True),
        sa.Column("last_report_at", TIMESTAMP, nullable=True),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.Column("synced_generation", sa.BigInteger(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_hosts")),
        sa.UniqueConstraint("hostname", name=op.f("uq_hosts_hostname")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    op.create_table(
        "deployables",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("parent_id", sa.Integer(), nullable=True),
        sa.Column("root_id", sa.Integer(), nullable=True),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("num_accelerators", sa.Integer(), nullable=False),
        sa.Column("resource_class", sa.String(length=255), nullable=True),
        sa.Column("traits", sa.JSON(), nullable=False),
        sa.Column("rp_uuid", sa.String(length=36), nullable=True),
        sa.Column("driver_name", sa.String(length=64), nullable=False),
        sa.Column("bitstream_id", sa.String(length=36), nullable=True),
        sa.Column("region_type", sa.String(length=64), nullable=True),
        sa.Column("function_uuid", sa.String(length=64), nullable=True),
        sa.Column("assignable", sa.Boolean(), nullable=False),
        sa.Column("availability", sa.String(length=16), nullable=False),
        sa.Column("instance_uuid", sa.String(length=36), nullable=True),
        sa.Column("program_phase", sa.String(length=32), nullable=True),
        sa.Column("program_progress", sa.Integer(), nullable=True),
        sa.Column("program_error", sa.Text(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=True),
        sa.ForeignKeyConstraint(
            ["device_id"],
            ["devices.id"],
            name=op.f("fk_deployables_device_id_devices"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["parent_id"], ["deployables.id"], name=op.f("fk_deployables_parent_id_deployables")
        ),
        sa.ForeignKeyConstraint(
            ["root_id"], ["deployables.id"], name=op.f("fk_deployables_root_id_deployables")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deployables")),
        sa.UniqueConstraint("device_id", "key", name=op.f("uq_deployables_device_id_key")),
        sa.UniqueConstraint("uuid", name=op.f("uq_deployables_uuid")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    with op.batch_alter_table("deployables", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_deployables_instance_uuid"), ["instance_uuid"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_deployables_name"), ["name"], unique=False)
        batch_op.create_index(batch_op.f("ix_deployables_rp_uuid"), ["rp_uuid"], unique=False)

    op.create_table(
        "accelerator_requests",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=True),
        sa.Column("device_profile_id", sa.Integer(), nullable=False),
        sa.Column("device_profile_group_id", sa.Integer(), nullable=False),
        sa.Column("hostname", sa.String(length=255), nullable=True),
        sa.Column("device_rp_uuid", sa.String(length=36), nullable=True),
        sa.Column("instance_uuid", sa.String(length=36), nullable=True),
        sa.Column("deployable_id", sa.Integer(), nullable=True),
        sa.Column("bind_started_at", TIMESTAMP, nullable=True),
        sa.Column("phase", sa.String(length=32), nullable=True),
        sa.Column("progress", sa.Integer(), nullable=True),
        sa.Column("failure_reason", sa.Text(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=True),
        sa.ForeignKeyConstraint(
            ["deployable_id"],
            ["deployables.id"],
            name=op.f("fk_accelerator_requests_deployable_id_deployables"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["device_profile_id"],
            ["device_profiles.id"],
            name=op.f("fk_accelerator_requests_device_profile_id_device_profiles"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_accelerator_requests")),
        sa.UniqueConstraint("uuid", name=op.f("uq_accelerator_requests_uuid")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    with op.batch_alter_table("accelerator_requests", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_accelerator_requests_instance_uuid"), ["instance_uuid"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_accelerator_requests_project_id"), ["project_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_accelerator_requests_state"), ["state"], unique=False)

    op.create_table(
        "attributes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("deployable_id", sa.Integer(), nullable=False),
        sa.Column("parent_id", sa.Integer(), nullable=True),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("value", sa.Text(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=True),
        sa.ForeignKeyConstraint(
            ["deployable_id"],
            ["deployables.id"],
            name=op.f("fk_attributes_deployable_id_deployables"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["parent_id"],
            ["attributes.id"],
            name=op.f("fk_attributes_parent_id_attributes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_attributes")),
        sa.UniqueConstraint("uuid", name=op.f("uq_attributes_uuid")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    with op.batch_alter_table("attributes", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_attributes_deployable_id_key"), ["deployable_id", "key"], unique=False
        )

    op.create_table(
        "attach_handles",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("deployable_id", sa.Integer(), nullable=False),
        sa.Column("type", sa.String(length=16), nullable=False),
        sa.Column("address", sa.String(length=255), nullable=False),
        sa.Column("attach_info", sa.JSON(), nullable=False),
        sa.Column("in_use", sa.Boolean(), nullable=False),
        sa.Column("arq_id", sa.Integer(), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=True),
        sa.ForeignKeyConstraint(
            ["arq_id"],
            ["accelerator_requests.id"],
            name=op.f("fk_attach_handles_arq_id_accelerator_requests"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["deployable_id"],
            ["deployables.id"],
            name=op.f("fk_attach_handles_deployable_id_deployables"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_attach_handles")),
        sa.UniqueConstraint("arq_id", name=op.f("uq_attach_handles_arq_id")),
        sa.UniqueConstraint(
            "deployable_id", "address", name=op.f("uq_attach_handles_deployable_id_address")
        ),
        sa.UniqueConstraint("uuid", name=op.f("uq_attach_handles_uuid")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    with op.batch_alter_table("attach_handles", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_attach_handles_deployable_id_in_use"),
            ["deployable_id", "in_use"],
            unique=False,
        )

    op.create_table(
        "tasks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("hostname", sa.String(length=255), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("phase", sa.String(length=32), nullable=True),
        sa.Column("progress", sa.Integer(), nullable=True),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("arq_id", sa.Integer(), nullable=True),
        sa.Column("deployable_id", sa.Integer(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=True),
        sa.ForeignKeyConstraint(
            ["arq_id"],
            ["accelerator_requests.id"],
            name=op.f("fk_tasks_arq_id_accelerator_requests"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["deployable_id"],
            ["deployables.id"],
            name=op.f("fk_tasks_deployable_id_deployables"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tasks")),
        sa.UniqueConstraint("uuid", name=op.f("uq_tasks_uuid")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_tasks_hostname_state"), ["hostname", "state"], unique=False
        )
