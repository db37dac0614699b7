"""The local bitstream store: content-addressed files plus rows in ``bitstreams``.

Each distinct content is one file named by its SHA-256 under the store's
directory; rows carry the metadata and point at a file by that hash, so
identical uploads share one file. An upload streams to a temporary file in the
same directory while hashing, then renames it into place inside the
transaction that adds the row (or, for a row created queued, activates it; a
queued row has no hash and no file). A delete removes the file only when no row uses
it any more. Both hold a lock on the directory across their transaction, so
an upload and a delete of the same content on this host cannot interleave; a
row therefore never points at a missing file (a crash leaves at most an unused
file behind).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from sqlalchemy import (
    Connection,
    Row,
    Select,
    bindparam,
    delete,
    func,
    insert,
    or_,
    select,
    update,
)

from acceleron.bitstreams import transfer
from acceleron.bitstreams.base import BitstreamStore
from acceleron.bitstreams.model import (
    ACTIVE,
    PUBLIC,
    QUEUED,
    Bitstream,
    NewBitstream,
    Query,
)
from acceleron.db.models import Bitstream as BitstreamRow
from acceleron.db.models import table
from acceleron.db.session import Database
from acceleron.exceptions import (
    BitstreamNotFound,
    BitstreamStoreError,
    Conflict,
    StateUnwritable,
)
from acceleron.uuids import is_uuid_like, parse

HASH_ALGO = "sha256"


class LocalStore(BitstreamStore):
    backend = "local"

    def __init__(self, db: Database, root: Path) -> None:
        self._db = db
        self._root = root

    # --- files -------------------------------------------------------------------

    def _path(self, sha256: str) -> Path:
        return self._root / sha256

    def _spool(self, data: BinaryIO) -> tuple[Path, str, int]:
        """Copy ``data`` to a temporary file in the store; its path, SHA-256 and size."""
        tmp_dir = self._root / ".tmp"
        path = tmp_dir / f"{uuid.uuid4().hex}.part"
        with self._writable():
            tmp_dir.mkdir(parents=True, exist_ok=True)
            out = path.open("xb")
        hasher = hashlib.sha256()
        try:
            with out:
                size = transfer.write_hashed(transfer.read_chunks(data), out, hasher)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return path, hasher.hexdigest(), size

    @contextlib.contextmanager
    def _writable(self) -> Iterator[None]:
        """StateUnwritable, naming the directory and its option, for an OSError within."""
        try:
            yield
        except OSError as error:
            raise StateUnwritable(self._root, "[bitstreams] local_dir", error) from error

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self._writable():
            self._root.mkdir(parents=True, exist_ok=True)
            lock = (self._root / ".lock").open("a")
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    # --- primitives ------------------------------------------------------------------

    def _store(self, data: BinaryIO, record: _Recorder) -> Row[Any]:
        """Spool ``data``, then in one locked transaction ``record`` its hash and size
        and move the file into place; the row ``record`` wrote."""
        spooled, sha256, size = self._spool(data)
        try:
            with self._locked(), self._db.writer() as conn:
                row = record(conn, sha256, size)
                # Same hash, same bytes: replacing an existing file changes nothing
                # a reader can see, and heals one that was damaged on disk.
                os.replace(spooled, self._path(sha256))
        finally:
            spooled.unlink(missing_ok=True)
        return row

    def _add(self, data: BinaryIO, meta: NewBitstream) -> Bitstream:
        def add(conn: Connection, sha256: str, size: int) -> Row[Any]:
            return _insert(conn, _new_row(meta, sha256, size))

        return _to_bitstream(self._store(data, add))

    def _create(self, meta: NewBitstream) -> Bitstream:
        with self._db.writer() as conn:
            return _to_bitstream(_insert(conn, _new_row(meta, "", 0, QUEUED)))

    def _put_data(self, bitstream: Bitstream, data: BinaryIO) -> Bitstream:
        def activate(conn: Connection, sha256: str, size: int) -> Row[Any]:
            mine = _TABLE.c.uuid == bitstream.id
            done = conn.execute(
                update(_TABLE)
                .where(mine, _TABLE.c.status == QUEUED)
                .values(sha256=sha256, size=size, status=ACTIVE)
            )
            row = conn.execute(select(_TABLE).where(mine)).first()
            if row is None:
                raise BitstreamNotFound(f"Bitstream {bitstream.describe()} was deleted meanwhile.")
            if done.rowcount != 1:
                raise Conflict(f"Bitstream {bitstream.describe()} got its data meanwhile.")
            return row

        return _to_bitstream(self._store(data, activate))

    def _get(self, bitstream_id: str) -> Bitstream | None:
        wanted = _canonical_id(bitstream_id)
        if wanted is None:
            return None
        with self._db.reader() as conn:
            row = conn.execute(select(_TABLE).where(_TABLE.c.uuid == wanted)).first()
        return None if row is None else _to_bitstream(row)

    def _find(self, query: Query) -> list[Bitstream]:
        with self._db.reader() as conn:
            rows = conn.execute(*_select(query)).all()
        return [b for b in map(_to_bitstream, rows) if query.matches(b)]

    def _remove(self, bitstream_id: str) -> bool:
        wanted = _canonical_id(bitstream_id)
        if wanted is None:
            return False
        with self._locked():
            with self._db.writer() as conn:
                deleted = conn.execute(select(_TABLE).where(_TABLE.c.uuid == wanted)).first()
                if deleted is None:
                    return False
                conn.execute(delete(_TABLE).where(_TABLE.c.id == deleted.id))
                users = conn.scalar(select(func.count()).where(_TABLE.c.sha256 == deleted.sha256))
            if deleted.sha256 and not users:
                self._path(deleted.sha256).unlink(missing_ok=True)
        return True

    @contextlib.contextmanager
    def _chunks(self, bitstream: Bitstream) -> Iterator[Iterable[bytes]]:
        with self._opened(bitstream) as stream:
            yield transfer.read_chunks(stream)

    @contextlib.contextmanager
    def open(self, bitstream: Bitstream | str, spool_dir: Path | None = None) -> Iterator[BinaryIO]:
        """The stored file itself, hashed whole before it is handed out (no copy, and
        no ``spool_dir`` needed): BitstreamCorrupt, naming both hashes, comes first."""
        found = self._resolve(bitstream)
        hasher = transfer.hasher_for(found)
        with self._opened(found) as stream:
            transfer.check(found, transfer.read_hashed(stream, hasher), hasher.hexdigest())
            stream.seek(0)
            yield stream

    @contextlib.contextmanager
    def _opened(self, bitstream: Bitstream) -> Iterator[BinaryIO]:
        path = self._path(bitstream.hash_value or "")
        try:
            stream = path.open("rb")
        except FileNotFoundError as exc:
            raise BitstreamStoreError(
                f"Bitstream {bitstream.describe()}: its file {path} is missing from the local "
                f"store; upload it again."
            ) from exc
        with stream:
            yield stream


# Writes a row for bytes just spooled, given their SHA-256 and size; returns the row.
_Recorder = Callable[[Connection, str, int], Row[Any]]


def _insert(conn: Connection, values: dict[str, Any]) -> Row[Any]:
    return conn.execute(insert(_TABLE).values(values).returning(_TABLE)).one()


def _canonical_id(bitstream_id: str) -> str | None:
    return parse(bitstream_id, "bitstream_id") if is_uuid_like(bitstream_id) else None


def _new_row(meta: NewBitstream, sha256: str, size: int, status: str = ACTIVE) -> dict[str, Any]:
    return {
        "uuid": str(uuid.uuid4()),
        "name": meta.name,
        "sha256": sha256,
        "size": size,
        "vendor": meta.vendor,
        "function_uuid": meta.function_uuid,
        "function_name": meta.function_name,
        "region_type_uuid": meta.region_type_uuid,
        "properties": dict(meta.properties),
        "owner": meta.owner,
        "visibility": meta.visibility or PUBLIC,
        "status": status,
    }


_TABLE = table(BitstreamRow)


_COLUMNS = ("name", "function_uuid", "function_name", "region_type_uuid", "vendor", "status")


def _select(query: Query) -> tuple[Select[Any], dict[str, Any]]:
    """Rows matching ``query``, and the statement's parameters; UUID columns hold the
    canonical form the query has too."""
    given = tuple(f for f in _COLUMNS if getattr(query, f) is not None)
    params = {f: getattr(query, f) for f in given}
    if query.project is not None:
        params["project"] = query.project
    return _statement(given, query.project is not None), params


@functools.cache
def _statement(fields: tuple[str, ...], scoped: bool) -> Select[Any]:
    """The statement for a query naming ``fields`` (and a project, when ``scoped``),
    built once per shape: building one costs more than running it (a device profile's
    show looks bitstreams up)."""
    stmt = select(_TABLE).where(*(_TABLE.c[f] == bindparam(f) for f in fields))
    if scoped:
        stmt = stmt.where(
            or_(_TABLE.c.visibility == PUBLIC, _TABLE.c.owner == bindparam("project"))
        )
    return stmt.order_by(_TABLE.c.id)


def _to_bitstream(row: Row[Any]) -> Bitstream:
    stored = bool(row.sha256)  # a queued row has no bytes yet
    return Bitstream(
        id=row.uuid,
        name=row.name,
        size=row.size if stored else None,
        hash_algo=HASH_ALGO if stored else None,
        hash_value=row.sha256 or None,
        vendor=row.vendor,
        function_uuid=row.function_uuid,
        function_name=row.function_name,
        region_type_uuid=row.region_type_uuid,
        properties=dict(row.properties or {}),
        status=row.status,
        owner=row.owner,
        visibility=row.visibility,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )
