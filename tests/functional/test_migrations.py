"""Migrations upgrade an empty database to exactly the models, on every backend."""

from __future__ import annotations

import datetime as dt

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, inspect, select, text

from acceleron.db import migrate
from acceleron.db.models import (
    AcceleratorRequest,
    Attribute,
    Base,
    Deployable,
    Device,
    Host,
    table,
)
from acceleron.db.session import Database

DEPLOYABLES = table(Deployable)


def test_upgrade_from_empty_matches_the_models(migrated_db: Database) -> None:
    assert migrate.state(migrated_db).up_to_date
    with migrated_db.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        differences = compare_metadata(context, Base.metadata)
    assert differences == []


def test_every_table_is_created(migrated_db: Database) -> None:
    tables = set(inspect(migrated_db.engine).get_table_names())
    assert set(Base.metadata.tables) <= tables
    assert "alembic_version" in tables


def test_upgrade_again_is_a_no_op(migrated_db: Database) -> None:
    migrate.all_phases(migrated_db)
    migrate.check(migrated_db)
    assert migrate.state(migrated_db).up_to_date


def _insert(conn: Connection, name: str, values: dict[str, object]) -> None:
    """A row written with SQL of the revision at hand, not with today's models."""
    quote = conn.dialect.identifier_preparer.quote
    columns = ", ".join(quote(column) for column in values)
    params = ", ".join(f":{column}" for column in values)
    conn.execute(text(f"INSERT INTO {name} ({columns}) VALUES ({params})"), values)


def test_0005_fills_function_uuids_and_forgets_digests(fresh_db: Database) -> None:
    migrate.upgrade(fresh_db, "0004")
    created = dt.datetime(2026, 1, 1)
    with fresh_db.engine.begin() as conn:
        _insert(
            conn,
            "hosts",
            {
                "id": 1,
                "hostname": "h",
                "report_digest": "abc",
                "generation": 1,
                "synced_generation": 1,
                "created_at": created,
            },
        )
        _insert(
            conn,
            "devices",
            {
                "id": 1,
                "uuid": "d",
                "hostname": "h",
                "pci_address": "0000:5e:00.0",
                "type": "FPGA",
                "vendor": "8086",
                "vendor_name": "INTEL",
                "product_id": "09c4",
                "model": "A10",
                "driver_name": "fake",
                "std_board_info": "{}",
                "vendor_board_info": "{}",
                "status": "enabled",
                "state": "present",
                "health": "ok",
                "created_at": created,
            },
        )
        for row_id, function in ((1, "d8424dc4a4a3c413f89e433683f9040b"), (2, None)):
            _insert(
                conn,
                "deployables",
                {
                    "id": row_id,
                    "uuid": f"u{row_id}",
                    "device_id": 1,
                    "key": f"r{row_id}",
                    "name": f"n{row_id}",
                    "kind": "region",
                    "num_accelerators": 1,
                    "traits": "[]",
                    "driver_name": "fake",
                    "function_uuid": function,
                    "assignable": True,
                    "availability": "available",
                    "programmable": True,
                    "created_at": created,
                },
            )
    migrate.upgrade(fresh_db)
    with fresh_db.reader() as conn:
        found = conn.execute(
            select(DEPLOYABLES.c.id, DEPLOYABLES.c.function_uuids).order_by(DEPLOYABLES.c.id)
        ).all()
        digests = conn.execute(select(table(Host).c.report_digest)).scalars().all()
    assert [tuple(row) for row in found] == [(1, ["d8424dc4a4a3c413f89e433683f9040b"]), (2, [])]
    assert digests == [None]


def _fpga_card(conn: Connection, created: dt.datetime, health: str) -> None:
    """Device 1, an FPGA card on host h, as the revisions before 0009 (health "ok") or
    after (health "healthy") keep it."""
    _insert(
        conn,
        "devices",
        {
            "id": 1,
            "uuid": "d",
            "hostname": "h",
            "pci_address": "0000:5e:00.0",
            "type": "FPGA",
            "vendor": "8086",
            "vendor_name": "INTEL",
            "product_id": "09c4",
            "model": "A10",
            "driver_name": "fake",
            "std_board_info": "{}",
            "vendor_board_info": "{}",
            "status": "enabled",
            "state": "present",
            "health": health,
            "created_at": created,
        },
    )


