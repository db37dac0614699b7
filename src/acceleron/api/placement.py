"""``/v2/placement``: publishing the inventory to Placement, on demand (2.6), and
reconciling Placement's allocations with the accelerator requests (2.9).

The API keeps Placement in sync by itself (after each changed report and
periodically), and looks for leaks every ``[reconciler] interval`` seconds; these
endpoints let an operator see the plan, force a check, move a cloud from flat to
nested providers, or see and free the leaks now.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Body, FastAPI
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from acceleron import microversion
from acceleron.api.common import Call, CallDep, json_response, requires
from acceleron.api.errors import ERROR_RESPONSES
from acceleron.api.overrides import PROVIDER
from acceleron.api.services import services
from acceleron.exceptions import Conflict
from acceleron.service.placement import PlacementService
from acceleron.service.publish import HostSync
from acceleron.service.reconciler import Leak, Reconciler

router = APIRouter(
    dependency_overrides_provider=PROVIDER,
    prefix="/v2/placement",
    tags=["placement"],
    responses=ERROR_RESPONSES,
    dependencies=[requires(microversion.V2_6, "The placement API")],
)


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


class ReconcileRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dry_run: bool = Field(
        False, description="Show the leaks and what would be freed; free nothing."
    )


class LeakOut(BaseModel):
    kind: str = Field(
        description="allocation (no request holds it), request (no "
        "allocation holds its consumer) or claim (a claim whose maker is "
        "gone)"
    )
    consumer: str
    allocations: dict[str, dict[str, int]] = Field(
        description="kind allocation: Acceleron's part, provider uuid -> class -> amount; "
        "kind claim: what the claim allocated."
    )
    requests: list[str] = Field(
        description="kind request: the requests holding handles; kind claim: the requests "
        "it created."
    )
    seen_for: float = Field(
        description="Seconds the passes have seen it without a break (kind claim: since "
        "the claim last moved)."
    )
    action: str = Field(
        description="waiting (not yet [reconciler] grace seconds over two passes), "
        "would free (dry run), freed, released, reported, or failed: why; kind claim: "
        "undone (it was being made), released (it was being released), would undo or "
        "would release (dry run), gone meanwhile, or failed: why."
    )


class ReconcileOut(BaseModel):
    leaks: list[LeakOut]


class ActionOut(BaseModel):
    op: str = Field(description="create, move, inventories, traits, delete, retire or remove_flat")
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
    call.authorize("placement:sync")
    service = call.placement
    if service is None:
        raise Conflict("Placement is disabled: set [placement] mode to remote or embedded.")
    return service


@router.post("/sync", responses={200: {"model": SyncOut}}, summary="Sync Placement now (2.6)")
async def sync(body: Annotated[SyncRequest, Body()], call: CallDep) -> Response:
    service = _service(call)

    def run() -> list[HostSync]:
        syncer = service.syncer()
        if body.host:
            with syncer.locks.hold(body.host):
                return [syncer.sync_host(body.host, force=body.force, dry_run=body.dry_run)]
        if body.force or body.dry_run:
            return syncer.sync_all(dry_run=body.dry_run)
        return syncer.sync_pending()

    return json_response(_view(await call.outbound(run)))


def reconciler_of(app: FastAPI) -> Reconciler:
    """The API's one reconciler (its memory of leaks seen is what ``grace`` counts on),
    made on first use for ``app.state.placement``."""
    state, parts = app.state, services(app)
    if state.reconciler is None:
        placement: PlacementService = state.placement
        state.reconciler = Reconciler(
            parts.db,
            lambda: placement.syncer().client,
            parts.conf.reconciler.grace,
            parts.conf.claims.timeout,
            parts.cleaning,
            verifier=placement.syncer,
        )
    found: Reconciler = state.reconciler
    return found


def _leak_view(leak: Leak) -> dict[str, Any]:
    return {
        "kind": leak.kind,
        "consumer": leak.consumer,
        "allocations": {rp: dict(r) for rp, r in leak.allocations.items()},
        "requests": list(leak.requests),
        "seen_for": leak.seen_for,
        "action": leak.action,
    }


@router.post(
    "/reconcile",
    responses={200: {"model": ReconcileOut}},
    summary="Find and free allocations and requests that no longer explain each other (2.9)",
    dependencies=[requires(microversion.V2_9, "Reconciling")],
    description="Allocations of Acceleron's resources that no request holds, and requests "
    "holding handles for consumers that hold no allocation (docs/reconciler.md). A leak "
    "is freed once seen for [reconciler] grace seconds over two passes at least (the "
    "API's own periodic passes count).",
)
async def reconcile(body: Annotated[ReconcileRequest, Body()], call: CallDep) -> Response:
    _service(call)
    reconciler = reconciler_of(call.request.app)
    leaks = await call.outbound(functools.partial(reconciler.run, dry_run=body.dry_run))
    return json_response({"leaks": [_leak_view(leak) for leak in leaks]})


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

    return json_response(_view(await call.outbound(run)))
