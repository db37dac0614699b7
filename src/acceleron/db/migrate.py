"""Schema migrations: ``acceleron db upgrade [--expand | --contract]`` and ``db version``.

Revisions 0001 to 0015 are one line. After 0015 the schema changes in two phases, each an
Alembic branch with a directory of its own under ``migrations/versions/``:

- **expand** (``versions/expand/``, revisions ``expand_NNNN``): additions only: tables,
  columns that are nullable or have a server default, indexes. The previous release keeps
  working on an expanded schema, so ``db upgrade --expand`` runs while it serves.
- **contract** (``versions/contract/``, revisions ``contract_NNNN``): the rest: drops,
  renames, new constraints, data moved. ``db upgrade --contract`` runs once no process of
  the previous release runs; a contract revision that needs an expand one names it in
  ``depends_on``. Contract refuses to run before expand is complete.

Plain ``db upgrade`` (and the all-in-one at start) runs both. An API starts when every
expand revision it knows is applied: pending contract revisions do not stop it, nor do
expand revisions of a newer release (it may run beside one during a rolling upgrade);
contract revisions of a newer release do, and so do revisions of neither phase that this
release does not know. A revision's phase is read from its name, so that a release tells
the phase of a newer release's revisions too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import logging
import os
import sqlite3
import time
from collections.abc import Iterator

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import exc as sa_exc
from sqlalchemy import text
from sqlalchemy.engine import Connection

from acceleron.db.session import Database
from acceleron.exceptions import InvalidInput, SchemaOutOfDate, UpgradeInProgress

LOG = logging.getLogger(__name__)
SCRIPTS = os.path.join(os.path.dirname(__file__), "migrations")
EXPAND = "expand"
CONTRACT = "contract"
PHASES = (EXPAND, CONTRACT)


def config(scripts: str = SCRIPTS) -> Config:
    """Alembic's configuration for the migrations under ``scripts``: the line before the
    split in ``versions/``, each phase in ``versions/<phase>/``."""
    versions = os.path.join(scripts, "versions")
    conf = Config()
    conf.set_main_option("script_location", scripts)
    conf.set_main_option("path_separator", "os")
    locations = [versions, *(os.path.join(versions, phase) for phase in PHASES)]
    conf.set_main_option("version_locations", os.pathsep.join(locations))
    return conf


@functools.cache
def _script() -> ScriptDirectory:
    return ScriptDirectory.from_config(config())


def phase_of(revision: str) -> str | None:
    """``expand`` or ``contract`` from a revision's name; None for the line before the
    split (0001 to 0015) and for names of neither phase."""
    prefix = revision.partition("_")[0]
    return prefix if prefix in PHASES else None


@dataclasses.dataclass(frozen=True)
class Phase:
    """Where the database stands in one phase, against this release's revisions."""

    name: str
    current: str | None  # the newest revision of the phase applied (None: none at all)
    head: str  # this release's newest revision of the phase
    pending: tuple[str, ...]  # this release's revisions of the phase not applied, oldest first
    newer: bool  # the database has revisions of the phase this release does not know

    @property
    def command(self) -> str:
        return f"acceleron db upgrade --{self.name}"

    def describe(self) -> str:
        """One line: where it is, the newest, what is left."""
        at = self.current or "none"
        if self.newer:
            return f"{at} (newer than this release's {self.head})"
        if not self.pending:
            return f"{at} (up to date)"
        return f"{at} (newest: {self.head}; {len(self.pending)} pending)"


@dataclasses.dataclass(frozen=True)
class Schema:
    """Where the database's schema stands, phase by phase."""

    revisions: tuple[str, ...]  # the database's rows in alembic_version
    unknown: tuple[str, ...]  # those this release has no script for
    expand: Phase
    contract: Phase

    @property
    def empty(self) -> bool:
        return not self.revisions

    @property
    def foreign(self) -> tuple[str, ...]:
        """Unknown revisions of neither phase: not a schema this release can read."""
        return tuple(r for r in self.unknown if phase_of(r) is None)

    @property
    def up_to_date(self) -> bool:
        return not (self.unknown or self.expand.pending or self.contract.pending)


