"""/v2/device_profiles through HTTP, on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import insert, select
from tests.fixtures.answers import error

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


def create(api: TestClient, name: str = "dp1", **extra: Any) -> dict[str, Any]:
    response = api.post(PATH, json=[{"name": name, "groups": GROUPS, **extra}])
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


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


def test_duplicate_name_or_uuid_is_a_409(api: TestClient) -> None:
    profile = create(api, "dp1")
    status, code, message = error(api.post(PATH, json=[{"name": "dp1", "groups": GROUPS}]))
    assert (status, code) == (409, "acceleron.duplicate") and "'dp1'" in message
    again = [{"name": "dp2", "groups": GROUPS, "uuid": profile["uuid"]}]
    assert error(api.post(PATH, json=again))[:2] == (409, "acceleron.duplicate")


def test_delete_refuses_a_profile_in_use(api: TestClient, db: Database) -> None:
    profile = create(api, "busy")
    create(api, "free")
    with db.writer() as conn:
        row = conn.execute(
            select(table(DeviceProfile)).where(table(DeviceProfile).c.name == "busy")
        ).one()
        conn.execute(
            insert(table(AcceleratorRequest)).values(
                uuid=str(uuid.uuid4()),
                state="Initial",
                device_profile_id=row.id,
                device_profile_group_id=0,
                project_id="p1",
            )
        )
    status, code, message = error(api.delete(PATH, params={"value": "free,busy"}))
    assert (status, code) == (409, "acceleron.in_use")
    assert "'busy' (1 requests)" in message
    assert len(api.get(PATH).json()["device_profiles"]) == 2
    assert api.get(f"{PATH}/{profile['uuid']}").status_code == 200


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


def test_a_group_of_n_regions_is_shown_as_n_groups_within_max_groups(api: TestClient) -> None:
    """Each FPGA region is a provider of its own: a group of N regions is stored, and
    shown, as N groups of one (Placement serves a group from one provider); a profile
    that would then pass ``[device_profiles] max_groups`` (32) is refused as it is made."""
    regions = {"resources:CUSTOM_ACCELERATOR_FPGA": "3", "accel:function_id": FID}
    made = api.post(PATH, json=[{"name": "three", "groups": [regions]}])
    assert made.status_code == 201, made.text
    one = {**regions, "resources:CUSTOM_ACCELERATOR_FPGA": "1"}
    shown = api.get(f"{PATH}/{made.json()['uuid']}").json()["device_profile"]
    assert shown["groups"] == made.json()["groups"] == [one] * 3
    many = [{"resources:CUSTOM_ACCELERATOR_FPGA": "16"}] * 3  # 48 groups once split
    status, _, detail = error(api.post(PATH, json=[{"name": "many", "groups": many}]))
    assert status == 400
    assert detail.startswith("groups: 48 groups once each group of N FPGA regions is N groups")
