"""/v2/deployables, /v2/attributes and spec 003's /accelerators/deployable through HTTP,
on SQLite, PostgreSQL and MariaDB (the inventory of ``test_devices.seed``)."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from oslo_config import cfg
from sqlalchemy import select
from tests.fixtures.devices import (
    BITSTREAM,
    FPGA,
    FUNCTION,
    GPU,
    HOST_A,
    HOST_B,
    INSTANCE,
    QAT,
    RP,
    RT0,
    RT1,
    V2_0,
    V2_5,
    error,
    fields_by_version,
    listed,
    name_of,
    uuid_of,
)
from tests.fixtures.host import LATEST
from tests.fixtures.sysfs import SCENARIO_6_1, build_sysfs

from acceleron.api.deployables import (
    Deployable_2_0,
    Deployable_2_5,
    Deployable_2_10,
    Deployable_2_13,
    Deployable_2_17,
)
from acceleron.db.models import Attribute, Deployable, Device, table
from acceleron.db.session import Database
from acceleron.drivers.intel_fpga import IntelFpgaDriver
from acceleron.microversion import VERSIONS
from acceleron.report import HostReport
from acceleron.service import inventory

PATH = "/v2/deployables"
SPEC003 = "/accelerators/deployable"
R0 = uuid_of(HOST_A, FPGA, "region0")
R1 = uuid_of(HOST_A, FPGA, "region1")
VFS = uuid_of(HOST_A, FPGA, "region0/vfs")
VGPU = uuid_of(HOST_B, GPU, "vgpu/nvidia-222")
QAT_POOL = uuid_of(HOST_B, QAT, "vf_pool")
ALL = ["region0", "region1", "region0/vfs", "vgpu/nvidia-222", "vf_pool"]
R0_ATTRIBUTES = {
    "afu": "gzip",
    "memory": {"size_mb": "8192", "ddr": {"channels": "2", "speed": "2400"}},
}


def ids(db: Database) -> dict[str, int]:
    """Integer ids by deployable key and device PCI address, as upstream's fields show them."""
    deployables, devices = table(Deployable), table(Device)
    with db.reader() as conn:
        found = {row.key: row.id for row in conn.execute(select(deployables))}
        found.update({row.pci_address: row.id for row in conn.execute(select(devices))})
    return found


def attribute_uuids(db: Database) -> dict[tuple[str, str], str]:
    """Attribute uuids by (deployable key, attribute key)."""
    attrs, deployables = table(Attribute), table(Deployable)
    query = select(deployables.c.key.label("dep"), attrs.c.key, attrs.c.uuid).join(
        deployables, attrs.c.deployable_id == deployables.c.id
    )
    with db.reader() as conn:
        return {(row.dep, row.key): row.uuid for row in conn.execute(query)}


def pci_handle(key: str, address: str, in_use: bool) -> dict[str, Any]:
    domain, bus, rest = address.split(":")
    slot, function = rest.split(".")
    return {
        "uuid": uuid_of(HOST_A, FPGA, f"{key}#{address}"),
        "type": "PCI",
        "address": address,
        "in_use": in_use,
        "host_in_use": False,
        "state": "present",
        "attach_info": {"domain": domain, "bus": bus, "device": slot, "function": function},
    }


# --- views by microversion -----------------------------------------------------------


def test_upstream_view_before_2_5(seeded: TestClient, db: Database) -> None:
    known = ids(db)
    body = seeded.get(f"{PATH}/{R0}", headers=V2_0).json()
    assert isinstance(body.pop("created_at"), str) and isinstance(body.pop("updated_at"), str)
    assert body == {
        "uuid": R0,
        "parent_id": None,
        "root_id": None,
        "name": name_of(HOST_A, FPGA, "region0"),
        "num_accelerators": 2,
        "device_id": known[FPGA],
        "attributes_list": '[{"afu":"gzip"},{"memory.size_mb":"8192"},'
        '{"memory.ddr.channels":"2"},{"memory.ddr.speed":"2400"}]',
        "rp_uuid": RP,
        "driver_name": "intel_fpga",
        "bitstream_id": BITSTREAM,
        "links": [
            {"href": f"http://testserver/v2/deployables/{R0}", "rel": "self"},
            {"href": f"http://testserver/accelerators/deployable/{R0}", "rel": "bookmark"},
        ],
    }
    child = seeded.get(f"{PATH}/{VFS}").json()
    assert (child["parent_id"], child["root_id"]) == (known["region0"], known["region0"])
    assert child["attributes_list"] == "[]"