def state(db: Database) -> Schema:
    """The database's revisions, phase by phase (read in a read-only transaction: on
    SQLite, an upgrade holding the write lock does not stop it)."""
    with db.reader() as connection:
        rows = tuple(sorted(MigrationContext.configure(connection).get_current_heads()))
    script = _script()
    revisions = {s.revision: s for s in script.walk_revisions()}
    unknown = tuple(r for r in rows if r not in revisions)
    applied = {
        s.revision for r in rows if r in revisions for s in script.iterate_revisions(r, "base")
    }

    def phase(name: str) -> Phase:
        head = script.get_revision(f"{name}@head")
        assert head is not None
        line = [s.revision for s in script.iterate_revisions(head.revision, "base")][::-1]
        ours = [r for r in line if name == EXPAND or phase_of(r) == name]
        newer = any(phase_of(r) == name for r in unknown)
        pending = () if newer else tuple(r for r in ours if r not in applied)
        done = [r for r in line if r in applied]
        current = next((r for r in rows if phase_of(r) == name), done[-1] if done else None)
        return Phase(name, current, head.revision, pending, newer)

    return Schema(rows, unknown, phase(EXPAND), phase(CONTRACT))


# The upgrade lock: one upgrade at a time on a database. PostgreSQL: a transaction-level
# advisory lock (the whole upgrade is one transaction); MariaDB: a named lock of the
# connection (its DDL is not transactional); SQLite: its write lock, which the upgrade's
# transaction takes at its BEGIN IMMEDIATE. PostgreSQL and MariaDB refuse a second
# upgrade at once; SQLite after [database] sqlite_busy_timeout (if the first ends sooner,
# the second runs after it and finds its work done).
UPGRADE_LOCK_KEY = 0x6163_6365_6C75_7067 & 0x7FFF_FFFF_FFFF_FFFF  # "accelupg", a bigint
# MariaDB's named locks are the server's: the name holds the database's (64 characters).
# PostgreSQL: how long the upgrade's DDL waits for a table's lock before the upgrade gives
# way and is tried again (below deadlock_timeout), and for how long it is tried.
LOCK_WAIT_MS = 200
LOCK_GIVE_UP = 300.0
LOCK_NOT_AVAILABLE = "55P03"
UPGRADE_LOCK_NAME = "LEFT(CONCAT('acceleron_upgrade.', DATABASE()), 64)"
_RUNNING = (
    "Another schema upgrade is running on this database ({how}): wait for it to end, "
    "then run this one again ('acceleron db version' shows where the schema stands)."
)


@contextlib.contextmanager
def upgrade_lock(db: Database) -> Iterator[Connection]:
    """A transaction holding the database's upgrade lock; UpgradeInProgress when another
    holds it."""
    try:
        with db.engine.begin() as connection:
            _lock(db, connection)
            try:
                yield connection
            finally:
                if db.backend in ("mysql", "mariadb"):
                    connection.execute(text(f"SELECT RELEASE_LOCK({UPGRADE_LOCK_NAME})"))
    except (sa_exc.OperationalError, sqlite3.OperationalError) as error:
        # SQLite's BEGIN IMMEDIATE is run on the driver's connection (not wrapped).
        if db.backend == "sqlite" and "database is locked" in str(getattr(error, "orig", error)):
            raise UpgradeInProgress(
                _RUNNING.format(
                    how="or another writer held SQLite's write lock for [database] "
                    "sqlite_busy_timeout"
                )
            ) from error
        raise


def _lock(db: Database, connection: Connection) -> None:
    if db.backend == "postgresql":
        taken = connection.scalar(
            text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": UPGRADE_LOCK_KEY}
        )
        how = f"it holds PostgreSQL's advisory lock {UPGRADE_LOCK_KEY}"
    elif db.backend in ("mysql", "mariadb"):
        taken = connection.scalar(text(f"SELECT GET_LOCK({UPGRADE_LOCK_NAME}, 0)"))
        how = "it holds the named lock acceleron_upgrade.<database>"
    else:  # SQLite: BEGIN IMMEDIATE took the write lock, or waited for it and failed
        return
    if not taken:
        raise UpgradeInProgress(_RUNNING.format(how=how))


