"""Device profiles (spec 002): validation, normalisation and storage.

A profile is a name and an ordered list of request groups. Each group maps
``resources:<RC>`` to a positive amount, ``trait:<TRAIT>`` to ``required`` or
``forbidden`` and ``accel:<key>`` to an Acceleron property. Resource class and
trait names are normalised (upper case, hyphens to underscores) and checked
against Placement's rules; everything else is checked character by character.
The order of groups, and of keys in a group, is kept exactly as given: Nova
maps ARQs to Placement groups by the group's index.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import re
import uuid as uuidlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from sqlalchemy import Connection, bindparam, delete, func, insert, or_, select
from sqlalchemy import update as update_
from sqlalchemy.exc import IntegrityError

from acceleron.bitstreams.base import BitstreamStore
from acceleron.conf import CLEANING_METHODS
from acceleron.db.models import (
    AcceleratorRequest,
    Deployable,
    Device,
    DeviceProfile,
    Host,
    table,
    utcnow,
)
from acceleron.db.session import Database, ReadCache
from acceleron.exceptions import DuplicateName, InUse, InvalidInput, NotFound
from acceleron.mig import units as mig_units
from acceleron.placement import names as placement_names
from acceleron.placement import tree
from acceleron.scheduler.query import split_regions
from acceleron.service import fitting
from acceleron.text import has_control
from acceleron.uuids import is_uuid_like, parse

LOG = logging.getLogger(__name__)

NAME_MAX = 255
NAME_RE = re.compile(r"[A-Za-z0-9_-]+")
_TOKEN_RE = re.compile(r"[A-Za-z0-9_-]+")
# bitstream_name carries the file suffix the spec asks for ("nlb.gbs"), hence the dot.
_BITSTREAM_NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")
TRAIT_VALUES = ("required", "forbidden")
ATTACH_TARGETS = ("VM", "host", "none")
ATTACH_TARGET_KEY = "attach_target"  # accel:attach_target; VM when absent
BITSTREAM_SELECTORS = ("bitstream_id", "bitstream_name", "function_id", "function_name")


@dataclasses.dataclass(frozen=True)
class Limits:
    """``[device_profiles]``: how much one profile may ask for. Each accelerator is one
    request (one row) when the profile is used, so these bound what any request makes."""

    max_groups: int = 32
    max_accelerators: int = 128  # over all groups
    max_accelerators_per_group: int = 16


def normalize_placement_name(raw: str) -> str:
    """Spec 002: lower case becomes upper case and hyphens become underscores."""
    return raw.upper().replace("-", "_")


def _check_resource_class(name: str, where: str) -> str:
    rc = normalize_placement_name(name)
    if placement_names.is_resource_class(rc):
        return rc
    raise InvalidInput(
        f"{where}: {rc!r} is not a resource class Placement knows: use a standard class "
        f"(for example FPGA, PGPU, VGPU) or a custom one named CUSTOM_<A-Z, 0-9, _>."
    )


def _check_trait(name: str, where: str) -> str:
    trait = normalize_placement_name(name)
    if placement_names.is_trait(trait):
        return trait
    raise InvalidInput(
        f"{where}: {trait!r} is neither a standard trait nor a custom trait named "
        f"CUSTOM_<A-Z, 0-9, _>."
    )


def _check_amount(value: str, where: str) -> str:
    digits = value.lstrip("0")
    if not value.isascii() or not value.isdigit() or not digits or len(digits) > 9:
        raise InvalidInput(
            f"{where}: the amount must be a positive integer (at most 9 digits), "
            f"not {value[:64]!r}."
        )
    return str(int(value))


def _check_uuid_value(value: str, where: str) -> str:
    parse(value, where)  # kept as written: a profile shows its groups as given
    return value


def _check_token(pattern: re.Pattern[str]) -> Callable[[str, str], str]:
    def check(value: str, where: str) -> str:
        if not pattern.fullmatch(value) or len(value) > NAME_MAX:
            raise InvalidInput(
                f"{where}: {value!r} may only hold letters, digits, '-' and '_'"
                + (" and '.'" if pattern is _BITSTREAM_NAME_RE else "")
                + f" (at most {NAME_MAX} characters)."
            )
        return value

    return check


def _check_attach_target(value: str, where: str) -> str:
    if value not in ATTACH_TARGETS:
        raise InvalidInput(f"{where}: must be one of {', '.join(ATTACH_TARGETS)}, not {value!r}.")
    return value


def _check_cleaning(value: str, where: str) -> str:
    if value not in CLEANING_METHODS:
        raise InvalidInput(f"{where}: must be one of {', '.join(CLEANING_METHODS)}, not {value!r}.")
    return value


def _check_reason_names(value: str, where: str) -> str:
    names = [n.strip().lower() for n in value.split(",")]
    if not names or not all(_REASON_RE.fullmatch(n) for n in names):
        raise InvalidInput(
            f"{where}: must be maintenance reason names (letters, digits, '-' and '_', at most "
            f"64 each) separated by commas, not {value!r}."
        )
    return ",".join(dict.fromkeys(names))


_REASON_RE = re.compile(r"^[a-z0-9_-]{1,64}$")
AFFINITIES = ("numa", "pcie_switch", "nvlink")  # accel:affinity: what they must share


def _check_affinity(value: str, where: str) -> str:
    folded = value.strip().lower()
    if folded not in AFFINITIES:
        raise InvalidInput(
            f"{where}: must be one of {', '.join(AFFINITIES)} (the unit the profile's "
            f"accelerators must share: a NUMA node, a PCIe switch, an NVLink domain), not "
            f"{value[:64]!r}."
        )
    return folded


def _check_mig_profile(value: str, where: str) -> str:
    try:
        mig_units.find(value.strip())
    except InvalidInput as error:
        raise InvalidInput(f"{where}: {error.message}") from error
    return value.strip()


# The accel: keys of spec 002 ("Valid accel keys") and how each value is checked.
ACCEL_KEYS: dict[str, Callable[[str, str], str]] = {
    "bitstream_id": _check_uuid_value,
    "bitstream_name": _check_token(_BITSTREAM_NAME_RE),
    "function_id": _check_uuid_value,
    "function_name": _check_token(_TOKEN_RE),
    ATTACH_TARGET_KEY: _check_attach_target,
    # Maintenance reasons (names, comma-separated) a request may still land on: docs/health.md.
    "tolerations": _check_reason_names,
    # How a device given back is cleaned before its next tenant: docs/cleaning.md.
    "cleaning": _check_cleaning,
    # The unit the profile's accelerators must share (numa, pcie_switch, nvlink):
    # docs/device-profiles.md.
    "affinity": _check_affinity,
    # A MIG instance of this profile, made at bind on a partitionable GPU: docs/mig.md.
    "mig_profile": _check_mig_profile,
}


def _normalize_entry(key: str, value: str, where: str) -> tuple[str, str]:
    prefix, sep, rest = key.partition(":")
    if not sep or not _TOKEN_RE.fullmatch(rest):
        raise InvalidInput(
            f"{where}: key {key!r} must be 'resources:<class>', 'trait:<trait>' or "
            f"'accel:<key>', with letters, digits, '-' and '_' after the colon."
        )
    if prefix == "resources":
        return f"resources:{_check_resource_class(rest, where)}", _check_amount(value, where)
    if prefix == "trait":
        trait = _check_trait(rest, where)
        if value.lower() not in TRAIT_VALUES:
            raise InvalidInput(f"{where}: must be 'required' or 'forbidden', not {value!r}.")
        return f"trait:{trait}", value.lower()
    if prefix == "accel":
        checker = ACCEL_KEYS.get(rest)
        if checker is None:
            raise InvalidInput(
                f"{where}: unknown key {key!r}; the accel keys are "
                f"{', '.join('accel:' + k for k in ACCEL_KEYS)}."
            )
        return key, checker(value, where)
    raise InvalidInput(f"{where}: key {key!r} must start with 'resources:', 'trait:' or 'accel:'.")


def normalize_group(group: Mapping[str, Any], index: int) -> tuple[dict[str, str], int]:
    """One request group, normalised, and the number of accelerators it asks for."""
    out: dict[str, str] = {}
    for key, value in group.items():
        where = f"groups[{index}][{key!r}]"
        if not isinstance(value, str):
            raise InvalidInput(f"{where}: the value must be a string.")
        new_key, new_value = _normalize_entry(key, value, where)
        if new_key in out:
            raise InvalidInput(
                f"groups[{index}]: {key!r} repeats {new_key!r} once lower case and hyphens "
                f"are translated."
            )
        out[new_key] = new_value
    out = mig_units.expand(out, f"groups[{index}]")
    if not any(k.startswith("resources:") for k in out):
        raise InvalidInput(
            f"groups[{index}] asks for no resource: every group needs at least one "
            f"'resources:<class>' entry."
        )
    amounts = placement_names.accelerator_amounts(out)
    if mig_units.PROFILE_KEY in out and set(amounts) != {mig_units.INSTANCE_CLASS}:
        raise InvalidInput(
            f"groups[{index}] names a MIG instance ({mig_units.PROFILE_KEY}) and other "
            f"accelerators ({', '.join(sorted(set(amounts) - {mig_units.INSTANCE_CLASS}))}): "
            f"a group lands on one provider; ask for them in groups of their own."
        )
    accelerators = sum(amounts.values())
    if not accelerators:
        raise InvalidInput(
            f"groups[{index}] asks for no accelerator: every group needs one "
            f"'resources:<class>' entry of an accelerator class (CUSTOM_ACCELERATOR_<TYPE>, "
            f"FPGA, PGPU or VGPU); memory (CUSTOM_ACCELERATOR_MEMORY_*) and other classes "
            f"only travel with it."
        )
    selectors = [k for k in BITSTREAM_SELECTORS if f"accel:{k}" in out]
    if len(selectors) > 1:
        raise InvalidInput(
            f"groups[{index}] names its bitstream in more than one way "
            f"({', '.join('accel:' + s for s in selectors)}): give only one."
        )
    # Memory (in MB) and other amounts are no accelerators: only accelerators are counted.
    return out, accelerators


def normalize_groups(groups: Any, limits: Limits) -> list[dict[str, str]]:
    """Validate and normalise a profile's groups, keeping their order."""
    if not isinstance(groups, list) or not groups:
        raise InvalidInput("groups: a device profile needs a non-empty list of request groups.")
    if len(groups) > limits.max_groups:
        raise InvalidInput(
            f"groups: {len(groups)} groups given, at most {limits.max_groups} are allowed."
        )
    result: list[dict[str, str]] = []
    total = 0
    for index, group in enumerate(groups):
        if not isinstance(group, dict):
            raise InvalidInput(f"groups[{index}]: a group must be an object of key/value pairs.")
        normalized, amount = normalize_group(group, index)
        if amount > limits.max_accelerators_per_group:
            raise InvalidInput(
                f"groups[{index}] asks for {amount} accelerators, more than the "
                f"{limits.max_accelerators_per_group} one group may ask for "
                f"([device_profiles] max_accelerators_per_group): each accelerator is one "
                f"request."
            )
        result.append(normalized)
        total += amount
    affinities = {g["accel:affinity"] for g in result if "accel:affinity" in g}
    if len(affinities) > 1:
        raise InvalidInput(
            f"groups: accel:affinity is the whole profile's (its accelerators share one "
            f"unit), but its groups name {', '.join(sorted(affinities))}: name one."
        )
    if total > limits.max_accelerators:
        raise InvalidInput(
            f"groups: the profile asks for {total} accelerators, at most "
            f"{limits.max_accelerators} are allowed ([device_profiles] max_accelerators)."
        )
    return result


