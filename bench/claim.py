"""Claims per second and claim latency on the all-in-one, 100 fake hosts x 8 devices.

Starts Acceleron the way ``make run`` does (all-in-one: SQLite, noauth, the real
Placement embedded), reports 100 more hosts through the agents' API, each with 8
fake devices (4 Intel FPGA cards of two regions, 4 QAT cards of 4 VFs), waits until
Placement has them all, then runs the claim flow (``acceleron.client.claims``,
what ``acceleron claim`` runs) from N client threads for a fixed time, each claim
followed by its release:

* Device as a Service: one QAT VF;
* AFaaS pre-programmed: one FPGA region carrying a function trait.

* AFaaS by function id: one FPGA region, the profile naming the function
  (``accel:function_id``) that region0 of every card holds.

The periodic reconciler and the Placement sync's periodic verification of every host
are off (``CONFIG``). A claim is the whole flow: allocation
candidates from Placement, ranking, the allocation, the requests created and bound, the
wait until they are Bound. Each is run three ways, side by side:

* ``placement``: Placement's own share, what no claim can go below: the candidates
  query a server-side claim sends first (same parameters, same ``limit``), the weigher's
  choice and ``PUT /allocations`` for a new consumer, over HTTP to the all-in-one's
  ``/placement``; released with ``DELETE /allocations``;
* ``nova``: the same, with the candidates query a client with no view of its own sends
  for the profile, as Nova builds it (the groups' resources and traits; Nova's default
  limit of 1,000 candidates);
* ``guarded``: ``placement``'s, released as Nova releases a server's allocations and
  as a claim's release must (never an unguarded write): the consumer's allocations and
  generation read, then written empty with that generation (``GET``, then ``PUT
  /allocations/{consumer}``), where ``placement`` drops them with one unguarded
  ``DELETE``;
* ``server``: one ``POST /v2/claims`` (2.12) followed until bound (``Claimer.claim``).

Each run says the all-in-one process's CPU time (user and system, every thread) per
claim and its release: for ``placement``, ``guarded`` and ``nova`` that is Placement's
own share (it serves ``/placement`` in that process), for ``server`` the whole claim; and
a server-side claim's p50, rate and CPU per claim against each of the others.
With one client it also says the release's own (its p50, and the process's CPU time
over the releases alone, per release): ``DELETE /allocations`` for ``placement`` and
``nova``, ``GET`` and ``PUT`` for ``guarded``, the ``Claimer``'s release of the claim it
made (``DELETE /v2/claims``: it counts the requests from the claim it has) for
``server``.
On shared cores a rate moves by a third from run to run, CPU per claim by a few per cent.

Placement's share of a claim naming a function is shown on its own: the candidates query
for every host, against the one a server-side claim sends first (the regions holding the
function: their function traits required, ``limit=10``).

    .venv/bin/python bench/claim.py [--hosts 100] [--seconds 20] [--clients 1,8]
        [--profiles daas-qat,...] [--flows placement,guarded,nova,server] [--baseline REV]
        [--rounds N] [--apart]

Each run also says the retries per claim: for Placement's own flows the
allocations Placement refused (409) and chosen again (they ask for candidates again,
as a scheduler does, up to 5 times); for ``server`` the claims' own, as the server
counts them (``acceleron_claim_allocation_conflicts_total``; ``-`` for code that did
not count them), with Placement's 409s to the server's allocation writes per claim
and the share of those writes sent batched (``acceleron.placement.batch``).

With ``--apart`` the claims are timed apart from their releases: each client claims
for the run's time and keeps what it claimed (claims/s and CPU per claim cover claims
alone: for ``placement`` the candidates query and ``PUT``, as a scheduler's claim is);
then every client releases its own claims, timed apart (releases/s, CPU per release:
nothing else runs meanwhile). The hosts need room for every claim of a run (100 hosts:
1,600 QAT VFs, 800 FPGA regions holding the function).

Under contention: ``--hosts 2`` is every client claiming from two hosts' pools (16 QAT
VFs each, with pools on: one provider per host and class); with 32 clients the 32 VFs
are all in use at times, and claims are refused and retried. ``--rounds N`` runs each
flow N times in turn and adds the median and range of each.

With ``--baseline REV`` the server-side claims are first run, the same way, on the code
of commit ``REV`` (its flow shown as the commit), and printed beside this tree's (or,
with ``--rev REV``, that commit's).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from keystoneauth1 import adapter, session, token_endpoint
from keystoneauth1.noauth import NoAuth
from prometheus_client.parser import text_string_to_metric_families

from acceleron.client.claims import Claimer
from acceleron.exceptions import AllocationConflict
from acceleron.placement import names
from acceleron.placement.client import PlacementClient
from acceleron.scheduler import query, weigher
from acceleron.service import claim_allocation
from acceleron.service.claim_end import ATTEMPTS
from load import (
    Url,
    all_in_one,
    call,
    checkout,
    cpu_seconds,
    profiling,
    report_fake_hosts,
    wait_synced,
)

FUNCTION = "d8424dc4a4a3c413f89e433683f9040b"  # what the fake region0 holds
INVENTORY = """
devices:
  - type: FPGA
    count: 4
    product_id: "09c4"
    model: PAC_ARRIA10
    regions:
      - {region_type: ce48969398f05f33946d560708be108a, accelerators: 2,
         functions: [d8424dc4a4a3c413f89e433683f9040b]}
      - {region_type: 9926ab6d6c925a68aabca7d84c545738, accelerators: 1}
  - {type: QAT, count: 4, product_id: "37c8", model: C62X, vfs: 4}
