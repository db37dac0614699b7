"""Taking over from a running Cyborg (``acceleron adopt cyborg``): its device profiles,
its accelerator requests bound to live servers, and its providers in Placement.

Three steps, each of which only reads:

* ``read_cyborg``: Cyborg's rows, from its own database (SQLAlchemy Core, read-only);
* ``read_ours``: what Acceleron's agents reported on the same hosts, and the provider
  tree the Placement sync publishes for it;
* ``read_placement``: Cyborg's providers, their allocations and their consumers;

then ``plan`` (pure: rows in, a :class:`Plan` out) maps every item by host and PCI
address, and lists what it cannot map as problems. A plan with problems is never
applied: nothing changes until everything maps. ``apply`` then works in an order that
never leaves a server without its accelerator, and that a second run can finish:

1. device profiles are created with their names and uuids (Nova's flavors name them),
   groups rewritten to the names Acceleron publishes;
2. Cyborg's providers are made fully reserved (nothing new lands there), and renamed
   when Acceleron wants their name; the hosts are published (Acceleron's providers);
3. for each server: its requests are stored bound, holding the same attach handles, in
   one transaction; only then its allocation on Cyborg's providers moves to Acceleron's,
   in one write guarded by the consumer generation (its other allocations, VCPU or
   memory on the compute node, stay as they are): capacity is never counted twice nor
   freed while in use;
4. Cyborg's providers, empty now, are deleted.

Every step looks at what is already done (a request stored, an allocation moved, a
provider gone), so a run interrupted half way finishes when run again, and a run after
a complete one has nothing to do. Cyborg's database is never written; bitstreams stay
in Glance where they are.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, column, create_engine, insert, select, table, update
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from acceleron.db.models import (
    AcceleratorRequest,
    AttachHandle,
    Deployable,
    Device,
    DeviceProfile,
    InstanceBinding,
    utcnow,
)
from acceleron.db.models import table as model_table
from acceleron.db.session import Database
from acceleron.exceptions import AcceleronError, AllocationConflict, Conflict, InvalidInput
from acceleron.placement import names, tree
from acceleron.placement.client import CONCURRENT_UPDATE, Inventory, PlacementClient
from acceleron.service import arqs, device_profiles
from acceleron.service.publish import Syncer

LOG = logging.getLogger(__name__)
Allocations = Mapping[str, Mapping[str, int]]  # provider uuid -> class -> amount

# What Acceleron keeps of Cyborg's request states; the others are a bind or a delete in
# flight, which a takeover must not cut in half.
KEPT_STATES = ("Initial", "Bound", "BindFailed", "Unbound")
RENAMED_PREFIX = "cyborg-adopting-"
_ATTEMPTS = 4


class AdoptionRefused(Conflict):
    """Something of Cyborg's cannot be mapped: nothing was changed."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__(
            "The adoption stops before any change; it cannot map:\n"
            + "\n".join(f"  - {p}" for p in problems)
        )
        self.problems = list(problems)


# --- Cyborg's side ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CyborgDevice:
    id: int
    uuid: str
    hostname: str
    address: str | None  # canonical PCI address from its control path id; None: unreadable


@dataclasses.dataclass(frozen=True)
class CyborgDeployable:
    id: int
    uuid: str
    name: str
    device_id: int
    rp_uuid: str | None
    resource_class: str | None  # its ``rc`` attribute


@dataclasses.dataclass(frozen=True)
class CyborgHandle:
    id: int
    uuid: str
    deployable_id: int
    address: str | None  # canonical PCI address from attach_info; None: unreadable


@dataclasses.dataclass(frozen=True)
class CyborgProfile:
    id: int
    uuid: str
    name: str
    description: str | None
    groups: list[dict[str, str]] | None  # None: profile_json unreadable


@dataclasses.dataclass(frozen=True)
class CyborgArq:
    uuid: str
    state: str
    project_id: str | None
    profile_id: int
    group_id: int
    hostname: str | None
    rp_uuid: str | None
    instance_uuid: str | None
    handle_id: int | None


@dataclasses.dataclass(frozen=True)
class Cyborg:
    devices: Sequence[CyborgDevice] = ()
    deployables: Sequence[CyborgDeployable] = ()
    handles: Sequence[CyborgHandle] = ()
    profiles: Sequence[CyborgProfile] = ()
    arqs: Sequence[CyborgArq] = ()


