"""Device profile groups -> the Placement ``GET /allocation_candidates`` query, as Nova builds it.

Nova (``get_device_request_groups`` and ``ResourceRequest``) turns group *i* of a device
profile into a request group whose requester id ``device_profile_<i>`` (plus the port
uuid for a port's profile) is the Placement group suffix:

* ``resources:<RC>: N`` -> ``resourcesdevice_profile_<i>=RC:N`` (zero amounts dropped);
* ``trait:<T>: required|forbidden`` -> ``requireddevice_profile_<i>=T`` or ``!T``;
* ``accel:`` keys, and anything else, are not sent to Placement.
* ``group_policy=none`` when there are two or more suffixed groups and no policy given.

Parameters are sorted (as Nova sorts them), values are comma-joined and sorted, and the
forbidden traits come after the required ones. Placement 1.33 is needed for such
suffixes and 1.34 for the ``mappings`` that tie each group to its provider.

Spec 001 also writes accelerator requests inline in flavor extra specs;
:func:`groups_from_flavor` reads those into the same group structure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlencode

import os_resource_classes

from acceleron.exceptions import InvalidInput

GROUP_PREFIX = "device_profile_"
TRAIT_VALUES = ("required", "forbidden")
GROUP_POLICIES = ("none", "isolate")
# Nova's ResourceRequest.XS_KEYPAT: the suffix in a profile key is ignored.
_PROFILE_KEY = re.compile(r"(resources|trait)([a-zA-Z0-9_-]{1,64})?:(.*)")


@dataclass(frozen=True)
class RequestGroup:
    """One suffixed request group of an allocation candidates query."""

    suffix: str
    resources: Mapping[str, int]
    required: frozenset[str] = frozenset()
    forbidden: frozenset[str] = frozenset()

    def params(self) -> list[tuple[str, str]]:
        pairs = [
            (
                f"resources{self.suffix}",
                ",".join(f"{rc}:{n}" for rc, n in sorted(self.resources.items())),
            )
        ]
        traits = sorted(self.required) + [f"!{t}" for t in sorted(self.forbidden)]
        if traits:
            pairs.append((f"required{self.suffix}", ",".join(traits)))
        return pairs


def _amount(value: str, where: str) -> int:
    try:
        amount = int(value)
    except ValueError:
        amount = -1
    if amount < 0:
        raise InvalidInput(f"{where}: the amount must be a non-negative integer, not {value!r}.")
    return amount


def request_group(group: Mapping[str, str], suffix: str) -> RequestGroup:
    """One device profile group as Nova reads it."""
    resources: dict[str, int] = {}
    required: set[str] = set()
    forbidden: set[str] = set()
    for key, value in group.items():
        match = _PROFILE_KEY.fullmatch(key)
        if match is None:
            continue  # accel: and anything else: not Placement's business
        prefix, _suffix, name = match.groups()
        where = f"group {suffix} key {key!r}"
        if prefix == "resources":
            resources[name] = resources.get(name, 0) + _amount(value, where)
        elif value.lower() in TRAIT_VALUES:
            (required if value.lower() == "required" else forbidden).add(name)
        else:
            raise InvalidInput(f"{where}: must be 'required' or 'forbidden', not {value!r}.")
    resources = {rc: n for rc, n in resources.items() if n}
    if not resources:
        raise InvalidInput(f"group {suffix} asks for no resource; every group needs one.")
    return RequestGroup(suffix, resources, frozenset(required), frozenset(forbidden))


def profile_groups(groups: Sequence[Mapping[str, str]], owner: str = "") -> list[RequestGroup]:
    """A profile's groups, in order, with suffixes ``device_profile_<i><owner>``.

    ``owner`` is the port uuid for a port's device profile, as in Nova.
    """
    return [request_group(g, f"{GROUP_PREFIX}{i}{owner}") for i, g in enumerate(groups)]


@dataclass(frozen=True)
class CandidateQuery:
    """A whole ``GET /allocation_candidates`` query."""

    groups: tuple[RequestGroup, ...]
    resources: Mapping[str, int] = field(default_factory=dict)  # the unsuffixed group
    group_policy: str | None = None
    limit: int | None = None

    def params(self) -> list[tuple[str, str]]:
        """The query as sorted (name, value) pairs."""
        pairs: list[tuple[str, str]] = []
        if self.limit is not None:
            pairs.append(("limit", str(self.limit)))
        if self.group_policy is not None:
            pairs.append(("group_policy", self.group_policy))
        if self.resources:
            value = ",".join(f"{rc}:{n}" for rc, n in sorted(self.resources.items()) if n)
            pairs.append(("resources", value))
        for group in self.groups:
            pairs.extend(group.params())
        return sorted(pairs)

    def querystring(self) -> str:
        return urlencode(self.params())


def build_query(
    groups: Sequence[RequestGroup],
    *,
    flavor_resources: Mapping[str, int] | None = None,
    group_policy: str | None = None,
    limit: int | None = None,
) -> CandidateQuery:
    """The query for ``groups``, plus the flavor's own (unsuffixed) resources."""
    suffixes = [g.suffix for g in groups]
    if len(set(suffixes)) != len(suffixes):
        raise InvalidInput(f"request group suffixes repeat: {suffixes}.")
    if group_policy is not None and group_policy not in GROUP_POLICIES:
        raise InvalidInput(f"group_policy must be 'none' or 'isolate', not {group_policy!r}.")
    if group_policy is None and len(groups) >= 2:
        group_policy = "none"
    if limit is not None and limit < 1:
        raise InvalidInput(f"limit must be a positive integer, not {limit}.")
    resources = {rc: n for rc, n in (flavor_resources or {}).items() if n}
    return CandidateQuery(tuple(groups), resources, group_policy, limit)