def _split(groups: list[dict[str, str]], limits: Limits) -> list[dict[str, str]]:
    """The groups as a profile stores them (``split_regions``), still within
    ``max_groups``: a profile stored otherwise would be refused by a later rewrite."""
    split = split_regions(groups)
    if len(split) > limits.max_groups:
        raise InvalidInput(
            f"groups: {len(split)} groups once each group of N FPGA regions is N groups of "
            f"one (each region is a provider of its own), at most {limits.max_groups} are "
            f"allowed ([device_profiles] max_groups)."
        )
    return split


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidInput("name: a device profile needs a name.")
    if len(name) > NAME_MAX or not NAME_RE.fullmatch(name):
        raise InvalidInput(
            f"name: {name[:64]!r} may only hold letters, digits, '-' and '_' "
            f"(1 to {NAME_MAX} characters)."
        )
    if is_uuid_like(name):
        raise InvalidInput(
            f"name: {name!r} looks like a UUID; profiles are looked up by name or uuid, "
            f"so a name may not be one."
        )
    return name


def check_description(description: Any) -> str | None:
    if description is None:
        return None
    if not isinstance(description, str):
        raise InvalidInput("description: must be a string.")
    if len(description) > NAME_MAX:
        raise InvalidInput(f"description: at most {NAME_MAX} characters.")
    if has_control(description):
        raise InvalidInput("description: control characters are not allowed.")
    return description