def pci_address(info: str | None) -> str | None:
    """Cyborg's JSON PCI address (``{"domain": "0000", "bus": "0c", "device": "0",
    "function": "1"}``, hex digits, padded or not) in canonical form; None if it is not
    one."""
    try:
        bdf = json.loads(info or "")
        domain, bus, dev, fn = (
            int(str(bdf[k]), 16) for k in ("domain", "bus", "device", "function")
        )
    except (ValueError, TypeError, KeyError):
        return None
    if not (0 <= bus < 0x100 and 0 <= dev < 0x20 and 0 <= fn < 8 and 0 <= domain < 1 << 32):
        return None
    return f"{domain:04x}:{bus:02x}:{dev:02x}.{fn}"


def _groups(profile_json: str | None) -> list[dict[str, str]] | None:
    try:
        groups = json.loads(profile_json or "")["groups"]
    except (ValueError, TypeError, KeyError):
        return None
    if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
        return None
    return [{str(k): str(v) for k, v in g.items()} for g in groups]


# Cyborg's tables, the columns read (Core, no models: the schema is Cyborg's).
_C_DEVICES = table("devices", column("id"), column("uuid"), column("hostname"))
_C_CPIDS = table("controlpath_ids", column("device_id"), column("cpid_info"), column("id"))
_C_DEPLOYABLES = table(
    "deployables",
    column("id"),
    column("uuid"),
    column("name"),
    column("device_id"),
    column("rp_uuid"),
)
_C_ATTRIBUTES = table("attributes", column("deployable_id"), column("key"), column("value"))
_C_HANDLES = table(
    "attach_handles", column("id"), column("uuid"), column("deployable_id"), column("attach_info")
)
_C_PROFILES = table(
    "device_profiles",
    column("id"),
    column("uuid"),
    column("name"),
    column("description"),
    column("profile_json"),
)
_C_ARQS = table(
    "extended_accelerator_requests",
    column("id"),
    column("uuid"),
    column("state"),
    column("project_id"),
    column("device_profile_id"),
    column("device_profile_group_id"),
    column("hostname"),
    column("device_rp_uuid"),
    column("instance_uuid"),
    column("attach_handle_id"),
)


def read_cyborg(url: str) -> Cyborg:
    """Cyborg's devices, deployables, attach handles, profiles and requests, read in one
    transaction from its database at ``url``, which is never written."""
    try:
        engine = create_engine(url)
    except (ArgumentError, ImportError, ValueError) as error:
        raise InvalidInput(f"--database: {url!r} is not a database URL: {error}") from error
    try:
        with engine.connect() as conn:
            return _read_cyborg(conn)
    except SQLAlchemyError as error:
        raise InvalidInput(
            f"Cannot read Cyborg's database: {getattr(error, 'orig', None) or error}"
        ) from error
    finally:
        engine.dispose()


def _read_cyborg(conn: Connection) -> Cyborg:
    cpids: dict[int, str | None] = {}
    for row in conn.execute(select(_C_CPIDS).order_by(_C_CPIDS.c.id)):
        cpids.setdefault(row.device_id, pci_address(row.cpid_info))
    devices = [
        CyborgDevice(r.id, r.uuid, r.hostname, cpids.get(r.id))
        for r in conn.execute(select(_C_DEVICES).order_by(_C_DEVICES.c.id))
    ]
    classes = {
        r.deployable_id: r.value
        for r in conn.execute(select(_C_ATTRIBUTES).where(_C_ATTRIBUTES.c.key == "rc"))
    }
    deployables = [
        CyborgDeployable(r.id, r.uuid, r.name, r.device_id, r.rp_uuid, classes.get(r.id))
        for r in conn.execute(select(_C_DEPLOYABLES).order_by(_C_DEPLOYABLES.c.id))
    ]
    handles = [
        CyborgHandle(r.id, r.uuid, r.deployable_id, pci_address(r.attach_info))
        for r in conn.execute(select(_C_HANDLES).order_by(_C_HANDLES.c.id))
    ]
    profiles = [
        CyborgProfile(r.id, r.uuid, r.name, r.description, _groups(r.profile_json))
        for r in conn.execute(select(_C_PROFILES).order_by(_C_PROFILES.c.id))
    ]
    requests = [
        CyborgArq(
            r.uuid,
            r.state,
            r.project_id,
            r.device_profile_id,
            r.device_profile_group_id,
            r.hostname,
            r.device_rp_uuid,
            r.instance_uuid,
            r.attach_handle_id,
        )
        for r in conn.execute(select(_C_ARQS).order_by(_C_ARQS.c.id))
    ]
    return Cyborg(devices, deployables, handles, profiles, requests)


