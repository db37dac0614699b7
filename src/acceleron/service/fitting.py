"""Where a group that names a function or a bitstream can land.

A group with ``accel:function_id`` (or ``accel:function_name``, ``accel:bitstream_id``,
``accel:bitstream_name``) and no region type of its own can be served by a region only
if the bind finds what to load into it (``binding.program_for``): a region that holds the
function already (``accel:function_id`` only), or a region of a type that a bitstream
it names is built for (a bitstream that names no region type fits any). Placement
knows nothing of the bitstream catalogue, so every other region of the right class is a
candidate too, and a bind there fails ("No bitstream matches ...").

This module works out, per group, what fits (:class:`Fit`), and says it to Placement in
the terms Nova and the claims both send: trait keys added to the group
(:func:`fit_traits`):

* the region type trait of every region type Acceleron knows (on hosts published to
  Placement) that fits neither way, ``forbidden`` — with nested providers;
* with flat providers (every trait of a host on its compute node) a forbidden region
  type would shut out a host that has a fitting region beside one that does not, so
  only where exactly one region type fits is its trait ``required``;
* where no bitstream exists for the function and its holders are all of one device
  type and vendor, the function trait ``required`` (only holders can serve);
* where nothing fits anywhere, every known region type forbidden: Placement answers
  with no candidate at once, and claims refuse before asking (:class:`NoFit`).

The API serves a device profile's groups with these keys added
(``GET /v2/device_profiles``), which is how they reach Nova: Nova builds its Placement
query from a group's ``resources:`` and ``trait:`` keys alone, at microversion 1.36
(so Placement's any-of traits, ``in:``, are not available to it). Claims add them to
their queries, and drop any candidate whose provider does not fit (:meth:`Fit.fits`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from sqlalchemy import Connection, bindparam, select, true

from acceleron.bitstreams.base import BitstreamStore
from acceleron.bitstreams.model import Bitstream, Query, fold_uuid
from acceleron.db.models import Deployable, Device, Host, table
from acceleron.db.session import Database
from acceleron.exceptions import AcceleronError, Conflict, InvalidPlacementName, NotFound
from acceleron.placement import names, tree
from acceleron.scheduler import weigher
from acceleron.uuids import is_uuid_like

DEPLOYABLES, DEVICES, HOSTS = table(Deployable), table(Device), table(Host)
SELECTORS = ("accel:function_id", "accel:function_name", "accel:bitstream_id",
             "accel:bitstream_name")  # fmt: skip

_PUBLISHED = DEPLOYABLES.join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id).join(
    HOSTS, HOSTS.c.hostname == DEVICES.c.hostname
)
# The region types of regions on hosts published to Placement, with how they are named.
_KNOWN = (
    select(DEVICES.c.type, DEVICES.c.vendor_name, DEPLOYABLES.c.region_type)
    .distinct()
    .select_from(_PUBLISHED)
    .where(DEPLOYABLES.c.region_type.is_not(None), HOSTS.c.rp_uuid.is_not(None))
)
_HOLDING = (
    select(
        DEVICES.c.type,
        DEVICES.c.vendor_name,
        DEPLOYABLES.c.region_type,
        DEPLOYABLES.c.function_uuid,
        DEPLOYABLES.c.function_uuids,
    )
    .select_from(_PUBLISHED)
    .where(HOSTS.c.rp_uuid.is_not(None))
)
# Built once (a device profile's show steers its groups): building a statement and its
# cache key costs more than running it. The region types of the regions whose first
# function is the one asked for (``function_key``, folded as traits spell it), each
# once: the database, not Python, goes through the thousands of holders of a function a
# large cloud has; and the regions holding several functions (few), checked one by one.
_HOLDER_TYPES = (
    select(DEVICES.c.type, DEVICES.c.vendor_name, DEPLOYABLES.c.region_type)
    .distinct()
    .select_from(_PUBLISHED)
    .where(HOSTS.c.rp_uuid.is_not(None), DEPLOYABLES.c.function_key == bindparam("key"))
)
_SEVERAL = _HOLDING.where(
    DEPLOYABLES.c.several_functions == true(), DEPLOYABLES.c.function_key != bindparam("key")
)  # (those naming it first are among the first query's)


class NoFit(Conflict):
    """No region holds the function a request names, and no bitstream for it fits any."""


@dataclasses.dataclass(frozen=True)
class RegionType:
    """A region type as Acceleron publishes it (its trait names the device type and
    vendor); ``folded``: the id as compared."""

    device_type: str
    vendor: str
    region_type: str

    @property
    def folded(self) -> str:
        return fold_uuid(self.region_type)

    def trait(self) -> str | None:
        try:
            return names.region_type_trait(self.device_type, self.vendor, self.region_type)
        except InvalidPlacementName:
            return None  # never published: nothing to steer by


@dataclasses.dataclass(frozen=True)
class Fit:
    """What can serve one group: ``types``, the region types (folded) a bitstream it
    names is built for; ``any_type``, whether one names none (it fits everywhere);
    ``function`` (``accel:function_id`` only), the function whose holders fit
    whatever their type; ``holders``, those holders' region types and, by device type
    and vendor, how they are named; ``functions``, the functions of the bitstreams it
    names."""

    what: str
    types: frozenset[str]
    any_type: bool = False
    function: str | None = None
    holders: frozenset[RegionType] = frozenset()
    functions: tuple[str | None, ...] = ()  # of the bitstreams it names, as found

    @property
    def nowhere(self) -> bool:
        return not (self.any_type or self.types or self.holders)

    def fits(self, traits: Iterable[str]) -> bool:
        """Whether a provider with ``traits`` can serve the group: it carries the
        function, or a region type a bitstream fits (one with no region type trait,
        not a region, fits when some bitstream exists)."""
        traits = list(traits)
        if self.any_type:
            return True
        if self.function and weigher.carries(traits, {self.function}):
            return True
        regions = [t.replace("_", "") for t in traits if "_REGION_" in t]
        if not regions:
            return bool(self.types)
        wanted = tuple(t.upper() for t in self.types)
        return bool(wanted) and any(r.endswith(wanted) for r in regions)

    def refusal(self) -> NoFit:
        return NoFit(
            f"No region holds {self.what} and no bitstream for it fits any region: upload "
            f"one built for a region type the cloud has, or name another function."
        )


def found(store: BitstreamStore, key: str, value: str, project: str) -> list[Bitstream]:
    """The bitstreams a group's ``key`` (one of ``SELECTORS``) names, as ``project``
    sees them."""
    if key == "accel:function_id":
        return store.find(Query(function_uuid=value, project=project))
    if key == "accel:function_name":
        return store.find(Query(function_name=value, project=project))
    if key == "accel:bitstream_name":
        return store.find(Query(name=value, project=project))
    try:
        return [store.get(value, project)]
    except NotFound:
        return []


def _holders(conn: Connection, function: str) -> frozenset[RegionType]:
    """The region types of the regions (on published hosts) holding ``function``."""
    key = weigher.fold_function(function)
    first = conn.execute(_HOLDER_TYPES, {"key": key})
    several = conn.execute(_SEVERAL, {"key": key}).all()
    return frozenset(RegionType(r.type, r.vendor_name, r.region_type or "") for r in first) | {
        RegionType(r.type, r.vendor_name, r.region_type or "")
        for r in several
        if any(weigher.fold_function(f) == key for f in tree.functions(r))
    }


def _selector(group: Mapping[str, str]) -> str | None:
    """The one key by which ``group`` names a function or bitstream; None when it names
    none, or several (its bind refuses it)."""
    given = [k for k in SELECTORS if k in group]
    return given[0] if len(given) == 1 else None


def has_bitstreams(store: BitstreamStore | None, group: Mapping[str, str], project: str) -> bool:
    """Whether a bitstream ``group`` names (as ``project`` sees them) exists: what can turn
    a group that fitted nowhere into one that fits."""
    key = _selector(group)
    if store is None or key is None:
        return False
    try:
        return bool(found(store, key, group[key], project))
    except AcceleronError:
        return False


def fit_of(
    conn: Connection, store: BitstreamStore | None, group: Mapping[str, str], project: str
) -> Fit | None:
    """What can serve ``group`` (bitstreams as ``project`` sees them); None when it
    names no function or bitstream (or names one in more than one way: its bind
    refuses it), or no bitstream store is configured."""
    key = _selector(group)
    if store is None or key is None:
        return None
    value = group[key]
    if key == "accel:function_id" and not is_uuid_like(value):
        return None
    try:
        named = found(store, key, value, project)
    except AcceleronError:  # a bad name, the store away: the bind says why
        return None
    function = value if key == "accel:function_id" else None
    return Fit(
        what=f"{key.removeprefix('accel:')} {value!r}",
        types=frozenset(fold_uuid(b.region_type_uuid) for b in named if b.region_type_uuid),
        any_type=any(b.region_type_uuid is None for b in named),
        function=weigher.fold_function(function) if function else None,
        holders=_holders(conn, function) if function else frozenset(),
        functions=tuple(b.function_uuid for b in named),
    )


def catalogue(
    store: BitstreamStore,
    project: str,
    groups: Sequence[Mapping[str, str]],
    fits: Sequence[Fit | None],
) -> weigher.Catalogue:
    """The store's look-up of a group's ``CATALOGUE_KEYS`` as ``project`` sees them; a
    selector ``fits`` (of ``groups``) looked up already is not asked again."""
    known = {
        (key, group[key]): fit.functions
        for group, fit in zip(groups, fits, strict=True)
        if fit is not None and (key := _selector(group)) is not None
    }

    def functions(key: str, value: str) -> Iterable[str | None]:
        if (key, value) in known:
            return known[key, value]
        return [b.function_uuid for b in found(store, key, value, project)]

    return functions


def known_types(conn: Connection) -> list[RegionType]:
    return [RegionType(r.type, r.vendor_name, r.region_type) for r in conn.execute(_KNOWN)]


def fit_traits(
    fit: Fit, known: Sequence[RegionType], nested: bool, group: Mapping[str, str]
) -> dict[str, str]:
    """The trait keys to add to ``group`` so that Placement offers only what ``fit``
    allows (as far as required and forbidden traits can say it); keys the group has
    already are left as they are."""
    if fit.any_type:
        return {}
    added: dict[str, str] = {}
    holder_types = {h.folded for h in fit.holders}
    named = {(h.device_type, h.vendor) for h in fit.holders}
    if fit.function and fit.holders and not fit.types and len(named) == 1:
        ((device_type, vendor),) = named
        with contextlib.suppress(InvalidPlacementName):
            added[f"trait:{names.function_trait(device_type, vendor, fit.function)}"] = "required"
    else:
        fitting = [k for k in known if k.folded in fit.types or k.folded in holder_types]
        unfit = [k for k in known if k not in fitting]
        if nested or not fitting:
            added.update({f"trait:{t}": "forbidden" for k in unfit if (t := k.trait())})
        elif len({k.folded for k in fitting}) == 1 and not holder_types - fit.types:
            added.update({f"trait:{t}": "required" for k in fitting[:1] if (t := k.trait())})
    return {k: v for k, v in added.items() if k not in group}


def with_fit_traits(
    db: Database,
    store: BitstreamStore | None,
    groups: Sequence[Mapping[str, str]],
    project: str,
    nested: bool,
) -> tuple[list[dict[str, str]], list[Fit | None]]:
    """``groups`` with the steering keys added, and each group's fit (None: any
    provider Placement offers will do)."""
    with db.reader() as conn:
        fits = [fit_of(conn, store, group, project) for group in groups]
        known = known_types(conn) if any(fits) else []
    steered = [
        {**group, **(fit_traits(fit, known, nested, group) if fit else {})}
        for group, fit in zip(groups, fits, strict=True)
    ]
    return steered, fits
