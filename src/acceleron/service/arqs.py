"""Accelerator requests (ARQs): what a workload asks for; their records, reads, creation,
unbinding and deletion, and the state machine every change goes through.

One explicit state machine (``TRANSITIONS``). Every transition is a conditional
``UPDATE ... WHERE state IN (...)``: of two requests racing for one ARQ, one
wins and the other sees it and stops. Binding a request to a device is
``service.binding``; the agent tasks that end a bind, and the reaper of binds that
never end, are ``service.bind_tasks``.

Nothing lives in memory: a restart of the API or of an agent in the middle of a
bind ends, like any other, in ``Bound`` or ``BindFailed``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import uuid as uuidlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from sqlalchemy import (
    ColumnElement,
    Connection,
    Row,
    bindparam,
    case,
    delete,
    distinct,
    func,
    insert,
    or_,
    select,
    true,
    update,
)

from acceleron.context import RequestContext
from acceleron.db.models import (
    AcceleratorRequest,
    AttachHandle,
    Deployable,
    Device,
    DeviceProfile,
    Host,
    InstanceBinding,
    PlacementProvider,
    table,
    utcnow,
)
from acceleron.db.session import Database, retry_on_deadlock
from acceleron.exceptions import Conflict, Disabled, Forbidden, InvalidInput, Locked, NotFound
from acceleron.mig import units as mig_units
from acceleron.placement import names
from acceleron.service import cleaning, inventory, programming, quotas, tasks
from acceleron.service.device_profiles import ATTACH_TARGET_KEY, could_exist
from acceleron.service.inventory import HANDLES_NOT_HEALTHY
from acceleron.uuids import parse
from acceleron.vocabulary import HEALTHY, Health, worst_verdict

LOG = logging.getLogger(__name__)
ARQS, PROFILES, HANDLES = table(AcceleratorRequest), table(DeviceProfile), table(AttachHandle)
HOSTS, PROVIDERS = table(Host), table(PlacementProvider)
DEPLOYABLES, DEVICES, BINDINGS = table(Deployable), table(Device), table(InstanceBinding)

STATES = ("Initial", "BindStarted", "Bound", "BindFailed", "Unbound", "UnbindFailed", "Deleting")
# Target state -> the states it may be reached from.
TRANSITIONS: dict[str, tuple[str, ...]] = {
    "BindStarted": ("Initial", "Unbound"),
    "Bound": ("BindStarted",),
    "BindFailed": ("BindStarted",),
    "Unbound": ("BindStarted", "Bound", "BindFailed", "UnbindFailed"),
    "UnbindFailed": ("Bound", "BindFailed"),
    "Deleting": STATES,
}
# What Nova waits for: an ARQ it may stop waiting on.
RESOLVED = ("Bound", "BindFailed", "Deleting")


def can_move(source: str, target: str) -> bool:
    """Whether the state machine allows ``source -> target`` (pure, for tests and docs)."""
    return source in TRANSITIONS.get(target, ())


@dataclasses.dataclass(frozen=True)
class Binding:
    """One ARQ's bind request: the three fields Nova sends (plus project_id from 2.1)."""

    arq_uuid: str
    hostname: str
    device_rp_uuid: str
    instance_uuid: str
    project_id: str | None = None


@dataclasses.dataclass(frozen=True)
class Resolved:
    """A bind that ended: Nova is told with an ``accelerator-request-bound`` event."""

    instance_uuid: str
    arq_uuid: str
    status: str  # completed or failed


# --- reading -----------------------------------------------------------------------


class ArqRecord(NamedTuple):
    """An accelerator request as the API shows it: its row, its profile's name and
    groups, its attach handle and the health of what it is bound to. Built from a row
    of ``VIEW`` (the same names, in the same order) with ``ArqRecord._make``."""

    id: int
    uuid: str
    state: str
    project_id: str | None
    device_profile_id: int
    device_profile_group_id: int
    hostname: str | None
    device_rp_uuid: str | None
    instance_uuid: str | None
    deployable_id: int | None
    bind_started_at: dt.datetime | None
    phase: str | None
    progress: int | None
    failure_reason: str | None
    resource_class: str | None
    created_at: dt.datetime
    updated_at: dt.datetime | None
    device_profile_name: str
    device_profile_groups: list[dict[str, str]]
    attach_handle_uuid: str | None
    attach_handle_type: str | None
    attach_handle_address: str | None
    attach_handle_info: dict[str, Any] | None
    deployable_health: str | None
    deployable_health_reason: str | None
    device_health: str | None
    device_health_reason: str | None
    attach_handle_health: str | None
    attach_handle_health_reason: str | None


