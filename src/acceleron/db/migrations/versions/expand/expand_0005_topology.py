"""Where each device sits: its PCIe switch and its NVLink domain

* ``devices.pcie_switch``: the PCI address of the bridge that is the device's nearest
  PCIe switch (the common upstream bridge in sysfs); null when the device hangs off the
  root complex directly or the driver cannot tell;
* ``devices.nvlink_domain``: a name shared by the devices of one host that NVLink or
  NVSwitch joins; null when the device has no NVLink peer.

With ``numa_node`` they are what a request's accelerators can be asked to share, and
what the bind packs by (issue 41).

Revision ID: expand_0005
Revises: expand_0004
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "expand_0005"
down_revision = "expand_0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("devices") as batch:
        batch.add_column(sa.Column("pcie_switch", sa.String(32), nullable=True))
        batch.add_column(sa.Column("nvlink_domain", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("devices") as batch:
        batch.drop_column("nvlink_domain")
        batch.drop_column("pcie_switch")
