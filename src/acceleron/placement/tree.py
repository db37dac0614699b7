"""The provider tree Acceleron wants in Placement for one host, from its inventory.

Nested mode (spec 001, the default)::

    compute node RP (Nova's, found by the host name)
      └─ device RP  <host>_<PCI address>          one per card
           └─ deployable RP  <host>_<address>_<key>   one per region, vGPU type,
                │                                      MIG profile or VF pool
                └─ its children's RPs (a region's VF pool, region0/vfs)

A deployable nested in another (spec 003's tree) is a child provider of its parent's
provider. A deployable of kind ``device`` (a whole GPU, say) puts its inventory on the
device RP itself. Every provider that has inventory carries the device type, product
and family traits, so that a request group naming a resource class and those traits
lands on one provider, as Nova asks; regions add their region type trait, a
function trait per function they implement (spec 004's and spec 001's spellings
both) and ``CUSTOM_PROGRAMMABLE``.

Flat mode (spec 001's fallback) puts every inventory and trait on the compute
node RP instead.

Pure functions: rows in, dataclasses out.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from acceleron.exceptions import InvalidInput
from acceleron.mig import geometry, units
from acceleron.placement import names
from acceleron.placement.client import Inventory

# A device or deployable that is not usable reserves its whole inventory: lost, unhealthy,
# or in maintenance (unless a device profile tolerates the maintenance's reason: then the
# inventory stays and its providers carry names.MAINTENANCE and the reason's trait). A
# usable one reserves the units being cleaned between tenants (``cleaning``).
MAINTAINING = "maintaining"
UNUSABLE_STATE = ("lost",)
UNUSABLE_HEALTH = ("unhealthy",)


@dataclasses.dataclass(frozen=True)
class Options:
    nested: bool = True
    standard_classes: bool = False
    # Functionality traits (COMPUTE, NETWORK, STORAGE) by device model or region type,
    # keyed by names.fold_key (service.placement.functionality_from_conf makes them).
    functionality: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # Maintenance reasons some enabled device profile tolerates (accel:tolerations).
    tolerated: frozenset[str] = frozenset()
    # Nested mode: a host's identical leaf deployables as one provider (a pool).
    pools: bool = False
    # By deployable id, the units of a partitionable GPU no request's allocation covers
    # (instances found on it, or given back and not destroyed yet): reserved.
    mig_taken: Mapping[int, units.Taken] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class DesiredProvider:
    uuid: str
    name: str
    parent_uuid: str | None
    inventories: Mapping[str, Inventory]
    traits: frozenset[str]
    # A pool's deployables (ids), in id order; empty for any other provider.
    members: tuple[int, ...] = ()

    def digest(self) -> str:
        """What we would write, hashed: equal digests mean nothing to write."""
        data = {
            "parent": self.parent_uuid,
            "inventories": {rc: inv.to_json() for rc, inv in sorted(self.inventories.items())},
            "traits": sorted(self.traits),
        }
        return hashlib.sha256(orjson.dumps(data)).hexdigest()


def maintenance(device: Any, dep: Any = None) -> str | None:
    """The reason of the maintenance the device, or the deployable alone, is in (an empty
    string when none was given); None when neither is."""
    if device.status == MAINTAINING:
        return str(getattr(device, "maintenance_reason", None) or "")
    if dep is not None and getattr(dep, "status", None) == MAINTAINING:
        return str(getattr(dep, "maintenance_reason", None) or "")
    return None


def unhealthy(device: Any, dep: Any = None) -> bool:
    """Lost, or unhealthy itself or through its device: nothing may land on it."""
    return (
        device.state in UNUSABLE_STATE
        or device.health in UNUSABLE_HEALTH
        or (dep is not None and getattr(dep, "health", None) in UNUSABLE_HEALTH)
    )


def _unusable(device: Any, dep: Any, options: Options) -> bool:
    if unhealthy(device, dep):
        return True
    reason = maintenance(device, dep)
    return reason is not None and not names.tolerated(reason, options.tolerated)


def _tolerated_maintenance(device: Any, dep: Any, options: Options) -> set[str]:
    reason = maintenance(device, dep)
    if reason is None or unhealthy(device, dep) or not names.tolerated(reason, options.tolerated):
        return set()
    return names.maintenance_traits(reason)


def _origin(device: Any) -> names.Origin:
    return names.Origin(driver=device.driver_name, device=f"{device.hostname} {device.pci_address}")


def device_traits(device: Any) -> set[str]:
    origin = _origin(device)
    traits = {
        names.OWNER,
        names.device_type_trait(device.type, device.vendor_name, origin=origin),
        names.product_trait(device.type, device.vendor_name, device.model, origin=origin),
    }
    family = names.family_trait(device.type, device.vendor_name, device.model, origin=origin)
    return traits | ({family} if family else set())


def functions(dep: Any) -> list[str]:
    """Every function of a deployable: ``function_uuids`` as reported, the first of which
    is ``function_uuid``. A ``function_uuid`` changed since (the region was programmed
    and the agent has not reported yet) is alone current."""
    if not dep.function_uuid:
        return []
    listed = list(dep.function_uuids or [])
    return listed if listed[:1] == [dep.function_uuid] else [dep.function_uuid]


def deployable_traits(device: Any, dep: Any, options: Options) -> set[str]:
    origin = _origin(device)
    traits = device_traits(device) | {names.check_trait(t, origin=origin) for t in dep.traits}
    if dep.region_type:
        traits |= set(
            names.region_type_traits(
                device.type, device.vendor_name, dep.region_type, origin=origin
            )
        )
    for function in functions(dep):
        traits |= set(
            names.function_traits(device.type, device.vendor_name, function, origin=origin)
        )
    if dep.programmable:
        traits.add(names.PROGRAMMABLE)
    if getattr(dep, "kind", None) == units.KIND and geometry.known(str(device.product_id)):
        traits |= {units.PARTITIONABLE, units.product_trait(geometry.product(device.product_id))}
    traits |= _tolerated_maintenance(device, dep, options)
    return traits | _functionality_traits(device, dep, options, origin)


def _functionality_traits(
    device: Any, dep: Any, options: Options, origin: names.Origin
) -> set[str]:
    """``CUSTOM_<TYPE>_COMPUTE`` and the like, configured by model or region type."""
    if not options.functionality:
        return set()
    keys = [names.fold_key(k, origin=origin) for k in (device.model, dep.region_type) if k]
    return {
        names.functionality_trait(device.type, options.functionality[key], origin=origin)
        for key in keys
        if key in options.functionality
    }


def inventories(device: Any, dep: Any, options: Options) -> dict[str, Inventory]:
    """A deployable's inventory: its accelerators, and its memory when known."""
    if dep.num_accelerators <= 0:
        return {}
    if getattr(dep, "kind", None) == units.KIND:
        return _partitionable(device, dep, options)
    origin = _origin(device)
    kind = dep.accelerator_type or device.type
    total = dep.num_accelerators
    # Unusable: all of it; else the units given back and not clean yet (service.cleaning).
    cleaning = min(total, max(0, getattr(dep, "cleaning", 0) or 0))
    reserved = total if _unusable(device, dep, options) else cleaning
    result = {
        names.accelerator_class(kind, standard=options.standard_classes, origin=origin): Inventory(
            total=total, reserved=reserved, max_unit=total
        )
    }
    if dep.memory_mb:
        memory = dep.memory_mb * total
        # Spec 001 names the class after the memory (DDR, HBM...); where the driver
        # cannot tell, after the accelerator type (CUSTOM_ACCELERATOR_MEMORY_GPU).
        named = dep.memory_type or kind
        result[names.memory_class(named, origin=origin)] = Inventory(
            total=memory, reserved=dep.memory_mb * reserved, max_unit=dep.memory_mb
        )
    return result


