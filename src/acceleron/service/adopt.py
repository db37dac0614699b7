"""Taking over from a running Cyborg (``acceleron adopt cyborg``): its device profiles,
its accelerator requests bound to live servers, and its providers in Placement.

Three steps, each of which only reads:

* ``cyborg_db.read_cyborg``: Cyborg's rows, from its own database (read-only), once
  its schema is one this release knows;
* ``read_acceleron``: what Acceleron's agents reported on the same hosts, the provider tree
  the Placement sync publishes for it, and what earlier adoptions took over (the
  ``adopted`` table: one row per object of Cyborg's);
* ``read_placement``: Cyborg's providers, their inventories, traits and allocations,
  and their consumers;

then ``adopt_plan.plan`` (pure: rows in, a ``Plan`` out) maps every item by host and PCI
address, and lists what it cannot map as problems. A plan with problems is never
applied: nothing changes until everything maps. ``apply`` then works in an order that
never leaves a server without its accelerator, and that a second run can finish:

1. device profiles are created with their names and uuids (Nova's flavors name them),
   groups rewritten to the names Acceleron publishes;
2. Cyborg's providers are recorded as Placement has them, made fully reserved (nothing
   new lands there) and renamed when Acceleron wants their name; what they hold is read
   again (an allocation that came after the plan was read stops the run); the hosts are
   published (Acceleron's providers);
3. for each server: its requests are stored bound, holding the same attach handles
   (their uuids kept), in one transaction; its allocation is recorded, and only then
   moved from Cyborg's providers to Acceleron's, in one write guarded by the consumer
   generation (its other allocations, VCPU or memory on the compute node, stay as they
   are): capacity is never counted twice nor freed while in use;
4. Cyborg's providers, empty now, are deleted.

Every object taken over is recorded (``adopted``) in the transaction that takes it, so a
run interrupted half way finishes when run again, a run after a complete one has nothing
to do, and a run after Cyborg changed adopts only what is new, with the renames the
earlier runs used. Every change is logged (``acceleron.service.adopt``). Cyborg's database
is never written; bitstreams stay in Glance where they are. The plan as a document
(``adopt_revert.document``) holds what the way back needs.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, insert, select, update

from acceleron.db.models import (
    AcceleratorRequest,
    Adopted,
    AttachHandle,
    Deployable,
    Device,
    DeviceProfile,
    InstanceBinding,
    utcnow,
)
from acceleron.db.models import table as model_table
from acceleron.db.session import Database
from acceleron.exceptions import AcceleronError, AllocationConflict, Conflict
from acceleron.placement import tree
from acceleron.placement.client import CONCURRENT_UPDATE, PlacementClient
from acceleron.service import arqs, device_profiles
from acceleron.service.adopt_plan import (
    AcceleronHandle,
    AcceleronProfile,
    AcceleronProvider,
    AcceleronState,
    ArqStep,
    CyborgProvider,
    Earlier,
    Move,
    PlacementView,
    Plan,
    ProviderStep,
    describe,
    describe_allocation,
    moved,
    plain,
)
from acceleron.service.cyborg_db import Cyborg
from acceleron.service.publish import Syncer

LOG = logging.getLogger(__name__)
_ATTEMPTS = 4


class AdoptionRefused(Conflict):
    """Something of Cyborg's cannot be mapped: nothing was changed."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__(
            "The adoption stops before any change; it cannot map:\n"
            + "\n".join(f"  - {p}" for p in problems)
        )
        self.problems = list(problems)


# --- Acceleron's side ---------------------------------------------------------------------


DEVICES, DEPLOYABLES = model_table(Device), model_table(Deployable)
HANDLES, PROFILES = model_table(AttachHandle), model_table(DeviceProfile)
ARQS, BINDINGS = model_table(AcceleratorRequest), model_table(InstanceBinding)
ADOPTED = model_table(Adopted)
PROFILE, REQUEST, PROVIDER, ALLOCATION = (
    "device_profile", "accelerator_request", "provider", "allocation"
)  # fmt: skip