def could_exist(ident: str) -> bool:
    """Whether a profile could have this uuid or name; others are not looked up at all."""
    return is_uuid_like(ident) or (len(ident) <= NAME_MAX and NAME_RE.fullmatch(ident) is not None)


# --- storage -----------------------------------------------------------------


class Profile(NamedTuple):
    """A stored device profile, as every read and write hands it out. Built from a row
    of ``_COLUMNS`` (the same names, in the same order) with ``Profile._make(row)``."""

    id: int
    uuid: str
    name: str
    description: str | None
    groups: list[dict[str, str]]
    enabled: bool
    created_at: dt.datetime
    updated_at: dt.datetime | None


_TABLE = table(DeviceProfile)
_HOSTS, _DEVICES, _DEPLOYABLES = table(Host), table(Device), table(Deployable)
# The hosts with a device or a region in maintenance.
_MAINTAINED = (
    select(_DEVICES.c.hostname)
    .where(_DEVICES.c.status == tree.MAINTAINING)
    .union(
        select(_DEVICES.c.hostname)
        .join(_DEPLOYABLES, _DEPLOYABLES.c.device_id == _DEVICES.c.id)
        .where(_DEPLOYABLES.c.status == tree.MAINTAINING)
    )
)


def _maintained_follow(conn: Connection, groups: Iterable[object]) -> None:
    """An enabled profile tolerating a maintenance reason came or went: what the hosts in
    maintenance publish changes (the reason's traits, their inventory open or reserved),
    so their generation is bumped for the sync's next pass, as a maintenance change
    bumps it."""
    if any(placement_names.tolerations(g) for g in groups):
        conn.execute(
            update_(_HOSTS)
            .where(_HOSTS.c.hostname.in_(_MAINTAINED))
            .values(generation=_HOSTS.c.generation + 1)
        )


