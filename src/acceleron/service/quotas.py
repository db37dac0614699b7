"""Quotas: how many accelerators of each resource class a project may hold.

A project's usage of a resource class is the number of its accelerator requests that
hold an accelerator of that class: those being bound or bound (``BindStarted``,
``Bound``). Limits are named ``class:<RESOURCE_CLASS>`` (``class:CUSTOM_ACCELERATOR_FPGA``)
and come from one of two sources (``[quota] driver``):

* ``config``: ``[quota] limits`` for every project, ``[quota] project_limits`` for
  some; a resource class with no limit is unlimited;
* ``unified_limits``: Keystone's unified limits through oslo.limit, as Nova and
  Glance read theirs: a project limit, else the registered limit, else 0.

Creating requests is refused when the project's usage plus the new requests would
pass a limit; binding is refused when the requests it starts would. A bind counts
under its project's row in ``quota_projects`` (a row lock): two binds of one project
count one after the other, so together they never pass a limit, on every backend.
Limits are read before the transaction (oslo.limit asks Keystone), the usage inside.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from typing import Any, Protocol

from oslo_config import cfg
from sqlalchemy import Connection, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from acceleron.db.models import AcceleratorRequest, DeviceProfile, QuotaProject, table
from acceleron.db.session import Database
from acceleron.exceptions import ConfigError, InvalidInput, QuotaExceeded, QuotaUnavailable
from acceleron.placement import names

LOG = logging.getLogger(__name__)
ARQS, PROFILES, PROJECTS = table(AcceleratorRequest), table(DeviceProfile), table(QuotaProject)
PREFIX = "class:"
HOLDING = ("BindStarted", "Bound")  # the states that count against a limit
UNLIMITED = None


def resource_name(resource_class: str) -> str:
    """The limit's name for a resource class (Keystone's resource_name)."""
    return f"{PREFIX}{resource_class}"


class Limits(Protocol):
    """A source of limits: per resource class, the limit (None: unlimited)."""

    @property
    def driver(self) -> str:
        """config or unified_limits."""

    @property
    def enforcing(self) -> bool:
        """Whether any limit may apply (else nothing is counted)."""

    def limits(self, project: str, classes: Collection[str]) -> dict[str, int | None]: ...


def _parse_items(text: Iterable[str], where: str) -> dict[str, int | None]:
    found: dict[str, int | None] = {}
    for item in text:
        name, sep, value = item.strip().rpartition("=")
        if not sep or not name.startswith(PREFIX) or len(name) == len(PREFIX):
            raise ConfigError(
                f"{where}: {item!r} is not class:<RESOURCE_CLASS>=<count>, e.g. "
                "class:CUSTOM_ACCELERATOR_FPGA=4."
            )
        try:
            count = int(value)
        except ValueError:
            raise ConfigError(f"{where}: {item!r}: the count must be an integer.") from None
        if count < -1:
            raise ConfigError(f"{where}: {item!r}: the count must be -1 (unlimited) or more.")
        found[name[len(PREFIX) :]] = None if count == -1 else count
    return found


@dataclasses.dataclass(frozen=True)
class ConfigLimits:
    """Limits from ``[quota]``: ``limits`` for all, ``project_limits`` per project."""

    default: Mapping[str, int | None]
    projects: Mapping[str, Mapping[str, int | None]]
    driver: str = "config"

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> ConfigLimits:
        default = _parse_items(conf.quota.limits, "[quota] limits")
        projects: dict[str, dict[str, int | None]] = {}
        for item in conf.quota.project_limits:
            project, sep, rest = item.strip().partition("/")
            if not project or not sep:
                raise ConfigError(
                    f"[quota] project_limits: {item!r} is not "
                    "<project_id>/class:<RESOURCE_CLASS>=<count>."
                )
            projects.setdefault(project, {}).update(_parse_items([rest], "[quota] project_limits"))
        return cls(default, projects)

    @property
    def enforcing(self) -> bool:
        return any(v is not None for v in self.default.values()) or any(
            v is not None for limits in self.projects.values() for v in limits.values()
        )

    def limits(self, project: str, classes: Collection[str]) -> dict[str, int | None]:
        own = self.projects.get(project, {})
        return {c: own[c] if c in own else self.default.get(c, UNLIMITED) for c in classes}

    def known(self, project: str) -> set[str]:
        """The resource classes with a limit for ``project``."""
        return set(self.default) | set(self.projects.get(project, {}))


class UnifiedLimits:
    """Keystone's unified limits through oslo.limit (``[oslo_limit]``: the endpoint and
    the credentials to read limits with). oslo.limit reads the global configuration, so
    it is loaded from the same files as Acceleron's own, and connects to Keystone once a
    process: a change to ``[oslo_limit]`` applies at the next start. What Keystone answered is kept
    here for ``CACHE_SECONDS``, per project and classes: a changed limit applies within
    that time. oslo.limit's own cache is off: it keeps the limits that exist for the
    enforcer's lifetime and asks Keystone again, at every request, about a project with
    no limit of its own or a class with no limit at all (two Keystone calls, 0.1 s, in
    each create and bind), and a new enforcer to drop it costs Keystone's endpoint and
    model look-ups (0.4 to 1 s). One enforcer serves until Keystone fails."""

    driver = "unified_limits"
    CACHE_SECONDS = 30.0
    KEPT = 10_000  # answers kept at most; expired ones are dropped beyond it

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        from oslo_limit import limit

        files = list(conf.config_file or [])
        limit.CONF([], project="acceleron", default_config_files=files, default_config_dirs=[])
        self._limit = limit
        self._enforcer: Any = None
        self._answers: dict[tuple[str, frozenset[str]], tuple[float, dict[str, int | None]]] = {}
        self._lock = threading.Lock()

    @property
    def enforcing(self) -> bool:
        return True

    def _current(self) -> Any:
        with self._lock:
            if self._enforcer is None:
                # The usage callback is never called: limits are read, and counted here.
                self._enforcer = self._limit.Enforcer(
                    lambda _project, resources: dict.fromkeys(resources, 0), cache=False
                )
            return self._enforcer

    def _known(self, key: tuple[str, frozenset[str]]) -> dict[str, int | None] | None:
        with self._lock:
            expires, answer = self._answers.get(key, (0.0, None))
        return dict(answer) if answer is not None and time.monotonic() < expires else None

    def _keep(self, key: tuple[str, frozenset[str]], answer: dict[str, int | None]) -> None:
        now = time.monotonic()
        with self._lock:
            if len(self._answers) >= self.KEPT:
                self._answers = {k: v for k, v in self._answers.items() if v[0] > now}
            self._answers[key] = (now + self.CACHE_SECONDS, answer)

    def forget(self) -> None:
        """Keystone is asked again at the next request (a limit changed, say)."""
        with self._lock:
            self._answers = {}

    def limits(self, project: str, classes: Collection[str]) -> dict[str, int | None]:
        if not classes:
            return {}
        key = (project, frozenset(classes))
        known = self._known(key)
        if known is not None:
            return known
        names = {resource_name(c): c for c in classes}
        try:
            found = self._current().get_project_limits(project, list(names))
        except Exception as error:  # oslo.limit, keystoneauth and openstacksdk errors
            with self._lock:
                self._enforcer = None
            raise QuotaUnavailable(
                f"Keystone's limits cannot be read ([oslo_limit]): {error}"
            ) from error
        answer = {names[name]: None if value < 0 else value for name, value in found}
        self._keep(key, answer)
        return dict(answer)


def from_conf(conf: cfg.ConfigOpts) -> Limits:
    if conf.quota.driver == "unified_limits":
        return UnifiedLimits(conf)
    return ConfigLimits.from_conf(conf)


# --- counting and checking -----------------------------------------------------------


def usage(conn: Connection, project: str, classes: Collection[str] | None = None) -> Counter[str]:
    """Accelerators the project holds, per resource class."""
    query = (
        select(ARQS.c.resource_class, func.count())
        .where(
            ARQS.c.project_id == project,
            ARQS.c.state.in_(HOLDING),
            ARQS.c.resource_class.is_not(None),
        )
        .group_by(ARQS.c.resource_class)
    )
    if classes is not None:
        query = query.where(ARQS.c.resource_class.in_(list(classes)))
    return Counter({row[0]: int(row[1]) for row in conn.execute(query)})


def lock(conn: Connection, project: str) -> None:
    """Take the project's row in ``quota_projects`` until the transaction ends (made on
    first use: of two first binds racing, one inserts and the other waits, then takes it)."""
    bump = (
        update(PROJECTS)
        .where(PROJECTS.c.project_id == project)
        .values(generation=PROJECTS.c.generation + 1)
    )
    if conn.execute(bump).rowcount == 1:
        return
    try:
        with conn.begin_nested():
            conn.execute(insert(PROJECTS).values(project_id=project, generation=0))
    except IntegrityError:  # inserted meanwhile by another bind, which has committed
        conn.execute(bump)


def check(
    conn: Connection,
    project: str,
    requested: Mapping[str, int],
    limits: Mapping[str, int | None],
) -> None:
    """QuotaExceeded when ``requested`` (per resource class) on top of what the project
    holds would pass a limit."""
    wanted = {rc: n for rc, n in requested.items() if n > 0 and limits.get(rc) is not None}
    if not wanted:
        return
    held = usage(conn, project, wanted)
    for rc, count in sorted(wanted.items()):
        limit = limits[rc]
        assert limit is not None
        if held[rc] + count > limit:
            raise QuotaExceeded(
                f"Quota exceeded for {resource_name(rc)} in project {project}: limit {limit}, "
                f"usage {held[rc]}, requested {count}.",
                project=project,
                resource=resource_name(rc),
                limit=limit,
                usage=held[rc],
                requested=count,
            )


# --- showing ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Quota:
    resource: str  # class:<RESOURCE_CLASS>
    resource_class: str
    limit: int | None
    usage: int


def profile_classes(conn: Connection) -> set[str]:
    """Every accelerator class some device profile asks for (memory is no accelerator)."""
    found: set[str] = set()
    for (groups,) in conn.execute(select(PROFILES.c.groups)):
        for group in groups or []:
            found.update(names.accelerator_amounts(group))
    return found


def show(db: Database, source: Limits, project: str) -> list[Quota]:
    """The project's usage against each limit: every resource class a device profile
    asks for, the project holds, or (config) has a limit for."""
    if not project or len(project) > 255:
        raise InvalidInput(f"project: {project[:64]!r} is not a project id.")
    with db.reader() as conn:
        held = usage(conn, project)
        classes = profile_classes(conn) | set(held)
    if isinstance(source, ConfigLimits):
        classes |= source.known(project)
    limits = source.limits(project, sorted(classes))
    return [Quota(resource_name(rc), rc, limits.get(rc), held[rc]) for rc in sorted(classes)]
