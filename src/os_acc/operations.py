"""What each instance operation means for its accelerators (spec 000, "OpenStack
Server API Behavior"), as code: the compute service asks ``rule_for(operation)``
and calls ``plug()``, ``unplug()``, ``check()`` or ``record()`` before or after the
operation accordingly (``os_acc.before(name, ...)`` and ``os_acc.after(name, ...)`` do it).

docs/instance-operations.md is ``markdown()``'s output (a test keeps them equal).
"""

from __future__ import annotations

import dataclasses
import enum


class Action(enum.Enum):
    PLUG = "plug"  # attach the flavor's accelerators
    UNPLUG = "unplug"  # release them
    NOTHING = "nothing"  # they stay attached as they are
    CHECK = "check"  # they stay attached; check they are bound here, present and healthy
    RECORD = "record"  # they stay attached; record each one's state, for the crash dump
    REFUSE = "refuse"  # the operation is not supported with accelerators


@dataclasses.dataclass(frozen=True)
class Rule:
    before: Action  # before the compute service performs the operation
    after: Action  # once it has
    why: str
    nova: str = ""  # where Nova refuses the operation for servers with accelerators: how


_KEEP = Rule(Action.NOTHING, Action.NOTHING, "")
_RESTART = Rule(Action.UNPLUG, Action.PLUG, "a termination, then a scheduled restart")
# Nova 34's compute API answers 400 "Feature not supported with instances that have
# accelerators" to these; the rule is what Acceleron does if Nova ever allows them.
_NOVA_REFUSES = "refused by Nova"

OPERATIONS: dict[str, Rule] = {
    "boot": Rule(Action.PLUG, Action.NOTHING, "plugged before the instance is built"),
    "start": Rule(Action.PLUG, Action.NOTHING, "as a boot"),
    "stop": Rule(Action.UNPLUG, Action.NOTHING, "released while the instance is stopped"),
    "delete": Rule(Action.UNPLUG, Action.NOTHING, "released"),
    "soft_delete": Rule(
        Action.UNPLUG, Action.NOTHING, "a delete that may be undone: released; restore plugs"
    ),
    "force_delete": Rule(
        Action.UNPLUG, Action.NOTHING, "a delete at once; after a soft delete nothing is left"
    ),
    "restore": Rule(Action.PLUG, Action.NOTHING, "goes through the scheduler again: a boot"),
    "shelve": Rule(Action.UNPLUG, Action.NOTHING, "released"),
    "shelve_offload": Rule(
        Action.UNPLUG, Action.NOTHING, "the instance leaves the host: what is left is released"
    ),
    "unshelve": Rule(Action.PLUG, Action.NOTHING, "goes through the scheduler again: a boot"),
    "pause": dataclasses.replace(_KEEP, why="left attached"),
    "unpause": dataclasses.replace(_KEEP, why="nothing to do"),
    "suspend": dataclasses.replace(_KEEP, why="left attached", nova=_NOVA_REFUSES),
    "resume": dataclasses.replace(_KEEP, why="nothing to do", nova=_NOVA_REFUSES),
    "lock": dataclasses.replace(_KEEP, why="left attached"),
    "unlock": dataclasses.replace(_KEEP, why="nothing to do"),
    "reboot": dataclasses.replace(
        _KEEP, why="left attached; the instance's software finds them again"
    ),
    "rebuild": dataclasses.replace(
        _KEEP, why="left attached; device access must be quiesced before the image is replaced"
    ),
    "rescue": dataclasses.replace(
        _KEEP, why="left attached: the rescue image boots with them, as a reboot would"
    ),
    "unrescue": dataclasses.replace(_KEEP, why="nothing to do: they were never detached"),
    "create_image": dataclasses.replace(
        _KEEP,
        why="the disk is copied, never the accelerators' state; booting the image "
        "is boot_from_snapshot",
    ),
    "backup": dataclasses.replace(_KEEP, why="as create_image, kept in rotation"),
    "resize": dataclasses.replace(_RESTART, nova=_NOVA_REFUSES),
    "confirm_resize": dataclasses.replace(
        _KEEP,
        why="the old flavor's were released before the resize, the new one's plugged after it",
        nova=_NOVA_REFUSES,
    ),
    "revert_resize": dataclasses.replace(
        _RESTART,
        why="back to the old flavor: the new one's released, the old one's plugged again",
        nova=_NOVA_REFUSES,
    ),
    "cold_migrate": dataclasses.replace(_RESTART, nova=_NOVA_REFUSES),
    "migrate": dataclasses.replace(
        _RESTART, why="Nova's name for cold_migrate", nova=_NOVA_REFUSES
    ),
    "evacuate": dataclasses.replace(
        _KEEP, why="left undefined by the spec, as evacuation itself is: nothing is done"
    ),
    "set_admin_password": Rule(
        Action.CHECK,
        Action.NOTHING,
        "the owner takes over the instance as it is: its accelerators must be bound here, "
        "present, healthy and not being programmed",
    ),
    "trigger_crash_dump": Rule(
        Action.RECORD,
        Action.NOTHING,
        "each accelerator's state is recorded before the guest is interrupted, to read "
        "the dump against",
    ),
    "live_migrate": Rule(
        Action.REFUSE,
        Action.NOTHING,
        "no way exists yet to move an accelerator's state with the instance",
        _NOVA_REFUSES,
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
    lines = ["| operation | before it | after it | Nova | why |", "|---|---|---|---|---|"]
    for name, rule in OPERATIONS.items():
        nova = rule.nova or "allowed"
        lines.append(
            f"| `{name}` | {rule.before.value} | {rule.after.value} | {nova} | {rule.why} |"
        )
    return "\n".join(lines) + "\n"