_COLUMNS = [_TABLE.c[field] for field in Profile._fields]
# The hot statements are built once: building a statement and its cache key on
# every call costs more than running it (docs/benchmark-runs.md).
_SELECT = select(*_COLUMNS)
_ALL = _SELECT.order_by(_TABLE.c.id)
_BY_NAMES = _ALL.where(_TABLE.c.name.in_(bindparam("names", expanding=True)))
_BY_UUID = _SELECT.where(_TABLE.c.uuid == bindparam("ident"))
_BY_NAME = _SELECT.where(_TABLE.c.name == bindparam("ident"))
_BY_ID = _SELECT.where(_TABLE.c.id == bindparam("id"))
_CLASH = select(_TABLE.c.name).where(
    or_(_TABLE.c.name == bindparam("name"), _TABLE.c.uuid == bindparam("uuid"))
)
_INSERT = insert(_TABLE)
_make = Profile._make


def create(
    db: Database,
    *,
    name: str,
    groups: Any,
    description: str | None = None,
    uuid: str | None = None,
    enabled: bool = True,
    limits: Limits = Limits(),
) -> Profile:
    ident = parse(uuid, "uuid") if uuid else str(uuidlib.uuid4())
    # Stored as given on every backend (microseconds included): not read back.
    made = Profile(
        id=0,
        uuid=ident,
        name=check_name(name),
        description=check_description(description),
        groups=_split(normalize_groups(groups, limits), limits),
        enabled=enabled,
        created_at=utcnow(),
        updated_at=None,
    )
    values = made._asdict()
    del values["id"], values["updated_at"]
    try:  # the unique indexes say whether the name or uuid is taken: no SELECT first
        with db.writer() as conn:
            key = conn.execute(_INSERT, values).inserted_primary_key
            assert key is not None  # a single row's INSERT always has it
            profile = made._replace(id=key[0])
            if enabled:
                _maintained_follow(conn, profile.groups)
    except IntegrityError as exc:
        raise _duplicate(db, name, ident) from exc
    LOG.info("Created device profile %s (%s)", profile.name, profile.uuid)
    return profile


