"""``acceleron status upgrade check``: what would break the next step of an upgrade.

In the OpenStack convention (oslo.upgradecheck): each check answers Success, Warning (the
upgrade may go on; the details say what to do next) or Failure (something would break:
fix it first), and the command exits with the worst of them: 0, 1 or 2 (255 when a check
could not run). Run it with the new release installed, before each step of a rolling
upgrade (docs/install.md, "Upgrades"):

- **Database schema**: expand or contract revisions pending, or a schema this release
  cannot run on (empty, or changed by a newer release past its expand phase).
- **Agent versions**: the version each host's agent last reported. An agent older than
  the oldest release this API reads reports from fails; one of an older release than
  this one, or newer than it, is a warning (agents are upgraded after the APIs, and all
  of them before the contract phase).
- **Device profile names**: profiles naming resource classes, traits or properties this
  release renamed, found by ``acceleron db rewrite-profiles``'s own dry run.
"""

from __future__ import annotations

import re

from oslo_upgradecheck.upgradecheck import Code, Result, UpgradeCommands
from sqlalchemy import select

import acceleron
from acceleron.db import migrate
from acceleron.db.models import Host, table
from acceleron.db.session import Database
from acceleron.exceptions import InvalidInput
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


class Checks(UpgradeCommands):
    """The checks, on one database; ``renames`` are the names this release renamed."""

    display_title = "Acceleron upgrade check"

    def __init__(
        self,
        db: Database,
        renames: device_profiles.NameMapping = device_profiles.RELEASE_RENAMES,
        version: str = acceleron.__version__,
    ) -> None:
        self.db = db
        self.renames = renames
        self.version = version
        self.schema = migrate.state(db)

    def _schema(self) -> Result:
        schema = self.schema
        if schema.empty:
            return Result(Code.FAILURE, "The database has no schema: run 'acceleron db upgrade'.")
        newer = [r for r in schema.unknown if migrate.phase_of(r) != migrate.EXPAND]
        if newer:
            return Result(Code.FAILURE, (
                f"The schema is at revision(s) {', '.join(newer)}, which this release does not "
                "know: a newer release changed it past what this one can run on."
            ))  # fmt: skip
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
            found.append(
                f"Agents older than {'.'.join(map(str, OLDEST_AGENT))}, whose reports this "
                f"release's API refuses: {_names(too_old)}. Upgrade them to "
                f"{'.'.join(map(str, OLDEST_AGENT))} or later before upgrading the APIs."
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
            return Result(Code.FAILURE, (
                f"{error.message} Change that profile by hand, then run 'acceleron db "
                "rewrite-profiles --apply'."
            ))  # fmt: skip
        if not report.changes:
            return Result(Code.SUCCESS)
        names = _names([change.name for change in report.changes])
        return Result(Code.WARNING, (
            f"{len(report.changes)} device profile(s) name resource classes, traits or "
            f"properties this release renamed: {names}. Run 'acceleron db rewrite-profiles' "
            "to see the changes, then with --apply."
        ))  # fmt: skip

    _upgrade_checks = (
        ("Database schema", _schema),
        ("Agent versions", _agents),
        ("Device profile names", _profiles),
    )
