"""How many MIG slice requests 8 GPUs serve: fixed layouts against carving on demand.

A seeded random trace of requests for MIG profiles, each released after a random
lifetime, is replayed over ``--gpus`` GPUs (8 H200 141GB by default). The mean lifetime
grows over the trace, so the load offered (compute slices asked for at once, over what
the GPUs have) rises from 0 to ``--peak-load`` (2.0): the GPUs fill up while requests
keep coming and going, which is what fragments them. For each strategy it prints the
requests served before the first refusal, the requests served in all (a refused request
is dropped; its release then frees nothing), and the CPU time per decision:

* static layouts, made in advance: every GPU all 1g; a mixed layout (a 7g, a 4g+3g, two
  3g+3g, two 2g+2g+2g+1g, four 1g of two memory slices, seven 1g); a request takes a
  free instance of exactly its profile, as a Nova flavour asks for one;
* the best static layout chosen with hindsight: of every combination of per-GPU layouts
  (each GPU any maximal layout the geometry allows), the one that serves the most of
  this very trace, found exactly (the counts of each profile are all that matter to a
  static layout, so each count vector is scored from per-profile tables), once for each
  of the two figures; printed as its counts, in the order of the mix;
* dynamic first fit: instances made on demand, at the first GPU's lowest free position
  (``acceleron.mig.planner.first_fit``);
* the planner: made on demand where ``acceleron.mig.planner.best_fit`` says.

The planner should serve at least 95 % of what the hindsight layout serves before the
first refusal; the ratio is printed for each seed and over all.

    .venv/bin/python bench/mig_planner.py [--seeds 1 2 3 4 5] [--requests 2000]
        [--gpus 8] [--product "H200 141GB"] [--peak-load 2.0]
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import itertools
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

from acceleron.exceptions import NoMigPlacement
from acceleron.mig.geometry import Instance, Layout, Product, product
from acceleron.mig.planner import Choice, Gpu, best_fit, first_fit

# The request mix, by shape (compute slices, memory slices): weight. The +me profile is
# left out; it is a 1g with the media engines, one a GPU.
MIX = {(1, 1): 0.30, (1, 2): 0.10, (2, 2): 0.25, (3, 4): 0.15, (4, 4): 0.10, (7, 8): 0.10}


def profile_names(prod: Product) -> list[str]:
    """The product's profile of each shape of ``MIX``, in its order."""
    plain = {
        (p.compute_slices, p.memory_slices): p.name for p in prod.profiles if "+" not in p.name
    }
    return [plain[shape] for shape in MIX]


@dataclasses.dataclass(frozen=True)
class Event:
    request: int
    profile: str  # the profile asked for
    release: bool  # False: the request arrives; True: it is released


def trace(prod: Product, seed: int, requests: int, gpus: int, peak_load: float) -> list[Event]:
    """Arrivals one a step; each lives an exponential time whose mean grows with the
    step so that the compute slices asked for at once reach ``peak_load`` times the
    GPUs' by the end."""
    rng = random.Random(seed)
    names = profile_names(prod)
    weights = list(MIX.values())
    mean_compute = sum(c * w for (c, _), w in MIX.items()) / sum(weights)
    full = gpus * prod.compute_slices / mean_compute  # requests that fill the GPUs' compute
    events: list[Event] = []
    ends: list[tuple[float, int, str]] = []
    for step in range(requests):
        while ends and ends[0][0] <= step:
            _, request, name = heapq.heappop(ends)
            events.append(Event(request, name, True))
        name = rng.choices(names, weights)[0]
        events.append(Event(step, name, False))
        mean_life = max(peak_load * full * step / requests, 1.0)
        heapq.heappush(ends, (step + rng.expovariate(1 / mean_life), step, name))
    return events


@dataclasses.dataclass
class Result:
    before_refusal: int = 0
    served: int = 0
    refused: int = 0
    decisions: int = 0
    cpu: float = 0.0  # seconds spent deciding
    busy_at_refusal: float | None = None  # the share of compute slices in use then

    def decision_us(self) -> float:
        return 1e6 * self.cpu / max(self.decisions, 1)


def replay_static(counts: Counter[str], events: Sequence[Event]) -> Result:
    """A fixed layout of ``counts`` instances of each profile."""
    result, free, held = Result(), Counter(counts), set()
    for event in events:
        if event.release:
            if event.request in held:
                held.discard(event.request)
                free[event.profile] += 1
            continue
        started = time.process_time()
        ok = free[event.profile] > 0
        if ok:
            free[event.profile] -= 1
        result.cpu += time.process_time() - started
        result.decisions += 1
        _count(result, ok)
        if ok:
            held.add(event.request)
    return result


