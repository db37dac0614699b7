"""Moving bitstream bytes to disk (acceleron.bitstreams.transfer), without a store."""

from __future__ import annotations

import contextlib
import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from acceleron.bitstreams import Bitstream
from acceleron.bitstreams.transfer import CHUNK_SIZE, fetch_to_cache

DATA = bytes(range(256)) * (3 * CHUNK_SIZE // 256)
BITSTREAM = Bitstream(
    id="b1",
    name="b.gbs",
    size=len(DATA),
    hash_algo="sha256",
    hash_value=hashlib.sha256(DATA).hexdigest(),
)


def served(cache: Path, clear_after: int) -> Iterator[bytes]:
    """The bytes in three chunks; the cache directory is deleted after chunk
    ``clear_after`` (3: once the last chunk is out)."""
    for index in range(3):
        yield DATA[index * CHUNK_SIZE : (index + 1) * CHUNK_SIZE]
        if index + 1 == clear_after:
            shutil.rmtree(cache)


@pytest.mark.parametrize("clear_after", [1, 3])
def test_deleting_the_cache_directory_during_a_fetch_is_safe(
    tmp_path: Path, clear_after: int
) -> None:
    """docs/bitstreams.md: deleting the cache's files at any time is safe."""
    cache = tmp_path / "cache"
    cache.mkdir()
    path = fetch_to_cache(
        lambda: contextlib.nullcontext(served(cache, clear_after)), BITSTREAM, cache
    )
    assert path.read_bytes() == DATA
    assert sorted(p.name for p in cache.iterdir()) == [path.name]  # no part file left