def test_0006_marks_existing_attributes_as_the_agents(fresh_db: Database) -> None:
    migrate.upgrade(fresh_db, "0005")
    created = dt.datetime(2026, 1, 1)
    with fresh_db.engine.begin() as conn:
        _fpga_card(conn, created, "ok")
        _insert(
            conn,
            "deployables",
            {
                "id": 1,
                "uuid": "u1",
                "device_id": 1,
                "key": "r1",
                "name": "n1",
                "kind": "region",
                "num_accelerators": 1,
                "traits": "[]",
                "driver_name": "fake",
                "assignable": True,
                "availability": "available",
                "programmable": True,
                "function_uuids": "[]",
                "created_at": created,
            },
        )
        _insert(
            conn,
            "attributes",
            {
                "id": 1,
                "uuid": "a1",
                "deployable_id": 1,
                "key": "afu",
                "value": "gzip",
                "created_at": created,
            },
        )
    migrate.upgrade(fresh_db)
    with fresh_db.reader() as conn:
        assert conn.execute(select(table(Attribute).c.source)).scalars().all() == ["agent"]


def test_0009_renames_health_words_and_adds_maintenance(fresh_db: Database) -> None:
    migrate.upgrade(fresh_db, "0006")
    created = dt.datetime(2026, 1, 1)
    with fresh_db.engine.begin() as conn:
        for row_id, health in ((1, "ok"), (2, "degraded"), (3, "failed")):
            _insert(
                conn,
                "devices",
                {
                    "id": row_id,
                    "uuid": f"d{row_id}",
                    "hostname": "h",
                    "pci_address": f"0000:5e:00.{row_id}",
                    "type": "FPGA",
                    "vendor": "8086",
                    "vendor_name": "INTEL",
                    "product_id": "09c4",
                    "model": "A10",
                    "driver_name": "fake",
                    "std_board_info": "{}",
                    "vendor_board_info": "{}",
                    "status": "enabled",
                    "state": "present",
                    "health": health,
                    "created_at": created,
                },
            )
        _insert(
            conn,
            "deployables",
            {
                "id": 1,
                "uuid": "u1",
                "device_id": 1,
                "key": "r1",
                "name": "n1",
                "kind": "region",
                "num_accelerators": 1,
                "traits": "[]",
                "driver_name": "fake",
                "assignable": True,
                "availability": "available",
                "programmable": True,
                "function_uuids": "[]",
                "created_at": created,
            },
        )
    migrate.upgrade(fresh_db)
    devices = table(Device)
    with fresh_db.reader() as conn:
        found = conn.execute(
            select(devices.c.health, devices.c.maintenance_reason).order_by(devices.c.id)
        ).all()
        dep = conn.execute(select(DEPLOYABLES.c.health, DEPLOYABLES.c.status)).one()
    assert [tuple(row) for row in found] == [
        ("healthy", None),
        ("degraded", None),
        ("unhealthy", None),
    ]
    assert tuple(dep) == ("healthy", "enabled")


def test_0010_gives_existing_requests_their_resource_class(fresh_db: Database) -> None:
    migrate.upgrade(fresh_db, "0006")
    created = dt.datetime(2026, 1, 1)
    groups = (
        '[{"resources:CUSTOM_ACCELERATOR_FPGA": "1"}, {"resources:CUSTOM_A": "1", '
        '"resources:CUSTOM_B": "1"}]'
    )
    with fresh_db.engine.begin() as conn:
        _insert(
            conn,
            "device_profiles",
            {
                "id": 1,
                "uuid": "p",
                "name": "dp",
                "groups": groups,
                "enabled": True,
                "created_at": created,
            },
        )
        for row_id, group in ((1, 0), (2, 1), (3, 1)):
            _insert(
                conn,
                "accelerator_requests",
                {
                    "id": row_id,
                    "uuid": f"a{row_id}",
                    "state": "Bound",
                    "project_id": "p1",
                    "device_profile_id": 1,
                    "device_profile_group_id": group,
                    "created_at": created,
                },
            )
    migrate.upgrade(fresh_db)
    arqs = table(AcceleratorRequest)
    with fresh_db.reader() as conn:
        found = conn.execute(select(arqs.c.id, arqs.c.resource_class).order_by(arqs.c.id)).all()
    assert [tuple(row) for row in found] == [
        (1, "CUSTOM_ACCELERATOR_FPGA"),
        (2, "CUSTOM_A"),
        (3, "CUSTOM_B"),
    ]


