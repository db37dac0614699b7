"""Accelerator requests (ARQs): what a workload asks for, and its binding to a device.

One explicit state machine (``TRANSITIONS``). Every transition is a conditional
``UPDATE ... WHERE state IN (...)``: of two requests racing for one ARQ, one
wins and the other sees it and stops. Binding an ARQ:

* takes one free attach handle of the deployable behind the chosen resource
  provider with a conditional update (``arq_id IS NULL``); the unique
  ``attach_handles.arq_id`` makes a double allocation impossible on every backend;
* claims the instance in ``instance_bindings`` (unique): a second, racing bind
  of the same instance fails in the database, not in a Python check;
* ends ``Bound`` at once, or ``BindStarted`` with a task for the host's agent
  when a region must be programmed or an mdev made; the task's end binds or
  fails it (``finish``), and ``reap`` fails what outlives ``bind_timeout``.

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
    DeviceProfile,
    Host,
    InstanceBinding,
    table,
    utcnow,
)
from acceleron.db.session import Database, retry_on_deadlock
from acceleron.exceptions import (
    BitstreamNotFound,
    Conflict,
    Disabled,
    Forbidden,
    InMaintenance,
    InUse,
    InvalidInput,
    Locked,
    NotFound,
    Unhealthy,
)
from acceleron.placement import names, tree
from acceleron.service import fitting, flat, inventory, programming, quotas, tasks
from acceleron.service.device_profiles import ATTACH_TARGET_KEY, could_exist
from acceleron.uuids import parse

LOG = logging.getLogger(__name__)
ARQS, PROFILES, HANDLES = table(AcceleratorRequest), table(DeviceProfile), table(AttachHandle)
DEPLOYABLES, DEVICES, BINDINGS = table(Deployable), table(Device), table(InstanceBinding)
HOSTS = table(Host)

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
SELECTORS = ("bitstream_id", "bitstream_name", "function_id", "function_name")
PROGRAM_PHASES = ("fetch", "verify", "program")  # what an agent's program task reports


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
    of ``_VIEW`` (the same names, in the same order) with ``ArqRecord._make``."""

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


class Handle(NamedTuple):
    """A free attach handle a bind takes (``_HANDLE_COLUMNS``)."""

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
}
_VIEW = (
    select(*(_JOINED[f].label(f) if f in _JOINED else ARQS.c[f] for f in ArqRecord._fields))
    .join(PROFILES, PROFILES.c.id == ARQS.c.device_profile_id)
    .outerjoin(HANDLES, HANDLES.c.arq_id == ARQS.c.id)
    .outerjoin(_HEALTH_DEP, _HEALTH_DEP.c.id == ARQS.c.deployable_id)
    .outerjoin(_HEALTH_DEV, _HEALTH_DEV.c.id == _HEALTH_DEP.c.device_id)
)


def health_of(arq: ArqRecord) -> dict[str, Any] | None:
    """The health of what a request is bound to (its deployable, with its device's): the
    condition shown on a request whose device fails under it; None when not bound."""
    if arq.state not in ("BindStarted", "Bound") or arq.device_health is None:
        return None
    found = [(arq.device_health, arq.device_health_reason),
             (arq.deployable_health, arq.deployable_health_reason)]  # fmt: skip
    rank = {"healthy": 0, "degraded": 1, "unhealthy": 2}
    state = max((s for s, _ in found), key=lambda s: rank.get(s or "", 1))
    reasons = [r for s, r in found if s == state and r]
    return {"state": state, "reason": "; ".join(reasons) or None}


def attach_target(arq: ArqRecord) -> str:
    """Where the request's accelerator is attached (spec 002's ``accel:attach_target``):
    ``VM`` (the default), ``host`` (the host uses it: infrastructure offload) or ``none``
    (nothing attaches it: the instance reaches it indirectly)."""
    return _target(_group(arq))


def _group(arq: ArqRecord) -> dict[str, str]:
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
    (True, True): _VIEW.where(_BY_UUID),
    (True, False): _VIEW.where(_BY_UUIDS).order_by(ARQS.c.id),
    (False, True): _VIEW.where(_BY_UUID, _OWN),
    (False, False): _VIEW.where(_BY_UUIDS, _OWN).order_by(ARQS.c.id),
}


