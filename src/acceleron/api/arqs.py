"""``/v2/accelerator_requests``: what Nova (and os-acc) call to get accelerators.

The shapes Nova's client expects, request by request (docs/design/nova-contract.md):

* POST ``{device_profile_name}`` -> 201 ``{"arqs": [...]}``, one ARQ per accelerator,
  ``device_profile_group_id`` the index of its group in the profile;
* PATCH ``{arq_uuid: [{"op": "add", "path": "/hostname", "value": ...}, ...]}`` binds
  (``remove`` operations unbind) -> 202; the same on ``/{uuid}`` for one request (what
  openstacksdk, the openstack CLI and python-cyborgclient send);
* GET ``?instance=&bind_state=resolved`` -> 423 while any of them is being bound;
* DELETE ``?arqs=u1,u2`` or ``?instance=U`` (idempotent) -> 204.

Binding, and unbinding or deleting a bound ARQ, needs ``arq:bind`` (in keystone mode
the compute service's token beside the user's); a caller reaches every project's ARQs
when ``arq:get_all_projects`` lets it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Annotated, Any, Literal, TypeAlias

from fastapi import APIRouter, Body, Query
from pydantic import BaseModel, ConfigDict, Field, RootModel
from starlette.responses import Response
from typing_extensions import TypedDict

from acceleron import microversion, uuids
from acceleron.api import workers
from acceleron.api.common import (
    Call,
    CallDep,
    json_response,
    requires,
    split_list,
    timestamp,
)
from acceleron.api.errors import ERROR_RESPONSES
from acceleron.api.overrides import PROVIDER
from acceleron.api.versions import Link
from acceleron.context import RequestContext
from acceleron.exceptions import InvalidInput
from acceleron.failfast import FailFast
from acceleron.placement import tree
from acceleron.service import arqs as service
from acceleron.service import bind_tasks, binding, quotas

router = APIRouter(
    dependency_overrides_provider=PROVIDER,
    prefix="/v2/accelerator_requests",
    tags=["accelerator requests"],
    responses=ERROR_RESPONSES,
)
BIND_FIELDS = ("hostname", "device_rp_uuid", "instance_uuid")


class ArqCreate(BaseModel):
    device_profile_name: str = Field(max_length=255)
    # Sent by openstacksdk and ignored, as the older service ignores them.
    device_profile_group_id: int | None = None
    image_uuid: str | None = None


class PatchOp(BaseModel):
    op: Literal["add", "remove"]
    path: Literal["/hostname", "/device_rp_uuid", "/instance_uuid", "/project_id"]
    value: str | None = Field(None, max_length=255)


PatchOps = Annotated[list[PatchOp], FailFast]


class ArqPatch(RootModel[Annotated[dict[str, PatchOps], FailFast]]):
    """Each accelerator request's uuid, and the operations that bind or unbind it."""


class Arq_2_0(TypedDict):  # named after its microversion
    """An accelerator request, 2.0 to 2.7."""

    uuid: str
    state: str
    device_profile_name: str
    device_profile_group_id: int
    hostname: str | None
    device_rp_uuid: str | None
    instance_uuid: str | None
    project_id: str | None
    attach_handle_type: Annotated[
        str | None, Field(description="PCI, MDEV, MIG or TEST_PCI, once Bound.")
    ]
    attach_handle_uuid: str | None
    attach_handle_info: Annotated[
        dict[str, str] | None,
        Field(
            description="Once Bound: domain, bus, device, function (and asked_type, vgpu_mark "
            "for MDEV; gpu_uuid, mig_uuid for MIG)."
        ),
    ]
    created_at: str | None
    updated_at: str | None
    links: list[Link]


class Arq_2_8(Arq_2_0):
    """An accelerator request, 2.8 to 2.10: the bind's phase and progress."""

    phase: Annotated[str | None, Field(description="The bind's current phase.")]
    progress: Annotated[int | None, Field(description="Percent of that phase done.")]
    failure_reason: Annotated[str | None, Field(description="Why the bind failed.")]