def upgrade(db: Database, revision: str = "heads", scripts: str = SCRIPTS) -> None:
    """Bring the schema up to ``revision``: both phases' newest by default; under the
    upgrade lock.

    On PostgreSQL a revision's DDL waits at most ``LOCK_WAIT_MS`` for each table's lock,
    then the upgrade (one transaction) gives way and is run again, for up to
    ``LOCK_GIVE_UP`` seconds: a revision that alters several tables, run while the
    previous release serves, otherwise met its transactions in a deadlock, and
    PostgreSQL ended one of theirs (a claim answered 503 in the rolling upgrade's run).
    Waiting less than ``deadlock_timeout`` (1 s), the upgrade is the one to yield."""
    conf = config(scripts)
    deadline = time.monotonic() + LOCK_GIVE_UP
    for attempt in itertools.count(1):
        try:
            before, after = _upgrade_once(db, conf, revision)
            break
        except sa_exc.OperationalError as error:
            if getattr(error.orig, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                raise
            if time.monotonic() > deadline:
                raise UpgradeInProgress(
                    f"The schema upgrade could not take its tables' locks in {LOCK_GIVE_UP:.0f} "
                    f"s ({attempt} tries): long transactions hold them. Run it again."
                ) from error
            LOG.info(
                "The schema upgrade waited over %d ms for a table in use; trying again (%d)",
                LOCK_WAIT_MS,
                attempt,
            )
            time.sleep(min(0.05 * attempt, 1.0))
    if set(after) != set(before):
        LOG.info(
            "Database schema upgraded: %s -> %s", ", ".join(before) or "empty", ", ".join(after)
        )


def _upgrade_once(db: Database, conf: Config, revision: str) -> tuple[list[str], list[str]]:
    """One try of ``upgrade``, in one transaction: the heads before and after."""
    with upgrade_lock(db) as connection:
        if db.backend == "postgresql":
            connection.execute(text(f"SET LOCAL lock_timeout = {LOCK_WAIT_MS}"))
        before = list(MigrationContext.configure(connection).get_current_heads())
        conf.attributes["connection"] = connection
        command.upgrade(conf, revision)
        after = list(MigrationContext.configure(connection).get_current_heads())
    return before, after


def _refuse_newer(schema: Schema) -> None:
    if schema.unknown:
        raise SchemaOutOfDate(
            f"The database schema is at revision(s) {', '.join(schema.unknown)}, which this "
            "Acceleron does not know (a newer release's): it cannot upgrade it."
        )


def expand(db: Database) -> None:
    """Apply the expand phase: additions the previous release keeps working with."""
    _refuse_newer(state(db))
    upgrade(db, f"{EXPAND}@head")


def contract(db: Database) -> None:
    """Apply the contract phase; refused while the expand phase is incomplete."""
    schema = state(db)
    _refuse_newer(schema)
    if schema.expand.pending:
        raise SchemaOutOfDate(
            f"The expand phase is incomplete ({len(schema.expand.pending)} revision(s) "
            f"pending): run '{schema.expand.command}' first, then upgrade every API and agent, "
            "then contract."
        )
    upgrade(db, f"{CONTRACT}@head")


def to_revision(db: Database, revision: str) -> None:
    """Up to ``revision`` (``db upgrade --revision``), with the guards of the phases: a
    schema a newer release changed is refused, and so is a target that would apply a
    contract revision while the expand phase stays incomplete."""
    schema = state(db)
    _refuse_newer(schema)
    script = _script()
    try:
        targets = [r for r in script.get_revisions(revision) if r is not None]
    except Exception as error:  # alembic's own words: unknown or ambiguous revision
        raise InvalidInput(f"No revision {revision!r} to upgrade to: {error}") from error
    reached = {s.revision for t in targets for s in script.iterate_revisions(t.revision, "base")}
    applied = {s.revision for r in schema.revisions for s in script.iterate_revisions(r, "base")}
    contracts = {r for r in reached - applied if phase_of(r) == CONTRACT}
    expand_left = [r for r in schema.expand.pending if r not in reached]
    if contracts and expand_left:
        raise SchemaOutOfDate(
            f"{revision} applies contract revision(s) ({', '.join(sorted(contracts))}) while "
            f"the expand phase stays incomplete ({len(expand_left)} revision(s) pending): run "
            f"'{schema.expand.command}' first, then upgrade every API and agent, then "
            "contract."
        )
    upgrade(db, revision)


def all_phases(db: Database) -> None:
    """Both phases at once (``acceleron db upgrade``; the all-in-one at start)."""
    _refuse_newer(state(db))
    upgrade(db)


def check(db: Database) -> None:
    """Raise SchemaOutOfDate unless this release can run on the schema: every expand
    revision it knows applied, and no contract revision it does not know."""
    schema = state(db)
    if schema.empty:
        raise SchemaOutOfDate("The database is empty: run 'acceleron db upgrade' first.")
    if schema.foreign or schema.contract.newer:
        newer = [r for r in schema.unknown if phase_of(r) != EXPAND]
        raise SchemaOutOfDate(
            f"The database schema is at revision(s) {', '.join(newer)}, which this Acceleron "
            "does not know: a newer release changed it past what this one can run on. "
            "Upgrade this Acceleron."
        )
    if schema.expand.pending:
        raise SchemaOutOfDate(
            f"The database schema lacks {len(schema.expand.pending)} revision(s) this "
            f"Acceleron needs (up to {schema.expand.head}): run "
            f"'{schema.expand.command}' first."
        )
    if schema.expand.newer:
        LOG.info(
            "The database schema was expanded by a newer release (%s): running beside it.",
            schema.expand.current,
        )
