"""Spec 001's use cases end to end, on a real ``acceleron all-in-one`` process: the API,
the real Placement and the fake driver's agent in one process, driven by the CLI
(``acceleron claim`` / ``release``) and the HTTP API as a user would.

The fake host has two Intel PAC Arria10 cards (region0: two accelerators, holding a
function and region type ``ce48...``; region1: one, another region type), a T4 with vGPU
types, an H100 in MIG mode and a QAT card with four VFs.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from acceleron.cli.main import main
from acceleron.db.session import Database
from acceleron.drivers import gbs
from tests.fixtures.allinone import LATEST, AllInOne, all_in_one
from tests.fixtures.waiting import wait_for

REGION0_TYPE = "ce48969398f05f33946d560708be108a"
PRELOADED = "d8424dc4a4a3c413f89e433683f9040b"
PLACEMENT = {"X-Auth-Token": "admin", "OpenStack-API-Version": "placement 1.39"}

pytestmark = pytest.mark.slow


QUOTA_PROJECT = "quota-p"  # may hold one QAT VF


@pytest.fixture(scope="module")
def aio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AllInOne]:
    limits = {"OS_QUOTA__PROJECT_LIMITS": f"{QUOTA_PROJECT}/class:CUSTOM_ACCELERATOR_QAT=1"}
    with all_in_one(tmp_path_factory.mktemp("aio"), config=limits) as server:
        yield server


def api(aio: AllInOne, method: str, path: str, **kwargs: Any) -> Any:
    headers = {**LATEST, **kwargs.pop("headers", {})}
    response = requests.request(method, aio.url + path, headers=headers, timeout=30, **kwargs)
    assert response.status_code < 300, response.text
    return response.json() if response.content else None


def placement(aio: AllInOne, path: str) -> Any:
    response = requests.get(f"{aio.url}/placement{path}", headers=PLACEMENT, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def profile(aio: AllInOne, *groups: dict[str, str]) -> str:
    name = f"dp-{uuid.uuid4().hex[:8]}"
    api(aio, "POST", "/v2/device_profiles", json=[{"name": name, "groups": list(groups)}])
    return name


def upload(aio: AllInOne, function: str, name: str | None = None) -> str:
    meta = {
        "name": f"{function[:8]}.gbs",
        "function_uuid": function,
        "region_type_uuid": REGION0_TYPE,
        "visibility": "public",
    }
    if name:
        meta["function_name"] = name
    made = api(aio, "POST", "/v2/bitstreams", json=meta)
    data = gbs.build(REGION0_TYPE, (function,), payload=b"\x3c" * 200_000)
    api(
        aio,
        "PUT",
        f"/v2/bitstreams/{made['uuid']}/data",
        data=data,
        headers={"Content-Type": "application/octet-stream"},
    )
    bitstream: str = made["uuid"]
    return bitstream


def claim(
    aio: AllInOne, capsys: pytest.CaptureFixture[str], name: str, consumer: str
) -> tuple[list[dict[str, Any]], str]:
    argv = ["--os-url", aio.url, "claim", "--profile", name, "--consumer", consumer, "-f", "json"]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    handles: list[dict[str, Any]] = json.loads(out)
    return handles, err


def release(aio: AllInOne, capsys: pytest.CaptureFixture[str], consumer: str) -> str:
    code = main(["--os-url", aio.url, "release", "--consumer", consumer])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def chosen(aio: AllInOne, consumer: str) -> list[str]:
    """The providers of the consumer's allocation in Placement."""
    return sorted(placement(aio, f"/allocations/{consumer}")["allocations"])


def region_of(aio: AllInOne, rp: str) -> dict[str, Any]:
    found = api(aio, "GET", "/v2/deployables", params={"rp_uuid": rp})["deployables"]
    region: dict[str, Any] = found[0]
    return region


def test_the_all_in_one_serves_everything_on_one_port(aio: AllInOne) -> None:
    assert api(aio, "GET", "/v2")["id"] == "v2.0"
    hosts = api(aio, "GET", "/v2/hosts")["hosts"]
    assert [h["hostname"] for h in hosts] == [aio.host] and hosts[0]["devices"] == 5
    roots = placement(aio, f"/resource_providers?name={aio.host}")["resource_providers"]
    assert len(roots) == 1  # the compute node provider, created by the all-in-one