class Handle(NamedTuple):
    """A free attach handle a bind takes (``binding._FREE_HANDLES`` reads it)."""

    id: int
    type: str
    address: str
    attach_info: dict[str, Any] | None


_ARQ_COLUMNS = [ARQS.c[f] for f in ArqRecord._fields if f in ARQS.c]  # its own row's
_record = ArqRecord._make
_handle = Handle._make

# The deployable and device a request is bound to, for its health.
_HEALTH_DEP = DEPLOYABLES.alias("bound_deployable")
_HEALTH_DEV = DEVICES.alias("bound_device")
_JOINED = {
    "device_profile_name": PROFILES.c.name,
    "device_profile_groups": PROFILES.c.groups,
    "attach_handle_uuid": HANDLES.c.uuid,
    "attach_handle_type": HANDLES.c.type,
    "attach_handle_address": HANDLES.c.address,
    "attach_handle_info": HANDLES.c.attach_info,
    "deployable_health": _HEALTH_DEP.c.health,
    "deployable_health_reason": _HEALTH_DEP.c.health_reason,
    "device_health": _HEALTH_DEV.c.health,
    "device_health_reason": _HEALTH_DEV.c.health_reason,
    "attach_handle_health": HANDLES.c.health,
    "attach_handle_health_reason": HANDLES.c.health_reason,
}
VIEW = (
    select(*(_JOINED[f].label(f) if f in _JOINED else ARQS.c[f] for f in ArqRecord._fields))
    .join(PROFILES, PROFILES.c.id == ARQS.c.device_profile_id)
    .outerjoin(HANDLES, HANDLES.c.arq_id == ARQS.c.id)
    .outerjoin(_HEALTH_DEP, _HEALTH_DEP.c.id == ARQS.c.deployable_id)
    .outerjoin(_HEALTH_DEV, _HEALTH_DEV.c.id == _HEALTH_DEP.c.device_id)
)


def health_of(arq: ArqRecord) -> dict[str, Any] | None:
    """The health of what a request is bound to (its deployable, with its device's and
    its attach handle's): the condition shown on a request whose device fails under it;
    None when not bound. A deployable degraded only by its handles' faults
    (``inventory.HANDLES_NOT_HEALTHY``: another slot's) counts as its handle does."""
    if arq.state not in ("BindStarted", "Bound") or arq.device_health is None:
        return None
    deployable = Health(arq.deployable_health or "", arq.deployable_health_reason)
    if (arq.deployable_health_reason or "").startswith(HANDLES_NOT_HEALTHY):
        deployable = Health()
    verdict = worst_verdict(
        [
            Health(arq.device_health, arq.device_health_reason),
            deployable,
            Health(arq.attach_handle_health or HEALTHY, arq.attach_handle_health_reason),
        ]
    )
    return {"state": verdict.state, "reason": verdict.reason}


def attach_target(arq: ArqRecord) -> str:
    """Where the request's accelerator is attached (spec 002's ``accel:attach_target``):
    ``VM`` (the default), ``host`` (the host uses it: infrastructure offload) or ``none``
    (nothing attaches it: the instance reaches it indirectly)."""
    return _target(profile_group(arq))


def profile_group(arq: ArqRecord) -> dict[str, str]:
    """The device profile group the request was made from."""
    groups = arq.device_profile_groups or []
    index = arq.device_profile_group_id
    return groups[index] if 0 <= index < len(groups) else {}


def _target(group: Mapping[str, str]) -> str:
    return group.get(f"accel:{ATTACH_TARGET_KEY}", "VM")


def _visible(context: RequestContext) -> ColumnElement[bool]:
    """The caller's project's requests, or every project's (``context.all_projects``:
    the API's policy decides it, ``arq:get_all_projects``)."""
    return true() if context.all_projects else ARQS.c.project_id == context.project_id