"""
PROFILES = {
    "daas-qat": [{"resources:CUSTOM_ACCELERATOR_QAT": "1"}],
    "afaas-preprogrammed": [
        {
            "resources:CUSTOM_ACCELERATOR_FPGA": "1",
            f"trait:CUSTOM_FPGA_INTEL_FUNCTION_{FUNCTION.upper()}": "required",
        }
    ],
    "afaas-by-function": [
        {"resources:CUSTOM_ACCELERATOR_FPGA": "1", "accel:function_id": FUNCTION},
    ],
}
FLOWS = ("placement", "guarded", "nova", "server")
PLACEMENT_FLOWS = FLOWS[:3]  # Placement's own share, what a server-side claim is set against
NOVA_LIMIT = 1000  # Nova's [scheduler] max_placement_results, by default
BASELINE = "2723894"  # main before claims asked about hosts' trees first
# No periodic reconciler pass (the API's first reads every provider's allocations: a
# minute at 1,000 hosts, bench/reconcile.py), and no periodic verification of every
# host's providers (sync_all, 10 minutes after the start: at 1,000 hosts it reads
# Placement for minutes, and met the runs): the figures would depend on when they fall.
CONFIG = "[reconciler]\ninterval = 0\n[placement]\nverify_interval = 0\n"


def claimer(url: str) -> Claimer:
    api = adapter.Adapter(session.Session(auth=NoAuth()), endpoint_override=url,
                          service_type="accelerator")  # fmt: skip
    return Claimer(api, poll=0.01)


def placement_client(url: str) -> PlacementClient:
    """The all-in-one's Placement, with its admin token."""
    placement_url = f"{url}/placement"
    placement = adapter.Adapter(
        session.Session(auth=token_endpoint.Token(placement_url, "admin")),
        service_type="placement",
        endpoint_override=placement_url,
    )
    return PlacementClient(placement)


def survey(groups: list[dict[str, str]], roots: frozenset[str]) -> claim_allocation.Survey:
    """What a server-side claim reads from its database first, for these hosts: every
    host has a card whose region0 holds the function."""
    traits = frozenset(names.function_traits("FPGA", "Intel", FUNCTION))
    held = dict.fromkeys(weigher.wanted_functions(groups), traits)
    return claim_allocation.Survey(dict.fromkeys(roots, held) if held else {}, roots,
                                   everywhere=lambda: held)  # fmt: skip