# --- Acceleron's side ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class OurHandle:
    id: int
    hostname: str
    address: str
    deployable_id: int
    provider: str  # the uuid of the provider its deployable is published as
    arq_uuid: str | None  # the request holding it


@dataclasses.dataclass(frozen=True)
class OurProvider:
    uuid: str
    name: str
    hostname: str
    inventories: Mapping[str, Inventory]
    traits: frozenset[str]

    @property
    def accelerator_class(self) -> str | None:
        return next((rc for rc in self.inventories if names.is_accelerator_class(rc)), None)


@dataclasses.dataclass(frozen=True)
class OurProfile:
    uuid: str
    name: str


@dataclasses.dataclass(frozen=True)
class Ours:
    devices: frozenset[tuple[str, str]] = frozenset()  # (host, PCI address)
    handles: Mapping[tuple[str, str], OurHandle] = dataclasses.field(default_factory=dict)
    providers: Mapping[str, OurProvider] = dataclasses.field(default_factory=dict)
    profiles: Sequence[OurProfile] = ()
    arqs: frozenset[str] = frozenset()  # the uuids of the requests Acceleron has


DEVICES, DEPLOYABLES = model_table(Device), model_table(Deployable)
HANDLES, PROFILES = model_table(AttachHandle), model_table(DeviceProfile)
ARQS, BINDINGS = model_table(AcceleratorRequest), model_table(InstanceBinding)


def read_ours(db: Database, hosts: Iterable[str], options: tree.Options) -> Ours:
    """What Acceleron's agents reported on ``hosts``, and the providers it publishes."""
    wanted = sorted(set(hosts))
    with db.reader() as conn:
        devices = list(conn.execute(select(DEVICES).where(DEVICES.c.hostname.in_(wanted))))
        ids = [d.id for d in devices]
        deployables = list(
            conn.execute(
                select(DEPLOYABLES)
                .where(DEPLOYABLES.c.device_id.in_(ids))
                .order_by(DEPLOYABLES.c.id)
            )
        )
        handle_rows = conn.execute(
            select(HANDLES.c.id, HANDLES.c.address, HANDLES.c.deployable_id, ARQS.c.uuid)
            .outerjoin(ARQS, ARQS.c.id == HANDLES.c.arq_id)
            .where(HANDLES.c.deployable_id.in_([d.id for d in deployables]))
        ).all()
        profiles = [
            OurProfile(r.uuid, r.name)
            for r in conn.execute(select(PROFILES.c.uuid, PROFILES.c.name))
        ]
        known = frozenset(conn.execute(select(ARQS.c.uuid)).scalars())
    host_of = {d.id: d.hostname for d in devices}
    dep_by_id = {d.id: d for d in deployables}
    handles = {}
    for h in handle_rows:
        dep = dep_by_id[h.deployable_id]
        host = host_of[dep.device_id]
        handles[(host, h.address)] = OurHandle(h.id, host, h.address, dep.id, dep.rp_uuid, h.uuid)
    providers: dict[str, OurProvider] = {}
    for host in wanted:
        mine = [d for d in devices if d.hostname == host]
        deps = [d for d in deployables if host_of[d.device_id] == host]
        for p in tree.desired_tree(host, "", mine, deps, options):
            providers[p.uuid] = OurProvider(p.uuid, p.name, host, p.inventories, p.traits)
    return Ours(
        frozenset((d.hostname, d.pci_address) for d in devices),
        handles,
        providers,
        profiles,
        known,
    )


# --- Placement ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class OldProvider:
    """One of Cyborg's providers as Placement has it."""

    uuid: str
    name: str
    parent_uuid: str | None
    inventories: Mapping[str, Inventory]
    allocations: Mapping[str, Mapping[str, int]]  # consumer -> class -> amount


@dataclasses.dataclass(frozen=True)
class PlacementView:
    old: Mapping[str, OldProvider] = dataclasses.field(default_factory=dict)
    # Every consumer of an old provider, and every server a bound request names.
    consumers: Mapping[str, Allocations] = dataclasses.field(default_factory=dict)
    present: frozenset[str] = frozenset()  # Acceleron's providers that exist already


