"""Reconciling host reports with the database, on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any

import pytest
from oslo_config import cfg
from sqlalchemy import insert, select, update

from acceleron.db.models import (
    AcceleratorRequest,
    AttachHandle,
    Attribute,
    Deployable,
    Device,
    DeviceProfile,
    Host,
    table,
)
from acceleron.db.session import Database, StatementCounter
from acceleron.drivers.fake import FakeDriver
from acceleron.placement import names
from acceleron.report import HostReport
from acceleron.service import inventory
from acceleron.vocabulary import AttachHandle as Handle
from acceleron.vocabulary import Deployable as Dep
from acceleron.vocabulary import Device as Dev

DEVICES, DEPLOYABLES, HANDLES = table(Device), table(Deployable), table(AttachHandle)
ATTRIBUTES, HOSTS = table(Attribute), table(Host)


def fake_report(conf: cfg.ConfigOpts, host: str = "host-1") -> HostReport:
    conf.set_override("host", host)
    return HostReport(host, "1.0", tuple(FakeDriver(conf, Path("/")).discover()))


def rows(db: Database, tbl: Any, **where: Any) -> list[Any]:
    query = select(tbl).where(*(tbl.c[k] == v for k, v in where.items())).order_by(tbl.c.id)
    with db.reader() as conn:
        return list(conn.execute(query))


def test_first_report_stores_the_whole_inventory(db: Database, conf: cfg.ConfigOpts) -> None:
    report = fake_report(conf)
    outcome = inventory.reconcile(db, report)
    assert outcome.changed and outcome.generation == 1 and outcome.devices == 5
    devices = rows(db, DEVICES, hostname="host-1")
    assert [d.type for d in devices] == ["FPGA", "FPGA", "GPU", "GPU", "QAT"]
    assert {d.state for d in devices} == {"present"}
    kinds = sorted(d.kind for d in rows(db, DEPLOYABLES))
    assert kinds == ["mig_profile"] * 2 + ["region"] * 4 + ["vf_pool"] + ["vgpu_type"] * 2
    regions = [d for d in rows(db, DEPLOYABLES) if d.kind == "region"]
    assert {r.region_type for r in regions} == {
        "ce48969398f05f33946d560708be108a",
        "9926ab6d6c925a68aabca7d84c545738",
    }
    assert sum(1 for r in regions if r.function_uuid == "d8424dc4a4a3c413f89e433683f9040b") == 2
    # Every function of a region is kept, in order; the first is also function_uuid.
    assert [r.function_uuids for r in regions] == [
        ["d8424dc4a4a3c413f89e433683f9040b", "f7df405cbd7acf7222f144b0b93acd18"],
        [],
    ] * 2
    assert all(r.programmable for r in regions)
    expected_handles = sum(dep.num_accelerators for d in report.devices for dep in d.deployables)
    assert len(rows(db, HANDLES)) == expected_handles
    assert rows(db, HOSTS)[0].generation == 1


def test_the_same_report_twice_writes_nothing(db: Database, conf: cfg.ConfigOpts) -> None:
    report = fake_report(conf)
    inventory.reconcile(db, report)
    with StatementCounter(db) as counted:
        outcome = inventory.reconcile(db, report)
    assert not outcome.changed and outcome.generation == 1
    assert counted.writes == 0
    assert counted.by_verb == {"SELECT": 1}  # only the host's digest was read
    # Without the digest short cut the diff itself finds nothing to write either.
    with StatementCounter(db) as counted, db.writer() as conn:
        counts = inventory.apply(
            conn, inventory.load_existing(conn, "host-1"), inventory.desired_state(report)
        )
    assert not any(counts.values()) and counted.writes == 0


def test_changes_are_applied_and_counted(db: Database, conf: cfg.ConfigOpts) -> None:
    report = fake_report(conf)
    inventory.reconcile(db, report)
    qat = report.devices[-1]
    pool = qat.deployables[0]
    more_vfs = tuple(Handle("TEST_PCI", f"0000:99:01.{i}") for i in range(6))
    grown = dataclasses.replace(
        qat,
        numa_node=0,
        deployables=(dataclasses.replace(pool, num_accelerators=6, attach_handles=more_vfs),),
    )
    changed = dataclasses.replace(report, devices=(*report.devices[:-1], grown))
    outcome = inventory.reconcile(db, changed)
    assert outcome.changed and outcome.generation == 2
    counts = {k: v for k, v in outcome.counts.items() if v}
    old_handles = len(pool.attach_handles)
    assert counts == {
        "devices_changed": 1,
        "deployables_changed": 1,
        "attach_handles_added": 6,
        "removed": old_handles,
    }
    device = rows(db, DEVICES, pci_address=qat.pci_address)[0]
    assert device.numa_node == 0
    dep = rows(db, DEPLOYABLES, device_id=device.id)[0]
    assert dep.num_accelerators == 6
    assert sorted(h.address for h in rows(db, HANDLES, deployable_id=dep.id)) == [
        f"0000:99:01.{i}" for i in range(6)
    ]


def test_vfs_appearing_later_add_handles_and_keep_ids(db: Database, conf: cfg.ConfigOpts) -> None:
    report = fake_report(conf)
    inventory.reconcile(db, report)
    deployables = {d.uuid: d.id for d in rows(db, DEPLOYABLES)}
    handles = {h.address: h.id for h in rows(db, HANDLES)}
    qat = report.devices[-1]
    pool = qat.deployables[0]
    more = tuple(Handle("TEST_PCI", f"{pool.attach_handles[0].address[:-1]}{i}") for i in (5, 6))
    grown = dataclasses.replace(pool, num_accelerators=6, attach_handles=pool.attach_handles + more)
    later = dataclasses.replace(
        report, devices=(*report.devices[:-1], dataclasses.replace(qat, deployables=(grown,)))
    )
    outcome = inventory.reconcile(db, later)
    assert {k: v for k, v in outcome.counts.items() if v} == {
        "deployables_changed": 1,
        "attach_handles_added": 2,
    }
    assert {d.uuid: d.id for d in rows(db, DEPLOYABLES)} == deployables
    now = {h.address: h.id for h in rows(db, HANDLES)}
    assert {a: now[a] for a in handles} == handles and len(now) == len(handles) + 2


def hold(db: Database, handle_id: int) -> None:
    """Give a handle to an accelerator request, as a bind would."""
    with db.writer() as conn:
        profile = conn.execute(
            insert(table(DeviceProfile))
            .values(uuid=str(uuid.uuid4()), name="p", groups=[{"resources:FPGA": "1"}])
            .returning(table(DeviceProfile).c.id)
        ).scalar_one()
        arq = conn.execute(
            insert(table(AcceleratorRequest))
            .values(
                uuid=str(uuid.uuid4()),
                state="Bound",
                device_profile_id=profile,
                device_profile_group_id=0,
            )
            .returning(table(AcceleratorRequest).c.id)
        ).scalar_one()
        conn.execute(
            update(HANDLES).where(HANDLES.c.id == handle_id).values(arq_id=arq, in_use=True)
        )


def test_a_device_in_use_that_vanishes_is_lost_then_comes_back(
    db: Database, conf: cfg.ConfigOpts
) -> None:
    report = fake_report(conf)
    inventory.reconcile(db, report)
    first, second = report.devices[0], report.devices[1]
    device = rows(db, DEVICES, pci_address=first.pci_address)[0]
    region = rows(db, DEPLOYABLES, device_id=device.id)[0]
    held = rows(db, HANDLES, deployable_id=region.id)[0]
    hold(db, held.id)
    # Both FPGAs vanish: the free one is deleted, the held one is kept as lost.
    inventory.reconcile(db, dataclasses.replace(report, devices=report.devices[2:]))
    assert rows(db, DEVICES, pci_address=second.pci_address) == []
    lost = rows(db, DEVICES, pci_address=first.pci_address)
    assert [d.state for d in lost] == ["lost"] and lost[0].uuid == device.uuid
    assert [h.id for h in rows(db, HANDLES, state="lost")] == [held.id]
    # Only what the request holds survives, the rest of the card is gone.
    assert [d.id for d in rows(db, DEPLOYABLES, device_id=device.id)] == [region.id]
    assert [h.id for h in rows(db, HANDLES, deployable_id=region.id)] == [held.id]
    # They come back: present again, same uuids, the request keeps its handle.
    outcome = inventory.reconcile(db, report)
    assert outcome.changed
    back = rows(db, DEVICES, pci_address=first.pci_address)[0]
    assert (back.id, back.uuid, back.state) == (device.id, device.uuid, "present")
    handle = rows(db, HANDLES, id=held.id)[0]
    assert (handle.state, handle.in_use, handle.arq_id is not None) == ("present", True, True)
    # The deleted card is new rows now, but with the uuid it had: derived from host and address.
    assert rows(db, DEVICES, pci_address=second.pci_address)[0].uuid == names.provider_uuid(
        "host-1", second.pci_address
    )


def nested_card() -> Dev:
    """A card whose region sits under a VF pool: a two-level tree."""
    region = Dep(
        "region0", "region", 1, programmable=True, attach_handles=(Handle("PCI", "0000:5e:00.1"),)
    )
    pool = Dep(
        "vf_pool", "vf_pool", 1, attach_handles=(Handle("PCI", "0000:5e:00.2"),), children=(region,)
    )
    return Dev(
        "0000:5e:00.0",
        "FPGA",
        "8086",
        "INTEL",
        "09c4",
        "PAC_ARRIA10",
        "intel_fpga",
        deployables=(pool,),
    )


def test_a_held_child_keeps_its_parent_when_the_card_vanishes(db: Database) -> None:
    card = nested_card()
    qat = Dev("0000:3d:00.0", "QAT", "8086", "INTEL", "37c8", "C62X", "intel_qat")
    inventory.reconcile(db, HostReport("h", "1", (card,)))
    pool, region = rows(db, DEPLOYABLES)
    held = rows(db, HANDLES, deployable_id=region.id)[0]
    hold(db, held.id)
    inventory.reconcile(db, HostReport("h", "1", ()))
    # The region is held, so the pool it points at stays too; the pool's free handle goes.
    assert [d.id for d in rows(db, DEPLOYABLES)] == [pool.id, region.id]
    assert [(d.pci_address, d.state) for d in rows(db, DEVICES)] == [("0000:5e:00.0", "lost")]
    assert [(h.id, h.state) for h in rows(db, HANDLES)] == [(held.id, "lost")]
    # Later reports of the host still apply...
    assert inventory.reconcile(db, HostReport("h", "1", (qat,))).changed
    assert sorted(d.pci_address for d in rows(db, DEVICES)) == ["0000:3d:00.0", "0000:5e:00.0"]
    # ...and the card comes back in place, its tree whole again.
    inventory.reconcile(db, HostReport("h", "1", (card, qat)))
    back = {d.key: d for d in rows(db, DEPLOYABLES) if d.key in ("vf_pool", "region0")}
    assert (back["vf_pool"].id, back["region0"].id) == (pool.id, region.id)
    assert (back["region0"].parent_id, back["region0"].root_id) == (pool.id, pool.id)
    assert rows(db, DEVICES, pci_address="0000:5e:00.0")[0].state == "present"
    assert rows(db, HANDLES, id=held.id)[0].state == "present"


def test_a_lost_device_goes_once_released_and_forgotten(db: Database, conf: cfg.ConfigOpts) -> None:
    report = fake_report(conf)
    inventory.reconcile(db, report)
    address = report.devices[0].pci_address
    device = rows(db, DEVICES, pci_address=address)[0]
    region = rows(db, DEPLOYABLES, device_id=device.id)[0]
    held = rows(db, HANDLES, deployable_id=region.id)[0]
    hold(db, held.id)
    without = dataclasses.replace(report, devices=report.devices[1:])
    inventory.reconcile(db, without)
    assert rows(db, DEVICES, pci_address=address)[0].state == "lost"
    # The request lets go of the lost handle, as releasing an ARQ does.
    with db.writer() as conn:
        conn.execute(
            update(HANDLES).where(HANDLES.c.id == held.id).values(arq_id=None, in_use=False)
        )
    # The same report again is taken as unchanged: the lost card stays...
    assert not inventory.reconcile(db, without).changed
    assert len(rows(db, DEVICES, pci_address=address)) == 1
    # ...until the host's last report is forgotten: the next one is diffed in full.
    with db.writer() as conn:
        inventory.forget_report(conn, "host-1")
    outcome = inventory.reconcile(db, without)
    assert outcome.changed and outcome.counts["removed"] == 3  # handle, region, device
    assert rows(db, DEVICES, pci_address=address) == []
    assert rows(db, DEPLOYABLES, device_id=device.id) == []
    assert rows(db, HANDLES, id=held.id) == []
    assert not inventory.reconcile(db, without).changed  # the digest is back


def test_trees_and_nested_attributes(db: Database) -> None:
    region = Dep(
        "region0",
        "region",
        1,
        programmable=True,
        region_type="aa" * 16,
        attributes={"fme": {"bitstream_id": "0x23", "ports": 2}, "kpi": "fast"},
        attach_handles=(Handle("PCI", "0000:5e:00.1"),),
    )
    card = Dev(
        "0000:5e:00.0",
        "FPGA",
        "8086",
        "INTEL",
        "09c4",
        "PAC_ARRIA10",
        "intel_fpga",
        deployables=(Dep("vf_pool", "vf_pool", 0, children=(region,)),),
    )
    inventory.reconcile(db, HostReport("h", "1", (card,)))
    pool, reg = rows(db, DEPLOYABLES)
    assert (pool.parent_id, pool.root_id) == (None, None)
    assert (reg.parent_id, reg.root_id) == (pool.id, pool.id)
    attrs = {a.key: a for a in rows(db, ATTRIBUTES)}
    assert attrs["fme"].value is None and attrs["fme"].parent_id is None
    assert attrs["bitstream_id"].parent_id == attrs["fme"].id
    assert (attrs["ports"].value, attrs["kpi"].value) == ("2", "fast")
    # Change one nested value and drop another: only those rows are touched.
    changed = dataclasses.replace(
        region, attributes={"fme": {"bitstream_id": "0x24"}, "kpi": "fast"}
    )
    card2 = dataclasses.replace(
        card, deployables=(Dep("vf_pool", "vf_pool", 0, children=(changed,)),)
    )
    with StatementCounter(db) as counted:
        outcome = inventory.reconcile(db, HostReport("h", "1", (card2,)))
    assert {k: v for k, v in outcome.counts.items() if v} == {
        "attributes_changed": 1,
        "attributes_removed": 1,
    }
    assert counted.by_verb.get("UPDATE") == 2 and counted.by_verb.get("DELETE") == 1  # + host
    assert {a.key: a.value for a in rows(db, ATTRIBUTES)} == {
        "fme": None,
        "bitstream_id": "0x24",
        "kpi": "fast",
    }


def test_an_unknown_bitstream_keeps_the_recorded_one(db: Database, conf: cfg.ConfigOpts) -> None:
    report = fake_report(conf)
    inventory.reconcile(db, report)
    with db.writer() as conn:
        conn.execute(
            update(DEPLOYABLES).where(DEPLOYABLES.c.kind == "region").values(bitstream_id="b1")
        )
    with StatementCounter(db) as counted, db.writer() as conn:
        counts = inventory.apply(
            conn, inventory.load_existing(conn, "host-1"), inventory.desired_state(report)
        )
    assert not any(counts.values()) and counted.writes == 0
    assert {d.bitstream_id for d in rows(db, DEPLOYABLES, kind="region")} == {"b1"}


def test_hosts_do_not_see_each_other(db: Database, conf: cfg.ConfigOpts) -> None:
    inventory.reconcile(db, fake_report(conf, "host-1"))
    inventory.reconcile(db, fake_report(conf, "host-2"))
    inventory.reconcile(db, HostReport("host-1", "1.0", ()))
    assert rows(db, DEVICES, hostname="host-1") == []
    assert len(rows(db, DEVICES, hostname="host-2")) == 5


@pytest.mark.parametrize("heartbeat_due", [False, True])
def test_heartbeat(db: Database, conf: cfg.ConfigOpts, heartbeat_due: bool) -> None:
    report = fake_report(conf)
    inventory.reconcile(db, report)
    later = rows(db, HOSTS)[0].last_report_at + (
        inventory.HEARTBEAT if heartbeat_due else inventory.HEARTBEAT / 2
    )
    with StatementCounter(db) as counted:
        inventory.reconcile(db, report, now=later)
    assert counted.writes == (1 if heartbeat_due else 0)
    assert (rows(db, HOSTS)[0].last_report_at == later) is heartbeat_due


def test_new_deployables_with_and_without_a_known_bitstream(db: Database) -> None:
    known = Dep(
        "region0",
        "region",
        1,
        programmable=True,
        bitstream_id="b-1",
        attach_handles=(Handle("PCI", "0000:5e:00.1"),),
    )
    unknown = Dep(
        "region1", "region", 1, programmable=True, attach_handles=(Handle("PCI", "0000:5e:00.2"),)
    )
    card = Dev(
        "0000:5e:00.0",
        "FPGA",
        "8086",
        "INTEL",
        "09c4",
        "PAC_ARRIA10",
        "intel_fpga",
        deployables=(known, unknown),
    )
    inventory.reconcile(db, HostReport("h", "1", (card,)))
    assert [(d.key, d.bitstream_id) for d in rows(db, DEPLOYABLES)] == [
        ("region0", "b-1"),
        ("region1", None),
    ]
