"""The plan of an adoption of Cyborg (``acceleron adopt cyborg``), pure: what Acceleron
and Placement hold (read by ``adopt.read_acceleron`` and ``adopt.read_placement``) and
Cyborg's rows (``cyborg_db.read_cyborg``) in, a :class:`Plan` out. ``plan`` maps every
item by host and PCI address and lists what it cannot map as problems; ``adopt.apply``
carries a plan without problems out (service/adopt.py says in which order).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from itertools import zip_longest
from typing import Any

from acceleron.db.models import utcnow
from acceleron.exceptions import InvalidInput
from acceleron.placement import names
from acceleron.placement.client import Consumer, Inventory
from acceleron.service import device_profiles
from acceleron.service.cyborg_db import Cyborg, CyborgArq

Allocations = Mapping[str, Mapping[str, int]]  # provider uuid -> class -> amount

# What Acceleron keeps of Cyborg's request states; the others are a bind or a delete in
# flight, which a takeover must not cut in half. A bind that Cyborg's conductor left
# unfinished (BindStarted for longer than Nova waits for it) is adopted as Unbound.
KEPT_STATES = ("Initial", "Bound", "BindFailed", "Unbound")
RENAMED_PREFIX = "cyborg-adopting-"
NOVA_BIND_TIMEOUT = 300  # Nova's [DEFAULT] arq_binding_timeout, its default


# --- Acceleron's side ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class AcceleronHandle:
    """An attach handle Acceleron's agent reported, by host and address."""

    id: int
    hostname: str
    address: str
    deployable_id: int
    provider: str  # the uuid of the provider its deployable is published as
    arq_uuid: str | None  # the request holding it


@dataclasses.dataclass(frozen=True)
class AcceleronProvider:
    """A provider the Placement sync publishes for a host Acceleron knows."""

    uuid: str
    name: str
    hostname: str
    inventories: Mapping[str, Inventory]
    traits: frozenset[str]
    parent_uuid: str | None = None  # None: the compute node

    @property
    def accelerator_class(self) -> str | None:
        return next((rc for rc in self.inventories if names.is_accelerator_class(rc)), None)


@dataclasses.dataclass(frozen=True)
class AcceleronProfile:
    """A device profile Acceleron already has."""

    uuid: str
    name: str
    groups: Sequence[Mapping[str, str]] = ()


@dataclasses.dataclass(frozen=True)
class Earlier:
    """What earlier adoptions took over (the ``adopted`` table), by kind."""

    profiles: frozenset[str] = frozenset()
    arqs: frozenset[str] = frozenset()
    # Cyborg's providers as Placement had them before the first change (document form).
    providers: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    # Servers' allocations as they were on Cyborg's providers (document form).
    allocations: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    renames: device_profiles.NameMapping = dataclasses.field(
        default_factory=device_profiles.NameMapping
    )


@dataclasses.dataclass(frozen=True)
class AcceleronState:
    """What Acceleron holds on the hosts being adopted: devices, handles, the providers it
    publishes, profiles, requests, and what earlier adoptions took over."""

    devices: frozenset[tuple[str, str]] = frozenset()  # (host, PCI address)
    handles: Mapping[tuple[str, str], AcceleronHandle] = dataclasses.field(default_factory=dict)
    providers: Mapping[str, AcceleronProvider] = dataclasses.field(default_factory=dict)
    profiles: Sequence[AcceleronProfile] = ()
    # The requests Acceleron has: uuid -> the provider it is bound on (None: unbound).
    arqs: Mapping[str, str | None] = dataclasses.field(default_factory=dict)
    earlier: Earlier = Earlier()


# --- Placement ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CyborgProvider:
    """One of Cyborg's providers as Placement has it."""

    uuid: str
    name: str
    parent_uuid: str | None
    inventories: Mapping[str, Inventory]
    allocations: Mapping[str, Mapping[str, int]]  # consumer -> class -> amount
    traits: frozenset[str] = frozenset()


@dataclasses.dataclass(frozen=True)
class PlacementView:
    old: Mapping[str, CyborgProvider] = dataclasses.field(default_factory=dict)
    # Every consumer of an old provider, and every server a bound request names.
    consumers: Mapping[str, Consumer] = dataclasses.field(default_factory=dict)
    present: frozenset[str] = frozenset()  # Acceleron's providers that exist already


# --- the plan (pure) --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ProfileStep:
    name: str
    uuid: str
    description: str | None
    before: list[dict[str, str]]
    after: list[dict[str, str]]  # done: what Acceleron has
    done: bool


