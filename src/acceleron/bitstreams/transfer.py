"""Moving bitstream bytes to disk, verified by the hash the store recorded.

Bytes go to a hidden temporary file beside the destination while they are
hashed; only when size and hash match is the file renamed into place, so a
reader never sees a partial or corrupt bitstream, and a mismatch leaves nothing
behind. The per-host cache names each file by that hash and hashes a cached
file again before handing it out.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

from acceleron import metrics
from acceleron.bitstreams.model import Bitstream
from acceleron.exceptions import BitstreamCorrupt, BitstreamUnavailable

LOG = logging.getLogger(__name__)
CHUNK_SIZE = 1 << 20
# Digests too weak to vouch for what is programmed into hardware.
WEAK_ALGOS = frozenset({"md5", "sha1"})
_HEX_RE = re.compile(r"[0-9a-f]{32,128}")


class Hasher(Protocol):
    def update(self, data: bytes, /) -> None: ...

    def hexdigest(self) -> str: ...


def read_chunks(stream: BinaryIO, size: int = CHUNK_SIZE) -> Iterator[bytes]:
    while chunk := stream.read(size):
        yield chunk


def hasher_for(bitstream: Bitstream) -> Hasher:
    """A fresh hasher of the bitstream's algorithm; refuses one that cannot verify it."""
    if bitstream.status != "active":
        raise BitstreamUnavailable(
            f"Bitstream {bitstream.describe()} is {bitstream.status}, not active: it has no "
            f"data to program yet, or was deactivated."
        )
    algo = (bitstream.hash_algo or "").lower()
    value = (bitstream.hash_value or "").lower()
    usable = algo in hashlib.algorithms_available and algo not in WEAK_ALGOS
    if not usable or not _HEX_RE.fullmatch(value):
        raise BitstreamCorrupt(
            f"Bitstream {bitstream.describe()} has no usable hash (algorithm {algo or 'none'!r}, "
            f"value {value or 'none'!r}), so its bytes cannot be verified."
        )
    return hashlib.new(algo)


def check(bitstream: Bitstream, size: int, digest: str) -> None:
    """BitstreamCorrupt unless ``size`` and ``digest`` are what the store recorded; the
    message gives both, recorded and read."""
    expected = (bitstream.hash_value or "").lower()
    if digest == expected and (bitstream.size is None or size == bitstream.size):
        return
    recorded = "" if bitstream.size is None else f" ({bitstream.size} bytes)"
    raise BitstreamCorrupt(
        f"Bitstream {bitstream.describe()} is corrupt: recorded {bitstream.hash_algo} "
        f"{expected}{recorded}, actual {bitstream.hash_algo} {digest} ({size} bytes)."
    )


def verified(chunks: Iterable[bytes], bitstream: Bitstream) -> Iterator[bytes]:
    """``chunks`` passed on, all but the last at once; the last only once size and hash
    match (BitstreamCorrupt otherwise, or as soon as more bytes come than recorded)."""
    hasher = hasher_for(bitstream)
    size = 0
    held = b""
    for chunk in chunks:
        if not chunk:
            continue
        if held:
            yield held
        hasher.update(chunk)
        size += len(chunk)
        held = chunk
        if bitstream.size is not None and size > bitstream.size:
            break
    check(bitstream, size, hasher.hexdigest())
    if held:
        yield held


def write_verified(chunks: Iterable[bytes], dest: Path, bitstream: Bitstream) -> Path:
    """Write ``chunks`` to ``dest`` if and only if they are the bitstream's bytes. Its
    directory may be deleted meanwhile (a cache is anyone's to clear): the bytes still
    arrive at ``dest``."""
    hasher = hasher_for(bitstream)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = _part_of(dest)
    try:
        with part.open("x+b") as out:
            size = _write(chunks, out, hasher)
            check(bitstream, size, hasher.hexdigest())
            _put_in_place(out, part, dest)
    finally:
        part.unlink(missing_ok=True)
    return dest


def _part_of(dest: Path) -> Path:
    return dest.with_name(f".{dest.name}.{uuid.uuid4().hex}.part")


def _put_in_place(out: BinaryIO, part: Path, dest: Path) -> None:
    """Rename the written ``part`` to ``dest``; if the directory went with ``part``, make
    it again and copy the bytes from ``out``, still open, into place."""
    try:
        os.replace(part, dest)
        return
    except FileNotFoundError:
        LOG.warning("%s vanished while %s was written: making it again", dest.parent, dest.name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    again = _part_of(dest)
    try:
        out.seek(0)
        with again.open("xb") as copy:
            shutil.copyfileobj(out, copy, CHUNK_SIZE)
            copy.flush()
            os.fsync(copy.fileno())
        os.replace(again, dest)
    finally:
        again.unlink(missing_ok=True)


def write_hashed(chunks: Iterable[bytes], out: BinaryIO, hasher: Hasher) -> int:
    """Write ``chunks`` to ``out`` and to disk, feeding ``hasher``; the size written."""
    return _write(chunks, out, hasher)


def _write(chunks: Iterable[bytes], out: BinaryIO, hasher: Hasher) -> int:
    size = 0
    for chunk in chunks:
        out.write(chunk)
        hasher.update(chunk)
        size += len(chunk)
    out.flush()
    os.fsync(out.fileno())
    return size


def read_hashed(stream: BinaryIO, hasher: Hasher) -> int:
    """Read ``stream`` to its end, feeding ``hasher``; the size read."""
    size = 0
    for chunk in read_chunks(stream):
        hasher.update(chunk)
        size += len(chunk)
    return size


def file_is_intact(path: Path, bitstream: Bitstream) -> bool:
    """Whether the file at ``path`` holds exactly the bitstream's bytes."""
    hasher = hasher_for(bitstream)
    try:
        with path.open("rb") as stream:
            size = read_hashed(stream, hasher)
    except FileNotFoundError:
        return False
    try:
        check(bitstream, size, hasher.hexdigest())
    except BitstreamCorrupt:
        return False
    return True


def cache_path(cache_dir: Path, bitstream: Bitstream) -> Path:
    hasher_for(bitstream)  # refuses a bitstream whose hash cannot name a file safely
    return cache_dir / f"{bitstream.hash_algo}-{bitstream.hash_value}".lower()


def fetch_to_cache(
    chunks: Callable[[], contextlib.AbstractContextManager[Iterable[bytes]]],
    bitstream: Bitstream,
    cache_dir: Path,
) -> Path:
    """The cached copy of the bitstream, downloaded through ``chunks`` unless intact."""
    path = cache_path(cache_dir, bitstream)
    if file_is_intact(path, bitstream):
        LOG.debug("Bitstream %s: using the verified copy at %s", bitstream.describe(), path)
        os.utime(path)  # the last use, for whoever prunes the cache
        metrics.BITSTREAM_CACHE.labels("hit").inc()
        return path
    if path.exists():
        LOG.warning("Bitstream %s: cached copy %s is damaged, fetching again", bitstream.id, path)
        path.unlink(missing_ok=True)
        metrics.BITSTREAM_CACHE.labels("damaged").inc()
    else:
        metrics.BITSTREAM_CACHE.labels("miss").inc()
    with chunks() as data:
        write_verified(data, path, bitstream)
    LOG.info("Bitstream %s: fetched and verified into %s", bitstream.describe(), path)
    return path
