"""A group that names a function lands only where a bitstream for it fits, or where the
function is held already: in claims, in flat binds, and in the device profile Nova reads
(its Placement query); against the real Placement in-process, on every database backend.

The fake driver's host has two FPGA cards, each with region0 (type ce48, holding two
functions, two accelerators) and region1 (type 9926, empty). A function whose only
bitstream is built for 9926 fits region1 alone: the weigher, left to itself, prefers
region0 (more free capacity), where the bind can load nothing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from keystoneauth1 import adapter
from oslo_config import cfg
from sqlalchemy import select

from acceleron.bitstreams.local import LocalStore
from acceleron.db.models import Deployable, Host, table
from acceleron.db.session import Database
from acceleron.drivers import gbs
from acceleron.exceptions import AcceleronError
from acceleron.placement import names
from acceleron.placement.client import PlacementClient
from acceleron.scheduler import query
from acceleron.service import fitting
from tests.fixtures.fake_host import HOST, reporting_api
from tests.fixtures.flat import held_by, nova_bind
from tests.fixtures.waiting import wait_for

FPGA = "CUSTOM_ACCELERATOR_FPGA"
LATEST = {"OpenStack-API-Version": "accelerator latest"}
REGION_A = "ce48969398f05f33946d560708be108a"  # region0 of each card
REGION_B = "9926ab6d6c925a68aabca7d84c545738"  # region1 of each card
HELD = "d8424dc4a4a3c413f89e433683f9040b"  # held by each region0
SECOND = "f7df405cbd7acf7222f144b0b93acd18"  # held by each region0 too, named second
DEPLOYABLES, HOSTS = table(Deployable), table(Host)


def region_trait(region_type: str) -> str:
    return names.region_type_trait("FPGA", "INTEL", region_type)


@pytest.fixture
def nested(conf: cfg.ConfigOpts, db: Database, placement: adapter.Adapter) -> Iterator[TestClient]:
    """An API publishing nested providers to the real Placement, one per region (pools
    off: these tests steer among regions of their own), host-1 published."""
    conf.set_override("pools", "false", "placement")
    client = PlacementClient(placement)
    with reporting_api(conf, db, placement) as api:

        def published() -> bool:
            found = client.find_provider(HOST)
            return found is not None and len(client.get_tree(found.uuid)) == 15

        wait_for(published)
        # The region traits come with the providers; wait until both types carry them.
        wait_for(lambda: len(regions(db, api, client)) == 4)
        # And until the sync recorded the publication (a moment after Placement has it):
        # the steering knows only the regions of hosts recorded as published.
        wait_for(lambda: recorded(db))
        yield api


def recorded(db: Database) -> bool:
    """Whether the sync recorded host-1's latest report as published."""
    with db.reader() as conn:
        host = conn.execute(select(HOSTS).where(HOSTS.c.hostname == HOST)).one()
    return host.rp_uuid is not None and host.synced_generation == host.generation


def regions(db: Database, api: TestClient, client: PlacementClient) -> dict[str, str]:
    """The FPGA regions published with their region type trait: provider -> key."""
    with db.reader() as conn:
        rows = conn.execute(
            select(DEPLOYABLES.c.rp_uuid, DEPLOYABLES.c.key, DEPLOYABLES.c.region_type).where(
                DEPLOYABLES.c.region_type.is_not(None), DEPLOYABLES.c.rp_uuid.is_not(None)
            )
        ).all()
    found = {}
    for row in rows:
        try:
            traits = client.get_traits(row.rp_uuid)[1]
        except AcceleronError:  # not published yet
            continue
        if region_trait(row.region_type) in traits:
            found[row.rp_uuid] = row.key
    return found


def upload(api: TestClient, function: str, region_type: str) -> str:
    """A public bitstream of ``function`` built for ``region_type``; its id."""
    meta = {
        "name": f"{function[:8]}.gbs",
        "function_uuid": function,
        "region_type_uuid": region_type,
        "visibility": "public",
    }
    made = api.post("/v2/bitstreams", json=meta, headers=LATEST)
    assert made.status_code == 201, made.text
    data = gbs.build(region_type, (function,), payload=b"\x3c" * 1000)
    put = api.put(
        f"/v2/bitstreams/{made.json()['uuid']}/data",
        content=data,
        headers={**LATEST, "Content-Type": "application/octet-stream"},
    )
    assert put.status_code < 300, put.text
    return str(made.json()["uuid"])


def make_profile(api: TestClient, group: dict[str, str]) -> str:
    name = f"dp-{uuid.uuid4().hex[:8]}"
    made = api.post("/v2/device_profiles", json=[{"name": name, "groups": [group]}])
    assert made.status_code == 201, made.text
    return name


def region_of(db: Database, rp_uuid: str) -> Any:
    with db.reader() as conn:
        return conn.execute(select(DEPLOYABLES).where(DEPLOYABLES.c.rp_uuid == rp_uuid)).one()