def read_acceleron(db: Database, hosts: Iterable[str], options: tree.Options) -> AcceleronState:
    """What Acceleron's agents reported on ``hosts``, the providers it publishes, and
    what earlier adoptions took over."""
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
            AcceleronProfile(r.uuid, r.name, r.groups)
            for r in conn.execute(select(PROFILES.c.uuid, PROFILES.c.name, PROFILES.c.groups))
        ]
        known = {
            r.uuid: r.device_rp_uuid
            for r in conn.execute(select(ARQS.c.uuid, ARQS.c.device_rp_uuid))
        }
        earlier = _read_earlier(conn)
    host_of = {d.id: d.hostname for d in devices}
    dep_by_id = {d.id: d for d in deployables}
    handles = {}
    for h in handle_rows:
        dep = dep_by_id[h.deployable_id]
        host = host_of[dep.device_id]
        handles[(host, h.address)] = AcceleronHandle(
            h.id, host, h.address, dep.id, dep.rp_uuid, h.uuid
        )
    providers: dict[str, AcceleronProvider] = {}
    for host in wanted:
        mine = [d for d in devices if d.hostname == host]
        deps = [d for d in deployables if host_of[d.device_id] == host]
        for p in tree.desired_tree(host, "", mine, deps, options):
            providers[p.uuid] = AcceleronProvider(
                p.uuid, p.name, host, p.inventories, p.traits, p.parent_uuid or None
            )
    return AcceleronState(
        frozenset((d.hostname, d.pci_address) for d in devices),
        handles,
        providers,
        profiles,
        known,
        earlier,
    )


def _read_earlier(conn: Connection) -> Earlier:
    rows = conn.execute(
        select(ADOPTED.c.kind, ADOPTED.c.uuid, ADOPTED.c.detail).order_by(ADOPTED.c.id)
    ).all()
    by_kind: dict[str, dict[str, Mapping[str, Any]]] = {}
    for kind, uuid, detail in rows:
        by_kind.setdefault(kind, {})[uuid] = detail or {}
    renames: dict[str, Any] = {}
    for detail in by_kind.get(PROFILE, {}).values():  # the later runs' entries win
        for section, entries in (detail.get("renames") or {}).items():
            if isinstance(entries, dict):
                renames.setdefault(section, {}).update(entries)
            else:
                renames[section] = entries
    return Earlier(
        frozenset(by_kind.get(PROFILE, {})),
        frozenset(by_kind.get(REQUEST, {})),
        by_kind.get(PROVIDER, {}),
        by_kind.get(ALLOCATION, {}),
        device_profiles.NameMapping.from_dict(renames)
        if renames
        else device_profiles.NameMapping(),
    )


def _record(conn: Connection, kind: str, uuid: str, detail: Mapping[str, Any]) -> None:
    """Record one object taken over (once: a later record of it changes nothing)."""
    found = select(ADOPTED.c.id).where(ADOPTED.c.kind == kind, ADOPTED.c.uuid == uuid)
    if conn.execute(found).first() is None:
        conn.execute(
            insert(ADOPTED).values(kind=kind, uuid=uuid, detail=dict(detail), created_at=utcnow())
        )


def mapping_dict(mapping: device_profiles.NameMapping) -> dict[str, Any]:
    """A mapping as its file says it (``NameMapping.from_dict`` reads it back)."""
    out: dict[str, Any] = {
        "resource_classes": dict(mapping.resource_classes),
        "traits": dict(mapping.traits),
    }
    if mapping.properties:
        out["properties"] = [
            {"key": r.key, "trait": r.trait, **({"value": r.value} if r.value is not None else {})}
            for r in mapping.properties
        ]
    return out


# --- Placement ----------------------------------------------------------------------------