def _duplicate(db: Database, name: str, uuid: str) -> DuplicateName:
    """Which of ``name`` and ``uuid`` a stored profile has (the name when both, or when
    the profile that had it is gone already)."""
    with db.reader() as conn:
        clash = conn.execute(_CLASH, {"name": name, "uuid": uuid}).first()
    field, value = ("uuid", uuid) if clash is not None and clash.name != name else ("name", name)
    return DuplicateName(f"A device profile with {field} {value!r} already exists.")


GroupKey = tuple[tuple[str, str], ...]
# A group's steering, and whether nothing fitted it anywhere, by group, project, nesting.
Steered = dict[tuple[GroupKey, str, bool], tuple[dict[str, str], bool]]
# A group's steering is kept for the next shows and lists (``read_steered``) until this
# process writes to the database (anything: a report, a programming, an upload, a
# publication), or for this many seconds what other processes write (API replicas,
# `acceleron placement sync`), which reach Placement no sooner.
STEERING_SECONDS = 2.0
STEERING_KEPT = 1024  # groups kept at most (per project and nesting)
_STEERED: ReadCache[Steered] = ReadCache(STEERING_SECONDS, dict)


def with_fit_traits_of_profiles(
    db: Database,
    store: BitstreamStore | None,
    profiles: list[Profile],
    project: str,
    nested: bool,
    kept: Steered | None = None,
) -> list[Profile]:
    """The profiles with the traits that keep a group naming a function or bitstream off
    regions no bitstream of it fits (``fitting.with_fit_traits``): what Nova reads to build its
    Placement query. Profiles share groups (a list of 200 names a few functions): each
    distinct group is steered once, in one transaction, and taken from ``kept`` where it
    has it (then kept there).

    A kept group that nothing fitted is taken only while no bitstream for it exists yet
    (one statement): Placement would offer it nothing at all, and a bitstream just
    uploaded through another API process must be seen at once."""
    if not wants_steering(profiles):
        return profiles
    distinct = {_group_key(g): g for p in profiles for g in p.groups}
    known: Steered = {} if kept is None else kept
    by_key = {
        k: found[0]
        for k in distinct
        if (found := known.get((k, project, nested))) is not None
        and not (found[1] and fitting.has_bitstreams(store, distinct[k], project))
    }
    missing = [k for k in distinct if k not in by_key]
    if missing:
        steered, fits = fitting.with_fit_traits(
            db, store, [distinct[k] for k in missing], project, nested
        )
        by_key.update(zip(missing, steered, strict=True))
        if kept is not None and len(known) + len(missing) <= STEERING_KEPT:
            known.update(
                {
                    (k, project, nested): (by_key[k], fit is not None and fit.nowhere)
                    for k, fit in zip(missing, fits, strict=True)
                }
            )
    return [p._replace(groups=[dict(by_key[_group_key(g)]) for g in p.groups]) for p in profiles]


def wants_steering(profiles: list[Profile]) -> bool:
    """Whether a group of ``profiles`` names a function or bitstream."""
    return any(k in g for p in profiles for g in p.groups for k in fitting.SELECTORS)


def _group_key(group: dict[str, str]) -> GroupKey:
    return tuple(group.items())  # in order: a profile's groups keep their keys' order


def read_steered(
    db: Database,
    read: Callable[[Database], list[Profile]],
    store: BitstreamStore | None,
    project: str,
    nested: bool,
) -> list[Profile]:
    """What ``read`` returns, with fit traits (``with_fit_traits_of_profiles``), in one
    read transaction: the profiles, the bitstreams of the local store and the regions
    holding a function are read from one snapshot, with one BEGIN and one end
    (``Database.reader`` joins). A group's steering is kept a while
    (``STEERING_SECONDS``): a show of a profile whose groups were steered since this
    process last wrote reads the profile alone."""
    kept = _STEERED.get(db)
    with db.reader():
        return with_fit_traits_of_profiles(db, store, read(db), project, nested, kept)


def list_profiles(db: Database, names: Sequence[str] | None = None) -> list[Profile]:
    with db.reader() as conn:
        if names is None:
            return list(map(_make, conn.execute(_ALL)))
        wanted = [n for n in names if could_exist(n)]
        return list(map(_make, conn.execute(_BY_NAMES, {"names": wanted})))


def get(db: Database, ident: str) -> Profile:
    """A profile by uuid, or by name when ``ident`` is not a uuid."""
    with db.reader() as conn:
        return _get(conn, ident)


def _get(conn: Connection, ident: str) -> Profile:
    row = None
    if could_exist(ident):
        query = _BY_UUID if is_uuid_like(ident) else _BY_NAME
        row = conn.execute(query, {"ident": ident}).first()
    if row is None:
        raise NotFound(f"Device profile {ident!r} not found.")
    return _make(row)


def _find_all(conn: Connection, idents: Iterable[str]) -> list[Profile]:
    wanted = list(dict.fromkeys(idents))
    uuids = [i for i in wanted if is_uuid_like(i)]
    names = [i for i in wanted if not is_uuid_like(i) and could_exist(i)]
    rows = conn.execute(_SELECT.where(_TABLE.c.uuid.in_(uuids) | _TABLE.c.name.in_(names)))
    found = list(map(_make, rows))
    known = {p.uuid for p in found} | {p.name for p in found}
    missing = [i for i in wanted if i not in known]
    if missing:
        raise NotFound(f"Device profile(s) not found: {', '.join(map(repr, missing))}.")
    return found


def delete_profiles(db: Database, idents: Sequence[str]) -> None:
    """Delete every named profile, or none: all must exist and none may be in use."""
    if not idents:
        raise InvalidInput("Name at least one device profile to delete.")
    with db.writer() as conn:
        profiles = _find_all(conn, idents)
        ids = [p.id for p in profiles]
        arqs = table(AcceleratorRequest)
        in_use = conn.execute(
            select(_TABLE.c.name, func.count(arqs.c.id))
            .join(arqs, arqs.c.device_profile_id == _TABLE.c.id)
            .where(_TABLE.c.id.in_(ids))
            .group_by(_TABLE.c.name)
        ).all()
        if in_use:
            used = ", ".join(f"{name!r} ({count} requests)" for name, count in in_use)
            raise InUse(
                f"Device profile(s) still used by accelerator requests: {used}. Delete those "
                f"requests first, or disable the profile to stop new ones."
            )
        try:
            conn.execute(delete(_TABLE).where(_TABLE.c.id.in_(ids)))
        except IntegrityError as exc:  # a request was created meanwhile
            raise InUse("Device profile(s) became used by accelerator requests.") from exc
        _maintained_follow(conn, [g for p in profiles if p.enabled for g in p.groups])
    LOG.info("Deleted device profile(s) %s", ", ".join(p.name for p in profiles))


_UNSET: Any = object()


