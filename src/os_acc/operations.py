"""What each instance operation means for its accelerators (spec 000, "OpenStack
Server API Behavior"), as code: the compute service asks ``rule_for(operation)``
and calls ``plug()`` or ``unplug()`` before or after the operation accordingly.

docs/instance-operations.md is ``markdown()``'s output (a test keeps them equal).
"""

from __future__ import annotations

import dataclasses
import enum


class Action(enum.Enum):
    PLUG = "plug"  # attach the flavor's accelerators
    UNPLUG = "unplug"  # release them
    NOTHING = "nothing"  # they stay attached as they are
    REFUSE = "refuse"  # the operation is not supported with accelerators


@dataclasses.dataclass(frozen=True)
class Rule:
    before: Action  # before the compute service performs the operation
    after: Action  # once it has
    why: str


_KEEP = Rule(Action.NOTHING, Action.NOTHING, "")

OPERATIONS: dict[str, Rule] = {
    "boot": Rule(Action.PLUG, Action.NOTHING, "plugged before the instance is built"),
    "start": Rule(Action.PLUG, Action.NOTHING, "as a boot"),
    "stop": Rule(Action.UNPLUG, Action.NOTHING, "released while the instance is stopped"),
    "delete": Rule(Action.UNPLUG, Action.NOTHING, "released"),
    "restore": Rule(Action.PLUG, Action.NOTHING, "goes through the scheduler again: a boot"),
    "shelve": Rule(Action.UNPLUG, Action.NOTHING, "released"),
    "unshelve": Rule(Action.PLUG, Action.NOTHING, "goes through the scheduler again: a boot"),
    "pause": dataclasses.replace(_KEEP, why="left attached"),
    "unpause": dataclasses.replace(_KEEP, why="nothing to do"),
    "suspend": dataclasses.replace(_KEEP, why="left attached"),
    "resume": dataclasses.replace(_KEEP, why="nothing to do"),
    "lock": dataclasses.replace(_KEEP, why="left attached"),
    "unlock": dataclasses.replace(_KEEP, why="nothing to do"),
    "reboot": dataclasses.replace(
        _KEEP, why="left attached; the instance's software finds them again"
    ),
    "rebuild": dataclasses.replace(
        _KEEP, why="left attached; device access must be quiesced before the image is replaced"
    ),
    "resize": Rule(Action.UNPLUG, Action.PLUG, "a termination, then a scheduled restart"),
    "cold_migrate": Rule(Action.UNPLUG, Action.PLUG, "a termination, then a scheduled restart"),
    "evacuate": dataclasses.replace(
        _KEEP, why="left undefined by the spec, as evacuation itself is: nothing is done"
    ),
    "set_admin_password": dataclasses.replace(_KEEP, why="supported; accelerators untouched"),
    "trigger_crash_dump": dataclasses.replace(_KEEP, why="supported; accelerators untouched"),
    "live_migrate": Rule(
        Action.REFUSE,
        Action.NOTHING,
        "no way exists yet to move an accelerator's state with the instance",
    ),
    "boot_from_snapshot": Rule(
        Action.REFUSE,
        Action.NOTHING,
        "the accelerators' state may not match the one the snapshot was taken with",
    ),
}


class UnsupportedOperation(Exception):
    """The operation cannot be done on an instance with accelerators."""


def rule_for(operation: str) -> Rule:
    """The rule of an operation; UnsupportedOperation for a refused or unknown one."""
    rule = OPERATIONS.get(operation)
    if rule is None:
        raise UnsupportedOperation(
            f"Unknown instance operation {operation!r}: one of {', '.join(OPERATIONS)}."
        )
    if rule.before is Action.REFUSE:
        raise UnsupportedOperation(
            f"{operation.replace('_', ' ').capitalize()} is not supported for an instance "
            f"with accelerators: {rule.why}."
        )
    return rule


def markdown() -> str:
    """The table of docs/instance-operations.md."""
    lines = ["| operation | before it | after it | why |", "|---|---|---|---|"]
    for name, rule in OPERATIONS.items():
        lines.append(f"| `{name}` | {rule.before.value} | {rule.after.value} | {rule.why} |")
    return "\n".join(lines) + "\n"