def replay_dynamic(
    planner: Callable[[Sequence[Gpu], str], Choice],
    prod: Product,
    gpus: int,
    events: Sequence[Event],
) -> Result:
    """Instances made on demand where ``planner`` says, destroyed at release."""
    result = Result()
    fleet = [Gpu(f"gpu{i}", Layout.of(prod)) for i in range(gpus)]
    held: dict[int, tuple[int, Instance]] = {}
    for event in events:
        if event.release:
            if event.request in held:
                index, instance = held.pop(event.request)
                gpu = fleet[index]
                fleet[index] = Gpu(gpu.name, gpu.layout.removing(instance))
            continue
        started = time.process_time()
        try:
            choice: Choice | None = planner(fleet, event.profile)
        except NoMigPlacement:
            choice = None
        result.cpu += time.process_time() - started
        result.decisions += 1
        if choice is None and not result.refused:
            busy = sum(g.layout.compute for g in fleet)
            result.busy_at_refusal = busy / (gpus * prod.compute_slices)
        _count(result, choice is not None)
        if choice is not None:
            gpu = fleet[choice.index]
            fleet[choice.index] = Gpu(gpu.name, gpu.layout.adding(choice.instance))
            held[event.request] = (choice.index, choice.instance)
    return result


def _count(result: Result, served: bool) -> None:
    if served:
        result.served += 1
        if not result.refused:
            result.before_refusal += 1
    else:
        result.refused += 1


# -- the static layouts ------------------------------------------------------------------


def gpu_layouts(prod: Product, names: Sequence[str]) -> list[tuple[int, ...]]:
    """Every maximal layout one GPU can hold of the profiles ``names``, as counts."""
    found: set[tuple[int, ...]] = set()

    def grow(layout: Layout, smallest: int) -> None:
        grown = False
        for index in range(smallest, len(names)):
            for start in layout.free_starts(names[index]):
                grow(layout.adding(Instance(names[index], start)), index)
                grown = True
        if not grown:
            found.add(tuple(layout.counts[n] for n in names))

    grow(Layout.of(prod), 0)
    return _maximal(found)


