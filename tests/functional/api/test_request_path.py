"""How a request reaches its handler: FastAPI's one way for every route.

Every route is served by FastAPI with its dependency solver: the path parameters' own
constraints hold, ``app.dependency_overrides`` holds, and the answers for bad bodies
are the ones clients always had (pinned here, status, code and message, for both
spellings of the JSON media type). No module reads a private attribute of FastAPI,
Starlette or pydantic (an AST walk of the source)."""

from __future__ import annotations

import ast
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import pytest
from fastapi import APIRouter
from fastapi import Path as PathParam
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from oslo_config import cfg
from starlette.responses import Response

import acceleron
import os_acc
from acceleron.api import app as app_module
from acceleron.api.app import create_app
from acceleron.api.common import CallDep, json_response
from acceleron.api.overrides import PROVIDER
from acceleron.db.session import Database
from acceleron.exceptions import Forbidden

PATH = "/v2/device_profiles"
GROUPS = '[{"resources:CUSTOM_ACCELERATOR_FPGA": "1"}]'
LATEST = {"OpenStack-API-Version": "accelerator latest"}
READER = {**LATEST, "X-Roles": "reader", "X-Project-Id": "p2"}
PLAIN, WITH_CHARSET = "application/json", "application/json; charset=utf-8"
BAD = "acceleron.invalid_input"
UUID = "2f0f1d4e-8d56-4ad4-9d6c-6c1b0b3e0f11"
Answer = tuple[int, list[tuple[str, str]] | None]

# (what, method, path, body, headers, the answer), the answers as they were when some
# routes were served around FastAPI's solver (api/dispatch.py, gone).
CASES: list[tuple[str, str, str, bytes, dict[str, str], Answer]] = [
    ("a good body", "POST", PATH, b'[{"name": "NAME", "groups": ' + GROUPS.encode() + b"}]",
     LATEST, (201, None)),
    ("JSON cut short", "POST", PATH, b'[{"name": ', LATEST,
     (400, [(BAD, "Invalid request: 10: JSON decode error.")])),
    ("not UTF-8", "POST", PATH, b'[{"name": "\xff\xfe"}]', LATEST,
     (400, [(BAD, "There was an error parsing the body")])),
    ("nested past the parser's depth", "POST", PATH, b"[" * 100_000, LATEST,
     (400, [(BAD, "There was an error parsing the body")])),
    ("a lone surrogate", "POST", PATH,
     b'[{"name": "\\ud800", "groups": ' + GROUPS.encode() + b"}]", LATEST,
     (400, [(BAD, "The JSON body holds a lone UTF-16 surrogate (a \\ud800 to \\udfff "
                  "escape without its pair), which is not a character; send text as "
                  "valid Unicode.")])),
    ("no groups", "POST", PATH, b'[{"name": "x"}]', LATEST,
     (400, [(BAD, "Invalid request: 0.groups: Field required.")])),
    ("a field it does not take", "POST", PATH,
     b'[{"name": "x", "groups": ' + GROUPS.encode() + b', "bogus": 1}]', LATEST,
     (400, [(BAD, "Invalid request: 0.bogus: Extra inputs are not permitted.")])),
    ("an object, not a list", "POST", PATH, b'{"name": "x"}', LATEST,
     (400, [(BAD, "Invalid request: body: Input should be a valid list.")])),
    ("many bad items: the first error alone", "POST", PATH, b"[" + b"1," * 5000 + b"1]",
     LATEST, (400, [(BAD, "Invalid request: 0: Input should be a valid dictionary or "
                          "instance of DeviceProfileIn.")])),
    ("many bad groups: the first error alone", "POST", PATH,
     b'[{"name": "x", "groups": [' + b"1," * 5000 + b"1]}]", LATEST,
     (400, [(BAD, "Invalid request: 0.groups.0: Input should be a valid dictionary.")])),
    ("many bad values in a group: the first error alone", "POST", PATH,
     b'[{"name": "x", "groups": [{' + b"".join(b'"k%d": 1,' % n for n in range(5000))
     + b'"k": 1}]}]', LATEST,
     (400, [(BAD, "Invalid request: 0.groups.0.k0: Input should be a valid string.")])),
    ("many bad operations of a binding: the first error alone", "PATCH",
     "/v2/accelerator_requests", b'{"' + UUID.encode() + b'": [' + b"1," * 5000 + b"1]}",
     LATEST, (400, [(BAD, f"Invalid request: {UUID}.0: Input should be a valid "
                          "dictionary or instance of PatchOp.")])),
    ("a caller the policy refuses, before the schema", "POST", PATH, b'{"bad": 1}', READER,
     (403, [("acceleron.forbidden",
             "Policy does not allow acceleron:device_profile:create to be performed.")])),
    ("a route older microversions lack", "PATCH", f"{PATH}/NAME",
     b'[{"op": "replace", "path": "/description", "value": "d"}]',
     {"OpenStack-API-Version": "accelerator 2.0"},
     (405, [("acceleron.method_not_allowed",
             "Changing a device profile needs microversion 2.4 or later.")])),
    ("a constraint of the body's own (one operation)", "PATCH",
     f"/v2/deployables/{UUID}/program", b"[]", LATEST,
     (400, [(BAD, "Invalid request: body: List should have at least 1 item after "
                  "validation, not 0.")])),
    ("a patch of a profile not there", "PATCH", f"{PATH}/{UUID}",
     b'[{"op": "replace", "path": "/description", "value": "d"}]', LATEST,
     (404, [("acceleron.not_found", f"Device profile '{UUID}' not found.")])),
]  # fmt: skip