def _view_of(conn: Connection, context: RequestContext, uuids: Sequence[str]) -> list[ArqRecord]:
    """The requests of ``uuids`` the caller may see (in id order)."""
    privileged = context.all_projects
    if not privileged and context.project_id is None:  # sees the requests of no project
        query = _VIEW.where(ARQS.c.uuid.in_(uuids), _visible(context)).order_by(ARQS.c.id)
        return list(map(_record, conn.execute(query)))
    one = len(uuids) == 1
    params: dict[str, Any] = {"uuid": uuids[0]} if one else {"uuids": list(uuids)}
    if not privileged:
        params["project"] = context.project_id
    return list(map(_record, conn.execute(_VIEWS[privileged, one], params)))


def _check_uuids(values: Iterable[str], what: str = "uuid") -> list[str]:
    return [parse(value, what) for value in dict.fromkeys(values)]


def list_arqs(
    db: Database, context: RequestContext, instance: str | None = None, resolved: bool = False
) -> list[ArqRecord]:
    """ARQs the caller may see (of one instance, if given). With ``resolved``, Locked
    while any of the instance's ARQs is still being bound."""
    query = _VIEW.where(_visible(context)).order_by(ARQS.c.id)
    if instance is not None:
        query = query.where(ARQS.c.instance_uuid == _check_uuids([instance], "instance")[0])
    with db.reader() as conn:
        arqs = list(map(_record, conn.execute(query)))
    if resolved:
        waiting = [a.uuid for a in arqs if a.state not in RESOLVED]
        if waiting:
            raise Locked(f"Accelerator requests still being bound: {', '.join(waiting)}.")
    return arqs


def get(db: Database, context: RequestContext, uuid: str) -> ArqRecord:
    wanted = _check_uuids([uuid])[0]
    with db.reader() as conn:
        found = _view_of(conn, context, [wanted])
    if not found:
        raise NotFound(f"Accelerator request {wanted} not found.")
    return found[0]


