"""What a download of a bitstream (``GET /v2/bitstreams/{uuid}/data``) costs from the
local store: the API hashes the stored file whole before the first byte of its answer
(a corrupt bitstream is refused with both hashes, never cut short), then streams it.

A live API on SQLite with a bitstream of ``--size-mb`` MiB (256) of random bytes; each
trial downloads it once over HTTP. Printed: the median time to the first byte (the hash
pass) and to the last, and, for comparison, one SHA-256 pass over the same file alone.

    .venv/bin/python bench/bitstream_download.py [--size-mb 256] [--trials 5]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fixtures.server import serve_on_sqlite  # noqa: E402

V2_7 = {"OpenStack-API-Version": "accelerator 2.7"}
MIB = 1 << 20


def download(url: str) -> tuple[float, float, int]:
    """Seconds to the first byte and to the last; the bytes received."""
    started = time.perf_counter()
    with requests.get(url, headers=V2_7, stream=True, timeout=300) as response:
        response.raise_for_status()
        chunks = response.iter_content(MIB)
        received = len(next(chunks, b""))
        first = time.perf_counter() - started
        for chunk in chunks:
            received += len(chunk)
    return first, time.perf_counter() - started, received


def hash_pass(path: Path) -> float:
    started = time.perf_counter()
    hasher = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(MIB):
            hasher.update(chunk)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=256)
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    data = os.urandom(MIB) * args.size_mb
    with tempfile.TemporaryDirectory() as tmp, serve_on_sqlite(Path(tmp)) as url:
        created = requests.post(
            f"{url}/v2/bitstreams", json={"name": "big.bin"}, headers=V2_7, timeout=30
        ).json()
        path = f"{url}/v2/bitstreams/{created['uuid']}/data"
        octets = {**V2_7, "Content-Type": "application/octet-stream"}
        put = requests.put(path, data=data, headers=octets, timeout=300)
        put.raise_for_status()
        stored = Path(tmp) / "bitstreams" / put.json()["hash_value"]
        runs = [download(path) for _ in range(args.trials)]
        assert all(received == len(data) for _, _, received in runs)
        alone = statistics.median(hash_pass(stored) for _ in range(args.trials))
    first = statistics.median(r[0] for r in runs)
    whole = statistics.median(r[1] for r in runs)
    print(
        f"{args.size_mb} MiB, median of {args.trials}: first byte {first * 1000:.0f} ms, "
        f"whole download {whole * 1000:.0f} ms; one SHA-256 pass over the stored file "
        f"{alone * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main()