def profile_query(
    groups: Sequence[Mapping[str, str]],
    *,
    owner: str = "",
    flavor_resources: Mapping[str, int] | None = None,
    limit: int | None = None,
) -> CandidateQuery:
    """A device profile's groups (and a flavor's resources) as Nova would query them."""
    return build_query(
        profile_groups(groups, owner), flavor_resources=flavor_resources, limit=limit
    )


# Spec 001's inline flavor extra specs

_FLAVOR_KEY = re.compile(
    r"(?P<kind>resources|traits?|function_name|function|bitstream|others)"
    r"(?P<suffix>[a-zA-Z0-9_-]{1,64})?(?::(?P<arg>.*))?"
)
_OTHER_VALUE = re.compile(r"(?P<key>[a-z_]+[0-9]*:.+?)=(?P<value>\w+)")
# A trait ending in a UUID: 32 hex digits as published (upstream's spelling), or the
# five groups joined by underscores (a hyphenated UUID, spec 004).
_UUID_TAIL = re.compile(
    r"_([0-9A-F]{8})(_?)([0-9A-F]{4})\2([0-9A-F]{4})\2([0-9A-F]{4})\2([0-9A-F]{12})\Z",
    re.IGNORECASE,
)
# Standard classes that are not accelerators stay with the flavor's unsuffixed group.
_ACCELERATOR_STANDARD = frozenset({"FPGA", "PGPU", "VGPU", "VGPU_DISPLAY_HEAD"})


@dataclass(frozen=True)
class FlavorRequest:
    """Accelerator groups read from a flavor, in the device profile group structure;
    ``suffixes[i]``: the flavor's suffix of group ``i`` ("" for the unsuffixed one), the
    key under which Nova and Placement map that group to its provider."""

    groups: list[dict[str, str]]
    flavor_resources: dict[str, int]
    group_policy: str | None = None
    suffixes: tuple[str, ...] = ()

    def query(self, *, limit: int | None = None) -> CandidateQuery:
        return build_query(
            profile_groups(self.groups),
            flavor_resources=self.flavor_resources,
            group_policy=self.group_policy,
            limit=limit,
        )


def is_device_class(name: str) -> bool:
    """Whether a resource class may be on a device's provider, so an inline flavor group
    keeps it: custom, or FPGA/PGPU/VGPU... How many accelerators (requests) a group is
    is another question: ``placement.names.accelerators`` answers it."""
    return name.startswith("CUSTOM_") or name in _ACCELERATOR_STANDARD


def _function_entries(trait: str) -> dict[str, str]:
    entries = {"accel:function_trait": trait}
    match = _UUID_TAIL.search(trait)
    if match:
        entries["accel:function_id"] = "-".join(match.group(1, 3, 4, 5, 6)).lower()
    return entries


def _inline_entries(kind: str, arg: str, value: str, key: str) -> dict[str, str]:
    """One inline extra spec as device profile group entries."""
    if kind == "resources":
        return {f"resources:{arg}": value}
    if kind in ("trait", "traits"):
        return {f"trait:{arg}": value}
    # function:, function_name: and bitstream: name their subject in the key, with
    # value "required"; a bare key (``bitstream1``) takes the subject as its value.
    subject = arg if arg else value
    if arg and value.lower() != "required":
        raise InvalidInput(f"flavor extra spec {key!r}: the value must be 'required'.")
    if kind == "function":
        return _function_entries(subject)
    if kind == "function_name":
        return {"accel:function_name": subject}
    return {"accel:bitstream_id": subject}


