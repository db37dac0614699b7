"""Microversion guards: every route that appears with a microversion is refused below it,
with one wording, before its body or its policy is looked at; every field guard says the
same; and every version constant lives in api/microversion.py."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from acceleron.api import microversion
from acceleron.api.microversion import Version
from acceleron.exceptions import InvalidInput

ANY = "8411555e-3cbf-47de-988c-b5e30bbfa035"
# (method, path, the version the route appears with, the status below it, what it says)
GUARDED = [
    ("GET", "/v2/bitstreams", "2.7", 404, "The bitstreams API"),
    ("POST", "/v2/bitstreams", "2.7", 404, "The bitstreams API"),
    ("GET", f"/v2/bitstreams/{ANY}", "2.7", 404, "The bitstreams API"),
    ("GET", f"/v2/bitstreams/{ANY}/data", "2.7", 404, "The bitstreams API"),
    ("PUT", f"/v2/bitstreams/{ANY}/data", "2.7", 404, "The bitstreams API"),
    ("DELETE", f"/v2/bitstreams/{ANY}", "2.7", 404, "The bitstreams API"),
    ("GET", "/v2/hosts", "2.5", 404, "The hosts API"),
    ("GET", "/v2/hosts/h1", "2.5", 404, "The hosts API"),
    ("PUT", "/v2/hosts/h1/report", "2.5", 404, "The hosts API"),
    ("POST", "/v2/hosts/h1/tasks/claim", "2.8", 404, "Agent tasks"),
    ("GET", f"/v2/tasks/{ANY}", "2.8", 404, "Agent tasks"),
    ("PUT", f"/v2/tasks/{ANY}", "2.8", 404, "Agent tasks"),
    ("POST", "/v2/placement/sync", "2.6", 404, "The placement API"),
    ("POST", "/v2/placement/migrate-to-nested", "2.6", 404, "The placement API"),
    ("POST", "/v2/placement/reconcile", "2.9", 404, "Reconciling"),
    ("GET", f"/v2/deployables/{ANY}/attributes", "2.5", 404, "Reading a deployable's attr"),
    ("GET", f"/v2/deployables/{ANY}/attributes/k", "2.5", 404, "Reading a deployable's attr"),
    ("POST", f"/v2/accelerator_requests/{ANY}/program", "2.8", 404, "Reprogramming a request"),
    ("PATCH", f"/v2/device_profiles/{ANY}", "2.4", 405, "Changing a device profile"),
]


def at(version: str) -> dict[str, str]:
    return {"OpenStack-API-Version": f"accelerator {version}"}


def below(version: str) -> str:
    major, minor = version.split(".")
    return f"{major}.{int(minor) - 1}"


def fault(response: Any) -> str:
    return str(json.loads(response.json()["error_message"])["faultstring"])


@pytest.mark.parametrize(("method", "path", "version", "status", "what"), GUARDED)
def test_a_route_is_not_there_below_its_version(
    sqlite_api: TestClient, method: str, path: str, version: str, status: int, what: str
) -> None:
    # An invalid body: the guard answers before the body is validated.
    response = sqlite_api.request(method, path, headers=at(below(version)), content=b"{not json")
    assert response.status_code == status, response.text
    assert fault(response).startswith(what), fault(response)
    assert fault(response).endswith(f"needs microversion {version} or later.")
    response = sqlite_api.request(method, path, content=b"{not json")  # no header: 2.0
    assert response.status_code == status and "needs microversion" in fault(response)
    response = sqlite_api.request(method, path, headers=at(version), content=b"{not json")
    assert "needs microversion" not in response.text


def test_a_field_guard_says_the_same() -> None:
    microversion.require(microversion.V2_4, microversion.V2_4, "enabled")
    with pytest.raises(InvalidInput, match=r"^enabled: setting it needs microversion 2.4 or"):
        microversion.require(microversion.V2_3, microversion.V2_4, "enabled: setting it")
    with pytest.raises(microversion.NotAcceptable):
        microversion.require(Version(2, 0), microversion.V2_2, "x", microversion.NotAcceptable)


def test_every_version_has_its_constant_in_microversion_py() -> None:
    for text in microversion.VERSIONS:
        major, minor = map(int, text.split("."))
        assert getattr(microversion, f"V{major}_{minor}") == Version(major, minor)


def test_no_other_module_spells_a_version() -> None:
    """Handlers compare with microversion.V2_x and say so with require/requires only."""
    api = Path(microversion.__file__).parent
    spelled = re.compile(r"Version\(\d|needs microversion|\(2, \d+\)")
    found = [
        f"{path.name}:{number}"
        for path in sorted(api.glob("*.py"))
        if path.name != "microversion.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if spelled.search(line)
    ]
    assert found == []