def _partitionable(device: Any, dep: Any, options: Options) -> dict[str, Inventory]:
    """A GPU carved on demand (``acceleron.mig.units``): the instances it can hold, its
    compute and memory slices; what no allocation covers reserved, all of it when it is
    unusable. A GPU whose product has no MIG table offers no slices."""
    try:
        product = geometry.product(str(device.product_id))
    except InvalidInput:
        return {}
    held = options.mig_taken.get(dep.id, units.Taken())
    unusable = _unusable(device, dep, options)
    cleaning = max(0, getattr(dep, "cleaning", 0) or 0)
    result = {}
    for rc, total, reserved in (
        (units.INSTANCE_CLASS, dep.num_accelerators, held.instances + cleaning),
        (units.COMPUTE_CLASS, product.compute_slices, held.compute),
        (units.MEMORY_CLASS, product.memory_slices, held.memory),
    ):
        result[rc] = Inventory(
            total=total, reserved=total if unusable else min(total, reserved), max_unit=total
        )
    return result


def _merge(into: dict[str, Inventory], more: Mapping[str, Inventory]) -> None:
    for rc, inv in more.items():
        if rc in into:
            old = into[rc]
            into[rc] = Inventory(
                total=old.total + inv.total,
                reserved=old.reserved + inv.reserved,
                max_unit=max(old.max_unit, inv.max_unit),
            )
        else:
            into[rc] = inv


