"""``/ui``: the read-only operator page, three static files served by the API itself.

The page (``ui/index.html``, ``ui.js``, ``ui.css``) is plain HTML and JavaScript: no
build step, nothing fetched from elsewhere. It reads the REST API like any client, with
the Keystone token the user pastes (kept in the tab's session storage) or, in the
all-in-one, none. Serving it needs no token; what it shows needs one.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from starlette.exceptions import HTTPException
from starlette.responses import Response

from acceleron.api.overrides import PROVIDER

router = APIRouter(dependency_overrides_provider=PROVIDER, prefix="/ui", include_in_schema=False)
FILES = {
    "index.html": "text/html; charset=utf-8",
    "ui.js": "text/javascript; charset=utf-8",
    "ui.css": "text/css; charset=utf-8",
}
# Only these sources: the page loads nothing it was not served by this API.
POLICY = "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'"


def _file(name: str) -> Response:
    if name not in FILES:
        raise HTTPException(404, f"The page has no file {name[:64]!r}.")
    data = resources.files("acceleron.api").joinpath("ui", name).read_bytes()
    headers = {"Content-Security-Policy": POLICY, "Cache-Control": "no-cache"}
    return Response(data, media_type=FILES[name], headers=headers)


@router.get("")
async def page() -> Response:
    return _file("index.html")


@router.get("/{name}")
async def asset(name: str) -> Response:
    return _file(name)
