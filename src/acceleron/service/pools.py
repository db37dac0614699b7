"""A pool's devices, chosen at bind by where they sit.

With ``[placement] pools`` a host's identical accelerators are one provider in Placement
(``placement.tree``, a pool: inventory N). Placement counts them; Nova (or a claim) binds
each request with the pool as ``device_rp_uuid``, and Acceleron picks the deployables,
from what the sync recorded as the pool's members (``placement_providers.owned``).

The requests of one instance on one host are placed together (Nova binds them in one
PATCH, a claim in one call):

* with ``accel:affinity`` (``numa``, ``pcie_switch`` or ``nvlink``) in the device
  profile, every one of them must land on deployables that share that unit (a NUMA
  node, a PCIe switch, an NVLink domain); when no unit of the host has room for all of
  them, the bind is refused (``NoCapacity``) with the free units the host has. A device
  whose driver cannot tell its unit shares it with no other;
* without it they are packed: the NUMA node (then, in it, the PCIe switch) with the
  least room that still holds all of them, so that whole nodes stay free for large
  requests; when none holds them all, the units with the most room first.

Pure but for :func:`members` and :func:`places`: rows in, orders out. The bind takes the
handles in the order given, under its usual row locks and conditional updates
(``binding._take``), so racing binds never share a handle.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, func, select

from acceleron.db.models import AttachHandle, Deployable, Device, PlacementProvider, table
from acceleron.exceptions import InvalidInput, NoCapacity
from acceleron.vocabulary import UNHEALTHY

DEPLOYABLES, DEVICES, HANDLES = table(Deployable), table(Device), table(AttachHandle)
PROVIDERS = table(PlacementProvider)
AFFINITY = "accel:affinity"
# accel:affinity's values, and the device column each names.
UNITS = {"numa": "numa_node", "pcie_switch": "pcie_switch", "nvlink": "nvlink_domain"}
WORDS = {"numa_node": "NUMA node", "pcie_switch": "PCIe switch", "nvlink_domain": "NVLink domain"}
PACKING = ("numa_node", "pcie_switch")  # what requests without accel:affinity are packed by


def affinity(group: Mapping[str, str]) -> str | None:
    """The device column ``accel:affinity`` names (None: no such key); InvalidInput for
    any other value than those of ``UNITS``."""
    value = group.get(AFFINITY)
    if value is None:
        return None
    folded = str(value).strip().lower()
    if folded not in UNITS:
        choices = ", ".join(UNITS)
        raise InvalidInput(
            f"{AFFINITY}: {str(value)[:64]!r} is not a unit the accelerators can share; "
            f"use one of {choices}."
        )
    return UNITS[folded]


def members(conn: Connection, rp_uuid: str) -> tuple[str, list[int]] | None:
    """The host and the deployables (ids) of the pool ``rp_uuid``, as the sync last
    published it; None when it is no pool."""
    row = conn.execute(
        select(PROVIDERS.c.hostname, PROVIDERS.c.owned).where(PROVIDERS.c.uuid == rp_uuid)
    ).first()
    if row is None:
        return None
    found = (row.owned or {}).get("members")
    if not found:
        return None
    return str(row.hostname), [int(m) for m in found]


@dataclasses.dataclass(frozen=True)
class Slot:
    """A deployable of a pool: its free units and where it sits."""

    id: int
    free: int
    place: Mapping[str, str | None]  # device column -> value (numa_node, pcie_switch...)

    def unit(self, level: str) -> tuple[int, str]:
        """Its unit at ``level``; a device that cannot tell shares it with none."""
        value = self.place.get(level)
        return (0, str(value)) if value is not None else (1, f"#{self.id}")


_FREE = (
    select(HANDLES.c.deployable_id, func.count())
    .where(
        HANDLES.c.arq_id.is_(None),
        HANDLES.c.host_in_use.is_(False),
        HANDLES.c.state == "present",
        HANDLES.c.health != UNHEALTHY,
        HANDLES.c.cleaning.is_(None),
    )
    .group_by(HANDLES.c.deployable_id)
)


def places(conn: Connection, deployable_ids: Sequence[int]) -> dict[int, Slot]:
    """Each deployable's free handles and its device's place."""
    if not deployable_ids:
        return {}
    ids = sorted(set(deployable_ids))
    free: dict[int, int] = dict(conn.execute(_FREE.where(HANDLES.c.deployable_id.in_(ids))).all())
    rows = conn.execute(
        select(DEPLOYABLES.c.id, *(DEVICES.c[c] for c in UNITS.values()))
        .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
        .where(DEPLOYABLES.c.id.in_(ids))
    )
    return {
        row.id: Slot(
            row.id,
            int(free.get(row.id, 0)),
            {c: None if getattr(row, c) is None else str(getattr(row, c)) for c in UNITS.values()},
        )
        for row in rows
    }


def plan(
    needs: Mapping[str, int],
    slots: Mapping[str, Sequence[Slot]],
    level: str | None,
    hostname: str = "",
) -> dict[str, list[int]]:
    """For one instance's requests on one host: by pool, the deployables to take handles
    of, in order. ``needs``: how many units each pool must give; ``slots``: each pool's
    usable deployables; ``level``: the device column the requests must share
    (``accel:affinity``), or None to pack. NoCapacity when ``level`` is set and no unit
    of the host has room for them all."""
    below: tuple[str, ...]
    if level is None:
        top, below = PACKING[0], PACKING[1:]
    else:
        top, below = level, tuple(p for p in PACKING if p != level)
    units: dict[tuple[int, str], dict[str, list[Slot]]] = {}
    for pool, mine in slots.items():
        for slot in mine:
            units.setdefault(slot.unit(top), {}).setdefault(pool, []).append(slot)

    def room(unit: Mapping[str, Sequence[Slot]], pool: str) -> int:
        return sum(s.free for s in unit.get(pool, ()))

    fitting = [
        u for u, there in units.items() if all(room(there, p) >= n for p, n in needs.items())
    ]
    if fitting:
        best = min(fitting, key=lambda u: (sum(room(units[u], p) for p in needs), u))
        first = units[best]
        rest = {p: [s for s in slots.get(p, ()) if s.unit(top) != best] for p in needs}
        result = {p: [s.id for s in _order(first.get(p, []), n, below)] for p, n in needs.items()}
        if level is None:  # the others after, should a racing bind take some first
            for pool, n in needs.items():
                result[pool] += [s.id for s in _order(rest[pool], n, PACKING)]
        return result
    if level is not None:
        raise NoCapacity(_refusal(needs, units, top, hostname))
    return {p: [s.id for s in _order(list(slots.get(p, ())), n, PACKING)] for p, n in needs.items()}


def _order(slots: Sequence[Slot], need: int, levels: Sequence[str]) -> list[Slot]:
    """Slots in the order to take them for ``need`` units: at each level the unit with
    the least room that holds them all first; when none does, the roomiest first."""
    if not levels or len(slots) <= 1:
        return sorted(slots, key=lambda s: (s.free < need, s.free, s.id))
    level, below = levels[0], levels[1:]
    units: dict[tuple[int, str], list[Slot]] = {}
    for slot in slots:
        units.setdefault(slot.unit(level), []).append(slot)
    room = {u: sum(s.free for s in mine) for u, mine in units.items()}
    fitting = [u for u in units if room[u] >= need]
    if fitting:
        best = min(fitting, key=lambda u: (room[u], u))
        others = [s for s in slots if s.unit(level) != best]
        return _order(units[best], need, below) + _order(others, need, levels)
    ordered: list[Slot] = []
    for unit in sorted(units, key=lambda u: (-room[u], u)):
        ordered += _order(units[unit], room[unit], below)
    return ordered


def _refusal(
    needs: Mapping[str, int],
    units: Mapping[tuple[int, str], Mapping[str, Sequence[Slot]]],
    level: str,
    hostname: str,
) -> str:
    word = WORDS.get(level, level)
    asked = sum(needs.values())
    free = sorted(
        (sum(s.free for p in needs for s in there.get(p, ())) for there in units.values()),
        reverse=True,
    )
    most = free[0] if free else 0
    where = f"host {hostname!r}" if hostname else "the host"
    return (
        f"The device profile asks that its {asked} accelerator(s) share one {word} "
        f"({AFFINITY}), but no {word} of {where} has that many free: the most any has is "
        f"{most} (free by {word}: {free or [0]})."
    )


def usable_first(rows: Sequence[Any], ids: Sequence[int]) -> list[Any]:
    """``rows`` (deployables) in the order of ``ids``; those not in it left out."""
    by_id = {row.id: row for row in rows}
    return [by_id[i] for i in ids if i in by_id]
