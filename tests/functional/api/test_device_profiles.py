"""/v2/device_profiles through HTTP, on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import insert, select
from tests.functional.conftest import LATEST

from acceleron.db.models import AcceleratorRequest, DeviceProfile, table
from acceleron.db.session import Database

PATH = "/v2/device_profiles"
FID = "8411555e-3cbf-47de-988c-b5e30bbfa035"
GROUPS = [
    {
        "resources:CUSTOM_ACCELERATOR_FPGA": "1",
        "trait:CUSTOM_FPGA_INTEL_PAC_ARRIA10": "required",
        "accel:function_id": FID,
    },
    {"resources:CUSTOM_ACCELERATOR_GPU": "2", "trait:CUSTOM_GPU_NVIDIA": "forbidden"},
]
MEMBER = {"X-Roles": "member", "X-Project-Id": "p1"}
V2_2 = {"OpenStack-API-Version": "accelerator 2.2"}


def create(api: TestClient, name: str = "dp1", **extra: Any) -> dict[str, Any]:
    response = api.post(PATH, json=[{"name": name, "groups": GROUPS, **extra}])
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def error(response: Any) -> tuple[int, str, str]:
    body = response.json()
    fault = json.loads(body["error_message"])
    assert fault["faultstring"] == body["errors"][0]["detail"]
    return response.status_code, body["errors"][0]["code"], fault["faultstring"]


def test_create_returns_the_profile_unwrapped(api: TestClient) -> None:
    response = api.post(PATH, json=[{"name": "dp1", "description": "d", "groups": GROUPS}])
    assert response.status_code == 201
    body = response.json()
    assert set(body) == {"uuid", "name", "description", "groups", "created_at", "updated_at",
                         "links"}  # fmt: skip
    assert body["name"] == "dp1" and body["description"] == "d"
    assert body["groups"] == GROUPS
    assert uuid.UUID(body["uuid"])
    assert body["links"] == [
        {"href": f"http://testserver/v2/device_profiles/{body['uuid']}", "rel": "self"}
    ]
    assert response.headers["location"] == body["links"][0]["href"]


def test_show_is_wrapped_and_list_keeps_order(api: TestClient) -> None:
    first = create(api, "dp1")
    second = create(api, "dp2")
    shown = api.get(f"{PATH}/{first['uuid']}").json()
    assert shown == {"device_profile": first}
    listed = api.get(PATH).json()["device_profiles"]
    assert [p["name"] for p in listed] == ["dp1", "dp2"]
    assert listed[1] == second
    # Nova maps ARQs to groups by index: groups and their keys come back in order.
    assert [list(g) for g in listed[0]["groups"]] == [list(g) for g in GROUPS]


def test_list_filters_by_name(api: TestClient) -> None:
    for name in ("a", "b", "c"):
        create(api, name)
    names = [p["name"] for p in api.get(PATH, params={"name": "c,a,zz"}).json()["device_profiles"]]
    assert names == ["a", "c"]
    assert api.get(PATH, params={"name": "nope"}).json() == {"device_profiles": []}


def test_names_are_normalised(api: TestClient) -> None:
    body = create_raw(
        api, [{"resources:custom-accelerator-fpga": "1", "trait:custom_x": "Required"}]
    )
    assert body["groups"] == [
        {"resources:CUSTOM_ACCELERATOR_FPGA": "1", "trait:CUSTOM_X": "required"}
    ]


def create_raw(api: TestClient, groups: Any) -> dict[str, Any]:
    response = api.post(PATH, json=[{"name": "raw", "groups": groups}])
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def test_show_by_name_needs_2_2(api: TestClient) -> None:
    profile = create(api)
    status, code, message = error(api.get(f"{PATH}/dp1"))
    assert (status, code) == (406, "acceleron.version_not_acceptable")
    assert "needs microversion 2.2" in message
    assert api.get(f"{PATH}/dp1", headers=V2_2).json()["device_profile"]["uuid"] == profile["uuid"]
    assert error(api.get(f"{PATH}/nope", headers=V2_2))[:2] == (404, "acceleron.not_found")
    assert error(api.get(f"{PATH}/{uuid.uuid4()}"))[:2] == (404, "acceleron.not_found")


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ([], "exactly one device profile, not 0"),
        ([{"name": "a", "groups": GROUPS}, {"name": "b", "groups": GROUPS}], "not 2"),
        ({"name": "a", "groups": GROUPS}, "valid list"),
        ([{"groups": GROUPS}], "0.name: Field required"),
        ([{"name": "", "groups": GROUPS}], "name: a device profile needs a name"),
        ([{"name": "a b", "groups": GROUPS}], "name: 'a b' may only hold"),
        ([{"name": "a\n", "groups": GROUPS}], "name: 'a\\n' may only hold"),
        ([{"name": "a", "groups": [{"resources:CUSTOM_X\n": "1"}]}], "['resources:CUSTOM_X\\n']"),
        (
            [{"name": "a", "groups": [{"resources:FPGA": "1", "accel:function_id": FID + "\n"}]}],
            "not a UUID",
        ),
        (
            [{"name": "a", "groups": [{"resources:FPGA": "1", "accel:function_name": "f\n"}]}],
            "'f\\n' may only hold",
        ),
        ([{"name": "x" * 256, "groups": GROUPS}], "0.name"),
        ([{"name": "a", "groups": []}], "non-empty list of request groups"),
        ([{"name": "a", "groups": [{"resources:FPGA": 1}]}], "valid string"),
        ([{"name": "a", "groups": GROUPS, "color": "red"}], "0.color: Extra inputs"),
        ([{"name": "a", "groups": GROUPS, "uuid": "nope"}], "0.uuid"),
        ([{"name": "a", "groups": GROUPS, "enabled": False}], "needs microversion 2.4"),
        ([{"name": "a", "groups": [{"accel:function_id": FID}]}], "asks for no resource"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(api: TestClient, body: Any, fragment: str) -> None:
    status, code, message = error(api.post(PATH, json=body))
    assert (status, code) == (400, "acceleron.invalid_input")
    assert fragment in message


def test_not_json_is_a_400(api: TestClient) -> None:
    response = api.post(PATH, content=b"{nope", headers={"Content-Type": "application/json"})
    assert error(response)[:2] == (400, "acceleron.invalid_input")


def test_duplicate_name_or_uuid_is_a_409(api: TestClient) -> None:
    profile = create(api, "dp1")
    status, code, message = error(api.post(PATH, json=[{"name": "dp1", "groups": GROUPS}]))
    assert (status, code) == (409, "acceleron.duplicate") and "'dp1'" in message
    again = [{"name": "dp2", "groups": GROUPS, "uuid": profile["uuid"]}]
    assert error(api.post(PATH, json=again))[:2] == (409, "acceleron.duplicate")


def test_client_chosen_uuid(api: TestClient) -> None:
    chosen = str(uuid.uuid4())
    assert create(api, uuid=chosen)["uuid"] == chosen


def test_delete_forms(api: TestClient) -> None:
    a, _, _, d = (create(api, n) for n in ("a", "b", "c", "d"))
    assert api.delete(f"{PATH}/{a['uuid']}").status_code == 204
    assert api.delete(f"{PATH}/b").status_code == 204
    assert api.delete(PATH, params={"value": f"c,{d['uuid']}"}).status_code == 204
    assert api.get(PATH).json() == {"device_profiles": []}


def test_delete_by_name_as_spec_002_writes_it(api: TestClient) -> None:
    for name in ("a", "b", "c"):
        create(api, name)
    assert api.delete(PATH, params={"name": "a,b"}).status_code == 204
    assert [p["name"] for p in api.get(PATH).json()["device_profiles"]] == ["c"]
    status, code, message = error(api.delete(PATH, params={"name": "c", "value": "c"}))
    assert (status, code) == (400, "acceleron.invalid_input")
    assert "?value= or ?name=, not both" in message
    assert error(api.delete(PATH, params={"name": "c,nope"}))[0] == 404
    assert [p["name"] for p in api.get(PATH).json()["device_profiles"]] == ["c"]


def test_delete_is_all_or_nothing(api: TestClient) -> None:
    create(api, "a")
    create(api, "b")
    status, _, message = error(api.delete(f"{PATH}/a,nope,b"))
    assert status == 404 and "'nope'" in message
    assert len(api.get(PATH).json()["device_profiles"]) == 2
    assert error(api.delete(PATH))[:2] == (400, "acceleron.invalid_input")


def test_delete_refuses_a_profile_in_use(api: TestClient, db: Database) -> None:
    profile = create(api, "busy")
    create(api, "free")
    with db.writer() as conn:
        row = conn.execute(
            select(table(DeviceProfile)).where(table(DeviceProfile).c.name == "busy")
        ).one()
        conn.execute(
            insert(table(AcceleratorRequest)).values(
                uuid=str(uuid.uuid4()), state="Initial", device_profile_id=row.id,
                device_profile_group_id=0, project_id="p1",
            )
        )  # fmt: skip
    status, code, message = error(api.delete(PATH, params={"value": "free,busy"}))
    assert (status, code) == (409, "acceleron.in_use")
    assert "'busy' (1 requests)" in message
    assert len(api.get(PATH).json()["device_profiles"]) == 2
    assert api.get(f"{PATH}/{profile['uuid']}").status_code == 200


def test_2_4_shows_enabled_and_patches(api: TestClient) -> None:
    create(api, "dp1")
    assert "enabled" not in api.get(PATH).json()["device_profiles"][0]
    assert api.get(PATH, headers=LATEST).json()["device_profiles"][0]["enabled"] is True
    ops = [
        {"op": "replace", "path": "/enabled", "value": False},
        {"op": "add", "path": "/description", "value": "Image classification"},
    ]
    response = api.patch(f"{PATH}/dp1", json=ops, headers=LATEST)
    assert response.status_code == 200, response.text
    patched = response.json()["device_profile"]
    assert patched["enabled"] is False and patched["description"] == "Image classification"
    assert patched["updated_at"] is not None
    removed = api.patch(f"{PATH}/dp1", json=[{"op": "remove", "path": "/description"}],
                        headers=LATEST)  # fmt: skip
    assert removed.json()["device_profile"]["description"] is None
    assert api.get(f"{PATH}/dp1", headers=LATEST).json()["device_profile"]["enabled"] is False


@pytest.mark.parametrize(
    ("ops", "fragment"),
    [
        ([], "non-empty list"),
        ([{"op": "replace", "path": "/name", "value": "x"}], "0.path"),
        ([{"op": "remove", "path": "/enabled"}], "cannot be removed"),
        ([{"op": "replace", "path": "/enabled", "value": "yes"}], "enabled: must be true or false"),
        ([{"op": "replace", "path": "/description", "value": True}], "description: must be"),
        ([{"op": "move", "path": "/enabled"}], "0.op"),
    ],
)
def test_bad_patches(api: TestClient, ops: Any, fragment: str) -> None:
    create(api, "dp1")
    status, _, message = error(api.patch(f"{PATH}/dp1", json=ops, headers=LATEST))
    assert status == 400 and fragment in message


def test_patch_needs_2_4(api: TestClient) -> None:
    create(api, "dp1")
    ops = [{"op": "replace", "path": "/enabled", "value": False}]
    assert error(api.patch(f"{PATH}/dp1", json=ops))[:2] == (405, "acceleron.method_not_allowed")
    assert error(api.patch(f"{PATH}/nope", json=ops, headers=LATEST))[0] == 404


def test_create_disabled_at_2_4(api: TestClient) -> None:
    response = api.post(PATH, json=[{"name": "d", "groups": GROUPS, "enabled": False}],
                        headers=LATEST)  # fmt: skip
    assert response.status_code == 201 and response.json()["enabled"] is False


def test_members_read_but_only_admins_write(api: TestClient) -> None:
    create(api, "dp1")
    assert api.get(PATH, headers=MEMBER).status_code == 200
    assert api.get(f"{PATH}/dp1", headers={**MEMBER, **V2_2}).status_code == 200
    reader = {"X-Roles": "reader", "X-Project-Id": "p2"}
    assert api.get(PATH, headers=reader).status_code == 200
    for response in (
        api.post(PATH, json=[{"name": "x", "groups": GROUPS}], headers=MEMBER),
        api.delete(f"{PATH}/dp1", headers=MEMBER),
        api.patch(f"{PATH}/dp1", json=[{"op": "remove", "path": "/description"}],
                  headers={**MEMBER, **LATEST}),
    ):  # fmt: skip
        status, code, message = error(response)
        assert (status, code) == (403, "acceleron.forbidden")
        assert "acceleron:device_profile:" in message
    nobody = {"X-Roles": "", "X-Project-Id": "p3"}
    assert error(api.get(PATH, headers=nobody))[0] == 403


def test_unicode_and_long_descriptions_round_trip(api: TestClient) -> None:
    text = "Klassifikation 画像 🚀" + "x" * 200
    profile = create(api, "dp1", description=text)
    assert profile["description"] == text
    assert api.get(f"{PATH}/{profile['uuid']}").json()["device_profile"]["description"] == text


def test_names_are_case_sensitive_on_every_backend(api: TestClient) -> None:
    create(api, "Profile")
    create(api, "profile")
    listed = api.get(PATH, params={"name": "profile"}).json()["device_profiles"]
    assert [p["name"] for p in listed] == ["profile"]
