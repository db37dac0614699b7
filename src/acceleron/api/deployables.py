"""``/v2/deployables`` and spec 003's ``/accelerators/deployable``: read only.

* ``GET /v2/deployables`` lists ``{"deployables": [...]}``, filtered in the
  database on any column parameter of DeployableQuery and on attributes: any
  other parameter is ``attribute=value``, a dotted name a nested attribute, and
  ``None``/``null`` means "has none" (``?bitstream_id=None&type=FPGA``: spec
  003's FPGAs with no bitstream loaded). Sorted and paged as every inventory list;
* ``GET /v2/deployables/{uuid}`` returns the deployable unwrapped;
* before 2.5 a deployable has upstream's fields, ``attributes_list`` being a
  string holding a JSON list of ``{key: value}`` (nested keys dotted); 2.5 adds
  kind, key, the device's and relatives' uuids, availability, programming
  progress, ``attributes`` as an object, ``attach_handles`` and more;
* from 2.5, ``GET /v2/deployables/{uuid}/attributes[/{key}]`` reads attributes.

Spec 003's paths answer with the same data; outside /v2 no microversion is
negotiated, so they always show the latest view.

A deployable's response has one schema per microversion that changed it
(``Deployable_2_0``, ``Deployable_2_5``, ``Deployable_2_10``, ``Deployable_2_13``):
typed dicts that both document the response (OpenAPI) and build it (``view``), so a
renamed field fails the type check.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias

import orjson
from fastapi import APIRouter, Body, Depends, Query, Request
from pydantic import BaseModel, Field
from starlette.responses import Response
from typing_extensions import TypedDict

from acceleron import microversion, uuids
from acceleron.api.common import Call, CallDep, json_response, requires, timestamp
from acceleron.api.devices import (
    HealthDetail,
    MaintenanceIn,
    PageQuery,
    health_detail,
    page_body,
    sort_key_field,
    wake_placement,
)
from acceleron.api.errors import ERROR_RESPONSES
from acceleron.api.overrides import PROVIDER
from acceleron.api.versions import Link
from acceleron.exceptions import InvalidInput, NotFound
from acceleron.failfast import FailFast
from acceleron.service import attributes as attributes_service
from acceleron.service import deployables as service
from acceleron.service import health, programming, provenance
from acceleron.service.deployables import DeployableInfo, HandleRecord
from acceleron.service.provenance import Trust
from acceleron.vocabulary import DEVICE_TYPES, KINDS

PATH = "/v2/deployables"
SPEC003_PATH = "/accelerators/deployable"


async def _latest(request: Request) -> None:
    """Paths outside /v2 negotiate no microversion: they are served at the latest."""
    request.state.api_version = microversion.MAX_VERSION


router = APIRouter(
    dependency_overrides_provider=PROVIDER,
    prefix=PATH,
    tags=["deployables"],
    responses=ERROR_RESPONSES,
)
spec003_router = APIRouter(
    dependency_overrides_provider=PROVIDER,
    prefix=SPEC003_PATH,
    tags=["deployables (spec 003)"],
    responses=ERROR_RESPONSES,
    dependencies=[Depends(_latest)],
)

NULL_DOC = " 'None' or 'null': has none."
ATTRIBUTE_FILTER_DOC = (
    "Any other query parameter filters on attributes: 'key=value' (a dotted key names a "
    "nested attribute; 'None' or 'null': the deployable has no such attribute)."
)


class DeployableQuery(PageQuery):
    name: str | None = None
    kind: str | None = Field(None, description=f"One of {', '.join(KINDS)}.")
    key: str | None = Field(None, description="Its stable key in the device, e.g. region0.")
    parent_uuid: str | None = Field(None, description="uuid of its parent." + NULL_DOC)
    root_uuid: str | None = Field(None, description="uuid of its root." + NULL_DOC)
    device_uuid: str | None = Field(None, description="uuid of its device.")
    hostname: str | None = Field(None, description="Its device's host.")
    type: str | None = Field(None, description=f"Its device's type: {', '.join(DEVICE_TYPES)}.")
    availability: str | None = None
    instance_uuid: str | None = Field(None, description="Instance it is assigned to." + NULL_DOC)
    rp_uuid: str | None = Field(None, description="Its resource provider." + NULL_DOC)
    driver_name: str | None = None
    bitstream_id: str | None = Field(None, description="What is loaded." + NULL_DOC)
    region_type: str | None = Field(None, description="Region type (32 hex digits)." + NULL_DOC)
    function_uuid: str | None = Field(None, description="Function loaded." + NULL_DOC)
    sort_key: str | None = sort_key_field(service.SORT_KEYS)


class AttachHandleOut(TypedDict):
    uuid: str
    type: Annotated[str, Field(description="PCI, MDEV, MIG or TEST_PCI.")]
    address: Annotated[str, Field(description="PCI address, mdev uuid or MIG uuid.")]
    in_use: Annotated[bool, Field(description="Held by an accelerator request.")]
    host_in_use: Annotated[bool, Field(description="Busy on the host outside Acceleron.")]
    state: Annotated[str, Field(description="'present', or 'lost'.")]
    attach_info: dict[str, Any]


class Deployable_2_0(TypedDict):  # named after its microversion
    """A deployable, 2.0 to 2.4: upstream's fields."""

    uuid: str
    parent_id: int | None
    root_id: int | None
    name: str
    num_accelerators: int
    device_id: int
    attributes_list: Annotated[
        str, Field(description="JSON list of {key: value}; nested keys dotted.")
    ]
    rp_uuid: str | None
    driver_name: str
    bitstream_id: str | None
    created_at: str | None
    updated_at: str | None
    links: Annotated[list[Link], Field(description="self, and a bookmark outside /v2.")]