class Arq_2_11(Arq_2_8):
    """An accelerator request, 2.11 and 2.12: where its accelerator is attached."""

    attach_target: Annotated[
        str,
        Field(
            description="Where the accelerator is attached, from its group's "
            "accel:attach_target: VM (the default), host or none. Before 2.11 a request "
            "whose target is not VM shows no attach handle."
        ),
    ]


class Arq_2_13(Arq_2_11):
    """An accelerator request, from 2.13: the health of what it is bound to."""

    health: Annotated[
        dict[str, Any] | None,
        Field(
            description="The health ({state, reason}) of the deployable and device a bound "
            "request holds; the request stays Bound when they fail, this shows it."
        ),
    ]


ArqOut: TypeAlias = Arq_2_0 | Arq_2_8 | Arq_2_11 | Arq_2_13


class ArqList(TypedDict):
    arqs: list[ArqOut]


def view(arq: service.ArqRecord, version: microversion.Version, base: str) -> ArqOut:
    target = service.attach_target(arq)
    # Before 2.11 a client cannot tell where a handle goes, and Nova attaches every PCI
    # or MDEV handle it sees to the instance: show none for the host's or nobody's.
    bound = arq.state == "Bound" and (target == "VM" or version >= microversion.V2_11)
    data = Arq_2_0(
        uuid=arq.uuid,
        state=arq.state,
        device_profile_name=arq.device_profile_name,
        device_profile_group_id=arq.device_profile_group_id,
        hostname=arq.hostname,
        device_rp_uuid=arq.device_rp_uuid,
        instance_uuid=arq.instance_uuid,
        project_id=arq.project_id,
        attach_handle_type=arq.attach_handle_type if bound else None,
        attach_handle_uuid=_handle_uuid(arq) if bound else None,
        attach_handle_info=_info(arq) if bound else None,
        created_at=timestamp(arq.created_at),
        updated_at=timestamp(arq.updated_at),
        links=[Link(href=f"{base}/v2/accelerator_requests/{arq.uuid}", rel="self")],
    )
    if version < microversion.V2_8:
        return data
    with_phase = Arq_2_8(
        **data, phase=arq.phase, progress=arq.progress, failure_reason=arq.failure_reason
    )
    if version < microversion.V2_11:
        return with_phase
    with_target = Arq_2_11(**with_phase, attach_target=target)
    if version < microversion.V2_13:
        return with_target
    return Arq_2_13(**with_target, health=service.health_of(arq))


def _handle_uuid(arq: service.ArqRecord) -> str | None:
    """For an mdev, the mdev's own uuid: Nova's libvirt driver attaches the mdev by it."""
    if arq.attach_handle_type == "MDEV":
        return arq.attach_handle_address
    return arq.attach_handle_uuid


def _info(arq: service.ArqRecord) -> dict[str, str]:
    return {k: str(v) for k, v in (arq.attach_handle_info or {}).items() if v is not None}


def _caller(call: Call) -> RequestContext:
    """The caller as the service layer scopes it: every project's requests when
    ``arq:get_all_projects`` lets it, its own project's otherwise."""
    return call.scoped("arq:get_all_projects")


def _binds(call: Call) -> bool:
    """Whether the caller may bind, or change bound ARQs (``arq:bind``: a member may
    not claim an instance uuid, perhaps another project's, for itself)."""
    return call.allows("arq:bind")


def limits_of(call: Call) -> quotas.Limits:
    return call.services.limits


def _notify(call: Call, resolved: Sequence[service.Resolved]) -> None:
    call.services.nova.notify(resolved)