def read_placement(client: PlacementClient, cyborg: Cyborg, ours: AcceleronState) -> PlacementView:
    old: dict[str, CyborgProvider] = {}
    for dep in cyborg.deployables:
        if not dep.rp_uuid or dep.rp_uuid in old:
            continue
        found = client.get_provider(dep.rp_uuid)
        if found is None:
            continue  # deleted by an adoption (recorded), or not in this Placement
        _, inventories = client.get_inventories(found.uuid)
        _, traits = client.get_traits(found.uuid)
        allocations = client.get_allocations(found.uuid)
        old[found.uuid] = CyborgProvider(
            found.uuid, found.name, found.parent_uuid, inventories, allocations, traits
        )
    servers = {c for p in old.values() for c in p.allocations}
    servers |= {a.instance_uuid for a in cyborg.arqs if a.state == "Bound" and a.instance_uuid}
    consumers = {c: client.get_consumer(c) for c in sorted(servers)}
    present = frozenset(u for u in ours.providers if client.get_provider(u) is not None)
    return PlacementView(old, consumers, present)


# --- applying it ------------------------------------------------------------------------------


class AdoptionFailed(AcceleronError):
    """A step failed half way; running the adoption again finishes it."""


@dataclasses.dataclass
class Done:
    """What a run changed, counted."""

    profiles: int = 0
    arqs: int = 0
    moves: int = 0
    providers: int = 0

    def summary(self) -> str:
        return (
            f"{self.profiles} device profile(s) created, {self.arqs} accelerator request(s) "
            f"adopted, {self.moves} server allocation(s) moved, {self.providers} provider(s) "
            "of Cyborg's deleted"
        )


Say = Callable[[str], None]


def _teller(say: Say | None) -> Say:
    """Every change goes to the log (oslo.log, as the service's), and to ``say`` too."""

    def tell(line: str) -> None:
        LOG.info("Adopting Cyborg: %s", line)
        if say is not None:
            say(line)

    return tell


def apply(
    db: Database,
    client: PlacementClient,
    syncer: Syncer,
    the_plan: Plan,
    say: Say | None = None,
) -> Done:
    """Carry out ``the_plan`` (refused when it has problems). Each step is skipped when
    done already, so an interrupted run finishes when run again."""
    if the_plan.problems:
        raise AdoptionRefused(the_plan.problems)
    tell, done = _teller(say), Done()
    _create_profiles(db, the_plan, tell, done)
    for prov in the_plan.providers:
        _out_of_the_way(db, client, prov, the_plan.earlier, tell)
    _check_unchanged(client, the_plan.providers)
    for host in the_plan.publish:
        published = syncer.sync_host(host, force=True)
        if published.errors:
            raise AdoptionFailed(
                f"Publishing {host} to Placement failed: {'; '.join(published.errors)}"
            )
        tell(f"published host {host}")
    done.arqs += _store(db, [a for a in the_plan.arqs if not a.done and a.handle is None], tell)
    moves = {m.consumer: m for m in the_plan.moves}
    servers = sorted({a.instance_uuid for a in the_plan.arqs if a.handle and a.instance_uuid})
    sources = [p.uuid for p in the_plan.providers]
    for server in sorted(set(servers) | set(moves)):
        steps = [a for a in the_plan.arqs if a.instance_uuid == server and a.handle]
        done.arqs += _store(db, [a for a in steps if not a.done], tell)
        if server in moves:
            done.moves += _move(db, client, moves[server], sources, tell)
    for prov in the_plan.providers:
        if client.delete_provider(prov.uuid):
            done.providers += 1
            tell(f"deleted provider {prov.name} ({prov.uuid})")
    return done


def _create_profiles(db: Database, the_plan: Plan, tell: Say, done: Done) -> None:
    """The profiles not there yet, each recorded (with the renames that made it)."""
    renames = mapping_dict(the_plan.renames)
    for p in the_plan.profiles:
        if not p.done:
            device_profiles.create(
                db, name=p.name, groups=p.after, description=p.description, uuid=p.uuid
            )
            done.profiles += 1
            tell(f"created device profile {p.name} ({p.uuid}): groups {json.dumps(p.after)}")
        if p.uuid not in the_plan.earlier.profiles:
            with db.writer() as conn:
                _record(conn, PROFILE, p.uuid, {"name": p.name, "renames": renames})


