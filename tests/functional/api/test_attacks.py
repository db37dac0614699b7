"""Hand-made nasty inputs, on every backend: each is refused with a 4xx in the documented
error format, never a 500. (Schemathesis, test_fuzz.py, covers the rest at random.)"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.fixtures.arqs import HOST, PATH

from acceleron.db.session import Database
from acceleron.service import bind_tasks, device_profiles

LATEST = {"OpenStack-API-Version": "accelerator latest"}
JSON = {**LATEST, "Content-Type": "application/json"}
LONE = '"\\ud800"'  # a lone UTF-16 surrogate, as JSON writes it: not a character
ARQ = "3f0c9b2e-5d41-4a8e-9c17-6b2d80e4a513"  # fixed: it names parametrized tests (xdist)

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


# --- tenancy and state left behind --------------------------------------------------------

P1 = {**LATEST, "X-Roles": "member", "X-Project-Id": "p1"}
FPGA = [{"resources:CUSTOM_ACCELERATOR_FPGA": "1"}]


def bind_ops(rp: str, instance: str, host: str = HOST) -> list[dict[str, str]]:
    return [
        {"path": "/hostname", "op": "add", "value": host},
        {"path": "/device_rp_uuid", "op": "add", "value": rp},
        {"path": "/instance_uuid", "op": "add", "value": instance},
    ]


def new_arq(api: TestClient, profile: str, headers: dict[str, str] = LATEST) -> str:
    response = api.post(PATH, json={"device_profile_name": profile}, headers=headers)
    assert response.status_code == 201, response.text
    arq: str = response.json()["arqs"][0]["uuid"]
    return arq


def uploaded(api: TestClient, headers: dict[str, str], **fields: str) -> str:
    """A bitstream of the caller's project, with data; its uuid."""
    created = api.post("/v2/bitstreams", json={"name": "b.gbs", **fields}, headers=headers)
    assert created.status_code == 201, created.text
    uuid_: str = created.json()["uuid"]
    put = api.put(
        f"/v2/bitstreams/{uuid_}/data",
        content=b"\x01" * 100,
        headers={**headers, "Content-Type": "application/octet-stream"},
    )
    assert put.status_code == 200, put.text
    return uuid_


def test_in_noauth_mode_a_member_cannot_bind_an_instance_for_itself(
    api: TestClient, db: Database, inventory_of_host: dict[str, Any]
) -> None:
    """Binding claims the instance uuid for good: a member could take another project's
    future instance (whose real bind would then fail). Only a service (or an admin)
    binds, as Nova does with its service token."""
    device_profiles.create(db, name="fpga", groups=FPGA)
    rp = inventory_of_host["regions"][0].rp_uuid
    victim = str(uuid.uuid4())
    arq = new_arq(api, "fpga", P1)
    refused = api.patch(PATH, json={arq: bind_ops(rp, victim)}, headers=P1)
    check_refused(refused, 403)
    assert api.get(f"{PATH}/{arq}", headers=P1).json()["state"] == "Initial"
    nova = {**P1, "X-Service-Roles": "service"}  # the user's call, with Nova's token
    assert api.patch(PATH, json={arq: bind_ops(rp, victim)}, headers=nova).status_code == 202


def test_a_busy_region_names_no_other_projects_request(
    api: TestClient, db: Database, conf: Any, inventory_of_host: dict[str, Any]
) -> None:
    device_profiles.create(db, name="fpga", groups=FPGA)
    region = next(r for r in inventory_of_host["regions"] if r.num_accelerators == 2)
    mine = new_arq(api, "fpga", P1)
    nova = {**P1, "X-Service-Roles": "service"}
    assert (
        api.patch(
            PATH, json={mine: bind_ops(region.rp_uuid, str(uuid.uuid4()))}, headers=nova
        ).status_code
        == 202
    )
    theirs = new_arq(api, "fpga")  # the admin project's, on the same region
    assert (
        api.patch(PATH, json={theirs: bind_ops(region.rp_uuid, str(uuid.uuid4()))}).status_code
        == 202
    )
    busy = api.post(f"{PATH}/{mine}/program", json={"bitstream_id": uploaded(api, P1)}, headers=P1)
    check_refused(busy, 409)
    assert theirs not in busy.text and "1 accelerator request(s) of other projects" in busy.text
    admin = api.post(
        f"{PATH}/{theirs}/program", json={"bitstream_id": uploaded(api, LATEST)}, headers=LATEST
    )
    assert admin.status_code == 409 and mine in admin.text  # an admin sees every project


def test_a_reaped_bind_leaves_its_region_no_program_phase(
    api: TestClient, db: Database, conf: Any, inventory_of_host: dict[str, Any]
) -> None:
    region = inventory_of_host["regions"][0]
    bitstream = uploaded(
        api, LATEST, function_uuid=str(uuid.uuid4()), region_type_uuid=region.region_type
    )
    group = {**FPGA[0], "accel:bitstream_id": bitstream}
    device_profiles.create(db, name="prog", groups=[group])
    arq = new_arq(api, "prog")
    assert (
        api.patch(PATH, json={arq: bind_ops(region.rp_uuid, str(uuid.uuid4()))}).status_code == 202
    )
    deployable = f"/v2/deployables/{region.uuid}"
    assert api.get(deployable, headers=LATEST).json()["program_phase"] == "queued"
    later = dt.datetime.now(dt.UTC).replace(tzinfo=None) + dt.timedelta(seconds=301)
    assert [r.status for r in bind_tasks.reap(db, 300, now=later)] == ["failed"]
    assert api.get(deployable, headers=LATEST).json()["program_phase"] is None