def update(
    db: Database, ident: str, *, description: Any = _UNSET, enabled: Any = _UNSET
) -> Profile:
    """Change a profile's description and/or whether it can be used for new requests."""
    changes: dict[str, Any] = {"updated_at": utcnow()}
    if description is not _UNSET:
        changes["description"] = check_description(description)
    if enabled is not _UNSET:
        if not isinstance(enabled, bool):
            raise InvalidInput("enabled: must be true or false.")
        changes["enabled"] = enabled
    with db.writer() as conn:
        before = _get(conn, ident)
        conn.execute(update_(_TABLE).where(_TABLE.c.id == before.id).values(changes))
        profile = _make(conn.execute(_BY_ID, {"id": before.id}).one())
        if profile.enabled != before.enabled:
            _maintained_follow(conn, profile.groups)
    LOG.info(
        "Updated device profile %s (%s)", profile.name, "enabled" if profile.enabled else "disabled"
    )
    return profile


# --- upgrades: rewriting names in stored profiles -------------------------------


@dataclasses.dataclass(frozen=True)
class PropertyRule:
    """``accel:<key>`` (with ``value``, or any value) becomes ``trait:<trait>=required``."""

    key: str
    trait: str
    value: str | None = None

    def describe(self) -> str:
        value = "" if self.value is None else f"={self.value}"
        return f"accel:{self.key}{value} -> trait:{self.trait}"


_RULE_FIELDS = frozenset({"key", "value", "trait"})


def _read_renames(data: Mapping[str, Any], section: str) -> dict[str, str]:
    renames = data.get(section) or {}
    if not isinstance(renames, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in renames.items()
    ):
        raise InvalidInput(f"{section}: must map old names to new names (strings).")
    result = {normalize_placement_name(k): normalize_placement_name(v) for k, v in renames.items()}
    if len(result) < len(renames):
        raise InvalidInput(
            f"{section}: an old name is given twice once lower case and hyphens are translated."
        )
    return result


def _read_rule(rule: Any, index: int) -> PropertyRule:
    where = f"properties[{index}]"
    if not isinstance(rule, dict) or not {"key", "trait"} <= set(rule):
        raise InvalidInput(f"{where}: needs 'key' and 'trait'.")
    unknown = set(rule) - _RULE_FIELDS
    if unknown:
        raise InvalidInput(
            f"{where}: unknown field(s) {', '.join(sorted(map(str, unknown)))}; "
            f"a rule has only key, value and trait."
        )
    key = str(rule["key"]).removeprefix("accel:")
    if key not in ACCEL_KEYS:
        raise InvalidInput(
            f"{where}: key {rule['key']!r} is not an accel key; the accel keys are "
            f"{', '.join('accel:' + k for k in ACCEL_KEYS)}."
        )
    value = None if rule.get("value") is None else str(rule["value"])
    return PropertyRule(key, normalize_placement_name(str(rule["trait"])), value)


@dataclasses.dataclass(frozen=True)
class NameMapping:
    """How names change between releases (spec 002, "Versioning and upgrades")."""

    resource_classes: Mapping[str, str] = dataclasses.field(default_factory=dict)
    traits: Mapping[str, str] = dataclasses.field(default_factory=dict)
    properties: tuple[PropertyRule, ...] = ()

    @classmethod
    def from_dict(cls, data: Any) -> NameMapping:
        """Read a mapping file's content; see docs/device-profiles.md for the format."""
        if not isinstance(data, dict):
            raise InvalidInput(
                "The mapping must be an object with resource_classes, traits and/or properties."
            )
        unknown = set(data) - {"resource_classes", "traits", "properties"}
        if unknown:
            raise InvalidInput(f"Unknown mapping section(s): {', '.join(sorted(unknown))}.")
        rules = data.get("properties") or []
        if not isinstance(rules, list):
            raise InvalidInput("properties: must be a list of {key, value, trait} rules.")
        return cls(
            _read_renames(data, "resource_classes"),
            _read_renames(data, "traits"),
            tuple(_read_rule(rule, index) for index, rule in enumerate(rules)),
        )

    def entries(self) -> list[str]:
        """Every entry of the mapping, described as rewrites report the ones they used."""
        return [
            *(_entry("resource_classes", old, new) for old, new in self.resource_classes.items()),
            *(_entry("traits", old, new) for old, new in self.traits.items()),
            *(f"properties[{i}]: {rule.describe()}" for i, rule in enumerate(self.properties)),
        ]


