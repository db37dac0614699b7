"""The way back from an adoption of Cyborg (``acceleron adopt revert``), in Placement,
from the plan's document that ``acceleron adopt cyborg --plan-file`` wrote
(:func:`document`).

With Acceleron's API and agents stopped, ``plan`` reads Placement and says what the way
back does; ``apply`` does it, in an order that never leaves a server without its
accelerator:

1. Cyborg's providers are created again as the document has them (uuid, parent,
   inventories, traits; under a temporary name while one of Acceleron's has theirs), or
   given back their inventories and traits when the adoption was interrupted before it
   deleted them;
2. each server the adoption moved gets its part on Cyborg's providers back, in one
   write guarded by its consumer generation, in place of what it holds on Acceleron's
   (its other allocations as they are now); a server deleted since is left alone;
3. Acceleron's providers on Cyborg's hosts are deleted, children first;
4. Cyborg's providers get their names back.

A server that holds on Acceleron's providers what the adoption did not put there (booted
through Acceleron since, or its accelerator moved) stops it before any change: Cyborg
does not know it. Each change is logged (``acceleron.service.adopt_revert``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from acceleron.exceptions import AllocationConflict, Conflict, InvalidInput
from acceleron.placement.client import CONCURRENT_UPDATE, Consumer, Inventory, PlacementClient
from acceleron.service import adopt, adopt_plan
from acceleron.service.adopt_plan import RENAMED_PREFIX, moved, plain

LOG = logging.getLogger(__name__)
_ATTEMPTS = 4
DOCUMENT_FORMAT = 1


def document(the_plan: adopt_plan.Plan) -> dict[str, Any]:
    """The plan, with what earlier runs recorded, as the JSON document ``--plan-file``
    holds: Cyborg's providers as Placement had them before the adoption changed them,
    every server's allocation before and after, Acceleron's providers on Cyborg's hosts,
    and what is created. ``acceleron adopt revert`` runs the way back from it."""
    providers: dict[str, Mapping[str, Any]] = {p.uuid: p.detail() for p in the_plan.providers}
    providers.update(the_plan.earlier.providers)  # as they were before the first run
    servers: dict[str, Mapping[str, Any]] = {m.consumer: m.detail() for m in the_plan.moves}
    servers.update(the_plan.earlier.allocations)
    return {
        "format": DOCUMENT_FORMAT,
        "cyborg_schema": the_plan.schema,
        "cyborg_providers": [dict(providers[u]) for u in sorted(providers)],
        "servers": [dict(servers[c]) for c in sorted(servers)],
        "acceleron_providers": [
            {"uuid": p.uuid, "name": p.name, "host": p.hostname, "parent_uuid": p.parent_uuid}
            for p in the_plan.ours
        ],
        "device_profiles": [
            {
                "name": p.name,
                "uuid": p.uuid,
                "before": p.before,
                "after": p.after,
                "created": not p.done,
            }
            for p in the_plan.profiles
        ],
        "accelerator_requests": [
            {
                "uuid": a.uuid,
                "state": a.state,
                "instance_uuid": a.instance_uuid,
                "attach_handle_uuid": a.handle_uuid,
                "adopted": not a.done,
            }
            for a in the_plan.arqs
        ],
        "renames": adopt.mapping_dict(the_plan.renames),
        "problems": list(the_plan.problems),
    }


class RevertRefused(Conflict):
    """The way back cannot be taken as the document says: nothing was changed."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__(
            "The way back stops before any change:\n" + "\n".join(f"  - {p}" for p in problems)
        )
        self.problems = list(problems)


@dataclasses.dataclass(frozen=True)
class CyborgProvider:
    uuid: str
    name: str
    parent_uuid: str | None
    inventories: Mapping[str, Inventory]
    traits: frozenset[str]
    exists: bool  # still in Placement (an adoption interrupted before deleting it)
    temporary: str | None  # the name it has until Acceleron's provider of its name goes


@dataclasses.dataclass(frozen=True)
class Restore:
    consumer: str
    read: Consumer
    before: Mapping[str, Mapping[str, int]]  # its part on Cyborg's providers, to set back
    ours: frozenset[str]  # Acceleron's providers it leaves

    def allocations(self, read: Consumer | None = None) -> dict[str, dict[str, int]]:
        """What it holds once back: ``read``'s allocations, its part on Acceleron's
        providers replaced by its part on Cyborg's."""
        return moved((read or self.read).allocations, self.ours, self.before)


@dataclasses.dataclass
class Steps:
    providers: list[CyborgProvider] = dataclasses.field(default_factory=list)
    servers: list[Restore] = dataclasses.field(default_factory=list)
    delete: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # uuid, name
    notes: list[str] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)

    def lines(self) -> list[str]:
        out = ["Cyborg's providers:"]
        for p in self.providers:
            what = "restore" if p.exists else "create"
            traits = ", ".join(sorted(p.traits))
            out.append(
                f"  {what} {p.name} ({p.uuid}) under {p.parent_uuid}: "
                f"{_inventory(p.inventories)}, traits {traits}"
            )
        out.append("Servers:")
        out += [f"  set back {r.consumer}: {plain(r.allocations())}" for r in self.servers]
        out += [f"  {note}" for note in self.notes]
        out.append("Acceleron's providers:")
        out += [f"  delete {name} ({uuid})" for uuid, name in self.delete]
        return out


def _inventory(inventories: Mapping[str, Inventory]) -> str:
    return ", ".join(f"{rc} {i.total} (reserved {i.reserved})" for rc, i in inventories.items())


def plan(client: PlacementClient, document: Mapping[str, Any]) -> Steps:
    """What the way back does, read from Placement; only reads."""
    if document.get("format") != DOCUMENT_FORMAT:
        raise InvalidInput(
            f"The plan file's format is {document.get('format')!r}; this release reads "
            f"format {DOCUMENT_FORMAT} (written by acceleron adopt cyborg --plan-file)."
        )
    steps = Steps()
    try:
        ours = [(str(p["uuid"]), str(p["name"])) for p in document["acceleron_providers"]]
        _plan_providers(client, document["cyborg_providers"], {u for u, _ in ours}, steps)
        theirs = {p.uuid for p in steps.providers}
        moved_to = _plan_servers(client, document["servers"], theirs, {u for u, _ in ours}, steps)
    except (KeyError, TypeError, ValueError) as error:
        raise InvalidInput(f"The plan file lacks what the way back needs: {error!r}") from error
    for uuid, name in reversed(ours):  # children before their parents
        held = client.get_allocations(uuid) if client.get_provider(uuid) else None
        if held is None:
            continue
        steps.delete.append((uuid, name))
        for consumer, resources in sorted(held.items()):
            if moved_to.get(consumer, {}).get(uuid) != resources:
                steps.problems.append(
                    f"consumer {consumer} holds {dict(resources)} on Acceleron's provider "
                    f"{name} ({uuid}), which the adoption did not put there (a server booted "
                    "through Acceleron since?): Cyborg does not know it; delete it first"
                )
    return steps


def _plan_providers(
    client: PlacementClient, wanted: Sequence[Mapping[str, Any]], ours: set[str], steps: Steps
) -> None:
    for p in wanted:
        uuid, name, parent = str(p["uuid"]), str(p["name"]), p.get("parent_uuid")
        current = client.get_provider(uuid)
        holder = client.find_provider(name) if current is None or current.name != name else None
        where = f"Cyborg's provider {name} ({uuid})"
        if current is None and parent and client.get_provider(parent) is None:
            steps.problems.append(f"{where}: its parent {parent} is not in Placement")
        if holder is not None and holder.uuid not in ours:
            steps.problems.append(
                f"{where}: provider {holder.uuid}, not one of Acceleron's, has its name"
            )
        taken = current is None and holder is not None
        steps.providers.append(
            CyborgProvider(
                uuid,
                name,
                parent,
                {rc: Inventory.from_json(i) for rc, i in p["inventories"].items()},
                frozenset(p["traits"]),
                current is not None,
                f"{RENAMED_PREFIX}{uuid}" if taken else None,
            )
        )


def _plan_servers(
    client: PlacementClient,
    servers: Sequence[Mapping[str, Any]],
    theirs: set[str],
    ours: set[str],
    steps: Steps,
) -> dict[str, dict[str, dict[str, int]]]:
    """Each moved server's allocation set back; what each holds on Acceleron's providers."""
    held_on_ours: dict[str, dict[str, dict[str, int]]] = {}
    for s in servers:
        consumer = str(s["consumer"])
        before = {rp: {rc: int(n) for rc, n in r.items()} for rp, r in s["before"].items()}
        after = {rp: {rc: int(n) for rc, n in r.items()} for rp, r in s["after"].items()}
        read = client.get_consumer(consumer)
        mine = {rp: dict(r) for rp, r in read.allocations.items() if rp in ours}
        held_on_ours[consumer] = mine
        if not read.allocations:
            steps.notes.append(f"leave {consumer}: it holds nothing (deleted since)")
        elif any(rp in theirs for rp in read.allocations):
            steps.notes.append(f"leave {consumer}: it is on Cyborg's providers already")
        elif mine != after:
            steps.problems.append(
                f"server {consumer} holds {plain(mine)} on Acceleron's providers, the "
                f"adoption moved it to {plain(after)}: it changed since (an unshelve?), and "
                "Cyborg's request names the device it had"
            )
        else:
            steps.servers.append(Restore(consumer, read, before, frozenset(mine)))
    return held_on_ours


Say = Callable[[str], None]


def apply(client: PlacementClient, steps: Steps, say: Say | None = None) -> None:
    """Take the way back ``steps`` says (refused when it has problems)."""
    if steps.problems:
        raise RevertRefused(steps.problems)

    def tell(line: str) -> None:
        LOG.info("Going back to Cyborg: %s", line)
        if say is not None:
            say(line)

    for p in steps.providers:
        if not p.exists:
            client.create_provider(p.uuid, p.temporary or p.name, p.parent_uuid)
            tell(f"created provider {p.temporary or p.name} ({p.uuid})")
        client.set_inventories(p.uuid, p.inventories)
        client.set_traits(p.uuid, p.traits)
        tell(f"set the inventory and traits of {p.name} ({p.uuid}): {_inventory(p.inventories)}")
    for r in steps.servers:
        _set_back(client, r)
        tell(f"set the allocation of {r.consumer} back: {plain(r.before)}")
    for uuid, name in steps.delete:
        if client.delete_provider(uuid):
            tell(f"deleted Acceleron's provider {name} ({uuid})")
    for p in steps.providers:
        current = client.get_provider(p.uuid)
        if current is not None and current.name != p.name:
            client.move_provider(p.uuid, p.name, p.parent_uuid)
            tell(f"renamed provider {current.name} ({p.uuid}) to {p.name}")


def _set_back(client: PlacementClient, restore: Restore) -> None:
    """One write guarded by the consumer generation; read again when it changed."""
    read = restore.read
    for attempt in range(_ATTEMPTS):
        try:
            client.replace_allocations(restore.consumer, read, restore.allocations(read))
            return
        except AllocationConflict as error:
            if error.code != CONCURRENT_UPDATE or attempt == _ATTEMPTS - 1:
                raise
            read = client.get_consumer(restore.consumer)
