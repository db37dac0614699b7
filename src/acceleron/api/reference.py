"""The API reference, rendered as Markdown from the application's own OpenAPI schema.

``make docs`` writes it to docs/api/reference.md (and the schema itself to
docs/api/openapi.json); a test fails when the committed copy differs from what
the code generates, so the reference cannot drift from the API.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI

from acceleron import microversion

METHODS = ("get", "put", "post", "patch", "delete")


def openapi(app: FastAPI) -> dict[str, Any]:
    return app.openapi()


def _schema_name(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if schema.get("type") == "array" and "items" in schema:
        return f"list of {_schema_name(schema['items'])}"
    if "anyOf" in schema:
        return " or ".join(_schema_name(s) for s in schema["anyOf"])
    return str(schema.get("type", "object"))


def _parameters(operation: dict[str, Any]) -> list[str]:
    rows = []
    for param in operation.get("parameters", []):
        required = "yes" if param.get("required") else "no"
        description = param.get("description") or param.get("schema", {}).get("description", "")
        rows.append(f"| `{param['name']}` | {param['in']} | {required} | {description} |")
    if not rows:
        return []
    return ["| parameter | in | required | description |", "|---|---|---|---|", *rows, ""]


def _body(operation: dict[str, Any]) -> list[str]:
    content = operation.get("requestBody", {}).get("content", {})
    schema = content.get("application/json", {}).get("schema")
    return [f"Request body: {_schema_name(schema)} (JSON).", ""] if schema else []


def _responses(operation: dict[str, Any]) -> list[str]:
    lines = []
    for status, response in operation.get("responses", {}).items():
        schema = response.get("content", {}).get("application/json", {}).get("schema")
        what = f" — {_schema_name(schema)}" if schema else ""
        lines.append(f"- `{status}` {response.get('description', '')}{what}")
    return ["Responses:", "", *lines, ""]


def _operation(path: str, method: str, operation: dict[str, Any]) -> list[str]:
    return [
        f"### `{method.upper()} {path}`",
        "",
        operation.get("summary", ""),
        "",
        *_parameters(operation),
        *_body(operation),
        *_responses(operation),
    ]


def _schemas(spec: dict[str, Any]) -> list[str]:
    lines = ["## Schemas", ""]
    for name, schema in sorted(spec.get("components", {}).get("schemas", {}).items()):
        lines += [f"### {name}", ""]
        required = set(schema.get("required", []))
        props = schema.get("properties", {})
        if props:
            lines += ["| field | type | required | description |", "|---|---|---|---|"]
            for field, prop in props.items():
                mark = "yes" if field in required else "no"
                lines.append(
                    f"| `{field}` | {_schema_name(prop)} | {mark} | {prop.get('description', '')} |"
                )
            lines.append("")
    return lines


def render(app: FastAPI) -> str:
    spec = openapi(app)
    lines = [
        "# Acceleron API reference",
        "",
        "Generated from the code by `make docs`; do not edit by hand.",
        "",
        f"Microversions {microversion.MIN_VERSION} to {microversion.MAX_VERSION} "
        "(see [microversions.md](microversions.md)); errors are described in "
        "[errors.md](errors.md). The same schema, machine-readable, is "
        "[openapi.json](openapi.json) and is served live at `/openapi.json` (and `/docs`).",
        "",
    ]
    by_tag: dict[str, list[str]] = {}
    for path, item in spec["paths"].items():
        for method in METHODS:
            if method in item:
                tag = (item[method].get("tags") or ["other"])[0]
                by_tag.setdefault(tag, []).extend(_operation(path, method, item[method]))
    for tag, body in by_tag.items():
        lines += [f"## {tag[0].upper()}{tag[1:]}", "", *body]
    lines += _schemas(spec)
    return "\n".join(lines).rstrip() + "\n"


def openapi_json(app: FastAPI) -> str:
    return json.dumps(openapi(app), indent=2, sort_keys=True) + "\n"