class Deployable_2_5(Deployable_2_0):
    """A deployable, 2.5 to 2.9: where it is in its device's tree, what it offers, its
    programming, its attributes as an object and its attach handles."""

    id: Annotated[int, Field(description="What parent_id and root_id refer to.")]
    kind: Annotated[str, Field(description=f"One of {', '.join(KINDS)}.")]
    key: Annotated[str, Field(description="Stable key in its device.")]
    device_uuid: str
    hostname: str
    parent_uuid: str | None
    root_uuid: str | None
    availability: str
    assignable: bool
    instance_uuid: str | None
    region_type: str | None
    function_uuid: Annotated[str | None, Field(description="The first of function_uuids.")]
    function_uuids: Annotated[
        list[str], Field(description="Every function (AFU id) it implements.")
    ]
    accelerator_type: str | None
    programmable: bool
    memory_mb: int | None
    traits: list[str]
    resource_class: str | None
    program_phase: Annotated[str | None, Field(description="While being programmed.")]
    program_progress: Annotated[int | None, Field(description="Percent.")]
    program_error: Annotated[str | None, Field(description="Why programming failed.")]
    attributes: Annotated[dict[str, Any], Field(description="Nested object.")]
    attach_handles: list[AttachHandleOut]


class Deployable_2_10(Deployable_2_5):
    """A deployable, 2.10 to 2.12: its memory's family."""

    memory_type: Annotated[
        str | None,
        Field(
            description="The memory's family (DDR, HBM, GDDR...), which names its resource "
            "class CUSTOM_ACCELERATOR_MEMORY_<memory_type>; null when the driver cannot tell "
            "(the class is then named after the accelerator type)."
        ),
    ]


class _OwnHealth(TypedDict):
    health: Annotated[
        str,
        Field(
            description="Its own: healthy, degraded or unhealthy (a region whose port "
            "failed); its device's health applies to it too."
        ),
    ]


class _Status(TypedDict):
    status: Annotated[str, Field(description="'enabled' or 'maintaining'.")]


class Deployable_2_13(Deployable_2_10, _OwnHealth, HealthDetail, _Status):
    """A deployable, from 2.13: its own health and maintenance."""


class Deployable_2_17(Deployable_2_13):
    """A deployable, from 2.17: where what it holds came from, and what of it is being
    cleaned between tenants."""

    cleaning: Annotated[
        int,
        Field(
            description="How many of its attach handles were given back and are not clean "
            "yet (waiting, being cleaned, or failed to be): held reserved in Placement."
        ),
    ]

    provenance: Annotated[
        dict[str, Any] | None,
        Field(
            description="What it holds and where that came from: source 'acceleron' (the "
            "bitstream_id Acceleron loaded, the project_id of the request that loaded it, "
            "null for an admin's program; its functions; signature: verified, and by which "
            "certificate_id; loaded_at), or 'outside' (its functions, loaded outside "
            "Acceleron, and whether [bitstreams] trusted_functions vouches for them); null "
            'when it holds no function. docs/binding.md, "What a region holds".'
        ),
    ]


DeployableOut: TypeAlias = (
    Deployable_2_0 | Deployable_2_5 | Deployable_2_10 | Deployable_2_13 | Deployable_2_17
)


class DeployableList(BaseModel):
    deployables: list[DeployableOut]
    deployables_links: list[Link] | None = Field(None, description="The next page, if any.")


class DeployableWrapped(TypedDict):
    deployable: DeployableOut