def test_claims_land_only_where_a_bitstream_for_the_function_fits(
    nested: TestClient, db: Database
) -> None:
    """Three claims in turn: each lands on a region of type 9926 (before: 3 of 3 chose
    a free ce48 region and failed, "No bitstream matches ... region type ce48")."""
    api = nested
    function = uuid.uuid4().hex
    upload(api, function, REGION_B)
    name = make_profile(api, {f"resources:{FPGA}": "1", "accel:function_id": function})
    landed: list[Any] = []
    for _ in range(3):
        consumer = str(uuid.uuid4())
        made = api.post(
            "/v2/claims",
            json={"device_profile_name": name, "consumer_uuid": consumer},
            headers=LATEST,
        )
        if made.status_code != 201:
            landed.append((made.status_code, made.json()["errors"][0]["detail"]))
            continue
        (arq,) = made.json()["accelerator_requests"]
        region = region_of(db, arq["device_rp_uuid"])
        landed.append((region.key, region.region_type))
        assert api.delete(f"/v2/claims/{consumer}", headers=LATEST).status_code == 204
    assert landed == [("region1", REGION_B)] * 3


def test_a_claim_for_a_function_nothing_can_serve_is_refused_at_once(
    nested: TestClient, placement: adapter.Adapter
) -> None:
    """No bitstream of the function and no region holding it: 409 saying so, and no
    allocation made."""
    api = nested
    function = uuid.uuid4().hex
    name = make_profile(api, {f"resources:{FPGA}": "1", "accel:function_id": function})
    consumer = str(uuid.uuid4())
    made = api.post(
        "/v2/claims", json={"device_profile_name": name, "consumer_uuid": consumer}, headers=LATEST
    )
    assert made.status_code == 409, made.text
    detail = made.json()["errors"][0]["detail"]
    assert f"No region holds function_id {function!r}" in detail
    assert "no bitstream for it fits any region" in detail
    assert PlacementClient(placement).get_consumer_allocations(consumer) == {}
    assert api.get(f"/v2/claims/{consumer}", headers=LATEST).status_code == 404


def test_the_profile_nova_reads_keeps_its_query_off_unfit_regions(
    nested: TestClient, db: Database, placement: adapter.Adapter
) -> None:
    """Nova builds its query from the groups of ``GET /v2/device_profiles?name=``: they
    forbid the region type no bitstream fits, so every candidate Placement answers with
    is a 9926 region (before: half of them were ce48 regions). Shown before the upload,
    the profile forbids both types: the upload is seen at once (a write of the API's
    process ends the steering it keeps)."""
    api = nested
    function = uuid.uuid4().hex
    group = {f"resources:{FPGA}": "1", "accel:function_id": function}
    name = make_profile(api, group)
    before = api.get(f"/v2/device_profiles/{name}", headers=LATEST).json()["device_profile"]
    assert before["groups"] == [
        {
            **group,
            f"trait:{region_trait(REGION_A)}": "forbidden",
            f"trait:{region_trait(REGION_B)}": "forbidden",
        }
    ]
    upload(api, function, REGION_B)
    listed = api.get("/v2/device_profiles", params={"name": name}).json()["device_profiles"]
    (groups,) = [p["groups"] for p in listed]
    assert groups == [{**group, f"trait:{region_trait(REGION_A)}": "forbidden"}]
    shown = api.get(f"/v2/device_profiles/{name}", headers=LATEST).json()["device_profile"]
    assert shown["groups"] == groups
    params = query.profile_query(groups).params()  # as Nova builds it
    candidates = PlacementClient(placement).get_allocation_candidates(params)
    chosen = {rp for r in candidates.requests for rp in r.mappings["device_profile_0"]}
    assert len(chosen) == 2
    assert {region_of(db, rp).region_type for rp in chosen} == {REGION_B}

    # A function held by every region0 whose only bitstream is for 9926: both fit.
    upload(api, HELD, REGION_B)
    held = make_profile(api, {f"resources:{FPGA}": "1", "accel:function_id": HELD})
    listed = api.get("/v2/device_profiles", params={"name": held}).json()["device_profiles"]
    assert listed[0]["groups"] == [{f"resources:{FPGA}": "1", "accel:function_id": HELD}]
    # Nothing anywhere: every region type forbidden, so Placement offers nothing at once.
    nowhere = make_profile(api, {f"resources:{FPGA}": "1", "accel:function_id": uuid.uuid4().hex})
    listed = api.get("/v2/device_profiles", params={"name": nowhere}).json()["device_profiles"]
    (groups,) = [p["groups"] for p in listed]
    assert {k for k, v in groups[0].items() if v == "forbidden"} == {
        f"trait:{region_trait(REGION_A)}",
        f"trait:{region_trait(REGION_B)}",
    }
    params = query.profile_query(groups).params()
    assert PlacementClient(placement).get_allocation_candidates(params).requests == ()


