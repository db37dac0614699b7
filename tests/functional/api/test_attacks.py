"""Hand-made nasty inputs, on every backend: each is refused with a 4xx in the documented
error format, never a 500. (Schemathesis, test_fuzz.py, covers the rest at random.)"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient

from acceleron.db.session import Database
from acceleron.service import device_profiles

LATEST = {"OpenStack-API-Version": "accelerator latest"}
JSON = {**LATEST, "Content-Type": "application/json"}
LONE = '"\\ud800"'  # a lone UTF-16 surrogate, as JSON writes it: not a character
ARQ = str(uuid.uuid4())

# (method, path, raw JSON body); @ stands for the lone surrogate
SURROGATES = [
    ("POST", "/v2/device_profiles", '[{"name": @, "groups": [{"resources:FPGA": "1"}]}]'),
    ("POST", "/v2/device_profiles", '[{"name": "a", "groups": [{@: "1"}]}]'),
    ("POST", "/v2/device_profiles", '[{"name": "a", "groups": [{"resources:FPGA": @}]}]'),
    ("POST", "/v2/accelerator_requests", '{"device_profile_name": @}'),
    ("PATCH", "/v2/accelerator_requests",
     '{@: [{"op": "add", "path": "/hostname", "value": "h"}]}'),
    ("PATCH", "/v2/accelerator_requests",
     '{"' + ARQ + '": [{"op": "add", "path": "/hostname", "value": @}]}'),
    ("POST", "/v2/bitstreams", '{"name": @}'),
    ("POST", "/v2/bitstreams", '{"name": "x", "properties": {@: "v"}}'),
    ("POST", "/v2/bitstreams", '{"name": "x", "properties": {"k": @}}'),
    ("PUT", "/v2/hosts/h1/report", '{"hostname": "h1", "agent_version": @, "devices": []}'),
    ("PUT", "/v2/hosts/h1/report", '{"hostname": @, "agent_version": "1", "devices": []}'),
    ("POST", "/v2/placement/sync", '{"host": @}'),
    ("POST", f"/v2/accelerator_requests/{ARQ}/program", '{"function_name": @}'),
    ("PUT", f"/v2/tasks/{ARQ}", '{"state": "failed", "error": @}'),
]  # fmt: skip


def check_refused(response: Any, status: int | None = None) -> None:
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    if status is not None:
        assert response.status_code == status, response.text
    error = response.json()["errors"][0]
    assert error["status"] == response.status_code and error["code"].startswith("acceleron.")


@pytest.mark.parametrize(("method", "path", "body"), SURROGATES)
def test_a_lone_surrogate_in_json_is_a_400(
    api: TestClient, db: Database, method: str, path: str, body: str
) -> None:
    device_profiles.create(db, name="a", groups=[{"resources:FPGA": "1"}])
    response = api.request(method, path, content=body.replace("@", LONE).encode(), headers=JSON)
    check_refused(response, 400)
    detail = response.json()["errors"][0]["detail"]
    assert "surrogate" in detail or "unicode" in detail.lower(), detail


def test_a_surrogate_pair_is_a_character(api: TestClient) -> None:
    """An astral character escaped as its pair of surrogates is fine."""
    body = '{"name": "rocket-\\ud83d\\ude80.gbs"}'
    response = api.post("/v2/bitstreams", content=body.encode(), headers=JSON)
    assert response.status_code == 201, response.text
    assert response.json()["name"] == "rocket-\U0001f680.gbs"


@pytest.mark.parametrize(
    "header",
    [
        "accelerator 2." + "9" * 5000,
        "accelerator " + "9" * 5000 + ".1",
        "2." + "1" * 100,
        "accelerator 2.-1",
        "accelerator 2.8.1",
    ],
)
def test_a_huge_or_odd_microversion_is_a_406(api: TestClient, header: str) -> None:
    response = api.get("/v2/device_profiles", headers={"OpenStack-API-Version": header})
    check_refused(response, 406)


@pytest.mark.parametrize("amount", ["9" * 5000, "1" + "0" * 30, "0" * 20])
def test_a_huge_amount_in_a_profile_is_a_400(api: TestClient, amount: str) -> None:
    body = [{"name": "big", "groups": [{"resources:FPGA": amount}]}]
    check_refused(api.post("/v2/device_profiles", json=body, headers=LATEST), 400)
