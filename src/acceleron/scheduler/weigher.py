"""The weigher of spec 001: prefer accelerators that already carry the function asked for.

For AFaaS with orchestration-programmed regions, any region of the right type would do,
but one that already holds the requested function needs no programming (seconds to
minutes saved, and the function ready at once). So allocation candidates rank:

1. by how many of the request's groups land on a provider whose traits already carry
   the group's wanted function (more first);
2. then by free capacity left on the chosen providers, in the classes asked for (more
   first: spread the load, keep full regions for requests that need them);
3. then as Placement listed them (``rank``); a claim takes one of the best at random
   (``best``), so that claims made at the same moment spread over equal candidates.

``rank`` is a pure function of Placement's answer; :mod:`acceleron.scheduler.nova_weigher`
wraps the same rule as a Nova host weigher.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence

from acceleron.placement.client import AllocationRequest, Candidates
from acceleron.uuids import is_uuid_like


def fold_function(function_id: str) -> str:
    """A function id as traits spell it: upper-case hex, separators dropped."""
    return function_id.strip().replace("-", "").replace("_", "").upper()


def carries(traits: Iterable[str], functions: Iterable[str]) -> bool:
    """Whether a provider's traits include a function trait of one of ``functions``
    (in any of the spellings: spec 004's, spec 001's, upstream's ``FUNCTION_ID``)."""
    wanted = {fold_function(f) for f in functions}
    return any(
        "FUNCTION" in trait and trait.replace("_", "").endswith(tuple(wanted))
        for trait in traits
        if wanted
    )


def wanted_functions(groups: Sequence[Mapping[str, str]]) -> dict[str, frozenset[str]]:
    """The function ids each group of a device profile names (``accel:function_id``), by
    request group suffix ``device_profile_<i>``."""
    found: dict[str, frozenset[str]] = {}
    for index, group in enumerate(groups):
        function = group.get("accel:function_id")
        if function and is_uuid_like(function):
            found[f"device_profile_{index}"] = frozenset({function})
    return found


# The keys by which a group names its function through the bitstream catalogue, in the
# order they are read; binding looks them up the same way.
CATALOGUE_KEYS = ("accel:function_name", "accel:bitstream_name", "accel:bitstream_id")
# A catalogue look-up: (key, value) -> the function ids of the bitstreams found.
Catalogue = Callable[[str, str], Iterable[str | None]]


def wanted_by(
    groups: Sequence[Mapping[str, str]], catalogue: Catalogue | None
) -> dict[str, frozenset[str]]:
    """The functions each group wants, by request group suffix: named by id, or else
    found through ``catalogue`` by the first of ``CATALOGUE_KEYS`` the group has. Groups
    that want none are left out."""
    found = wanted_functions(groups)
    for index, group in enumerate(groups):
        suffix = f"device_profile_{index}"
        key = next((k for k in CATALOGUE_KEYS if k in group), None)
        if suffix in found or key is None or catalogue is None:
            continue
        functions = frozenset(f for f in catalogue(key, group[key]) if f)
        if functions:
            found[suffix] = functions
    return found


def score(
    request: AllocationRequest,
    candidates: Candidates,
    wanted: Mapping[str, Iterable[str]],
) -> tuple[int, int]:
    """(groups already carrying their function, free units left on the chosen providers)."""
    holding = 0
    for group, functions in wanted.items():
        providers = request.mappings.get(group, ())
        summaries = [candidates.summaries.get(rp) for rp in providers]
        if any(s is not None and carries(s.traits, functions) for s in summaries):
            holding += 1
    free = 0
    for rp, resources in request.allocations.items():
        summary = candidates.summaries.get(rp)
        if summary is None:
            continue
        for rc, amount in resources.items():
            capacity = summary.resources.get(rc)
            if capacity is not None:
                free += capacity.capacity - capacity.used - amount
    return holding, free


def host_weight(held: Iterable[str], wanted: Iterable[str]) -> float:
    """A host's weight for Nova: the share of the wanted functions that one of its
    accelerators already holds (0.0 when none is wanted)."""
    wanted_set = {fold_function(f) for f in wanted}
    if not wanted_set:
        return 0.0
    return len(wanted_set & {fold_function(f) for f in held}) / len(wanted_set)


def best(
    candidates: Candidates,
    wanted: Mapping[str, Iterable[str]],
    choose: Callable[[Sequence[AllocationRequest]], AllocationRequest] = random.choice,
) -> AllocationRequest | None:
    """One of the best-scored allocation requests, chosen at random among equals so that
    concurrent claims spread instead of all racing for the same capacity."""
    if not candidates.requests:
        return None
    scores = [score(r, candidates, wanted) for r in candidates.requests]
    top = max(scores)
    return choose([r for r, s in zip(candidates.requests, scores, strict=True) if s == top])


def rank(candidates: Candidates, wanted: Mapping[str, Iterable[str]]) -> list[AllocationRequest]:
    """The allocation requests, best first."""
    scored = [
        (score(request, candidates, wanted), position, request)
        for position, request in enumerate(candidates.requests)
    ]
    scored.sort(key=lambda item: (-item[0][0], -item[0][1], item[1]))
    return [request for _, _, request in scored]
