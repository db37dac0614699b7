"""The functions a device profile's groups want, and the hosts that hold them: the
weighers' look-ups over the API.

A group names its function directly (``accel:function_id``), by name
(``accel:function_name``) or through the bitstream to program (``accel:bitstream_id``,
``accel:bitstream_name``). The last three are looked up in the bitstream catalogue
over the API (``GET /v2/bitstreams``), as binding looks them up: the functions of the
bitstreams found are the ones wanted. Used by Nova's weigher
(:mod:`acceleron.scheduler.nova_weigher`); a claim resolves them in the API
(:mod:`acceleron.service.claims`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

from acceleron.client.http import AcceleronClient, NoEndpoint, Unreachable, as_client
from acceleron.microversion import V2_8
from acceleron.scheduler.query import groups_from_flavor
from acceleron.scheduler.weigher import host_weight, wanted_by

LOG = logging.getLogger(__name__)
Api = AcceleronClient | ks_adapter.Adapter  # the API's client, or an adapter to wrap in one
MICROVERSION = V2_8
# The Nova weigher's own section of nova.conf (acceleron.scheduler.nova_weigher).
GROUP = "acceleron_weigher"
OPTS: list[cfg.Opt] = [
    cfg.FloatOpt(
        "weight_multiplier",
        default=1.0,
        help="Multiplier of the weight (0.0 to 1.0, the share of the wanted functions a "
        "host already holds). Larger values make it count more than Nova's other "
        "weighers; 0 turns it off.",
    ),
]
# keystoneauth's adapter defaults: the accelerator service from the catalog, and a short
# timeout (the scheduler waits for it).
ADAPTER_DEFAULTS: dict[str, object] = {
    "service_type": "accelerator",
    "valid_interfaces": ["internal", "public"],
    "timeout": 10,
}


def register_opts(conf: cfg.ConfigOpts) -> None:
    """``[acceleron_weigher]``: the multiplier and keystoneauth's session, auth and
    adapter options (auth_type, auth_url, username, ..., endpoint_override)."""
    conf.register_opts(OPTS, group=GROUP)
    ks_loading.register_session_conf_options(conf, GROUP)
    ks_loading.register_auth_conf_options(conf, GROUP)
    ks_loading.register_adapter_conf_options(conf, GROUP, include_deprecated=False)
    for name, value in ADAPTER_DEFAULTS.items():
        conf.set_default(name, value, group=GROUP)


def load_adapter(conf: cfg.ConfigOpts) -> ks_adapter.Adapter:
    """The weigher's own client for the accelerator API, from ``[acceleron_weigher]``."""
    auth = ks_loading.load_auth_from_conf_options(conf, GROUP)
    if auth is None and not conf[GROUP].endpoint_override:
        raise LookupError(
            f"[{GROUP}] has neither auth_type nor endpoint_override: the weigher cannot "
            "reach Acceleron."
        )
    session = ks_loading.load_session_from_conf_options(conf, GROUP, auth=auth)
    api = ks_loading.load_adapter_from_conf_options(conf, GROUP, session=session, auth=auth)
    try:
        AcceleronClient(api).resolve()  # the endpoint, without the /v2 catalogs register
    except NoEndpoint as error:
        raise LookupError("no accelerator endpoint in the catalog") from error
    return api


def wanted(api: Api, groups: Sequence[Mapping[str, str]]) -> dict[str, frozenset[str]]:
    """The functions each group wants, by request group suffix (``device_profile_<i>``);
    groups that want none are left out. A look-up that finds nothing (or is refused)
    wants nothing; an API that cannot be reached raises CallFailed."""
    client = as_client(api)
    return wanted_by(groups, lambda key, value: from_catalogue(client, key, value))


def from_catalogue(api: AcceleronClient, key: str, value: str) -> list[str | None]:
    """The functions of the bitstreams a group's ``key`` (one of ``CATALOGUE_KEYS``)
    names, over the API."""
    if key == "accel:function_name":
        items = _list(api, {"function_name": value})
    elif key == "accel:bitstream_name":
        items = _list(api, {"name": value})
    else:
        path = f"/v2/bitstreams/{quote(value, safe='')}"
        response = api.send("GET", path, microversion=MICROVERSION)
        items = [response.json()] if response.status_code == 200 else []
    return [b.get("function_uuid") for b in items]


def _list(api: AcceleronClient, params: Mapping[str, str]) -> list[dict[str, Any]]:
    response = api.send("GET", "/v2/bitstreams", params=params, microversion=MICROVERSION)
    if response.status_code != 200:
        return []
    items: list[dict[str, Any]] = response.json().get("bitstreams", [])
    return items


def union(sets: Iterable[frozenset[str]]) -> frozenset[str]:
    found: frozenset[str] = frozenset()
    for item in sets:
        found |= item
    return found


# --- hosts: what Nova's weigher asks --------------------------------------------------


def weigh_hosts(
    connect: Callable[[], Api],
    extra_specs: Mapping[str, str],
    hostnames: Sequence[str],
    forget: Callable[[], None] | None = None,
) -> list[float]:
    """Each host's weight for a flavor: the share of the functions it wants that one of
    the host's accelerators already holds. ``connect`` gives the API client (called only
    when the flavor wants functions). Never raises: whatever fails, every host weighs 0
    and the reason is logged. When the API cannot be reached, ``forget`` is called: the
    client found its endpoint in the catalog, which may have moved since (a new URL, or
    Acceleron replacing another accelerator service), and the next request looks again."""
    try:
        groups = flavor_groups(connect, extra_specs)
        if not groups:
            return [0.0] * len(hostnames)
        api = as_client(connect())
        wanted_all = union(wanted(api, groups).values())
        held = holders(api, wanted_all)
    except Exception as error:  # never fail scheduling
        LOG.warning(
            "Acceleron weigher: every host weighs 0 for this request: %s: %s",
            type(error).__name__,
            error,
        )
        if forget is not None and isinstance(error, Unreachable):
            forget()
        return [0.0] * len(hostnames)
    return [host_weight({f for f in wanted_all if h in held[f]}, wanted_all) for h in hostnames]


def flavor_groups(
    connect: Callable[[], Api], extra_specs: Mapping[str, str]
) -> list[dict[str, str]]:
    """The groups of the flavor's device profile (``accel:device_profile``, read from the
    API), or of its inline extra specs (spec 001's ``function1:``...); empty when it names
    no function, bitstream or profile."""
    name = extra_specs.get("accel:device_profile")
    if not name:
        inline = [dict(group) for group in groups_from_flavor(extra_specs).groups]
        return inline if any(k.startswith("accel:") for g in inline for k in g) else []
    found = as_client(connect()).call("GET", "/v2/device_profiles", params={"name": name})[
        "device_profiles"
    ]
    if len(found) != 1:
        raise LookupError(f"device profile {name!r}: {len(found)} found, 1 expected")
    groups: list[dict[str, str]] = found[0]["groups"]
    return groups


def holders(api: Api, functions: Iterable[str]) -> dict[str, set[str]]:
    """The hosts whose accelerators hold each function now (one request per function)."""
    api = as_client(api)
    found = {}
    for function in functions:
        body = api.call(
            "GET", "/v2/deployables", params={"function_uuid": function}, microversion=MICROVERSION
        )
        found[function] = {d["hostname"] for d in body["deployables"]}
    return found
