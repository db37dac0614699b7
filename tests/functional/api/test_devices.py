"""/v2/devices through HTTP, on SQLite, PostgreSQL and MariaDB, over the two hosts of
``tests/fixtures/devices.py``."""

from __future__ import annotations

from fastapi.testclient import TestClient
from oslo_config import cfg
from tests.fixtures.devices import FPGA, HOST_A, PATH, fields_by_version, uuid_of

from acceleron.api.devices import (
    Device_2_0,
    Device_2_3,
    Device_2_5,
    Device_2_13,
    Device_2_17,
    Device_2_18,
)


def test_each_microversion_answers_with_its_schema(seeded: TestClient) -> None:
    """The typed dict of a microversion documents the body it builds: the same fields, in
    the same order, shown and listed."""
    schemas = {
        "2.0": Device_2_0,
        "2.3": Device_2_3,
        "2.5": Device_2_5,
        "2.13": Device_2_13,
        "2.17": Device_2_17,
        "2.18": Device_2_18,
    }
    fpga = uuid_of(HOST_A, FPGA)
    for version, fields in fields_by_version(schemas).items():
        headers = {"OpenStack-API-Version": f"accelerator {version}"}
        shown = seeded.get(f"{PATH}/{fpga}", headers=headers).json()
        assert list(shown) == fields, version
        assert seeded.get(PATH, headers=headers).json()["devices"][0] == shown, version


# --- filters -------------------------------------------------------------------------


# --- sorting and pages ----------------------------------------------------------------


def test_max_limit_caps_pages(seeded: TestClient, conf: cfg.ConfigOpts) -> None:
    conf.set_override("max_limit", 2, group="api")
    body = seeded.get(PATH, params={"limit": 500}).json()
    assert len(body["devices"]) == 2 and body["devices_links"][0]["rel"] == "next"
    assert len(seeded.get(PATH).json()["devices"]) == 2


# --- who may read --------------------------------------------------------------------