def test_a_flat_bind_takes_a_region_a_bitstream_fits(
    flat: tuple[TestClient, str], db: Database
) -> None:
    """Flat mode: Nova binds to the compute node; the bind takes a 9926 region and
    programs it (before: it took the first region, ce48, and failed: "No bitstream
    matches ... region type ce48")."""
    api, compute = flat
    function = uuid.uuid4().hex
    upload(api, function, REGION_B)
    name = make_profile(api, {f"resources:{FPGA}": "1", "accel:function_id": function})
    for _ in range(3):
        instance = str(uuid.uuid4())
        bound = nova_bind(api, name, compute, instance)
        assert bound["state"] in ("BindStarted", "Bound"), bound
        region = held_by(db, bound["uuid"])
        assert (region.key, region.region_type) == ("region1", REGION_B)
        deleted = api.delete("/v2/accelerator_requests", params={"instance": instance})
        assert deleted.status_code == 204, deleted.text


def test_a_flat_bind_for_a_function_nothing_can_serve_says_so(
    flat: tuple[TestClient, str],
) -> None:
    api, compute = flat
    function = uuid.uuid4().hex
    name = make_profile(api, {f"resources:{FPGA}": "1", "accel:function_id": function})
    created = api.post("/v2/accelerator_requests", json={"device_profile_name": name})
    arq = created.json()["arqs"][0]["uuid"]
    ops = [
        {"op": "add", "path": "/hostname", "value": HOST},
        {"op": "add", "path": "/device_rp_uuid", "value": compute},
        {"op": "add", "path": "/instance_uuid", "value": str(uuid.uuid4())},
    ]
    response = api.patch("/v2/accelerator_requests", json={arq: ops})
    assert response.status_code == 404, response.text
    assert f"No region holds function_id {function!r}" in response.text


def test_a_private_bitstream_steers_its_own_project_only(nested: TestClient) -> None:
    """A bitstream private to project p1 fits region type 9926: the profile p1 reads
    forbids ce48 alone; project p2, which cannot see that bitstream, reads a profile with
    every region type forbidden (nothing it may program fits) and learns nothing of p1's
    bitstream, and its claim is refused while p1's lands on a 9926 region."""
    api = nested
    function = uuid.uuid4().hex
    p1 = {**LATEST, "X-Project-Id": "p1", "X-Roles": "member"}
    p2 = {**LATEST, "X-Project-Id": "p2", "X-Roles": "member"}
    meta = {
        "name": "private.gbs",
        "function_uuid": function,
        "region_type_uuid": REGION_B,
        "visibility": "private",
    }
    made = api.post("/v2/bitstreams", json=meta, headers=p1)
    assert made.status_code == 201, made.text
    data = gbs.build(REGION_B, (function,), payload=b"\x3c" * 1000)
    put = api.put(
        f"/v2/bitstreams/{made.json()['uuid']}/data",
        content=data,
        headers={**p1, "Content-Type": "application/octet-stream"},
    )
    assert put.status_code < 300, put.text
    group = {f"resources:{FPGA}": "1", "accel:function_id": function}
    name = make_profile(api, group)

    def served(headers: dict[str, str]) -> dict[str, str]:
        shown = api.get(f"/v2/device_profiles/{name}", headers=headers)
        assert shown.status_code == 200, shown.text
        (found,) = shown.json()["device_profile"]["groups"]
        return dict(found)

    assert served(p1) == {**group, f"trait:{region_trait(REGION_A)}": "forbidden"}
    assert served(p2) == {
        **group,
        f"trait:{region_trait(REGION_A)}": "forbidden",
        f"trait:{region_trait(REGION_B)}": "forbidden",
    }
    other = {"device_profile_name": name, "consumer_uuid": str(uuid.uuid4())}
    refused = api.post("/v2/claims", json=other, headers=p2)
    assert refused.status_code == 409, refused.text
    assert made.json()["uuid"] not in refused.text
    consumer = str(uuid.uuid4())
    claimed = api.post(
        "/v2/claims", json={"device_profile_name": name, "consumer_uuid": consumer}, headers=p1
    )
    assert claimed.status_code == 201, claimed.text
    assert api.delete(f"/v2/claims/{consumer}", headers=p1).status_code == 204


def test_the_holders_of_a_function_are_found_first_or_second(
    nested: TestClient, db: Database, tmp_path: Path
) -> None:
    """Each region0 holds two functions: the one it names first is found by its key, the
    second among the regions holding several; a function held nowhere has no holder."""
    store = LocalStore(db, tmp_path / "store")
    for function, holders in ((HELD, {REGION_A}), (SECOND, {REGION_A}), (uuid.uuid4().hex, set())):
        group = {f"resources:{FPGA}": "1", "accel:function_id": function}
        with db.reader() as conn:
            fit = fitting.fit_of(conn, store, group, "project")
        assert fit is not None
        assert {h.region_type for h in fit.holders} == holders, function
