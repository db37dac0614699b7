"""Quotas: accelerator_requests.resource_class, and quota_projects to count under

A request's resource class is what a project's limits count. Requests made before
this revision get theirs from their device profile's group: the group's resource
classes in the order the group names them, one request per unit, as ``create``
makes them.

Revision ID: 0010
Revises: 0008
Create Date: 2026-11-24
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def _classes(groups: Any) -> list[list[str]]:
    """Per group, the resource class of each of its requests, in order."""
    if isinstance(groups, str):
        groups = json.loads(groups)
    found = []
    for group in groups or []:
        classes: list[str] = []
        for key, value in group.items():
            if key.startswith("resources:") and str(value).isdigit():
                classes.extend([key[len("resources:") :]] * int(value))
        found.append(classes)
    return found


def upgrade() -> None:
    with op.batch_alter_table("accelerator_requests") as batch:
        batch.add_column(sa.Column("resource_class", sa.String(length=255), nullable=True))
    op.create_table(
        "quota_projects",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_quota_projects")),
        sa.UniqueConstraint("project_id", name=op.f("uq_quota_projects_project_id")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    conn = op.get_bind()
    profiles = {
        row.id: _classes(row.groups)
        for row in conn.execute(sa.text("SELECT id, groups FROM device_profiles"))
    }
    arqs = conn.execute(
        sa.text(
            "SELECT id, device_profile_id, device_profile_group_id FROM accelerator_requests "
            "ORDER BY id"
        )
    )
    seen: dict[tuple[int, int], int] = {}  # (profile, group) -> requests of it met so far
    updates = []
    for arq in arqs:
        classes = profiles.get(arq.device_profile_id, [])
        group = (
            classes[arq.device_profile_group_id]
            if arq.device_profile_group_id < len(classes)
            else []
        )
        if group:
            key = (arq.device_profile_id, arq.device_profile_group_id)
            index = seen.get(key, 0)
            seen[key] = index + 1
            updates.append({"id": arq.id, "rc": group[index % len(group)]})
    if updates:
        conn.execute(
            sa.text("UPDATE accelerator_requests SET resource_class = :rc WHERE id = :id"),
            updates,
        )
