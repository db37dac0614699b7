"""What clients of the specs meet where spec and upstream Cyborg differ, as decided in
docs/design/client-facing.md: each answer pinned, so that a change to one is a decision
(and a microversion), not an accident."""

from __future__ import annotations

from fastapi.testclient import TestClient
from tests.fixtures.devices import HOST_A, LATEST, listed

DEPLOYABLES = "/v2/deployables"
GROUPS = [{"resources:CUSTOM_ACCELERATOR_FPGA": "1"}]


def test_a_filter_no_deployable_matches_is_an_empty_list(seeded: TestClient) -> None:
    """Spec 003: any parameter that is not a column is an attribute filter (attributes
    are open-ended: no list of keys to refuse against). ``vendor`` is a device's, not a
    deployable's: on deployables it names an attribute nobody has."""
    assert listed(seeded, DEPLOYABLES)  # there are some
    for params in ({"vendor": "XILINX"}, {"bogus": "1"}, {"hostname": "no-such-host"}):
        assert listed(seeded, DEPLOYABLES, **params) == [], params
    # "None": has no such attribute (spec 003's FPGAs with no bitstream loaded).
    assert listed(seeded, DEPLOYABLES, bogus="None") == listed(seeded, DEPLOYABLES)
    assert listed(seeded, "/v2/devices", vendor="no-such-vendor") == []  # as upstream
    # A parameter of a known filter with a bad value is the caller's error, as ever.
    answer = seeded.get(DEPLOYABLES, params={"sort_dir": "down"}, headers=LATEST)
    assert answer.status_code == 400


def test_lists_are_oldest_first_unless_asked(seeded: TestClient) -> None:
    """Spec 003's conductor calls default to created_at descending; upstream's REST lists
    come in the order rows were made, and so do Acceleron's (created_at ascending, the
    keyset pages' order); ``sort_dir=desc`` gives spec 003's."""
    by_default = listed(seeded, DEPLOYABLES)
    assert by_default == listed(seeded, DEPLOYABLES, sort_key="created_at", sort_dir="asc")
    answer = seeded.get(DEPLOYABLES, params={"sort_dir": "desc"}, headers=LATEST)
    newest_first = [d["uuid"] for d in answer.json()["deployables"]]
    answer = seeded.get(DEPLOYABLES, headers=LATEST)
    oldest_first = [d["uuid"] for d in answer.json()["deployables"]]
    created = [d["created_at"] for d in answer.json()["deployables"]]
    assert created == sorted(created)
    assert sorted(newest_first) == sorted(oldest_first)
    assert listed(seeded, DEPLOYABLES, hostname=HOST_A)


def test_device_profile_status_codes_are_upstreams(api: TestClient) -> None:
    """Spec 002 has create answer 204 without a body and bad input 422; upstream, which
    Nova, openstacksdk, python-cyborgclient and tempest speak, answers 201 with the
    profile, 400, 404 and 409."""
    body = [{"name": "decided", "groups": GROUPS}]
    created = api.post("/v2/device_profiles", json=body)
    assert created.status_code == 201 and created.json()["name"] == "decided"
    assert api.post("/v2/device_profiles", json=body).status_code == 409
    bad = [{"name": "bad name!", "groups": GROUPS}]
    assert api.post("/v2/device_profiles", json=bad).status_code == 400
    assert api.post("/v2/device_profiles", json={"not": "a list"}).status_code == 400
    unknown = "/v2/device_profiles/7b1d7c0e-3c1a-4f55-9d0e-2f4b8a6c1e00"
    assert api.get(unknown).status_code == 404
    assert api.delete(f"/v2/device_profiles/{created.json()['uuid']}").status_code == 204
