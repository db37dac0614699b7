"""Flat mode's binds: a free deployable of the right kind on a host, when Placement only
knows the compute node.

With ``[placement] nested = false`` (spec 001's fallback for clouds without nested
providers) every accelerator class and trait sits on the compute node's provider, so
Placement maps each request group to the compute node and Nova binds with that
provider as ``device_rp_uuid``. Placement checked the host as a whole; which device
serves the request is Acceleron's choice. :func:`candidates` lists the host's
deployables that could: each one's own classes and traits (the ones nested mode would
publish on its provider) must satisfy the group — every class with enough for one
request (its ``max_unit``), every required trait, no forbidden one. Those that need no
programming come first, then the rest, in id order; the bind takes the first with a free
handle, under the same row lock and conditional update as a nested bind
(``binding._bind_one``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Row, bindparam, select

from acceleron.db.models import Deployable, Device, Host, table
from acceleron.exceptions import InvalidInput, InvalidPlacementName
from acceleron.placement import tree
from acceleron.scheduler import query
from acceleron.service import programming

HOSTS, DEVICES, DEPLOYABLES = table(Host), table(Device), table(Deployable)
_COMPUTE = select(HOSTS.c.hostname).where(HOSTS.c.rp_uuid == bindparam("rp"))
_DEVICES = select(DEVICES).where(DEVICES.c.hostname == bindparam("host"))
_REGIONS = (
    programming.REGION.where(
        DEVICES.c.hostname == bindparam("host"), DEPLOYABLES.c.num_accelerators > 0
    )
).order_by(DEPLOYABLES.c.id)


def compute_host(conn: Connection, rp_uuid: str) -> str | None:
    """The host whose compute node provider ``rp_uuid`` is, if it is one."""
    return conn.execute(_COMPUTE, {"rp": rp_uuid}).scalar()


def _fits(want: query.RequestGroup, device: Any, dep: Any, options: tree.Options) -> bool:
    try:
        classes = tree.inventories(device, dep, options)
        traits = tree.deployable_traits(device, dep, options)
    except InvalidPlacementName:
        return False  # such a device is not published: Placement counted none of it
    return (
        all(rc in classes and classes[rc].max_unit >= n for rc, n in want.resources.items())
        and want.required <= traits
        and not want.forbidden & traits
    )


def candidates(
    conn: Connection,
    hostname: str,
    group: Mapping[str, str],
    options: tree.Options,
) -> list[Row[Any]]:
    """The host's deployables that can serve ``group`` alone, in id order (rows of
    ``programming.REGION``); InvalidInput when none can."""
    want = query.request_group(group, "")
    devices = {d.id: d for d in conn.execute(_DEVICES, {"host": hostname})}
    found = [
        dep
        for dep in conn.execute(_REGIONS, {"host": hostname})
        if dep.device_id in devices and _fits(want, devices[dep.device_id], dep, options)
    ]
    if not found:
        raise InvalidInput(
            f"No accelerator on host {hostname!r} offers what the request asks for "
            f"({_describe(want)}): its compute node's inventory in Placement and the host "
            f"disagree; the next sync fixes Placement."
        )
    return found


def _describe(want: query.RequestGroup) -> str:
    parts = [f"{rc}:{n}" for rc, n in sorted(want.resources.items())]
    parts += sorted(want.required) + [f"!{t}" for t in sorted(want.forbidden)]
    return ", ".join(parts)


def ordered(choices: Sequence[tuple[Row[Any], Any]]) -> list[tuple[Row[Any], Any]]:
    """Choices (deployable, bitstream to load or None) with those needing no programming
    first, each kind in id order."""
    return sorted(choices, key=lambda c: (c[1] is not None, c[0].id))
