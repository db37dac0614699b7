"""What a device profile's show and create ask of the database, on every backend: a
profile and its steering are read in one transaction (a reader opened inside another of
the same database joins it); a group's steering is kept until this process writes, or
for a while; and a create finds a taken name or uuid by the unique indexes alone,
telling the two apart as before."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event

from acceleron.bitstreams.local import LocalStore
from acceleron.bitstreams.model import NewBitstream
from acceleron.db.session import Database
from acceleron.exceptions import DuplicateName
from acceleron.service import device_profiles, fitting

FUNCTION = "8411555e-3cbf-47de-988c-b5e30bbfa035"
GROUPS = [{"resources:CUSTOM_ACCELERATOR_FPGA": "1", "accel:function_id": FUNCTION}]
REGION_TYPE = "9926ab6d-6c92-5a68-aabc-a7d84c545738"


def store_with_bitstream(db: Database, tmp_path: Path) -> LocalStore:
    """A local store holding a public bitstream of FUNCTION (so the group fits somewhere)."""
    store = LocalStore(db, tmp_path / "store")
    meta = NewBitstream(
        name="fn.gbs", function_uuid=FUNCTION, visibility="public", region_type_uuid=REGION_TYPE
    )
    store.upload(io.BytesIO(b"bits"), meta)
    return store


def selects(db: Database, run: Callable[[], object]) -> int:
    """How many SELECTs ``run()`` sends to ``db``'s database."""
    statements: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if conn.engine.url == db.url and statement.lstrip().upper().startswith("SELECT"):
            statements.append(statement)

    event.listen(Engine, "before_cursor_execute", count)
    try:
        run()
    finally:
        event.remove(Engine, "before_cursor_execute", count)
    return len(statements)


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
        begun = outer.get_transaction()
        with db.reader() as inner:
            assert inner is outer and inner.get_transaction() is begun
        with db.writer() as writer:  # a write is never part of a read transaction
            assert writer is not outer
    with db.reader() as later:  # a transaction of its own (on SQLite, the kept connection)
        assert later.get_transaction() is not begun


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


def test_a_group_s_steering_is_kept_until_this_process_writes_or_a_while_passes(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Steered once, a group's steering serves the next shows of its project; a write of
    this process (any) makes the next show steer again; another process's write (a
    Database of its own) does not, until ``STEERING_SECONDS`` have passed."""
    made = device_profiles.create(db, name="fn", groups=GROUPS)
    store = store_with_bitstream(db, tmp_path)
    steered: list[str] = []
    real_steer = fitting.with_fit_traits

    def counted(*args: Any) -> Any:
        steered.append(args[3])  # the project
        return real_steer(*args)

    monkeypatch.setattr(fitting, "with_fit_traits", counted)
    now = [1000.0]
    monkeypatch.setattr(device_profiles._STEERED, "clock", lambda: now[0])

    def show(project: str = "p1") -> None:
        (shown,) = device_profiles.read_steered(
            db, lambda d: [device_profiles.get(d, made.uuid)], store, project, True
        )
        assert shown.groups == made.groups

    show()
    show()
    assert steered == ["p1"]
    show("p2")  # another project's steering is its own
    assert steered == ["p1", "p2"]
    with db.writer():  # this process writes
        pass
    show()
    assert steered == ["p1", "p2", "p1"]
    other = Database(str(db.url))
    try:
        with other.writer():  # another process writes
            pass
    finally:
        other.dispose()
    now[0] += device_profiles.STEERING_SECONDS - 0.1
    show()
    assert steered == ["p1", "p2", "p1"]
    now[0] += 0.1
    show()
    assert steered == ["p1", "p2", "p1", "p1"]


def test_a_kept_show_reads_the_profile_alone(db: Database, tmp_path: Path) -> None:
    made = device_profiles.create(db, name="fn", groups=GROUPS)
    store = store_with_bitstream(db, tmp_path)

    def show() -> None:
        device_profiles.read_steered(
            db, lambda d: [device_profiles.get(d, made.uuid)], store, "project", True
        )

    assert selects(db, show) > 1  # the profile, the store's bitstreams, holders, types
    assert selects(db, show) == 1


def test_a_group_that_fits_nowhere_is_kept_until_a_bitstream_of_it_exists(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No bitstream of the function, no region holding it: kept, each show checking the
    bitstreams alone (one statement beside the profile's); a bitstream uploaded through
    another API process (a Database of its own, the same store) is seen at the next show."""
    made = device_profiles.create(db, name="fn", groups=GROUPS)
    store = LocalStore(db, tmp_path / "store")
    steered: list[str] = []
    real_steer = fitting.with_fit_traits

    def counted(*args: Any) -> Any:
        steered.append(args[3])
        return real_steer(*args)

    monkeypatch.setattr(fitting, "with_fit_traits", counted)

    def show() -> dict[str, str]:
        (shown,) = device_profiles.read_steered(
            db, lambda d: [device_profiles.get(d, made.uuid)], store, "p1", True
        )
        return shown.groups[0]

    assert selects(db, show) > 2
    assert selects(db, show) == 2  # the profile, the function's bitstreams
    assert steered == ["p1"]
    assert show() == made.groups[0]  # nothing is published: nothing to steer by
    other = Database(str(db.url))
    try:  # another project's private bitstream of it: p1 sees none, still kept
        meta = NewBitstream(
            name="theirs.gbs",
            function_uuid=FUNCTION,
            visibility="private",
            owner="p2",
            region_type_uuid=REGION_TYPE,
        )
        LocalStore(other, tmp_path / "store").upload(io.BytesIO(b"theirs"), meta)
        assert selects(db, show) == 2
        assert steered == ["p1"]
        store_with_bitstream(other, tmp_path)  # uploaded through another process
    finally:
        other.dispose()
    show()
    assert steered == ["p1", "p1"]
    assert selects(db, show) == 1  # now it fits somewhere: kept as any other


def test_a_taken_name_or_uuid_is_told_apart(db: Database) -> None:
    first = device_profiles.create(db, name="taken", groups=GROUPS)
    with pytest.raises(DuplicateName, match="with name 'taken' already exists"):
        device_profiles.create(db, name="taken", groups=GROUPS)
    with pytest.raises(DuplicateName, match=f"with uuid '{first.uuid}' already exists"):
        device_profiles.create(db, name="other", groups=GROUPS, uuid=first.uuid)
    assert [p.name for p in device_profiles.list_profiles(db)] == ["taken"]