def of_instance(db: Database, instance: str) -> list[ArqRecord]:
    """Every request bound (or being bound) to ``instance``, by group then id (whoever
    may see the instance sees them: the caller checked)."""
    query = _VIEW.where(ARQS.c.instance_uuid == instance).order_by(
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


def _move(
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


def _free_handle(conn: Connection, arq_id: int) -> None:
    """Give the request's handle back. A handle whose device vanished while held (lost)
    can go now: the host's next report is diffed in full, which removes it."""
    lost = conn.execute(_LOST, {"arq_id": arq_id}).first()
    conn.execute(_FREE, {"arq": arq_id, "now": utcnow()})
    if lost is not None:
        inventory.forget_report(conn, lost.hostname)


_HANDLES_OF = HANDLES.c.deployable_id == DEPLOYABLES.c.id
_FREE_COUNT = select(func.count()).where(_HANDLES_OF, HANDLES.c.arq_id.is_(None))
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


def _refresh_deployable(conn: Connection, deployable_id: int | None) -> None:
    """Spec 003's availability and instance of a deployable, from its handles (one
    statement): allocated when every handle is held, the instance when one holds all."""
    if deployable_id is not None:
        conn.execute(_REFRESH, {"dep": deployable_id})


# --- binding ------------------------------------------------------------------------

_DEPLOYABLE = programming.REGION.where(DEPLOYABLES.c.rp_uuid == bindparam("rp")).order_by(
    DEPLOYABLES.c.id
)
_FREE_HANDLES = (
    select(*(HANDLES.c[f] for f in Handle._fields))
    .where(
        HANDLES.c.deployable_id == bindparam("deployable"),
        HANDLES.c.arq_id.is_(None),
        HANDLES.c.host_in_use.is_(False),
        HANDLES.c.state == "present",
    )
    .order_by(HANDLES.c.id)
    .limit(1)
)


def _deployables_for(
    conn: Connection,
    rp_uuid: str,
    hostname: str,
    group: Mapping[str, str],
    flat_mode: tree.Options | None,
) -> list[Row[Any]]:
    """The deployables behind a resource provider Placement chose, on the host named:
    the one whose provider it is, or in flat mode (``flat_mode``: the sync's options),
    when it is the host's compute node, every one there that can serve ``group``."""
    dep = conn.execute(_DEPLOYABLE, {"rp": rp_uuid}).first()
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
    group: Mapping[str, str], dep: Row[Any], store: BitstreamStore | None, project: str
) -> Bitstream | None:
    """The bitstream to load before binding to ``dep``, or None when none is needed: the
    group names none, or the region already holds it (spec 000; never reprogrammed).
    Chosen among what ``project`` (the request's) sees: public bitstreams and its own."""
    accel = {k: v for k, v in group.items() if k.startswith("accel:") and k[6:] in SELECTORS}
    if not accel:
        return None
    held = dep.function_uuids or ([dep.function_uuid] if dep.function_uuid else [])
    if any(_same_id(accel.get("accel:function_id"), f) for f in held):
        return None  # pre-programmed: nothing to look up
    if store is None:
        raise Conflict("The request names a bitstream but no bitstream store is configured.")
    bitstream = store.for_request(accel, dep.region_type, project)
    if bitstream is None or _same_id(bitstream.id, dep.bitstream_id):
        return None
    if any(_same_id(bitstream.function_uuid, f) for f in held):
        return None
    if not dep.programmable:
        raise Conflict(
            f"{dep.name} cannot be programmed and does not hold the function the request asks "
            f"for ({bitstream.function_uuid or bitstream.name})."
        )
    return bitstream


@dataclasses.dataclass(frozen=True)
class _Prepared:
    binding: Binding
    arq: ArqRecord  # as first read; its own row read again once locked, outside SQLite
    # The deployables the bind may take a handle of, in order, each with the bitstream
    # to load first (None: none): one in nested mode, the fitting ones in flat mode.
    choices: tuple[tuple[Row[Any], Bitstream | None], ...]
    limits: Mapping[str, int | None] = dataclasses.field(default_factory=dict)

    @property
    def project(self) -> str:
        """The project the bound request will belong to (what its quota counts)."""
        return self.binding.project_id or self.arq.project_id or ""


_LOCKED = select(*_ARQ_COLUMNS).order_by(ARQS.c.id).with_for_update()
_LOCK_ONE = _LOCKED.where(ARQS.c.id == bindparam("arq_id"))


def _lock(conn: Connection, where: ColumnElement[bool]) -> list[ArqRecord]:
    """The requests ``where`` selects, their rows locked until the transaction ends
    (``SELECT ... FOR UPDATE``, in id order; SQLite's writer holds the whole database
    anyway): a bind, an unbind, a delete and the reaper of one request take turns, and
    each reads the state the one before it left. (Only the requests' own rows are
    locked: the joins of ``_VIEW`` are read after.)"""
    ids = list(conn.execute(_LOCKED.with_only_columns(ARQS.c.id).where(where)).scalars())
    query = _VIEW.where(ARQS.c.id.in_(ids)).order_by(ARQS.c.id)
    return list(map(_record, conn.execute(query))) if ids else []


def _visible_arqs(
    conn: Connection, context: RequestContext, uuids: Sequence[str], lock: bool = False
) -> dict[str, ArqRecord]:
    """The requests named, as the caller sees them (NotFound for any it does not);
    ``lock``: inside a write transaction, locked first (``_lock``)."""
    if lock:
        conn.execute(
            _LOCKED.with_only_columns(ARQS.c.id).where(ARQS.c.uuid.in_(uuids) & _visible(context))
        ).all()
    found = {a.uuid: a for a in _view_of(conn, context, uuids)}
    missing = [u for u in uuids if u not in found]
    if missing:
        raise NotFound(f"Accelerator request(s) not found: {', '.join(missing)}.")
    return found


def _prepare(
    conn: Connection,
    context: RequestContext,
    bindings: Sequence[Binding],
    store: BitstreamStore | None,
    flat_mode: tree.Options | None = None,
    limits: quotas.Limits | None = None,
) -> list[_Prepared]:
    """Everything a bind needs that is read (and looked up in the bitstream store, and
    the limits of its projects) before it writes."""
    uuids = _check_uuids([b.arq_uuid for b in bindings])
    arqs = _visible_arqs(conn, context, uuids)
    group_of = {b.arq_uuid: _group(arqs[b.arq_uuid]) for b in bindings}
    deployables = {
        b.arq_uuid: _deployables_for(
            conn, b.device_rp_uuid, b.hostname, group_of[b.arq_uuid], flat_mode
        )
        for b in bindings
    }
    prepared = []
    for b in bindings:
        arq = arqs[b.arq_uuid]
        # A request with no project sees public bitstreams only ("" owns none).
        project = b.project_id or arq.project_id or ""
        choices = _choices(conn, group_of[b.arq_uuid], deployables[b.arq_uuid], store, project)
        prepared.append(_Prepared(b, arq, tuple(choices)))
    if limits is None or not limits.enforcing:
        return prepared
    classes: dict[str, set[str]] = {}
    for p in prepared:
        if p.project and p.arq.resource_class:
            classes.setdefault(p.project, set()).add(p.arq.resource_class)
    found = {project: limits.limits(project, wanted) for project, wanted in classes.items()}
    return [dataclasses.replace(p, limits=found.get(p.project, {})) for p in prepared]


def _choices(
    conn: Connection,
    group: Mapping[str, str],
    deployables: Sequence[Row[Any]],
    store: BitstreamStore | None,
    project: str,
) -> list[tuple[Row[Any], Bitstream | None]]:
    """Each deployable with what must be loaded into it first; one that cannot serve
    the request (not programmable, lacking the function, of a region type no bitstream
    it names is built for) is left out, and when that leaves none the first one's
    reason is the answer (for a function no region anywhere can serve, saying so)."""
    choices: list[tuple[Row[Any], Bitstream | None]] = []
    refusal: Conflict | BitstreamNotFound | None = None
    for dep in deployables:
        try:
            choices.append((dep, program_for(group, dep, store, project)))
        except (Conflict, BitstreamNotFound) as error:
            refusal = refusal or error
    if not choices and refusal is not None:
        if isinstance(refusal, BitstreamNotFound) and "accel:function_id" in group:
            fit = fitting.fit_of(conn, store, group, project)
            if fit is not None and fit.nowhere:  # the same error, saying it is so everywhere
                raise BitstreamNotFound(fit.refusal().message) from refusal
        raise refusal
    return flat.ordered(choices)


def _check(bindings: Sequence[Binding], context: RequestContext) -> None:
    for b in bindings:
        _check_uuids([b.arq_uuid], "arq")
        _check_uuids([b.device_rp_uuid], "device_rp_uuid")
        _check_uuids([b.instance_uuid], "instance_uuid")
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
    bindings: Sequence[Binding],
    store: BitstreamStore | None = None,
    flat_mode: tree.Options | None = None,
    limits: quotas.Limits | None = None,
    within: Callable[[Connection, list[Resolved]], None] | None = None,
) -> list[Resolved]:
    """Bind ARQs (Nova's PATCH): all of them in one transaction. Returns the binds that
    already ended (Nova is told of those now; the others end with their tasks).
    ``within``: the caller's own record of the bind, called with those in the same
    transaction (what it raises undoes the bind).
    ``flat_mode``: the Placement sync's options when it publishes flat (a bind may then
    name the compute node's provider; see ``service.flat``). With ``limits``:
    QuotaExceeded, and nothing bound, when a project would hold more than its limit of
    a resource class."""
    if not bindings:
        raise InvalidInput("Name at least one accelerator request to bind.")
    _check(bindings, context)
    try:
        if _local(db, store, limits):
            with db.writer() as conn:
                prepared = _prepare(conn, context, bindings, store, flat_mode, limits)
                return _bind_all(conn, prepared, within)
        with db.reader() as conn:
            prepared = _prepare(conn, context, bindings, store, flat_mode, limits)
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
    within: Callable[[Connection, list[Resolved]], None] | None = None,
) -> list[Resolved]:
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
        locked = list(conn.execute(_LOCKED.where(ARQS.c.id.in_([p.arq.id for p in prepared]))))
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
        if p.limits and p.arq.resource_class and p.arq.state not in HOLDING and not _is_retry(p):
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
        if not any(p.arq.state in HOLDING for p in mine):
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


