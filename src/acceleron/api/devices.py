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
  and adds ``POST /v2/devices/{uuid}/maintenance`` and ``GET /v2/devices/{uuid}/binds``;
* 2.17 shows ``cleaning`` and adds ``GET /v2/devices/{uuid}/history``;
* 2.18 shows where the device sits: ``pcie_switch`` and ``nvlink_domain``.

The paging parameters and links here are those of every inventory list.

A device's response has one schema per microversion that changed it (``Device_2_0``,
``Device_2_3``, ``Device_2_5``, ``Device_2_13``, ``Device_2_17``, ``Device_2_18``):
typed dicts that both document the response (OpenAPI) and build it (``view``), so a
renamed field fails the type check.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, TypeAlias
from urllib.parse import urlencode

import orjson
from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response
from typing_extensions import TypedDict

from acceleron import microversion
from acceleron.api import workers
from acceleron.api.common import Call, CallDep, json_response, requires, timestamp
from acceleron.api.errors import ERROR_RESPONSES
from acceleron.api.overrides import PROVIDER
from acceleron.api.versions import Link
from acceleron.service import devices as service
from acceleron.service import health, tenancies
from acceleron.service.deployables import DeployableRecord
from acceleron.service.listing import Listed, Page, make_page
from acceleron.vocabulary import DEVICE_TYPES

router = APIRouter(
    dependency_overrides_provider=PROVIDER,
    prefix="/v2/devices",
    tags=["devices"],
    responses=ERROR_RESPONSES,
)

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
            max_limit=call.services.conf.api.max_limit,
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


BOARD_INFO_DOC = "A JSON string before 2.5, an object from 2.5."


class Device_2_0(TypedDict):  # named after its microversion
    """A device, 2.0 to 2.2."""

    uuid: str
    type: str
    vendor: str
    model: str
    std_board_info: Annotated[str | dict[str, Any] | None, Field(description=BOARD_INFO_DOC)]
    vendor_board_info: Annotated[str | dict[str, Any] | None, Field(description=BOARD_INFO_DOC)]
    hostname: str
    created_at: str | None
    updated_at: str | None
    links: list[Link]


class Device_2_3(Device_2_0):
    """A device, 2.3 and 2.4: its status."""

    status: Annotated[str, Field(description="'enabled' or 'maintaining'.")]


class Device_2_5(Device_2_3):
    """A device, 2.5 to 2.12: where it is, its state and health, what found it."""

    id: Annotated[int, Field(description="What deployables' device_id is.")]
    pci_address: str
    numa_node: Annotated[int | None, Field(description="None when unknown.")]
    state: Annotated[str, Field(description="'present', or 'lost'.")]
    health: Annotated[
        str,
        Field(
            description="'ok', 'degraded' or 'failed' before 2.13; 'healthy', 'degraded' or "
            "'unhealthy' from 2.13."
        ),
    ]
    driver_name: Annotated[str, Field(description="The driver that found it.")]
    vendor_name: Annotated[str, Field(description="e.g. INTEL.")]
    product_id: Annotated[str, Field(description="PCI device id.")]


class HealthDetail(TypedDict):
    """Why a device or a deployable has its health, and its maintenance (from 2.13)."""

    health_reason: Annotated[str | None, Field(description="Why, as the driver says.")]
    health_since: Annotated[str | None, Field(description="When first seen so.")]
    maintenance_reason: Annotated[str | None, Field(description="Set by an admin.")]
    maintenance_since: str | None


class Device_2_13(Device_2_5, HealthDetail):
    """A device, from 2.13: health in the words healthy/degraded/unhealthy, why, and its
    maintenance."""


class Device_2_17(Device_2_13):
    """A device, from 2.17: what of it is being cleaned between tenants."""

    cleaning: Annotated[
        int,
        Field(
            description="How many of its attach handles were given back and are not clean "
            "yet (waiting, being cleaned, or failed to be): held reserved in Placement."
        ),
    ]


class Device_2_18(Device_2_17):
    """A device, from 2.18: where it sits, beside its NUMA node."""

    pcie_switch: Annotated[
        str | None,
        Field(
            description="The PCI address of its nearest PCIe switch (the switch's upstream "
            "port); devices behind one switch share it. None when it hangs off a root port "
            "or its driver cannot tell."
        ),
    ]
    nvlink_domain: Annotated[
        str | None,
        Field(
            description="A name the devices of its host joined to it by NVLink or NVSwitch "
            "share. None when it has no NVLink peer."
        ),
    ]


DeviceOut: TypeAlias = (
    Device_2_0 | Device_2_3 | Device_2_5 | Device_2_13 | Device_2_17 | Device_2_18
)


class DeviceList(BaseModel):
    devices: list[DeviceOut]
    devices_links: list[Link] | None = Field(None, description="The next page, if any.")