def _out_of_the_way(
    db: Database, client: PlacementClient, prov: ProviderStep, earlier: Earlier, tell: Say
) -> None:
    """Record one of Cyborg's providers as it is (the first time), then make it fully
    reserved, and rename it if it must."""
    if prov.uuid not in earlier.providers:
        with db.writer() as conn:
            _record(conn, PROVIDER, prov.uuid, prov.detail())
    if prov.reserve:
        client.update_inventories(
            prov.uuid,
            lambda current: {
                rc: dataclasses.replace(i, reserved=i.total) for rc, i in current.items()
            },
        )
        tell(f"reserved provider {prov.name} ({prov.uuid})")
    if prov.rename:
        client.move_provider(prov.uuid, prov.rename, prov.parent_uuid)
        tell(f"renamed provider {prov.name} ({prov.uuid}) to {prov.rename}")


def _check_unchanged(client: PlacementClient, providers: Sequence[ProviderStep]) -> None:
    """Once nothing new can land on Cyborg's providers, what they hold is read again: an
    allocation the plan did not see would be dropped by the moves, so it stops the run."""
    news = []
    for prov in providers:
        for consumer, held in sorted(client.get_allocations(prov.uuid).items()):
            seen = prov.allocations.get(consumer, {})
            if any(amount > seen.get(rc, 0) for rc, amount in held.items()):
                news.append(
                    f"consumer {consumer} holds {dict(held)} on provider {prov.name} "
                    f"({prov.uuid}), the plan saw {dict(seen) or 'nothing'}"
                )
    if news:
        raise AdoptionFailed(
            "Allocations came on Cyborg's providers after the plan was read:\n"
            + "\n".join(f"  - {n}" for n in news)
            + "\nThe providers are fully reserved now: nothing more lands on them. Run the "
            "adoption again: its plan takes these in, or names what it cannot map."
        )


def _store(db: Database, steps: Sequence[ArqStep], tell: Say) -> int:
    """Store requests as Cyborg had them, each recorded, in one transaction: a bound one
    holds its handle (taken only if free; it takes Cyborg's attach handle uuid) and its
    instance's binding."""
    if not steps:
        return 0
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
                "failure_reason": a.reason,
                "created_at": a.created_at or now,
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
            _record(conn, REQUEST, a.uuid, {"state": a.state, "instance_uuid": a.instance_uuid})
    for a in steps:
        tell(f"adopted accelerator request {describe(a)}")
    return len(steps)


def _hold(conn: Connection, a: ArqStep, arq_id: int, now: Any) -> None:
    assert a.handle is not None and a.instance_uuid is not None
    kept = {"uuid": a.handle_uuid} if a.handle_uuid else {}
    taken = conn.execute(
        update(HANDLES)
        .where(HANDLES.c.id == a.handle.id, HANDLES.c.arq_id.is_(None))
        .values(arq_id=arq_id, in_use=True, updated_at=now, **kept)
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
    db: Database, client: PlacementClient, move: Move, sources: Sequence[str], tell: Say
) -> int:
    """Record the server's allocation, then write it anew in one write guarded by its
    generation; read again and written anew when the consumer changed meanwhile. What
    it holds on Cyborg's providers must be what the plan saw: otherwise the move would
    drop or invent an accelerator, and the run stops. How many moved (0 or 1)."""
    with db.writer() as conn:
        _record(conn, ALLOCATION, move.consumer, move.detail())
    for attempt in range(_ATTEMPTS):
        read = client.get_consumer(move.consumer)
        now = {rp: dict(r) for rp, r in read.allocations.items() if rp in set(sources)}
        if not now:
            return 0  # moved already (or the server is gone)
        if now != plain(move.before):
            raise AdoptionFailed(
                f"The allocation of {move.consumer} on Cyborg's providers changed since the "
                f"plan was read: {describe_allocation(now)}, the plan saw "
                f"{describe_allocation(move.before)}. Nothing of it was moved; run the "
                "adoption again."
            )
        try:
            client.replace_allocations(
                move.consumer, read, moved(read.allocations, sources, move.targets)
            )
        except AllocationConflict as error:
            if error.code != CONCURRENT_UPDATE or attempt == _ATTEMPTS - 1:
                raise
            continue
        tell(
            f"moved the allocation of {move.consumer}: {describe_allocation(move.before)} -> "
            f"{describe_allocation(move.targets)}"
        )
        return 1
    return 0