def test_each_microversion_answers_with_its_schema(seeded: TestClient) -> None:
    """The typed dict of a microversion documents the body it builds: the same fields, in
    the same order, shown and listed; spec 003's paths answer with the latest."""
    schemas = {
        "2.0": Deployable_2_0,
        "2.5": Deployable_2_5,
        "2.10": Deployable_2_10,
        "2.13": Deployable_2_13,
        "2.17": Deployable_2_17,
    }
    by_version = fields_by_version(schemas)
    for version, fields in by_version.items():
        headers = {"OpenStack-API-Version": f"accelerator {version}"}
        shown = seeded.get(f"{PATH}/{R0}", headers=headers).json()
        assert list(shown) == fields, version
        page = seeded.get(PATH, params={"key": "region0"}, headers=headers).json()
        assert page["deployables"] == [shown], version
    latest = seeded.get(f"{SPEC003}/{R0}").json()["deployable"]
    assert list(latest) == by_version[VERSIONS[-1]]


def test_rich_view_from_2_5(seeded: TestClient, db: Database) -> None:
    old = seeded.get(f"{PATH}/{R0}", headers=V2_0).json()
    new = seeded.get(f"{PATH}/{R0}", headers=V2_5).json()
    assert {k: new[k] for k in old} == old
    assert {k: v for k, v in new.items() if k not in old} == {
        "id": ids(db)["region0"],
        "kind": "region",
        "key": "region0",
        "device_uuid": uuid_of(HOST_A, FPGA),
        "hostname": HOST_A,
        "parent_uuid": None,
        "root_uuid": None,
        "availability": "allocated",
        "assignable": True,
        "instance_uuid": INSTANCE,
        "region_type": RT0,
        "function_uuid": FUNCTION,
        "function_uuids": [FUNCTION],
        "accelerator_type": None,
        "programmable": True,
        "memory_mb": None,
        "traits": [],
        "resource_class": "FPGA",
        "program_phase": None,
        "program_progress": None,
        "program_error": None,
        "attributes": R0_ATTRIBUTES,
        "attach_handles": [
            pci_handle("region0", "0000:0c:00.1", True),
            pci_handle("region0", "0000:0c:00.2", False),
        ],
    }
    vfs = seeded.get(f"{PATH}/{VFS}", headers=V2_5).json()
    assert (vfs["parent_uuid"], vfs["root_uuid"], vfs["kind"]) == (R0, R0, "vf_pool")
    vgpu = seeded.get(f"{PATH}/{VGPU}", headers=V2_5).json()
    assert [(h["address"], h["in_use"], h["host_in_use"]) for h in vgpu["attach_handles"]] == [
        ("aaaaaaaa-0000-4000-8000-000000000001", False, True),
        ("aaaaaaaa-0000-4000-8000-000000000002", False, False),
    ]
    assert vgpu["traits"] == ["CUSTOM_NVIDIA_1EB8_T4_1B"]
    assert seeded.get(PATH, headers=V2_5).json()["deployables"][0] == new


# --- filters -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({}, ALL),
        # Spec 003: FPGAs with no bitstream loaded.
        ({"bitstream_id": "None", "type": "FPGA"}, ["region1", "region0/vfs"]),
        ({"bitstream_id": "null", "type": "FPGA", "kind": "region"}, ["region1"]),
        ({"bitstream_id": BITSTREAM}, ["region0"]),
        ({"type": "GPU"}, ["vgpu/nvidia-222"]),
        ({"kind": "vf_pool"}, ["region0/vfs", "vf_pool"]),
        ({"kind": "mig_profile"}, []),
        ({"key": "region1"}, ["region1"]),
        ({"name": name_of(HOST_B, QAT, "vf_pool")}, ["vf_pool"]),
        ({"parent_uuid": R0}, ["region0/vfs"]),
        ({"parent_uuid": "None"}, ["region0", "region1", "vgpu/nvidia-222", "vf_pool"]),
        ({"root_uuid": R0.upper()}, ["region0/vfs"]),
        ({"device_uuid": uuid_of(HOST_B, GPU)}, ["vgpu/nvidia-222"]),
        ({"hostname": HOST_B}, ["vgpu/nvidia-222", "vf_pool"]),
        ({"availability": "allocated"}, ["region0"]),
        ({"availability": "available", "hostname": HOST_A}, ["region1", "region0/vfs"]),
        ({"instance_uuid": INSTANCE}, ["region0"]),
        ({"instance_uuid": "None", "type": "FPGA"}, ["region1", "region0/vfs"]),
        ({"rp_uuid": RP}, ["region0"]),
        ({"driver_name": "intel_qat"}, ["vf_pool"]),
        ({"kind": "bogus"}, []),
        ({"type": "TOASTER"}, []),
        ({"region_type": RT1}, ["region1"]),
        ({"region_type": str(uuid.UUID(RT1))}, ["region1"]),
        ({"region_type": "None"}, ["region0/vfs", "vgpu/nvidia-222", "vf_pool"]),
        ({"function_uuid": FUNCTION}, ["region0"]),
        # Any other parameter is an attribute; dotted keys reach nested ones.
        ({"afu": "gzip"}, ["region0"]),
        ({"afu": "None"}, ["region1", "region0/vfs", "vgpu/nvidia-222", "vf_pool"]),
        ({"memory.size_mb": "4096"}, ["region1"]),
        ({"memory.size_mb": "8192"}, ["region0"]),
        ({"memory.ddr.channels": "2"}, ["region0"]),
        ({"memory.ddr.channels": "null"}, ["region1", "region0/vfs", "vgpu/nvidia-222",
                                           "vf_pool"]),
        ({"memory.size_mb": "None", "type": "FPGA"}, ["region0/vfs"]),
        ({"afu": "gzip", "memory.size_mb": "8192"}, ["region0"]),
        ({"afu": "gzip", "memory.size_mb": "4096"}, []),
        ({"type_name": "GRID T4-1B"}, ["vgpu/nvidia-222"]),
        ({"no_such_attribute": "x"}, []),
    ],
)  # fmt: skip
def test_filters(seeded: TestClient, params: dict[str, str], expected: list[str]) -> None:
    assert listed(seeded, PATH, **params) == expected


