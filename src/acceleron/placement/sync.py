"""Bring Placement to the desired provider tree with as few calls as possible.

For one host, given the desired providers (``tree.desired_tree``) and what
Acceleron recorded after its last writes (``Known``: generation and digest of
each provider it owns):

* one ``GET /resource_providers?in_tree=`` reads the tree and its generations (none at
  a host's first sync: the caller's compute node, found by name, stands for it);
* a new provider costs at most three calls: create, inventories, traits;
* a provider whose parent changed (a VF pool now nested in its region) is moved
  under its new parent (one ``PUT``), keeping its inventory and allocations;
* a provider whose generation and digest match the record costs nothing; one
  that changed (ours or someone else's doing) is read, and only what differs is
  written (a function trait swap is one ``PUT .../traits``);
* a provider Acceleron no longer wants is deleted, or, while allocations still
  use it, kept with everything reserved (retired); a retired provider that is
  wanted again (its device came back) is read and converged like a changed one;
* new pools get their inventory, and the providers they replace are retired, in one
  ``POST /reshaper`` (``finish``): a host switching to pools offers each unit
  throughout.

Providers Acceleron did not create (Nova's own children of the compute node)
are never touched. No database here: the caller keeps the record.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Callable, Mapping, Sequence

from acceleron.exceptions import (
    PlacementError,
    PlacementGenerationConflict,
    PlacementProviderInUse,
    PlacementProviderNotFound,
)
from acceleron.placement.client import Inventory, PlacementClient, Provider
from acceleron.placement.tree import DesiredProvider

# The digest recorded for a provider left short of what we want (a class we dropped is
# kept while allocated): it matches no desired digest, so the next check converges it.
UNSETTLED = ""
# Reshapes tried while the host's providers keep changing, before one by one.
RESHAPE_ATTEMPTS = 3
LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Known:
    """What Acceleron last wrote to a provider it owns."""

    uuid: str
    name: str
    parent_uuid: str | None
    generation: int
    digest: str
    retired: bool = False  # no longer wanted, kept reserved while allocations remain
    # Flat mode: the resource classes and traits Acceleron put on the compute node; a
    # pool: its members (deployable ids, ``members``).
    owned: Mapping[str, Sequence[str]] = dataclasses.field(default_factory=dict)
    # When the record last changed (UTC): for a retired one, since when it is so.
    since: dt.datetime | None = None


@dataclasses.dataclass(frozen=True)
class Action:
    op: str  # create, move, inventories, traits, delete, retire
    uuid: str
    name: str
    detail: str = ""


@dataclasses.dataclass
class Result:
    actions: list[Action] = dataclasses.field(default_factory=list)
    known: dict[str, Known] = dataclasses.field(default_factory=dict)
    # Pools created without their inventory yet (``defer_pools``): ``finish`` gives it,
    # and retires the providers no longer wanted (deepest first) in the same write.
    deferred: list[DesiredProvider] = dataclasses.field(default_factory=list)
    retiring: list[Known] = dataclasses.field(default_factory=list)


def sync_tree(
    client: PlacementClient,
    compute_uuid: str,
    desired: Sequence[DesiredProvider],
    known: Mapping[str, Known],
    *,
    dry_run: bool = False,
    read: Sequence[Provider] | None = None,
    defer_pools: bool = False,
    retire_after: float = 0.0,
) -> Result:
    """Make the providers under ``compute_uuid`` match ``desired``; ``read``: its tree
    as the caller just read it from Placement (read here otherwise), or its root alone
    where ``known`` is empty (a host's first sync: a provider there anyway is found when
    its creation is refused, and made right as if read). ``defer_pools``:
    a pool created here gets its inventory only from ``finish``, once the caller has
    recorded its members: until then Placement offers it to nobody, so no bind can name
    a pool whose members it cannot find. The providers it replaces are retired by
    ``finish`` too, and kept in ``known`` until then.

    PlacementProviderNotFound when the compute node provider is not in Placement (in a
    dry run it may be one the embedded mode has yet to create)."""
    found = client.get_tree(compute_uuid) if read is None else read
    actual = {p.uuid: p for p in found}
    if not actual and not dry_run:
        raise PlacementProviderNotFound(
            f"Compute node provider {compute_uuid} is not in Placement."
        )
    wanted = {p.uuid for p in desired}
    for uuid, gone in known.items():  # retired out of the tree, and wanted again: back in
        if uuid in wanted and uuid not in actual and gone.retired and gone.parent_uuid is None:
            back = client.get_provider(uuid)
            if back is not None:
                actual[uuid] = back
    result = Result()
    for provider in desired:
        _sync_provider(
            client,
            provider,
            actual.get(provider.uuid),
            known.get(provider.uuid),
            result,
            dry_run,
            defer_pools,
        )
    stale = [k for uuid, k in known.items() if uuid not in wanted]
    for gone in _deepest_first(stale, actual):
        if result.deferred and gone.uuid in actual:
            result.retiring.append(gone)
            result.known[gone.uuid] = gone
        else:
            parent = _with_children(actual, result)
            _retire(client, gone, actual.get(gone.uuid), result, dry_run, retire_after, parent)
    return result


def _with_children(actual: Mapping[str, Provider], result: Result) -> set[str]:
    """The providers of the tree that still have a child in it (those a pass moved out
    or deleted no longer count)."""
    left = {uuid for uuid in actual if _still_in_tree(uuid, result)}
    return {p.parent_uuid for uuid, p in actual.items() if uuid in left and p.parent_uuid}


def _still_in_tree(uuid: str, result: Result) -> bool:
    kept = result.known.get(uuid)
    deleted = any(a.op == "delete" and a.uuid == uuid for a in result.actions)
    return not deleted and (kept is None or kept.parent_uuid is not None)


def _sync_provider(
    client: PlacementClient,
    want: DesiredProvider,
    actual: Provider | None,
    known: Known | None,
    result: Result,
    dry_run: bool,
    defer_pools: bool = False,
) -> None:
    digest, settled = want.digest(), True
    if actual is None:
        result.actions.append(Action("create", want.uuid, want.name, f"under {want.parent_uuid}"))
        if not dry_run:
            # None: made here; else it was there (made meanwhile by another API process,
            # or the caller read only the root): made right as one read would have been
            actual = _create(client, want)
            if actual is None:
                if want.inventories and defer_pools and want.members:
                    result.deferred.append(want)
                    settled = False
                elif want.inventories:
                    client.set_inventories(want.uuid, want.inventories)
                client.set_traits(want.uuid, want.traits)
    if actual is not None:
        if actual.parent_uuid != want.parent_uuid:  # its place in the tree changed
            result.actions.append(
                Action(
                    "move", want.uuid, want.name, f"from {actual.parent_uuid} to {want.parent_uuid}"
                )
            )
            if not dry_run:
                client.move_provider(want.uuid, want.name, want.parent_uuid)
        if _changed(known, actual, digest):
            settled = _converge(client, want, result, dry_run)
    generation = client.generation(want.uuid)
    if not dry_run and generation is not None:
        result.known[want.uuid] = _known(want, generation, digest if settled else UNSETTLED)
    elif known is not None:
        result.known[want.uuid] = known


def finish(client: PlacementClient, compute_uuid: str, result: Result) -> None:
    """Give the pools ``sync_tree`` created without inventory theirs and retire the
    providers they replace, in one reshape (``POST /reshaper``, all or nothing): while a
    host switches to pools, Placement offers each of its units throughout, and never
    one twice. A provider changing meanwhile (a unit allocated) has it read and tried
    again (so is one deleted meanwhile: another API process may be switching the host
    too); where Placement refuses the reshape outright, or the host kept changing, the
    providers are retired first and the pools given their inventory after, one by one.
    Where none is retired (a host's first publication, say), each pool is given its own
    inventory at the generation its traits' write answered: no unit is offered twice,
    and no read is needed before or after."""
    for _ in range(RESHAPE_ATTEMPTS if result.retiring else 0):
        try:
            _swap(client, compute_uuid, result)
            return
        except (PlacementGenerationConflict, PlacementProviderNotFound):
            continue  # changed meanwhile: another API process may be switching it too
        except PlacementError as error:
            if error.status not in (400, 403, 406):
                raise
            LOG.warning("Placement refused a reshape (%s): switching one provider at a time", error)
            break
    tree = {p.uuid: p for p in client.get_tree(compute_uuid)} if result.retiring else {}
    for gone in result.retiring:
        del result.known[gone.uuid]
        parents = _with_children(tree, result)
        _retire(client, gone, tree.get(gone.uuid), result, False, parents=parents)
    for want in result.deferred:
        client.set_inventories(want.uuid, want.inventories)
        _settle(client, want, result)


def _swap(client: PlacementClient, compute_uuid: str, result: Result) -> None:
    """``finish``'s reshape: the pools' inventories, and the providers they replace
    fully reserved (then retired: ``_retire``). Never emptied: Placement retries an
    allocation that met a provider's new generation within the transaction that read
    its inventory, so one allocated as the reshape removes that inventory lands on a
    provider without any, and no write of that consumer is accepted again (only a
    DELETE frees it). Fully reserved, the provider keeps its inventory whatever
    lands on it."""
    found = {p.uuid: p for p in client.get_tree(compute_uuid)}
    writes: dict[str, tuple[int, Mapping[str, Inventory]]] = {}
    for want in result.deferred:
        if want.uuid not in found:
            raise PlacementProviderNotFound(f"Resource provider {want.uuid} does not exist.")
        writes[want.uuid] = (found[want.uuid].generation, want.inventories)
    for gone in result.retiring:
        if gone.uuid not in found:
            continue
        generation, current = client.get_inventories(gone.uuid)
        reserved = {rc: dataclasses.replace(inv, reserved=inv.total) for rc, inv in current.items()}
        if reserved != current:
            writes[gone.uuid] = (generation, reserved)
    client.reshape(writes)
    for want in result.deferred:
        _settle(client, want, result)
    for gone in result.retiring:
        del result.known[gone.uuid]
        if gone.uuid in found:
            parents = _with_children(found, result)
            _retire(client, gone, found[gone.uuid], result, False, parents=parents)


def _settle(client: PlacementClient, want: DesiredProvider, result: Result) -> None:
    """The record of a pool whose inventory was just written."""
    generation = client.generation(want.uuid)
    if generation is None:
        found = client.get_provider(want.uuid)
        generation = None if found is None else found.generation
    if generation is not None:
        result.known[want.uuid] = _known(want, generation, want.digest())


def _known(want: DesiredProvider, generation: int, digest: str) -> Known:
    """The record of a provider as written at ``generation``."""
    return Known(want.uuid, want.name, want.parent_uuid, generation, digest, owned=members_of(want))


def members_of(want: DesiredProvider) -> dict[str, list[str]]:
    """What the record of a pool keeps: its deployables' ids (a bind naming the pool
    chooses among them); nothing for any other provider."""
    return {"members": [str(m) for m in want.members]} if want.members else {}


def _changed(known: Known | None, actual: Provider, digest: str) -> bool:
    """Whether a provider must be read and converged: unknown, changed in Placement or
    in what we want, or retired (kept reserved) and now wanted again."""
    return (
        known is None
        or known.retired
        or known.generation != actual.generation
        or known.digest != digest
    )


def _create(client: PlacementClient, want: DesiredProvider) -> Provider | None:
    """Create a provider: None when made; the provider when one with its uuid is there
    already (it appeared since the tree was read, or the tree was not read whole)."""
    try:
        client.create_provider(want.uuid, want.name, want.parent_uuid)
        return None
    except PlacementError as error:
        found = client.get_provider(want.uuid) if error.status == 409 else None
        if found is None:
            raise
        return found


def _converge(
    client: PlacementClient, want: DesiredProvider, result: Result, dry_run: bool
) -> bool:
    """Read an existing provider and write only what differs from ``want``; False when
    a class it should lose is kept because allocations still use it."""
    read = client.get_inventories(want.uuid)
    kept: list[str] = []
    if read[1] != dict(want.inventories):
        result.actions.append(
            Action("inventories", want.uuid, want.name, _describe(read[1], want.inventories))
        )
        if not dry_run:
            kept = _write_inventories(client, want.uuid, lambda _: want.inventories, read)
            _report_kept(result, want.uuid, want.name, kept)
    _, traits = client.get_traits(want.uuid)
    if traits != want.traits:
        added, removed = sorted(want.traits - traits), sorted(traits - want.traits)
        result.actions.append(
            Action("traits", want.uuid, want.name, f"add {added} remove {removed}")
        )
        if not dry_run:
            client.set_traits(want.uuid, want.traits)
    return not kept


def _write_inventories(
    client: PlacementClient,
    uuid: str,
    build: Callable[[Mapping[str, Inventory]], Mapping[str, Inventory]],
    read: tuple[int, Mapping[str, Inventory]],
) -> list[str]:
    """Write ``build(current inventories)`` (rebuilt from a fresh read after a conflict).

    Placement refuses to remove a class that is still allocated: such a class is kept,
    fully reserved, until its allocations go. Returns the classes kept that way.
    """
    used: set[str] = set()
    kept: list[str] = []

    def change(current: Mapping[str, Inventory]) -> dict[str, Inventory]:
        wanted = dict(build(current))
        kept[:] = sorted(rc for rc in current if rc in used and rc not in wanted)
        wanted.update(
            (rc, dataclasses.replace(current[rc], reserved=current[rc].total)) for rc in kept
        )
        return wanted

    try:
        client.update_inventories(uuid, change, read=read)
    except PlacementProviderInUse:
        used.update(rc for rc, n in client.get_usages(uuid).items() if n)
        client.update_inventories(uuid, change)
    return kept


def _report_kept(result: Result, uuid: str, name: str, kept: Sequence[str]) -> None:
    if kept:
        detail = f"kept {', '.join(kept)} fully reserved: still allocated"
        result.actions.append(Action("inventories", uuid, name, detail))


def _describe(old: Mapping[str, Inventory], new: Mapping[str, Inventory]) -> str:
    def show(invs: Mapping[str, Inventory]) -> str:
        return ", ".join(f"{rc} {i.total - i.reserved}/{i.total}" for rc, i in sorted(invs.items()))

    return f"{show(old) or 'none'} -> {show(new) or 'none'}"


def _deepest_first(stale: Sequence[Known], actual: Mapping[str, Provider]) -> list[Known]:
    def depth(known: Known) -> int:
        level, parent = 0, known.parent_uuid
        while parent is not None and parent in actual:
            level, parent = level + 1, actual[parent].parent_uuid
        return level

    return sorted(stale, key=depth, reverse=True)


def _retire(
    client: PlacementClient,
    gone: Known,
    actual: Provider | None,
    result: Result,
    dry_run: bool,
    retire_after: float = 0.0,
    parents: set[str] | frozenset[str] = frozenset(),
) -> None:
    """Retire a provider we no longer want: fully reserved; once nothing uses it and it
    has no child left in the tree (``parents``), moved out of its compute node's tree;
    deleted by a later pass ``retire_after`` seconds after that. Nova's compute service
    reads the allocations of every provider it cached under its compute node at each
    build: one deleted while cached fails its builds until its next refresh, where one
    moved out of the tree is dropped at that refresh. Fully reserved, it refuses the
    allocation of a candidate read before (409: Nova takes its next one)."""
    if actual is None and gone.retired and gone.parent_uuid is None:
        actual = client.get_provider(gone.uuid)  # moved out of the tree by a pass before
    if actual is None:
        return  # deleted behind our back: nothing left to do
    used = {rc: n for rc, n in client.get_usages(gone.uuid).items() if n}
    move_out = not used and gone.uuid not in parents and actual.parent_uuid is not None
    if used or gone.uuid in parents:
        why = f"in use: {used}" if used else "its children are still in the tree"
    elif move_out:
        why = "moved out of the tree"
    elif not _due(gone, retire_after):
        why = f"out of the tree: deleted {retire_after:.0f} s after"
    else:
        result.actions.append(Action("delete", gone.uuid, gone.name))
        if dry_run:
            return
        try:
            client.delete_provider(gone.uuid)
            return
        except PlacementProviderInUse:
            why = "allocated since it was read"
    result.actions.append(Action("retire", gone.uuid, gone.name, why))
    if dry_run:
        result.known[gone.uuid] = gone
        return
    _, inventories = client.get_inventories(gone.uuid)
    reserved = {rc: dataclasses.replace(inv, reserved=inv.total) for rc, inv in inventories.items()}
    if reserved != inventories:
        client.set_inventories(gone.uuid, reserved)
    retired = dataclasses.replace(gone, retired=True)
    if move_out:
        client.move_provider(gone.uuid, gone.name, None)
        retired = dataclasses.replace(retired, parent_uuid=None, since=None)
    generation = client.generation(gone.uuid) or gone.generation
    result.known[gone.uuid] = dataclasses.replace(retired, generation=generation)


def _due(gone: Known, retire_after: float) -> bool:
    """Whether a retired provider out of its tree has waited ``retire_after`` seconds."""
    if not gone.retired or gone.parent_uuid is not None:
        return False
    if retire_after <= 0 or gone.since is None:
        return retire_after <= 0
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    return (now - gone.since).total_seconds() >= retire_after


# --- flat mode ------------------------------------------------------------------------


def flat_digest(inventories: Mapping[str, Inventory], traits: frozenset[str]) -> str:
    return DesiredProvider("", "", None, inventories, traits).digest()


def sync_flat(
    client: PlacementClient,
    compute: Provider,
    inventories: Mapping[str, Inventory],
    traits: frozenset[str],
    known: Known | None,
    *,
    dry_run: bool = False,
) -> Result:
    """Flat mode: Acceleron's inventories and traits on the compute node provider, which
    is Nova's: its other classes and traits are left as they are."""
    result = Result()
    digest = flat_digest(inventories, traits)
    owned_classes = set(known.owned.get("classes", ())) if known else set()
    owned_traits = set(known.owned.get("traits", ())) if known else set()
    kept: list[str] = []

    def merge(current: Mapping[str, Inventory]) -> dict[str, Inventory]:
        return {**{rc: i for rc, i in current.items() if rc not in owned_classes}, **inventories}

    if _changed(known, compute, digest):
        read = client.get_inventories(compute.uuid)
        merged = merge(read[1])
        if merged != read[1]:
            result.actions.append(
                Action("inventories", compute.uuid, compute.name, _describe(read[1], merged))
            )
            if not dry_run:
                kept = _write_inventories(client, compute.uuid, merge, read)
                _report_kept(result, compute.uuid, compute.name, kept)
        _, present = client.get_traits(compute.uuid)
        add, remove = traits - present, (owned_traits - traits) & present
        if add or remove:
            result.actions.append(
                Action(
                    "traits",
                    compute.uuid,
                    compute.name,
                    f"add {sorted(add)} remove {sorted(remove)}",
                )
            )
            if not dry_run:
                client.update_traits(compute.uuid, add=add, remove=remove)
    generation = client.generation(compute.uuid) or compute.generation
    # A class kept while allocated is still ours: the next check removes it.
    owned = {"classes": sorted({*inventories, *kept}), "traits": sorted(traits)}
    result.known[compute.uuid] = Known(
        compute.uuid, compute.name, None, generation, UNSETTLED if kept else digest, owned=owned
    )
    return result


def remove_flat(
    client: PlacementClient, compute: Provider, known: Known, *, dry_run: bool = False
) -> list[Action]:
    """Take Acceleron's flat-mode classes and traits off a compute node (spec 001's
    upgrade to nested providers). Refused while instances still use those classes."""
    classes = set(known.owned.get("classes", ()))
    used = {rc: n for rc, n in client.get_usages(compute.uuid).items() if n and rc in classes}
    if used:
        raise PlacementProviderInUse(
            f"Compute node {compute.name} still has allocations of {used}: terminate the "
            f"instances using accelerators first, as the upgrade procedure asks."
        )
    traits = sorted(known.owned.get("traits", ()))
    actions = [
        Action(
            "remove_flat", compute.uuid, compute.name, f"classes {sorted(classes)} traits {traits}"
        )
    ]
    if not dry_run:
        client.update_inventories(
            compute.uuid, lambda current: {rc: i for rc, i in current.items() if rc not in classes}
        )
        client.update_traits(compute.uuid, remove=set(known.owned.get("traits", ())))
    return actions
