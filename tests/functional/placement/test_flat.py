"""Flat mode (``[placement] nested = false``, spec 001's fallback) end to end, against
the real Placement in-process on every database backend: a claim, Nova's bind naming
the compute node's provider, and the move to nested providers, refused while an
instance still holds accelerators."""

from __future__ import annotations

import contextlib
import threading
import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient
from keystoneauth1 import adapter
from oslo_config import cfg
from sqlalchemy import select

from acceleron.api.app import create_app
from acceleron.client.claims import Claimer
from acceleron.db.session import Database
from acceleron.exceptions import InvalidInput
from acceleron.placement.client import PlacementClient
from acceleron.service.placement import PlacementService
from tests.fixtures.arqs import api_adapter
from tests.fixtures.fake_host import HOST
from tests.fixtures.flat import FPGA, FUNCTION, HANDLES, LATEST, held_by, nova_bind
from tests.fixtures.server import serve


def test_a_claim_lands_on_a_region_that_holds_the_function(
    flat: tuple[TestClient, str], conf: cfg.ConfigOpts, db: Database, placement: adapter.Adapter
) -> None:
    api, compute = flat
    consumer = str(uuid.uuid4())
    with serve(api.app) as url:  # type: ignore[arg-type]
        claim = Claimer(api_adapter(url)).claim("function", consumer)
    assert claim.hostname == HOST and claim.allocations == {compute: {FPGA: 1}}
    (arq,) = claim.arqs
    assert arq["state"] == "Bound" and arq["device_rp_uuid"] == compute
    region = held_by(db, arq["uuid"])
    assert region.key == "region0" and FUNCTION.lower() in region.function_uuids


def test_nova_binds_every_accelerator_the_compute_node_offers_and_no_more(
    flat: tuple[TestClient, str], db: Database
) -> None:
    """Six FPGA slots on the host (two cards, 2 + 1 per card): six binds naming the
    compute node each get a handle, from concurrent threads; the seventh fails."""
    api, compute = flat
    results: list[dict[str, Any]] = []
    lock = threading.Lock()

    def one() -> None:
        body = nova_bind(api, "fpga", compute, str(uuid.uuid4()))
        with lock:
            results.append(body)

    threads = [threading.Thread(target=one) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [r["state"] for r in results] == ["Bound"] * 6
    with db.reader() as conn:
        taken = conn.execute(select(HANDLES.c.id).where(HANDLES.c.arq_id.is_not(None))).all()
    assert len(taken) == 6
    seventh = nova_bind(api, "fpga", compute, str(uuid.uuid4()))
    assert seventh["state"] == "BindFailed"
    assert "no free attach handle" in seventh["failure_reason"]


def test_a_function_bind_takes_the_region_holding_it(
    flat: tuple[TestClient, str], db: Database
) -> None:
    api, compute = flat
    bound = nova_bind(api, "function", compute, str(uuid.uuid4()))
    assert bound["state"] == "Bound", bound
    assert held_by(db, bound["uuid"]).key == "region0"


def test_a_bind_naming_another_hosts_compute_node_or_in_nested_mode_is_refused(
    flat: tuple[TestClient, str], conf: cfg.ConfigOpts, db: Database, placement: adapter.Adapter
) -> None:
    api, compute = flat
    created = api.post("/v2/accelerator_requests", json={"device_profile_name": "fpga"})
    arq = created.json()["arqs"][0]["uuid"]

    def bind(client: TestClient, host: str) -> Any:
        ops = [
            {"op": "add", "path": "/hostname", "value": host},
            {"op": "add", "path": "/device_rp_uuid", "value": compute},
            {"op": "add", "path": "/instance_uuid", "value": str(uuid.uuid4())},
        ]
        return client.patch("/v2/accelerator_requests", json={arq: ops})

    wrong = bind(api, "host-2")
    assert wrong.status_code == 400 and "compute node of host 'host-1'" in wrong.text
    conf.set_override("nested", True, "placement")
    app = create_app(conf, db)
    app.state.placement = PlacementService(conf, db, lambda: PlacementClient(placement))
    with TestClient(app, raise_server_exceptions=False) as nested:
        app.state.sync_worker.stop()
        refused = bind(nested, HOST)
    assert refused.status_code == 400 and "nested = true" in refused.text


def test_migrate_to_nested_waits_for_the_claims_to_go(
    flat: tuple[TestClient, str], conf: cfg.ConfigOpts, db: Database, placement: adapter.Adapter
) -> None:
    api, compute = flat
    consumer = str(uuid.uuid4())
    client = PlacementClient(placement)
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(serve(api.app))  # type: ignore[arg-type]
        claimer = Claimer(api_adapter(url))
        claimer.claim("fpga", consumer)
        api.app.state.sync_worker.stop()  # type: ignore[attr-defined]
        conf.set_override("nested", True, "placement")
        app = create_app(conf, db)
        app.state.placement = PlacementService(conf, db, lambda: PlacementClient(placement))
        nested = stack.enter_context(TestClient(app, raise_server_exceptions=False))
        app.state.sync_worker.stop()

        def migrate() -> dict[str, Any]:
            response = nested.post("/v2/placement/migrate-to-nested", json={}, headers=LATEST)
            assert response.status_code == 200, response.text
            (host,) = response.json()["hosts"]
            return dict(host)

        refused = migrate()
        assert refused["actions"] == [] and "still has allocations" in refused["errors"][0]
        assert FPGA in client.get_inventories(compute)[1]
        assert claimer.release(consumer) == (1, True)
        moved = migrate()
        assert moved["errors"] == [] and moved["actions"][0]["op"] == "remove_flat"
    assert FPGA not in client.get_inventories(compute)[1]
    assert len(client.get_tree(compute)) == 12  # the compute node, 2 cards, 4 regions, 5 pools


def test_a_memory_request_takes_a_profile_with_that_much_per_unit(
    flat: tuple[TestClient, str], db: Database
) -> None:
    """The compute node offers the H100's HBM summed over its MIG profiles; only the
    3g.40gb profile has 20000 MB for one instance."""
    from acceleron.placement.tree import Options
    from acceleron.service import flat as service

    group = {
        "resources:CUSTOM_ACCELERATOR_MIG": "1",
        "resources:CUSTOM_ACCELERATOR_MEMORY_HBM": "20000",
    }
    with db.reader() as conn:
        found = service.candidates(conn, HOST, group, Options(nested=False))
        assert [d.key for d in found] == ["mig/3g.40gb"]
        with pytest.raises(InvalidInput, match="No accelerator on host 'host-1'"):
            service.candidates(
                conn, HOST, {**group, "trait:CUSTOM_NOPE": "required"}, Options(nested=False)
            )