def read_placement(client: PlacementClient, cyborg: Cyborg, ours: Ours) -> PlacementView:
    old: dict[str, OldProvider] = {}
    for dep in cyborg.deployables:
        if not dep.rp_uuid or dep.rp_uuid in old:
            continue
        found = client.get_provider(dep.rp_uuid)
        if found is None:
            continue  # deleted: adopted already, or never published
        _, inventories = client.get_inventories(found.uuid)
        allocations = client.get_allocations(found.uuid)
        old[found.uuid] = OldProvider(
            found.uuid, found.name, found.parent_uuid, inventories, allocations
        )
    servers = {c for p in old.values() for c in p.allocations}
    servers |= {a.instance_uuid for a in cyborg.arqs if a.state == "Bound" and a.instance_uuid}
    consumers = {c: client.get_consumer_allocations(c) for c in sorted(servers)}
    present = frozenset(u for u in ours.providers if client.get_provider(u) is not None)
    return PlacementView(old, consumers, present)


# --- the plan (pure) --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ProfileStep:
    name: str
    uuid: str
    description: str | None
    before: list[dict[str, str]]
    after: list[dict[str, str]]
    done: bool


@dataclasses.dataclass(frozen=True)
class ArqStep:
    uuid: str
    state: str
    project_id: str | None
    profile: str
    group_id: int
    hostname: str | None
    instance_uuid: str | None
    resource_class: str | None
    handle: OurHandle | None  # for a bound request: the handle it keeps
    done: bool


@dataclasses.dataclass(frozen=True)
class Move:
    """A server's allocation: ``sources`` (Cyborg's providers) give way to ``targets``."""

    consumer: str
    before: Allocations  # its part on Cyborg's providers
    targets: Allocations  # what it gets on Acceleron's


@dataclasses.dataclass(frozen=True)
class ProviderStep:
    uuid: str
    name: str
    parent_uuid: str | None
    rename: str | None  # Acceleron publishes a provider of its name: out of its way first
    reserve: bool  # not fully reserved yet


@dataclasses.dataclass
class Plan:
    profiles: list[ProfileStep] = dataclasses.field(default_factory=list)
    devices: list[str] = dataclasses.field(default_factory=list)
    arqs: list[ArqStep] = dataclasses.field(default_factory=list)
    moves: list[Move] = dataclasses.field(default_factory=list)
    providers: list[ProviderStep] = dataclasses.field(default_factory=list)
    publish: list[str] = dataclasses.field(default_factory=list)  # hosts to publish first
    problems: list[str] = dataclasses.field(default_factory=list)
    completed: bool = False  # an earlier run adopted the requests and the allocations

    @property
    def nothing_to_do(self) -> bool:
        return not (
            any(not p.done for p in self.profiles)
            or any(not a.done for a in self.arqs)
            or self.moves
            or self.providers
            or self.publish
        )

    def lines(self) -> list[str]:
        """The whole plan, as printed."""
        out = ["Device profiles:"]
        for p in self.profiles:
            out.append(f"  {'exists' if p.done else 'create'} {p.name} ({p.uuid})")
            out += _diff(p.before, p.after)
        out.append("Devices (host, PCI address: Cyborg's -> Acceleron's):")
        out += [f"  {d}" for d in self.devices]
        out.append("Accelerator requests:")
        if self.completed:
            out.append("  adopted by an earlier run: Cyborg's providers are gone from Placement")
        out += [f"  {'adopted' if a.done else 'adopt'} {_describe(a)}" for a in self.arqs]
        out.append("Placement:")
        for prov in self.providers:
            if prov.rename:
                out.append(f"  rename provider {prov.name} ({prov.uuid}) to {prov.rename}")
            if prov.reserve:
                out.append(f"  reserve provider {prov.name} ({prov.uuid}): nothing new lands")
        out += [f"  publish host {host}" for host in self.publish]
        for m in self.moves:
            out.append(
                f"  move consumer {m.consumer}: {_alloc(m.before)} -> {_alloc(m.targets)}"
                " (its other allocations kept)"
            )
        out += [f"  delete provider {p.name} ({p.uuid})" for p in self.providers]
        out.append("Bitstreams: they stay where they are (Glance).")
        return out


def _describe(a: ArqStep) -> str:
    text = f"{a.uuid} {a.state}, profile {a.profile} group {a.group_id}, project {a.project_id}"
    if a.handle is not None:
        text += (
            f", instance {a.instance_uuid}, handle {a.handle.hostname} {a.handle.address}"
            f", provider {a.handle.provider}"
        )
    return text


def _alloc(allocations: Allocations) -> str:
    return json.dumps({rp: dict(r) for rp, r in sorted(allocations.items())}, sort_keys=True)


def _diff(before: list[dict[str, str]], after: list[dict[str, str]]) -> list[str]:
    out = []
    for index, (old, new) in enumerate(zip(before, after, strict=True)):
        if old != new:
            out.append(f"    group {index}: - {json.dumps(old)}")
            out.append(f"    group {index}: + {json.dumps(new)}")
    return out


def plan(
    cyborg: Cyborg,
    ours: Ours,
    placement: PlacementView,
    mapping: device_profiles.NameMapping | None = None,
    limits: device_profiles.Limits | None = None,
) -> Plan:
    """What adopting ``cyborg`` takes, and every item it cannot map (``problems``)."""
    mapping = mapping or device_profiles.NameMapping()
    limits = limits or device_profiles.Limits()
    result = Plan()
    # Cyborg's providers go last, once every request is stored and every allocation
    # moved: when they are all gone, an earlier run finished (and Acceleron's requests
    # may have changed since: servers deleted, others booted).
    result.completed = any(d.rp_uuid for d in cyborg.deployables) and not placement.old
    handles = {} if result.completed else _match(cyborg, ours, result)
    full = _with_classes(cyborg, ours, handles, mapping, result)
    groups = _plan_profiles(cyborg, ours, full, limits, result)
    if not result.completed:
        _plan_arqs(cyborg, ours, handles, groups, result)
    _plan_moves(cyborg, ours, placement, result)
    _plan_providers(cyborg, ours, placement, result)
    return result


def _match(cyborg: Cyborg, ours: Ours, result: Plan) -> dict[int, OurHandle]:
    """Cyborg's devices and handles matched by host and PCI address: each device must be
    one an agent reports; a handle that no agent reports is a problem when it is held."""
    device_of = {d.id: d for d in cyborg.devices}
    dep_of = {d.id: d for d in cyborg.deployables}
    for d in cyborg.devices:
        where = f"device {d.uuid} on {d.hostname} at {d.address or 'an unreadable address'}"
        if d.address is None or (d.hostname, d.address) not in ours.devices:
            result.problems.append(f"{where}: no Acceleron agent reports it")
        else:
            result.devices.append(f"{d.hostname} {d.address}: {d.uuid} -> reported")
    held = {a.handle_id for a in cyborg.arqs if a.handle_id is not None}
    matched: dict[int, OurHandle] = {}
    for h in cyborg.handles:
        host = device_of[dep_of[h.deployable_id].device_id].hostname
        found = ours.handles.get((host, h.address or ""))
        if found is not None:
            matched[h.id] = found
        elif h.id in held:
            result.problems.append(
                f"attach handle {h.uuid} on {host} at {h.address or 'an unreadable address'}: "
                f"held by a request, and no Acceleron agent reports it"
            )
    return matched


def _with_classes(
    cyborg: Cyborg,
    ours: Ours,
    handles: Mapping[int, OurHandle],
    mapping: device_profiles.NameMapping,
    result: Plan,
) -> device_profiles.NameMapping:
    """``mapping`` with Cyborg's resource classes renamed to those Acceleron publishes the
    same handles under (the operator's own entries win)."""
    dep_of = {d.id: d for d in cyborg.deployables}
    seen: dict[str, set[str]] = {}
    for h in cyborg.handles:
        theirs = dep_of[h.deployable_id].resource_class
        mine = handles.get(h.id)
        provider = ours.providers.get(mine.provider) if mine else None
        if theirs and provider is not None and provider.accelerator_class:
            seen.setdefault(theirs, set()).add(provider.accelerator_class)
    classes = dict(mapping.resource_classes)
    for theirs, mine_ in sorted(seen.items()):
        if theirs in classes:
            continue
        if len(mine_) > 1:
            result.problems.append(
                f"resource class {theirs}: Acceleron publishes its devices as "
                f"{', '.join(sorted(mine_))}; say which in a --mapping file"
            )
        elif mine_ != {theirs}:
            classes[theirs] = next(iter(mine_))
    return dataclasses.replace(mapping, resource_classes=classes)