def _board_info(
    value: dict[str, Any] | None, version: microversion.Version
) -> str | dict[str, Any] | None:
    if version >= microversion.V2_5 or value is None:
        return value
    return orjson.dumps(value).decode()


def health_detail(record: service.DeviceRecord | DeployableRecord) -> HealthDetail:
    return HealthDetail(
        health_reason=record.health_reason,
        health_since=timestamp(record.health_since),
        maintenance_reason=record.maintenance_reason,
        maintenance_since=timestamp(record.maintenance_since),
    )


def view(device: service.DeviceRecord, version: microversion.Version, base: str) -> DeviceOut:
    data = Device_2_0(
        uuid=device.uuid,
        type=device.type,
        vendor=device.vendor,
        model=device.model,
        std_board_info=_board_info(device.std_board_info, version),
        vendor_board_info=_board_info(device.vendor_board_info, version),
        hostname=device.hostname,
        created_at=timestamp(device.created_at),
        updated_at=timestamp(device.updated_at),
        links=[Link(href=f"{base}/v2/devices/{device.uuid}", rel="self")],
    )
    if version < microversion.V2_3:
        return data
    with_status = Device_2_3(**data, status=device.status)
    if version < microversion.V2_5:
        return with_status
    latest = version >= microversion.V2_13
    rich = Device_2_5(
        **with_status,
        id=device.id,
        pci_address=device.pci_address,
        numa_node=device.numa_node,
        state=device.state,
        health=device.health if latest else health.OLD_WORDS.get(device.health, device.health),
        driver_name=device.driver_name,
        vendor_name=device.vendor_name,
        product_id=device.product_id,
    )
    if not latest:
        return rich
    detailed = Device_2_13(**rich, **health_detail(device))
    if version < microversion.V2_17:
        return detailed
    cleaning = Device_2_17(**detailed, cleaning=device.cleaning)
    if version < microversion.V2_18:
        return cleaning
    return Device_2_18(
        **cleaning, pcie_switch=device.pcie_switch, nvlink_domain=device.nvlink_domain
    )


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


class BoundOut(TypedDict):
    arq_uuid: str
    state: str
    instance_uuid: str | None
    deployable: str
    attach_handle: str


class BindsOut(TypedDict):
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
    bound = [
        BoundOut(
            arq_uuid=b.arq_uuid,
            state=b.state,
            instance_uuid=b.instance_uuid,
            deployable=b.deployable,
            attach_handle=b.attach_handle,
        )
        for b in binds
    ]
    return json_response(
        BindsOut(device_uuid=device.uuid, status=device.status, health=device.health, binds=bound)
    )


class TenancyOut(TypedDict):
    deployable: Annotated[str, Field(description="Its key in the device (region0, ...).")]
    attach_handle: str
    project_id: str | None
    instance_uuid: str | None
    arq_uuid: str
    bound_at: str | None
    released_at: str
    held: Annotated[
        dict[str, Any] | None,
        Field(description="What its region held when it was given back (its provenance)."),
    ]
    cleaning_method: Annotated[str, Field(description="none, reset, scrub or command.")]
    cleaning: Annotated[
        str,
        Field(description="pending, done, failed, or skipped (cleaning_error says why)."),
    ]
    cleaned_at: str | None
    cleaning_seconds: float | None
    cleaning_error: str | None


class HistoryOut(TypedDict):
    device_uuid: str
    tenancies: list[TenancyOut]


@router.get(
    "/{uuid}/history",
    dependencies=[requires(microversion.V2_17, "A device's history")],
    responses={200: {"model": HistoryOut}},
    summary="A device's tenancies, newest first, and how each was cleaned (admin; 2.17)",
    description="Each time a request gave one of the device's attach handles back: the "
    "project, the instance, what its region held, and how and when it was cleaned. Kept "
    "[cleaning] history_days.",
)
async def device_history(
    uuid: str,
    call: CallDep,
    limit: Annotated[int, Query(ge=1, le=tenancies.MAX_LIMIT, description="Most wanted.")] = 100,
) -> Response:
    call.authorize("device:history")
    found = await call.run(tenancies.history, uuid, limit)
    items = [
        TenancyOut(
            deployable=t.deployable,
            attach_handle=t.handle,
            project_id=t.project_id,
            instance_uuid=t.instance_uuid,
            arq_uuid=t.arq_uuid,
            bound_at=timestamp(t.bound_at),
            released_at=timestamp(t.released_at) or "",
            held=t.held,
            cleaning_method=t.method,
            cleaning=t.cleaning,
            cleaned_at=timestamp(t.cleaned_at),
            cleaning_seconds=t.cleaning_seconds,
            cleaning_error=t.cleaning_error,
        )
        for t in found
    ]
    return json_response(HistoryOut(device_uuid=uuid, tenancies=items))
