"""Expand and contract: expand revisions only add, and each release runs where it should.

Every expand revision is applied to a real database (each backend) and the schema is
compared before and after: a table, column, index, unique or foreign key that was there
must still be there, unchanged, and a column added to an existing table must be nullable
or have a server default (the previous release inserts rows without it). A deliberately
bad revision shows that the comparison catches a drop, a rename and such a column.
"""

from __future__ import annotations

import re
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from acceleron.db import migrate
from acceleron.db.session import Database
from acceleron.exceptions import SchemaOutOfDate, UpgradeInProgress
from tests.fixtures.waiting import wait_for

SPLIT = "0015"  # the last revision before the two phases

Snapshot = dict[str, dict[str, Any]]


def snapshot(db: Database) -> Snapshot:
    """Tables, columns (type, nullable, server default), indexes, uniques, foreign keys."""
    shot: Snapshot = {}
    with db.engine.connect() as conn:
        found = inspect(conn)
        for table in found.get_table_names():
            if table == "alembic_version":
                continue
            shot[table] = {
                "columns": {
                    c["name"]: (str(c["type"]), c["nullable"], c.get("default"))
                    for c in found.get_columns(table)
                },
                "indexes": {
                    (i["name"], tuple(i["column_names"]), bool(i["unique"]))
                    for i in found.get_indexes(table)
                },
                "uniques": {tuple(u["column_names"]) for u in found.get_unique_constraints(table)},
                "foreign keys": {
                    (
                        tuple(f["constrained_columns"]),
                        f["referred_table"],
                        tuple(f["referred_columns"]),
                    )
                    for f in found.get_foreign_keys(table)
                },
            }
    return shot


def not_additive(before: Snapshot, after: Snapshot) -> list[str]:
    """What changed from ``before`` to ``after`` that is not an addition the previous
    release keeps working with."""
    found: list[str] = []
    for table, was in before.items():
        now = after.get(table)
        if now is None:
            found.append(f"table {table} dropped or renamed")
            continue
        for column, spec in was["columns"].items():
            if column not in now["columns"]:
                found.append(f"column {table}.{column} dropped or renamed")
            elif now["columns"][column] != spec:
                found.append(f"column {table}.{column} changed: {spec} -> {now['columns'][column]}")
        for kind in ("indexes", "uniques", "foreign keys"):
            found += [
                f"{kind} of {table} dropped or changed: {item}"
                for item in sorted(was[kind] - now[kind], key=repr)
            ]
        for column, (_, nullable, default) in now["columns"].items():
            if column not in was["columns"] and not nullable and default is None:
                found.append(f"column {table}.{column} added NOT NULL without a server default")
    return found


def expand_revisions(scripts: str = migrate.SCRIPTS) -> list[str]:
    """The expand revisions, oldest first."""
    script = ScriptDirectory.from_config(migrate.config(scripts))
    line = [s.revision for s in script.iterate_revisions(f"{migrate.EXPAND}@head", SPLIT)]
    return [r for r in reversed(line) if r != SPLIT]


def check_expand(db: Database, scripts: str = migrate.SCRIPTS) -> dict[str, list[str]]:
    """Each expand revision applied in turn: what it did that is not additive."""
    migrate.upgrade(db, SPLIT, scripts)
    found: dict[str, list[str]] = {}
    for revision in expand_revisions(scripts):
        before = snapshot(db)
        migrate.upgrade(db, revision, scripts)
        found[revision] = not_additive(before, snapshot(db))
    return found


def test_expand_revisions_only_add(fresh_db: Database) -> None:
    found = check_expand(fresh_db)
    assert found and all(problems == [] for problems in found.values()), found


BAD = '''"""A bad expand revision: it drops, renames and adds a column old inserts lack"""

import sqlalchemy as sa
from alembic import op

revision = "expand_9999"
down_revision = "{down}"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("hosts") as batch:
        batch.drop_column("placement_errors")
        batch.add_column(sa.Column("zone", sa.String(32), nullable=False))
    with op.batch_alter_table("devices") as batch:
        batch.alter_column("model", new_column_name="model_name",
                           existing_type=sa.String(255), existing_nullable=False)
    with op.batch_alter_table("claims") as batch:
        batch.drop_index("ix_claims_state")
'''


def test_the_check_catches_a_bad_expand_revision(fresh_db: Database, tmp_path: Path) -> None:
    scripts = tmp_path / "migrations"
    shutil.copytree(migrate.SCRIPTS, scripts, ignore=shutil.ignore_patterns("__pycache__"))
    head = expand_revisions()[-1]
    (scripts / "versions" / "expand" / "expand_9999_bad.py").write_text(BAD.format(down=head))
    found = check_expand(fresh_db, str(scripts))
    assert all(problems == [] for revision, problems in found.items() if revision != "expand_9999")
    assert sorted(found["expand_9999"]) == [
        "column devices.model dropped or renamed",
        "column devices.model_name added NOT NULL without a server default",  # the rename
        "column hosts.placement_errors dropped or renamed",
        "column hosts.zone added NOT NULL without a server default",
        "indexes of claims dropped or changed: ('ix_claims_state', ('state',), False)",
    ]


