"""/v2/devices through HTTP, on SQLite, PostgreSQL and MariaDB.

``seed`` fills the inventory the way agents do, through the reconciler, with two
hosts: host-a has an FPGA whose region0 holds a VF pool (a tree), nested
attributes and handles in use and free; host-b has a GPU with a vGPU type and a
QAT card with a VF pool. It is shared by the deployable and CLI tests.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from oslo_config import cfg
from sqlalchemy import update
from tests.functional.conftest import LATEST

from acceleron.api.devices import Device_2_0, Device_2_3, Device_2_5, Device_2_13
from acceleron.db.models import AttachHandle, Deployable, Device, table
from acceleron.db.session import Database
from acceleron.microversion import VERSIONS
from acceleron.placement import names
from acceleron.report import HostReport
from acceleron.service import inventory
from acceleron.vocabulary import AttachHandle as Handle
from acceleron.vocabulary import Deployable as Dep
from acceleron.vocabulary import Device as Dev

PATH = "/v2/devices"
V2_0: dict[str, str] = {}
V2_3 = {"OpenStack-API-Version": "accelerator 2.3"}
V2_5 = {"OpenStack-API-Version": "accelerator 2.5"}
MEMBER = {"X-Roles": "member", "X-Project-Id": "p1"}
SERVICE = {"X-Roles": "service", "X-Project-Id": "services"}

HOST_A, HOST_B = "host-a", "host-b"
FPGA, GPU, QAT = "0000:0c:00.0", "0000:3b:00.0", "0000:5e:00.0"
RT0, RT1 = "ce48969398f05f33946d560708be108a", "9926ab6d6c925a68aabca7d84c545738"
FUNCTION = "d8424dc4a4a3c413f89e433683f9040b"
BITSTREAM = "5d1c6a52-6f4e-4a44-9d3e-0c1b2a3d4e5f"
INSTANCE = "0f6f5d6e-2b1a-4c3d-8e9f-a0b1c2d3e4f5"
RP = "3e2d1c0b-aaaa-4bbb-8ccc-dddddddddddd"
MDEV0, MDEV1 = "aaaaaaaa-0000-4000-8000-000000000001", "aaaaaaaa-0000-4000-8000-000000000002"


def pci(address: str) -> Handle:
    domain, bus, rest = address.split(":")
    slot, function = rest.split(".")
    return Handle("PCI", address, {"domain": domain, "bus": bus, "device": slot,
                                   "function": function})  # fmt: skip


FPGA_CARD = Dev(
    pci_address=FPGA, type="FPGA", vendor_id="8086", vendor_name="INTEL", product_id="09c4",
    model="PAC_ARRIA10", driver="intel_fpga", numa_node=0,
    std_board_info={"product_id": "09c4", "controller": "PAC"},
    vendor_board_info={"shell": "arria10-1.2"},
    deployables=(
        Dep("region0", "region", 2, programmable=True, region_type=RT0,
            function_uuids=(FUNCTION,),
            attributes={"afu": "gzip", "memory": {"size_mb": 8192,
                                                  "ddr": {"channels": "2", "speed": "2400"}}},
            attach_handles=(pci("0000:0c:00.1"), pci("0000:0c:00.2")),
            children=(Dep("region0/vfs", "vf_pool", 2,
                          attach_handles=(pci("0000:0c:01.0"), pci("0000:0c:01.1"))),)),
        Dep("region1", "region", 1, programmable=True, region_type=RT1,
            attributes={"memory": {"size_mb": "4096"}}, attach_handles=(pci("0000:0c:00.3"),)),
    ),
)  # fmt: skip
GPU_CARD = Dev(
    pci_address=GPU, type="GPU", vendor_id="10de", vendor_name="NVIDIA", product_id="1eb8",
    model="T4", driver="nvidia_gpu", numa_node=1,
    deployables=(
        Dep("vgpu/nvidia-222", "vgpu_type", 2, accelerator_type="VGPU",
            traits=("CUSTOM_NVIDIA_1EB8_T4_1B",), attributes={"type_name": "GRID T4-1B"},
            attach_handles=(Handle("MDEV", MDEV0, {"asked_type": "nvidia-222"}, in_use=True),
                            Handle("MDEV", MDEV1, {"asked_type": "nvidia-222"}))),
    ),
)  # fmt: skip
QAT_CARD = Dev(
    pci_address=QAT, type="QAT", vendor_id="8086", vendor_name="INTEL", product_id="37c8",
    model="C62X", driver="intel_qat", numa_node=None,
    deployables=(Dep("vf_pool", "vf_pool", 4, attach_handles=tuple(
        pci(f"0000:5e:00.{n}") for n in range(1, 5))),),
)  # fmt: skip


def uuid_of(host: str, address: str, key: str = "") -> str:
    return names.provider_uuid(host, address, key)


def name_of(host: str, address: str, key: str = "") -> str:
    return names.provider_name(host, address, key)


def seed(db: Database) -> None:
    """The inventory as two agents report it, then what programming, binding and
    Placement add."""
    inventory.reconcile(db, HostReport(HOST_A, "1.0", (FPGA_CARD,)))
    inventory.reconcile(db, HostReport(HOST_B, "1.0", (GPU_CARD, QAT_CARD)))
    devices, deployables, handles = table(Device), table(Deployable), table(AttachHandle)
    with db.writer() as conn:
        conn.execute(
            update(handles)
            .where(handles.c.address.in_(["0000:0c:00.1", "0000:5e:00.1", "0000:5e:00.2"]))
            .values(in_use=True)
        )
        conn.execute(
            update(deployables)
            .where(deployables.c.uuid == uuid_of(HOST_A, FPGA, "region0"))
            .values(
                rp_uuid=RP,
                instance_uuid=INSTANCE,
                availability="allocated",
                resource_class="FPGA",
                bitstream_id=BITSTREAM,
            )
        )
        conn.execute(
            update(devices)
            .where(devices.c.pci_address == GPU)
            .values(status="maintaining", health="degraded")
        )


@pytest.fixture
def seeded(api: TestClient, db: Database) -> TestClient:
    seed(db)
    return api


def error(response: Any) -> tuple[int, str]:
    body = response.json()
    assert json.loads(body["error_message"])["faultstring"] == body["errors"][0]["detail"]
    return response.status_code, body["errors"][0]["detail"]


def listed(api: TestClient, path: str = PATH, /, **params: Any) -> list[str]:
    """The pci_address (devices) or key (deployables) of each item listed (latest view)."""
    response = api.get(path, params=params, headers=LATEST)
    assert response.status_code == 200, response.text
    noun = path.rsplit("/", 1)[-1]
    field = "pci_address" if noun == "devices" else "key"
    return [item[field] for item in response.json()[noun]]


# --- views by microversion -----------------------------------------------------------

BASE_FIELDS = {"uuid", "type", "vendor", "model", "std_board_info", "vendor_board_info",
               "hostname", "created_at", "updated_at", "links"}  # fmt: skip
RICH_FIELDS = {"id", "pci_address", "numa_node", "state", "health", "driver_name", "vendor_name",
               "product_id"}  # fmt: skip


def fields_by_version(schemas: dict[str, Any]) -> dict[str, list[str]]:
    """The fields, in order, of the schema each microversion answers with: ``schemas``
    maps the microversions that changed it to their typed dicts."""
    fields: dict[str, list[str]] = {}
    current: list[str] = []
    for version in VERSIONS:
        if version in schemas:
            current = list(schemas[version].__annotations__)
        fields[version] = current
    return fields


def test_each_microversion_answers_with_its_schema(seeded: TestClient) -> None:
    """The typed dict of a microversion documents the body it builds: the same fields, in
    the same order, shown and listed."""
    schemas = {"2.0": Device_2_0, "2.3": Device_2_3, "2.5": Device_2_5, "2.13": Device_2_13}
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