class PlacementOnly:
    """Placement's own share of a claim: the server's first candidates query (the same
    parameters and limit), the weigher's choice, the allocation; released by dropping
    it. With ``as_nova``: the query a client with no view of its own sends for the same
    profile, as Nova builds it (its groups' resources and traits, Nova's default
    ``[scheduler] max_placement_results`` of 1,000 candidates). With ``guarded``: the
    release reads the consumer's generation and writes its allocations empty with it."""

    def __init__(
        self, url: str, roots: frozenset[str], as_nova: bool = False, guarded: bool = False
    ) -> None:
        self.placement = placement_client(url)
        self.roots = roots
        self.as_nova = as_nova
        self.guarded = guarded
        self.retries = 0  # allocations Placement refused (409) and chosen again

    def claim(self, profile: str, consumer: str) -> None:
        groups = PROFILES[profile]
        wanted = weigher.wanted_functions(groups)
        if self.as_nova:
            params = query.profile_query(groups, limit=NOVA_LIMIT).params()
        else:
            params = next(claim_allocation.candidate_queries(groups, survey(groups, self.roots)))
        for _ in range(ATTEMPTS):  # as a scheduler does: asked again when another won
            best = weigher.best(self.placement.get_allocation_candidates(params), wanted)
            if best is None:
                raise RuntimeError("no candidate")
            try:
                self.placement.put_allocations(consumer, best.allocations, project_id="bench",
                                               user_id="bench")  # fmt: skip
                return
            except AllocationConflict:
                self.retries += 1
        raise RuntimeError(f"other consumers took the capacity {ATTEMPTS} times")

    def release(self, consumer: str, made: None = None) -> None:
        if self.guarded:  # no bench client writes this consumer meanwhile: no 409 to retry
            read = self.placement.get_consumer(consumer)
            self.placement.replace_allocations(consumer, read, {})
        else:
            self.placement.delete_allocations(consumer)


def run(
    url: Url,
    profile: str,
    clients: int,
    seconds: float,
    flow_name: str,
    roots: frozenset[str],
    apart: bool = False,
) -> dict[str, Any]:
    """One flow's run: each client claims, and releases each claim at once (with
    ``apart``: once the run's time is up, every client releasing its own, timed on
    their own)."""
    latencies: list[float] = []
    releases: list[float] = []
    released_cpu: list[float] = []  # the process's CPU time over each release
    failures: list[str] = []
    retries: list[int] = []  # Placement's own flows', by client
    kept: list[tuple[Any, str, Any]] = []  # with ``apart``: the claims made, released after
    deadline = time.monotonic() + seconds

    def worker() -> None:
        flow: Any = claimer(url)
        if flow_name in PLACEMENT_FLOWS:
            flow = PlacementOnly(url, roots, flow_name == "nova", flow_name == "guarded")
            try:
                work(flow)
            finally:
                retries.append(flow.retries)
            return
        work(flow)

    def work(flow: Any) -> None:
        while time.monotonic() < deadline:
            consumer = str(uuid.uuid4())
            started = time.perf_counter()
            try:
                made = flow.claim(profile, consumer)
            except Exception as error:  # counted and shown, the run goes on
                failures.append(str(error))
                continue
            latencies.append(time.perf_counter() - started)
            if apart:
                kept.append((flow, consumer, made))
                continue
            started, before = time.perf_counter(), cpu_seconds(url.pid)
            flow.release(consumer, made)  # what a client that made the claim knows of it
            releases.append(time.perf_counter() - started)
            released_cpu.append(cpu_seconds(url.pid) - before)

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    counted = counters(url)
    started, cpu = time.monotonic(), cpu_seconds(url.pid)
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed, cpu = time.monotonic() - started, cpu_seconds(url.pid) - cpu
    moved = {name: n - counted.get(name, 0.0) for name, n in counters(url).items()}
    if flow_name in PLACEMENT_FLOWS:
        moved["retries"] = float(sum(retries))
    found = {"profile": profile, "flow": flow_name, "clients": clients,
             "claims": len(latencies), "seconds": elapsed, "latencies": latencies,
             "releases": releases, "released_cpu": released_cpu, "failures": failures,
             "cpu": cpu, "counted": moved}  # fmt: skip
    if apart:
        found["apart"] = release_all(url, kept, releases)
    return found


def release_all(
    url: Url, kept: list[tuple[Any, str, Any]], releases: list[float]
) -> tuple[int, float, float]:
    """Release the claims ``kept`` (flow, consumer, claim), each client's flow its own
    in a thread of its own, each release's time in ``releases``; how many, the seconds
    and the process's CPU time."""
    by_flow: dict[int, list[tuple[Any, str, Any]]] = {}
    for made in kept:
        by_flow.setdefault(id(made[0]), []).append(made)

    def worker(mine: list[tuple[Any, str, Any]]) -> None:
        for flow, consumer, made in mine:
            started = time.perf_counter()
            flow.release(consumer, made)
            releases.append(time.perf_counter() - started)

    threads = [threading.Thread(target=worker, args=(mine,)) for mine in by_flow.values()]
    started, cpu = time.monotonic(), cpu_seconds(url.pid)
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return len(kept), time.monotonic() - started, cpu_seconds(url.pid) - cpu


