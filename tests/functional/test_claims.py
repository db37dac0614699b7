"""Server-side claims (2.12) against the all-in-one: the real embedded Placement, the
agent with the fake driver. One request claims; GET follows; DELETE releases."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.fixtures.allinone import LATEST, AllInOne, all_in_one
from tests.fixtures.waiting import wait_for

PLACEMENT = {"X-Auth-Token": "admin", "OpenStack-API-Version": "placement 1.39"}
QAT = {"resources:CUSTOM_ACCELERATOR_QAT": "1"}
REGION0_TYPE = "ce48969398f05f33946d560708be108a"
OTHER = {"X-Project-Id": "project-b", "X-Roles": "member,reader"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def aio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AllInOne]:
    with all_in_one(tmp_path_factory.mktemp("claims")) as server:
        yield server


def send(aio: AllInOne, method: str, path: str, **kwargs: Any) -> requests.Response:
    headers = {**LATEST, **kwargs.pop("headers", {})}
    return requests.request(method, aio.url + path, headers=headers, timeout=60, **kwargs)


def profile(aio: AllInOne, *groups: dict[str, str]) -> str:
    name = f"dp-{uuid.uuid4().hex[:8]}"
    made = send(aio, "POST", "/v2/device_profiles", json=[{"name": name, "groups": list(groups)}])
    assert made.status_code == 201, made.text
    return name


def claim(
    aio: AllInOne, name: str, consumer: str, json_extra: dict[str, str] | None = None, **extra: Any
) -> requests.Response:
    body = {"device_profile_name": name, "consumer_uuid": consumer, **(json_extra or {})}
    return send(aio, "POST", "/v2/claims", json=body, **extra)


def allocations(aio: AllInOne, consumer: str) -> dict[str, Any]:
    found = requests.get(
        f"{aio.url}/placement/allocations/{consumer}", headers=PLACEMENT, timeout=30
    ).json()["allocations"]
    return dict(found)


def test_claim_follow_and_release(aio: AllInOne) -> None:
    name = profile(aio, QAT)
    consumer = str(uuid.uuid4())
    made = claim(aio, name, consumer)
    assert made.status_code == 201, made.text
    body = made.json()
    assert (body["state"], body["hostname"], body["consumer_uuid"]) == ("bound", aio.host, consumer)
    (arq,) = body["accelerator_requests"]
    assert arq["state"] == "Bound" and arq["instance_uuid"] == consumer
    assert arq["attach_handle_type"] == "TEST_PCI"
    assert list(allocations(aio, consumer)) == [arq["device_rp_uuid"]]
    held = {arq["device_rp_uuid"]: {"resources": {"CUSTOM_ACCELERATOR_QAT": 1}}}
    assert body["allocations"] == held  # 2.16: no need to ask Placement
    shown = send(aio, "GET", f"/v2/claims/{consumer}").json()
    assert shown["state"] == "bound" and shown["accelerator_requests"] == [arq]
    assert shown["allocations"] == held

    assert send(aio, "DELETE", f"/v2/claims/{consumer}").status_code == 204
    assert send(aio, "GET", f"/v2/claims/{consumer}").status_code == 404
    assert allocations(aio, consumer) == {}
    arqs = send(aio, "GET", "/v2/accelerator_requests", params={"instance": consumer})
    assert arqs.json()["arqs"] == []


def test_allocations_are_shown_from_2_16(aio: AllInOne) -> None:
    """Before 2.16 a claim shows no allocations; from it, Placement's for the consumer."""
    name, consumer = profile(aio, QAT), str(uuid.uuid4())
    older = {"OpenStack-API-Version": "accelerator 2.15"}
    made = claim(aio, name, consumer, headers=older)
    assert made.status_code == 201, made.text
    assert "allocations" not in made.json()
    assert "allocations" not in send(aio, "GET", f"/v2/claims/{consumer}", headers=older).json()
    held = {rp: {"resources": a["resources"]} for rp, a in allocations(aio, consumer).items()}
    assert send(aio, "GET", f"/v2/claims/{consumer}").json()["allocations"] == held
    assert send(aio, "DELETE", f"/v2/claims/{consumer}").status_code == 204