# --- sorting and pages ----------------------------------------------------------------


def test_sorting_both_ways(seeded: TestClient) -> None:
    by_key = ["region0", "region0/vfs", "region1", "vf_pool", "vgpu/nvidia-222"]
    assert listed(seeded, PATH, sort_key="key") == by_key
    assert listed(seeded, PATH, sort_key="key", sort_dir="desc") == by_key[::-1]
    # Ties are broken by creation order, which reverses with the direction.
    assert listed(seeded, PATH, sort_key="num_accelerators") == [
        "region1",
        "region0",
        "region0/vfs",
        "vgpu/nvidia-222",
        "vf_pool",
    ]
    assert listed(seeded, PATH, sort_key="num_accelerators", sort_dir="desc") == [
        "vf_pool",
        "vgpu/nvidia-222",
        "region0/vfs",
        "region0",
        "region1",
    ]
    assert listed(seeded, PATH, sort_dir="desc") == ALL[::-1]


def test_pages_follow_the_next_links(seeded: TestClient) -> None:
    keys, url, pages = [], f"{PATH}?limit=2&type=FPGA&afu=None", 0
    while url:
        body = seeded.get(url, headers=LATEST).json()
        keys += [d["key"] for d in body["deployables"]]
        url, pages = (body.get("deployables_links") or [{}])[0].get("href", ""), pages + 1
    assert (keys, pages) == (["region1", "region0/vfs"], 1)
    keys, url = [], f"{PATH}?limit=2&sort_key=key&sort_dir=desc"
    while url:
        body = seeded.get(url, headers=LATEST).json()
        keys.append([d["key"] for d in body["deployables"]])
        links = body.get("deployables_links")
        url = links[0]["href"] if links else ""
    assert keys == [["vgpu/nvidia-222", "vf_pool"], ["region1", "region0/vfs"], ["region0"]]


def test_next_link_keeps_the_filters(seeded: TestClient) -> None:
    body = seeded.get(f"{SPEC003}?hostname={HOST_B}&limit=1&type_name=None").json()
    assert [d["key"] for d in body["deployables"]] == ["vf_pool"]
    assert "deployables_links" not in body
    body = seeded.get(f"{SPEC003}?limit=1&afu=None").json()
    assert body["deployables_links"] == [
        {
            "rel": "next",
            "href": f"http://testserver{SPEC003}?limit=1&afu=None&marker={R1}",
        }
    ]


# --- attributes of one deployable -----------------------------------------------------


def test_attributes_of_a_deployable(seeded: TestClient) -> None:
    base = f"{PATH}/{R0}/attributes"
    assert seeded.get(base, headers=V2_5).json() == {"attributes": R0_ATTRIBUTES}
    assert seeded.get(f"{base}/afu", headers=V2_5).json() == {"attribute": {"afu": "gzip"}}
    assert seeded.get(f"{base}/memory.ddr.speed", headers=V2_5).json() == {
        "attribute": {"memory.ddr.speed": "2400"}
    }
    assert seeded.get(f"{base}/memory", headers=V2_5).json() == {
        "attribute": {"memory": R0_ATTRIBUTES["memory"]}
    }
    assert seeded.get(f"{PATH}/{VFS}/attributes", headers=V2_5).json() == {"attributes": {}}
    assert error(seeded.get(f"{base}/kpi", headers=V2_5)) == (
        404,
        f"Deployable {R0} has no attribute 'kpi'.",
    )
    assert error(seeded.get(f"{base}/memory.size_mb.x", headers=V2_5))[0] == 404
    for path in (base, f"{base}/afu"):
        assert error(seeded.get(path, headers=V2_0)) == (
            404,
            "Reading a deployable's attributes here needs microversion 2.5 or later.",
        )