# The requests named, as a caller sees them: one statement built once per case (by one
# uuid or several; every project's or one's), so that none is compiled per request.
_BY_UUID = ARQS.c.uuid == bindparam("uuid")
_BY_UUIDS = ARQS.c.uuid.in_(bindparam("uuids", expanding=True))
_OWN = ARQS.c.project_id == bindparam("project")
_VIEWS = {
    (True, True): VIEW.where(_BY_UUID),
    (True, False): VIEW.where(_BY_UUIDS).order_by(ARQS.c.id),
    (False, True): VIEW.where(_BY_UUID, _OWN),
    (False, False): VIEW.where(_BY_UUIDS, _OWN).order_by(ARQS.c.id),
}


def _view_of(conn: Connection, context: RequestContext, uuids: Sequence[str]) -> list[ArqRecord]:
    """The requests of ``uuids`` the caller may see (in id order)."""
    privileged = context.all_projects
    if not privileged and context.project_id is None:  # sees the requests of no project
        query = VIEW.where(ARQS.c.uuid.in_(uuids), _visible(context)).order_by(ARQS.c.id)
        return list(map(_record, conn.execute(query)))
    one = len(uuids) == 1
    params: dict[str, Any] = {"uuid": uuids[0]} if one else {"uuids": list(uuids)}
    if not privileged:
        params["project"] = context.project_id
    return list(map(_record, conn.execute(_VIEWS[privileged, one], params)))


def check_uuids(values: Iterable[str], what: str = "uuid") -> list[str]:
    return [parse(value, what) for value in dict.fromkeys(values)]


def list_arqs(
    db: Database, context: RequestContext, instance: str | None = None, resolved: bool = False
) -> list[ArqRecord]:
    """ARQs the caller may see (of one instance, if given). With ``resolved``, Locked
    while any of the instance's ARQs is still being bound."""
    query = VIEW.where(_visible(context)).order_by(ARQS.c.id)
    if instance is not None:
        query = query.where(ARQS.c.instance_uuid == check_uuids([instance], "instance")[0])
    with db.reader() as conn:
        arqs = list(map(_record, conn.execute(query)))
    if resolved:
        waiting = [a.uuid for a in arqs if a.state not in RESOLVED]
        if waiting:
            raise Locked(f"Accelerator requests still being bound: {', '.join(waiting)}.")
    return arqs


def get(db: Database, context: RequestContext, uuid: str) -> ArqRecord:
    wanted = check_uuids([uuid])[0]
    with db.reader() as conn:
        found = _view_of(conn, context, [wanted])
    if not found:
        raise NotFound(f"Accelerator request {wanted} not found.")
    return found[0]


def of_instance(db: Database, instance: str) -> list[ArqRecord]:
    """Every request bound (or being bound) to ``instance``, by group then id (whoever
    may see the instance sees them: the caller checked)."""
    query = VIEW.where(ARQS.c.instance_uuid == instance).order_by(
        ARQS.c.device_profile_group_id, ARQS.c.id
    )
    with db.reader() as conn:
        return list(map(_record, conn.execute(query)))


# --- creating ------------------------------------------------------------------------


@retry_on_deadlock
def create(
    db: Database,
    context: RequestContext,
    profile_name: Any,
    limits: quotas.Limits | None = None,
    within: Callable[[Connection, list[str]], None] | None = None,
) -> list[ArqRecord]:
    """One ARQ per accelerator the profile asks for (``names.accelerators``: memory and
    other amounts travel with the group's allocation, they are no requests), tagged with
    its group's index and the accelerator's resource class. With ``limits``:
    QuotaExceeded when the project's accelerators of a class, with these, would pass its
    limit."""
    if not isinstance(profile_name, str):
        raise InvalidInput("device_profile_name: name the device profile to request.")
    # An empty name is a profile that does not exist (404), as upstream answers it.
    if not profile_name or not could_exist(profile_name):
        raise NotFound(f"Device profile {profile_name[:64]!r} not found.")
    project = context.project_id
    counted = limits is not None and limits.enforcing and bool(project)
    limit_of: dict[str, int | None] = {}
    if counted:  # read before the transaction: Keystone may be asked
        assert limits is not None and project
        with db.reader() as conn:
            groups = conn.execute(
                select(PROFILES.c.groups).where(PROFILES.c.name == profile_name)
            ).scalar()
        wanted = {rc for g in groups or [] for rc in names.accelerator_amounts(g)}
        limit_of = limits.limits(project, wanted)
    with db.writer() as conn:
        found = conn.execute(_PROFILE, {"name": profile_name}).first()
        if found is None:
            raise NotFound(f"Device profile {profile_name!r} not found.")
        profile = _Profile._make(found)
        if not profile.enabled:
            raise Disabled(f"Device profile {profile_name!r} is disabled: no new requests.")
        now = utcnow()
        rows: list[dict[str, Any]] = [
            {
                "uuid": str(uuidlib.uuid4()),
                "state": "Initial",
                "project_id": project,
                "device_profile_id": profile.id,
                "device_profile_group_id": index,
                "resource_class": resource_class,
                "created_at": now,
            }
            for index, group in enumerate(profile.groups)
            for resource_class in names.accelerators(group)
        ]
        if not rows:
            raise InvalidInput(
                f"Device profile {profile_name!r} asks for no accelerator: none of its groups "
                "names an accelerator class (CUSTOM_ACCELERATOR_<TYPE>, FPGA, PGPU or VGPU)."
            )
        if counted and project:
            quotas.check(conn, project, Counter(r["resource_class"] for r in rows), limit_of)
        ids = _insert(conn, rows)
        if within is not None:  # the caller's own record of them, in the same transaction
            within(conn, [r["uuid"] for r in rows])
    LOG.info("Created %d accelerator request(s) from device profile %s", len(rows), profile_name)
    # What a read would find: nothing is bound yet (no handle, no health).
    return [_new(ids[r["uuid"]], r, profile) for r in rows]


