"""Binding accelerator requests to devices (Nova's PATCH, and a claim's bind): all the
requests of one bind in one transaction. Binding an ARQ:

* takes one free attach handle of the deployable behind the chosen resource
  provider with a conditional update (``arq_id IS NULL``); the unique
  ``attach_handles.arq_id`` makes a double allocation impossible on every backend;
* claims the instance in ``instance_bindings`` (unique): a second, racing bind
  of the same instance fails in the database, not in a Python check;
* ends ``Bound`` at once, or ``BindStarted`` with a task for the host's agent
  when a region must be programmed or an mdev made; the task's end binds or
  fails it (``bind_tasks.finish_task``), and ``bind_tasks.reap`` fails what outlives
  ``bind_timeout``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Row, bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError

from acceleron import metrics
from acceleron.bitstreams.base import BitstreamStore
from acceleron.bitstreams.model import Bitstream, fold_uuid
from acceleron.context import RequestContext
from acceleron.db.models import (
    AcceleratorRequest,
    AttachHandle,
    Deployable,
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
    NotFound,
    Unhealthy,
)
from acceleron.placement import names, tree
from acceleron.service import arqs, fitting, flat, programming, quotas, tasks

LOG = logging.getLogger(__name__)
ARQS, HANDLES = table(AcceleratorRequest), table(AttachHandle)
DEPLOYABLES, BINDINGS = table(Deployable), table(InstanceBinding)
SELECTORS = ("bitstream_id", "bitstream_name", "function_id", "function_name")

_DEPLOYABLE = programming.REGION.where(DEPLOYABLES.c.rp_uuid == bindparam("rp")).order_by(
    DEPLOYABLES.c.id
)
_FREE_HANDLES = (
    select(*(HANDLES.c[f] for f in arqs.Handle._fields))
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
) -> list[_Prepared]:
    """Everything a bind needs that is read (and looked up in the bitstream store, and
    the limits of its projects) before it writes."""
    uuids = arqs.check_uuids([b.arq_uuid for b in bindings])
    requests = arqs.visible_arqs(conn, context, uuids)
    group_of = {b.arq_uuid: arqs.profile_group(requests[b.arq_uuid]) for b in bindings}
    deployables = {
        b.arq_uuid: _deployables_for(
            conn, b.device_rp_uuid, b.hostname, group_of[b.arq_uuid], flat_mode
        )
        for b in bindings
    }
    prepared = []
    for b in bindings:
        arq = requests[b.arq_uuid]
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
) -> list[arqs.Resolved]:
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


def _allocate(conn: Connection, arq_id: int, deployable_id: int) -> arqs.Handle | None:
    """Take one free attach handle: the first free one, with a conditional update, so
    of two binds racing for a handle one gets it and the other reads the next."""
    while True:
        row = conn.execute(_FREE_HANDLES, {"deployable": deployable_id}).first()
        if row is None:
            return None
        taken = conn.execute(_TAKE, {"handle": row.id, "arq": arq_id, "now": utcnow()})
        if taken.rowcount == 1:
            return arqs.Handle._make(row)


def _take(
    conn: Connection, arq_id: int, choices: Sequence[tuple[Row[Any], Bitstream | None]]
) -> tuple[Row[Any], Bitstream | None, arqs.Handle | None]:
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


def _bind_one(conn: Connection, p: _Prepared) -> list[arqs.Resolved]:
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
    if _queue_work(conn, arq.id, b.hostname, dep, handle, program):
        arqs.move(conn, arq, "BindStarted", **{**values, "phase": "queued"})
        arqs.refresh_deployable(conn, dep.id)
        return []
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
) -> bool:
    """Tasks the host's agent must finish before the bind ends; whether there are any."""
    if program is not None:
        programming.queue(conn, dep, program, arq_id)
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


def observe_bind(started: dt.datetime | None, outcome: str) -> None:
    if started is not None:
        seconds = max(0.0, (utcnow() - started).total_seconds())
        metrics.BIND_SECONDS.labels(outcome).observe(seconds)


def fail(conn: Connection, arq_id: int, reason: str) -> list[arqs.Resolved]:
    """End a bind in BindFailed, its handle freed and its tasks cancelled."""
    arq = arqs.ArqRecord._make(conn.execute(arqs.BY_ID, {"arq_id": arq_id}).one())
    programming.cancel_for_arq(conn, arq.id)
    arqs.free_handle(conn, arq.id)
    arqs.move(conn, arq, "BindFailed", phase=None, failure_reason=reason[:4000])
    arqs.refresh_deployable(conn, arq.deployable_id)
    observe_bind(arq.bind_started_at, "failed")
    LOG.warning("Bind of %s failed: %s", arq.uuid, reason)
    return [arqs.Resolved(arq.instance_uuid or "", arq.uuid, "failed")]
