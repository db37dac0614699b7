"""Agent tasks (2.8): how a host's agent gets its work and reports on it.

``POST /v2/hosts/{host}/tasks/claim?wait=N`` hands the agent its unfinished tasks
(waiting up to N seconds for one to appear); ``PUT /v2/tasks/{uuid}`` reports
phase, progress and the end (``done`` with a result, ``failed`` with an error).
The end of a task binds or fails its accelerator request, and Nova is told.

The task format has a version (``acceleron.formats``): a claim hands the agent only
the kinds of task its ``Acceleron-Agent-Formats`` header says it reads, and refuses
(409 ``acceleron.unsupported_format``) an agent that reads no major of the task format
this API writes. The answers carry the formats this API speaks in the same header.
Fields of a task report this API does not know (a newer agent's) are ignored.
"""

from __future__ import annotations

import logging
import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Query
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response
from typing_extensions import TypedDict

from acceleron import formats, microversion
from acceleron.api import middleware, wakeup, workers
from acceleron.api.common import Call, CallDep, json_response, requires, timestamp
from acceleron.api.errors import ERROR_RESPONSES
from acceleron.api.overrides import PROVIDER
from acceleron.exceptions import AcceleronError
from acceleron.failfast import FailFast
from acceleron.service import bind_tasks, cleaning, tasks

LOG = logging.getLogger(__name__)
router = APIRouter(
    dependency_overrides_provider=PROVIDER,
    tags=["tasks"],
    responses=ERROR_RESPONSES,
    dependencies=[requires(microversion.V2_8, "Agent tasks")],
)


def formats_header() -> dict[str, str]:
    return {formats.HEADER: formats.OURS.header()}


class Task_2_8(TypedDict):
    """A task, from 2.8."""

    uuid: str
    hostname: str
    kind: Annotated[
        str, Field(description="program, create_mdev, remove_mdev, clean, make_mig or destroy_mig")
    ]
    state: Annotated[str, Field(description="pending, running, done, failed or cancelled")]
    phase: str | None
    progress: int | None
    params: dict[str, Any]
    result: dict[str, Any] | None
    error: str | None
    attempts: int
    created_at: str | None
    updated_at: str | None


class TaskList(TypedDict):
    tasks: list[Task_2_8]


class TaskReport(BaseModel):
    # A newer agent's fields (a later minor task format) are ignored.
    model_config = ConfigDict(extra="ignore")

    state: Literal["running", "done", "failed"]
    phase: str | None = Field(None, max_length=32)
    progress: int | None = Field(None, ge=0, le=100)
    result: Annotated[dict[str, Any], FailFast] | None = None
    error: str | None = Field(None, max_length=4000)


def view(task: tasks.TaskRecord) -> Task_2_8:
    return Task_2_8(
        uuid=task.uuid,
        hostname=task.hostname,
        kind=task.kind,
        state=task.state,
        phase=task.phase,
        progress=task.progress,
        params=task.params,
        result=task.result,
        error=task.error,
        attempts=task.attempts,
        created_at=timestamp(task.created_at),
        updated_at=timestamp(task.updated_at),
    )


@router.post(
    "/v2/hosts/{hostname}/tasks/claim",
    responses={200: {"model": TaskList}},
    summary="Take this host's unfinished tasks (agents; 2.8)",
)
async def claim_tasks(
    hostname: str,
    call: CallDep,
    wait: Annotated[float, Query(ge=0, le=60, description="Seconds to wait for work.")] = 0,
) -> Response:
    call.authorize("task:claim")
    agent = formats.Formats.parse(call.request.headers.get(formats.HEADER))
    formats.check_tasks(agent)
    kinds = formats.task_kinds(agent)
    deadline = time.monotonic() + wait
    waker, stopping = call.services.task_wakeup, call.services.stopping
    found: list[tasks.TaskRecord] = []
    with waker.waiting(hostname) as woken:  # a task queued from now on wakes this poll
        while True:
            woken.clear()
            found = await call.run(tasks.claim, hostname, kinds)
            left = deadline - time.monotonic()
            if found or left <= 0 or stopping.is_set():
                break
            interval = waker.interval
            woke = await wakeup.sleep(woken, left if interval is None else min(left, interval))
            if interval is None and not woke:  # nothing queued: the agent's next poll looks
                break
    if not found:
        middleware.routine(call.request)
    ready = [t for t in [await _with_blank(call, t) for t in found] if t]
    return json_response({"tasks": [view(t) for t in ready]}, headers=formats_header())


async def _with_blank(call: Call, task: tasks.TaskRecord) -> tasks.TaskRecord | None:
    """A region's scrub with its blank image (``cleaning.blank_for``), looked up as the
    agent takes it, outside any transaction; None when the store cannot say now (the
    task, running, comes back with the next claim)."""
    params = task.params
    if (
        task.kind != cleaning.KIND
        or params.get("method") != "scrub"
        or not params.get("region_type")
    ):
        return task
    name = call.services.conf.cleaning.blank_bitstream_name
    try:
        blank = await call.outbound(
            cleaning.blank_for, call.bitstreams, name, params["region_type"]
        )
    except AcceleronError as error:
        LOG.warning("Blank image for task %s not looked up: %s", task.uuid, error.message)
        return None
    return task if blank is None else task._replace(params={**params, "blank": blank})


@router.get("/v2/tasks/{uuid}", responses={200: {"model": Task_2_8}}, summary="Show a task (2.8)")
async def show_task(uuid: str, call: CallDep) -> Response:
    call.authorize("task:get")
    return json_response(view(await call.run(tasks.get, uuid)))


@router.put(
    "/v2/tasks/{uuid}",
    responses={200: {"model": Task_2_8}},
    summary="Report a task's progress or end (agents; 2.8)",
)
async def report_task(uuid: str, body: Annotated[TaskReport, Body()], call: CallDep) -> Response:
    call.authorize("task:update")
    task, resolved = await call.run(
        lambda db: bind_tasks.finish_task(
            db,
            uuid,
            state=body.state,
            phase=body.phase,
            progress=body.progress,
            result=body.result,
            error=body.error,
            policy=call.services.cleaning,
        )
    )
    call.services.nova.notify(resolved)
    if (task.kind == "program" and task.state == "done") or (
        task.kind == cleaning.KIND and task.state in ("done", "failed")
    ):  # the region's function traits change; a cleaning's reserved units go, or stay
        workers.wake_sync(call.request.app.state)
    return json_response(view(task), headers=formats_header())
