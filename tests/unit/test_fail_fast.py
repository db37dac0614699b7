"""Every list and mapping of every request body the API takes stops validating at its
first bad item (``acceleron.failfast``): a body of 50,000 wrong items costs one error."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from fastapi.routing import APIRoute
from pydantic import TypeAdapter

from acceleron.api.app import ROUTERS
from acceleron.failfast import FailFast

COLLECTIONS = {"list", "tuple", "set", "frozenset", "dict", "generator"}


def slow_collections(schema: Any, where: str = "body") -> list[str]:
    """Where ``schema`` (a pydantic core schema) holds a collection that keeps every
    error of its items."""
    definitions: dict[str, Any] = {}
    found: list[str] = []
    seen: set[str] = set()

    def walk(node: Any, where: str) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item, where)
            return
        if not isinstance(node, dict):
            return
        kind = node.get("type")
        if kind == "definitions":
            definitions.update({item["ref"]: item for item in node["definitions"]})
        if kind == "definition-ref":
            if node["schema_ref"] not in seen:
                seen.add(node["schema_ref"])
                walk(definitions[node["schema_ref"]], where)
            return
        if kind in COLLECTIONS and not node.get("fail_fast"):
            found.append(f"{where}: {kind}")
        for key, value in node.items():
            walk(value, f"{where}.{node['name']}" if key == "schema" and "name" in node else where)

    walk(schema, where)
    return found


BODIES = {
    f"{sorted(route.methods or ())[0]} {route.path}": route.body_field
    for router in ROUTERS
    for route in router.routes
    if isinstance(route, APIRoute) and route.body_field is not None
}


@pytest.mark.parametrize("route", sorted(BODIES))
def test_every_collection_of_a_body_fails_fast(route: str) -> None:
    info = BODIES[route].field_info
    constrained: Any = Annotated[info.annotation, info]
    assert slow_collections(TypeAdapter(constrained).core_schema) == []


def test_the_walk_finds_a_collection_that_keeps_every_error() -> None:
    assert slow_collections(TypeAdapter(dict[str, list[int]]).core_schema) == [
        "body: dict",
        "body: list",
    ]
    assert slow_collections(TypeAdapter(Annotated[list[int], FailFast]).core_schema) == []


def test_fail_fast_annotates_collections_alone() -> None:
    with pytest.raises(TypeError, match="FailFast annotates a list"):
        TypeAdapter(Annotated[int, FailFast])
