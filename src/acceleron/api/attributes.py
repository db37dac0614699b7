"""``/v2/attributes``: deployables' attributes one row at a time (upstream's shapes).

* GET one returns the attribute unwrapped; the list ``{"attributes": [...]}``,
  filtered on ``deployable_id`` (upstream's integer id), ``deployable_uuid`` and
  ``key`` in the database, sorted and paged as every inventory list;
* every level of nesting is a row: a parent attribute has no value, and from 2.5
  each row shows its ``deployable_uuid`` and ``parent_uuid``;
* POST ``{deployable_id, key, value}`` (bare, as upstream, or wrapped in
  ``attribute`` as openstacksdk sends it) adds an operator's attribute -> 201, the
  attribute unwrapped; DELETE ``/{uuid}`` removes one -> 204. Agents' attributes
  belong to their reports (service/attributes.py says how the two live together).

An attribute's response has one schema per microversion that changed it
(``Attribute_2_0``, ``Attribute_2_5``): typed dicts that both document the response
and build it (``view``), so a renamed field fails the type check.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeAlias

from fastapi import APIRouter, Body, Query
from pydantic import BaseModel, ConfigDict, Field, model_validator
from starlette.responses import Response
from typing_extensions import TypedDict

from acceleron import microversion
from acceleron.api.common import CallDep, json_response, timestamp
from acceleron.api.devices import PageQuery, page_body, sort_key_field
from acceleron.api.errors import ERROR_RESPONSES
from acceleron.api.overrides import PROVIDER
from acceleron.api.versions import Link
from acceleron.exceptions import InvalidInput
from acceleron.service import attributes as service

PATH = "/v2/attributes"
router = APIRouter(
    dependency_overrides_provider=PROVIDER,
    prefix=PATH,
    tags=["attributes"],
    responses=ERROR_RESPONSES,
)


class AttributeQuery(PageQuery):
    model_config = ConfigDict(extra="forbid")

    deployable_id: int | None = Field(None, description="The deployable's integer id.")
    deployable_uuid: str | None = Field(None, description="The deployable's uuid.")
    key: str | None = Field(None, description="The attribute's own key (not dotted).")
    sort_key: str | None = sort_key_field(service.SORT_KEYS)


class Attribute_2_0(TypedDict):  # named after its microversion
    """An attribute, 2.0 to 2.4. ``value`` is None for a parent of nested attributes."""

    uuid: str
    deployable_id: int
    key: str
    value: str | None
    created_at: str | None
    updated_at: str | None
    links: list[Link]


class Attribute_2_5(Attribute_2_0):
    """An attribute, from 2.5: its deployable's uuid and its parent attribute's."""

    deployable_uuid: str
    parent_uuid: str | None


AttributeOut: TypeAlias = Attribute_2_0 | Attribute_2_5


class AttributeCreate(BaseModel):
    """Upstream's body; openstacksdk wraps it in ``{"attribute": ...}``, taken as well."""

    model_config = ConfigDict(extra="forbid")

    deployable_id: int | str | None = Field(
        None, description="The deployable: its integer id (as upstream) or its uuid."
    )
    deployable_uuid: str | None = Field(None, description="The deployable's uuid.")
    key: str = Field(max_length=255, description="Top-level; not one the deployable has.")
    value: str

    @model_validator(mode="before")
    @classmethod
    def unwrap(cls, data: Any) -> Any:
        if isinstance(data, dict) and list(data) == ["attribute"]:
            return data["attribute"]
        return data


class AttributeList(BaseModel):
    attributes: list[AttributeOut]
    attributes_links: list[Link] | None = Field(None, description="The next page, if any.")


def view(
    attribute: service.AttributeRecord, version: microversion.Version, base: str
) -> AttributeOut:
    data = Attribute_2_0(
        uuid=attribute.uuid,
        deployable_id=attribute.deployable_id,
        key=attribute.key,
        value=attribute.value,
        created_at=timestamp(attribute.created_at),
        updated_at=timestamp(attribute.updated_at),
        links=[Link(href=f"{base}{PATH}/{attribute.uuid}", rel="self")],
    )
    if version >= microversion.V2_5:
        return Attribute_2_5(
            **data, deployable_uuid=attribute.deployable_uuid, parent_uuid=attribute.parent_uuid
        )
    return data


@router.get("", responses={200: {"model": AttributeList}}, summary="List attributes")
async def list_attributes(call: CallDep, query: Annotated[AttributeQuery, Query()]) -> Response:
    call.authorize("attribute:get_all")
    filters = {
        "deployable_id": None if query.deployable_id is None else str(query.deployable_id),
        "deployable_uuid": query.deployable_uuid,
        "key": query.key,
    }
    listed = await call.run(service.list_attributes, filters, query.page(call))
    items = [view(a, call.version, call.base_url) for a in listed.items]
    return json_response(page_body("attributes", items, listed, call, PATH))


@router.get("/{uuid}", responses={200: {"model": AttributeOut}}, summary="Show an attribute")
async def show_attribute(uuid: str, call: CallDep) -> Response:
    call.authorize("attribute:get_one")
    attribute = await call.run(service.get, uuid)
    return json_response(view(attribute, call.version, call.base_url))


@router.post(
    "",
    status_code=201,
    responses={201: {"model": AttributeOut}},
    summary="Add an operator's attribute to a deployable",
)
async def create_attribute(body: Annotated[AttributeCreate, Body()], call: CallDep) -> Response:
    call.authorize("attribute:create")
    named = [d for d in (body.deployable_id, body.deployable_uuid) if d is not None]
    if len(named) != 1:
        raise InvalidInput("Name the deployable once: deployable_id or deployable_uuid.")
    created = await call.run(service.create, named[0], body.key, body.value)
    return json_response(view(created, call.version, call.base_url), 201)


@router.delete("/{uuid}", status_code=204, summary="Delete an operator's attribute")
async def delete_attribute(uuid: str, call: CallDep) -> Response:
    call.authorize("attribute:delete")
    await call.run(service.delete_attribute, uuid)
    return Response(status_code=204)
