"""``/v2/placement``: publishing the inventory to Placement, on demand (2.6).

The API keeps Placement in sync by itself (after each changed report and
periodically); these endpoints let an operator see the plan, force a check, or
move a cloud from flat to nested providers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Body
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.responses import Response

from acceleron.api import microversion
from acceleron.api.common import Call, CallDep, json_response
from acceleron.api.errors import ERROR_RESPONSES
from acceleron.exceptions import Conflict
from acceleron.service.placement import HostSync, PlacementService

router = APIRouter(prefix="/v2/placement", tags=["placement"], responses=ERROR_RESPONSES)


class SyncRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str | None = Field(None, max_length=255, description="Only this host.")
    dry_run: bool = Field(False, description="Show the plan; write nothing.")
    force: bool = Field(
        True, description="Check the providers of unchanged hosts too (false: changed only)."
    )


class MigrateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dry_run: bool = Field(False, description="Show the plan; write nothing.")


class ActionOut(BaseModel):
    op: str = Field(description="create, inventories, traits, delete, retire or remove_flat")
    uuid: str
    name: str
    detail: str


class HostSyncOut(BaseModel):
    hostname: str
    skipped: bool
    actions: list[ActionOut]
    errors: list[str]


class SyncOut(BaseModel):
    hosts: list[HostSyncOut]


def _view(results: Sequence[HostSync]) -> dict[str, Any]:
    return {
        "hosts": [
            {
                "hostname": r.hostname,
                "skipped": r.skipped,
                "actions": [
                    {"op": a.op, "uuid": a.uuid, "name": a.name, "detail": a.detail}
                    for a in r.actions
                ],
                "errors": r.errors,
            }
            for r in results
        ]
    }


def _service(call: Call) -> PlacementService:
    if call.version < microversion.V2_6:
        raise HTTPException(404, "The placement API needs microversion 2.6 or later.")
    call.authorize("placement:sync")
    service: PlacementService | None = call.request.app.state.placement
    if service is None:
        raise Conflict("Placement is disabled: set [placement] mode to remote or embedded.")
    return service


@router.post("/sync", responses={200: {"model": SyncOut}}, summary="Sync Placement now (2.6)")
async def sync(body: Annotated[SyncRequest, Body()], call: CallDep) -> Response:
    service = _service(call)

    def run() -> list[HostSync]:
        syncer = service.syncer()
        if body.host:
            with syncer.lock:
                return [syncer.sync_host(body.host, force=body.force, dry_run=body.dry_run)]
        if body.force or body.dry_run:
            return syncer.sync_all(dry_run=body.dry_run)
        return syncer.sync_pending()

    return json_response(_view(await run_in_threadpool(run)))


@router.post(
    "/migrate-to-nested",
    responses={200: {"model": SyncOut}},
    summary="Move every host from flat to nested providers (2.6)",
)
async def migrate_to_nested(body: Annotated[MigrateRequest, Body()], call: CallDep) -> Response:
    service = _service(call)
    if not service.options.nested:
        raise Conflict("Set [placement] nested = true first: this moves to nested providers.")

    def run() -> list[HostSync]:
        return service.syncer().migrate_to_nested(dry_run=body.dry_run)

    return json_response(_view(await run_in_threadpool(run)))
