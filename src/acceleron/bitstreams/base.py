"""The bitstream store interface, and what every backend shares through it.

A backend implements five primitives (``_add``, ``_get``, ``_find``,
``_remove``, ``_chunks``). Everything built on them is written once here:
input checks, the look-ups of spec 000 and spec 002 (by bitstream id, by
bitstream name, by function id or function name plus region type), verified
downloads and the per-host cache.
"""

from __future__ import annotations

import abc
import contextlib
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import BinaryIO, ClassVar

from acceleron.bitstreams import lookup, transfer
from acceleron.bitstreams.model import Bitstream, NewBitstream, Query
from acceleron.exceptions import BitstreamNotFound, InvalidInput

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

    def get(self, bitstream_id: str) -> Bitstream:
        bitstream = self._get(bitstream_id)
        if bitstream is None:
            raise BitstreamNotFound(f"Bitstream {bitstream_id!r} not found.")
        return bitstream

    def find(self, query: Query | None = None) -> list[Bitstream]:
        return self._find((query or Query()).normalized())

    def delete(self, bitstream_id: str) -> None:
        if not self._remove(bitstream_id):
            raise BitstreamNotFound(f"Bitstream {bitstream_id!r} not found.")

    # --- look-ups ------------------------------------------------------------------

    def by_id(self, bitstream_id: str, region_type: str | None = None) -> Bitstream:
        """accel:bitstream_id; IncompatibleBitstream if built for another region type."""
        return lookup.check_fits(self.get(bitstream_id), region_type)

    def by_name(self, name: str, region_type: str | None = None) -> Bitstream:
        """accel:bitstream_name; among equal names, the one that fits the region type."""
        query = Query(name=name)
        return lookup.one_fitting(self.find(query), region_type, query.describe())

    def by_function_id(self, function_id: str, region_type: str | None) -> Bitstream:
        """accel:function_id; ``region_type`` None only where the device reports none."""
        return self._by_function(Query(function_uuid=function_id, region_type_uuid=region_type))

    def by_function_name(self, function_name: str, region_type: str | None) -> Bitstream:
        """accel:function_name; ``region_type`` as for by_function_id."""
        return self._by_function(Query(function_name=function_name, region_type_uuid=region_type))

    def _by_function(self, query: Query) -> Bitstream:
        query = query.normalized()
        return lookup.exactly_one(self._find(query), query.describe())

    def for_request(self, accel: Mapping[str, str], region_type: str | None) -> Bitstream | None:
        """The bitstream a device profile group names by its ``accel:`` keys, or None."""
        given = {k: accel[f"accel:{k}"] for k in SELECTOR_KEYS if f"accel:{k}" in accel}
        if len(given) > 1:
            raise InvalidInput(
                f"The request names its bitstream in more than one way "
                f"({', '.join('accel:' + k for k in given)}): give only one."
            )
        if not given:
            return None
        ((key, value),) = given.items()
        finders: dict[str, Callable[[str, str | None], Bitstream]] = {
            "bitstream_id": self.by_id,
            "bitstream_name": self.by_name,
            "function_id": self.by_function_id,
            "function_name": self.by_function_name,
        }
        return finders[key](value, region_type)

    # --- bytes -----------------------------------------------------------------------

    def download(self, bitstream: Bitstream | str, dest: Path) -> Path:
        """Write the bytes to ``dest``, verified; on a mismatch nothing is left there."""
        found = self._resolve(bitstream)
        transfer.hasher_for(found)  # refuse before any byte moves
        with self._chunks(found) as chunks:
            return transfer.write_verified(chunks, dest, found)

    @contextlib.contextmanager
    def open(self, bitstream: Bitstream | str) -> Iterator[BinaryIO]:
        """A verified copy of the bytes, readable from the start, gone on exit."""
        with tempfile.TemporaryDirectory(prefix="acceleron-bitstream-") as tmp:
            path = self.download(bitstream, Path(tmp) / "bitstream")
            with path.open("rb") as stream:
                yield stream

    def fetch_to_cache(self, bitstream: Bitstream, cache_dir: Path) -> Path:
        """The host's cached, verified copy; downloaded only when none is intact."""
        return transfer.fetch_to_cache(lambda: self._chunks(bitstream), bitstream, cache_dir)

    def _resolve(self, bitstream: Bitstream | str) -> Bitstream:
        return self.get(bitstream) if isinstance(bitstream, str) else bitstream
