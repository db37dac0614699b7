"""Quotas per project and resource class (config-file limits), on every backend: refused
at create and at bind with a 403 naming limit, usage and request, nothing left held,
racing binds never past a limit together, and GET /v2/quotas/{project}."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from oslo_config import cfg
from sqlalchemy import func, select
from tests.fixtures.arqs import HOST, PATH, create, member

from acceleron.api.app import create_app
from acceleron.context import RequestContext
from acceleron.db.models import AcceleratorRequest, AttachHandle, Deployable, table
from acceleron.db.session import Database
from acceleron.drivers.fake import FakeDriver
from acceleron.exceptions import ConfigError, QuotaExceeded
from acceleron.report import HostReport
from acceleron.service import arqs as service
from acceleron.service import binding, device_profiles, inventory, quotas

QAT = "CUSTOM_ACCELERATOR_QAT"
V2_14 = {"OpenStack-API-Version": "accelerator 2.14"}
ARQS, HANDLES = table(AcceleratorRequest), table(AttachHandle)


def admin_of(project: str) -> dict[str, str]:
    return {"X-Roles": "admin", "X-Project-Id": project, "X-User-Id": "u"}


@pytest.fixture
def pool(db: Database, conf: cfg.ConfigOpts) -> Any:
    """host-1's fake inventory; its QAT VF pool (four handles)."""
    conf.set_override("host", HOST)
    inventory.reconcile(db, HostReport(HOST, "1", tuple(FakeDriver(conf, Path("/")).discover())))
    device_profiles.create(db, name="qat", groups=[{f"resources:{QAT}": "1"}])
    device_profiles.create(db, name="qat3", groups=[{f"resources:{QAT}": "3"}])
    with db.reader() as conn:
        deployables = table(Deployable)
        return conn.execute(select(deployables).where(deployables.c.kind == "vf_pool")).one()


@pytest.fixture
def api(conf: cfg.ConfigOpts, db: Database) -> Iterator[TestClient]:
    """Every project may hold 2 QAT VFs; project p2 may hold 3."""
    conf.set_override("limits", [f"class:{QAT}=2"], group="quota")
    conf.set_override("project_limits", [f"p2/class:{QAT}=3"], group="quota")
    with TestClient(create_app(conf, db), raise_server_exceptions=False) as client:
        yield client


def bind(api: TestClient, arq: str, rp: str, project: str) -> Any:
    ops = [
        {"path": "/hostname", "op": "add", "value": HOST},
        {"path": "/device_rp_uuid", "op": "add", "value": rp},
        {"path": "/instance_uuid", "op": "add", "value": str(uuid.uuid4())},
    ]
    return api.patch(PATH, json={arq: ops}, headers=admin_of(project))


def refusal(response: Any) -> str:
    assert response.status_code == 403, response.text
    error = response.json()["errors"][0]
    assert error["code"] == "acceleron.quota_exceeded"
    detail: str = error["detail"]
    return detail


def held(db: Database) -> int:
    with db.reader() as conn:
        return int(
            conn.execute(
                select(func.count()).select_from(HANDLES).where(HANDLES.c.arq_id.is_not(None))
            ).scalar_one()
        )


def test_create_over_the_limit_is_refused_and_makes_nothing(
    api: TestClient, db: Database, pool: Any
) -> None:
    detail = refusal(create(api, "qat3", "p1"))
    assert detail == (
        f"Quota exceeded for class:{QAT} in project p1: limit 2, usage 0, requested 3."
    )
    with db.reader() as conn:
        assert conn.execute(select(func.count()).select_from(ARQS)).scalar_one() == 0
    # p2's own limit is 3: the same request is fine for it.
    assert create(api, "qat3", "p2").status_code == 201