def test_a_claim_without_consumer_makes_one_and_says_how_to_release_it(
    aio: AllInOne, capsys: pytest.CaptureFixture[str]
) -> None:
    name = profile(aio, {"resources:CUSTOM_ACCELERATOR_QAT": "1"})
    code = main(["--os-url", aio.url, "claim", "--profile", name, "-f", "value", "-c", "type"])
    out, err = capsys.readouterr()
    assert (code, out) == (0, "TEST_PCI\n"), err
    made = re.fullmatch(
        r"Claimed on \S+ for consumer (\S+)\.\nRelease it with: acceleron "
        r"release --consumer (\S+)\n",
        err,
    )
    assert made is not None and made[1] == made[2], err
    assert chosen(aio, made[1])  # it holds its allocation in Placement under that uuid
    assert "Released the claim of" in release(aio, capsys, made[1])


def test_a_trait_placement_does_not_know_is_a_conflict_that_names_it(
    aio: AllInOne, capsys: pytest.CaptureFixture[str]
) -> None:
    """A well-formed custom trait no host has published is accepted in a profile (as
    upstream's tests and Nova's flavors use them); a claim for it is refused with the
    trait's name, not Placement's 400 passed on as a 502."""
    name = profile(
        aio, {"resources:CUSTOM_ACCELERATOR_QAT": "1", "trait:CUSTOM_NO_SUCH": "required"}
    )
    body = {"device_profile_name": name, "consumer_uuid": str(uuid.uuid4())}
    answer = requests.post(f"{aio.url}/v2/claims", json=body, headers=LATEST, timeout=30)
    assert answer.status_code == 409, answer.text
    detail = answer.json()["errors"][0]["detail"]
    assert detail == (
        "No resource provider has trait(s) CUSTOM_NO_SUCH: Placement does not know the name. "
        "Is it misspelled in the device profile? Otherwise no host has published it yet."
    )


def test_device_as_a_service_then_release_frees_everything(
    aio: AllInOne, capsys: pytest.CaptureFixture[str]
) -> None:
    name = profile(aio, {"resources:CUSTOM_ACCELERATOR_QAT": "1"})
    consumer = str(uuid.uuid4())
    handles, err = claim(aio, capsys, name, consumer)
    assert len(handles) == 1 and handles[0]["type"] == "TEST_PCI"
    assert set(handles[0]["info"]) >= {"domain", "bus", "device", "function"}
    assert f"Claimed on {aio.host}" in err
    (rp,) = chosen(aio, consumer)
    assert placement(aio, f"/resource_providers/{rp}/usages")["usages"] == {
        "CUSTOM_ACCELERATOR_QAT": 1
    }
    pool = region_of(aio, rp)
    assert sum(1 for h in pool["attach_handles"] if h["in_use"]) == 1

    assert f"Released the claim of {consumer}: 1 accelerator request(s) deleted" in release(
        aio, capsys, consumer
    )
    assert placement(aio, f"/allocations/{consumer}")["allocations"] == {}
    assert placement(aio, f"/resource_providers/{rp}/usages")["usages"] == {
        "CUSTOM_ACCELERATOR_QAT": 0
    }
    assert not any(h["in_use"] for h in region_of(aio, rp)["attach_handles"])
    assert api(aio, "GET", "/v2/accelerator_requests", params={"instance": consumer}) == {
        "arqs": []
    }


def test_afaas_pre_programmed_lands_on_a_region_holding_the_function(
    aio: AllInOne, capsys: pytest.CaptureFixture[str]
) -> None:
    name = profile(
        aio,
        {
            "resources:CUSTOM_ACCELERATOR_FPGA": "1",
            f"trait:CUSTOM_FPGA_INTEL_FUNCTION_{PRELOADED.upper()}": "required",
        },
    )
    consumer = str(uuid.uuid4())
    _, err = claim(aio, capsys, name, consumer)
    assert "binding:" not in err  # bound at once: nothing to program
    (rp,) = chosen(aio, consumer)
    region = region_of(aio, rp)
    assert region["key"] == "region0" and PRELOADED in region["function_uuids"]
    release(aio, capsys, consumer)


