"""Identical accelerators of a host published as one provider (a pool)

It changes nothing in the schema. ``[placement] pools = auto`` (the default) publishes
pools once it is applied: ``acceleron db upgrade --contract`` runs once no process of the
previous release runs, and a process of the previous release refuses a schema with a
contract revision it does not know. So no API of the previous release publishes one
provider per device while one of this release publishes pools (docs/placement.md).

Revision ID: contract_0002
Revises: contract_0001
Create Date: 2026-11-29
"""

from __future__ import annotations

revision = "contract_0002"
down_revision = "contract_0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