class _Profile(NamedTuple):
    id: int
    name: str
    enabled: bool
    groups: list[dict[str, str]]


_PROFILE = select(*(PROFILES.c[f] for f in _Profile._fields)).where(
    PROFILES.c.name == bindparam("name")
)
_INSERT = insert(ARQS)
_IDS = select(ARQS.c.uuid, ARQS.c.id).where(ARQS.c.uuid.in_(bindparam("uuids", expanding=True)))


_NOTHING = dict.fromkeys(ArqRecord._fields)  # no value in any field


def _new(id_: int, row: Mapping[str, Any], profile: _Profile) -> ArqRecord:
    """A request just made (``row``: what was inserted), as a read would find it:
    nothing bound, no handle, no health."""
    made = {"id": id_, "device_profile_name": profile.name, "device_profile_groups": profile.groups}
    return ArqRecord(**{**_NOTHING, **row, **made})


def _insert(conn: Connection, rows: list[dict[str, Any]]) -> dict[str, int]:
    """Insert new requests; their ids by uuid (one statement for one request)."""
    if len(rows) == 1:
        key = conn.execute(_INSERT, rows[0]).inserted_primary_key
        assert key is not None  # an INSERT of one row always has it
        return {rows[0]["uuid"]: key[0]}
    conn.execute(_INSERT, rows)
    return {row.uuid: row.id for row in conn.execute(_IDS, {"uuids": [r["uuid"] for r in rows]})}


# --- state transitions ----------------------------------------------------------------


# The state machine's updates, one per source states (built once): the values to set
# are the parameters' other keys.
_MOVES = {
    allowed: update(ARQS).where(
        ARQS.c.id == bindparam("arq_id"), or_(*(ARQS.c.state == s for s in allowed))
    )
    for allowed in set(TRANSITIONS.values())
}
_STATE = select(ARQS.c.state).where(ARQS.c.id == bindparam("arq_id"))


def move(
    conn: Connection, arq: ArqRecord, target: str, via: str | None = None, **values: Any
) -> None:
    """The conditional update of the state machine; Conflict when another request won.
    ``via``: reach ``target`` through that state in the same statement (both moves
    allowed, nobody can see the one between)."""
    allowed = TRANSITIONS[via or target]
    done = conn.execute(
        _MOVES[allowed], {"arq_id": arq.id, **values, "state": target, "updated_at": utcnow()}
    )
    if done.rowcount != 1:
        current = conn.execute(_STATE, {"arq_id": arq.id}).scalar()
        raise Conflict(
            f"Accelerator request {arq.uuid} is {current or 'gone'}: it cannot become {target} "
            f"(only from {', '.join(allowed)})."
        )


_LOST = (
    select(DEVICES.c.hostname)
    .join(DEPLOYABLES, DEPLOYABLES.c.device_id == DEVICES.c.id)
    .join(HANDLES, HANDLES.c.deployable_id == DEPLOYABLES.c.id)
    .where(HANDLES.c.arq_id == bindparam("arq_id"), HANDLES.c.state == "lost")
)
_FREE = (
    update(HANDLES)
    .where(HANDLES.c.arq_id == bindparam("arq"))
    .values(arq_id=None, in_use=False, updated_at=bindparam("now"))
)