def _plan_profiles(
    cyborg: Cyborg,
    ours: Ours,
    mapping: device_profiles.NameMapping,
    limits: device_profiles.Limits,
    result: Plan,
) -> dict[int, list[dict[str, str]]]:
    """Each profile with its groups rewritten; Cyborg's profile id -> the new groups."""
    by_name = {p.name: p for p in ours.profiles}
    by_uuid = {p.uuid: p for p in ours.profiles}
    groups: dict[int, list[dict[str, str]]] = {}
    for p in cyborg.profiles:
        where = f"device profile {p.name} ({p.uuid})"
        if p.groups is None:
            result.problems.append(f"{where}: its profile_json holds no list of groups")
            continue
        try:
            after = [
                device_profiles.rewrite_group(g, mapping, i)[0] for i, g in enumerate(p.groups)
            ]
            after = device_profiles.normalize_groups(after, limits)
            device_profiles.check_name(p.name)
        except InvalidInput as error:
            result.problems.append(f"{where}: {error.message}")
            continue
        mine = by_name.get(p.name) or by_uuid.get(p.uuid)
        if mine is not None and (mine.name, mine.uuid) != (p.name, p.uuid):
            result.problems.append(
                f"{where}: Acceleron has a device profile {mine.name} ({mine.uuid}) already"
            )
            continue
        groups[p.id] = after
        result.profiles.append(
            ProfileStep(p.name, p.uuid, p.description, p.groups, after, mine is not None)
        )
    return groups


def _plan_arqs(
    cyborg: Cyborg,
    ours: Ours,
    handles: Mapping[int, OurHandle],
    groups: Mapping[int, list[dict[str, str]]],
    result: Plan,
) -> None:
    profile_of = {p.id: p for p in cyborg.profiles}
    for a in cyborg.arqs:
        profile = profile_of[a.profile_id]
        where = f"accelerator request {a.uuid} ({a.state}, instance {a.instance_uuid})"
        if a.state not in KEPT_STATES:
            result.problems.append(f"{where}: a bind or delete is in progress; let it end")
            continue
        if a.profile_id not in groups:
            continue  # its profile's problem is listed
        group = groups[a.profile_id][a.group_id] if a.group_id < len(groups[a.profile_id]) else {}
        handle = None
        if a.state == "Bound":
            handle = _bound_handle(a, handles, ours, group, where, result)
            if handle is None:
                continue
        classes = names.accelerators(group)
        result.arqs.append(
            ArqStep(
                a.uuid,
                a.state,
                a.project_id,
                profile.name,
                a.group_id,
                a.hostname,
                a.instance_uuid,
                classes[0] if classes else None,
                handle,
                a.uuid in ours.arqs,
            )
        )


def _bound_handle(
    a: CyborgArq,
    handles: Mapping[int, OurHandle],
    ours: Ours,
    group: Mapping[str, str],
    where: str,
    result: Plan,
) -> OurHandle | None:
    """The handle Acceleron's side of a bound request holds, if it maps and fits."""
    if not (a.instance_uuid and a.hostname and a.handle_id is not None):
        result.problems.append(f"{where}: Bound without an instance, host or attach handle")
        return None
    handle = handles.get(a.handle_id)
    if handle is None:
        return None  # the handle's problem is listed
    if handle.hostname != a.hostname:
        result.problems.append(
            f"{where}: bound on {a.hostname}, its handle is on {handle.hostname}"
        )
        return None
    if handle.arq_uuid not in (None, a.uuid):
        result.problems.append(
            f"{where}: Acceleron's handle {handle.hostname} {handle.address} is held by "
            f"request {handle.arq_uuid}"
        )
        return None
    provider = ours.providers.get(handle.provider)
    missing = _misfit(group, provider)
    if missing:
        result.problems.append(
            f"{where}: its device profile group {a.group_id}, rewritten, does not fit "
            f"Acceleron's provider {provider.name if provider else handle.provider}: {missing}; "
            f"give a --mapping file that renames it"
        )
        return None
    return handle


def _misfit(group: Mapping[str, str], provider: OurProvider | None) -> str:
    """What of ``group`` the provider lacks (empty: it fits)."""
    if provider is None:
        return "Acceleron does not publish it"
    lacking = []
    for key, value in group.items():
        prefix, _, name = key.partition(":")
        if prefix == "resources" and name not in provider.inventories:
            lacking.append(f"no resource class {name}")
        elif prefix == "trait" and (value == "required") != (name in provider.traits):
            lacking.append(f"{'no' if value == 'required' else 'forbidden'} trait {name}")
    return ", ".join(lacking)