def test_each_phase_lives_in_its_directory_and_is_named_after_it() -> None:
    """A revision's phase is read from its name (by releases that lack its script)."""
    script = ScriptDirectory.from_config(migrate.config())
    versions = Path(migrate.SCRIPTS) / "versions"
    for revision in script.walk_revisions():
        where = Path(revision.path).parent
        phase = migrate.phase_of(revision.revision)
        if phase is None:
            assert where == versions and re.fullmatch(r"\d{4}", revision.revision)
            assert revision.revision <= SPLIT, f"{revision.revision}: name it expand_/contract_"
        else:
            assert where == versions / phase, revision.path
            assert re.fullmatch(rf"{phase}_\d{{4}}", revision.revision), revision.revision
            assert phase in revision.branch_labels, revision.revision
    assert sorted(str(migrate.phase_of(head)) for head in script.get_heads()) == [
        "contract",
        "expand",
    ]
    roots = [
        (migrate.phase_of(s.revision), s.down_revision)
        for s in script.walk_revisions()
        if migrate.phase_of(s.revision) not in (None, migrate.phase_of(str(s.down_revision)))
    ]
    assert sorted(roots) == [("contract", SPLIT), ("expand", SPLIT)]  # each starts after 0015


def _set_revisions(db: Database, *revisions: str) -> None:
    with db.engine.begin() as conn:
        conn.execute(text("DELETE FROM alembic_version"))
        for revision in revisions:
            conn.execute(text("INSERT INTO alembic_version VALUES (:r)"), {"r": revision})


def test_an_api_runs_once_expanded_and_beside_a_newer_expand(fresh_db: Database) -> None:
    """What ``acceleron api`` accepts at start (the lead of a rolling upgrade)."""
    with pytest.raises(SchemaOutOfDate, match="empty"):
        migrate.check(fresh_db)
    migrate.upgrade(fresh_db, SPLIT)  # the previous release's schema
    with pytest.raises(SchemaOutOfDate, match="run 'acceleron db upgrade --expand' first"):
        migrate.check(fresh_db)
    with pytest.raises(SchemaOutOfDate, match="expand phase is incomplete"):
        migrate.contract(fresh_db)
    migrate.expand(fresh_db)
    migrate.check(fresh_db)  # contract pending: runs
    expand_head, contract_head = migrate.state(fresh_db).expand.head, "contract_0002"
    _set_revisions(fresh_db, "expand_9999", contract_head)  # a newer release expanded it
    migrate.check(fresh_db)
    schema = migrate.state(fresh_db)
    assert schema.expand.newer and not schema.expand.pending and not schema.contract.pending
    with pytest.raises(SchemaOutOfDate, match="expand_9999, which this Acceleron does not"):
        migrate.expand(fresh_db)
    _set_revisions(fresh_db, expand_head, "contract_9999")  # a newer release contracted it
    with pytest.raises(SchemaOutOfDate, match="contract_9999, which this Acceleron does not"):
        migrate.check(fresh_db)
    _set_revisions(fresh_db, "0099")  # neither phase: not a schema it knows
    with pytest.raises(SchemaOutOfDate, match="0099"):
        migrate.check(fresh_db)
    assert migrate.state(fresh_db).foreign == ("0099",)


def test_two_upgrades_at_once_are_stopped(fresh_db: Database) -> None:
    """An upgrade holds the database's upgrade lock (PostgreSQL's advisory lock, MariaDB's
    named lock, SQLite's write lock): a second one is refused at once, saying why
    (nothing stopped it: on MariaDB both ran their DDL at once)."""
    holder = fresh_db
    second = Database(fresh_db.url.render_as_string(hide_password=False), sqlite_busy_timeout=0)
    try:
        with migrate.upgrade_lock(holder):
            with pytest.raises(UpgradeInProgress, match="Another schema upgrade is running"):
                migrate.upgrade(second)
            with pytest.raises(UpgradeInProgress):
                migrate.expand(second)
        migrate.upgrade(second)  # the lock is given back with the first
        with migrate.upgrade_lock(second):
            pass
        assert migrate.state(holder).up_to_date
    finally:
        second.dispose()


def test_an_expand_gives_way_to_the_running_release_in_a_deadlock(fresh_db: Database) -> None:
    """``db upgrade --expand`` runs while the previous release serves. Its revisions
    alter several tables in one transaction; a request of the running release holding
    one (``devices``) and then reading another the upgrade already holds
    (``deployables``) made a deadlock, and PostgreSQL ended one side: in the rolling
    upgrade's run, a claim (503). The upgrade waits at most 200 ms for a lock, gives way
    and runs again: the request goes on, and the upgrade completes after it."""
    if fresh_db.backend != "postgresql":
        pytest.skip("lock_timeout is PostgreSQL's (MariaDB's DDL is not transactional)")
    migrate.upgrade(fresh_db, SPLIT)  # the previous release's schema
    failed: list[BaseException] = []

    def expand() -> None:
        try:
            migrate.expand(fresh_db)
        except BaseException as error:
            failed.append(error)

    def waiting_for_devices() -> bool:
        with fresh_db.engine.connect() as watcher:
            return bool(watcher.scalar(text(WAITING)))

    with fresh_db.engine.connect() as request:
        request.execute(text("SELECT count(*) FROM devices"))  # holds it, as a read does
        upgrading = threading.Thread(target=expand)
        upgrading.start()
        wait_for(waiting_for_devices)
        request.execute(text("SELECT count(*) FROM deployables"))  # no deadlock
        request.commit()
    upgrading.join(timeout=120)
    assert not upgrading.is_alive() and failed == []
    assert not migrate.state(fresh_db).expand.pending


WAITING = "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'devices'::regclass"