def free_handle(
    conn: Connection, arq: ArqRecord, policy: cleaning.Policy = cleaning.DEFAULT
) -> None:
    """Give the request's handle back, to be cleaned before its next tenant where
    ``policy`` and the request's group call for it (``cleaning``). A handle whose
    device vanished while held (lost) can go now: the host's next report is diffed in
    full, which removes it."""
    lost = conn.execute(_LOST, {"arq_id": arq.id}).first()
    mig_slot = _handle_of(conn, arq.id)
    cleaning.give_back(conn, arq, profile_group(arq), policy)
    conn.execute(_FREE, {"arq": arq.id, "now": utcnow()})
    cleaning.start(conn, arq.deployable_id)  # a slice's memory is cleaned, then it goes
    _destroy_mig(conn, arq, mig_slot)
    if lost is not None:
        inventory.forget_report(conn, lost.hostname)
    _held_elsewhere(conn, arq)


def _destroy_mig(conn: Connection, arq: ArqRecord, handle: Row[Any] | None) -> None:
    """A slot handle of a partitionable GPU given back: the agent destroys the instance
    made for it (if any: the task is idempotent) and no other, after its cleaning."""
    if handle is not None and handle.deployable_kind == mig_units.KIND:
        _undo_on_host(conn, arq, handle, "destroy_mig", mig_params)


def _undo_on_host(
    conn: Connection,
    arq: ArqRecord,
    handle: Row[Any],
    kind: str,
    params: Callable[[str, str, str], dict[str, str]],
) -> None:
    """A task for the host's agent to undo what a bind made of ``handle`` (an mdev, a
    MIG instance); nothing when the request names no host."""
    if not arq.hostname:
        return
    tasks.create(
        conn,
        hostname=arq.hostname,
        kind=kind,
        params=params(handle.pci_address, handle.deployable_key, handle.address),
        deployable_id=handle.deployable_id,
    )


_PROVIDER = select(PROVIDERS.c.hostname, PROVIDERS.c.retired, PROVIDERS.c.owned).where(
    PROVIDERS.c.uuid == bindparam("rp")
)


def _held_elsewhere(conn: Connection, arq: ArqRecord) -> None:
    """A unit given back that was held through a provider the sync keeps only for it (a
    retired one: an older per-device provider after pools came, say) or through a pool
    it is no longer a member of: its host's providers follow at the next sync pass (the
    old provider deleted, the unit free in its pool) rather than at the verification."""
    if not arq.device_rp_uuid or arq.deployable_id is None:
        return
    row = conn.execute(_PROVIDER, {"rp": arq.device_rp_uuid}).first()
    if row is None:
        return
    members = (row.owned or {}).get("members")
    if row.retired or (members and str(arq.deployable_id) not in members):
        conn.execute(
            update(HOSTS)
            .where(HOSTS.c.hostname == row.hostname)
            .values(generation=HOSTS.c.generation + 1)
        )


_HANDLES_OF = HANDLES.c.deployable_id == DEPLOYABLES.c.id
_FREE_COUNT = select(func.count()).where(
    _HANDLES_OF, HANDLES.c.arq_id.is_(None), HANDLES.c.cleaning.is_(None)
)
_HOLDERS = (
    select(ARQS.c.instance_uuid).join(HANDLES, HANDLES.c.arq_id == ARQS.c.id).where(_HANDLES_OF)
)
_REFRESH = (
    update(DEPLOYABLES)
    .where(DEPLOYABLES.c.id == bindparam("dep"))
    .values(
        availability=case((_FREE_COUNT.scalar_subquery() == 0, "allocated"), else_="available"),
        instance_uuid=case(
            (
                select(func.count(distinct(ARQS.c.instance_uuid)))
                .join(HANDLES, HANDLES.c.arq_id == ARQS.c.id)
                .where(_HANDLES_OF)
                .scalar_subquery()
                == 1,
                _HOLDERS.with_only_columns(func.min(ARQS.c.instance_uuid)).scalar_subquery(),
            ),
            else_=None,
        ),
    )
)


def refresh_deployable(conn: Connection, deployable_id: int | None) -> None:
    """Spec 003's availability and instance of a deployable, from its handles (one
    statement): allocated when every handle is held, the instance when one holds all."""
    if deployable_id is not None:
        conn.execute(_REFRESH, {"dep": deployable_id})


