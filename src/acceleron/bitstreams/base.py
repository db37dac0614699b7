"""The bitstream store interface, and what every backend shares through it.

A backend implements seven primitives (``_add``, ``_create``, ``_put_data``,
``_get``, ``_find``, ``_remove``, ``_chunks``). Everything built on them is
written once here: input checks, the look-ups of spec 000 and spec 002 (by
bitstream id, by bitstream name, by function id or function name plus region
type), verified downloads and copies, and the per-host cache.

A bitstream is uploaded in one step (``upload``), or in two as the REST API
does it: ``create`` records the metadata (status queued, no bytes), then
``upload_data`` stores the bytes and makes it active.
"""

from __future__ import annotations

import abc
import contextlib
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import BinaryIO, ClassVar

from acceleron.bitstreams import lookup, transfer
from acceleron.bitstreams.model import QUEUED, Bitstream, NewBitstream, Query
from acceleron.exceptions import BitstreamNotFound, Conflict, InvalidInput

# The accel: keys of a device profile group that name a bitstream (spec 002).
SELECTOR_KEYS = ("bitstream_id", "bitstream_name", "function_id", "function_name")


class BitstreamStore(abc.ABC):
    """Bitstreams with their metadata, looked up the ways a request may name one."""

    backend: ClassVar[str]

    # --- what a backend implements ---------------------------------------------

    @abc.abstractmethod
    def _add(self, data: BinaryIO, meta: NewBitstream) -> Bitstream:
        """Store the bytes read from ``data`` with ``meta`` (already normalised)."""

    @abc.abstractmethod
    def _create(self, meta: NewBitstream) -> Bitstream:
        """Record ``meta`` (already normalised) with no bytes yet: status queued."""

    @abc.abstractmethod
    def _put_data(self, bitstream: Bitstream, data: BinaryIO) -> Bitstream:
        """Store the bytes of a queued bitstream; Conflict if it stopped being queued."""

    @abc.abstractmethod
    def _get(self, bitstream_id: str) -> Bitstream | None: ...

    @abc.abstractmethod
    def _find(self, query: Query) -> list[Bitstream]:
        """Active bitstreams matching ``query`` (normalised), oldest first."""

    @abc.abstractmethod
    def _remove(self, bitstream_id: str) -> bool:
        """Delete the bitstream; False if there was none."""

    @abc.abstractmethod
    def _chunks(self, bitstream: Bitstream) -> contextlib.AbstractContextManager[Iterable[bytes]]:
        """The stored bytes, unverified, in chunks."""

    # --- catalogue ---------------------------------------------------------------

    def upload(self, data: BinaryIO, meta: NewBitstream) -> Bitstream:
        """Store a bitstream read in chunks from ``data``; the whole is never held in memory."""
        return self._add(data, meta.normalized())

    def create(self, meta: NewBitstream) -> Bitstream:
        """A bitstream without its bytes yet (status queued); ``upload_data`` adds them."""
        return self._create(meta.normalized())

    def upload_data(self, bitstream_id: str, data: BinaryIO) -> Bitstream:
        """Store the bytes of a queued bitstream, read in chunks; it becomes active."""
        bitstream = self.get(bitstream_id)
        if bitstream.status != QUEUED:
            raise Conflict(
                f"Bitstream {bitstream.describe()} is {bitstream.status}, not {QUEUED}: its "
                f"data was uploaded already. Create another bitstream for other bytes."
            )
        return self._put_data(bitstream, data)

    def get(self, bitstream_id: str, project: str | None = None) -> Bitstream:
        """The bitstream, as ``project`` sees it (None: as one who sees every project's)."""
        bitstream = self._get(bitstream_id)
        if bitstream is None or not bitstream.visible_to(project):
            raise BitstreamNotFound(f"Bitstream {bitstream_id!r} not found.")
        return bitstream

    def find(self, query: Query | None = None) -> list[Bitstream]:
        return self._find((query or Query()).normalized())

    def delete(self, bitstream_id: str) -> None:
        if not self._remove(bitstream_id):
            raise BitstreamNotFound(f"Bitstream {bitstream_id!r} not found.")

    # --- look-ups ------------------------------------------------------------------

    def by_id(
        self, bitstream_id: str, region_type: str | None = None, project: str | None = None
    ) -> Bitstream:
        """accel:bitstream_id; IncompatibleBitstream if built for another region type.
        ``project``: only what that project sees (None: every bitstream)."""
        return lookup.check_fits(self.get(bitstream_id, project), region_type)

    def by_name(
        self, name: str, region_type: str | None = None, project: str | None = None
    ) -> Bitstream:
        """accel:bitstream_name; among equal names, the one that fits the region type."""
        query = Query(name=name, project=project)
        return lookup.one_fitting(self.find(query), region_type, query.describe())

    def by_function_id(
        self, function_id: str, region_type: str | None, project: str | None = None
    ) -> Bitstream:
        """accel:function_id; ``region_type`` None only where the device reports none."""
        return self._by_function(
            Query(function_uuid=function_id, region_type_uuid=region_type, project=project)
        )

    def by_function_name(
        self, function_name: str, region_type: str | None, project: str | None = None
    ) -> Bitstream:
        """accel:function_name; ``region_type`` as for by_function_id."""
        return self._by_function(
            Query(function_name=function_name, region_type_uuid=region_type, project=project)
        )

    def _by_function(self, query: Query) -> Bitstream:
        query = query.normalized()
        return lookup.exactly_one(self._find(query), query.describe())

    def for_request(
        self, accel: Mapping[str, str], region_type: str | None, project: str | None = None
    ) -> Bitstream | None:
        """The bitstream a device profile group names by its ``accel:`` keys, or None;
        ``project``: chosen among what that project sees (None: among every one)."""
        given = {k: accel[f"accel:{k}"] for k in SELECTOR_KEYS if f"accel:{k}" in accel}
        if len(given) > 1:
            raise InvalidInput(
                f"The request names its bitstream in more than one way "
                f"({', '.join('accel:' + k for k in given)}): give only one."
            )
        if not given:
            return None
        ((key, value),) = given.items()
        finders: dict[str, Callable[[str, str | None, str | None], Bitstream]] = {
            "bitstream_id": self.by_id,
            "bitstream_name": self.by_name,
            "function_id": self.by_function_id,
            "function_name": self.by_function_name,
        }
        return finders[key](value, region_type, project)

    # --- bytes -----------------------------------------------------------------------

    def download(self, bitstream: Bitstream | str, dest: Path) -> Path:
        """Write the bytes to ``dest``, verified; on a mismatch nothing is left there."""
        found = self._resolve(bitstream)
        transfer.hasher_for(found)  # refuse before any byte moves
        with self._chunks(found) as chunks:
            return transfer.write_verified(chunks, dest, found)

    @contextlib.contextmanager
    def open(self, bitstream: Bitstream | str, spool_dir: Path | None = None) -> Iterator[BinaryIO]:
        """A verified copy of the bytes, readable from the start, gone on exit: the whole
        is checked before a byte can be read, so BitstreamCorrupt comes first. Here the
        bytes are spooled, while hashed, to a file under ``spool_dir`` (None: the
        system's temporary directory); a store that keeps files checks its own instead."""
        found = self._resolve(bitstream)
        with tempfile.TemporaryDirectory(prefix="acceleron-bitstream-", dir=spool_dir) as tmp:
            path = self.download(found, Path(tmp) / "bitstream")
            with path.open("rb") as stream:
                yield stream

    def fetch_to_cache(self, bitstream: Bitstream, cache_dir: Path) -> Path:
        """The host's cached, verified copy; downloaded only when none is intact."""
        return transfer.fetch_to_cache(lambda: self._chunks(bitstream), bitstream, cache_dir)

    def _resolve(self, bitstream: Bitstream | str) -> Bitstream:
        return self.get(bitstream) if isinstance(bitstream, str) else bitstream