def _allocate(conn: Connection, arq_id: int, deployable_id: int) -> Handle | None:
    """Take one free attach handle: the first free one, with a conditional update, so
    of two binds racing for a handle one gets it and the other reads the next."""
    while True:
        row = conn.execute(_FREE_HANDLES, {"deployable": deployable_id}).first()
        if row is None:
            return None
        taken = conn.execute(_TAKE, {"handle": row.id, "arq": arq_id, "now": utcnow()})
        if taken.rowcount == 1:
            return _handle(row)


def _take(
    conn: Connection, arq_id: int, choices: Sequence[tuple[Row[Any], Bitstream | None]]
) -> tuple[Row[Any], Bitstream | None, Handle | None]:
    """A handle of the first choice that has one free, each choice's region locked first
    (binds of one region queue there); the last choice with no handle when none has."""
    last = len(choices) - 1
    for index, (dep, program) in enumerate(choices):
        if index < last and conn.execute(_FREE_HANDLES, {"deployable": dep.id}).first() is None:
            continue  # full: not worth queueing on its lock
        programming.lock(conn, dep.id)
        handle = _allocate(conn, arq_id, dep.id)
        if handle is not None or index == last:
            return dep, program, handle
    raise AssertionError("no choices")  # _prepare gives at least one


def _bind_one(conn: Connection, p: _Prepared) -> list[Resolved]:
    arq, b = p.arq, p.binding
    if _is_retry(p):
        return []
    dep, program, handle = _take(conn, arq.id, p.choices)
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
        _move(conn, arq, "BindStarted", **values)
        return _fail(
            conn,
            arq.id,
            f"no free attach handle on {dep.name}: its inventory in "
            f"Placement and on the host disagree; the next report will fix it",
        )
    busy = program and programming.busy_reason(
        conn, dep.id, program.id, arq.id, values.get("project_id", arq.project_id) or ""
    )
    if busy:
        _move(conn, arq, "BindStarted", **values)
        return _fail(conn, arq.id, f"{dep.name} cannot be programmed now: {busy}")
    if _queue_work(conn, arq.id, b.hostname, dep, handle, program):
        _move(conn, arq, "BindStarted", **{**values, "phase": "queued"})
        _refresh_deployable(conn, dep.id)
        return []
    # Nothing to wait for: BindStarted and Bound in one statement of one transaction.
    _move(conn, arq, "Bound", via="BindStarted", **{**values, "phase": None, "progress": 100})
    _refresh_deployable(conn, dep.id)
    _observe_bind(values["bind_started_at"], "bound")
    LOG.info(
        "Bound %s to %s %s for instance %s", arq.uuid, b.hostname, handle.address, b.instance_uuid
    )
    return [Resolved(b.instance_uuid, arq.uuid, "completed")]