@dataclasses.dataclass(frozen=True)
class ArqStep:
    uuid: str
    state: str  # as Acceleron stores it
    project_id: str | None
    profile: str
    group_id: int
    hostname: str | None
    instance_uuid: str | None
    resource_class: str | None
    handle: AcceleronHandle | None  # for a bound request: the handle it keeps
    done: bool
    handle_uuid: str | None = None  # Cyborg's attach handle's uuid, which the handle takes
    created_at: dt.datetime | None = None
    reason: str | None = None  # why it is stored in another state than Cyborg's


@dataclasses.dataclass(frozen=True)
class Move:
    """A server's allocation: ``sources`` (Cyborg's providers) give way to ``targets``."""

    consumer: str
    before: Allocations  # its part on Cyborg's providers
    targets: Allocations  # what it gets on Acceleron's
    project_id: str | None = None
    user_id: str | None = None
    consumer_type: str | None = None

    def detail(self) -> dict[str, Any]:
        """As recorded and written in the plan's document."""
        return {
            "consumer": self.consumer,
            "project_id": self.project_id,
            "user_id": self.user_id,
            "consumer_type": self.consumer_type,
            "before": plain(self.before),
            "after": plain(self.targets),
        }


@dataclasses.dataclass(frozen=True)
class ProviderStep:
    uuid: str
    name: str
    parent_uuid: str | None
    rename: str | None  # Acceleron publishes a provider of its name: out of its way first
    reserve: bool  # not fully reserved yet
    inventories: Mapping[str, Inventory] = dataclasses.field(default_factory=dict)
    traits: frozenset[str] = frozenset()
    allocations: Mapping[str, Mapping[str, int]] = dataclasses.field(default_factory=dict)

    def detail(self) -> dict[str, Any]:
        """As recorded and written in the plan's document: what the way back restores."""
        return {
            "uuid": self.uuid,
            "name": self.name,
            "parent_uuid": self.parent_uuid,
            "inventories": {rc: i.to_json() for rc, i in sorted(self.inventories.items())},
            "traits": sorted(self.traits),
        }


@dataclasses.dataclass
class Plan:
    profiles: list[ProfileStep] = dataclasses.field(default_factory=list)
    devices: list[str] = dataclasses.field(default_factory=list)
    arqs: list[ArqStep] = dataclasses.field(default_factory=list)
    moves: list[Move] = dataclasses.field(default_factory=list)
    providers: list[ProviderStep] = dataclasses.field(default_factory=list)
    publish: list[str] = dataclasses.field(default_factory=list)  # hosts to publish first
    problems: list[str] = dataclasses.field(default_factory=list)
    # Every rename the plan makes (the operator's, earlier runs', the classes derived).
    renames: device_profiles.NameMapping = dataclasses.field(
        default_factory=device_profiles.NameMapping
    )
    earlier: Earlier = Earlier()
    ours: Sequence[AcceleronProvider] = ()  # Acceleron's providers on Cyborg's hosts
    schema: str = ""

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
        out += [f"  {'adopted' if a.done else 'adopt'} {describe(a)}" for a in self.arqs]
        out.append("Placement:")
        for prov in self.providers:
            if prov.rename:
                out.append(f"  rename provider {prov.name} ({prov.uuid}) to {prov.rename}")
            if prov.reserve:
                out.append(f"  reserve provider {prov.name} ({prov.uuid}): nothing new lands")
        out += [f"  publish host {host}" for host in self.publish]
        for m in self.moves:
            out.append(
                f"  move consumer {m.consumer}: {describe_allocation(m.before)} -> "
                f"{describe_allocation(m.targets)} (its other allocations kept)"
            )
        out += [f"  delete provider {p.name} ({p.uuid})" for p in self.providers]
        out.append("Bitstreams: they stay where they are (Glance).")
        return out


def describe(a: ArqStep) -> str:
    text = f"{a.uuid} {a.state}, profile {a.profile} group {a.group_id}, project {a.project_id}"
    if a.handle is not None:
        text += (
            f", instance {a.instance_uuid}, handle {a.handle.hostname} {a.handle.address}"
            f" (uuid {a.handle_uuid}), provider {a.handle.provider}"
        )
    if a.reason:
        text += f": {a.reason}"
    return text


def plain(allocations: Allocations) -> dict[str, dict[str, int]]:
    """Allocations as plain dictionaries, by provider (for JSON and comparisons)."""
    return {rp: dict(r) for rp, r in sorted(allocations.items())}


def describe_allocation(allocations: Allocations) -> str:
    return json.dumps(plain(allocations), sort_keys=True)


