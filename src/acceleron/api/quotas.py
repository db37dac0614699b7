"""``/v2/quotas/{project_id}`` (2.14): a project's usage against its limits.

One entry per accelerator resource class that a device profile asks for, that the
project holds, or (``[quota] driver = config``) that has a limit: the limit's name
(``class:<RESOURCE_CLASS>``), the limit (null: unlimited) and the usage, the
accelerators the project's bound or binding requests hold.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

from fastapi import APIRouter, Path
from pydantic import BaseModel, Field
from starlette.responses import Response

from acceleron import microversion
from acceleron.api.common import CallDep, json_response, requires
from acceleron.api.errors import ERROR_RESPONSES
from acceleron.api.overrides import PROVIDER
from acceleron.service import quotas as service

router = APIRouter(
    dependency_overrides_provider=PROVIDER,
    prefix="/v2/quotas",
    tags=["quotas"],
    responses=ERROR_RESPONSES,
    dependencies=[requires(microversion.V2_14, "The quotas API")],
)


class QuotaOut(BaseModel):
    resource: str = Field(description="The limit's name: class:<RESOURCE_CLASS>.")
    resource_class: str
    limit: int | None = Field(description="Accelerators the project may hold; null: unlimited.")
    usage: int = Field(description="Accelerators its bound or binding requests hold.")


class ProjectQuotas(BaseModel):
    project_id: str
    driver: str = Field(description="Where the limits come from: config or unified_limits.")
    quotas: list[QuotaOut]


class QuotasWrapped(BaseModel):
    quota_set: ProjectQuotas


@router.get(
    "/{project_id}",
    responses={200: {"model": QuotasWrapped}},
    summary="Show a project's usage against its limits (2.14)",
)
async def show_quotas(project_id: Annotated[str, Path(max_length=255)], call: CallDep) -> Response:
    call.authorize("quota:get", {"project_id": project_id})
    limits = call.services.limits
    found = await call.run_counted(service.show, limits, project_id)
    return json_response(
        {
            "quota_set": {
                "project_id": project_id,
                "driver": limits.driver,
                "quotas": [dataclasses.asdict(q) for q in found],
            }
        }
    )