# --- spec 003's paths -------------------------------------------------------------------


def test_spec003_paths_serve_the_latest_view(seeded: TestClient) -> None:
    response = seeded.get(f"{SPEC003}/{R0}")
    assert response.status_code == 200
    assert "openstack-api-version" not in response.headers
    assert response.json() == {"deployable": seeded.get(f"{PATH}/{R0}", headers=LATEST).json()}
    found = seeded.get(SPEC003, params={"bitstream_id": "None", "type": "FPGA"}).json()
    assert [d["uuid"] for d in found["deployables"]] == [R1, VFS]
    assert found["deployables"][0]["kind"] == "region"  # the 2.5 view
    assert seeded.get(f"{SPEC003}/{R0}/attribute/afu").json() == {"attribute": {"afu": "gzip"}}
    assert seeded.get(f"{SPEC003}/{R1}/attribute/memory").json() == {
        "attribute": {"memory": {"size_mb": "4096"}}
    }
    assert error(seeded.get(f"{SPEC003}/{R1}/attribute/afu")) == (
        404,
        f"Deployable {R1} has no attribute 'afu'.",
    )
    assert error(seeded.get(f"{SPEC003}/nope")) == (400, "uuid: 'nope' is not a UUID.")
    missing = str(uuid.UUID(int=9))
    assert error(seeded.get(f"{SPEC003}/{missing}/attribute/afu"))[0] == 404


# --- /v2/attributes ---------------------------------------------------------------------


def test_attribute_rows(seeded: TestClient, db: Database) -> None:
    known, uuids = ids(db), attribute_uuids(db)
    rows = seeded.get("/v2/attributes").json()["attributes"]
    assert sorted((r["deployable_id"], r["key"], r["value"]) for r in rows) == sorted(
        [
            (known["region0"], "afu", "gzip"),
            (known["region0"], "memory", None),
            (known["region0"], "size_mb", "8192"),
            (known["region0"], "ddr", None),
            (known["region0"], "channels", "2"),
            (known["region0"], "speed", "2400"),
            (known["region1"], "memory", None),
            (known["region1"], "size_mb", "4096"),
            (known["vgpu/nvidia-222"], "type_name", "GRID T4-1B"),
        ]
    )
    size = uuids[("region1", "size_mb")]
    old = seeded.get(f"/v2/attributes/{size}").json()
    assert isinstance(old.pop("created_at"), str) and old.pop("updated_at") is None
    assert old == {
        "uuid": size,
        "deployable_id": known["region1"],
        "key": "size_mb",
        "value": "4096",
        "links": [{"href": f"http://testserver/v2/attributes/{size}", "rel": "self"}],
    }
    new = seeded.get(f"/v2/attributes/{size}", headers=V2_5).json()
    assert (new["deployable_uuid"], new["parent_uuid"]) == (R1, uuids[("region1", "memory")])
    mine = seeded.get("/v2/attributes", params={"deployable_id": known["region1"]}).json()
    assert [a["key"] for a in mine["attributes"]] == ["memory", "size_mb"]
    sizes = seeded.get("/v2/attributes", params={"key": "size_mb", "sort_key": "key"}).json()
    assert [a["value"] for a in sizes["attributes"]] == ["8192", "4096"]
    by_uuid = seeded.get("/v2/attributes", params={"deployable_uuid": VGPU}).json()
    assert [a["key"] for a in by_uuid["attributes"]] == ["type_name"]
    page = seeded.get("/v2/attributes", params={"limit": 4}).json()
    assert len(page["attributes"]) == 4 and page["attributes_links"][0]["rel"] == "next"


# --- an operator's attributes ----------------------------------------------------------


