"""``/v2/devices``: the physical cards of the inventory, read only, in upstream's shapes.

* GET one returns the device unwrapped; the list ``{"devices": [...]}``;
* the list filters on ``type``, ``vendor`` and ``hostname`` (from 2.5 also on
  ``status``, ``state`` and ``pci_address``) in the database, sorts with
  ``sort_key``/``sort_dir`` and pages with ``limit``/``marker``; a page that is
  not the last ends with ``devices_links``, the next page's link;
* 2.3 adds ``status``; 2.5 adds ``id``, ``pci_address``, ``numa_node``, ``state``,
  ``health``, ``driver_name``, ``vendor_name`` and ``product_id``, and shows the
  board info as objects (JSON strings before, as upstream);
* 2.13 shows ``health`` as healthy/degraded/unhealthy (ok/degraded/failed before),
  with ``health_reason``, ``health_since``, ``maintenance_reason`` and
  ``maintenance_since``, filters on ``health`` (one state or several, comma-separated),
  and adds ``POST /v2/devices/{uuid}/maintenance`` and ``GET /v2/devices/{uuid}/binds``.

The paging parameters and links here are those of every inventory list.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Annotated, Any
from urllib.parse import urlencode

import orjson
from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Row
from starlette.responses import Response

from acceleron.api import microversion, workers
from acceleron.api.common import Call, CallDep, json_response, requires, timestamp
from acceleron.api.errors import ERROR_RESPONSES
from acceleron.api.versions import Link
from acceleron.service import devices as service
from acceleron.service import health
from acceleron.service.listing import Listed, Page, make_page
from acceleron.vocabulary import DEVICE_TYPES

router = APIRouter(prefix="/v2/devices", tags=["devices"], responses=ERROR_RESPONSES)

# Filters that need 2.5: the fields they compare are shown from 2.5 only.
FILTERS_2_5 = ("status", "state", "pci_address")
FILTERS_2_13 = ("health",)


# --- paging, shared by the inventory lists ---------------------------------------------


class PageQuery(BaseModel):
    sort_key: str | None = None
    sort_dir: str | None = Field(None, description="'asc' (the default) or 'desc'.")
    limit: int | None = Field(
        None,
        description="Most items wanted. [api] max_limit caps it and is the default; a "
        "page that is not the last ends with a 'next' link.",
    )
    marker: str | None = Field(
        None, description="uuid of the last item of the previous page: list from after it."
    )

    def page(self, call: Call) -> Page:
        return make_page(
            max_limit=call.request.app.state.conf.api.max_limit,
            sort_key=self.sort_key,
            sort_dir=self.sort_dir,
            limit=self.limit,
            marker=self.marker,
        )


def sort_key_field(keys: tuple[str, ...]) -> Any:
    return Field(None, description=f"Sort on one of {', '.join(keys)} (default created_at).")


def page_body(
    noun: str, items: Sequence[Mapping[str, Any]], listed: Listed[Any], call: Call, path: str
) -> dict[str, Any]:
    """``{noun: items}``, with ``{noun}_links`` leading to the next page when there is one."""
    body: dict[str, Any] = {noun: items}
    if listed.more and items:
        query = [(k, v) for k, v in call.request.query_params.multi_items() if k != "marker"]
        query.append(("marker", items[-1]["uuid"]))
        href = f"{call.base_url}{path}?{urlencode(query)}"
        body[f"{noun}_links"] = [{"rel": "next", "href": href}]
    return body


# --- devices -------------------------------------------------------------------------


class DeviceQuery(PageQuery):
    model_config = ConfigDict(extra="forbid")

    type: str | None = Field(None, description=f"One of {', '.join(DEVICE_TYPES)}.")
    vendor: str | None = Field(None, description="PCI vendor id, e.g. 8086 (or 0x8086).")
    hostname: str | None = Field(None, description="The host the device is in.")
    status: str | None = Field(None, description="From 2.5. 'enabled' or 'maintaining'.")
    state: str | None = Field(None, description="From 2.5. 'present' or 'lost'.")
    pci_address: str | None = Field(None, description="From 2.5. e.g. 0000:0c:00.0.")
    health: str | None = Field(
        None, description="From 2.13. healthy, degraded or unhealthy; several comma-separated."
    )
    sort_key: str | None = sort_key_field(service.SORT_KEYS)


class DeviceOut(BaseModel):
    uuid: str
    type: str
    vendor: str
    model: str
    std_board_info: str | dict[str, Any] | None = Field(
        description="A JSON string before 2.5, an object from 2.5."
    )
    vendor_board_info: str | dict[str, Any] | None = Field(
        description="A JSON string before 2.5, an object from 2.5."
    )
    hostname: str
    status: str | None = Field(None, description="From 2.3. 'enabled' or 'maintaining'.")
    id: int | None = Field(None, description="From 2.5. What deployables' device_id is.")
    pci_address: str | None = Field(None, description="From 2.5.")
    numa_node: int | None = Field(None, description="From 2.5. None when unknown.")
    state: str | None = Field(None, description="From 2.5. 'present', or 'lost'.")
    health: str | None = Field(
        None,
        description="From 2.5. 'ok', 'degraded' or 'failed'; from 2.13 'healthy', "
        "'degraded' or 'unhealthy'.",
    )
    health_reason: str | None = Field(None, description="From 2.13. Why, as the driver says.")
    health_since: str | None = Field(None, description="From 2.13. When first seen so.")
    maintenance_reason: str | None = Field(None, description="From 2.13. Set by an admin.")
    maintenance_since: str | None = Field(None, description="From 2.13.")
    driver_name: str | None = Field(None, description="From 2.5. The driver that found it.")
    vendor_name: str | None = Field(None, description="From 2.5. e.g. INTEL.")
    product_id: str | None = Field(None, description="From 2.5. PCI device id.")
    created_at: str | None
    updated_at: str | None
    links: list[Link]


class DeviceList(BaseModel):
    devices: list[DeviceOut]
    devices_links: list[Link] | None = Field(None, description="The next page, if any.")


def _board_info(value: dict[str, Any] | None, version: microversion.Version) -> Any:
    if version >= microversion.V2_5 or value is None:
        return value
    return orjson.dumps(value).decode()


def view(device: Row[Any], version: microversion.Version, base: str) -> dict[str, Any]:
    data: dict[str, Any] = {
        "uuid": device.uuid,
        "type": device.type,
        "vendor": device.vendor,
        "model": device.model,
        "std_board_info": _board_info(device.std_board_info, version),
        "vendor_board_info": _board_info(device.vendor_board_info, version),
        "hostname": device.hostname,
        "created_at": timestamp(device.created_at),
        "updated_at": timestamp(device.updated_at),
        "links": [{"href": f"{base}/v2/devices/{device.uuid}", "rel": "self"}],
    }
    if version >= microversion.V2_3:
        data["status"] = device.status
    if version >= microversion.V2_5:
        for field in ("id", "pci_address", "numa_node", "state", "health", "driver_name",
                      "vendor_name", "product_id"):  # fmt: skip
            data[field] = getattr(device, field)
    return with_health(data, device, version)


def with_health(
    data: dict[str, Any], row: Row[Any], version: microversion.Version
) -> dict[str, Any]:
    """Health as the version shows it: the old words before 2.13, the reasons from 2.13."""
    if version < microversion.V2_13:
        if "health" in data:
            data["health"] = health.OLD_WORDS.get(row.health, row.health)
        return data
    data["health"] = row.health
    data["health_reason"] = row.health_reason
    data["health_since"] = timestamp(row.health_since)
    data["maintenance_reason"] = row.maintenance_reason
    data["maintenance_since"] = timestamp(row.maintenance_since)
    return data


def _filters(query: DeviceQuery, version: microversion.Version) -> dict[str, str | None]:
    filters: dict[str, str | None] = query.model_dump(include=set(service.FILTERS))
    late = [name for name in FILTERS_2_5 if filters[name] is not None]
    if late:
        microversion.require(version, microversion.V2_5, f"{', '.join(late)}: filtering on it")
    if filters["health"] is not None:
        microversion.require(version, microversion.V2_13, "health: filtering on it")
    return filters


@router.get("", responses={200: {"model": DeviceList}}, summary="List devices")
async def list_devices(call: CallDep, query: Annotated[DeviceQuery, Query()]) -> Response:
    call.authorize("device:get_all")
    listed = await call.run(service.list_devices, _filters(query, call.version), query.page(call))
    items = [view(d, call.version, call.base_url) for d in listed.items]
    return json_response(page_body("devices", items, listed, call, "/v2/devices"))


@router.get("/{uuid}", responses={200: {"model": DeviceOut}}, summary="Show a device")
async def show_device(uuid: str, call: CallDep) -> Response:
    call.authorize("device:get_one")
    device = await call.run(service.get, uuid)
    return json_response(view(device, call.version, call.base_url))


async def _set_status(uuid: str, call: Call, status: str, rule: str) -> Response:
    call.authorize(rule)
    device = await call.run(service.set_status, uuid, status)
    workers.wake_sync(call.request.app.state)
    return json_response(view(device, call.version, call.base_url))


@router.post(
    "/{uuid}/enable",
    responses={200: {"model": DeviceOut}},
    summary="Put a device back in service",
)
async def enable_device(uuid: str, call: CallDep) -> Response:
    return await _set_status(uuid, call, "enabled", "device:enable")


@router.post(
    "/{uuid}/disable",
    responses={200: {"model": DeviceOut}},
    summary="Take a device out of service (status maintaining; its inventory is reserved)",
)
async def disable_device(uuid: str, call: CallDep) -> Response:
    return await _set_status(uuid, call, "maintaining", "device:disable")


class MaintenanceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    maintenance: bool = Field(description="true: into maintenance; false: back in service.")
    reason: str | None = Field(
        None,
        description="Why (required to go in, at most 255 characters). The text before the "
        "first ':' names the reason, which a device profile may tolerate "
        "(accel:tolerations): 'burn-in: new card'.",
    )


def wake_placement(call: Call) -> None:
    workers.wake_sync(call.request.app.state)


@router.post(
    "/{uuid}/maintenance",
    dependencies=[requires(microversion.V2_13, "Device maintenance")],
    responses={200: {"model": DeviceOut}},
    summary="Put a device in maintenance with a reason, or take it out (admin; 2.13)",
)
async def device_maintenance(uuid: str, body: MaintenanceIn, call: CallDep) -> Response:
    call.authorize("device:maintenance")
    device = await call.run(health.set_device_maintenance, uuid, body.maintenance, body.reason)
    wake_placement(call)
    return json_response(view(device, call.version, call.base_url))


class BoundOut(BaseModel):
    arq_uuid: str
    state: str
    instance_uuid: str | None
    deployable: str
    attach_handle: str


class BindsOut(BaseModel):
    device_uuid: str
    status: str
    health: str
    binds: list[BoundOut]


@router.get(
    "/{uuid}/binds",
    dependencies=[requires(microversion.V2_13, "The binds of a device")],
    responses={200: {"model": BindsOut}},
    summary="The accelerator requests holding a device's attach handles (the drain; 2.13)",
)
async def device_binds(uuid: str, call: CallDep) -> Response:
    call.authorize("device:get_one")
    device, binds = await call.run(health.device_with_binds, uuid)
    return json_response({
        "device_uuid": device.uuid,
        "status": device.status,
        "health": device.health,
        "binds": [dataclasses.asdict(b) for b in binds],
    })  # fmt: skip