def test_a_claim_that_programs_is_binding_then_bound(aio: AllInOne) -> None:
    function = uuid.uuid4().hex
    from acceleron.drivers import gbs

    meta = {
        "name": "f.gbs",
        "function_uuid": function,
        "region_type_uuid": REGION0_TYPE,
        "visibility": "public",
    }
    made = send(aio, "POST", "/v2/bitstreams", json=meta).json()
    data = gbs.build(REGION0_TYPE, (function,), payload=b"\x3c" * 100_000)
    put = send(
        aio,
        "PUT",
        f"/v2/bitstreams/{made['uuid']}/data",
        data=data,
        headers={"Content-Type": "application/octet-stream"},
    )
    assert put.status_code < 300, put.text
    name = profile(
        aio,
        {
            "resources:CUSTOM_ACCELERATOR_FPGA": "1",
            f"trait:CUSTOM_FPGA_INTEL_REGION_{REGION0_TYPE.upper()}": "required",
            "accel:function_id": function,
            "accel:cleaning": "none",  # what one claim loaded stays for the next (public)
        },
    )
    consumer = str(uuid.uuid4())
    body = claim(aio, name, consumer).json()
    assert body["state"] in ("binding", "bound"), body

    def bound() -> bool:
        return bool(send(aio, "GET", f"/v2/claims/{consumer}").json()["state"] == "bound")

    wait_for(bound, 60)
    assert send(aio, "DELETE", f"/v2/claims/{consumer}").status_code == 204
    # The region holds the function now: once Placement shows it, a claim lands there.
    aio.wait_synced()
    again = str(uuid.uuid4())
    second = claim(aio, name, again).json()
    assert second["state"] == "bound"  # nothing to program
    # On the region that holds it: programmed, it left its pool for one of its own.
    rp = second["accelerator_requests"][0]["device_rp_uuid"]
    holders = send(aio, "GET", "/v2/deployables", params={"rp_uuid": rp}).json()["deployables"]
    assert holders and all(function in (d["function_uuids"] or []) for d in holders)
    send(aio, "DELETE", f"/v2/claims/{again}")


def test_claims_are_their_projects_own(aio: AllInOne) -> None:
    name = profile(aio, QAT)
    consumer = str(uuid.uuid4())
    mine = claim(aio, name, consumer, headers=OTHER)
    assert mine.status_code == 201, mine.text
    assert mine.json()["project_id"] == "project-b"
    third = {"X-Project-Id": "project-c", "X-Roles": "member,reader"}
    assert send(aio, "GET", f"/v2/claims/{consumer}", headers=third).status_code == 404
    assert send(aio, "DELETE", f"/v2/claims/{consumer}", headers=third).status_code == 404
    assert send(aio, "GET", f"/v2/claims/{consumer}", headers=OTHER).json()["state"] == "bound"
    placement_consumer = requests.get(
        f"{aio.url}/placement/allocations/{consumer}", headers=PLACEMENT, timeout=30
    ).json()
    assert placement_consumer["project_id"] == "project-b"
    # A member may not claim for another project; an admin may.
    body = {
        "device_profile_name": name,
        "consumer_uuid": str(uuid.uuid4()),
        "project_id": "project-c",
    }
    refused = send(aio, "POST", "/v2/claims", json=body, headers=OTHER)
    assert refused.status_code == 400
    assert send(aio, "DELETE", f"/v2/claims/{consumer}", headers=OTHER).status_code == 204


