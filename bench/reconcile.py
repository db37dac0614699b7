"""A reconciler pass on the all-in-one at scale, and what claims see meanwhile.

Starts the all-in-one, reports N fake hosts (``claim.py``'s: 8 devices, 17 providers
each), waits until Placement has them, then runs ``POST /v2/placement/reconcile`` (one
pass, ``dry_run``) three times: the first (the API's first: it reads every provider's
allocations), one after a few claims were made and released, and one over a quiet
cloud. While each pass runs, one client claims and releases a QAT VF (``POST
/v2/claims``) back to back: the pass's length, and the claims' rate and latency during
it, are printed.

    .venv/bin/python bench/reconcile.py [--hosts 1000] [--baseline REV]

With ``--baseline REV`` the same runs first on the code of commit ``REV``.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
import uuid
from typing import Any

from claim import claimer, fill, percentile
from load import all_in_one, call, checkout


def during_pass(url: str, title: str) -> str:
    """One pass, timed, with claims made and released while it runs."""
    done: dict[str, Any] = {}

    def reconcile() -> None:
        started = time.perf_counter()
        done["leaks"] = call(url, "POST", "/v2/placement/reconcile", {"dry_run": True})
        done["seconds"] = time.perf_counter() - started

    thread = threading.Thread(target=reconcile)
    flow, latencies = claimer(url), list[float]()
    started = time.perf_counter()
    thread.start()
    while thread.is_alive() or not latencies:
        consumer = str(uuid.uuid4())
        begun = time.perf_counter()
        flow.claim("daas-qat", consumer)
        latencies.append(time.perf_counter() - begun)
        flow.release(consumer)
    thread.join()
    elapsed = time.perf_counter() - started
    return (
        f"{title:<28} pass {done['seconds'] * 1000:9.0f} ms   claims meanwhile: "
        f"{len(latencies) / elapsed:5.1f}/s, p50 {percentile(latencies, 50):7.1f} ms, "
        f"max {max(latencies) * 1000:7.1f} ms   "
        f"({len(done['leaks']['leaks'])} leaks)"
    )


def passes(url: str, hosts: int) -> list[str]:
    fill(url, hosts)
    lines = [during_pass(url, "first pass")]
    flow = claimer(url)
    for _ in range(20):  # allocations written and dropped since the first pass
        consumer = str(uuid.uuid4())
        flow.claim("daas-qat", consumer)
        flow.release(consumer)
    lines.append(during_pass(url, "after 20 claims"))
    lines.append(during_pass(url, "quiet"))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--baseline", default="none", help="a commit to run first; none: skip")
    args = parser.parse_args()
    results = []
    if args.baseline != "none":
        with checkout(args.baseline) as source, all_in_one(source=source) as url:
            results += [f"{args.baseline[:7]:<10}{line}" for line in passes(url, args.hosts)]
    with all_in_one() as url:
        results += [f"{'this tree':<10}{line}" for line in passes(url, args.hosts)]
    print(f"\n{args.hosts} hosts; load average now {os.getloadavg()[0]:.1f}")
    print("\n".join(results))


if __name__ == "__main__":
    main()
