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
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Body, Depends, Query, Request
from pydantic import BaseModel, Field
from sqlalchemy import Row
from starlette.exceptions import HTTPException
from starlette.responses import Response

from acceleron.api import microversion
from acceleron.api.common import Call, CallDep, json_response, requires, same_uuid, timestamp
from acceleron.api.devices import (
    MaintenanceIn,
    PageQuery,
    page_body,
    sort_key_field,
    wake_placement,
    with_health,
)
from acceleron.api.errors import ERROR_RESPONSES
from acceleron.api.versions import Link
from acceleron.exceptions import InvalidInput
from acceleron.service import attributes as attributes_service
from acceleron.service import deployables as service
from acceleron.service import health, programming
from acceleron.service.deployables import DeployableInfo
from acceleron.vocabulary import DEVICE_TYPES, KINDS

PATH = "/v2/deployables"
SPEC003_PATH = "/accelerators/deployable"


async def _latest(request: Request) -> None:
    """Paths outside /v2 negotiate no microversion: they are served at the latest."""
    request.state.api_version = microversion.MAX_VERSION


router = APIRouter(prefix=PATH, tags=["deployables"], responses=ERROR_RESPONSES)
spec003_router = APIRouter(
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


class AttachHandleOut(BaseModel):
    uuid: str
    type: str = Field(description="PCI, MDEV, MIG or TEST_PCI.")
    address: str = Field(description="PCI address, mdev uuid or MIG uuid.")
    in_use: bool = Field(description="Held by an accelerator request.")
    host_in_use: bool = Field(description="Busy on the host outside Acceleron.")
    state: str = Field(description="'present', or 'lost'.")
    attach_info: dict[str, Any]


class DeployableOut(BaseModel):
    uuid: str
    parent_id: int | None
    root_id: int | None
    name: str
    num_accelerators: int
    device_id: int
    attributes_list: str = Field(description="JSON list of {key: value}; nested keys dotted.")
    rp_uuid: str | None
    driver_name: str
    bitstream_id: str | None
    created_at: str | None
    updated_at: str | None
    links: list[Link] = Field(description="self, and a bookmark outside /v2.")
    id: int | None = Field(None, description="From 2.5. What parent_id and root_id refer to.")
    kind: str | None = Field(None, description=f"From 2.5. One of {', '.join(KINDS)}.")
    key: str | None = Field(None, description="From 2.5. Stable key in its device.")
    device_uuid: str | None = Field(None, description="From 2.5.")
    hostname: str | None = Field(None, description="From 2.5.")
    parent_uuid: str | None = Field(None, description="From 2.5.")
    root_uuid: str | None = Field(None, description="From 2.5.")
    availability: str | None = Field(None, description="From 2.5.")
    assignable: bool | None = Field(None, description="From 2.5.")
    instance_uuid: str | None = Field(None, description="From 2.5.")
    region_type: str | None = Field(None, description="From 2.5.")
    function_uuid: str | None = Field(None, description="From 2.5. The first of function_uuids.")
    function_uuids: list[str] | None = Field(
        None, description="From 2.5. Every function (AFU id) it implements."
    )
    accelerator_type: str | None = Field(None, description="From 2.5.")
    programmable: bool | None = Field(None, description="From 2.5.")
    memory_mb: int | None = Field(None, description="From 2.5.")
    memory_type: str | None = Field(
        None,
        description="From 2.10. The memory's family (DDR, HBM, GDDR...), which names its "
        "resource class CUSTOM_ACCELERATOR_MEMORY_<memory_type>; null when the driver "
        "cannot tell (the class is then named after the accelerator type).",
    )
    traits: list[str] | None = Field(None, description="From 2.5.")
    resource_class: str | None = Field(None, description="From 2.5.")
    program_phase: str | None = Field(None, description="From 2.5. While being programmed.")
    program_progress: int | None = Field(None, description="From 2.5. Percent.")
    program_error: str | None = Field(None, description="From 2.5. Why programming failed.")
    attributes: dict[str, Any] | None = Field(None, description="From 2.5. Nested object.")
    attach_handles: list[AttachHandleOut] | None = Field(None, description="From 2.5.")
    health: str | None = Field(
        None, description="From 2.13. Its own: healthy, degraded or unhealthy (a region whose "
        "port failed); its device's health applies to it too.")  # fmt: skip
    health_reason: str | None = Field(None, description="From 2.13.")
    health_since: str | None = Field(None, description="From 2.13.")
    status: str | None = Field(None, description="From 2.13. 'enabled' or 'maintaining'.")
    maintenance_reason: str | None = Field(None, description="From 2.13.")
    maintenance_since: str | None = Field(None, description="From 2.13.")


class DeployableList(BaseModel):
    deployables: list[DeployableOut]
    deployables_links: list[Link] | None = Field(None, description="The next page, if any.")


class DeployableWrapped(BaseModel):
    deployable: DeployableOut


class DeployableAttributes(BaseModel):
    attributes: dict[str, Any] = Field(description="Nested object of the attributes.")


class DeployableAttribute(BaseModel):
    attribute: dict[str, Any] = Field(description="{key: value}; a parent's value is an object.")


# --- views -----------------------------------------------------------------------------

_RICH_FIELDS = ("id", "kind", "key", "device_uuid", "hostname", "parent_uuid", "root_uuid",
                "availability", "assignable", "instance_uuid", "region_type", "function_uuid",
                "function_uuids", "accelerator_type", "programmable", "memory_mb", "traits",
                "resource_class", "program_phase", "program_progress",
                "program_error")  # fmt: skip
_HANDLE_FIELDS = ("uuid", "type", "address", "in_use", "host_in_use", "state", "attach_info")


def handle_view(handle: Row[Any]) -> dict[str, Any]:
    return {field: getattr(handle, field) for field in _HANDLE_FIELDS}


def view(dep: DeployableInfo, version: microversion.Version, base: str) -> dict[str, Any]:
    row = dep.row
    data: dict[str, Any] = {
        "uuid": row.uuid,
        "parent_id": row.parent_id,
        "root_id": row.root_id,
        "name": row.name,
        "num_accelerators": row.num_accelerators,
        "device_id": row.device_id,
        "attributes_list": orjson.dumps(attributes_service.flatten(dep.attributes)).decode(),
        "rp_uuid": row.rp_uuid,
        "driver_name": row.driver_name,
        "bitstream_id": row.bitstream_id,
        "created_at": timestamp(row.created_at),
        "updated_at": timestamp(row.updated_at),
        "links": [
            {"href": f"{base}{PATH}/{row.uuid}", "rel": "self"},
            {"href": f"{base}{SPEC003_PATH}/{row.uuid}", "rel": "bookmark"},
        ],
    }
    if version >= microversion.V2_5:
        data.update((field, getattr(row, field)) for field in _RICH_FIELDS)
        data["attributes"] = dep.attributes
        data["attach_handles"] = [handle_view(h) for h in dep.handles]
    if version >= microversion.V2_10:
        data["memory_type"] = row.memory_type
    if version >= microversion.V2_13:
        with_health(data, row, version)
        data["status"] = row.status
    return data


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
    items = [view(d, call.version, call.base_url) for d in listed.items]
    return page_body("deployables", items, listed, call, path)


async def _show(call: Call, uuid: str) -> dict[str, Any]:
    call.authorize("deployable:get_one")
    deployable = await call.run(service.get, uuid)
    return view(deployable, call.version, call.base_url)


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
    value: list[ProgramImage] = Field(min_length=1, max_length=1)


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
    uuid: str, body: Annotated[list[ProgramOp], Body(min_length=1, max_length=1)], call: CallDep
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
    body: Annotated[list[ProgramOp], Body(min_length=1, max_length=1)],
    call: CallDep,
) -> Response:
    if not same_uuid(uuid, again):
        raise HTTPException(404, f"No such path: the two uuids differ ({again[:64]}).")
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
    return json_response({"deployable": await _show(call, uuid)})


@spec003_router.get(
    "/{uuid}/attribute/{key}",
    responses={200: {"model": DeployableAttribute}},
    summary="Show one attribute of a deployable (spec 003)",
)
async def spec003_attribute(uuid: str, key: str, call: CallDep) -> Response:
    return json_response(await _attribute(call, uuid, key))