def test_afaas_orchestration_programmed_then_the_weigher_prefers_it(
    aio: AllInOne, capsys: pytest.CaptureFixture[str]
) -> None:
    function = uuid.uuid4().hex
    upload(aio, function)
    name = profile(
        aio,
        {
            "resources:CUSTOM_ACCELERATOR_FPGA": "1",
            f"trait:CUSTOM_FPGA_INTEL_REGION_{REGION0_TYPE.upper()}": "required",
            "accel:function_id": function,
            "accel:cleaning": "none",  # what one claim loaded stays for the next (public)
        },
    )
    first = str(uuid.uuid4())
    _, err = claim(aio, capsys, name, first)
    assert "binding: group 0: " in err  # the programming was followed (it is quick here)
    holding = [
        d
        for d in api(aio, "GET", "/v2/deployables")["deployables"]
        if d["function_uuid"] == function
    ]
    assert len(holding) == 1
    release(aio, capsys, first)
    aio.wait_synced()  # Placement shows the new function trait on that region
    # Programmed, the region left the pool of its identical regions for one of its own.
    (region,) = [
        d
        for d in api(aio, "GET", "/v2/deployables")["deployables"]
        if d["uuid"] == holding[0]["uuid"]
    ]
    programmed = region["rp_uuid"]
    traits = placement(aio, f"/resource_providers/{programmed}/traits")["traits"]
    assert f"CUSTOM_FPGA_INTEL_FUNCTION_{function.upper()}" in traits

    second = str(uuid.uuid4())
    _, err = claim(aio, capsys, name, second)
    assert chosen(aio, second) == [programmed]  # the region that holds it, first
    assert "binding:" not in err  # bound at once: nothing to program
    release(aio, capsys, second)


def test_a_function_asked_by_name(aio: AllInOne, capsys: pytest.CaptureFixture[str]) -> None:
    function = uuid.uuid4().hex
    label = f"zip-{function[:6]}"
    upload(aio, function, name=label)
    name = profile(
        aio,
        {
            "resources:CUSTOM_ACCELERATOR_FPGA": "1",
            f"trait:CUSTOM_FPGA_INTEL_REGION_{REGION0_TYPE.upper()}": "required",
            "accel:function_name": label,
        },
    )
    consumer = str(uuid.uuid4())
    claim(aio, capsys, name, consumer)
    # The region programmed (it leaves its pool for one of its own: found by function).
    holding = [
        d
        for d in api(aio, "GET", "/v2/deployables")["deployables"]
        if d["function_uuid"] == function
    ]
    assert len(holding) == 1 and holding[0]["key"] == "region0"
    release(aio, capsys, consumer)


def test_a_profile_with_two_groups(aio: AllInOne, capsys: pytest.CaptureFixture[str]) -> None:
    name = profile(
        aio,
        {"resources:CUSTOM_ACCELERATOR_FPGA": "1", "trait:CUSTOM_PROGRAMMABLE": "required"},
        {"resources:CUSTOM_ACCELERATOR_VGPU": "1", "trait:CUSTOM_NVIDIA_1EB8_T4_2B": "required"},
    )
    consumer = str(uuid.uuid4())
    handles, _ = claim(aio, capsys, name, consumer)
    assert [(h["group"], h["type"]) for h in handles] == [(0, "TEST_PCI"), (1, "MDEV")]
    assert len(chosen(aio, consumer)) == 2
    vgpu = region_of(aio, chosen_for_class(aio, consumer, "CUSTOM_ACCELERATOR_VGPU"))
    assert vgpu["key"] == "vgpu/nvidia-223"
    release(aio, capsys, consumer)
    assert placement(aio, f"/allocations/{consumer}")["allocations"] == {}


def chosen_for_class(aio: AllInOne, consumer: str, rc: str) -> str:
    allocations = placement(aio, f"/allocations/{consumer}")["allocations"]
    return str(next(rp for rp, a in allocations.items() if rc in a["resources"]))


