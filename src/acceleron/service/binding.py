"""Binding accelerator requests to devices (Nova's PATCH, and a claim's bind): all the
requests of one bind in one transaction. Binding an ARQ:

* takes one free attach handle of the deployable behind the chosen resource
  provider with a conditional update (``arq_id IS NULL``); the unique
  ``attach_handles.arq_id`` makes a double allocation impossible on every backend;
* claims the instance in ``instance_bindings`` (unique): a second, racing bind
  of the same instance fails in the database, not in a Python check;
* ends ``Bound`` at once, or ``BindStarted`` with a task for the host's agent
  when a region must be programmed, an mdev made or a MIG instance carved (on a GPU
  partitioned on demand, where the agent's planner finds a position: docs/mig.md);
  the task's end binds or fails it (``bind_tasks.finish_task``), and
  ``bind_tasks.reap`` fails what outlives ``bind_timeout``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Row, Select, bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError

from acceleron import metrics
from acceleron.bitstreams.base import BitstreamStore
from acceleron.bitstreams.model import Bitstream, fold_uuid
from acceleron.context import RequestContext
from acceleron.db.models import (
    AcceleratorRequest,
    AttachHandle,
    Deployable,
    Device,
    InstanceBinding,
    table,
    utcnow,
)
from acceleron.db.session import Database, retry_on_deadlock
from acceleron.exceptions import (
    BitstreamNotFound,
    Conflict,
    InMaintenance,
    InvalidInput,
    NoCapacity,
    NotFound,
    Unhealthy,
)
from acceleron.mig import units as mig_units
from acceleron.placement import names, tree
from acceleron.scheduler import weigher
from acceleron.service import (
    arqs,
    cleaning,
    fitting,
    flat,
    pools,
    programming,
    provenance,
    quotas,
    tasks,
)
from acceleron.vocabulary import UNHEALTHY

LOG = logging.getLogger(__name__)
ARQS, HANDLES = table(AcceleratorRequest), table(AttachHandle)
DEPLOYABLES, BINDINGS = table(Deployable), table(InstanceBinding)
DEVICES = table(Device)
SELECTORS = ("bitstream_id", "bitstream_name", "function_id", "function_name")

_DEPLOYABLE = programming.REGION.where(DEPLOYABLES.c.rp_uuid == bindparam("rp")).order_by(
    DEPLOYABLES.c.id
)


def _handles(being_cleaned: bool) -> Select[Any]:
    """A deployable's first handle that is free: clean, or (``being_cleaned``) being
    cleaned now (its clean task queued), for a bind to wait for."""
    return (
        select(*(HANDLES.c[f] for f in arqs.Handle._fields))
        .where(
            HANDLES.c.deployable_id == bindparam("deployable"),
            HANDLES.c.arq_id.is_(None),
            HANDLES.c.host_in_use.is_(False),
            HANDLES.c.state == "present",
            HANDLES.c.health != UNHEALTHY,
            HANDLES.c.cleaning == cleaning.CLEANING
            if being_cleaned
            else HANDLES.c.cleaning.is_(None),
        )
        .order_by(HANDLES.c.id)
        .limit(1)
    )


_FREE_HANDLES, _CLEANED_SOON = _handles(False), _handles(True)


def _deployables_for(
    conn: Connection,
    rp_uuid: str,
    hostname: str,
    group: Mapping[str, str],
    flat_mode: tree.Options | None,
    pool: tuple[str, list[int]] | None = None,
) -> list[Row[Any]]:
    """The deployables behind a resource provider Placement chose, on the host named:
    the members of the pool it is (``pool``: its host and members), the one whose
    provider it is, or in flat mode (``flat_mode``: the sync's options), when it is the
    host's compute node, every one there that can serve ``group``."""
    if pool is not None:
        return _pool_members(conn, rp_uuid, pool, hostname, group)
    dep = conn.execute(_DEPLOYABLE, {"rp": rp_uuid}).first() or _formerly(conn, rp_uuid, hostname)
    if dep is None:
        compute_of = flat.compute_host(conn, rp_uuid)
        if compute_of is None:
            raise InvalidInput(
                f"device_rp_uuid: {rp_uuid} is not the resource provider of an accelerator."
            )
        if compute_of != hostname:
            raise InvalidInput(
                f"device_rp_uuid: {rp_uuid} is the compute node of host {compute_of!r}, "
                f"not of {hostname!r}."
            )
        if flat_mode is None:
            raise InvalidInput(
                f"device_rp_uuid: {rp_uuid} is the compute node of {hostname!r}, but "
                f"accelerators are published as nested providers ([placement] nested = "
                f"true): bind to the accelerator's own provider."
            )
        return [
            _usable(d, hostname, group) for d in flat.candidates(conn, hostname, group, flat_mode)
        ]
    if dep.device_hostname != hostname:
        raise InvalidInput(
            f"device_rp_uuid: {rp_uuid} is on host {dep.device_hostname!r}, not {hostname!r}."
        )
    return [_usable(dep, hostname, group)]


_OWN = programming.REGION.where(DEPLOYABLES.c.uuid == bindparam("rp"))
_WHOLE = programming.REGION.where(
    DEVICES.c.hostname == bindparam("host"), DEPLOYABLES.c.kind == "device"
)


def _formerly(conn: Connection, rp_uuid: str, hostname: str) -> Row[Any] | None:
    """The deployable whose own provider ``rp_uuid`` is, now that it is published in a
    pool: Placement allocated on that provider before the sync moved the deployable
    (the old provider is kept, fully reserved, while allocations use it)."""
    own = conn.execute(_OWN, {"rp": rp_uuid}).first()
    if own is not None:
        return own
    for row in conn.execute(_WHOLE, {"host": hostname}):
        if names.provider_uuid(hostname, row.pci_address) == rp_uuid:
            return row
    return None


def _pool_members(
    conn: Connection,
    rp_uuid: str,
    pool: tuple[str, list[int]],
    hostname: str,
    group: Mapping[str, str],
) -> list[Row[Any]]:
    """The usable deployables of the pool ``rp_uuid`` (``service.pools``), in id order;
    the first one's reason when none is."""
    host, ids = pool
    if host != hostname:
        raise InvalidInput(
            f"device_rp_uuid: {rp_uuid} is a provider of host {host!r}, not of {hostname!r}."
        )
    rows = conn.execute(
        programming.REGION.where(DEPLOYABLES.c.id.in_(ids)).order_by(DEPLOYABLES.c.id)
    ).all()
    usable: list[Row[Any]] = []
    refusal: Conflict | None = None
    for row in rows:
        try:
            usable.append(_usable(row, hostname, group))
        except Conflict as error:
            refusal = refusal or error
    if usable:
        return usable
    raise refusal or Conflict(f"The accelerators of provider {rp_uuid} are gone from {hostname}.")


def _usable(dep: Row[Any], hostname: str, group: Mapping[str, str]) -> Row[Any]:
    """A deployable a bind may use: its device present, healthy, and not in maintenance
    (or in one the request's group tolerates)."""
    if dep.device_state != "present":
        raise Conflict(
            f"Device {dep.pci_address} of {hostname} is {dep.device_state}: nothing new can be "
            f"bound to it."
        )
    check_usable(dep, group)
    return dep


def check_usable(dep: Row[Any], group: Mapping[str, str]) -> None:
    """Refuse a bind to a device or deployable that is unhealthy, or in maintenance that
    the request's group does not tolerate (``accel:tolerations``)."""
    for what, health, reason in (
        (f"Device {dep.pci_address}", dep.device_health, dep.device_health_reason),
        (dep.name, dep.health, dep.health_reason),
    ):
        if health == "unhealthy":
            why = reason or "no reason given"
            raise Unhealthy(
                f"{what} of {dep.device_hostname} is unhealthy ({why}): nothing new can be "
                f"bound to it."
            )
    for what, status, reason in (
        (f"Device {dep.pci_address}", dep.device_status, dep.device_maintenance_reason),
        (dep.name, dep.status, dep.maintenance_reason),
    ):
        if status == "maintaining" and not names.tolerated(reason, names.tolerations(group)):
            said = f" ({reason})" if reason else ""
            raise InMaintenance(
                f"{what} of {dep.device_hostname} is in maintenance{said}: nothing new can be "
                f"bound to it unless its device profile tolerates that reason "
                f"(accel:tolerations)."
            )


def _same_id(a: str | None, b: str | None) -> bool:
    """Two ids (function, bitstream) are the same in any spelling; None matches nothing."""
    return bool(a) and bool(b) and fold_uuid(a or "") == fold_uuid(b or "")


def program_for(
    group: Mapping[str, str],
    dep: Row[Any],
    store: BitstreamStore | None,
    project: str,
    trust: provenance.Trust = provenance.DEFAULT,
) -> Bitstream | None:
    """The bitstream to load before binding to ``dep``, or None when none is needed: the
    group names none, or the region holds it already in a way ``project`` (the
    request's) may use as it is (``provenance.refusal``). Chosen among what ``project``
    sees: public bitstreams and its own."""
    accel = {k: v for k, v in group.items() if k.startswith("accel:") and k[6:] in SELECTORS}
    held = dep.function_uuids or ([dep.function_uuid] if dep.function_uuid else [])
    holds_it = any(_same_id(accel.get("accel:function_id"), f) for f in held) or (
        weigher.carries(_required_traits(group), held)
    )
    if not accel and not holds_it:
        return None  # the device as it is, whatever it holds (its cleaning's business)
    refused = provenance.refusal(dep, project, store, trust)
    if holds_it and refused is None:
        return None  # pre-programmed, or loaded as this project could have: nothing to load
    if not accel:
        raise Conflict(
            f"{dep.name} holds the function the request asks for, but {refused}; a device "
            f"profile that names the function (accel:function_id) has it programmed with a "
            f"bitstream the project may use."
        )
    if store is None:
        raise Conflict("The request names a bitstream but no bitstream store is configured.")
    try:
        bitstream = store.for_request(accel, dep.region_type, project)
    except BitstreamNotFound as error:
        if holds_it:  # say why what it holds will not do
            raise Conflict(
                f"{dep.name} holds the function asked for, but {refused}; and nothing can be "
                f"programmed in its place: {error}"
            ) from error
        raise
    if bitstream is None:
        return None
    same = _same_id(bitstream.id, dep.bitstream_id) or any(
        _same_id(bitstream.function_uuid, f) for f in held
    )
    if same and refused is None:
        return None
    if not dep.programmable and same:
        raise Conflict(
            f"{dep.name} holds what the request asks for, but {refused}; and it "
            f"cannot be programmed."
        )
    if not dep.programmable:
        raise Conflict(
            f"{dep.name} cannot be programmed and does not hold the function the request asks "
            f"for ({bitstream.function_uuid or bitstream.name})."
        )
    return bitstream


def _required_traits(group: Mapping[str, str]) -> list[str]:
    return [k[6:] for k, v in group.items() if k.startswith("trait:") and v == "required"]


@dataclasses.dataclass(frozen=True)
class _Prepared:
    binding: arqs.Binding
    arq: arqs.ArqRecord  # as first read; its own row read again once locked, outside SQLite
    # The deployables the bind may take a handle of, in order, each with the bitstream
    # to load first (None: none): one in nested mode, the fitting ones in flat mode.
    choices: tuple[tuple[Row[Any], Bitstream | None], ...]
    limits: Mapping[str, int | None] = dataclasses.field(default_factory=dict)

    @property
    def project(self) -> str:
        """The project the bound request will belong to (what its quota counts)."""
        return self.binding.project_id or self.arq.project_id or ""


_LOCK_ONE = arqs.LOCKED.where(ARQS.c.id == bindparam("arq_id"))


def _prepare(
    conn: Connection,
    context: RequestContext,
    bindings: Sequence[arqs.Binding],
    store: BitstreamStore | None,
    flat_mode: tree.Options | None = None,
    limits: quotas.Limits | None = None,
    trust: provenance.Trust = provenance.DEFAULT,
) -> list[_Prepared]:
    """Everything a bind needs that is read (and looked up in the bitstream store, and
    the limits of its projects) before it writes."""
    uuids = arqs.check_uuids([b.arq_uuid for b in bindings])
    requests = arqs.visible_arqs(conn, context, uuids)
    group_of = {b.arq_uuid: arqs.profile_group(requests[b.arq_uuid]) for b in bindings}
    pooled = {rp: pools.members(conn, rp) for rp in {b.device_rp_uuid for b in bindings}}
    deployables = {
        b.arq_uuid: _deployables_for(
            conn,
            b.device_rp_uuid,
            b.hostname,
            group_of[b.arq_uuid],
            flat_mode,
            pooled[b.device_rp_uuid],
        )
        for b in bindings
    }
    prepared = []
    for b in bindings:
        arq = requests[b.arq_uuid]
        # A request with no project sees public bitstreams only ("" owns none).
        project = b.project_id or arq.project_id or ""
        choices = _choices(
            conn, group_of[b.arq_uuid], deployables[b.arq_uuid], store, project, trust
        )
        prepared.append(_Prepared(b, arq, tuple(choices)))
    in_pools = {rp for rp, found in pooled.items() if found is not None}
    prepared = _placed(conn, prepared, group_of, in_pools)
    if limits is None or not limits.enforcing:
        return prepared
    classes: dict[str, set[str]] = {}
    for p in prepared:
        if p.project and p.arq.resource_class:
            classes.setdefault(p.project, set()).add(p.arq.resource_class)
    found = {project: limits.limits(project, wanted) for project, wanted in classes.items()}
    return [dataclasses.replace(p, limits=found.get(p.project, {})) for p in prepared]


def _placed(
    conn: Connection,
    prepared: Sequence[_Prepared],
    group_of: Mapping[str, Mapping[str, str]],
    in_pools: set[str],
) -> list[_Prepared]:
    """The requests bound to a pool, their choices ordered (and, with ``accel:affinity``,
    restricted) by where the devices sit: one instance's requests on one host together
    (``service.pools.plan``)."""
    by_instance: dict[tuple[str, str], list[_Prepared]] = {}
    for p in prepared:
        by_instance.setdefault((p.binding.instance_uuid, p.binding.hostname), []).append(p)
    placed: dict[str, tuple[tuple[Row[Any], Bitstream | None], ...]] = {}
    for (_, hostname), mine in by_instance.items():
        levels = sorted(filter(None, (pools.affinity(group_of[p.binding.arq_uuid]) for p in mine)))
        level = levels[0] if levels else None  # one profile: its groups agree
        working = [p for p in mine if not _is_retry(p)]
        is_pool = {p.binding.arq_uuid: p.binding.device_rp_uuid in in_pools for p in working}
        pooled = [p for p in working if is_pool[p.binding.arq_uuid]]
        # Requests bound to one device's provider (Placement chose it) fix the unit.
        fixed = [
            p.choices[0][0].id
            for p in working
            if not is_pool[p.binding.arq_uuid] and len(p.choices) == 1
        ]
        unit = _fixed_unit(conn, fixed, level, hostname) if level is not None else None
        if not pooled:
            continue
        needs = Counter(p.binding.device_rp_uuid for p in pooled)
        ids = {
            rp: [c[0].id for c in next(p for p in pooled if p.binding.device_rp_uuid == rp).choices]
            for rp in needs
        }
        found = pools.places(conn, [i for mine_ids in ids.values() for i in mine_ids])
        slots = {
            rp: [
                found[i]
                for i in mine_ids
                if i in found and (unit is None or level is None or found[i].unit(level) == unit)
            ]
            for rp, mine_ids in ids.items()
        }
        order = pools.plan(needs, slots, level, hostname)
        for p in pooled:
            rank = {dep_id: n for n, dep_id in enumerate(order[p.binding.device_rp_uuid])}
            kept = [c for c in p.choices if c[0].id in rank]
            if not kept:  # accel:affinity left it none (its group's own choices differ)
                raise NoCapacity(
                    f"No accelerator of provider {p.binding.device_rp_uuid} on {hostname!r} "
                    f"that can serve request {p.binding.arq_uuid} shares a "
                    f"{pools.WORDS.get(level or '', level)} with the request's others "
                    f"({pools.AFFINITY})."
                )
            placed[p.binding.arq_uuid] = tuple(sorted(kept, key=lambda c: rank[c[0].id]))
    return [
        dataclasses.replace(p, choices=placed[p.binding.arq_uuid])
        if p.binding.arq_uuid in placed
        else p
        for p in prepared
    ]


def _fixed_unit(
    conn: Connection, deployables: Sequence[int], level: str, hostname: str
) -> tuple[int, str] | None:
    """The unit (``level``: a device column) the deployables that Placement chose for an
    instance share, which its other requests must share too; NoCapacity when they do not
    share one (``accel:affinity`` with one provider per device)."""
    if not deployables:
        return None
    found = pools.places(conn, deployables)
    units = {slot.unit(level) for slot in found.values()}
    if len(units) > 1:
        word = pools.WORDS.get(level, level)
        raise NoCapacity(
            f"The device profile asks that its accelerators share one {word} "
            f"({pools.AFFINITY}), but the providers chosen on host {hostname!r} are devices "
            f"of {len(units)} different ones."
        )
    return units.pop() if units else None


def _choices(
    conn: Connection,
    group: Mapping[str, str],
    deployables: Sequence[Row[Any]],
    store: BitstreamStore | None,
    project: str,
    trust: provenance.Trust,
) -> list[tuple[Row[Any], Bitstream | None]]:
    """Each deployable with what must be loaded into it first; one that cannot serve
    the request (not programmable, lacking the function, of a region type no bitstream
    it names is built for) is left out, and when that leaves none the first one's
    reason is the answer (for a function no region anywhere can serve, saying so)."""
    choices: list[tuple[Row[Any], Bitstream | None]] = []
    refusal: Conflict | BitstreamNotFound | None = None
    for dep in deployables:
        try:
            choices.append((dep, program_for(group, dep, store, project, trust)))
        except (Conflict, BitstreamNotFound) as error:
            refusal = refusal or error
    if not choices and refusal is not None:
        if isinstance(refusal, BitstreamNotFound) and "accel:function_id" in group:
            fit = fitting.fit_of(conn, store, group, project)
            if fit is not None and fit.nowhere:  # the same error, saying it is so everywhere
                raise BitstreamNotFound(fit.refusal().message) from refusal
        raise refusal
    return flat.ordered(choices)


def _check(bindings: Sequence[arqs.Binding], context: RequestContext) -> None:
    for b in bindings:
        arqs.check_uuids([b.arq_uuid], "arq")
        arqs.check_uuids([b.device_rp_uuid], "device_rp_uuid")
        arqs.check_uuids([b.instance_uuid], "instance_uuid")
        if not b.hostname or len(b.hostname) > 255:
            raise InvalidInput(f"hostname: {b.hostname[:64]!r} is not a host name.")
        if b.project_id is not None and not context.all_projects:
            raise InvalidInput(
                "project_id: setting it needs acceleron:arq:get_all_projects (admins and services)."
            )
    if len({b.arq_uuid for b in bindings}) != len(bindings):
        raise InvalidInput("The same accelerator request appears twice in one bind.")


@retry_on_deadlock
def bind(
    db: Database,
    context: RequestContext,
    bindings: Sequence[arqs.Binding],
    store: BitstreamStore | None = None,
    flat_mode: tree.Options | None = None,
    limits: quotas.Limits | None = None,
    within: Callable[[Connection, list[arqs.Resolved]], None] | None = None,
    trust: provenance.Trust = provenance.DEFAULT,
) -> list[arqs.Resolved]:
    """Bind ARQs (Nova's PATCH): all of them in one transaction. Returns the binds that
    already ended (Nova is told of those now; the others end with their tasks).
    ``within``: the caller's own record of the bind, called with those in the same
    transaction (what it raises undoes the bind).
    ``flat_mode``: the Placement sync's options when it publishes flat (a bind may then
    name the compute node's provider; see ``service.flat``). With ``limits``:
    QuotaExceeded, and nothing bound, when a project would hold more than its limit of
    a resource class. ``trust``: which held images a request may use as they are
    (``provenance``)."""
    if not bindings:
        raise InvalidInput("Name at least one accelerator request to bind.")
    _check(bindings, context)
    try:
        if _local(db, store, limits):
            with db.writer() as conn:
                prepared = _prepare(conn, context, bindings, store, flat_mode, limits, trust)
                return _bind_all(conn, prepared, within)
        with db.reader() as conn:
            prepared = _prepare(conn, context, bindings, store, flat_mode, limits, trust)
        with db.writer() as conn:
            return _bind_all(conn, _relock(conn, prepared), within)
    except IntegrityError as error:  # a concurrent bind of the same instance won
        raise Conflict(
            "Another bind of the same instance is in progress or done; unbind it first."
        ) from error


def _local(db: Database, store: BitstreamStore | None, limits: quotas.Limits | None) -> bool:
    """Whether a bind reads what it needs inside its write transaction: on SQLite, whose
    writer holds the whole database (it reads what no other writer can change, with no
    lock to take again, in one transaction instead of two), when nothing it looks up
    waits on another service (the local bitstream store, limits from the config file).
    Elsewhere it reads first, calls what it must, then locks and reads again."""
    return (
        db.backend == "sqlite"
        and (store is None or store.backend == "local")
        and (limits is None or not limits.enforcing or limits.driver == "config")
    )


def _bind_all(
    conn: Connection,
    prepared: Sequence[_Prepared],
    within: Callable[[Connection, list[arqs.Resolved]], None] | None = None,
) -> list[arqs.Resolved]:
    _count_quotas(conn, prepared)
    _claim_instances(conn, prepared)
    resolved = [r for p in prepared for r in _bind_one(conn, p)]
    if within is not None:
        within(conn, resolved)
    return resolved


def _relock(conn: Connection, prepared: Sequence[_Prepared]) -> list[_Prepared]:
    """The requests to bind, locked and read again: one deleted (or changed) since they
    were first read is seen as it is now, not as it was."""
    if len(prepared) == 1:
        locked = list(conn.execute(_LOCK_ONE, {"arq_id": prepared[0].arq.id}))
    else:
        locked = list(conn.execute(arqs.LOCKED.where(ARQS.c.id.in_([p.arq.id for p in prepared]))))
    rows = {row.id: row for row in locked}
    gone = [p.arq.uuid for p in prepared if p.arq.id not in rows]
    if gone:
        raise NotFound(f"Accelerator request(s) not found: {', '.join(gone)}.")
    # Its own row as it is now; its profile's groups do not change.
    return [dataclasses.replace(p, arq=p.arq._replace(**rows[p.arq.id]._mapping)) for p in prepared]


def _count_quotas(conn: Connection, prepared: Sequence[_Prepared]) -> None:
    """The accelerators this bind starts holding, per project and class, against the
    project's limits; each project's row locked first (in one order) so that racing
    binds of a project count one after the other."""
    starting: dict[str, Counter[str]] = {}
    for p in prepared:
        if (
            p.limits
            and p.arq.resource_class
            and p.arq.state not in arqs.HOLDING
            and not _is_retry(p)
        ):
            starting.setdefault(p.project, Counter())[p.arq.resource_class] += 1
    for project in sorted(starting):
        quotas.lock(conn, project)
    for project, counts in sorted(starting.items()):
        limits = next(p.limits for p in prepared if p.project == project and p.limits)
        quotas.check(conn, project, counts, limits)


def _is_retry(p: _Prepared) -> bool:
    """Nova sending the same bind again (after a timeout, say): nothing to do."""
    a, b = p.arq, p.binding
    return a.state in ("BindStarted", "Bound") and (
        (a.hostname, a.device_rp_uuid, a.instance_uuid)
        == (b.hostname, b.device_rp_uuid, b.instance_uuid)
    )


_CLAIM = insert(BINDINGS)
_CLAIMED = select(BINDINGS.c.id).where(BINDINGS.c.instance_uuid == bindparam("instance"))


def _claim_instances(conn: Connection, prepared: Sequence[_Prepared]) -> None:
    """Each instance is bound once: a second bind of it (not a retry) is refused. A bind
    none of whose requests holds a handle yet cannot be a retry: it claims the instance
    at once, and the unique ``instance_bindings.instance_uuid`` refuses it if taken."""
    for instance in sorted({p.binding.instance_uuid for p in prepared}):
        mine = [p for p in prepared if p.binding.instance_uuid == instance]
        if not any(p.arq.state in arqs.HOLDING for p in mine):
            try:
                conn.execute(_CLAIM, {"instance_uuid": instance})
            except IntegrityError:
                raise _taken(instance) from None
            continue
        if conn.execute(_CLAIMED, {"instance": instance}).first() is None:
            conn.execute(_CLAIM, {"instance_uuid": instance})
        elif not all(_is_retry(p) for p in mine):
            raise _taken(instance)


def _taken(instance: str) -> Conflict:
    return Conflict(
        f"Instance {instance} already has bound accelerator requests: unbind or delete "
        f"them before binding others."
    )


_TAKE = (
    update(HANDLES)
    .where(HANDLES.c.id == bindparam("handle"), HANDLES.c.arq_id.is_(None))
    .values(arq_id=bindparam("arq"), in_use=True, updated_at=bindparam("now"))
)


def _allocate(
    conn: Connection, arq_id: int, deployable_id: int, query: Select[Any] = _FREE_HANDLES
) -> arqs.Handle | None:
    """Take one free attach handle: the first free one, with a conditional update, so
    of two binds racing for a handle one gets it and the other reads the next."""
    while True:
        row = conn.execute(query, {"deployable": deployable_id}).first()
        if row is None:
            return None
        taken = conn.execute(_TAKE, {"handle": row.id, "arq": arq_id, "now": utcnow()})
        if taken.rowcount == 1:
            return arqs.Handle._make(row)


def _take(
    conn: Connection, arq_id: int, choices: Sequence[tuple[Row[Any], Bitstream | None]]
) -> tuple[Row[Any], Bitstream | None, arqs.Handle | None, bool]:
    """A handle of the first choice that has one free, each choice's region locked first
    (binds of one region queue there); else one being cleaned, to wait for (the last
    item: True); the last choice with no handle when none has either."""
    last = len(choices) - 1
    for index, (dep, program) in enumerate(choices):
        if index < last and conn.execute(_FREE_HANDLES, {"deployable": dep.id}).first() is None:
            continue  # full: not worth queueing on its lock
        programming.lock(conn, dep.id)
        handle = _allocate(conn, arq_id, dep.id)
        if handle is not None:
            return dep, program, handle, False
    for dep, program in choices:
        handle = _allocate(conn, arq_id, dep.id, _CLEANED_SOON)
        if handle is not None:
            return dep, program, handle, True
    return choices[-1][0], choices[-1][1], None, False


_FORGET_FAILURE = (
    update(DEPLOYABLES)
    .where(DEPLOYABLES.c.id == bindparam("dep"), DEPLOYABLES.c.program_phase == "failed")
    .values(program_phase=None, program_error=None)
)


def _bind_one(conn: Connection, p: _Prepared) -> list[arqs.Resolved]:
    arq, b = p.arq, p.binding
    if _is_retry(p):
        return []
    dep, program, handle, waits = _take(conn, arq.id, p.choices)
    values: dict[str, Any] = {
        "hostname": b.hostname,
        "device_rp_uuid": b.device_rp_uuid,
        "instance_uuid": b.instance_uuid,
        "deployable_id": dep.id,
        "bind_started_at": utcnow(),
        "phase": "allocate",
        "progress": 0,
        "failure_reason": None,
    }
    if b.project_id is not None:
        values["project_id"] = b.project_id
    if handle is None:
        arqs.move(conn, arq, "BindStarted", **values)
        return fail(
            conn,
            arq.id,
            f"no free attach handle on {dep.name}: its inventory in "
            f"Placement and on the host disagree; the next report will fix it",
        )
    busy = program and programming.busy_reason(
        conn, dep.id, program.id, arq.id, values.get("project_id", arq.project_id) or ""
    )
    if busy:
        arqs.move(conn, arq, "BindStarted", **values)
        return fail(conn, arq.id, f"{dep.name} cannot be programmed now: {busy}")
    group = arqs.profile_group(arq)
    refused = mig_refusal(dep, group)
    if refused:
        arqs.move(conn, arq, "BindStarted", **values)
        return fail(conn, arq.id, refused)
    if _queue_work(conn, arq.id, b.hostname, dep, handle, program, group) or waits:
        phase = "cleaning" if waits else "queued"  # a clean task runs before its own
        arqs.move(conn, arq, "BindStarted", **{**values, "phase": phase})
        arqs.refresh_deployable(conn, dep.id)
        return []
    if dep.program_phase == "failed":  # another request's failure: not this one's to show
        conn.execute(_FORGET_FAILURE, {"dep": dep.id})
    # Nothing to wait for: BindStarted and Bound in one statement of one transaction.
    arqs.move(conn, arq, "Bound", via="BindStarted", **{**values, "phase": None, "progress": 100})
    arqs.refresh_deployable(conn, dep.id)
    observe_bind(values["bind_started_at"], "bound")
    LOG.info(
        "Bound %s to %s %s for instance %s", arq.uuid, b.hostname, handle.address, b.instance_uuid
    )
    return [arqs.Resolved(b.instance_uuid, arq.uuid, "completed")]


def _queue_work(
    conn: Connection,
    arq_id: int,
    hostname: str,
    dep: Row[Any],
    handle: arqs.Handle,
    program: Bitstream | None,
    group: Mapping[str, str],
) -> bool:
    """Tasks the host's agent must finish before the bind ends; whether there are any."""
    if program is not None:
        programming.queue(conn, dep, program, arq_id)
    if dep.kind == mig_units.KIND:  # the MIG instance made where the agent's planner says
        tasks.create(
            conn,
            hostname=hostname,
            kind="make_mig",
            params={
                **arqs.mig_params(dep.pci_address, dep.key, handle.address),
                "profile": group[mig_units.PROFILE_KEY],
            },
            arq_id=arq_id,
            deployable_id=dep.id,
        )
        return True
    prepare = arqs.needs_preparing(handle)
    if prepare:
        tasks.create(
            conn,
            hostname=hostname,
            kind="create_mdev",
            params=arqs.vgpu_params(dep.pci_address, dep.key, handle.address),
            arq_id=arq_id,
            deployable_id=dep.id,
        )
    return program is not None or prepare


def mig_refusal(dep: Row[Any], group: Mapping[str, str]) -> str | None:
    """Why a request cannot be bound to a partitionable GPU (None: it can): its group
    names no MIG profile (``accel:mig_profile``) to make."""
    if dep.kind != mig_units.KIND or mig_units.PROFILE_KEY in group:
        return None
    return (
        f"{dep.name} is a GPU partitioned on demand: the request's device profile group "
        f"must name the MIG instance to make ({mig_units.PROFILE_KEY})"
    )


def observe_bind(started: dt.datetime | None, outcome: str) -> None:
    if started is not None:
        seconds = max(0.0, (utcnow() - started).total_seconds())
        metrics.BIND_SECONDS.labels(outcome).observe(seconds)


def fail(
    conn: Connection, arq_id: int, reason: str, policy: cleaning.Policy = cleaning.DEFAULT
) -> list[arqs.Resolved]:
    """End a bind in BindFailed, its handle freed (and cleaned, if the bind got as far as
    the device, as ``policy`` says) and its tasks cancelled."""
    arq = arqs.ArqRecord._make(conn.execute(arqs.BY_ID, {"arq_id": arq_id}).one())
    programming.cancel_for_arq(conn, arq.id)
    arqs.free_handle(conn, arq, policy)
    arqs.move(conn, arq, "BindFailed", phase=None, failure_reason=reason[:4000])
    arqs.refresh_deployable(conn, arq.deployable_id)
    observe_bind(arq.bind_started_at, "failed")
    LOG.warning("Bind of %s failed: %s", arq.uuid, reason)
    return [arqs.Resolved(arq.instance_uuid or "", arq.uuid, "failed")]
