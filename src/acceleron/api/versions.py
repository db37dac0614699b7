"""Version documents at ``/`` and ``/v2``, reachable without a token.

Nova (and keystoneauth's discovery) fetch one of them before any other call:
with an endpoint ending in ``/v2`` the ``/v2`` document, otherwise ``/``, whose
``versions[].links[rel=self]`` leads to ``/v2``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel
from starlette.responses import Response
from typing_extensions import TypedDict

from acceleron import formats, microversion
from acceleron.api.common import base_url, json_response
from acceleron.api.errors import ERROR_RESPONSES
from acceleron.api.overrides import PROVIDER

router = APIRouter(
    dependency_overrides_provider=PROVIDER, tags=["versions"], responses=ERROR_RESPONSES
)


class Link(TypedDict):
    """A link of a response: a typed dict, so views build it and the schema documents it."""

    rel: str
    href: str


class VersionDoc(BaseModel):
    id: str
    status: str
    min_version: str
    max_version: str
    links: list[Link]


class RootDoc(BaseModel):
    name: str
    description: str
    versions: list[VersionDoc]
    default_version: VersionDoc


def _version(request: Request, version_id: str) -> dict[str, Any]:
    return {
        "id": version_id,
        "status": "CURRENT",
        "min_version": str(microversion.MIN_VERSION),
        "max_version": str(microversion.MAX_VERSION),
        "links": [{"rel": "self", "href": f"{base_url(request)}/v2/"}],
    }


@router.get("/", responses={200: {"model": RootDoc}}, summary="List API versions")
async def root(request: Request) -> Response:
    v2 = _version(request, "v2")
    return json_response(
        {
            "name": "Acceleron",
            "description": "Acceleron manages accelerators (FPGAs, GPUs, QAT, ...) for clouds "
            "and speaks the accelerator v2 API.",
            "versions": [v2],
            "default_version": v2,
        }
    )


@router.get("/v2", responses={200: {"model": VersionDoc}}, summary="Show the v2 API version")
@router.get("/v2/", include_in_schema=False)
async def v2(request: Request) -> Response:
    # The host report and task formats this API speaks, for its agents (acceleron.formats).
    headers = {formats.HEADER: formats.OURS.header()}
    return json_response(_version(request, "v2.0"), headers=headers)