def answer(
    api: TestClient,
    case: tuple[str, str, str, bytes, dict[str, str], Answer],
    media: str,
    name: str,
) -> Answer:
    _, method, path, body, headers, _ = case
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
def test_a_bad_body_is_answered_as_it_always_was(
    api: TestClient, case: tuple[str, str, str, bytes, dict[str, str], Answer]
) -> None:
    assert answer(api, case, PLAIN, "plain") == case[-1]
    assert answer(api, case, WITH_CHARSET, "charset") == case[-1]


SHORT = APIRouter(prefix=PATH)


@SHORT.get("/{ident}")
async def _show_a_short_name(
    ident: Annotated[str, PathParam(max_length=8)], call: CallDep
) -> Response:
    return json_response({"ident": ident})


@pytest.fixture
def short_names(
    conf: cfg.ConfigOpts, db: Database, monkeypatch: pytest.MonkeyPatch
) -> Iterator[TestClient]:
    """The app with a route of its own before the others: the profile show's path (its
    policy rule), whose parameter takes at most 8 characters."""
    monkeypatch.setattr(app_module, "ROUTERS", (SHORT, *app_module.ROUTERS))
    with TestClient(create_app(conf, db), raise_server_exceptions=False) as client:
        yield client


def test_a_path_parameters_constraint_holds(short_names: TestClient) -> None:
    assert short_names.get(f"{PATH}/12345678", headers=LATEST).json() == {"ident": "12345678"}
    refused = short_names.get(f"{PATH}/123456789", headers=LATEST)
    assert refused.status_code == 400
    assert [(e["code"], e["detail"]) for e in refused.json()["errors"]] == [
        (BAD, "Invalid request: path.ident: String should have at most 8 characters.")
    ]


def test_dependency_overrides_hold(api: TestClient) -> None:
    """A test (or an operator's wrapper) that overrides the handlers' one dependency is
    obeyed on every route, the hot ones too."""
    (_, depends) = typing.get_args(CallDep)

    async def refuse() -> None:
        raise Forbidden("Overridden.")

    api.app.dependency_overrides[depends.dependency] = refuse  # type: ignore[attr-defined]
    for method, path, body in [
        ("GET", f"{PATH}/{UUID}", None),
        ("POST", PATH, b'[{"name": "x", "groups": ' + GROUPS.encode() + b"}]"),
        ("PATCH", "/v2/accelerator_requests", b"{}"),
        ("PUT", "/v2/hosts/h1/report", b"{}"),
    ]:
        refused = api.request(method, path, content=body, headers={**LATEST, "Content-Type": PLAIN})
        assert refused.status_code == 403, (method, path)
        assert refused.json()["errors"][0]["detail"] == "Overridden.", (method, path)