# --- locking, and what binding and unbinding share -------------------------------------

LOCKED = select(*_ARQ_COLUMNS).order_by(ARQS.c.id).with_for_update()


def lock(conn: Connection, where: ColumnElement[bool]) -> list[ArqRecord]:
    """The requests ``where`` selects, their rows locked until the transaction ends
    (``SELECT ... FOR UPDATE``, in id order; SQLite's writer holds the whole database
    anyway): a bind, an unbind, a delete and the reaper of one request take turns, and
    each reads the state the one before it left. (Only the requests' own rows are
    locked: the joins of ``VIEW`` are read after.)"""
    ids = list(conn.execute(LOCKED.with_only_columns(ARQS.c.id).where(where)).scalars())
    query = VIEW.where(ARQS.c.id.in_(ids)).order_by(ARQS.c.id)
    return list(map(_record, conn.execute(query))) if ids else []


def visible_arqs(
    conn: Connection, context: RequestContext, uuids: Sequence[str], lock: bool = False
) -> dict[str, ArqRecord]:
    """The requests named, as the caller sees them (NotFound for any it does not);
    ``lock``: inside a write transaction, locked first (as ``lock`` locks them)."""
    if lock:
        conn.execute(
            LOCKED.with_only_columns(ARQS.c.id).where(ARQS.c.uuid.in_(uuids) & _visible(context))
        ).all()
    found = {a.uuid: a for a in _view_of(conn, context, uuids)}
    missing = [u for u in uuids if u not in found]
    if missing:
        raise NotFound(f"Accelerator request(s) not found: {', '.join(missing)}.")
    return found


def needs_preparing(handle: Handle | Row[Any]) -> bool:
    """Whether the agent makes the handle before it can be attached: an mdev, or a VF
    that takes a vGPU type (the vendor VFIO form)."""
    return handle.type == "MDEV" or bool((handle.attach_info or {}).get("vgpu_type"))


def vgpu_params(pci_address: str, key: str, address: str) -> dict[str, str]:
    return {"pci_address": pci_address, "deployable": key, "mdev_uuid": address}


def mig_params(pci_address: str, key: str, slot: str) -> dict[str, str]:
    """What the agent's ``make_mig`` and ``destroy_mig`` tasks name: the GPU, its
    partitionable deployable and the slot handle the instance is made for."""
    return {"pci_address": pci_address, "deployable": key, "slot": slot}


BY_ID = VIEW.where(ARQS.c.id == bindparam("arq_id"))


# --- unbinding and deleting -----------------------------------------------------------

BOUND = ("BindStarted", "Bound", "BindFailed", "UnbindFailed")
HOLDING = ("BindStarted", "Bound")  # the states in which a request holds a handle


_HANDLE_OF = (
    select(
        HANDLES,
        DEVICES.c.pci_address,
        DEPLOYABLES.c.key.label("deployable_key"),
        DEPLOYABLES.c.kind.label("deployable_kind"),
    )
    .join(DEPLOYABLES, DEPLOYABLES.c.id == HANDLES.c.deployable_id)
    .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
    .where(HANDLES.c.arq_id == bindparam("arq_id"))
)
_STILL_BOUND = select(func.count()).where(
    ARQS.c.instance_uuid == bindparam("instance"), or_(*(ARQS.c.state == s for s in BOUND))
)
_UNCLAIM = delete(BINDINGS).where(BINDINGS.c.instance_uuid == bindparam("instance"))


def _handle_of(conn: Connection, arq_id: int) -> Row[Any] | None:
    return conn.execute(_HANDLE_OF, {"arq_id": arq_id}).first()


def release(
    conn: Connection,
    arq: ArqRecord,
    reason: str | None = None,
    policy: cleaning.Policy = cleaning.DEFAULT,
) -> None:
    """Undo a bind (any stage of it): tasks cancelled, handle freed (its mdev removed)
    and cleaned as ``policy`` says, the instance released once none of its ARQs stays
    bound; ``reason``: why, shown as the request's failure_reason."""
    if arq.state not in BOUND:
        return
    programming.cancel_for_arq(conn, arq.id)
    handle = _handle_of(conn, arq.id)
    if handle is not None and needs_preparing(handle):
        _undo_on_host(conn, arq, handle, "remove_mdev", vgpu_params)
    free_handle(conn, arq, policy)
    move(
        conn,
        arq,
        "Unbound",
        hostname=None,
        device_rp_uuid=None,
        instance_uuid=None,
        deployable_id=None,
        bind_started_at=None,
        phase=None,
        progress=None,
        **({"failure_reason": reason[:4000]} if reason else {}),
    )
    refresh_deployable(conn, arq.deployable_id)
    if not conn.execute(_STILL_BOUND, {"instance": arq.instance_uuid}).scalar():
        conn.execute(_UNCLAIM, {"instance": arq.instance_uuid})


