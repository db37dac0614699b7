"""What a device profile's show and create ask of the database, on every backend: a
profile and its steering are read in one transaction (a reader opened inside another of
the same database joins it), and a create finds a taken name or uuid by the unique
indexes alone, telling the two apart as before."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event

from acceleron.bitstreams.local import LocalStore
from acceleron.db.session import Database
from acceleron.exceptions import DuplicateName
from acceleron.service import device_profiles

FUNCTION = "8411555e-3cbf-47de-988c-b5e30bbfa035"
GROUPS = [{"resources:CUSTOM_ACCELERATOR_FPGA": "1", "accel:function_id": FUNCTION}]


@contextmanager
def transactions(db: Database) -> Iterator[list[object]]:
    """The transactions begun on ``db``'s engines while the block runs."""
    begun: list[object] = []

    def begin(conn: Any) -> None:
        if conn.engine.url == db.url:
            begun.append(conn)

    event.listen(Engine, "begin", begin)
    try:
        yield begun
    finally:
        event.remove(Engine, "begin", begin)


def test_a_reader_inside_a_reader_joins_it(db: Database) -> None:
    with db.reader() as outer:
        with db.reader() as inner:
            assert inner is outer
        with db.writer() as writer:  # a write is never part of a read transaction
            assert writer is not outer
    with db.reader() as later:
        assert later is not outer


def test_a_profile_and_its_steering_are_read_in_one_transaction(
    db: Database, tmp_path: Path
) -> None:
    made = device_profiles.create(db, name="fn", groups=GROUPS)
    store = LocalStore(db, tmp_path / "store")
    with transactions(db) as begun:
        (shown,) = device_profiles.read_steered(
            db, lambda d: [device_profiles.get(d, made.uuid)], store, "project", True
        )
    assert len(begun) == 1  # the profile, the store's bitstreams, the holders, the types
    assert shown.groups == made.groups  # nothing is published: nothing to steer by


def test_a_taken_name_or_uuid_is_told_apart(db: Database) -> None:
    first = device_profiles.create(db, name="taken", groups=GROUPS)
    with pytest.raises(DuplicateName, match="with name 'taken' already exists"):
        device_profiles.create(db, name="taken", groups=GROUPS)
    with pytest.raises(DuplicateName, match=f"with uuid '{first.uuid}' already exists"):
        device_profiles.create(db, name="other", groups=GROUPS, uuid=first.uuid)
    assert [p.name for p in device_profiles.list_profiles(db)] == ["taken"]