# The names this release renamed: what ``acceleron db rewrite-profiles`` applies without
# --mapping, and what ``acceleron status upgrade check`` looks for in stored profiles. A
# release that renames a resource class, trait or property adds it here.
RELEASE_RENAMES = NameMapping()


def _entry(section: str, old: str, new: str) -> str:
    return f"{section}: {old} -> {new}"


def _rewrite_entry(key: str, value: str, mapping: NameMapping) -> tuple[str, str, str | None]:
    """What one group entry becomes, and the mapping entry that matched it (if one did)."""
    prefix, _, name = key.partition(":")
    if prefix == "resources" and name in mapping.resource_classes:
        new = mapping.resource_classes[name]
        return f"resources:{new}", value, _entry("resource_classes", name, new)
    if prefix == "trait" and name in mapping.traits:
        new = mapping.traits[name]
        return f"trait:{new}", value, _entry("traits", name, new)
    if prefix == "accel":
        for index, rule in enumerate(mapping.properties):
            if rule.key == name and rule.value in (None, value):
                return f"trait:{rule.trait}", "required", f"properties[{index}]: {rule.describe()}"
    return key, value, None


def rewrite_group(
    group: Mapping[str, str], mapping: NameMapping, index: int = 0
) -> tuple[dict[str, str], set[str]]:
    """A group with names rewritten by ``mapping``, keys staying where they were, and the
    mapping entries that matched. Two keys that would become one are an error: merging
    them would lose one of the two values."""
    out: dict[str, str] = {}
    sources: dict[str, str] = {}
    used: set[str] = set()
    for key, value in group.items():
        new_key, new_value, entry = _rewrite_entry(key, value, mapping)
        if new_key in out:
            raise InvalidInput(
                f"groups[{index}]: {sources[new_key]!r} and {key!r} would both become {new_key!r}."
            )
        out[new_key], sources[new_key] = new_value, key
        if entry is not None:
            used.add(entry)
    return out, used


@dataclasses.dataclass(frozen=True)
class Rewrite:
    name: str
    before: list[dict[str, str]]
    after: list[dict[str, str]]


@dataclasses.dataclass(frozen=True)
class RewriteReport:
    """The profiles a mapping changes, and its entries that matched no stored profile."""

    changes: list[Rewrite]
    unmatched: list[str]


def _rewrite_profile(
    profile: Profile, mapping: NameMapping, limits: Limits
) -> tuple[list[dict[str, str]], set[str]]:
    """A stored profile's groups rewritten and validated again, and the entries used."""
    used: set[str] = set()
    after: list[dict[str, str]] = []
    try:
        for index, group in enumerate(profile.groups):
            rewritten, matched = rewrite_group(group, mapping, index)
            after.append(rewritten)
            used |= matched
        if after != profile.groups:
            after = normalize_groups(after, limits)
    except InvalidInput as error:
        raise InvalidInput(
            f"Device profile {profile.name!r} would be invalid after the rewrite: {error.message}"
        ) from error
    return after, used


def rewrite_profiles(
    db: Database, mapping: NameMapping, *, apply: bool, limits: Limits = Limits()
) -> RewriteReport:
    """Rewrite names in every stored profile. Each result is validated again; with
    ``apply`` all changes are stored in one transaction, otherwise nothing is. If any
    profile would become invalid, nothing is stored."""
    changes: list[Rewrite] = []
    used: set[str] = set()
    with db.writer() as conn:
        for profile in map(_make, conn.execute(_ALL).all()):
            after, matched = _rewrite_profile(profile, mapping, limits)
            used |= matched
            if after == profile.groups:
                continue
            changes.append(Rewrite(profile.name, list(profile.groups), after))
            if apply:
                conn.execute(
                    update_(_TABLE)
                    .where(_TABLE.c.id == profile.id)
                    .values(groups=after, updated_at=utcnow())
                )
    return RewriteReport(changes, [e for e in mapping.entries() if e not in used])
