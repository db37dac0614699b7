"""What verifying a bitstream's signature costs, beside the programming it guards.

A GBS bitstream of ``--size-mb`` MiB (64), signed as docs/bitstreams.md shows (RSA-PSS
3072 over SHA-256, and ECC P-384 over SHA-384), its certificates in a certificate
directory with a trusted CA. Timed, each the median of ``--trials``:

* the hash check the agent makes anyway before programming (SHA-256, as the local store
  records it; SHA-512, as Glance does);
* the signature check the first time (certificates, then the signature over the bytes);
* the same check again for the same bytes (remembered beside the cache: certificates
  only);
* programming it with the fake driver, which takes ``[fake] program_seconds`` as
  configured (``--program-seconds``, 5 by default; an Intel PAC loads a partial
  bitstream in seconds), as the time the check guards.

    .venv/bin/python bench/signatures.py [--size-mb 64] [--program-seconds 5] [--trials 3]
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fixtures import signing  # noqa: E402

from acceleron import conf as confmod  # noqa: E402
from acceleron.bitstreams import certificates, signatures  # noqa: E402
from acceleron.drivers import gbs  # noqa: E402
from acceleron.drivers.fake import FakeDriver  # noqa: E402

REGION0_TYPE = "ce48969398f05f33946d560708be108a"  # the fake inventory's first region type


def median_seconds(trials: int, run: Callable[[], object]) -> float:
    times = []
    for _ in range(trials):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def file_hash(path: Path, algo: str) -> str:
    hasher = hashlib.new(algo)
    with path.open("rb") as stream:
        while chunk := stream.read(1 << 20):
            hasher.update(chunk)
    return hasher.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=64)
    parser.add_argument("--program-seconds", type=float, default=5.0)
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-signatures-") as tmp:
        work = Path(tmp)
        payload = hashlib.shake_256(b"bench").digest(args.size_mb << 20)
        data = gbs.build(REGION0_TYPE, ("d8424dc4a4a3c413f89e433683f9040b",), payload=payload)
        path = work / "bitstream.gbs"
        path.write_bytes(data)
        ca = signing.certificate_authority().save(work / "certs")
        rsa_signer = signing.leaf(ca).save(work / "certs")
        ecc_signer = signing.leaf(ca, kind="ecc").save(work / "certs")
        found = certificates.in_directory(work / "certs")
        policy = signatures.Policy(verify_all=True, trusted_ids=(ca.id,), certificates=found)
        print(f"bitstream: {len(data) / (1 << 20):.1f} MiB; median of {args.trials} trials")
        for algo in ("sha256", "sha512"):
            seconds = median_seconds(args.trials, lambda: file_hash(path, algo))  # noqa: B023
            print(f"  hash check ({algo}), made before every program:   {seconds:7.3f} s")
        for label, signer, method in (
            ("RSA-PSS 3072, SHA-256", rsa_signer, "SHA-256"),
            ("ECC P-384, SHA-384", ecc_signer, "SHA-384"),
        ):
            properties = signer.sign(data, method)
            trial = iter(range(args.trials))

            def cold() -> None:
                marks = work / f"marks-{next(trial)}-{signer.id}"  # noqa: B023
                signatures.check(path, "sha256-x", properties, policy, marks)  # noqa: B023

            seconds = median_seconds(args.trials, cold)
            print(f"  signature check ({label}), first time: {seconds:7.3f} s")
            marks = work / f"marks-warm-{signer.id}"
            signatures.check(path, "sha256-x", properties, policy, marks)
            seconds = median_seconds(
                args.trials,
                lambda: signatures.check(path, "sha256-x", properties, policy, marks),  # noqa: B023
            )
            print(f"  signature check ({label}), remembered: {seconds * 1000:7.3f} ms")
        print(
            f"  programming (fake driver, [fake] program_seconds = {args.program_seconds:g}):",
            end=" ",
        )
        print(f"{program_seconds(work, path, args.program_seconds, args.trials):7.3f} s")


def program_seconds(work: Path, path: Path, seconds: float, trials: int) -> float:
    conf = confmod.load(
        [],
        config_files=[],
        overrides={
            "DEFAULT": {"state_path": str(work), "host": "bench-host"},
            "fake": {"program_seconds": seconds},
        },
    )
    driver = FakeDriver(conf, Path("/"))
    device = next(d for d in driver.discover() if any(x.programmable for x in d.deployables))
    return median_seconds(trials, lambda: driver.program(device, "region0", path))


if __name__ == "__main__":
    main()
