"""``acceleron status upgrade check``: what would break the next step of an upgrade.

In the OpenStack convention (oslo.upgradecheck): each check answers Success, Warning (the
upgrade may go on; the details say what to do next) or Failure (something would break:
fix it first), and the command exits with the worst of them: 0, 1 or 2 (255 when a check
could not run). Run it with the new release installed, before each step of a rolling
upgrade (docs/install.md, "Upgrades"):

- **Database schema**: expand or contract revisions pending, or a schema this release
  cannot run on (empty, or changed by a newer release past its expand phase).
- **Agent versions**: the version each host's agent last reported. An agent older than
  the oldest release this one runs beside (OLDEST_AGENT) fails: the API still takes its
  reports while their format is one it reads (the report format, not the release, is
  what the API checks: a rolling upgrade keeps agents of the previous release
  reporting), but that pairing is not supported. One of an older release than this
  one, or newer than it, is a warning (agents are upgraded after the APIs, and all of
  them before the contract phase).
- **Device profile names**: profiles naming resource classes, traits or properties this
  release renamed, found by ``acceleron db rewrite-profiles``'s own dry run.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

from oslo_upgradecheck.upgradecheck import Code, Result, UpgradeCommands
from sqlalchemy import exc as sa_exc
from sqlalchemy import select

import acceleron
from acceleron.db import migrate
from acceleron.db.models import Host, table
from acceleron.db.session import Database
from acceleron.exceptions import DatabaseUnavailable, InvalidInput
from acceleron.service import device_profiles

# The oldest agent release whose reports this API reads (major, minor): the previous
# release series, at most. An agent older than this fails the check.
OLDEST_AGENT = (0, 1)
_LISTED = 10  # hosts named in a check's details; the rest are counted

Version = tuple[int, int, int]


def parse_version(version: str | None) -> Version | None:
    """``1.2.3`` (and ``1.2``, ``1.2.3.dev4``, ...) as numbers; None if it is not one."""
    found = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version or "")
    if found is None:
        return None
    major, minor, patch = found.groups()
    return int(major), int(minor), int(patch or 0)


def _names(hosts: list[str]) -> str:
    listed = ", ".join(hosts[:_LISTED])
    return listed + (f" and {len(hosts) - _LISTED} more" if len(hosts) > _LISTED else "")


def _reaching(check: Callable[[Checks], Result]) -> Callable[[Checks], Result]:
    """``check``, failed with the reason when the database cannot be reached (a
    traceback before)."""

    @functools.wraps(check)
    def run(checks: Checks) -> Result:
        try:
            return check(checks)
        except _Unreachable as error:
            return Result(Code.FAILURE, str(error))

    return run


class _Unreachable(Exception):
    """The database did not answer the first read (the schema's revisions)."""


class Checks(UpgradeCommands):
    """The checks, on one database; ``renames`` are the names this release renamed."""

    def __init__(
        self,
        db: Database,
        renames: device_profiles.NameMapping = device_profiles.RELEASE_RENAMES,
        version: str = acceleron.__version__,
    ) -> None:
        """Nothing is read here: each check reads what it needs when it runs, and a
        database it cannot reach fails that check, saying so."""
        self.db = db
        self.renames = renames
        self.version = version
        self.display_title = f"Acceleron {version} upgrade check"
        self._schema_state: migrate.Schema | None = None

    @property
    def schema(self) -> migrate.Schema:
        """The schema's state, read once (by the first check that asks)."""
        if self._schema_state is None:
            try:
                self._schema_state = migrate.state(self.db)
            except (DatabaseUnavailable, sa_exc.OperationalError, sa_exc.InterfaceError) as error:
                # The driver's own words: the domain error's cause has them.
                cause = error.__cause__ or error
                reason = getattr(cause, "orig", None) or getattr(error, "message", error)
                where = self.db.url.render_as_string(hide_password=True)
                said = " ".join(str(reason).split()).rstrip(".")
                said += "" if said.endswith("?") else "."
                raise _Unreachable(
                    f"The database ({where}) cannot be read: {said} Check [database] "
                    "connection and that the database answers, then run the check again."
                ) from error
        return self._schema_state

    def _schema(self) -> Result:
        schema = self.schema
        if schema.empty:
            return Result(Code.FAILURE, "The database has no schema: run 'acceleron db upgrade'.")
        newer = [r for r in schema.unknown if migrate.phase_of(r) != migrate.EXPAND]
        if newer:
            return Result(
                Code.FAILURE,
                (
                    f"The schema is at revision(s) {', '.join(newer)}, which this release does not "
                    "know: a newer release changed it past what this one can run on."
                ),
            )
        steps = []
        if schema.expand.pending:
            steps.append(
                f"{len(schema.expand.pending)} expand revision(s) pending (up to "
                f"{schema.expand.head}): run '{schema.expand.command}' next; the previous "
                "release keeps running on the result, this release's APIs start only after it."
            )
        if schema.contract.pending:
            steps.append(
                f"{len(schema.contract.pending)} contract revision(s) pending (up to "
                f"{schema.contract.head}): run '{schema.contract.command}' once every API "
                "and agent runs this release."
            )
        if steps:
            return Result(Code.WARNING, " ".join(steps))
        if schema.expand.newer:
            return Result(Code.SUCCESS, f"Expanded by a newer release ({schema.expand.current}).")
        return Result(Code.SUCCESS)

    def _agents(self) -> Result:
        if self.schema.empty:
            return Result(Code.WARNING, "No schema yet: no agent to check.")
        with self.db.reader() as conn:
            hosts = table(Host)
            rows = conn.execute(
                select(hosts.c.hostname, hosts.c.agent_version).order_by(hosts.c.hostname)
            ).all()
        ours = parse_version(self.version)
        assert ours is not None, self.version
        too_old, unknown, older, newer = [], [], [], []
        for hostname, reported in rows:
            version = parse_version(reported)
            label = f"{hostname} ({reported or 'no version'})"
            if version is None:
                unknown.append(label)
            elif version[:2] < OLDEST_AGENT:
                too_old.append(label)
            elif version < ours:
                older.append(label)
            elif version > ours:
                newer.append(label)
        found = []
        if too_old:
            oldest = ".".join(map(str, OLDEST_AGENT))
            found.append(
                f"Agents older than {oldest}, the oldest release this one runs beside: "
                f"{_names(too_old)}. This release's API still takes their reports while "
                "they are in a report format it reads (it refuses only another format, "
                "409 acceleron.unsupported_format), but nothing it hands them is checked "
                f"against what they do. Upgrade them to {oldest} or later before upgrading "
                "the APIs."
            )
        if unknown:
            found.append(f"Agents that reported no version: {_names(unknown)}.")
        if older:
            found.append(
                f"Agents of an older release than {self.version}: {_names(older)}. Upgrade "
                "them once the APIs run this release, before 'acceleron db upgrade --contract'."
            )
        if newer:
            found.append(
                f"Agents newer than this API ({self.version}): {_names(newer)}. Upgrade the "
                "APIs before the agents."
            )
        if not found:
            return Result(Code.SUCCESS, None if rows else "No agent has reported yet.")
        return Result(Code.FAILURE if too_old else Code.WARNING, " ".join(found))

    def _profiles(self) -> Result:
        if self.schema.empty:
            return Result(Code.WARNING, "No schema yet: no device profile to check.")
        try:
            report = device_profiles.rewrite_profiles(self.db, self.renames, apply=False)
        except InvalidInput as error:
            return Result(
                Code.FAILURE,
                (
                    f"{error.message} Change that profile by hand, then run 'acceleron db "
                    "rewrite-profiles --apply'."
                ),
            )
        if not report.changes:
            return Result(Code.SUCCESS)
        names = _names([change.name for change in report.changes])
        return Result(
            Code.WARNING,
            (
                f"{len(report.changes)} device profile(s) name resource classes, traits or "
                f"properties this release renamed: {names}. Run 'acceleron db rewrite-profiles' "
                "to see the changes, then with --apply."
            ),
        )

    _upgrade_checks = (
        ("Database schema", _reaching(_schema)),
        ("Agent versions", _reaching(_agents)),
        ("Device profile names", _reaching(_profiles)),
    )
