"""The expand phase starts here: its revisions only add to the schema

Revisions up to 0015 are one line. From here on, a schema change is an expand revision
(this directory: new tables, new columns that are nullable or have a server default, new
indexes; the previous release keeps working on the result) or a contract revision
(../contract/: everything else, run once no process of the previous release runs).
This one changes nothing: it names the branch.

Revision ID: expand_0001
Revises: 0015
Create Date: 2026-12-01
"""

from __future__ import annotations

revision = "expand_0001"
down_revision = "0015"
branch_labels = ("expand",)
depends_on = None


def upgrade() -> None:
    pass