def desired_tree(
    hostname: str,
    compute_uuid: str,
    devices: Sequence[Any],
    deployables: Iterable[Any],
    options: Options,
    held: Mapping[int, Mapping[str, int]] | None = None,
) -> list[DesiredProvider]:
    """Providers under the compute node, parents before children. ``devices`` and
    ``deployables`` are rows (attributes named as the columns).

    With ``options.pools`` a host's identical leaf deployables are one provider (a pool,
    after the others; see :func:`pool_key`). ``held``: by deployable id, how many of its
    units requests hold through each provider (``arqs.device_rp_uuid``): a pool reserves
    the units of its members held through another provider (an older per-device one,
    another pool), and counts in its total the units held through it whose deployables
    are no longer its members, until they are released."""
    by_device: dict[int, list[Any]] = {}
    for dep in deployables:
        by_device.setdefault(dep.device_id, []).append(dep)
    parents = {d.parent_id for deps in by_device.values() for d in deps if d.parent_id}
    pools: dict[str, _Pool] = {}
    providers = []
    for device in devices:
        device_uuid = names.provider_uuid(hostname, device.pci_address)
        own: dict[str, Inventory] = {}
        traits = device_traits(device)
        children = []
        mine = by_device.get(device.id, [])
        # A deployable's provider: the device's for a whole device, its own otherwise.
        provider_of = {d.id: device_uuid if d.kind == "device" else d.uuid for d in mine}
        pooled = False
        for dep in _parents_first(mine):
            if options.pools and options.nested and _poolable(dep, parents):
                _add_to_pool(pools, hostname, device, dep, options)
                pooled = True
                continue
            if dep.kind == "device":
                _merge(own, inventories(device, dep, options))
                traits |= deployable_traits(device, dep, options)
                continue
            children.append(
                DesiredProvider(
                    uuid=dep.uuid,
                    name=dep.name,
                    parent_uuid=provider_of.get(dep.parent_id, device_uuid),
                    inventories=inventories(device, dep, options),
                    traits=frozenset(deployable_traits(device, dep, options)),
                )
            )
        if pooled and not own and not children:
            continue  # all of it is in pools: no provider of its own
        name = names.provider_name(hostname, device.pci_address)
        providers.append(DesiredProvider(device_uuid, name, compute_uuid, own, frozenset(traits)))
        providers.extend(children)
    by_id = {d.id: d for deps in by_device.values() for d in deps}
    return providers + [
        pool.provider(compute_uuid, by_id, held or {})
        for pool in sorted(pools.values(), key=lambda p: p.name)
    ]


def _poolable(dep: Any, parents: set[int]) -> bool:
    """A deployable with inventory and no deployable under it, not under another itself:
    a whole device, a vGPU type, a MIG profile, a card's VF pool. Not an FPGA region, nor
    anything that holds or can load a function: what it holds changes with its tenants
    (a bind programs it, a cleaning blanks it), and with it its traits and so its pool. A
    pool it leaves empty is deleted, and Nova's compute service, which caches the
    providers under its compute node, then fails every build on that host
    (``ResourceProviderAllocationRetrievalFailed``) until it reads them again."""
    if (
        dep.programmable
        or dep.function_uuid
        or dep.region_type
        or getattr(dep, "kind", None) == units.KIND
    ):
        return False  # a partitionable GPU: its own layout, so its own provider
    return dep.num_accelerators > 0 and dep.parent_id is None and dep.id not in parents