def test_bad_claims_leave_nothing_behind(aio: AllInOne) -> None:
    name = profile(aio, QAT)
    consumer = str(uuid.uuid4())
    assert claim(aio, "no-such-profile", consumer).status_code == 404
    assert claim(aio, name, "not-a-uuid").status_code == 400
    old = {"OpenStack-API-Version": "accelerator 2.9"}
    assert claim(aio, name, consumer, headers=old).status_code == 404
    none = profile(aio, {"resources:CUSTOM_ACCELERATOR_QAT": "16"})  # more than there is
    refused = claim(aio, none, consumer)
    assert refused.status_code == 409, refused.text
    assert refused.json()["errors"][0]["code"] == "acceleron.conflict"
    assert "the largest provider of CUSTOM_ACCELERATOR_QAT has 4" in refused.text
    # FPGA is a class Placement knows, but the all-in-one publishes custom classes: no
    # accelerator provides it at all, which is said apart from all of them being taken.
    unprovided = claim(aio, profile(aio, {"resources:FPGA": "1"}), consumer)
    assert unprovided.status_code == 409, unprovided.text
    assert unprovided.json()["errors"][0]["code"] == "acceleron.not_provided"
    assert "No host provides FPGA" in unprovided.text and "in use" not in unprovided.text
    assert send(aio, "GET", f"/v2/claims/{consumer}").status_code == 404
    assert allocations(aio, consumer) == {}
    assert claim(aio, name, consumer).status_code == 201
    twice = claim(aio, name, consumer)
    assert twice.status_code == 409 and "has a claim already" in twice.text
    assert send(aio, "DELETE", f"/v2/claims/{consumer}").status_code == 204


def test_a_claim_on_a_named_host(aio: AllInOne) -> None:
    """2.15: admins and services name the host; a member may not; a host without the
    accelerators is a 409, and the claim leaves nothing behind."""
    name = profile(aio, QAT)
    consumer = str(uuid.uuid4())
    made = claim(aio, name, consumer, json_extra={"hostname": aio.host})
    assert made.status_code == 201, made.text
    assert made.json()["hostname"] == aio.host
    for method in ("GET", "DELETE"):  # another project sees nothing of it
        assert send(aio, method, f"/v2/claims/{consumer}", headers=OTHER).status_code == 404
    assert send(aio, "DELETE", f"/v2/claims/{consumer}").status_code == 204
    member = claim(aio, name, consumer, json_extra={"hostname": aio.host}, headers=OTHER)
    assert member.status_code == 403, member.text
    elsewhere = claim(aio, name, consumer, json_extra={"hostname": "no-such-host"})
    assert elsewhere.status_code == 409 and "no-such-host" in elsewhere.text
    old = {"OpenStack-API-Version": "accelerator 2.14"}
    before = claim(aio, name, consumer, json_extra={"hostname": aio.host}, headers=old)
    assert before.status_code == 400 and "2.15" in before.text
    assert send(aio, "GET", f"/v2/claims/{consumer}").status_code == 404
    assert allocations(aio, consumer) == {}


def test_os_acc_claims_this_hosts_accelerators_without_a_scheduler(aio: AllInOne) -> None:
    """plug() with no selected_rp: a claim on the connector's host, bound by the API and
    allocated in Placement for the instance; unplug() releases the claim."""
    from acceleron.client.http import AcceleronClient
    from os_acc import Connector, PlugFailed

    connector = Connector(AcceleronClient.connect(aio.url), aio.host, timeout=30, poll=0.05)
    name = profile(aio, QAT)
    vm = {"uuid": str(uuid.uuid4()), "name": "vm"}
    (plugged,) = connector.plug(vm, None, {"accel:device_profile": name})
    assert plugged["attach_handle_type"] == "TEST_PCI" and plugged["attach_target"] == "VM"
    shown = send(aio, "GET", f"/v2/claims/{vm['uuid']}").json()
    assert (shown["state"], shown["hostname"]) == ("bound", aio.host)
    assert list(allocations(aio, vm["uuid"])) == [
        shown["accelerator_requests"][0]["device_rp_uuid"]
    ]
    assert connector.unplug(vm) == 1
    assert send(aio, "GET", f"/v2/claims/{vm['uuid']}").status_code == 404
    assert allocations(aio, vm["uuid"]) == {}
    other = Connector(AcceleronClient.connect(aio.url), "no-such-host", timeout=5, poll=0.05)
    with pytest.raises(PlugFailed, match=r"Cannot claim profile .* on no-such-host"):
        other.plug(vm, None, {"accel:device_profile": name})
    assert allocations(aio, vm["uuid"]) == {}