def test_every_route_asks_the_serving_app_for_overrides(api: TestClient) -> None:
    """A router made without ``api.overrides.PROVIDER`` would ignore them silently."""
    routes = [route for route in api.app.routes if isinstance(route, APIRoute)]  # type: ignore[attr-defined]
    assert routes
    for route in routes:
        assert route.dependency_overrides_provider is PROVIDER, route.path


OURS = ("acceleron", "os_acc", "tests", "__future__")
# Names public though they start with "_": namedtuple's and SQLAlchemy's Row methods
# (named so to keep clear of field names), and the documented os._exit, sys._getframe.
PUBLIC = frozenset({"_replace", "_asdict", "_fields", "_make", "_mapping", "_exit", "_getframe"})


def _library(module: str) -> bool:
    """Any module but ours: the standard library's and every dependency's."""
    return bool(module) and module.split(".")[0] not in OURS


def _private(name: str) -> bool:
    """A name a library keeps to itself: ``_x``, or one of pydantic's own dunders."""
    own = name.startswith("_") and not name.startswith("__") and name not in PUBLIC
    return own or name.startswith("__pydantic")


def _imports(tree: ast.AST) -> tuple[set[str], list[str]]:
    """The names bound to what is imported from the libraries, and the private modules
    and names imported."""
    names: set[str] = set()
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _library(alias.name):
                    names.add((alias.asname or alias.name).split(".")[0])
                    found += [f"import {alias.name}"] * _private_path(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _library(node.module or ""):
            found += [f"from {node.module} import ..."] * _private_path(node.module or "")
            for alias in node.names:
                names.add(alias.asname or alias.name)
                found += [f"from {node.module} import {alias.name}"] * _private(alias.name)
    return names, found


def _private_path(module: str) -> bool:
    return any(_private(part) for part in module.split("."))


def _root(node: ast.expr) -> ast.expr:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node


def _by_name(node: ast.AST) -> str | None:
    """The private name a ``getattr``/``setattr``/``hasattr``/``delattr`` call spells."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
        and _private(node.args[1].value)
    ):
        return node.args[1].value
    return None


def private_reads(source: str) -> list[str]:
    """What ``source`` reads of a library's private names (the standard library's and
    every dependency's): a private module or name imported, an attribute ``_x`` of a name
    imported from one,
    pydantic's own dunders, and any ``getattr``/``setattr``/``hasattr`` of a private
    name spelled as a string (a read that way names no object to tell whose it is)."""
    tree = ast.parse(source)
    imported, found = _imports(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            root = _root(node.value)
            if (isinstance(root, ast.Name) and root.id in imported) or node.attr.startswith(
                "__pydantic"
            ):
                found.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Call) and (name := _by_name(node)) is not None:
            found.append(f"line {node.lineno}: {name!r} by name")
    return found


def test_the_check_finds_a_private_read() -> None:
    assert private_reads("from fastapi.routing import APIRoute\nAPIRoute._x\n")
    assert private_reads("import pydantic\npydantic.main._model_construction\n")
    assert private_reads("from fastapi._compat import v2\n")
    assert private_reads("getattr(route, '_embed_body_fields', True)\n")
    assert private_reads("stand_in.__pydantic_complete__ = False\n")
    assert private_reads("from oslo_limit import limit\nlimit._SDK_CONNECTION = None\n")
    assert private_reads("import argparse\ndef f(g: argparse._ArgumentGroup) -> None: ...\n")
    assert not private_reads("from fastapi import FastAPI\nFastAPI.__name__\nself._own\n")


def test_no_module_reads_a_librarys_private_attribute() -> None:
    found = {
        str(path): reads
        for package in (acceleron, os_acc)
        for path in sorted(Path(str(package.__file__)).parent.rglob("*.py"))
        if (reads := private_reads(path.read_text()))
    }
    assert found == {}