def _parse_inline(key: str, value: str) -> tuple[str, dict[str, str]] | None:
    """(suffix, entries) for an inline accelerator extra spec; None for other keys."""
    match = _FLAVOR_KEY.fullmatch(key)
    if match is None:
        return None
    kind, suffix, arg = match["kind"], match["suffix"] or "", (match["arg"] or "").strip()
    if kind == "others":
        inner = _parse_other(key, arg, value)
        return (suffix, inner[1]) if inner else None
    if kind in ("resources", "trait", "traits") and not arg:
        return None
    return suffix, _inline_entries(kind, arg, value.strip(), key)


def _parse_other(key: str, arg: str, value: str) -> tuple[str, dict[str, str]] | None:
    """Spec 001's ``othersN: function:<trait>=required``, as one key or as key and value."""
    if arg:
        return _parse_inline(arg, value)
    other = _OTHER_VALUE.fullmatch(value.strip())
    if other is None:
        raise InvalidInput(f"flavor extra spec {key!r}: expected '<key>:<name>=required'.")
    return _parse_inline(other["key"], other["value"])


def _suffix_order(suffix: str) -> tuple[int, int, str]:
    if not suffix:
        return (0, 0, "")
    return (1, int(suffix), "") if suffix.isdigit() else (2, 0, suffix)


# Each FPGA region is a provider of its own in Placement, with one accelerator: regions
# are never pooled (their functions change with their tenants), and one group is served
# by one provider.
REGION_CLASSES = frozenset({"CUSTOM_ACCELERATOR_FPGA", "FPGA"})
# A group of more regions is left whole: no host has so many, the API refuses the
# group ([device_profiles] max_accelerators_per_group), and os_acc splits a flavor's
# groups before the API sees them (no flavor makes unbounded work).
SPLIT_AT_MOST = 256


def split_regions(groups: list[dict[str, str]]) -> list[dict[str, str]]:
    """A profile's groups with each group asking for N FPGA regions (and no other class)
    as N groups of one, in its place, with its traits and ``accel:`` keys: one group of
    N had no candidate in Placement (its largest provider has 1), where N groups of one
    have. A profile is stored so when created (docs/device-profiles.md). A group of one
    stays as it is, and so does one that asks for another class beside (memory, say)."""
    result: list[dict[str, str]] = []
    for group in groups:
        resources = [k for k in group if k.startswith("resources:")]
        key = resources[0] if len(resources) == 1 else ""
        amount = group.get(key, "")
        if (
            key.removeprefix("resources:") in REGION_CLASSES
            and amount.isascii()
            and amount.isdigit()
            and 1 < int(amount) <= SPLIT_AT_MOST
        ):
            result.extend({**group, key: "1"} for _ in range(int(amount)))
        else:
            result.append(group)
    return result


def groups_from_flavor(extra_specs: Mapping[str, str]) -> FlavorRequest:
    """Spec 001's inline accelerator extra specs, read into device profile groups.

    ``resources[N]:<RC>``, ``trait[N]:<T>`` (and spec 001's spelling ``traitsN``),
    ``function[N]:<trait>``, ``function_name[N]:<name>`` and ``bitstream[N]:<uuid>``
    (each ``=required``), and ``others[N]: <one of those>=required``. Keys with the same
    suffix form one group; the unsuffixed accelerator keys come first, then numbered
    suffixes in numeric order, then named ones. ``function:`` becomes
    ``accel:function_trait`` (and ``accel:function_id`` when the trait ends in a UUID),
    ``function_name:`` ``accel:function_name`` and ``bitstream:`` ``accel:bitstream_id``.
    Unsuffixed classes that are not accelerators (VCPU, MEMORY_MB, ...) become
    ``flavor_resources``; other keys (``hw:``, ``accel:device_profile``, ...) are ignored.
    """
    sections: dict[str, dict[str, str]] = {}
    for key, value in extra_specs.items():
        parsed = _parse_inline(key, value)
        if parsed is not None:
            sections.setdefault(parsed[0], {}).update(parsed[1])
    flavor_resources = _split_flavor_resources(sections)
    policy = extra_specs.get("group_policy")
    suffixes = tuple(s for s in sorted(sections, key=_suffix_order) if sections[s])
    return FlavorRequest([sections[s] for s in suffixes], flavor_resources, policy, suffixes)


def _split_flavor_resources(sections: dict[str, dict[str, str]]) -> dict[str, int]:
    """Move the unsuffixed non-accelerator classes out; drop the section if nothing is left."""
    unsuffixed = sections.get("", {})
    moved: dict[str, int] = {}
    for key in [k for k in unsuffixed if k.startswith("resources:")]:
        rc = key.partition(":")[2]
        if not is_device_class(rc) and rc in os_resource_classes.STANDARDS:
            moved[rc] = _amount(unsuffixed.pop(key), f"flavor extra spec 'resources:{rc}'")
    if unsuffixed and not any(k.startswith("resources:") for k in unsuffixed):
        sections.pop("", None)  # traits of the host itself, not of an accelerator
    return moved
