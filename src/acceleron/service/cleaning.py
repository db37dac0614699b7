"""Cleaning a device between tenants: what one request gives back is cleaned before the
next one gets it.

When a request gives its attach handle back (``give_back``, from
``arqs.free_handle``), its tenancy is recorded (``tenancies``) and the cleaning its
accelerator type calls for (``[cleaning] methods``, or its profile group's
``accel:cleaning``) is chosen: ``none``, ``reset``, ``scrub`` or ``command``. A handle to
clean is not handed out again until it is clean: ``attach_handles.cleaning`` is
``waiting``, then ``cleaning`` while a ``clean`` task of the host's agent is at work,
and ``deployables.cleaning`` counts such handles, which Placement holds reserved.

What is cleaned: a whole device or an FPGA region as one (its other handles wait while
another request still uses it: a region is never cleaned under a workload); a VF, a
MIG slice or a vGPU by itself. An FPGA region that holds its operator's image (found
loaded outside Acceleron, or an admin's program) keeps it; what a tenant loaded goes.
A request given back before its bind touched the device (still queued) needs nothing.

The clean task's end (``finish``): done, the handles may be handed out again; failed
(or not finished within ``[cleaning] timeout``), they stay reserved and the device or
region goes into maintenance with the reason; ending that maintenance cleans them
again (``retry``). A bind that finds only handles being cleaned takes one and waits
for its cleaning (phase ``cleaning``): ``bind_tasks`` binds it, or fails it, when the
cleaning ends. An agent whose task format has no ``clean`` (an older release, during
a rolling upgrade) gets none: its tenancies say the cleaning was skipped, and why.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from oslo_config import cfg
from sqlalchemy import Connection, bindparam, func, select, update

from acceleron import formats, metrics
from acceleron.bitstreams.base import BitstreamStore
from acceleron.bitstreams.model import Query, fold_uuid
from acceleron.conf import CLEANING_METHODS
from acceleron.db.models import AttachHandle, Deployable, Device, Host, table, utcnow
from acceleron.exceptions import ConfigError
from acceleron.mig import units as mig_units
from acceleron.service import programming, provenance, tasks, tenancies
from acceleron.service.tasks import TaskRecord

LOG = logging.getLogger(__name__)
HANDLES, DEPLOYABLES = table(AttachHandle), table(Deployable)
DEVICES, HOSTS = table(Device), table(Host)

METHODS = CLEANING_METHODS  # none, reset, scrub, command
STRENGTH = ("none", "reset", "command", "scrub")  # of several pending, the last one listed
PROFILE_KEY = "accel:cleaning"
WAITING, CLEANING, FAILED = "waiting", "cleaning", "failed"
WHOLE = ("device", "region")  # kinds cleaned as one, whichever handle was given back
# A request whose bind got this far may have left something on the device (fetching
# and checking a bitstream touch nothing of it).
TOUCHING = ("program", "report")
KIND = "clean"


@dataclasses.dataclass(frozen=True)
class Policy:
    """Which cleaning each accelerator type gets (``[cleaning]``)."""

    methods: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: {"GPU": "reset", "VGPU": "none", "MIG": "scrub", "FPGA": "scrub"}
    )
    default: str = "reset"
    # The operator's pre-programmed functions ([bitstreams] trusted_functions, folded): a
    # region found holding them keeps them.
    trusted_functions: frozenset[str] = frozenset()

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> Policy:
        methods = {k.strip().upper(): v.strip() for k, v in conf.cleaning.methods.items()}
        wrong = {k: v for k, v in methods.items() if v not in METHODS}
        if wrong:
            raise ConfigError(
                f"[cleaning] methods: {', '.join(f'{k}:{v}' for k, v in wrong.items())} is "
                f"not a cleaning; each is one of {', '.join(METHODS)}."
            )
        trusted = frozenset(fold_uuid(f) for f in conf.bitstreams.trusted_functions)
        return cls(methods, conf.cleaning.default_method, trusted)

    def method(self, accelerator_type: str, group: Mapping[str, str]) -> str:
        chosen = group.get(PROFILE_KEY)
        if chosen in METHODS:
            return chosen
        return self.methods.get(accelerator_type.upper(), self.default)


DEFAULT = Policy()

# The handle a request holds, with what its cleaning needs to know.
HELD = (
    select(
        HANDLES.c.id,
        HANDLES.c.address,
        HANDLES.c.cleaning,
        HANDLES.c.deployable_id,
        DEPLOYABLES.c.key.label("deployable_key"),
        DEPLOYABLES.c.kind,
        DEPLOYABLES.c.accelerator_type,
        DEPLOYABLES.c.provenance,
        DEPLOYABLES.c.function_uuid,
        DEPLOYABLES.c.function_uuids,
        DEPLOYABLES.c.device_id,
        DEVICES.c.type.label("device_type"),
        DEVICES.c.hostname,
        HOSTS.c.task_format,
    )
    .join(DEPLOYABLES, DEPLOYABLES.c.id == HANDLES.c.deployable_id)
    .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
    .outerjoin(HOSTS, HOSTS.c.hostname == DEVICES.c.hostname)
    .where(HANDLES.c.arq_id == bindparam("arq"))
)


def give_back(conn: Connection, arq: Any, group: Mapping[str, str], policy: Policy) -> None:
    """``arq`` gives its handle back (before ``arqs.free_handle`` frees it): its tenancy
    recorded, and the handle marked to be cleaned unless nothing calls for it."""
    held = conn.execute(HELD, {"arq": arq.id}).first()
    if held is None or held.cleaning is not None:
        return  # none held, or taken while being cleaned: the request never used it
    if arq.state != "Bound" and arq.phase not in TOUCHING:
        return  # its bind never reached the device
    method = _method(held, group, policy)
    why = _skipped(held, method, policy)
    if why is not None:
        tenancies.record(conn, held, arq, method, tenancies.SKIPPED, why)
        return
    tenancies.record(conn, held, arq, method, tenancies.PENDING)
    conn.execute(update(HANDLES).where(HANDLES.c.id == held.id).values(cleaning=WAITING))
    recount_unclean(conn, held.deployable_id, held.hostname)


def _method(held: Any, group: Mapping[str, str], policy: Policy) -> str:
    """The cleaning of what ``held`` gives back. The slot of a GPU partitioned on demand
    is a MIG slice (the ``MIG`` type's cleaning) and is scrubbed rather than reset: a
    reset is the whole GPU's, under its other slices' workloads."""
    if held.kind != mig_units.KIND:
        return policy.method(held.accelerator_type or held.device_type, group)
    method = policy.method("MIG", group)
    return "scrub" if method == "reset" else method


def _skipped(held: Any, method: str, policy: Policy) -> str | None:
    """Why the handle is not cleaned (None: it is)."""
    if method == "none":
        return "the cleaning chosen is none"
    if held.kind == "region" and method == "scrub" and _operators_image(held, policy):
        return "the region holds its operator's image, which stays"
    if not held.task_format:  # it has reported to no API of this release yet (an upgrade)
        return (
            f"the agent of {held.hostname} has not said which tasks it takes (it has not "
            f"reported since the API's upgrade): not cleaned"
        )
    if formats.parse_version(held.task_format, "task format") < (formats.TASK_KINDS[KIND]):
        return (
            f"the agent of {held.hostname} (task format {held.task_format}) does not clean: "
            f"upgrade it"
        )
    return None


def _operators_image(held: Any, policy: Policy) -> bool:
    """Whether the region holds, as far as Acceleron can tell, what its operator loaded
    for every project: an admin's program (or a blank image) it still reports, or
    functions found loaded outside Acceleron that the operator trusts."""
    functions = provenance.held_functions(held)
    record = held.provenance
    if not functions:
        return False
    if record:
        loaded = set(record.get("functions") or ())
        return record.get("project_id") is None and functions <= loaded
    return functions <= policy.trusted_functions


_UNIT = (
    select(
        DEPLOYABLES.c.id,
        DEPLOYABLES.c.key,
        DEPLOYABLES.c.kind,
        DEPLOYABLES.c.accelerator_type,
        DEPLOYABLES.c.region_type,
        DEPLOYABLES.c.device_id,
        DEVICES.c.type.label("device_type"),
        DEVICES.c.hostname,
        DEVICES.c.pci_address,
    )
    .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
    .where(DEPLOYABLES.c.id == bindparam("dep"))
)
_HANDLES_OF = (
    select(HANDLES.c.id, HANDLES.c.address, HANDLES.c.arq_id, HANDLES.c.cleaning)
    .where(HANDLES.c.deployable_id == bindparam("dep"))
    .order_by(HANDLES.c.id)
)


def start(conn: Connection, deployable_id: int | None) -> None:
    """Start cleaning what waits in the deployable (after a handle of it was freed): a
    whole device or region once no request holds any of it, a VF or slice at once."""
    if deployable_id is None:
        return
    handles = list(conn.execute(_HANDLES_OF, {"dep": deployable_id}))
    if not any(h.cleaning == WAITING for h in handles):
        return
    unit = conn.execute(_UNIT, {"dep": deployable_id}).one()
    if unit.kind in WHOLE:
        if any(h.arq_id is not None and h.cleaning is None for h in handles):
            return  # still used: cleaned once the last request gives it back
        targets = [h for h in handles if h.cleaning == WAITING or h.cleaning is None]
    else:
        targets = [h for h in handles if h.cleaning == WAITING]
    _queue(conn, unit, targets, tenancies.pending_methods(conn, deployable_id))


def _queue(conn: Connection, unit: Any, targets: Sequence[Any], methods: set[str]) -> str:
    method = max(methods or {"reset"}, key=STRENGTH.index)
    addresses = [h.address for h in targets]
    params = {
        "method": method,
        "pci_address": unit.pci_address,
        "deployable": unit.key,
        "kind": unit.kind,
        "handles": addresses,
        "accelerator_type": unit.accelerator_type or unit.device_type,
        "region_type": unit.region_type,
    }
    task = tasks.create(
        conn, hostname=unit.hostname, kind=KIND, params=params, deployable_id=unit.id
    )
    ids = [h.id for h in targets]
    conn.execute(update(HANDLES).where(HANDLES.c.id.in_(ids)).values(cleaning=CLEANING))
    tenancies.started(conn, unit.id, addresses, task)
    recount_unclean(conn, unit.id, unit.hostname)
    LOG.info(
        "Cleaning %s %s (%s) of %s: %s",
        unit.pci_address,
        unit.key,
        method,
        unit.hostname,
        ", ".join(addresses),
    )
    return task


_COUNT = (
    update(DEPLOYABLES)
    .where(DEPLOYABLES.c.id == bindparam("dep"))
    .values(
        cleaning=select(func.count())
        .where(HANDLES.c.deployable_id == DEPLOYABLES.c.id, HANDLES.c.cleaning.is_not(None))
        .scalar_subquery()
    )
)


def recount_unclean(conn: Connection, deployable_id: int, hostname: str) -> None:
    """The deployable's count of handles not clean, and its host's providers to follow."""
    conn.execute(_COUNT, {"dep": deployable_id})
    conn.execute(
        update(HOSTS).where(HOSTS.c.hostname == hostname).values(generation=HOSTS.c.generation + 1)
    )


@dataclasses.dataclass(frozen=True)
class Outcome:
    """A cleaning's end: whether it went well, and the requests that waited for it."""

    clean: bool
    waiting: tuple[int, ...]
    reason: str


def finish(conn: Connection, task: TaskRecord) -> Outcome:
    """A clean task ended (done or failed): its handles handed out again, or kept
    reserved with their device or region in maintenance."""
    params = task.params
    addresses = list(params.get("handles") or ())
    rows = [
        h
        for h in conn.execute(_HANDLES_OF, {"dep": task.deployable_id})
        if h.address in addresses and h.cleaning == CLEANING
    ]
    unit = conn.execute(_UNIT, {"dep": task.deployable_id}).first()
    seconds = _seconds(task)
    clean = task.state == "done"
    reason = "" if clean else f"cleaning ({params.get('method')}) failed: {task.error}"
    if rows:
        ids = [h.id for h in rows]
        state = None if clean else FAILED
        conn.execute(update(HANDLES).where(HANDLES.c.id.in_(ids)).values(cleaning=state))
    if unit is not None:
        if clean:
            _cleaned_region(conn, unit, params, task.result or {})
        else:
            _maintain(conn, unit, reason)
        recount_unclean(conn, unit.id, unit.hostname)
    tenancies.cleaned(
        conn,
        task.uuid,
        tenancies.DONE if clean else tenancies.FAILED,
        seconds,
        None if clean else task.error,
    )
    method = str(params.get("method"))
    metrics.CLEANING_SECONDS.labels(method, "done" if clean else "failed").observe(seconds)
    (LOG.info if clean else LOG.warning)(
        "Cleaning of %s %s on %s %s in %.1f s%s",
        params.get("pci_address"),
        params.get("deployable"),
        task.hostname,
        "ended" if clean else "failed",
        seconds,
        "" if clean else f": {task.error}",
    )
    return Outcome(clean, tuple(h.arq_id for h in rows if h.arq_id is not None), reason)


def _seconds(task: TaskRecord) -> float:
    if task.created_at is None:
        return 0.0
    return max(0.0, (utcnow() - task.created_at).total_seconds())


def _cleaned_region(
    conn: Connection, unit: Any, params: Mapping[str, Any], result: Mapping[str, Any]
) -> None:
    """A scrubbed region holds its blank image now (or nothing): not the tenant's."""
    if unit.kind != "region" or params.get("method") != "scrub":
        return
    from acceleron.service import inventory  # it imports arqs' world, which imports this

    functions = [str(f).replace("-", "").lower() for f in result.get("functions") or ()]
    blank = result.get("bitstream_id")
    record = None
    if blank:
        record = provenance.loaded(
            {"bitstream": {"id": blank}, "project_id": None}, result, functions
        )
    conn.execute(
        update(DEPLOYABLES)
        .where(DEPLOYABLES.c.id == unit.id)
        .values(provenance=record, bitstream_id=blank, **inventory.function_values(functions))
    )


def _maintain(conn: Connection, unit: Any, reason: str) -> None:
    """Maintenance for what failed to clean: the device for a whole one, else the
    deployable (either way its inventory reserved); the time kept if it was already."""
    rows, target = (DEVICES, unit.device_id) if unit.kind == "device" else (DEPLOYABLES, unit.id)
    conn.execute(
        update(rows)
        .where(rows.c.id == target, rows.c.status != "maintaining")
        .values(status="maintaining", maintenance_since=utcnow())
    )
    conn.execute(update(rows).where(rows.c.id == target).values(maintenance_reason=reason[:255]))
    LOG.warning(
        "%s %s of %s put in maintenance: %s", unit.pci_address, unit.key, unit.hostname, reason
    )


def retry(conn: Connection, deployable_ids: Sequence[int]) -> None:
    """Maintenance ended: what failed to clean there is cleaned again."""
    for dep in deployable_ids:
        failed = [h for h in conn.execute(_HANDLES_OF, {"dep": dep}) if h.cleaning == FAILED]
        if not failed:
            continue
        unit = conn.execute(_UNIT, {"dep": dep}).one()
        before = tenancies.failed(conn, dep, [h.address for h in failed])
        task = _queue(conn, unit, failed, {method for _, method in before})
        for old, _ in before:
            tenancies.retried(conn, old, task)


_STALE = select(tasks.TASKS.c.uuid).where(
    tasks.TASKS.c.kind == KIND, tasks.IS_OPEN, tasks.TASKS.c.created_at < bindparam("before")
)


def stale(conn: Connection, timeout: float, now: dt.datetime | None = None) -> list[str]:
    """Clean tasks open for longer than ``timeout`` seconds (their agent gone, say)."""
    before = (now or utcnow()) - dt.timedelta(seconds=timeout)
    return list(conn.execute(_STALE, {"before": before}).scalars())


def holds_up(conn: Connection, arq_id: int) -> bool:
    """Whether the handle the request took is still being cleaned (its bind waits)."""
    found = conn.scalar(select(HANDLES.c.cleaning).where(HANDLES.c.arq_id == arq_id))
    return found is not None


def blank_for(store: BitstreamStore, name: str, region_type: str) -> dict[str, Any] | None:
    """What the agent needs to load a region type's blank image: the newest public
    bitstream named ``name`` built for it; None when there is none."""
    found = store.find(Query(name=name, region_type_uuid=region_type, project=""))
    if not found:
        return None
    newest = max(found, key=lambda b: (b.created_at or dt.datetime.min, b.id))
    return programming.bitstream_params(newest)
