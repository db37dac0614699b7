"""The agent tasks of a bound or binding request: their progress and end
(``finish_task``: the last task's end binds the request, a failed one fails it), the
reaper of binds whose agent never answered (``reap``), and run-time reprogramming of a
Bound request's region (``reprogram``: a program task of its own).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, func, select, update

from acceleron import metrics
from acceleron.bitstreams.base import BitstreamStore
from acceleron.context import RequestContext
from acceleron.db.models import AcceleratorRequest, AttachHandle, Deployable, Host, table, utcnow
from acceleron.db.session import Database, retry_on_deadlock
from acceleron.exceptions import Conflict, InUse, InvalidInput
from acceleron.service import arqs, binding, cleaning, inventory, programming, provenance, tasks

LOG = logging.getLogger(__name__)
ARQS, DEPLOYABLES, HOSTS = table(AcceleratorRequest), table(Deployable), table(Host)
HANDLES = table(AttachHandle)
PROGRAM_PHASES = ("fetch", "verify", "program")  # what an agent's program task reports


@retry_on_deadlock
def reprogram(
    db: Database,
    context: RequestContext,
    uuid: str,
    selector: Mapping[str, str],
    store: BitstreamStore,
) -> arqs.ArqRecord:
    """Load another bitstream into the region of a Bound request, for its project
    (spec 001: an instance may ask for bitstreams at run time). The bitstream must be
    one that project sees, and no other request may hold the region. The request."""
    wanted = arqs.check_uuids([uuid])[0]
    with db.reader() as conn:
        arq = arqs.visible_arqs(conn, context, [wanted])[wanted]
        if arq.state != "Bound" or arq.deployable_id is None:
            raise Conflict(
                f"Accelerator request {wanted} is {arq.state}: only a Bound one "
                f"can have its region reprogrammed."
            )
        region = conn.execute(programming.REGION.where(DEPLOYABLES.c.id == arq.deployable_id)).one()
    programming.check_programmable(region)
    accel = {f"accel:{k}": v for k, v in selector.items()}
    bitstream = store.for_request(accel, region.region_type, arq.project_id or "")
    if bitstream is None:
        raise InvalidInput(f"Name the bitstream: one of {', '.join(binding.SELECTORS)}.")
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
        found = arqs.ArqRecord._make(conn.execute(arqs.VIEW.where(ARQS.c.id == arq.id)).one())
    LOG.info("Reprogramming %s for %s with %s", region.name, wanted, bitstream.describe())
    return found


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
    policy: cleaning.Policy = cleaning.DEFAULT,
) -> tuple[tasks.TaskRecord, list[arqs.Resolved]]:
    """An agent's word on a task: progress shown on the ARQ and the deployable; its end
    binds the ARQ (when it was the last task) or fails it (its handle cleaned as
    ``policy`` says); a clean task's end binds or fails the requests that waited for it.
    The task after, and what ended."""
    tasks.check_progress(state, phase, progress)
    with db.writer() as conn:
        before = tasks.lock(conn, uuid)
        task = tasks.record(
            conn, before, state=state, phase=phase, progress=progress, result=result, error=error
        )
        if before.state in tasks.FINISHED:  # the agent said it again: done already
            return task, []
        _mirror_progress(conn, task)
        if task.state not in ("done", "failed"):
            return task, []
        if task.kind == cleaning.KIND:
            return task, _cleaning_end(conn, cleaning.finish(conn, task), policy)
        return task, _bind_end(conn, task, policy)


def _cleaning_end(
    conn: Connection, outcome: cleaning.Outcome, policy: cleaning.Policy
) -> list[arqs.Resolved]:
    """The binds that waited for a cleaning go on (bound, when nothing else is left to
    do) or fail with it."""
    resolved: list[arqs.Resolved] = []
    for arq_id in outcome.waiting:
        arq = arqs.ArqRecord._make(conn.execute(arqs.BY_ID, {"arq_id": arq_id}).one())
        if arq.state != "BindStarted":
            continue
        if not outcome.clean:
            resolved += binding.fail(conn, arq.id, f"the accelerator's {outcome.reason}", policy)
        elif _open_tasks(conn, arq.id):
            conn.execute(update(ARQS).where(ARQS.c.id == arq.id).values(phase="queued"))
        else:
            resolved += _bound(conn, arq, "cleaning")
    return resolved


def _open_tasks(conn: Connection, arq_id: int) -> int:
    return int(
        conn.execute(
            select(func.count()).where(
                tasks.TASKS.c.arq_id == arq_id, tasks.TASKS.c.state.in_(tasks.OPEN)
            )
        ).scalar()
        or 0
    )


def _bound(conn: Connection, arq: arqs.ArqRecord, after: str) -> list[arqs.Resolved]:
    arqs.move(conn, arq, "Bound", phase=None, progress=100)
    arqs.refresh_deployable(conn, arq.deployable_id)
    binding.observe_bind(arq.bind_started_at, "bound")
    LOG.info("Bound %s for instance %s after %s", arq.uuid, arq.instance_uuid, after)
    return [arqs.Resolved(arq.instance_uuid or "", arq.uuid, "completed")]


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
    """What a region holds after a program task: the agent's word, else the bitstream's;
    and where it came from (``provenance``)."""
    result, bitstream = task.result or {}, task.params.get("bitstream") or {}
    functions = [f for f in result.get("functions") or () if isinstance(f, str)]
    function = result.get("function_uuid") or bitstream.get("function_uuid")
    if function and not functions:
        functions = [function]
    folded = [f.replace("-", "").lower() for f in functions]
    return {
        "bitstream_id": result.get("bitstream_id") or bitstream.get("id"),
        "provenance": provenance.loaded(task.params, result, folded),
        **inventory.function_values(folded),
    }


def _bump_host(conn: Connection, hostname: str) -> None:
    conn.execute(
        update(HOSTS).where(HOSTS.c.hostname == hostname).values(generation=HOSTS.c.generation + 1)
    )


def _bind_end(
    conn: Connection, task: tasks.TaskRecord, policy: cleaning.Policy
) -> list[arqs.Resolved]:
    if task.arq_id is None:
        return []
    row = conn.execute(arqs.BY_ID, {"arq_id": task.arq_id}).first()
    arq = None if row is None else arqs.ArqRecord._make(row)
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
        reason = f"{task.kind} failed on {task.hostname}: {task.error}"
        return binding.fail(conn, arq.id, reason, policy)
    if task.kind == "make_mig":
        _made(conn, arq.id, task.result or {})
    if _open_tasks(conn, arq.id) or cleaning.holds_up(conn, arq.id):
        return []
    return _bound(conn, arq, task.kind)


def _made(conn: Connection, arq_id: int, result: Mapping[str, Any]) -> None:
    """The MIG instance the agent made for a request: its slot handle's info says which
    (its uuid, profile and start), as the workload is given it, before the host's next
    report says so too."""
    made = {k: str(v) for k, v in (result.get("instance") or {}).items()}
    if not made:
        return
    handle = conn.execute(select(HANDLES).where(HANDLES.c.arq_id == arq_id)).first()
    if handle is not None:
        conn.execute(
            update(HANDLES)
            .where(HANDLES.c.id == handle.id)
            .values(attach_info={**(handle.attach_info or {}), **made}, updated_at=utcnow())
        )


@retry_on_deadlock
def reap(
    db: Database,
    timeout: float,
    now: dt.datetime | None = None,
    policy: cleaning.Policy = cleaning.DEFAULT,
    cleaning_timeout: float | None = None,
) -> list[arqs.Resolved]:
    """Fail the binds that outlived ``timeout`` seconds (an agent that never answered),
    and the cleanings that outlived ``cleaning_timeout``."""
    resolved = (
        [] if cleaning_timeout is None else _reap_cleanings(db, cleaning_timeout, now, policy)
    )
    deadline = (now or utcnow()) - dt.timedelta(seconds=timeout)
    with db.writer() as conn:
        stale = arqs.lock(
            conn, (ARQS.c.state == "BindStarted") & (ARQS.c.bind_started_at < deadline)
        )
        resolved += [
            r
            for arq in stale
            for r in binding.fail(
                conn,
                arq.id,
                f"the bind did not finish within {timeout:.0f} s "
                f"(stuck in phase {arq.phase or 'allocate'})",
                policy,
            )
        ]
    return resolved


def _reap_cleanings(
    db: Database, timeout: float, now: dt.datetime | None, policy: cleaning.Policy
) -> list[arqs.Resolved]:
    """Cleanings not finished within ``timeout`` seconds fail: reserved, in maintenance."""
    with db.reader() as conn:
        stale = cleaning.stale(conn, timeout, now)
    resolved: list[arqs.Resolved] = []
    for uuid in stale:
        error = f"the cleaning did not finish within {timeout:.0f} s ([cleaning] timeout)"
        try:
            resolved += finish_task(db, uuid, state="failed", error=error, policy=policy)[1]
        except Conflict:  # it ended meanwhile
            continue
    return resolved