def _plan_moves(cyborg: Cyborg, ours: Ours, placement: PlacementView, result: Plan) -> None:
    """Each server's allocation on Cyborg's providers, explained by its bound requests,
    and what it becomes on Acceleron's; an allocation they do not explain is a problem."""
    dep_of_handle = {h.id: h.deployable_id for h in cyborg.handles}
    dep_of = {d.id: d for d in cyborg.deployables}
    expected: dict[tuple[str, str], Counter[str]] = {}
    targets: dict[str, dict[str, Counter[str]]] = {}
    adopted = {a.uuid: a for a in result.arqs}
    for a in cyborg.arqs:
        if a.state != "Bound" or a.handle_id not in dep_of_handle or not a.instance_uuid:
            continue
        dep = dep_of[dep_of_handle[a.handle_id]]
        key = (a.instance_uuid, dep.rp_uuid or "")
        expected.setdefault(key, Counter())[dep.resource_class or ""] += 1
        step = adopted.get(a.uuid)
        if step is not None and step.handle is not None:
            provider = ours.providers[step.handle.provider]
            rc = provider.accelerator_class or ""
            targets.setdefault(a.instance_uuid, {}).setdefault(provider.uuid, Counter())[rc] += 1
    for old in placement.old.values():
        for consumer, held in sorted(old.allocations.items()):
            want = dict(expected.get((consumer, old.uuid), {}))
            if dict(held) != want:
                result.problems.append(
                    f"provider {old.name} ({old.uuid}): consumer {consumer} holds "
                    f"{dict(held)}, its bound requests explain {want or 'nothing'}"
                )
    for consumer, holds in sorted(placement.consumers.items()):
        before = {rp: r for rp, r in holds.items() if rp in placement.old}
        if before and consumer in targets:
            mine = {rp: dict(c) for rp, c in targets[consumer].items()}
            result.moves.append(Move(consumer, before, mine))


def _plan_providers(cyborg: Cyborg, ours: Ours, placement: PlacementView, result: Plan) -> None:
    """Cyborg's providers: out of Acceleron's way, then deleted; the hosts to publish."""
    taken = {p.name for p in ours.providers.values() if p.uuid not in placement.present}
    for old in placement.old.values():
        rename = f"{RENAMED_PREFIX}{old.uuid}" if old.name in taken else None
        reserve = any(i.reserved < i.total for i in old.inventories.values())
        result.providers.append(ProviderStep(old.uuid, old.name, old.parent_uuid, rename, reserve))
    devices = {d.hostname for d in cyborg.devices}
    missing = {p.hostname for p in ours.providers.values() if p.uuid not in placement.present}
    result.publish = sorted(missing & devices)


def moved(
    allocations: Allocations, sources: Iterable[str], targets: Allocations
) -> dict[str, dict[str, int]]:
    """A consumer's allocations with its part on ``sources`` replaced by ``targets``;
    every other allocation as it was."""
    gone = set(sources)
    out = {rp: dict(r) for rp, r in allocations.items() if rp not in gone}
    for rp, resources in targets.items():
        mine = out.setdefault(rp, {})
        for rc, amount in resources.items():
            mine[rc] = mine.get(rc, 0) + amount
    return out


# --- applying it ------------------------------------------------------------------------------


class AdoptionFailed(AcceleronError):
    """A step failed half way; running the adoption again finishes it."""


def apply(
    db: Database,
    client: PlacementClient,
    syncer: Syncer,
    the_plan: Plan,
    say: Callable[[str], None] = LOG.info,
) -> None:
    """Carry out ``the_plan`` (refused when it has problems). Each step is skipped when
    done already, so an interrupted run finishes when run again."""
    if the_plan.problems:
        raise AdoptionRefused(the_plan.problems)
    for p in the_plan.profiles:
        if not p.done:
            device_profiles.create(
                db, name=p.name, groups=p.after, description=p.description, uuid=p.uuid
            )
            say(f"created device profile {p.name} ({p.uuid})")
    for prov in the_plan.providers:
        _out_of_the_way(client, prov, say)
    for host in the_plan.publish:
        done = syncer.sync_host(host, force=True)
        if done.errors:
            raise AdoptionFailed(f"Publishing {host} to Placement failed: {'; '.join(done.errors)}")
        say(f"published host {host}")
    _store(db, [a for a in the_plan.arqs if not a.done and a.handle is None], say)
    moves = {m.consumer: m for m in the_plan.moves}
    servers = sorted({a.instance_uuid for a in the_plan.arqs if a.handle and a.instance_uuid})
    sources = [p.uuid for p in the_plan.providers]
    for server in servers:
        _store(
            db,
            [a for a in the_plan.arqs if a.instance_uuid == server and a.handle and not a.done],
            say,
        )
        if server in moves:
            _move(client, moves[server], sources, say)
    for prov in the_plan.providers:
        if client.delete_provider(prov.uuid):
            say(f"deleted provider {prov.name} ({prov.uuid})")