def test_0012_gives_existing_regions_their_function_key(fresh_db: Database) -> None:
    migrate.upgrade(fresh_db, "0011")
    created = dt.datetime(2026, 1, 1)
    with fresh_db.engine.begin() as conn:
        _fpga_card(conn, created, "healthy")
        for row_id, function in ((1, " f7df405c-bd7a-cf72-22f1-44b0b93acd18"), (2, None)):
            _insert(
                conn,
                "deployables",
                {
                    "id": row_id,
                    "uuid": f"u{row_id}",
                    "device_id": 1,
                    "key": f"r{row_id}",
                    "name": f"n{row_id}",
                    "kind": "region",
                    "num_accelerators": 1,
                    "traits": "[]",
                    "driver_name": "fake",
                    "assignable": True,
                    "availability": "available",
                    "programmable": True,
                    "function_uuid": function,
                    "function_uuids": "[]",
                    "health": "healthy",
                    "status": "enabled",
                    "created_at": created,
                },
            )
    migrate.upgrade(fresh_db)
    with fresh_db.reader() as conn:
        keys = conn.execute(select(DEPLOYABLES.c.function_key).order_by(DEPLOYABLES.c.id))
        assert keys.scalars().all() == ["F7DF405CBD7ACF7222F144B0B93ACD18", None]


def test_0014_marks_the_regions_holding_several_functions(fresh_db: Database) -> None:
    """And keeps every deployable's rows: SQLite adds the column in place (a copied
    table would take the attributes with it, through their cascade)."""
    migrate.upgrade(fresh_db, "0013")
    created = dt.datetime(2026, 1, 1)
    listed = {1: ("a" * 32, '["' + "a" * 32 + '", "' + "b" * 32 + '"]'),
              2: ("a" * 32, '["' + "a" * 32 + '"]'),
              3: ("c" * 32, '["' + "a" * 32 + '", "' + "b" * 32 + '"]'),  # programmed since
              4: (None, "[]")}  # fmt: skip
    with fresh_db.engine.begin() as conn:
        _fpga_card(conn, created, "healthy")
        for row_id, (function, functions) in listed.items():
            _insert(
                conn,
                "deployables",
                {
                    "id": row_id,
                    "uuid": f"u{row_id}",
                    "device_id": 1,
                    "key": f"r{row_id}",
                    "name": f"n{row_id}",
                    "kind": "region",
                    "num_accelerators": 1,
                    "traits": "[]",
                    "driver_name": "fake",
                    "assignable": True,
                    "availability": "available",
                    "programmable": True,
                    "function_uuid": function,
                    "function_uuids": functions,
                    "health": "healthy",
                    "status": "enabled",
                    "created_at": created,
                },
            )
        _insert(
            conn,
            "attributes",
            {
                "id": 1,
                "uuid": "a1",
                "deployable_id": 1,
                "key": "afu",
                "value": "gzip",
                "source": "agent",
                "created_at": created,
            },
        )
    migrate.upgrade(fresh_db)
    with fresh_db.reader() as conn:
        several = (
            conn.execute(select(DEPLOYABLES.c.several_functions).order_by(DEPLOYABLES.c.id))
            .scalars()
            .all()
        )
        attributes = conn.execute(select(table(Attribute).c.key)).scalars().all()
    assert several == [True, False, False, False]
    assert attributes == ["afu"]


def test_0015_marks_established_claims_done(fresh_db: Database) -> None:
    """A claim made before its steps were recorded: an established one is ``done``; one
    still ``allocating`` has no step (recovery undoes it as a claim of unknown progress)."""
    migrate.upgrade(fresh_db, "0014")
    created = dt.datetime(2026, 1, 1)
    with fresh_db.engine.begin() as conn:
        for row_id, state in ((1, "bound"), (2, "binding"), (3, "allocating")):
            _insert(
                conn,
                "claims",
                {
                    "id": row_id,
                    "consumer": f"c{row_id}",
                    "project_id": "p",
                    "device_profile_name": "dp",
                    "state": state,
                    "created_at": created,
                },
            )
    migrate.upgrade(fresh_db)
    with fresh_db.reader() as conn:
        rows = conn.execute(text("SELECT step, owner, lease_until FROM claims ORDER BY id"))
        assert [tuple(r) for r in rows] == [
            ("done", None, None),
            ("done", None, None),
            (None, None, None),
        ]