class DeployableAttributes(BaseModel):
    attributes: dict[str, Any] = Field(description="Nested object of the attributes.")


class DeployableAttribute(BaseModel):
    attribute: dict[str, Any] = Field(description="{key: value}; a parent's value is an object.")


# --- views -----------------------------------------------------------------------------


def handle_view(handle: HandleRecord) -> AttachHandleOut:
    return AttachHandleOut(
        uuid=handle.uuid,
        type=handle.type,
        address=handle.address,
        in_use=handle.in_use,
        host_in_use=handle.host_in_use,
        state=handle.state,
        attach_info=handle.attach_info,
    )


def view(
    info: DeployableInfo, version: microversion.Version, base: str, trust: Trust
) -> DeployableOut:
    dep = info.deployable
    data = Deployable_2_0(
        uuid=dep.uuid,
        parent_id=dep.parent_id,
        root_id=dep.root_id,
        name=dep.name,
        num_accelerators=dep.num_accelerators,
        device_id=dep.device_id,
        attributes_list=orjson.dumps(attributes_service.flatten(info.attributes)).decode(),
        rp_uuid=dep.rp_uuid,
        driver_name=dep.driver_name,
        bitstream_id=dep.bitstream_id,
        created_at=timestamp(dep.created_at),
        updated_at=timestamp(dep.updated_at),
        links=[
            Link(href=f"{base}{PATH}/{dep.uuid}", rel="self"),
            Link(href=f"{base}{SPEC003_PATH}/{dep.uuid}", rel="bookmark"),
        ],
    )
    if version < microversion.V2_5:
        return data
    rich = Deployable_2_5(
        **data,
        id=dep.id,
        kind=dep.kind,
        key=dep.key,
        device_uuid=dep.device_uuid,
        hostname=dep.hostname,
        parent_uuid=dep.parent_uuid,
        root_uuid=dep.root_uuid,
        availability=dep.availability,
        assignable=dep.assignable,
        instance_uuid=dep.instance_uuid,
        region_type=dep.region_type,
        function_uuid=dep.function_uuid,
        function_uuids=dep.function_uuids,
        accelerator_type=dep.accelerator_type,
        programmable=dep.programmable,
        memory_mb=dep.memory_mb,
        traits=dep.traits,
        resource_class=dep.resource_class,
        program_phase=dep.program_phase,
        program_progress=dep.program_progress,
        program_error=dep.program_error,
        attributes=info.attributes,
        attach_handles=[handle_view(h) for h in info.handles],
    )
    if version < microversion.V2_10:
        return rich
    with_memory = Deployable_2_10(**rich, memory_type=dep.memory_type)
    if version < microversion.V2_13:
        return with_memory
    own = Deployable_2_13(**with_memory, health=dep.health, **health_detail(dep), status=dep.status)
    if version < microversion.V2_17:
        return own
    return Deployable_2_17(**own, cleaning=dep.cleaning, provenance=provenance.describe(dep, trust))


# --- handlers -------------------------------------------------------------------------


def _attribute_filters(request: Request) -> dict[str, str]:
    """Query parameters that are not DeployableQuery's: attribute filters."""
    known = DeployableQuery.model_fields
    wanted: dict[str, str] = {}
    for key, value in request.query_params.multi_items():
        if key in known:
            continue
        if key in wanted:
            raise InvalidInput(f"{key[:64]}: an attribute filter may be given only once.")
        wanted[key] = value
    return wanted


async def _list(call: Call, query: DeployableQuery, path: str) -> dict[str, Any]:
    call.authorize("deployable:get_all")
    filters = query.model_dump(include=set(service.FILTERS))
    listed = await call.run(
        service.list_deployables, filters, query.page(call), _attribute_filters(call.request)
    )
    trust = call.services.trust
    items = [view(d, call.version, call.base_url, trust) for d in listed.items]
    return page_body("deployables", items, listed, call, path)


async def _show(call: Call, uuid: str) -> DeployableOut:
    call.authorize("deployable:get_one")
    deployable = await call.run(service.get, uuid)
    return view(deployable, call.version, call.base_url, call.services.trust)


async def _attribute(call: Call, uuid: str, key: str) -> dict[str, Any]:
    call.authorize("attribute:get_one")
    return {"attribute": {key: await call.run(service.attribute_of, uuid, key)}}


_ATTRIBUTES_2_5 = requires(microversion.V2_5, "Reading a deployable's attributes here")


@router.get(
    "",
    responses={200: {"model": DeployableList}},
    summary="List deployables",
    description=ATTRIBUTE_FILTER_DOC,
)
async def list_deployables(call: CallDep, query: Annotated[DeployableQuery, Query()]) -> Response:
    return json_response(await _list(call, query, PATH))