def pool_key(device: Any, dep: Any, options: Options) -> tuple[str, str]:
    """The pool of a deployable, and its accelerator class: deployables of a host whose
    classes, memory per unit and traits are the same (identical devices, MIG profiles of
    identical GPUs, regions holding the same functions) share a pool."""
    classes = sorted(inventories(device, dep, options))
    traits = sorted(deployable_traits(device, dep, options))
    data = {"classes": classes, "memory_mb": dep.memory_mb or 0, "traits": traits}
    kind = dep.accelerator_type or device.type
    accelerator = names.accelerator_class(
        kind, standard=options.standard_classes, origin=_origin(device)
    )
    return hashlib.sha256(orjson.dumps(data)).hexdigest(), accelerator


@dataclasses.dataclass
class _Pool:
    uuid: str
    name: str
    traits: frozenset[str]
    members: list[tuple[Any, Any, dict[str, Inventory]]]  # device, deployable, inventory

    def provider(
        self, compute_uuid: str, by_id: Mapping[int, Any], held: Mapping[int, Mapping[str, int]]
    ) -> DesiredProvider:
        """The pool as a provider: its members' inventories summed, each class's
        ``max_unit`` the whole; the units held through other providers reserved."""
        total: dict[str, Inventory] = {}
        ids = {dep.id for _, dep, _ in self.members}
        for _, dep, inventory in self.members:
            elsewhere = sum(n for rp, n in held.get(dep.id, {}).items() if rp != self.uuid)
            _merge(total, _reserving(dep, inventory, elsewhere))
        for dep_id, by_rp in held.items():  # held through this pool, no longer in it
            dep, count = by_id.get(dep_id), by_rp.get(self.uuid, 0)
            if dep is not None and dep_id not in ids and count:
                _merge(total, _extra(total, dep, count))
        whole = {rc: dataclasses.replace(inv, max_unit=inv.total) for rc, inv in total.items()}
        members = tuple(sorted(ids))
        return DesiredProvider(self.uuid, self.name, compute_uuid, whole, self.traits, members)


def _reserving(dep: Any, inventory: Mapping[str, Inventory], units: int) -> dict[str, Inventory]:
    """A member's inventory with ``units`` more of it reserved (held elsewhere)."""
    if units <= 0:
        return dict(inventory)
    result = {}
    for rc, inv in inventory.items():
        per_unit = inv.total // max(1, dep.num_accelerators)
        reserved = min(inv.total, inv.reserved + per_unit * units)
        result[rc] = dataclasses.replace(inv, reserved=reserved)
    return result


def _extra(total: Mapping[str, Inventory], dep: Any, count: int) -> dict[str, Inventory]:
    """What ``count`` units of ``dep`` held through a pool they left add to its total."""
    memory = dep.memory_mb or 0
    return {
        rc: Inventory(
            total=count * (1 if not rc.startswith(names.MEMORY_PREFIX) else memory),
            reserved=0,
            max_unit=1,
        )
        for rc in total
        if not rc.startswith(names.MEMORY_PREFIX) or memory
    }


def _add_to_pool(
    pools: dict[str, _Pool], hostname: str, device: Any, dep: Any, options: Options
) -> None:
    key, accelerator = pool_key(device, dep, options)
    pool = pools.get(key)
    if pool is None:
        traits = frozenset(deployable_traits(device, dep, options))
        name = names.pool_name(hostname, accelerator, key)
        pool = pools[key] = _Pool(names.pool_uuid(hostname, key), name, traits, [])
    pool.members.append((device, dep, inventories(device, dep, options)))


def _parents_first(deployables: Sequence[Any]) -> list[Any]:
    """A device's deployables, each after its parent (id order otherwise)."""
    by_id = {d.id: d for d in deployables}

    def depth(dep: Any) -> int:
        level, seen = 0, {dep.id}
        while dep.parent_id in by_id and dep.parent_id not in seen:
            dep = by_id[dep.parent_id]
            seen.add(dep.id)
            level += 1
        return level

    return sorted(deployables, key=lambda d: (depth(d), d.id))


def flat_contribution(
    devices: Sequence[Any], deployables: Iterable[Any], options: Options
) -> tuple[dict[str, Inventory], frozenset[str]]:
    """Flat mode: what Acceleron adds to the compute node RP (inventories, traits)."""
    by_id = {device.id: device for device in devices}
    total: dict[str, Inventory] = {}
    traits: set[str] = set()
    for dep in deployables:
        device = by_id.get(dep.device_id)
        if device is None:
            continue
        _merge(total, inventories(device, dep, options))
        traits |= deployable_traits(device, dep, options)
    return total, frozenset(traits)