def _maximal(vectors: Iterable[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The vectors no other one is at least as large as in every place."""
    unique = sorted(set(vectors), reverse=True)
    kept: list[tuple[int, ...]] = []
    for vector in unique:
        if not any(all(k >= v for k, v in zip(other, vector, strict=True)) for other in kept):
            kept.append(vector)
    return kept


def fleet_layouts(per_gpu: list[tuple[int, ...]], gpus: int) -> list[tuple[int, ...]]:
    """Every sum of ``gpus`` maximal per-GPU layouts: what the fleet can be laid out as
    (the sums some other sum dominates are kept too: weeding them out costs more than
    scoring them)."""
    sums = {tuple(0 for _ in per_gpu[0])}
    for _ in range(gpus):
        sums = {
            tuple(a + b for a, b in zip(total, one, strict=True))
            for total in sums
            for one in per_gpu
        }
    return sorted(sums)


def hindsight(
    names: Sequence[str], layouts: list[tuple[int, ...]], events: Sequence[Event]
) -> tuple[tuple[int, ...], int, tuple[int, ...], int]:
    """The fleet layout serving the most requests before the first refusal, and the one
    serving the most in all, each with its figure, scored exactly from the trace."""
    top = max(max(v) for v in layouts)
    # first[p][n]: requests served before the first request of p finds n instances busy.
    requests = sum(1 for e in events if not e.release)
    first = {n: [requests] * (top + 1) for n in names}
    active: Counter[str] = Counter()
    reached: Counter[str] = Counter(dict.fromkeys(names, -1))
    ordinal = 0
    for event in events:
        if event.release:
            active[event.profile] -= 1
            continue
        busy = active[event.profile]
        for n in range(reached[event.profile] + 1, min(busy, top) + 1):
            first[event.profile][n] = ordinal
        reached[event.profile] = max(reached[event.profile], busy)
        active[event.profile] += 1
        ordinal += 1
    # served[p][n]: requests of p served in all with n instances of p.
    served = {name: [_served_alone(name, n, events) for n in range(top + 1)] for name in names}

    def before(layout: tuple[int, ...]) -> int:
        return min(first[n][c] for n, c in zip(names, layout, strict=True))

    def in_all(layout: tuple[int, ...]) -> int:
        return sum(served[n][c] for n, c in zip(names, layout, strict=True))

    best_first, best_total = max(layouts, key=before), max(layouts, key=in_all)
    return best_first, before(best_first), best_total, in_all(best_total)


def _served_alone(name: str, instances: int, events: Sequence[Event]) -> int:
    free, held, served = instances, set(), 0
    for event in events:
        if event.profile != name:
            continue
        if event.release:
            if event.request in held:
                held.discard(event.request)
                free += 1
        elif free:
            free -= 1
            held.add(event.request)
            served += 1
    return served


def mixed_layout(prod: Product, gpus: int) -> Counter[str]:
    """The mixed layout of 8 GPUs (repeated for more), checked against the geometry."""
    one, one2, two, three, four, seven = profile_names(prod)
    plans = [
        [(seven, 0)],
        [(four, 0), (three, 4)],
        [(three, 0), (three, 4)],
        [(three, 0), (three, 4)],
        [(two, 0), (two, 2), (two, 4), (one, 6)],
        [(two, 0), (two, 2), (two, 4), (one, 6)],
        [(one2, s) for s in (0, 2, 4, 6)],
        [(one, s) for s in range(7)],
    ]
    counts: Counter[str] = Counter()
    for plan in itertools.islice(itertools.cycle(plans), gpus):
        counts.update(Layout.of(prod, [Instance(n, s) for n, s in plan]).counts)
    return counts


def _us(result: Result) -> str:
    return f"{result.decision_us():.1f} us"


def _cell(value: int | None) -> str:
    return "" if value is None else str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--product", default="H200 141GB")
    parser.add_argument("--peak-load", type=float, default=2.0)
    args = parser.parse_args()

    prod = product(args.product)
    names = profile_names(prod)
    started = time.process_time()
    per_gpu = gpu_layouts(prod, names)
    layouts = fleet_layouts(per_gpu, args.gpus)
    search_s = time.process_time() - started
    print(
        f"{args.gpus} x {prod.name}; mix "
        + ", ".join(f"{n} {w:.0%}" for n, w in zip(names, MIX.values(), strict=True))
        + f"; {args.requests} requests a trace, load rising to {args.peak_load}; "
        f"{len(layouts)} static layouts of the fleet, from {len(per_gpu)} maximal ones of a "
        f"GPU ({search_s:.2f} s CPU to list)"
    )
    print(
        "before: requests served before the first refusal; in all: served over the trace; "
        "busy: compute slices in use at the first refusal; CPU: us a decision (static "
        "hindsight: the CPU time of its search)"
    )
    print(f"{'seed':>4}  {'strategy':<36} {'before':>8} {'in all':>8} {'busy':>6} {'CPU':>10}")
    ratios_first, ratios_total = [], []
    for seed in args.seeds:
        events = trace(prod, seed, args.requests, args.gpus, args.peak_load)
        started = time.process_time()
        first_layout, first_served, total_layout, total_served = hindsight(names, layouts, events)
        hindsight_s = time.process_time() - started
        # The exact scoring, checked against a replay of the two layouts it chose.
        for layout, figure, field in (
            (first_layout, first_served, "before_refusal"),
            (total_layout, total_served, "served"),
        ):
            replayed = replay_static(Counter(dict(zip(names, layout, strict=True))), events)
            if getattr(replayed, field) != figure:
                raise SystemExit(f"hindsight scored {layout} {figure}, a replay {replayed}")
        rows: list[tuple[str, int | None, int | None, str, str]] = []
        for label, counts in (
            ("static: all 1g", Counter({names[0]: 7 * args.gpus})),
            ("static: mixed", mixed_layout(prod, args.gpus)),
        ):
            result = replay_static(counts, events)
            rows.append((label, result.before_refusal, result.served, "", _us(result)))
        search = f"({hindsight_s:.2f} s)"
        rows.append((f"static, hindsight {first_layout}", first_served, None, "", search))
        rows.append((f"static, hindsight {total_layout}", None, total_served, "", search))
        dynamic_first = replay_dynamic(first_fit, prod, args.gpus, events)
        planner = replay_dynamic(best_fit, prod, args.gpus, events)
        for label, result in (
            ("dynamic: first fit", dynamic_first),
            ("dynamic: planner (best fit)", planner),
        ):
            share = result.busy_at_refusal
            rows.append(
                (
                    label,
                    result.before_refusal,
                    result.served,
                    "" if share is None else f"{share:.0%}",
                    _us(result),
                )
            )
        for label, before, total, busy, cpu in rows:
            print(
                f"{seed:>4}  {label:<36} {_cell(before):>8} {_cell(total):>8} {busy:>6} {cpu:>10}"
            )
        ratio_first = planner.before_refusal / first_served
        ratio_total = planner.served / total_served
        ratios_first.append(ratio_first)
        ratios_total.append(ratio_total)
        print(
            f"{seed:>4}  planner / hindsight: {ratio_first:.3f} before the first refusal, "
            f"{ratio_total:.3f} in all"
        )
    print(
        f"over {len(args.seeds)} seeds, planner / hindsight before the first refusal: "
        f"min {min(ratios_first):.3f}, mean {sum(ratios_first) / len(ratios_first):.3f}; "
        f"in all: min {min(ratios_total):.3f}, mean {sum(ratios_total) / len(ratios_total):.3f}"
    )


if __name__ == "__main__":
    main()