def _queue_work(
    conn: Connection,
    arq_id: int,
    hostname: str,
    dep: Row[Any],
    handle: Handle,
    program: Bitstream | None,
) -> bool:
    """Tasks the host's agent must finish before the bind ends; whether there are any."""
    if program is not None:
        programming.queue(conn, dep, program, arq_id)
    prepare = needs_preparing(handle)
    if prepare:
        tasks.create(
            conn,
            hostname=hostname,
            kind="create_mdev",
            params=_vgpu_params(dep.pci_address, dep.key, handle.address),
            arq_id=arq_id,
            deployable_id=dep.id,
        )
    return program is not None or prepare


def needs_preparing(handle: Handle | Row[Any]) -> bool:
    """Whether the agent makes the handle before it can be attached: an mdev, or a VF
    that takes a vGPU type (the vendor VFIO form)."""
    return handle.type == "MDEV" or bool((handle.attach_info or {}).get("vgpu_type"))


def _vgpu_params(pci_address: str, key: str, address: str) -> dict[str, str]:
    return {"pci_address": pci_address, "deployable": key, "mdev_uuid": address}


def _observe_bind(started: dt.datetime | None, outcome: str) -> None:
    if started is not None:
        seconds = max(0.0, (utcnow() - started).total_seconds())
        metrics.BIND_SECONDS.labels(outcome).observe(seconds)


_BY_ID = _VIEW.where(ARQS.c.id == bindparam("arq_id"))