@router.post(
    "",
    status_code=201,
    responses={201: {"model": ArqList}},
    summary="Create accelerator requests from a device profile",
)
async def create_arqs(body: Annotated[ArqCreate, Body()], call: CallDep) -> Response:
    call.authorize("arq:create")
    limits = limits_of(call)
    created = await call.run_counted(service.create, call.context, body.device_profile_name, limits)
    base = call.base_url
    return json_response(ArqList(arqs=[view(a, call.version, base) for a in created]), 201)


@router.get("", responses={200: {"model": ArqList}}, summary="List accelerator requests")
async def list_arqs(
    call: CallDep,
    instance: Annotated[str | None, Query(description="Only this instance's.")] = None,
    bind_state: Annotated[
        str | None, Query(description="'resolved': 423 while any is still being bound.")
    ] = None,
) -> Response:
    call.authorize("arq:get_all")
    if bind_state not in (None, "resolved"):
        raise InvalidInput(f"bind_state: only 'resolved' is understood, not {bind_state!r}.")
    resolved = bind_state == "resolved"
    if resolved and instance is None:
        raise InvalidInput("bind_state=resolved needs instance=<uuid>.")
    found = await call.run(service.list_arqs, _caller(call), instance, resolved)
    base = call.base_url
    return json_response(ArqList(arqs=[view(a, call.version, base) for a in found]))


@router.get("/{uuid}", responses={200: {"model": ArqOut}}, summary="Show an accelerator request")
async def show_arq(uuid: str, call: CallDep) -> Response:
    call.authorize("arq:get_one")
    arq = await call.run(service.get, _caller(call), uuid)
    return json_response(view(arq, call.version, call.base_url))


def _bindings(patch: dict[str, list[PatchOp]], call: Call) -> list[service.Binding] | list[str]:
    """The bind requests of a PATCH, or the uuids to unbind when its ops are removes."""
    ops = [op.op for ops in patch.values() for op in ops]
    if not ops:
        raise InvalidInput("The body must map accelerator request uuids to operations.")
    if len(set(ops)) != 1:
        raise InvalidInput("All operations of one request must be 'add' (bind) or all 'remove'.")
    if ops[0] == "remove":
        return list(patch)
    return [_binding(uuid, ops, call) for uuid, ops in patch.items()]


def _binding(uuid: str, ops: list[PatchOp], call: Call) -> service.Binding:
    values = {op.path.lstrip("/"): op.value for op in ops}
    missing = [f for f in BIND_FIELDS if not values.get(f)]
    if missing:
        raise InvalidInput(f"{uuid}: a bind needs {', '.join('/' + f for f in missing)}.")
    if "project_id" in values:
        microversion.require(call.version, microversion.V2_1, f"{uuid}: /project_id")
    return service.Binding(
        uuid,
        str(values["hostname"]),
        str(values["device_rp_uuid"]),
        str(values["instance_uuid"]),
        values.get("project_id"),
    )


@router.patch("", status_code=202, summary="Bind or unbind accelerator requests")
async def patch_arqs(body: Annotated[ArqPatch, Body()], call: CallDep) -> Response:
    return await _patch(body.root, call)


@router.patch(
    "/{uuid}",
    status_code=202,
    summary="Bind or unbind one accelerator request",
    description="The collection PATCH for one request, as openstacksdk, the openstack CLI "
    "and python-cyborgclient send it: the body maps this request's uuid to its "
    "operations (or is the list of operations itself). Same rules, same answer.",
)
async def patch_arq(
    uuid: str,
    body: Annotated[Annotated[dict[str, PatchOps], FailFast] | PatchOps, Body()],
    call: CallDep,
) -> Response:
    if isinstance(body, list):
        return await _patch({uuid: body}, call)
    if any(not uuids.same(key, uuid) for key in body):
        raise InvalidInput(
            f"The body may patch only accelerator request {uuid[:64]}, the one the path names."
        )
    return await _patch(body, call)