def _diff(before: Sequence[Mapping[str, str]], after: Sequence[Mapping[str, str]]) -> list[str]:
    out = []
    for index, (old, new) in enumerate(zip_longest(before, after)):
        if old != new:
            out.append(f"    group {index}: - {json.dumps(old)}")
            out.append(f"    group {index}: + {json.dumps(new)}")
    return out


@dataclasses.dataclass(frozen=True)
class Settings:
    """What a plan depends on besides the rows: the operator's renames, the limits on
    device profiles, and when a bind left in BindStarted counts as abandoned."""

    mapping: device_profiles.NameMapping = dataclasses.field(
        default_factory=device_profiles.NameMapping
    )
    limits: device_profiles.Limits = dataclasses.field(default_factory=device_profiles.Limits)
    now: dt.datetime | None = None  # naive UTC; None: now
    bind_timeout: float = NOVA_BIND_TIMEOUT


def plan(
    cyborg: Cyborg,
    ours: AcceleronState,
    placement: PlacementView,
    mapping: device_profiles.NameMapping | None = None,
    limits: device_profiles.Limits | None = None,
    settings: Settings | None = None,
) -> Plan:
    """What adopting ``cyborg`` takes, and every item it cannot map (``problems``)."""
    settings = settings or Settings()
    if mapping is not None or limits is not None:
        settings = dataclasses.replace(
            settings, mapping=mapping or settings.mapping, limits=limits or settings.limits
        )
    result = Plan(earlier=ours.earlier, ours=list(ours.providers.values()), schema=cyborg.schema)
    gone = _deleted_by_adoption(ours, placement)
    done = {a.uuid for a in cyborg.arqs if _done(a.uuid, ours)}
    handles = _match(cyborg, ours, gone, done, result)
    result.renames = _with_classes(cyborg, ours, handles, _earlier_and(ours, settings), result)
    groups = _plan_profiles(cyborg, ours, result.renames, settings.limits, result)
    _plan_arqs(cyborg, ours, handles, groups, gone, settings, result)
    _plan_moves(cyborg, ours, placement, result)
    _plan_providers(cyborg, ours, placement, gone, result)
    return result


def _done(uuid: str, ours: AcceleronState) -> bool:
    """An earlier run adopted the request (it may be gone from Acceleron since)."""
    return uuid in ours.earlier.arqs or uuid in ours.arqs


def _deleted_by_adoption(ours: AcceleronState, placement: PlacementView) -> frozenset[str]:
    """Cyborg's providers an adoption recorded and that are gone from Placement."""
    return frozenset(u for u in ours.earlier.providers if u not in placement.old)


def _earlier_and(ours: AcceleronState, settings: Settings) -> device_profiles.NameMapping:
    """The renames earlier runs used, the operator's entries of this run over them."""
    earlier, given = ours.earlier.renames, settings.mapping
    return device_profiles.NameMapping(
        {**earlier.resource_classes, **given.resource_classes},
        {**earlier.traits, **given.traits},
        given.properties or earlier.properties,
    )


def _match(
    cyborg: Cyborg, ours: AcceleronState, gone: frozenset[str], done: set[str], result: Plan
) -> dict[int, AcceleronHandle]:
    """Cyborg's devices and handles matched by host and PCI address: each device must be
    one an agent reports (unless an earlier adoption deleted its providers); a handle no
    agent reports is a problem when a request still to adopt holds it."""
    device_of = {d.id: d for d in cyborg.devices}
    dep_of = {d.id: d for d in cyborg.deployables}
    for d in cyborg.devices:
        where = f"device {d.uuid} on {d.hostname} at {d.address or 'an unreadable address'}"
        providers = {p.rp_uuid for p in cyborg.deployables if p.device_id == d.id and p.rp_uuid}
        if d.address is not None and (d.hostname, d.address) in ours.devices:
            result.devices.append(f"{d.hostname} {d.address}: {d.uuid} -> reported")
        elif providers and providers <= gone:
            result.devices.append(f"{d.hostname} {d.address}: {d.uuid} -> adopted earlier, gone")
        else:
            result.problems.append(f"{where}: no Acceleron agent reports it")
    held = {a.handle_id for a in cyborg.arqs if a.handle_id is not None and a.uuid not in done}
    matched: dict[int, AcceleronHandle] = {}
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
    ours: AcceleronState,
    handles: Mapping[int, AcceleronHandle],
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
    ours: AcceleronState,
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
        mine = by_name.get(p.name) or by_uuid.get(p.uuid)
        if mine is not None and (mine.name, mine.uuid) != (p.name, p.uuid):
            result.problems.append(
                f"{where}: Acceleron has a device profile {mine.name} ({mine.uuid}) already"
            )
            continue
        if mine is not None:  # what Acceleron has is what its requests are bound by
            groups[p.id] = [dict(g) for g in mine.groups]
            result.profiles.append(
                ProfileStep(p.name, p.uuid, p.description, p.groups or [], groups[p.id], True)
            )
            continue
        if p.groups is None:
            result.problems.append(f"{where}: its profile_json holds no list of groups")
            continue
        try:
            after = [
                device_profiles.rewrite_group(g, mapping, i)[0] for i, g in enumerate(p.groups)
            ]
            groups[p.id] = device_profiles.normalize_groups(after, limits)
            device_profiles.check_name(p.name)
        except InvalidInput as error:
            groups.pop(p.id, None)
            result.problems.append(f"{where}: {error.message}")
            continue
        result.profiles.append(
            ProfileStep(p.name, p.uuid, p.description, p.groups, groups[p.id], False)
        )
    return groups


