"""``/v2/device_profiles``: spec 002's REST API with upstream's response shapes.

* POST takes a list holding exactly one profile and returns it unwrapped (201);
* GET one returns ``{"device_profile": ...}``; the list ``{"device_profiles": [...]}``;
* DELETE takes a uuid, a name, a comma-separated list of names, or ``?value=`` (or
  ``?name=``, as spec 002 writes it);
* from 2.4, profiles show ``enabled`` and PATCH changes description/enabled.

A profile's response has one schema per microversion that changed it
(``DeviceProfile_2_0``, ``DeviceProfile_2_4``): typed dicts that both document the
response (OpenAPI) and build it (``view``), so a renamed field fails the type check.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeAlias

from fastapi import APIRouter, Body, Query
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response
from typing_extensions import TypedDict

from acceleron import microversion
from acceleron.api.common import Call, CallDep, json_response, requires, split_list, timestamp
from acceleron.api.errors import ERROR_RESPONSES
from acceleron.api.overrides import PROVIDER
from acceleron.api.versions import Link
from acceleron.db.session import Database
from acceleron.exceptions import InvalidInput
from acceleron.failfast import FailFast
from acceleron.service import device_profiles as service
from acceleron.uuids import is_uuid_like

router = APIRouter(
    dependency_overrides_provider=PROVIDER,
    prefix="/v2/device_profiles",
    tags=["device profiles"],
    responses=ERROR_RESPONSES,
)

GROUPS_DOC = (
    "Ordered request groups. Keys: 'resources:<RC>' (positive integer), "
    "'trait:<TRAIT>' ('required' or 'forbidden'), 'accel:<key>' with key bitstream_id, "
    "bitstream_name, function_id, function_name or attach_target. Lower case and "
    "hyphens in class and trait names become upper case and underscores."
)


class DeviceProfileIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Unique name: letters, digits, '-' and '_'.", max_length=255)
    groups: Annotated[list[Annotated[dict[str, str], FailFast]], FailFast] = Field(
        description=GROUPS_DOC
    )
    description: str | None = Field(None, max_length=255)
    # A string, read by uuids.parse in the service: pydantic's UUID takes braces and
    # ``urn:uuid:`` forms that no other route accepts.
    uuid: str | None = Field(
        None,
        description="Chosen by the server when not given.",
        max_length=64,
        json_schema_extra={"format": "uuid"},
    )
    enabled: bool | None = Field(None, description="From 2.4. Whether new requests may use it.")


class DeviceProfile_2_0(TypedDict):
    """A device profile, 2.0 to 2.3."""

    uuid: str
    name: str
    description: str | None
    groups: list[dict[str, str]]
    created_at: str | None
    updated_at: str | None
    links: list[Link]


class DeviceProfile_2_4(DeviceProfile_2_0):
    """A device profile, from 2.4: whether new requests may use it."""

    enabled: bool


DeviceProfileOut: TypeAlias = DeviceProfile_2_0 | DeviceProfile_2_4


class DeviceProfileWrapped(TypedDict):
    device_profile: DeviceProfileOut


class DeviceProfileList(TypedDict):
    device_profiles: list[DeviceProfileOut]


class PatchOp(BaseModel):
    model_config = ConfigDict(extra="forbid")

    op: Literal["add", "replace", "remove"]
    path: Literal["/description", "/enabled"]
    value: str | bool | None = None


def view(profile: service.Profile, version: microversion.Version, base: str) -> DeviceProfileOut:
    data = DeviceProfile_2_0(
        uuid=profile.uuid,
        name=profile.name,
        description=profile.description,
        groups=profile.groups,
        created_at=timestamp(profile.created_at),
        updated_at=timestamp(profile.updated_at),
        links=[Link(href=f"{base}/v2/device_profiles/{profile.uuid}", rel="self")],
    )
    if version >= microversion.V2_4:
        return DeviceProfile_2_4(**data, enabled=profile.enabled)
    return data


async def _read(
    call: Call, read: Callable[[Database], list[service.Profile]]
) -> list[service.Profile]:
    """The profiles ``read`` returns, with their fit traits
    (``service.with_fit_traits_of_profiles``); as they are when Placement is disabled.
    With the local bitstream store, read and steered in one transaction; with Glance,
    only a profile naming a bitstream waits on it (a thread)."""
    placement = call.placement
    if placement is None or placement.mode == "disabled":
        return await call.run(read)
    project, nested = call.context.project_id or "", placement.options.nested
    if call.services.conf.bitstreams.backend == "local":
        return await call.run(service.read_steered, read, call.bitstreams, project, nested)
    profiles = await call.run(read)
    if not service.wants_steering(profiles):
        return profiles
    return await call.run_blocking(
        service.with_fit_traits_of_profiles, call.bitstreams, profiles, project, nested
    )


@router.get("", responses={200: {"model": DeviceProfileList}}, summary="List device profiles")
async def list_device_profiles(
    call: CallDep,
    name: Annotated[str | None, Query(description="Comma-separated names to show.")] = None,
) -> Response:
    call.authorize("device_profile:get_all")
    profiles = await _read(call, functools.partial(service.list_profiles, names=split_list(name)))
    base = call.base_url
    listed = DeviceProfileList(device_profiles=[view(p, call.version, base) for p in profiles])
    return json_response(listed)


@router.get(
    "/{ident}",
    responses={200: {"model": DeviceProfileWrapped}},
    summary="Show a device profile by uuid (or by name from 2.2)",
)
async def show_device_profile(ident: str, call: CallDep) -> Response:
    call.authorize("device_profile:get_one")
    if not is_uuid_like(ident):
        what = f"{ident!r} is not a uuid: looking a device profile up by name"
        microversion.require(call.version, microversion.V2_2, what, microversion.NotAcceptable)
    (profile,) = await _read(call, lambda db: [service.get(db, ident)])
    return json_response(
        DeviceProfileWrapped(device_profile=view(profile, call.version, call.base_url))
    )


@router.post(
    "",
    status_code=201,
    responses={201: {"model": DeviceProfileOut}},
    summary="Create a device profile (the body is a list holding one profile)",
)
async def create_device_profile(
    body: Annotated[list[DeviceProfileIn], FailFast, Body()], call: CallDep
) -> Response:
    call.authorize("device_profile:create")
    if len(body) != 1:
        raise InvalidInput(
            f"The body must be a list holding exactly one device profile, not {len(body)}."
        )
    item = body[0]
    if item.enabled is not None:
        microversion.require(call.version, microversion.V2_4, "enabled: setting it")
    profile = await call.run(
        functools.partial(
            service.create,
            name=item.name,
            groups=item.groups,
            description=item.description,
            uuid=item.uuid,
            enabled=True if item.enabled is None else item.enabled,
            limits=call.services.profile_limits,
        )
    )
    base = call.base_url
    return json_response(
        view(profile, call.version, base),
        status_code=201,
        headers={"Location": f"{base}/v2/device_profiles/{profile.uuid}"},
    )


@router.patch(
    "/{ident}",
    responses={200: {"model": DeviceProfileWrapped}},
    summary="Change a device profile's description or enabled flag (2.4)",
    dependencies=[requires(microversion.V2_4, "Changing a device profile", 405)],
)
async def update_device_profile(
    ident: str, body: Annotated[list[PatchOp], FailFast, Body()], call: CallDep
) -> Response:
    call.authorize("device_profile:update")
    if not body:
        raise InvalidInput("The body must be a non-empty list of patch operations.")
    changes: dict[str, Any] = {}
    for op in body:
        field = op.path.lstrip("/")
        if op.op == "remove":
            if field == "enabled":
                raise InvalidInput("/enabled cannot be removed, only replaced.")
            changes[field] = None
        else:
            changes[field] = op.value
    profile = await call.run(functools.partial(service.update, ident=ident, **changes))
    return json_response(
        DeviceProfileWrapped(device_profile=view(profile, call.version, call.base_url))
    )


@router.delete("/{ident}", status_code=204, summary="Delete device profiles by uuid or name(s)")
async def delete_device_profile(ident: str, call: CallDep) -> Response:
    call.authorize("device_profile:delete")
    await call.run(service.delete_profiles, split_list(ident) or [])
    return Response(status_code=204)


@router.delete(
    "", status_code=204, summary="Delete the device profiles named in ?value= (or ?name=)"
)
async def delete_device_profiles(
    call: CallDep,
    value: Annotated[str | None, Query(description="Comma-separated names or uuids.")] = None,
    name: Annotated[
        str | None, Query(description="The same as value (spec 002's spelling); not both.")
    ] = None,
) -> Response:
    call.authorize("device_profile:delete")
    if value is not None and name is not None:
        raise InvalidInput("Name the device profiles to delete in ?value= or ?name=, not both.")
    await call.run(service.delete_profiles, split_list(name if value is None else value) or [])
    return Response(status_code=204)
