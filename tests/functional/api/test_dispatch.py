"""Routes served without FastAPI's per-request machinery (``acceleron.api.dispatch``)
answer as FastAPI answers: the same request, with ``Content-Type: application/json``
(served directly) and ``application/json; charset=utf-8`` (served by FastAPI), gets the
same answer, for every kind of bad body, a refused caller, a guard and a good body."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from fastapi import Depends, Header
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from starlette.requests import Request
from starlette.responses import Response

from acceleron.api import dispatch
from acceleron.api.app import ROUTERS
from acceleron.api.common import CallDep

PATH = "/v2/device_profiles"
GROUPS = '[{"resources:CUSTOM_ACCELERATOR_FPGA": "1"}]'
LATEST = {"OpenStack-API-Version": "accelerator latest"}
READER = {**LATEST, "X-Roles": "reader", "X-Project-Id": "p2"}
DIRECT, FASTAPI = "application/json", "application/json; charset=utf-8"

CASES: list[tuple[str, str, str, bytes, dict[str, str]]] = [
    ("a good body", "POST", PATH, b'[{"name": "NAME", "groups": ' + GROUPS.encode() + b"}]",
     LATEST),
    ("JSON cut short", "POST", PATH, b'[{"name": ', LATEST),
    ("not UTF-8", "POST", PATH, b'[{"name": "\xff\xfe"}]', LATEST),
    ("nested past the parser's depth", "POST", PATH, b"[" * 100_000, LATEST),
    ("a lone surrogate", "POST", PATH,
     b'[{"name": "\\ud800", "groups": ' + GROUPS.encode() + b"}]", LATEST),
    ("no groups", "POST", PATH, b'[{"name": "x"}]', LATEST),
    ("a field it does not take", "POST", PATH,
     b'[{"name": "x", "groups": ' + GROUPS.encode() + b', "bogus": 1}]', LATEST),
    ("an object, not a list", "POST", PATH, b'{"name": "x"}', LATEST),
    ("many bad items: the first error alone", "POST", PATH, b"[" + b"1," * 5000 + b"1]",
     LATEST),
    ("a caller the policy refuses, before the schema", "POST", PATH, b'{"bad": 1}', READER),
    ("a route older microversions lack", "PATCH", f"{PATH}/NAME",
     b'[{"op": "replace", "path": "/description", "value": "d"}]',
     {"OpenStack-API-Version": "accelerator 2.0"}),
    ("a constraint of the body's own (one operation)", "PATCH",
     "/v2/deployables/2f0f1d4e-8d56-4ad4-9d6c-6c1b0b3e0f11/program", b"[]", LATEST),
    ("a patch of a profile not there", "PATCH", f"{PATH}/2f0f1d4e-8d56-4ad4-9d6c-6c1b0b3e0f11",
     b'[{"op": "replace", "path": "/description", "value": "d"}]', LATEST),
]  # fmt: skip


def answer(api: TestClient, case: tuple[str, str, str, bytes, dict[str, str]], media: str,
           name: str) -> tuple[int, Any]:  # fmt: skip
    _, method, path, body, headers = case
    response = api.request(
        method,
        path.replace("NAME", name),
        content=body.replace(b"NAME", name.encode()),
        headers={**headers, "Content-Type": media},
    )
    found = response.json() if response.content else None
    if isinstance(found, dict) and "errors" in found:
        return response.status_code, [(e["code"], e["detail"]) for e in found["errors"]]
    return response.status_code, None  # a profile: its name and uuid differ


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_a_direct_answer_is_fastapis(
    api: TestClient, case: tuple[str, str, str, bytes, dict[str, str]]
) -> None:
    direct = answer(api, case, DIRECT, "direct")
    fastapi = answer(api, case, FASTAPI, "fastapi")
    assert direct == fastapi
    assert direct[0] < 500


def routes() -> dict[tuple[str, str], APIRoute]:
    return {
        (method, route.path): route
        for router in ROUTERS
        for route in router.routes
        if isinstance(route, APIRoute)
        for method in route.methods or ()
    }


def test_the_hot_routes_are_served_directly(api: TestClient) -> None:
    found = routes()
    for key in [
        ("POST", PATH),
        ("GET", f"{PATH}/{{ident}}"),
        ("PATCH", f"{PATH}/{{ident}}"),
        ("POST", "/v2/accelerator_requests"),
        ("PATCH", "/v2/accelerator_requests"),
        ("PUT", "/v2/hosts/{hostname}/report"),
    ]:
        assert key in found, key
        assert dispatch.is_served_directly(found[key]), key  # the app made them so
    # A query string is FastAPI's to parse and check.
    assert dispatch.shape_of(found[("GET", PATH)]) is None
    assert not dispatch.is_served_directly(found[("GET", PATH)])


def test_only_a_json_body_with_a_length_is_served_directly() -> None:
    def scope(*headers: tuple[bytes, bytes]) -> Any:
        return {"headers": list(headers)}

    json_type = (b"content-type", b"application/json")
    assert dispatch.is_json_with_body(scope(json_type, (b"content-length", b"12")))
    assert not dispatch.is_json_with_body(scope(json_type, (b"content-length", b"0")))
    assert not dispatch.is_json_with_body(scope(json_type))  # chunked
    assert not dispatch.is_json_with_body(
        scope((b"content-type", FASTAPI.encode()), (b"content-length", b"12"))
    )
    assert not dispatch.is_json_with_body(
        scope((b"content-type", b"text/plain"), (b"content-length", b"12"))
    )


async def _takes_the_response(request: Request, response: Response) -> None:
    return None


async def _guard(request: Request) -> None:
    return None


def _route(endpoint: Any) -> APIRoute:
    return APIRoute("/things/{ident}", endpoint, methods=["POST"])


async def _plain(ident: str, call: CallDep) -> Response:
    return Response()


async def _guarded(ident: str, _: Annotated[None, Depends(_guard)]) -> Response:
    return Response()


async def _with_query(ident: str, call: CallDep, q: str | None = None) -> Response:
    return Response()


async def _with_an_int(ident: int, call: CallDep) -> Response:
    return Response()


async def _with_a_dict_answer(ident: str, call: CallDep) -> dict[str, str]:
    return {}


async def _with_a_response_dependency(
    ident: str, _: Annotated[None, Depends(_takes_the_response)]
) -> Response:
    return Response()


async def _with_a_header(ident: str, x_thing: Annotated[str, Header()]) -> Response:
    return Response()


def test_a_handler_of_another_shape_is_left_to_fastapi() -> None:
    assert dispatch.shape_of(_route(_plain)) is not None
    assert dispatch.shape_of(_route(_guarded)) is not None
    for endpoint in [_with_query, _with_an_int, _with_a_dict_answer,
                     _with_a_response_dependency, _with_a_header]:  # fmt: skip
        assert dispatch.shape_of(_route(endpoint)) is None, endpoint.__name__