def _check_service(arqs: Iterable[ArqRecord], service_token: bool, doing: str) -> None:
    """Changing a bound ARQ needs the compute service's token (where tokens exist)."""
    bound = [a.uuid for a in arqs if a.state in BOUND]
    if bound and not service_token:
        raise Forbidden(
            f"{doing} a bound accelerator request ({', '.join(bound)}) needs a service token "
            f"(X-Service-Token from the compute service) beside the user's."
        )


@retry_on_deadlock
def unbind(
    db: Database,
    context: RequestContext,
    uuids: Sequence[str],
    service_token: bool = True,
    policy: cleaning.Policy = cleaning.DEFAULT,
) -> None:
    """Unbind ARQs (Nova's PATCH with remove operations): Unbound, handles freed (and
    cleaned as ``policy`` says)."""
    wanted = check_uuids(uuids)
    with db.writer() as conn:
        arqs = visible_arqs(conn, context, wanted, lock=True)
        _check_service(arqs.values(), service_token, "Unbinding")
        for arq in arqs.values():
            release(conn, arq, policy=policy)


@retry_on_deadlock
def delete_arqs(
    db: Database,
    context: RequestContext,
    uuids: Sequence[str],
    service_token: bool = True,
    policy: cleaning.Policy = cleaning.DEFAULT,
) -> None:
    """Delete ARQs by uuid (all must exist), unbinding the bound ones first (their
    handles cleaned as ``policy`` says)."""
    wanted = check_uuids(uuids)
    if not wanted:
        raise InvalidInput("Name at least one accelerator request to delete.")
    with db.writer() as conn:
        arqs = visible_arqs(conn, context, wanted, lock=True)
        _check_service(arqs.values(), service_token, "Deleting")
        _delete(conn, arqs.values(), policy)


@retry_on_deadlock
def delete_for_instance(
    db: Database,
    context: RequestContext,
    instance: str,
    service_token: bool = True,
    policy: cleaning.Policy = cleaning.DEFAULT,
) -> int:
    """Delete every ARQ of an instance (idempotent: none left is fine); how many."""
    wanted = check_uuids([instance], "instance")[0]
    with db.writer() as conn:
        arqs = lock(conn, (ARQS.c.instance_uuid == wanted) & _visible(context))
        _check_service(arqs, service_token, "Deleting")
        _delete(conn, arqs, policy)
    return len(arqs)


def delete_present(
    conn: Connection,
    context: RequestContext,
    uuids: Sequence[str],
    instance: str | None = None,
    policy: cleaning.Policy = cleaning.DEFAULT,
) -> int:
    """Delete those of ``uuids`` that exist and the caller sees, and with ``instance``
    every request of that instance the caller sees, in the caller's transaction (a
    claim's ending records in it that its requests are gone), unbinding the bound ones
    first (idempotent: none left is fine); how many."""
    wanted = check_uuids(uuids)
    where: ColumnElement[bool] = ARQS.c.uuid.in_(wanted)
    if instance is not None:
        where = where | (ARQS.c.instance_uuid == check_uuids([instance], "instance")[0])
    elif not wanted:
        return 0
    arqs = lock(conn, where & _visible(context))
    _delete(conn, arqs, policy)
    return len(arqs)


_DELETE = delete(ARQS).where(ARQS.c.id == bindparam("arq_id"))


def _delete(conn: Connection, arqs: Iterable[ArqRecord], policy: cleaning.Policy) -> None:
    """Delete requests whose rows this transaction locked (``lock``)."""
    for arq in arqs:
        release(conn, _record(conn.execute(BY_ID, {"arq_id": arq.id}).one()), policy=policy)
        conn.execute(_DELETE, {"arq_id": arq.id})
        LOG.info("Deleted accelerator request %s", arq.uuid)
