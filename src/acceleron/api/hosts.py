"""``/v2/hosts``: agents report their hosts here; operators see when each last did.

``PUT /v2/hosts/{hostname}/report`` (2.5) takes a full host report (see
``acceleron.report``) and reconciles the inventory with it: sending the same
report again changes nothing. ``PUT /v2/hosts/{hostname}/report/unchanged`` takes
the digest that answer gave instead: the same report, neither sent nor read.
"""

from __future__ import annotations

from typing import Annotated, TypeAlias

from fastapi import APIRouter
from pydantic import BaseModel, Field
from starlette.responses import Response
from typing_extensions import TypedDict

from acceleron import formats, microversion
from acceleron.api import middleware, workers
from acceleron.api.common import Call, CallDep, json_response, requires, timestamp
from acceleron.api.errors import ERROR_RESPONSES
from acceleron.api.overrides import PROVIDER
from acceleron.exceptions import InvalidInput
from acceleron.report import Incoming, check
from acceleron.service import hosts as service
from acceleron.service import inventory

router = APIRouter(
    dependency_overrides_provider=PROVIDER,
    prefix="/v2/hosts",
    tags=["hosts"],
    responses=ERROR_RESPONSES,
    dependencies=[requires(microversion.V2_5, "The hosts API")],
)


class Host_2_5(TypedDict):
    """A reporting host, 2.5 to 2.7."""

    hostname: str
    devices: Annotated[int, Field(description="Devices the host's agent last reported.")]
    agent_version: str | None
    last_report_at: Annotated[str | None, Field(description="When its agent last reported.")]
    generation: Annotated[int, Field(description="Bumped whenever the host's inventory changes.")]
    created_at: str | None
    updated_at: str | None


class Host_2_8(Host_2_5):
    """A reporting host, 2.8 and 2.9: whether Placement shows its latest inventory."""

    placement_synced: Annotated[
        bool | None,
        Field(
            description="Whether Placement shows the host's latest inventory, all of it: "
            "false while a device is left out (see placement_errors) (null: this API "
            "publishes to no Placement)."
        ),
    ]


class Host_2_10(Host_2_8):
    """A reporting host, from 2.10: why its last sync left devices out of Placement."""

    placement_errors: Annotated[
        list[str],
        Field(
            description="Why the last sync left devices out of Placement (an invalid name, "
            "say); empty when it published everything."
        ),
    ]


HostOut: TypeAlias = Host_2_5 | Host_2_8 | Host_2_10


class HostWrapped(TypedDict):
    host: HostOut


class HostList(TypedDict):
    hosts: list[HostOut]


class ReportOutcome(BaseModel):
    hostname: str
    changed: bool = Field(description="False when the report matched the inventory.")
    devices: int
    generation: int
    counts: dict[str, int] = Field(description="Rows added, changed, removed and lost.")
    digest: str = Field(
        description="The report's digest: while the host's inventory is unchanged, its "
        "agent names the report by it (PUT .../report/unchanged) instead of sending it."
    )


class Unchanged(BaseModel):
    digest: str = Field(
        max_length=64, description="The digest the API answered the host's last report with."
    )


class UnchangedOutcome(BaseModel):
    hostname: str
    changed: bool = Field(description="Always false: nothing was written (bar a heartbeat).")
    generation: int
    digest: str


def view(host: service.HostRecord, call: Call) -> HostOut:
    data = Host_2_5(
        hostname=host.hostname,
        devices=host.devices,
        agent_version=host.agent_version,
        last_report_at=timestamp(host.last_report_at),
        generation=host.generation,
        created_at=timestamp(host.created_at),
        updated_at=timestamp(host.updated_at),
    )
    if call.version < microversion.V2_8:
        return data
    placement = call.placement
    publishing = placement is not None and placement.mode != "disabled"
    synced = host.synced_generation >= host.generation and not host.placement_errors
    with_sync = Host_2_8(**data, placement_synced=synced if publishing else None)
    if call.version < microversion.V2_10:
        return with_sync
    return Host_2_10(**with_sync, placement_errors=list(host.placement_errors or []))


@router.get("", responses={200: {"model": HostList}}, summary="List reporting hosts (2.5)")
async def list_hosts(call: CallDep) -> Response:
    call.authorize("host:get")
    hosts = await call.run(service.list_hosts)
    return json_response(HostList(hosts=[view(h, call) for h in hosts]))


@router.get("/{hostname}", responses={200: {"model": HostWrapped}}, summary="Show a host (2.5)")
async def show_host(hostname: str, call: CallDep) -> Response:
    call.authorize("host:get")
    return json_response(HostWrapped(host=view(await call.run(service.get, hostname), call)))


@router.put(
    "/{hostname}/report",
    responses={200: {"model": ReportOutcome}},
    summary="Report a host's whole inventory (agents; 2.5)",
)
async def report_host(hostname: str, report: Incoming, call: CallDep) -> Response:
    call.authorize("host:report")
    formats.check_report(report.version)
    if report.hostname != hostname:
        raise InvalidInput(
            f"The report is for host {report.hostname!r} but was sent to {hostname!r}."
        )
    check(report)
    placement = call.placement
    if placement is not None:
        await call.outbound(placement.check_host, hostname)
    outcome = await call.run(inventory.reconcile, report, None, _task_format(call))
    if outcome.changed:
        workers.wake_sync(call.request.app.state)
    else:
        middleware.routine(call.request)
    return json_response(
        {
            "hostname": outcome.hostname,
            "changed": outcome.changed,
            "devices": outcome.devices,
            "generation": outcome.generation,
            "counts": dict(outcome.counts),
            "digest": outcome.digest,
        },
        headers={formats.HEADER: formats.OURS.header()},
    )


@router.put(
    "/{hostname}/report/unchanged",
    responses={200: {"model": UnchangedOutcome}},
    summary="Say a host's report is unchanged, by its digest (agents; 2.5)",
)
async def report_unchanged(hostname: str, body: Unchanged, call: CallDep) -> Response:
    """What an unchanged report does, without the report: the API answers each report
    with its digest, and the host's agent, having found nothing changed since, sends that
    digest alone. 409 ``acceleron.report_unknown`` when it is not the digest of the host's
    last report here (another came since, or the API forgot it after freeing a lost
    device): the agent then sends the whole report."""
    call.authorize("host:report")
    generation = await call.run(inventory.confirm, hostname, body.digest, _task_format(call))
    middleware.routine(call.request)
    return json_response(
        {"hostname": hostname, "changed": False, "generation": generation, "digest": body.digest},
        headers={formats.HEADER: formats.OURS.header()},
    )


def _task_format(call: Call) -> str | None:
    """The task format this API and the calling agent share (its header says what it
    speaks): what tasks its host may be handed."""
    agent = formats.Formats.parse(call.request.headers.get(formats.HEADER))
    shared = formats.OURS.common(formats.TASK, agent)
    return formats.show(shared) if shared else None