def counters(url: str) -> dict[str, float]:
    """What the server counted so far (``GET /metrics``): ``conflicts``, Placement's 409s
    to allocation writes (a claim's, a release's, a batch's; the Placement flows' own
    writes go to ``/placement`` and are not counted there); ``retries``, claims'
    allocations refused and chosen again (absent from code that did not count them);
    ``writes:HOW``, consumers' allocation writes by how they were sent (idem)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "acceleron_placement_errors_total" and sample.labels == {
                "kind": "allocations", "error": "conflict"}:  # fmt: skip
                found["conflicts"] = found.get("conflicts", 0.0) + sample.value
            elif sample.name == "acceleron_claim_allocation_conflicts_total":
                found["retries"] = found.get("retries", 0.0) + sample.value
            elif sample.name == "acceleron_placement_allocation_writes_total":
                key = f"writes:{sample.labels['how']}"
                found[key] = found.get(key, 0.0) + sample.value
    return found


def roots_of(url: str, hostnames: list[str]) -> frozenset[str]:
    """The compute node providers of the hosts."""
    client = placement_client(url)
    found = (client.find_provider(name) for name in hostnames)
    return frozenset(provider.uuid for provider in found if provider is not None)


def candidates_queries(url: str, roots: frozenset[str]) -> dict[str, tuple[float, int]]:
    """Placement's time for the query of every host (as Nova builds it) against those
    a server-side claim sends, in turn: one host holding the function, the holders
    anywhere (``limit``), one host, every host (``limit``)."""
    groups = PROFILES["afaas-by-function"]
    sent = list(claim_allocation.candidate_queries(groups, survey(groups, roots),
                                                   lambda trees, n: list(trees[:1])))  # fmt: skip
    client = placement_client(url)
    found = {}
    queries = {
        "every host (as Nova builds it, baseline)": query.profile_query(groups).params(),
        "1. one host holding it (in_tree), limit 10": sent[0],
        f"2. holders anywhere, limit {claim_allocation.HOLDERS_LIMIT}": sent[1],
        "3. one host (in_tree), limit 20": sent[2],
        f"4. every host, limit {claim_allocation.CANDIDATES_LIMIT}": sent[3],
    }
    for title, params in queries.items():
        times, count = [], 0
        for _ in range(10):
            started = time.perf_counter()
            count = len(client.get_allocation_candidates(params).requests)
            times.append(time.perf_counter() - started)
        found[title] = (statistics.median(times) * 1000, count)
    return found


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--clients", default="1,8", help="client counts to run, e.g. 1,8")
    parser.add_argument(
        "--profiles",
        default=",".join(PROFILES),
        help="device profiles to claim, of: " + ", ".join(PROFILES),
    )
    parser.add_argument(
        "--flows", default=",".join(FLOWS), help="flows to run, of: " + ", ".join(FLOWS)
    )
    parser.add_argument("--baseline", default="none",
                        help="run the server-side claims of this commit's code first, in an "
                             f"all-in-one of its own (e.g. {BASELINE}); none: skip")  # fmt: skip
    parser.add_argument("--rev", default="none",
                        help="run this commit's code rather than the working tree's (other "
                             "work in progress left out); none: the working tree")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=1,
                        help="run each flow this many times, in turn (on shared cores: a "
                             "median, and how far the rounds spread)")  # fmt: skip
    parser.add_argument("--apart", action="store_true",
                        help="time the claims apart from their releases: each client "
                             "claims for the run's time, then releases every claim it made "
                             "(capacity for them all is needed: not --hosts 2)")  # fmt: skip
    parser.add_argument(
        "--profile",
        help="write a cProfile of the server's event loop thread over the runs here "
        "(bench/profiled.py: the claims' own work, in worker threads, is not in it; "
        "read it with python -m pstats)",
    )
    args = parser.parse_args()
    profiles, flows = args.profiles.split(","), args.flows.split(",")
    counts = [int(n) for n in args.clients.split(",")]
    results: list[dict[str, Any]] = []
    if args.baseline != "none":
        with checkout(args.baseline) as source, all_in_one(config=CONFIG, source=source) as url:
            roots = fill(url, args.hosts)
            for r in (run(url, name, n, args.seconds, "server", roots, args.apart) for n in counts
                      for name in profiles for _ in range(args.rounds)):  # fmt: skip
                results.append({**r, "flow": f"{args.baseline[:7]}"})
    with contextlib.ExitStack() as stack:
        code = None if args.rev == "none" else stack.enter_context(checkout(args.rev))
        profile = Path(args.profile) if args.profile else None
        url = stack.enter_context(all_in_one(config=CONFIG, source=code, profile=profile))
        roots = fill(url, args.hosts)
        candidates = candidates_queries(url, roots)
        with profiling(url):  # the server's CPU over every flow's runs, with --profile
            results += [run(url, name, n, args.seconds, flow, roots, args.apart) for n in counts
                        for name in profiles for _ in range(args.rounds)
                        for flow in flows]  # fmt: skip
    print(f"\nallocation candidates for one FPGA region of function {FUNCTION[:8]}…, "
          f"{args.hosts} hosts, median of 10 (a server-side claim sends 1 to 4 in turn, "
          f"until one has candidates):")  # fmt: skip
    for title, (ms, count) in candidates.items():
        print(f"    {title:<46} {ms:8.1f} ms   {count:5d} candidates")
    after = ("released once the run's time is up, the releases timed apart" if args.apart
             else "each followed by its release")  # fmt: skip
    print(f"\n{args.seconds:.0f} s per run; a claim is candidates + ranking + allocation + "
          f"requests created and bound, {after}; the load average "
          f"now: {os.getloadavg()[0]:.1f}")  # fmt: skip
    for r in sorted(results, key=lambda r: (r["clients"], profiles.index(r["profile"]))):
        baselines = {b["flow"]: b for b in results if b["flow"] in PLACEMENT_FLOWS
                     and (b["profile"], b["clients"]) == (r["profile"], r["clients"])}  # fmt: skip
        print(line(r, baselines))
        if r["failures"]:
            print(f"    first failure: {r['failures'][0]}")
    if args.rounds > 1:
        print(f"\nmedians of {args.rounds} rounds (lowest to highest claims/s):")
        for key in dict.fromkeys((r["clients"], r["profile"], r["flow"]) for r in results):
            print(medians([r for r in results
                           if (r["clients"], r["profile"], r["flow"]) == key]))  # fmt: skip


def medians(rounds: list[dict[str, Any]]) -> str:
    """One flow's rounds: the median claims/s (the range), CPU per claim and p50, and the
    retries per claim over them all."""
    first = rounds[0]
    rates = sorted(len(r["latencies"]) / r["seconds"] for r in rounds)
    cpus = [r["cpu"] * 1000 / len(r["latencies"]) for r in rounds if r["latencies"]]
    p50s = [percentile(r["latencies"], 50) for r in rounds if r["latencies"]]
    claims = sum(len(r["latencies"]) + len(r["failures"]) for r in rounds)
    counted = [r["counted"].get("retries") for r in rounds]
    retries = "-" if None in counted else f"{sum(c or 0 for c in counted) / claims:.2f}"
    apart = ""
    if all("apart" in r for r in rounds):
        freed = sorted(n / took for n, took, _ in (r["apart"] for r in rounds))
        used = statistics.median(u * 1000 / max(n, 1) for n, _, u in (r["apart"] for r in rounds))
        apart = (f"   releases {statistics.median(freed):6.1f}/s ({freed[0]:.1f} to "
                 f"{freed[-1]:.1f}), CPU {used:5.1f} ms/release")  # fmt: skip
    return (f"{first['profile']:<20} {first['flow']:<9} {first['clients']:2d} clients "
            f"{statistics.median(rates):6.1f} claims/s ({rates[0]:.1f} to {rates[-1]:.1f})   "
            f"CPU {statistics.median(cpus or [0]):5.1f} ms/claim   "
            f"p50 {statistics.median(p50s or [0]):6.1f} ms   "
            f"retries {retries}/claim{apart}")  # fmt: skip


def fill(url: Url, hosts: int) -> frozenset[str]:
    """Report the hosts, wait until Placement has them, make the profiles; the hosts'
    compute node providers."""
    started = time.monotonic()
    hostnames = [f"bench-{n:03d}" for n in range(hosts)]
    report_fake_hosts(url, hostnames, INVENTORY)
    reported = time.monotonic() - started
    synced = wait_synced(url, hostnames)
    print(f"{hosts} hosts x 8 devices reported in {reported:.1f} s, "
          f"in Placement {synced:.1f} s later (load average {os.getloadavg()[0]:.1f})")  # fmt: skip
    for name, groups in PROFILES.items():
        call(url, "POST", "/v2/device_profiles", [{"name": name, "groups": groups}])
    return roots_of(url, hostnames)


def line(r: dict[str, Any], baselines: dict[str, dict[str, Any]]) -> str:
    """One run's figures; against Placement's own share of the same claims in each of
    ``baselines`` (flow name -> its run) that ran."""
    lat = r["latencies"]
    head = f"{r['profile']:<20} {r['flow']:<9} {r['clients']:2d} clients"
    if not lat:
        return f"{head}: no claim made ({len(r['failures'])} failed)"
    p50, rate, cpu = percentile(lat, 50), len(lat) / r["seconds"], r["cpu"] * 1000 / len(lat)
    ratios = ""
    for name, own in baselines.items():
        if r["flow"] in baselines or not own["latencies"]:
            continue
        own_cpu = own["cpu"] * 1000 / len(own["latencies"])
        ratios += (f"\n    against {name}: p50 {p50 / percentile(own['latencies'], 50):4.2f}x, "
                   f"claims/s {rate / (len(own['latencies']) / own['seconds']):4.2f}x, "
                   f"CPU per claim {cpu / own_cpu:4.2f}x")  # fmt: skip
        if "apart" in r and "apart" in own:
            (n, took, used), (own_n, own_took, own_used) = r["apart"], own["apart"]
            ratios += (f"; releases/s {n / took / (own_n / own_took):4.2f}x, "
                       f"CPU per release {used / n / (own_used / own_n):4.2f}x")  # fmt: skip
    failed = len(r["failures"])
    return (f"{head} {rate:6.1f} claims/s   p50 {p50:6.1f} ms   "
            f"p99 {percentile(lat, 99):6.1f} ms   CPU {cpu:5.1f} ms/claim   "
            f"{retried(r)}"
            f"(release p50 {percentile(r['releases'], 50):.1f} ms{release_cpu(r)}; "
            f"{failed} failed){ratios}")  # fmt: skip


def retried(r: dict[str, Any]) -> str:
    """Retries per claim (allocations refused and chosen again; ``-``: the code did not
    count them), Placement's 409s to the server's allocation writes per claim, and the
    share of the server's allocation writes sent batched."""
    counted, claims = r["counted"], len(r["latencies"]) + len(r["failures"])
    retries = counted.get("retries")
    shown = "  -" if retries is None else f"{retries / claims:4.2f}"
    writes = {k.split(":", 1)[1]: n for k, n in counted.items() if k.startswith("writes:")}
    batched = ""
    if sum(writes.values()):
        batched = f", {writes.get('batched', 0) / sum(writes.values()):4.0%} writes batched"
    conflicts = ""
    if r["flow"] not in PLACEMENT_FLOWS:
        conflicts = f", 409s {counted.get('conflicts', 0) / claims:4.2f}/claim"
    return f"retries {shown}/claim{conflicts}{batched}   "


def release_cpu(r: dict[str, Any]) -> str:
    """The process's CPU per release, summed over the releases alone: with one client
    nothing else runs meanwhile (with more, the other clients' claims would count); with
    ``apart``, the releases' rate and CPU, all clients releasing and nothing else."""
    if "apart" in r:
        count, took, used = r["apart"]
        return f", {count / took:.1f}/s, CPU {used * 1000 / max(count, 1):.1f} ms/release"
    if r["clients"] != 1 or not r["released_cpu"]:
        return ""
    return f", CPU {sum(r['released_cpu']) * 1000 / len(r['released_cpu']):.1f} ms/release"


if __name__ == "__main__":
    main()
