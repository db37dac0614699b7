"""The contract phase starts here: its revisions drop, rename, constrain and move data

Run by ``acceleron db upgrade --contract`` once no process of the previous release
runs (docs/install.md, "Upgrades"). A contract revision that needs an expand one names it
in ``depends_on``. This one changes nothing: it names the branch.

Revision ID: contract_0001
Revises: 0015
Create Date: 2026-12-01
"""

from __future__ import annotations

revision = "contract_0001"
down_revision = "0015"
branch_labels = ("contract",)
depends_on = None


def upgrade() -> None:
    pass