def test_bind_over_the_limit_is_refused_and_holds_nothing(
    api: TestClient, db: Database, pool: Any
) -> None:
    # Requests not bound hold nothing: three of them are made.
    arqs = [create(api, "qat", "p1").json()["arqs"][0]["uuid"] for _ in range(3)]
    assert bind(api, arqs[0], pool.rp_uuid, "p1").status_code == 202
    assert bind(api, arqs[1], pool.rp_uuid, "p1").status_code == 202
    detail = refusal(bind(api, arqs[2], pool.rp_uuid, "p1"))
    assert "limit 2, usage 2, requested 1" in detail
    third = api.get(f"{PATH}/{arqs[2]}", headers=member("p1")).json()
    assert (third["state"], third["hostname"], third["instance_uuid"]) == ("Initial", None, None)
    assert held(db) == 2
    # Creating more is refused now too, and another project is not counted with p1.
    assert "limit 2, usage 2, requested 1" in refusal(create(api, "qat", "p1"))
    assert create(api, "qat", "p3").status_code == 201
    # One unbound: the third binds.
    unbind = {arqs[0]: [{"path": "/hostname", "op": "remove"}]}
    assert api.patch(PATH, json=unbind, headers=admin_of("p1")).status_code == 202
    assert bind(api, arqs[2], pool.rp_uuid, "p1").status_code == 202
    assert held(db) == 2


def test_no_limit_means_unlimited(conf: cfg.ConfigOpts, db: Database, pool: Any) -> None:
    with TestClient(create_app(conf, db), raise_server_exceptions=False) as client:
        assert create(client, "qat3", "p1").status_code == 201
        body = client.get("/v2/quotas/p1", headers={**V2_14, **member("p1")}).json()
    assert body["quota_set"]["quotas"][0]["limit"] is None


def test_racing_binds_never_pass_the_limit_together(
    conf: cfg.ConfigOpts, db: Database, pool: Any
) -> None:
    """Eight binds of one project race for its last two: two win, on every backend. The
    project has no row in quota_projects yet, so its first binds race to make it too."""
    conf.set_override("limits", [f"class:{QAT}=2"], group="quota")
    limits = quotas.from_conf(conf)
    project = f"race-{uuid.uuid4().hex[:8]}"
    caller = RequestContext("req", "u", project, frozenset({"member"}))
    arqs = [service.create(db, caller, "qat", limits)[0].uuid for _ in range(8)]
    won, refused, errors = [], [], []
    barrier = threading.Barrier(len(arqs))

    def race(arq: str) -> None:
        barrier.wait()
        request = service.Binding(arq, HOST, pool.rp_uuid, str(uuid.uuid4()))
        try:
            binding.bind(db, caller, [request], None, limits=limits)
            won.append(arq)
        except QuotaExceeded as error:
            refused.append((error.limit, error.usage, error.requested))
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=race, args=(a,)) for a in arqs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(won) == 2
    assert refused == [(2, 2, 1)] * 6
    assert held(db) == 2
    with db.reader() as conn:
        assert quotas.usage(conn, project) == {QAT: 2}


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("limits", ["CUSTOM_ACCELERATOR_QAT=2"]),
        ("limits", ["class:=2"]),
        ("limits", ["class:X=two"]),
        ("limits", ["class:X=-2"]),
        ("project_limits", ["p1"]),
        ("project_limits", ["p1/X=3"]),
        ("project_limits", ["/class:X=3"]),
    ],
)
def test_bad_limits_are_named(conf: cfg.ConfigOpts, option: str, value: list[str]) -> None:
    conf.set_override(option, value, group="quota")
    with pytest.raises(ConfigError, match=rf"\[quota\] {option}"):
        quotas.from_conf(conf)


def test_config_limits_per_project(conf: cfg.ConfigOpts) -> None:
    conf.set_override("limits", [f"class:{QAT}=2", "class:CUSTOM_X=-1"], group="quota")
    conf.set_override("project_limits", [f"p2/class:{QAT}=5", "p2/class:CUSTOM_Y=1"], "quota")
    limits = quotas.from_conf(conf)
    assert limits.enforcing
    assert limits.limits("p1", [QAT, "CUSTOM_X", "CUSTOM_Y"]) == {
        QAT: 2,
        "CUSTOM_X": None,
        "CUSTOM_Y": None,
    }
    assert limits.limits("p2", [QAT, "CUSTOM_Y"]) == {QAT: 5, "CUSTOM_Y": 1}