@router.get("/{uuid}", responses={200: {"model": DeployableOut}}, summary="Show a deployable")
async def show_deployable(uuid: str, call: CallDep) -> Response:
    return json_response(await _show(call, uuid))


@router.get(
    "/{uuid}/attributes",
    responses={200: {"model": DeployableAttributes}},
    summary="Show a deployable's attributes, nested (2.5)",
    dependencies=[_ATTRIBUTES_2_5],
)
async def show_attributes(uuid: str, call: CallDep) -> Response:
    call.authorize("attribute:get_all")
    return json_response({"attributes": await call.run(service.attributes_of, uuid)})


@router.get(
    "/{uuid}/attributes/{key}",
    responses={200: {"model": DeployableAttribute}},
    summary="Show one attribute of a deployable; a dotted key names a nested one (2.5)",
    dependencies=[_ATTRIBUTES_2_5],
)
async def show_attribute(uuid: str, key: str, call: CallDep) -> Response:
    return json_response(await _attribute(call, uuid, key))


class ProgramImage(BaseModel):
    image_uuid: str = Field(max_length=255, description="The bitstream's uuid (Glance image).")


class ProgramOp(BaseModel):
    path: Literal["/program"]
    op: Literal["replace"]
    value: Annotated[list[ProgramImage], FailFast] = Field(min_length=1, max_length=1)


@router.post(
    "/{uuid}/maintenance",
    dependencies=[requires(microversion.V2_13, "Deployable maintenance")],
    responses={200: {"model": DeployableOut}},
    summary="Put one deployable (a region) in maintenance with a reason, or take it out "
    "(admin; 2.13)",
)
async def deployable_maintenance(uuid: str, body: MaintenanceIn, call: CallDep) -> Response:
    call.authorize("deployable:maintenance")
    await call.run(health.set_deployable_maintenance, uuid, body.maintenance, body.reason)
    wake_placement(call)
    return json_response(await _show(call, uuid))


@router.patch(
    "/{uuid}/program",
    status_code=202,
    responses={202: {"model": DeployableOut}},
    summary="Program a region with a bitstream (asynchronous: follow program_phase)",
    description="The body is upstream's: [{path: /program, op: replace, value: "
    "[{image_uuid: <bitstream uuid>}]}]. A region a request uses, or one being "
    "programmed, is refused with 409. From 2.5 the deployable shows program_phase "
    "and program_progress until the agent is done (or program_error).",
)
async def program_deployable(
    uuid: str,
    body: Annotated[list[ProgramOp], FailFast, Body(min_length=1, max_length=1)],
    call: CallDep,
) -> Response:
    call.authorize("deployable:program")
    image = body[0].value[0].image_uuid
    await call.run_with_store(programming.program_deployable, uuid, image, call.bitstreams)
    return json_response(await _show(call, uuid), 202)


@router.patch(
    "/{uuid}/program/{again}",
    status_code=202,
    responses={202: {"model": DeployableOut}},
    summary="Program a region: the path openstacksdk's patch_deployable sends",
    description="The same as PATCH /v2/deployables/{uuid}/program; openstacksdk (and so "
    "the openstack CLI's deployable program) appends the uuid once more.",
)
async def program_deployable_sdk(
    uuid: str,
    again: str,
    body: Annotated[list[ProgramOp], FailFast, Body(min_length=1, max_length=1)],
    call: CallDep,
) -> Response:
    if not uuids.same(uuid, again):
        raise NotFound(f"No such path: the two uuids differ ({again[:64]}).")
    return await program_deployable(uuid, body, call)


@spec003_router.get(
    "",
    responses={200: {"model": DeployableList}},
    summary="List deployables (spec 003; the latest view)",
    description=ATTRIBUTE_FILTER_DOC,
)
async def spec003_list(call: CallDep, query: Annotated[DeployableQuery, Query()]) -> Response:
    return json_response(await _list(call, query, SPEC003_PATH))


@spec003_router.get(
    "/{uuid}",
    responses={200: {"model": DeployableWrapped}},
    summary="Show a deployable (spec 003; the latest view)",
)
async def spec003_show(uuid: str, call: CallDep) -> Response:
    return json_response(DeployableWrapped(deployable=await _show(call, uuid)))


@spec003_router.get(
    "/{uuid}/attribute/{key}",
    responses={200: {"model": DeployableAttribute}},
    summary="Show one attribute of a deployable (spec 003)",
)
async def spec003_attribute(uuid: str, key: str, call: CallDep) -> Response:
    return json_response(await _attribute(call, uuid, key))