def _fail(conn: Connection, arq_id: int, reason: str) -> list[Resolved]:
    """End a bind in BindFailed, its handle freed and its tasks cancelled."""
    arq = _record(conn.execute(_BY_ID, {"arq_id": arq_id}).one())
    programming.cancel_for_arq(conn, arq.id)
    _free_handle(conn, arq.id)
    _move(conn, arq, "BindFailed", phase=None, failure_reason=reason[:4000])
    _refresh_deployable(conn, arq.deployable_id)
    _observe_bind(arq.bind_started_at, "failed")
    LOG.warning("Bind of %s failed: %s", arq.uuid, reason)
    return [Resolved(arq.instance_uuid or "", arq.uuid, "failed")]


# --- unbinding and deleting -----------------------------------------------------------

BOUND = ("BindStarted", "Bound", "BindFailed", "UnbindFailed")


_HANDLE_OF = (
    select(HANDLES, DEVICES.c.pci_address, DEPLOYABLES.c.key.label("deployable_key"))
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


def _release(conn: Connection, arq: ArqRecord, reason: str | None = None) -> None:
    """Undo a bind (any stage of it): tasks cancelled, handle freed (its mdev removed),
    the instance released once none of its ARQs stays bound; ``reason``: why, shown as
    the request's failure_reason."""
    if arq.state not in BOUND:
        return
    programming.cancel_for_arq(conn, arq.id)
    handle = _handle_of(conn, arq.id)
    if handle is not None and needs_preparing(handle) and arq.hostname:
        tasks.create(
            conn,
            hostname=arq.hostname,
            kind="remove_mdev",
            params=_vgpu_params(handle.pci_address, handle.deployable_key, handle.address),
            deployable_id=handle.deployable_id,
        )
    _free_handle(conn, arq.id)
    _move(
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
    _refresh_deployable(conn, arq.deployable_id)
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
    db: Database, context: RequestContext, uuids: Sequence[str], service_token: bool = True
) -> None:
    """Unbind ARQs (Nova's PATCH with remove operations): Unbound, handles freed."""
    wanted = _check_uuids(uuids)
    with db.writer() as conn:
        arqs = _visible_arqs(conn, context, wanted, lock=True)
        _check_service(arqs.values(), service_token, "Unbinding")
        for arq in arqs.values():
            _release(conn, arq)


@retry_on_deadlock
def delete_arqs(
    db: Database, context: RequestContext, uuids: Sequence[str], service_token: bool = True
) -> None:
    """Delete ARQs by uuid (all must exist), unbinding the bound ones first."""
    wanted = _check_uuids(uuids)
    if not wanted:
        raise InvalidInput("Name at least one accelerator request to delete.")
    with db.writer() as conn:
        arqs = _visible_arqs(conn, context, wanted, lock=True)
        _check_service(arqs.values(), service_token, "Deleting")
        _delete(conn, arqs.values())


@retry_on_deadlock
def delete_for_instance(
    db: Database, context: RequestContext, instance: str, service_token: bool = True
) -> int:
    """Delete every ARQ of an instance (idempotent: none left is fine); how many."""
    wanted = _check_uuids([instance], "instance")[0]
    with db.writer() as conn:
        arqs = _lock(conn, (ARQS.c.instance_uuid == wanted) & _visible(context))
        _check_service(arqs, service_token, "Deleting")
        _delete(conn, arqs)
    return len(arqs)


@retry_on_deadlock
def delete_present(db: Database, context: RequestContext, uuids: Sequence[str]) -> int:
    """Delete those of ``uuids`` that exist and the caller sees, unbinding the bound ones
    first (idempotent: none left is fine); how many."""
    wanted = _check_uuids(uuids)
    if not wanted:
        return 0
    with db.writer() as conn:
        arqs = _lock(conn, ARQS.c.uuid.in_(wanted) & _visible(context))
        _delete(conn, arqs)
    return len(arqs)


_DELETE = delete(ARQS).where(ARQS.c.id == bindparam("arq_id"))


def _delete(conn: Connection, arqs: Iterable[ArqRecord]) -> None:
    """Delete requests whose rows this transaction locked (``_lock``)."""
    for arq in arqs:
        _release(conn, _record(conn.execute(_BY_ID, {"arq_id": arq.id}).one()))
        conn.execute(_DELETE, {"arq_id": arq.id})
        LOG.info("Deleted accelerator request %s", arq.uuid)


# --- what the reconciler of Placement and requests needs ------------------------------

HOLDING = ("BindStarted", "Bound")  # the states in which a request holds a handle


def holding(db: Database) -> dict[str, list[str]]:
    """The consumers (instances) requests hold handles for, each with those requests."""
    query = select(ARQS.c.instance_uuid, ARQS.c.uuid).where(
        ARQS.c.state.in_(HOLDING), ARQS.c.instance_uuid.is_not(None)
    )
    found: dict[str, list[str]] = {}
    with db.reader() as conn:
        for row in conn.execute(query.order_by(ARQS.c.id)):
            found.setdefault(row.instance_uuid, []).append(row.uuid)
    return found


@retry_on_deadlock
def release_orphans(db: Database, consumer: str, uuids: Sequence[str], reason: str) -> list[str]:
    """Unbind those of ``uuids`` still holding a handle for ``consumer`` (a consumer that
    holds no allocation any more), ``reason`` recorded; the ones released."""
    with db.writer() as conn:
        rows = _lock(
            conn,
            ARQS.c.uuid.in_(uuids) & (ARQS.c.instance_uuid == consumer) & ARQS.c.state.in_(HOLDING),
        )
        for arq in rows:
            _release(conn, arq, reason)
            LOG.warning("Released %s of %s: %s", arq.uuid, consumer, reason)
    return [arq.uuid for arq in rows]


# --- run-time programming ----------------------------------------------------------


@retry_on_deadlock
def reprogram(
    db: Database,
    context: RequestContext,
    uuid: str,
    selector: Mapping[str, str],
    store: BitstreamStore,
) -> ArqRecord:
    """Load another bitstream into the region of a Bound request, for its project
    (spec 001: an instance may ask for bitstreams at run time). The bitstream must be
    one that project sees, and no other request may hold the region. The request."""
    wanted = _check_uuids([uuid])[0]
    with db.reader() as conn:
        arq = _visible_arqs(conn, context, [wanted])[wanted]
        if arq.state != "Bound" or arq.deployable_id is None:
            raise Conflict(f"Accelerator request {wanted} is {arq.state}: only a Bound one "
                           f"can have its region reprogrammed.")  # fmt: skip
        region = conn.execute(programming.REGION.where(DEPLOYABLES.c.id == arq.deployable_id)).one()
    programming.check_programmable(region)
    accel = {f"accel:{k}": v for k, v in selector.items()}
    bitstream = store.for_request(accel, region.region_type, arq.project_id or "")
    if bitstream is None:
        raise InvalidInput(f"Name the bitstream: one of {', '.join(SELECTORS)}.")
    with db.writer() as conn:
        programming.lock(conn, region.id)
        viewer = None if context.all_projects else (context.project_id or "")
        busy = programming.busy_reason(conn, region.id, "", arq.id, viewer)
        if busy:
            raise InUse(f"{region.name} cannot be reprogrammed now: {busy}.")
        programming.queue(conn, region, bitstream, arq.id)
        conn.execute(
            update(ARQS)
            .where(ARQS.c.id == arq.id, ARQS.c.state == "Bound")
            .values(phase="queued", progress=0, failure_reason=None, updated_at=utcnow())
        )
        found = _record(conn.execute(_VIEW.where(ARQS.c.id == arq.id)).one())
    LOG.info("Reprogramming %s for %s with %s", region.name, wanted, bitstream.describe())
    return found


# --- the end of a bind: agent tasks, and the reaper ------------------------------------


@retry_on_deadlock
def finish_task(
    db: Database,
    uuid: str,
    *,
    state: str,
    phase: str | None = None,
    progress: int | None = None,
    result: Mapping[str, Any] | None = None,
    error: str | None = None,
) -> tuple[tasks.TaskRecord, list[Resolved]]:
    """An agent's word on a task: progress shown on the ARQ and the deployable; its end
    binds the ARQ (when it was the last task) or fails it. The task after, and what ended."""
    tasks.check_progress(state, phase, progress)
    with db.writer() as conn:
        task = tasks.record(
            conn,
            tasks.lock(conn, uuid),
            state=state,
            phase=phase,
            progress=progress,
            result=result,
            error=error,
        )
        _mirror_progress(conn, task)
        resolved = _bind_end(conn, task) if task.state in ("done", "failed") else []
    return task, resolved


def _mirror_progress(conn: Connection, task: tasks.TaskRecord) -> None:
    if task.arq_id is not None and task.state == "running":
        conn.execute(
            update(ARQS)
            .where(ARQS.c.id == task.arq_id)
            .values(phase=task.phase, progress=task.progress)
        )
    if task.kind != "program" or task.deployable_id is None:
        return
    values: dict[str, Any] = {"program_phase": task.phase, "program_progress": task.progress}
    if task.state == "done":
        values.update(program_phase=None, program_progress=100, program_error=None)
        values.update(_programmed(task))
        for phase, seconds in (task.result or {}).get("phase_seconds", {}).items():
            if isinstance(seconds, int | float) and phase in PROGRAM_PHASES:
                metrics.PROGRAM_PHASE_SECONDS.labels(phase).observe(max(0.0, seconds))
    elif task.state == "failed":
        values.update(program_phase="failed", program_error=(task.error or "")[:4000])
    conn.execute(update(DEPLOYABLES).where(DEPLOYABLES.c.id == task.deployable_id).values(values))
    if task.state == "done":  # the function changed: the region's traits must follow
        _bump_host(conn, task.hostname)


def _programmed(task: tasks.TaskRecord) -> dict[str, Any]:
    """What a region holds after a program task: the agent's word, else the bitstream's."""
    result, bitstream = task.result or {}, task.params.get("bitstream") or {}
    function = result.get("function_uuid") or bitstream.get("function_uuid")
    folded = function.replace("-", "").lower() if function else None
    return {
        "bitstream_id": result.get("bitstream_id") or bitstream.get("id"),
        **inventory.function_values([folded] if folded else []),
    }


def _bump_host(conn: Connection, hostname: str) -> None:
    conn.execute(
        update(HOSTS).where(HOSTS.c.hostname == hostname).values(generation=HOSTS.c.generation + 1)
    )


def _bind_end(conn: Connection, task: tasks.TaskRecord) -> list[Resolved]:
    if task.arq_id is None:
        return []
    row = conn.execute(_BY_ID, {"arq_id": task.arq_id}).first()
    arq = None if row is None else _record(row)
    if arq is not None and arq.state == "Bound":  # a run-time reprogram ended
        reason = None if task.state == "done" else f"reprogramming failed: {task.error}"
        conn.execute(
            update(ARQS)
            .where(ARQS.c.id == arq.id)
            .values(phase=None, progress=100, failure_reason=reason, updated_at=utcnow())
        )
        return []
    if arq is None or arq.state != "BindStarted":
        return []  # unbound or deleted meanwhile
    if task.state == "failed":
        return _fail(conn, arq.id, f"{task.kind} failed on {task.hostname}: {task.error}")
    remaining = conn.execute(
        select(func.count()).where(
            tasks.TASKS.c.arq_id == arq.id, tasks.TASKS.c.state.in_(tasks.OPEN)
        )
    ).scalar()
    if remaining:
        return []
    _move(conn, arq, "Bound", phase=None, progress=100)
    _refresh_deployable(conn, arq.deployable_id)
    _observe_bind(arq.bind_started_at, "bound")
    LOG.info("Bound %s for instance %s after %s", arq.uuid, arq.instance_uuid, task.kind)
    return [Resolved(arq.instance_uuid or "", arq.uuid, "completed")]


@retry_on_deadlock
def reap(db: Database, timeout: float, now: dt.datetime | None = None) -> list[Resolved]:
    """Fail the binds that outlived ``timeout`` seconds (an agent that never answered)."""
    deadline = (now or utcnow()) - dt.timedelta(seconds=timeout)
    with db.writer() as conn:
        stale = _lock(conn, (ARQS.c.state == "BindStarted") & (ARQS.c.bind_started_at < deadline))
        resolved = [
            r
            for arq in stale
            for r in _fail(
                conn,
                arq.id,
                f"the bind did not finish within {timeout:.0f} s "
                f"(stuck in phase {arq.phase or 'allocate'})",
            )
        ]
    return resolved