def _plan_arqs(
    cyborg: Cyborg,
    ours: AcceleronState,
    handles: Mapping[int, AcceleronHandle],
    groups: Mapping[int, list[dict[str, str]]],
    gone: frozenset[str],
    settings: Settings,
    result: Plan,
) -> None:
    profile_of = {p.id: p for p in cyborg.profiles}
    handle_uuid = {h.id: h.uuid for h in cyborg.handles}
    for a in cyborg.arqs:
        profile = profile_of[a.profile_id]
        if _done(a.uuid, ours):
            result.arqs.append(_adopted_step(a, profile.name))
            continue
        where = f"accelerator request {a.uuid} ({a.state}, instance {a.instance_uuid})"
        abandoned = _abandoned(a, settings)
        if a.state not in KEPT_STATES and abandoned is None:
            result.problems.append(f"{where}: {_in_flight(a, settings)}")
            continue
        if a.profile_id not in groups:
            continue  # its profile's problem is listed
        mine = groups[a.profile_id]
        if not 0 <= a.group_id < len(mine):
            result.problems.append(
                f"{where}: its device profile {profile.name} has no group {a.group_id} "
                f"(it has {len(mine)}); Nova's flavor and the profile disagree"
            )
            continue
        handle = None
        if a.state == "Bound":
            handle = _bound_handle(a, handles, ours, mine[a.group_id], gone, where, result)
            if handle is None:
                continue
        classes = names.accelerators(mine[a.group_id])
        kept = abandoned is None
        result.arqs.append(
            ArqStep(
                a.uuid,
                a.state if kept else "Unbound",
                a.project_id,
                profile.name,
                a.group_id,
                a.hostname if kept else None,
                a.instance_uuid if kept else None,
                classes[0] if classes else None,
                handle,
                False,
                handle_uuid.get(a.handle_id) if handle and a.handle_id is not None else None,
                a.created_at,
                abandoned,
            )
        )


def _adopted_step(a: CyborgArq, profile: str) -> ArqStep:
    return ArqStep(
        a.uuid,
        a.state,
        a.project_id,
        profile,
        a.group_id,
        a.hostname,
        a.instance_uuid,
        None,
        None,
        True,
    )


def _abandoned(a: CyborgArq, settings: Settings) -> str | None:
    """Why a request left in BindStarted counts as abandoned (Cyborg's conductor runs
    each bind in a thread of its own, and a conductor that stopped leaves it there for
    ever), or None: Nova gives up waiting for a bind after its arq_binding_timeout."""
    since = a.updated_at or a.created_at
    if a.state != "BindStarted" or since is None:
        return None
    now = settings.now or utcnow()
    if (now - since).total_seconds() <= settings.bind_timeout:
        return None
    return (
        f"Cyborg left its bind unfinished (BindStarted since {since:%Y-%m-%d %H:%M:%S} UTC, "
        f"instance {a.instance_uuid} on {a.hostname}): adopted unbound, holding nothing"
    )


def _in_flight(a: CyborgArq, settings: Settings) -> str:
    if a.state != "BindStarted":
        return "a delete is in progress; let it end, then run the adoption again"
    return (
        f"a bind is in progress (BindStarted, for less than {settings.bind_timeout:g} s, "
        "--bind-timeout); let it end, then run the adoption again"
    )