def test_bad_claims_are_one_clear_line(aio: AllInOne, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--os-url", aio.url, "claim", "--consumer"]
    assert main([*base, str(uuid.uuid4()), "--profile", "no-such-profile"]) == 1
    assert "not found" in capsys.readouterr().err
    assert main([*base, "not-a-uuid", "--profile", "x"]) == 1
    assert "must be a uuid" in capsys.readouterr().err
    too_many = profile(aio, {"resources:CUSTOM_ACCELERATOR_QAT": "9"})
    assert main([*base, str(uuid.uuid4()), "--profile", too_many]) == 1
    # The host's QAT VFs are one provider of 4: the claim says so.
    assert "the largest provider of CUSTOM_ACCELERATOR_QAT has 4" in capsys.readouterr().err


def test_a_consumer_that_holds_a_claim_is_told_so(
    aio: AllInOne, capsys: pytest.CaptureFixture[str]
) -> None:
    name = profile(aio, {"resources:CUSTOM_ACCELERATOR_QAT": "1"})
    consumer = str(uuid.uuid4())
    claim(aio, capsys, name, consumer)
    code = main(["--os-url", aio.url, "claim", "--profile", name, "--consumer", consumer])
    assert (code, *capsys.readouterr()) == (
        1,
        "",
        (
            f"Consumer {consumer} already holds a claim: release it first (`acceleron "
            f"release --consumer {consumer}`), or claim for another consumer uuid.\n"
        ),
    )
    assert len(chosen(aio, consumer)) == 1  # what it held is untouched
    release(aio, capsys, consumer)


def test_a_disabled_profile_is_refused_before_anything_is_allocated(
    aio: AllInOne, capsys: pytest.CaptureFixture[str]
) -> None:
    name = profile(aio, {"resources:CUSTOM_ACCELERATOR_QAT": "1"})
    api(
        aio,
        "PATCH",
        f"/v2/device_profiles/{name}",
        json=[{"op": "replace", "path": "/enabled", "value": False}],
    )
    consumer = str(uuid.uuid4())
    code = main(["--os-url", aio.url, "claim", "--profile", name, "--consumer", consumer])
    assert (code, *capsys.readouterr()) == (
        1,
        "",
        (
            f"Device profile {name!r} is disabled: it takes no new requests (`acceleron profile "
            f"enable {name}` allows them again).\n"
        ),
    )
    assert placement(aio, f"/allocations/{consumer}")["allocations"] == {}


def test_releasing_a_consumer_that_holds_nothing(
    aio: AllInOne, capsys: pytest.CaptureFixture[str]
) -> None:
    consumer = str(uuid.uuid4())
    said = f"Nothing to release: consumer {consumer} has no claim.\n"
    base = ["--os-url", aio.url, "release", "--consumer", consumer]
    assert (main(base), *capsys.readouterr()) == (1, "", said)
    assert (main([*base, "--if-exists"]), *capsys.readouterr()) == (0, "", said)


def test_names_from_the_tree(aio: AllInOne, capsys: pytest.CaptureFixture[str]) -> None:
    (qat,) = api(aio, "GET", "/v2/devices", params={"type": "QAT"})["devices"]
    address = qat["pci_address"]
    pool = f"{aio.host}_{address}_vf_pool"
    for argv in (("deployable", "show", pool), ("device", "show", address, "--tree")):
        code = main(["--os-url", aio.url, *argv])
        out, err = capsys.readouterr()
        assert code == 0 and out.startswith(f"{aio.host}  {address}  QAT  INTEL C62X"), err


def test_the_banner_and_the_log(aio: AllInOne) -> None:
    """The banner says where everything is, and how the CLI reaches it off port 6666; the
    log at INFO has a line per thing done, not Placement's request log nor DEBUG lines."""
    log = aio.log.read_text()
    assert log.startswith(
        "Acceleron all-in-one (no authentication: every caller is an admin)\n"
        f"  API        {aio.url}/v2\n"
    )
    assert f"\n  export ACCELERON_URL={aio.url}\n  .venv/bin/acceleron deployable list" in log
    assert "INFO acceleron.db.migrate [-] Database schema upgraded: empty -> " in log
    assert f"INFO acceleron.service.publish [-] Published {aio.host} to Placement: create " in log
    for chatty in ("placement.requestlog", "alembic", "Placement create", " DEBUG "):
        assert chatty not in log
    # oslo.log's format: a request's lines carry its id and the caller (noauth: admin).
    context = r"\[None req-[0-9a-f-]{36} admin admin - - - -\]"
    report = re.escape(f'"PUT /v2/hosts/{aio.host}/report" 200')
    assert re.search(rf" INFO acceleron.api.access {context} 127.0.0.1 {report}", log)


def test_a_port_in_use_is_one_line_before_anything_else(
    aio: AllInOne, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["all-in-one", "--data-dir", str(tmp_path), "--port", str(aio.port)])
    assert (code, *capsys.readouterr()) == (
        1,
        "",
        (
            f"Cannot listen on 127.0.0.1:{aio.port}: address already in use. Stop what holds it, "
            "or choose another: make run PORT=..., or --port.\n"
        ),
    )
    assert list(tmp_path.iterdir()) == []  # nothing was started


def test_ctrl_c_stops_it_and_a_restart_finds_everything(tmp_path: Path) -> None:
    with all_in_one(tmp_path) as server:
        name = profile(server, {"resources:CUSTOM_ACCELERATOR_QAT": "1"})
        function = uuid.uuid4().hex
        bitstream = upload(server, function)
        region = next(
            d
            for d in api(server, "GET", "/v2/deployables", params={"kind": "region"})["deployables"]
        )
        body = [{"path": "/program", "op": "replace", "value": [{"image_uuid": bitstream}]}]
        api(server, "PATCH", f"/v2/deployables/{region['uuid']}/program", json=body)
        deadline = region["uuid"]
        wait_for(
            lambda: api(server, "GET", f"/v2/deployables/{deadline}")["function_uuid"] == function
        )
        assert server.stop() == 0  # Ctrl-C: a clean exit
        server.start()
        assert [
            p["name"] for p in api(server, "GET", "/v2/device_profiles")["device_profiles"]
        ] == [name]
        again = api(server, "GET", f"/v2/deployables/{region['uuid']}")
        assert again["function_uuid"] == function  # the fake card kept what it was given
        assert api(server, "GET", f"/v2/bitstreams/{bitstream}")["status"] == "active"


def claimer(aio: AllInOne, project: str | None = None) -> Any:
    """The Python API of claims, as a program without Nova uses it (as an admin of
    ``project``, if given)."""
    from keystoneauth1 import adapter, session
    from keystoneauth1.noauth import NoAuth

    from acceleron.client.claims import Claimer

    headers = {"X-Project-Id": project, "X-Roles": "admin"} if project else {}
    api_adapter = adapter.Adapter(
        session.Session(auth=NoAuth()),
        endpoint_override=aio.url,
        service_type="accelerator",
        additional_headers=headers,
    )
    return Claimer(api_adapter, poll=0.05)


def test_the_claimer_takes_the_allocations_from_the_claim(aio: AllInOne) -> None:
    """From 2.16 the claim shows what it allocated: the Claimer hands back what Placement
    holds; against 2.15 it has no allocations to show; an API older than 2.12 is told
    the version claims need, and nothing is claimed."""
    from acceleron.client.claims import ClaimFailed
    from acceleron.microversion import V2_11, V2_15, V2_16

    name = profile(aio, {"resources:CUSTOM_ACCELERATOR_QAT": "1"})
    for latest in (V2_16, V2_15):
        flow, consumer = claimer(aio), str(uuid.uuid4())
        flow._server_version = latest  # (2, 15): as an older API says
        made = flow.claim(name, consumer)
        held = placement(aio, f"/allocations/{consumer}")["allocations"]
        shown = {rp: a["resources"] for rp, a in held.items()} if latest >= V2_16 else None
        assert made.allocations == shown, latest
        assert flow.release(consumer) == (1, True)
    flow, consumer = claimer(aio), str(uuid.uuid4())
    flow._server_version = V2_11
    with pytest.raises(ClaimFailed, match=r"up to 2\.11; claims need 2\.12 or later"):
        flow.claim(name, consumer)
    assert placement(aio, f"/allocations/{consumer}")["allocations"] == {}


def test_racing_claims_for_the_last_vfs_never_overbook(aio: AllInOne) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from acceleron.client.claims import ClaimFailed

    name = profile(aio, {"resources:CUSTOM_ACCELERATOR_QAT": "1"})
    consumers = [str(uuid.uuid4()) for _ in range(6)]  # the QAT card has four VFs

    claims: dict[str, Any] = {}

    def attempt(consumer: str) -> str:
        try:
            made = claims[consumer] = claimer(aio).claim(name, consumer)
        except ClaimFailed as error:
            return f"failed: {error}"
        return str(made.attach_handles[0]["info"])

    with ThreadPoolExecutor(max_workers=6) as executor:
        results = list(executor.map(attempt, consumers))
    won = [r for r in results if not r.startswith("failed")]
    assert len(won) == 4 and len(set(won)) == 4, results
    pool = next(
        d for d in api(aio, "GET", "/v2/deployables", params={"kind": "vf_pool"})["deployables"]
    )
    usages = placement(aio, f"/resource_providers/{pool['rp_uuid']}/usages")["usages"]
    assert usages == {"CUSTOM_ACCELERATOR_QAT": 4}
    # A winner's claim released with the claim in hand (not read first), the others by name.
    first = next(iter(claims))
    assert claimer(aio).release(first, claims[first]) == (1, True)
    assert claimer(aio).release(first, claims[first]) == (0, False)
    assert (
        sorted(claimer(aio).release(consumer) for consumer in consumers if consumer != first)
        == [(0, False)] * 2 + [(1, True)] * 3
    )
    usages = placement(aio, f"/resource_providers/{pool['rp_uuid']}/usages")["usages"]
    assert usages == {"CUSTOM_ACCELERATOR_QAT": 0}


def test_on_a_database_server_the_data_directory_is_made(db: Database, tmp_path: Path) -> None:
    """With [database] on PostgreSQL or MariaDB nothing else makes --data-dir, and the
    embedded Placement keeps its SQLite file there."""
    if db.backend == "sqlite":
        pytest.skip("on SQLite, Acceleron's own database file makes the directory")
    data = tmp_path / "not" / "yet"
    env = {"OS_DATABASE__CONNECTION": db.url.render_as_string(hide_password=False)}
    with all_in_one(data, config=env) as server:  # ready: Placement has the host's inventory
        assert (data / "placement.sqlite").is_file()
        assert server.stop() == 0


def test_claims_over_the_quota_are_refused_and_leave_nothing(
    aio: AllInOne, capsys: pytest.CaptureFixture[str]
) -> None:
    """The project may hold one QAT VF: of two claims racing, one wins; the other is
    refused with the limit, usage and request, and holds no allocation and no request;
    `acceleron quota show` counts the one held."""
    from concurrent.futures import ThreadPoolExecutor

    from acceleron.client.claims import ClaimFailed

    name = profile(aio, {"resources:CUSTOM_ACCELERATOR_QAT": "1"})
    consumers = [str(uuid.uuid4()) for _ in range(2)]

    def attempt(consumer: str) -> str:
        try:
            claimer(aio, QUOTA_PROJECT).claim(name, consumer, project_id=QUOTA_PROJECT)
            return "claimed"
        except ClaimFailed as error:
            return str(error)

    with ThreadPoolExecutor(max_workers=2) as executor:
        outcomes = list(executor.map(attempt, consumers))
    assert outcomes.count("claimed") == 1, outcomes
    refused = next(o for o in outcomes if o != "claimed")  # at create, or at bind
    assert (
        "Quota exceeded for class:CUSTOM_ACCELERATOR_QAT in project quota-p: limit 1, "
        "usage 1, requested 1." in refused
    )
    winner, loser = consumers if outcomes[0] == "claimed" else consumers[::-1]
    assert len(chosen(aio, winner)) == 1 and chosen(aio, loser) == []
    held = api(
        aio,
        "GET",
        "/v2/accelerator_requests",
        headers={"X-Project-Id": QUOTA_PROJECT, "X-Roles": "member"},
    )["arqs"]
    assert [(a["instance_uuid"], a["state"]) for a in held] == [(winner, "Bound")]
    code = main(["--os-url", aio.url, "quota", "show", "--project", QUOTA_PROJECT, "-f", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert {"resource": "class:CUSTOM_ACCELERATOR_QAT", "limit": 1, "usage": 1} in json.loads(out)
    claimer(aio, QUOTA_PROJECT).release(winner)