def test_reports_leave_an_operators_attributes_alone(seeded: TestClient, db: Database) -> None:
    """An agent's next report neither deletes nor changes an operator's attribute; a key
    the agent starts reporting takes precedence over the operator's, which stays."""
    from tests.fixtures.devices import FPGA_CARD

    mine = seeded.post(
        "/v2/attributes", json={"deployable_id": R0, "key": "board_rev", "value": "B"}
    ).json()
    region0 = FPGA_CARD.deployables[0]
    reported = dataclasses.replace(region0, attributes={"afu": "md5"})
    card = dataclasses.replace(FPGA_CARD, deployables=(reported, *FPGA_CARD.deployables[1:]))
    inventory.reconcile(db, HostReport(HOST_A, "1.0", (card,)))
    shown = seeded.get(f"{PATH}/{R0}/attributes", headers=V2_5).json()["attributes"]
    assert shown == {"afu": "md5", "board_rev": "B"}
    assert seeded.get(f"/v2/attributes/{mine['uuid']}").json()["value"] == "B"
    # The agent now reports board_rev too: its value is the deployable's.
    reported = dataclasses.replace(region0, attributes={"afu": "md5", "board_rev": "C"})
    card = dataclasses.replace(FPGA_CARD, deployables=(reported, *FPGA_CARD.deployables[1:]))
    inventory.reconcile(db, HostReport(HOST_A, "1.0", (card,)))
    shown = seeded.get(f"{PATH}/{R0}/attributes", headers=V2_5).json()["attributes"]
    assert shown == {"afu": "md5", "board_rev": "C"}
    assert listed(seeded, PATH, board_rev="B") == []
    assert listed(seeded, PATH, board_rev="C") == ["region0"]
    rows = seeded.get("/v2/attributes", params={"key": "board_rev"}).json()["attributes"]
    assert sorted(r["value"] for r in rows) == ["B", "C"]
    # Once the agent stops reporting it, the operator's is the deployable's again.
    inventory.reconcile(db, HostReport(HOST_A, "1.0", (FPGA_CARD,)))
    assert listed(seeded, PATH, board_rev="B") == ["region0"]
    assert seeded.delete(f"/v2/attributes/{mine['uuid']}").status_code == 204


# --- who may read --------------------------------------------------------------------


# --- from the fake driver ------------------------------------------------------------------


def test_an_intel_fpgas_fim_version_is_an_attribute_filter(
    api: TestClient, db: Database, conf: cfg.ConfigOpts, tmp_path: Path
) -> None:
    """The FME's bitstream_id (the FIM's version) is the attribute fim_bitstream_id: it
    can be filtered on, and the column bitstream_id stays what Acceleron loaded."""
    conf.set_override("host", "fakehost")
    root = build_sysfs(tmp_path, SCENARIO_6_1)
    devices = IntelFpgaDriver(conf, root).discover()
    inventory.reconcile(db, HostReport("fakehost", "1.0", tuple(devices)))
    assert listed(api, PATH, fim_bitstream_id="0x23000410010309") == ["region0", "region0"]
    assert listed(api, PATH, fim_bitstream_id="0x24") == []
    assert listed(api, PATH, bitstream_id="None", type="FPGA") == ["region0", "region0"]


def test_ids_are_found_however_they_are_written(api: TestClient, db: Database) -> None:
    """A region reported with hyphenated, upper-case ids (spec 004's example) is found
    by ?region_type= and ?function_uuid= written with or without hyphens, in any case,
    and by each of its functions, not only the first."""
    from acceleron.vocabulary import AttachHandle
    from acceleron.vocabulary import Deployable as Dep
    from acceleron.vocabulary import Device as Dev

    region_type = "15FB0D4B-8A2C-4E7A-9B1D-2C3E4F5A6B7C"
    first, second = "0AB1C2D3-0000-4000-8000-00000000000A", "b7c8d9e0-1111-4111-8111-11111111111b"
    card = Dev(
        "0000:42:00.0",
        "FPGA",
        "10ee",
        "XILINX",
        "5001",
        "U250",
        "xilinx_fpga",
        deployables=(
            Dep(
                "region0",
                "region",
                1,
                programmable=True,
                region_type=region_type,
                function_uuids=(first, second),
                attach_handles=(AttachHandle("PCI", "0000:42:00.1"),),
            ),
        ),
    )
    inventory.reconcile(db, HostReport("host-x", "1.0", (card,)))
    for value in (
        region_type,
        region_type.lower(),
        region_type.replace("-", ""),
        region_type.replace("-", "").lower(),
        region_type.replace("-", "_"),
    ):
        assert listed(api, PATH, region_type=value) == ["region0"], value
    for value in (
        first,
        first.lower().replace("-", ""),
        second,
        second.upper(),
        second.replace("-", ""),
    ):
        assert listed(api, PATH, function_uuid=value) == ["region0"], value
    assert listed(api, PATH, function_uuid="0ab1c2d3") == []
    assert listed(api, PATH, function_uuid="100%") == []