def _bound_handle(
    a: CyborgArq,
    handles: Mapping[int, AcceleronHandle],
    ours: AcceleronState,
    group: Mapping[str, str],
    gone: frozenset[str],
    where: str,
    result: Plan,
) -> AcceleronHandle | None:
    """The handle Acceleron's side of a bound request holds, if it maps and fits."""
    if not (a.instance_uuid and a.hostname and a.handle_id is not None):
        result.problems.append(f"{where}: Bound without an instance, host or attach handle")
        return None
    if a.rp_uuid in gone:
        result.problems.append(
            f"{where}: bound on Cyborg's provider {a.rp_uuid} after an earlier adoption "
            "deleted it: its server's allocation is on no provider of Cyborg's to move; "
            "delete the server"
        )
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


def _misfit(group: Mapping[str, str], provider: AcceleronProvider | None) -> str:
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


def _plan_moves(
    cyborg: Cyborg, ours: AcceleronState, placement: PlacementView, result: Plan
) -> None:
    """Each server's allocation on Cyborg's providers, explained by its bound requests,
    and what it becomes on Acceleron's; an allocation they do not explain, or that no
    request of Acceleron's takes over, is a problem."""
    dep_of_handle = {h.id: h.deployable_id for h in cyborg.handles}
    dep_of = {d.id: d for d in cyborg.deployables}
    expected: dict[tuple[str, str], Counter[str]] = {}
    targets: dict[str, dict[str, Counter[str]]] = {}
    steps = {a.uuid: a for a in result.arqs}
    refused = set()  # servers with a request whose problem is listed
    for a in cyborg.arqs:
        if a.uuid not in steps and a.instance_uuid:
            refused.add(a.instance_uuid)
        if a.state != "Bound" or a.handle_id not in dep_of_handle or not a.instance_uuid:
            continue
        dep = dep_of[dep_of_handle[a.handle_id]]
        key = (a.instance_uuid, dep.rp_uuid or "")
        expected.setdefault(key, Counter())[dep.resource_class or ""] += 1
        provider = ours.providers.get(_target(steps.get(a.uuid), ours) or "")
        if provider is not None:
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
    for consumer, read in sorted(placement.consumers.items()):
        before = {rp: r for rp, r in read.allocations.items() if rp in placement.old}
        if not before:
            continue
        if consumer not in targets:
            if consumer in refused:
                continue
            result.problems.append(
                f"consumer {consumer} holds {describe_allocation(before)} on Cyborg's "
                "providers, and no request of Acceleron's takes it over (its requests, "
                "adopted earlier, are gone from Acceleron)"
            )
            continue
        mine = {rp: dict(c) for rp, c in targets[consumer].items()}
        result.moves.append(
            Move(consumer, before, mine, read.project_id, read.user_id, read.consumer_type)
        )


def _target(step: ArqStep | None, ours: AcceleronState) -> str | None:
    """The provider of Acceleron's a bound request of Cyborg's is (or will be) held on."""
    if step is None:
        return None
    if not step.done:
        return step.handle.provider if step.handle is not None else None
    return ours.arqs.get(step.uuid)


def _plan_providers(
    cyborg: Cyborg,
    ours: AcceleronState,
    placement: PlacementView,
    gone: frozenset[str],
    result: Plan,
) -> None:
    """Cyborg's providers: out of Acceleron's way, then deleted; the hosts to publish. A
    provider of Cyborg's that is not in Placement, and that no adoption deleted, stops
    it: this is not the Placement Cyborg publishes to."""
    taken = {p.name for p in ours.providers.values() if p.uuid not in placement.present}
    for old in placement.old.values():
        rename = f"{RENAMED_PREFIX}{old.uuid}" if old.name in taken else None
        reserve = any(i.reserved < i.total for i in old.inventories.values())
        result.providers.append(
            ProviderStep(
                old.uuid,
                old.name,
                old.parent_uuid,
                rename,
                reserve,
                old.inventories,
                old.traits,
                old.allocations,
            )
        )
    seen = set(placement.old) | gone
    for dep in cyborg.deployables:
        if dep.rp_uuid and dep.rp_uuid not in seen:
            seen.add(dep.rp_uuid)
            result.problems.append(
                f"Cyborg's provider {dep.name} ({dep.rp_uuid}) is not in Placement, and no "
                "adoption deleted it: is [placement] in acceleron.conf this cloud's Placement "
                "(its auth_url, region_name, endpoint)?"
            )
    if gone and ours.providers and not placement.present:  # a re-run, elsewhere
        result.problems.append(
            "an earlier adoption published Acceleron's providers on Cyborg's hosts, and none "
            "of them is in Placement: is [placement] in acceleron.conf this cloud's Placement?"
        )
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
