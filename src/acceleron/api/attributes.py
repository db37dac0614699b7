"""``/v2/attributes``: deployables' attributes one row at a time, read only (upstream's shapes).

* GET one returns the attribute unwrapped; the list ``{"attributes": [...]}``,
  filtered on ``deployable_id`` (upstream's integer id), ``deployable_uuid`` and
  ``key`` in the database, sorted and paged as every inventory list;
* every level of nesting is a row: a parent attribute has no value, and from 2.5
  each row shows its ``deployable_uuid`` and ``parent_uuid``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Row
from starlette.responses import Response

from acceleron.api import microversion
from acceleron.api.common import CallDep, json_response, timestamp
from acceleron.api.devices import PageQuery, page_body, sort_key_field
from acceleron.api.errors import ERROR_RESPONSES
from acceleron.api.versions import Link
from acceleron.service import attributes as service

PATH = "/v2/attributes"
router = APIRouter(prefix=PATH, tags=["attributes"], responses=ERROR_RESPONSES)


class AttributeQuery(PageQuery):
    model_config = ConfigDict(extra="forbid")

    deployable_id: int | None = Field(None, description="The deployable's integer id.")
    deployable_uuid: str | None = Field(None, description="The deployable's uuid.")
    key: str | None = Field(None, description="The attribute's own key (not dotted).")
    sort_key: str | None = sort_key_field(service.SORT_KEYS)


class AttributeOut(BaseModel):
    uuid: str
    deployable_id: int
    key: str
    value: str | None = Field(description="None for a parent of nested attributes.")
    created_at: str | None
    updated_at: str | None
    links: list[Link]
    deployable_uuid: str | None = Field(None, description="From 2.5.")
    parent_uuid: str | None = Field(None, description="From 2.5. The parent attribute's.")


class AttributeList(BaseModel):
    attributes: list[AttributeOut]
    attributes_links: list[Link] | None = Field(None, description="The next page, if any.")


def view(attribute: Row[Any], version: microversion.Version, base: str) -> dict[str, Any]:
    data: dict[str, Any] = {
        "uuid": attribute.uuid,
        "deployable_id": attribute.deployable_id,
        "key": attribute.key,
        "value": attribute.value,
        "created_at": timestamp(attribute.created_at),
        "updated_at": timestamp(attribute.updated_at),
        "links": [{"href": f"{base}{PATH}/{attribute.uuid}", "rel": "self"}],
    }
    if version >= microversion.V2_5:
        data["deployable_uuid"] = attribute.deployable_uuid
        data["parent_uuid"] = attribute.parent_uuid
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
