"""The functions a device profile's groups want, for the weighers.

A group names its function directly (``accel:function_id``), by name
(``accel:function_name``) or through the bitstream to program (``accel:bitstream_id``,
``accel:bitstream_name``). The last three are looked up in the bitstream catalogue
over the API (``GET /v2/bitstreams``), as binding looks them up: the functions of the
bitstreams found are the ones wanted. Used by the claim flow
(:mod:`acceleron.scheduler.claim`) and Nova's weigher
(:mod:`acceleron.scheduler.nova_weigher`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

from keystoneauth1 import adapter as ks_adapter

from acceleron.scheduler.query import GROUP_PREFIX
from acceleron.scheduler.weigher import wanted_functions

MICROVERSION = "2.8"


def wanted(
    api: ks_adapter.Adapter, groups: Sequence[Mapping[str, str]]
) -> dict[str, frozenset[str]]:
    """The functions each group wants, by request group suffix (``device_profile_<i>``);
    groups that want none are left out. ``api``: a keystoneauth Adapter for the
    accelerator service. A look-up that finds nothing (or is refused) wants nothing;
    an API that cannot be reached raises keystoneauth's error."""
    found = dict(wanted_functions(groups))
    for index, group in enumerate(groups):
        suffix = f"{GROUP_PREFIX}{index}"
        if suffix not in found and (functions := from_catalogue(api, group)):
            found[suffix] = functions
    return found


def from_catalogue(api: ks_adapter.Adapter, group: Mapping[str, str]) -> frozenset[str]:
    """The functions of the bitstreams a group names by function name or bitstream."""
    if "accel:function_name" in group:
        items = _list(api, {"function_name": group["accel:function_name"]})
    elif "accel:bitstream_name" in group:
        items = _list(api, {"name": group["accel:bitstream_name"]})
    elif "accel:bitstream_id" in group:
        path = f"/v2/bitstreams/{quote(group['accel:bitstream_id'], safe='')}"
        response = api.get(path, microversion=MICROVERSION, raise_exc=False)
        items = [response.json()] if response.status_code == 200 else []
    else:
        return frozenset()
    return frozenset(b["function_uuid"] for b in items if b.get("function_uuid"))


def _list(api: ks_adapter.Adapter, params: Mapping[str, str]) -> list[dict[str, Any]]:
    response = api.get("/v2/bitstreams", params=params, microversion=MICROVERSION,
                       raise_exc=False)  # fmt: skip
    if response.status_code != 200:
        return []
    items: list[dict[str, Any]] = response.json().get("bitstreams", [])
    return items


def union(sets: Iterable[frozenset[str]]) -> frozenset[str]:
    found: frozenset[str] = frozenset()
    for item in sets:
        found |= item
    return found