async def _patch(patch: dict[str, list[PatchOp]], call: Call) -> Response:
    """Bind (add operations) or unbind (remove operations) the requests ``patch`` names."""
    call.authorize("arq:update")
    work = _bindings(patch, call)
    if work and isinstance(work[0], service.Binding):
        call.authorize(
            "arq:bind",
            why=" Binding accelerator requests needs a service token "
            "(X-Service-Token from the compute service) beside the user's.",
        )
        resolved = await call.run_counted(
            functools.partial(binding.bind, trust=call.services.trust),
            _caller(call),
            work,
            call.bitstreams,
            flat_mode_of(call),
            limits_of(call),
            store=True,
        )
        _notify(call, resolved)
    else:
        await call.run(
            functools.partial(service.unbind, policy=call.services.cleaning),
            _caller(call),
            work,
            _binds(call),
        )
        workers.wake_sync(call.request.app.state)  # what is cleaned now is held reserved
    return Response(status_code=202)


def flat_mode_of(call: Call) -> tree.Options | None:
    """The Placement sync's options when it publishes flat: a bind may then name a
    compute node's provider (spec 001's fallback)."""
    placement = call.placement
    if placement is None or placement.mode == "disabled" or placement.options.nested:
        return None
    return placement.options


class ProgramRequest(BaseModel):
    """The bitstream to load, named one way (as a device profile's accel: keys do)."""

    model_config = ConfigDict(extra="forbid")

    bitstream_id: str | None = Field(None, max_length=255)
    bitstream_name: str | None = Field(None, max_length=255)
    function_id: str | None = Field(None, max_length=255)
    function_name: str | None = Field(None, max_length=255)


@router.post(
    "/{uuid}/program",
    dependencies=[requires(microversion.V2_8, "Reprogramming a request")],
    status_code=202,
    responses={202: {"model": ArqOut}},
    summary="Reprogram the region of a bound accelerator request (2.8)",
    description="Run-time programming: the project that owns a Bound request loads "
    "another bitstream it may use into the request's region, if no other request "
    "holds it. Asynchronous: the request shows phase and progress until done; a "
    "failure shows in failure_reason (the request stays Bound).",
)
async def program_arq(
    uuid: str, body: Annotated[ProgramRequest, Body()], call: CallDep
) -> Response:
    call.authorize("arq:program")
    selector = body.model_dump(exclude_none=True)
    if len(selector) != 1:
        raise InvalidInput(
            f"Name the bitstream one way: one of {', '.join(ProgramRequest.model_fields)}."
        )
    arq = await call.run_with_store(
        bind_tasks.reprogram, _caller(call), uuid, selector, call.bitstreams
    )
    return json_response(view(arq, call.version, call.base_url), 202)


@router.delete("", status_code=204, summary="Delete accelerator requests (?arqs= or ?instance=)")
async def delete_arqs(
    call: CallDep,
    arqs: Annotated[str | None, Query(description="Comma-separated uuids.")] = None,
    instance: Annotated[str | None, Query(description="All of this instance's.")] = None,
) -> Response:
    call.authorize("arq:delete")
    if (arqs is None) == (instance is None):
        raise InvalidInput("Give exactly one of arqs=<uuid,...> and instance=<uuid>.")
    if instance is not None:
        await call.run(
            service.delete_for_instance,
            _caller(call),
            instance,
            _binds(call),
            call.services.cleaning,
        )
    else:
        await call.run(
            service.delete_arqs,
            _caller(call),
            split_list(arqs) or [],
            _binds(call),
            call.services.cleaning,
        )
    workers.wake_sync(call.request.app.state)  # what is cleaned now is held reserved
    return Response(status_code=204)


@router.delete("/{uuid}", status_code=204, summary="Delete an accelerator request")
async def delete_arq(uuid: str, call: CallDep) -> Response:
    call.authorize("arq:delete")
    await call.run(service.delete_arqs, _caller(call), [uuid], _binds(call), call.services.cleaning)
    workers.wake_sync(call.request.app.state)  # what is cleaned now is held reserved
    return Response(status_code=204)
