"""``/v2/claims`` (2.12): Acceleron's server-side claims, docs/claims.md.

POST ``{device_profile_name, consumer_uuid[, project_id]}`` -> 201 with the claim: the
API chooses the accelerators with Placement and spec 001's weigher, allocates them for
the consumer (retrying when another consumer wins the capacity), creates and binds the
accelerator requests, and undoes everything if a step fails. GET
``/v2/claims/{consumer}`` follows it (state ``binding`` until the host's agent has
programmed or prepared what it must, then ``bound``); DELETE ends it (``claims.end``):
its requests deleted, its allocation dropped; 409 while its maker or another DELETE is
at work on it; a claim whose actor's lease (``[claims] timeout``) passed is ended by
it, or by the next POST for its consumer.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any

from fastapi import APIRouter, Body
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from acceleron import microversion
from acceleron.api import arqs as arqs_api
from acceleron.api.common import Call, CallDep, json_response, requires, timestamp
from acceleron.api.errors import ERROR_RESPONSES
from acceleron.api.overrides import PROVIDER
from acceleron.api.versions import Link
from acceleron.context import RequestContext
from acceleron.exceptions import Conflict
from acceleron.service import claims
from acceleron.service.placement import PlacementService

router = APIRouter(
    dependency_overrides_provider=PROVIDER,
    prefix="/v2/claims",
    tags=["claims"],
    responses=ERROR_RESPONSES,
    dependencies=[requires(microversion.V2_12, "Claims")],
)


class ClaimCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    device_profile_name: str = Field(max_length=255)
    consumer_uuid: str = Field(max_length=64, description="What the accelerators are for.")
    project_id: str | None = Field(
        None, max_length=255, description="Admins and services: claim for this project."
    )
    hostname: str | None = Field(
        None,
        max_length=255,
        description="From 2.15, admins and services: the host the accelerators must be on "
        "(os_acc on a compute node without a scheduler).",
    )


class Allocation(BaseModel):
    resources: dict[str, int] = Field(description="Resource class -> amount.")


class ClaimOut(BaseModel):
    consumer_uuid: str
    project_id: str
    device_profile_name: str
    state: str = Field(
        description="allocating, binding, bound, failed or releasing (docs/claims.md)."
    )
    hostname: str | None
    failure_reason: str | None
    accelerator_requests: list[arqs_api.ArqOut]
    created_at: str | None
    updated_at: str | None
    links: list[Link]
    allocations: dict[str, Allocation] | None = Field(
        None,
        description="From 2.16: what the claim allocated in Placement, by provider uuid "
        "(null while allocating, and for a claim made before 2.16 existed).",
    )


def view(found: claims.ClaimRecord, call: Call) -> dict[str, Any]:
    consumer, base = found.consumer, call.base_url
    shown: dict[str, Any] = {
        "consumer_uuid": consumer,
        "project_id": found.project_id,
        "device_profile_name": found.device_profile_name,
        "state": found.state,
        "hostname": found.hostname,
        "failure_reason": found.failure_reason,
        "accelerator_requests": [arqs_api.view(a, call.version, base) for a in found.arqs],
        "created_at": timestamp(found.created_at),
        "updated_at": timestamp(found.updated_at),
        "links": [{"href": f"{base}/v2/claims/{consumer}", "rel": "self"}],
    }
    if call.version >= microversion.V2_16:
        held = found.allocations
        shown["allocations"] = (
            None if held is None else {rp: {"resources": r} for rp, r in held.items()}
        )
    return shown


HOSTNAME_RULE = (
    " Naming the host of a claim is for admins and services (os_acc on a compute node), "
    "as forcing a host is in Nova."
)


def _caller(call: Call) -> RequestContext:
    """The caller as the service layer scopes it: every project's claims (and claiming
    for another project) when ``claim:all_projects`` lets it."""
    return call.scoped("claim:all_projects")


def _placement(call: Call) -> PlacementService:
    service = call.placement
    if service is None:
        raise Conflict("Placement is disabled: claims need [placement] mode remote or embedded.")
    return service


@router.post(
    "",
    status_code=201,
    responses={201: {"model": ClaimOut}},
    summary="Claim accelerators for a consumer (2.12)",
)
async def create_claim(body: Annotated[ClaimCreate, Body()], call: CallDep) -> Response:
    call.authorize("claim:create")
    if body.hostname is not None:
        microversion.require(call.version, microversion.V2_15, "A claim's hostname")
        call.authorize("claim:hostname", why=HOSTNAME_RULE)
    placement = _placement(call)
    make = functools.partial(
        claims.make,
        store=call.bitstreams,
        flat_mode=arqs_api.flat_mode_of(call),
        limits=arqs_api.limits_of(call),
        timeout=call.services.conf.claims.timeout,
        options=placement.options,
        trust=call.services.trust,
        policy=call.services.cleaning,
    )
    made = await call.outbound(
        placement.claiming(make),
        call.db,
        placement.claims_client(),
        _caller(call),
        body.device_profile_name,
        body.consumer_uuid,
        body.project_id,
        body.hostname,
    )
    return json_response(view(made, call), 201)


@router.get(
    "/{consumer}", responses={200: {"model": ClaimOut}}, summary="Show a consumer's claim (2.12)"
)
async def show_claim(consumer: str, call: CallDep) -> Response:
    call.authorize("claim:get")
    return json_response(view(await call.run(claims.show, _caller(call), consumer), call))


@router.delete("/{consumer}", status_code=204, summary="Release a consumer's claim (2.12)")
async def delete_claim(consumer: str, call: CallDep) -> Response:
    call.authorize("claim:delete")
    if call.placement is None:  # no claim can exist: 404 before 409
        await call.run(claims.lookup, _caller(call), consumer)
    placement = _placement(call)
    timeout = call.services.conf.claims.timeout
    await call.outbound(
        placement.claiming(claims.end),
        call.db,
        placement.claims_client(),
        _caller(call),
        consumer,
        timeout,
        call.services.cleaning,
    )
    return Response(status_code=204)
