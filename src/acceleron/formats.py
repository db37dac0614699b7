"""The versions of what agents and APIs exchange: the host report and the tasks.

Each of the two formats has a version ``MAJOR.MINOR``:

- A **minor** version adds something optional: a field of the report (a reader that
  does not know it ignores it; one that expects it and does not get it takes its
  default), a parameter of a task, a field of the agent's word on a task, or a new task
  kind. A reader reads every minor of the majors it knows, older and newer.
- A **major** version changes or removes something a reader of the previous major
  relies on. A reader refuses a major it does not know (409
  ``acceleron.unsupported_format``, naming both versions); a writer that knows several
  majors writes the newest one its reader knows.

Both sides say what they speak in one header, ``Acceleron-Agent-Formats``, e.g.
``report=1.0, task=1.0`` (a format listed once per major known, with the newest minor
known in it). The agent sends it with every call; the API sends it with its version
document (``GET /v2``), its answers to reports and to task claims. A side that sends
no such header (a release older than this contract) speaks ``report=1.0, task=1.0``.

Nothing here does I/O: the agent, the service and the API import it alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from acceleron.exceptions import InvalidInput, UnsupportedFormat

HEADER = "Acceleron-Agent-Formats"
REPORT = "report"
TASK = "task"
NAMES = (REPORT, TASK)

Version = tuple[int, int]

# What this release writes and reads: for each format, the newest minor of each major.
# Report 1.1: each device's topology, ``pcie_switch`` and ``nvlink_domain``; the API
# leaves what it recorded of them as it is when a report of 1.0 comes (its agent cannot
# tell).
# Report 1.2: deployables of kind ``mig_gpu`` (a GPU partitioned on demand); an agent
# writing for a reader of 1.1 leaves them out (``report.to_json``): that API would
# refuse the kind, and its hosts' such GPUs are published once it is upgraded.
# Report 1.3: health scoped to one attach handle (``Health.handles``: the GPU instance in
# one slot of a GPU carved on demand); an agent writing for a reader of 1.2 folds such a
# verdict into its deployable's (``report.to_json``): the whole GPU, as that API knew it.
REPORT_VERSION: Version = (1, 3)
# The deployable kinds a report minor brought: left out for an older reader.
KINDS_SINCE: Mapping[str, Version] = {"mig_gpu": (1, 2)}
# Task 1.1: a program task names its request's project (``project_id``) and its
# bitstream's signature properties (``bitstream.signature``), for hosts that require
# signatures; an agent of 1.0 ignores them, one of 1.1 handed a 1.0 task sees no signature.
# Task 1.2: ``clean`` tasks (a device, region or handle cleaned between tenants); an
# agent of 1.1 is handed none, and its host's devices are not cleaned.
# Task 1.3: ``make_mig`` and ``destroy_mig`` (a MIG instance made at bind on a GPU
# partitioned on demand, destroyed at release); an agent of 1.2 is handed none.
TASK_VERSION: Version = (1, 3)
# The first version of the task format that has each task kind: an API hands a task only
# to an agent whose task format has its kind.
TASK_KINDS: Mapping[str, Version] = {
    "program": (1, 0),
    "create_mdev": (1, 0),
    "remove_mdev": (1, 0),
    "clean": (1, 2),
    "make_mig": (1, 3),
    "destroy_mig": (1, 3),
}
# The fields of an agent's word on a task (``PUT /v2/tasks/{uuid}``), with the first task
# format that has each: an agent leaves out those its API's format does not have.
TASK_REPORT_FIELDS: Mapping[str, Version] = {
    "state": (1, 0),
    "phase": (1, 0),
    "progress": (1, 0),
    "result": (1, 0),
    "error": (1, 0),
}
# What a side that sends no header speaks: the formats as they were before they had
# versions (release 0.1.0).
UNVERSIONED: Version = (1, 0)


def show(version: Version) -> str:
    return f"{version[0]}.{version[1]}"


def parse_version(text: str, what: str) -> Version:
    major, dot, minor = text.strip().partition(".")
    if not (major.isdigit() and (not dot or minor.isdigit())):
        raise InvalidInput(f"{what}: a version is MAJOR.MINOR (e.g. 1.0), not {text!r}.")
    return int(major), int(minor or 0)


@dataclasses.dataclass(frozen=True)
class Formats:
    """The versions one side speaks: for each format, its majors and their newest minor."""

    report: Mapping[int, int]
    task: Mapping[int, int]

    @classmethod
    def of(cls, report: Iterable[Version], task: Iterable[Version]) -> Formats:
        return cls(report=dict(report), task=dict(task))

    def versions(self, name: str) -> list[Version]:
        return sorted(getattr(self, name).items())

    def header(self) -> str:
        return ", ".join(f"{name}={show(v)}" for name in NAMES for v in self.versions(name))

    @classmethod
    def parse(cls, header: str | None) -> Formats:
        """The formats a header says (those of a side before versions when there is none);
        InvalidInput if it is malformed."""
        if header is None or not header.strip():
            return UNVERSIONED_FORMATS
        found: dict[str, dict[int, int]] = {name: {} for name in NAMES}
        for item in header.split(","):
            name, equals, text = item.strip().partition("=")
            if not equals or not name.strip():
                raise InvalidInput(
                    f"{HEADER}: each item is FORMAT=MAJOR.MINOR (e.g. report=1.0), not {item!r}."
                )
            if name.strip() not in found:  # a format this release does not know of
                continue
            major, minor = parse_version(text, HEADER)
            versions = found[name.strip()]
            versions[major] = max(minor, versions.get(major, 0))
        return cls(
            report=found[REPORT] or dict([UNVERSIONED]), task=found[TASK] or dict([UNVERSIONED])
        )

    def common(self, name: str, other: Formats) -> Version | None:
        """The version of format ``name`` to use between this side and ``other``: the
        newest major both know, at the older of their two minors; None if none."""
        mine, theirs = getattr(self, name), getattr(other, name)
        majors = set(mine) & set(theirs)
        if not majors:
            return None
        major = max(majors)
        return major, min(mine[major], theirs[major])

    def reads(self, name: str, version: Version) -> bool:
        """Whether this side reads ``version`` of format ``name`` (any minor of a major
        it knows)."""
        return version[0] in getattr(self, name)

    def describe(self, name: str) -> str:
        """E.g. ``1.x (up to 1.3)``: the majors this side knows, each with its newest minor."""
        return " and ".join(
            f"{major}.x (up to {major}.{minor})" for major, minor in self.versions(name)
        )


OURS = Formats.of([REPORT_VERSION], [TASK_VERSION])
UNVERSIONED_FORMATS = Formats.of([UNVERSIONED], [UNVERSIONED])


def check_report(version: Version, ours: Formats | None = None) -> None:
    """UnsupportedFormat unless this API reads report format ``version``."""
    ours = ours or OURS
    if not ours.reads(REPORT, version):
        raise UnsupportedFormat(
            f"The host report is in format {show(version)}, which this API does not read: "
            f"it reads report format {ours.describe(REPORT)}. "
            "The agent is of a release this API cannot work with: upgrade the API, or run "
            "an agent of a release that writes a format the API reads."
        )


def task_kinds(agent: Formats, ours: Formats | None = None) -> frozenset[str] | None:
    """The task kinds of this API that an agent speaking ``agent`` executes; None when the
    agent reads no task format this API writes (UnsupportedFormat is then raised by
    ``check_tasks``)."""
    version = (ours or OURS).common(TASK, agent)
    if version is None:
        return None
    return frozenset(
        kind for kind, since in TASK_KINDS.items() if since[0] == version[0] and since <= version
    )


def check_tasks(agent: Formats, ours: Formats | None = None) -> Version:
    """The task format to use with an agent speaking ``agent``; UnsupportedFormat when
    there is none."""
    ours = ours or OURS
    version = ours.common(TASK, agent)
    if version is None:
        raise UnsupportedFormat(
            f"The agent reads task format {agent.describe(TASK)}, and this API writes "
            f"task format {ours.describe(TASK)}: they have no major version in common. "
            "Run an agent and an API of releases that share one."
        )
    return version


def trim(value: Any, version: Version) -> Any:
    """``value`` (a dataclass, or what holds some) as JSON data for a reader of
    ``version``: fields whose metadata says ``since`` a later minor are left out."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: trim(getattr(value, f.name), version)
            for f in dataclasses.fields(value)
            if tuple(f.metadata.get("since", (0, 0))) <= version
        }
    if isinstance(value, Mapping):
        return {key: trim(item, version) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [trim(item, version) for item in value]
    return value