def _out_of_the_way(
    client: PlacementClient, prov: ProviderStep, say: Callable[[str], None]
) -> None:
    """Make one of Cyborg's providers fully reserved, and rename it if it must."""
    if prov.reserve:
        client.update_inventories(
            prov.uuid,
            lambda current: {
                rc: dataclasses.replace(i, reserved=i.total) for rc, i in current.items()
            },
        )
        say(f"reserved provider {prov.name} ({prov.uuid})")
    if prov.rename:
        client.move_provider(prov.uuid, prov.rename, prov.parent_uuid)
        say(f"renamed provider {prov.name} ({prov.uuid}) to {prov.rename}")


def _store(db: Database, steps: Sequence[ArqStep], say: Callable[[str], None]) -> None:
    """Store requests as Cyborg had them, in one transaction: a bound one holds its
    handle (taken only if free) and its instance's binding."""
    if not steps:
        return
    now = utcnow()
    with db.writer() as conn:
        profile_ids = {r.name: r.id for r in conn.execute(select(PROFILES.c.name, PROFILES.c.id))}
        for a in steps:
            values: dict[str, Any] = {
                "uuid": a.uuid,
                "state": a.state,
                "project_id": a.project_id,
                "device_profile_id": profile_ids[a.profile],
                "device_profile_group_id": a.group_id,
                "hostname": a.hostname,
                "instance_uuid": a.instance_uuid,
                "resource_class": a.resource_class,
                "created_at": now,
            }
            if a.handle is not None:
                values.update(
                    device_rp_uuid=a.handle.provider,
                    deployable_id=a.handle.deployable_id,
                    bind_started_at=now,
                    progress=100,
                )
            key = conn.execute(insert(ARQS).values(values)).inserted_primary_key
            assert key is not None  # an INSERT of one row always has it
            if a.handle is not None:
                _hold(conn, a, key[0], now)
    for a in steps:
        say(f"adopted accelerator request {a.uuid} ({a.state})")


def _hold(conn: Connection, a: ArqStep, arq_id: int, now: Any) -> None:
    assert a.handle is not None and a.instance_uuid is not None
    taken = conn.execute(
        update(HANDLES)
        .where(HANDLES.c.id == a.handle.id, HANDLES.c.arq_id.is_(None))
        .values(arq_id=arq_id, in_use=True, updated_at=now)
    )
    if taken.rowcount != 1:
        raise AdoptionFailed(
            f"Attach handle {a.handle.hostname} {a.handle.address} of request {a.uuid} was "
            f"taken meanwhile; nothing of this server was stored. Run the adoption again."
        )
    if (
        conn.execute(
            select(BINDINGS.c.id).where(BINDINGS.c.instance_uuid == a.instance_uuid)
        ).first()
        is None
    ):
        conn.execute(insert(BINDINGS).values(instance_uuid=a.instance_uuid))
    arqs.refresh_deployable(conn, a.handle.deployable_id)


def _move(
    client: PlacementClient, move: Move, sources: Sequence[str], say: Callable[[str], None]
) -> None:
    """One write of the consumer's allocations, guarded by its generation; read again and
    written anew when the consumer changed meanwhile."""
    for attempt in range(_ATTEMPTS):
        read = client.get_consumer(move.consumer)
        if not set(sources) & set(read.allocations):
            return  # moved already
        try:
            client.replace_allocations(
                move.consumer, read, moved(read.allocations, sources, move.targets)
            )
        except AllocationConflict as error:
            if error.code != CONCURRENT_UPDATE or attempt == _ATTEMPTS - 1:
                raise
            continue
        say(f"moved the allocation of {move.consumer} to {_alloc(move.targets)}")
        return
