"""Quotas from Keystone's unified limits (``[quota] driver = unified_limits``): oslo.limit
reads them (from a stand-in of Keystone's limits API); a project limit wins over the
registered limit, a resource class with neither gets 0, as in Nova and Glance."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.fixtures.arqs import create, member
from tests.fixtures.keystone_limits import KeystoneLimits, keystone_limits

from acceleron import conf as confmod
from acceleron.api.app import create_app
from acceleron.api.services import services
from acceleron.db.session import Database
from acceleron.service import device_profiles

QAT, FPGA = "CUSTOM_ACCELERATOR_QAT", "CUSTOM_ACCELERATOR_FPGA"
V2_14 = {"OpenStack-API-Version": "accelerator 2.14"}


@pytest.fixture
def keystone() -> Iterator[KeystoneLimits]:
    with keystone_limits() as found:
        found.registered[f"class:{QAT}"] = 2
        found.projects[("p2", f"class:{QAT}")] = 5
        yield found


@pytest.fixture
def api(tmp_path: Path, sqlite_db: Database, keystone: KeystoneLimits) -> Iterator[TestClient]:
    config = tmp_path / "acceleron.conf"
    config.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path}\n[quota]\ndriver = unified_limits\n"
        + keystone.config()
    )
    conf = confmod.load([], config_files=[str(config)])
    device_profiles.create(sqlite_db, name="qat3", groups=[{f"resources:{QAT}": "3"}])
    device_profiles.create(sqlite_db, name="fpga", groups=[{f"resources:{FPGA}": "1"}])
    with TestClient(create_app(conf, sqlite_db), raise_server_exceptions=False) as client:
        yield client


def test_keystone_limits_apply(api: TestClient, keystone: KeystoneLimits) -> None:
    refused = create(api, "qat3", "p1")
    assert refused.status_code == 403
    assert refused.json()["errors"][0]["detail"] == (
        f"Quota exceeded for class:{QAT} in project p1: limit 2, usage 0, requested 3."
    )
    assert create(api, "qat3", "p2").status_code == 201  # its project limit is 5
    # No limit registered for FPGAs: none may be had (oslo.limit's rule).
    assert "limit 0, usage 0, requested 1" in create(api, "fpga", "p1").text
    shown = api.get("/v2/quotas/p2", headers={**V2_14, **member("p2")}).json()["quota_set"]
    assert shown["driver"] == "unified_limits"
    assert shown["quotas"] == [
        {"resource": f"class:{FPGA}", "resource_class": FPGA, "limit": 0, "usage": 0},
        {"resource": f"class:{QAT}", "resource_class": QAT, "limit": 5, "usage": 0},
    ]
    assert "/v3/limits" in keystone.calls and "/v3/registered_limits" in keystone.calls


def test_keystone_is_asked_once_per_project_within_the_cache_time(
    api: TestClient, keystone: KeystoneLimits
) -> None:
    """oslo.limit caches the limits that exist and asks Keystone again about the others:
    p1 has no limit of its own (the registered default applies), FPGAs none at all."""
    for _ in range(3):
        assert create(api, "qat3", "p1").status_code == 403
        assert create(api, "fpga", "p1").status_code == 403
    asked = [c for c in keystone.calls if c in ("/v3/limits", "/v3/registered_limits")]
    assert len(asked) <= 4, asked  # once per class at most, not once per request
    keystone.registered[f"class:{QAT}"] = 3  # a changed limit applies once forgotten
    assert create(api, "qat3", "p1").status_code == 403
    services(api.app).limits.forget()  # type: ignore[arg-type,attr-defined]  # the cache time is over
    assert create(api, "qat3", "p1").status_code == 201


def test_keystone_away_is_a_503(api: TestClient, keystone: KeystoneLimits) -> None:
    keystone.away = True
    services(api.app).limits.forget()  # type: ignore[arg-type,attr-defined]  # nothing cached
    answer = create(api, "qat3", "p3")
    assert answer.status_code == 503, answer.text
    assert answer.json()["errors"][0]["code"] == "acceleron.quota_unavailable"
