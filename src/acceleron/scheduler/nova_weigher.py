"""Spec 001's weigher as a Nova host weigher (import it only where Nova is installed).

Enable it in the nova-scheduler's nova.conf, with the credentials it reaches
Acceleron with (docs/scheduling.md, docs/deploy-with-nova.md)::

    [filter_scheduler]
    weight_classes = nova.scheduler.weights.all_weighers,
        acceleron.scheduler.nova_weigher.AcceleratorFunctionWeigher

    [acceleron_weigher]
    auth_type = password
    auth_url = https://cloud.example.org/identity
    username = nova
    password = SECRET
    project_name = service
    user_domain_name = Default
    project_domain_name = Default
    weight_multiplier = 1.0

A host weighs the share of the functions the flavor asks for that one of its
accelerators already holds (1.0: all, 0.0: none), times ``weight_multiplier``:
AFaaS requests land where no programming is needed. The functions come from the
flavor's device profile (``accel:device_profile``) or its inline extra specs, resolved
as the claim flow resolves them (``accel:function_id``, or ``accel:function_name`` and
``accel:bitstream_*`` through the bitstream catalogue); which host holds which
function comes from Acceleron's inventory (``GET /v2/deployables?function_uuid=``),
asked once per scheduling request.

The weigher runs outside any user's request, so it brings its own credentials: the
keystoneauth options of ``[acceleron_weigher]`` (a user with the ``service`` role), or
just ``endpoint_override`` for an Acceleron without authentication. Whatever goes wrong
(Acceleron unreachable, credentials refused, an unknown profile), every host weighs 0
and the reason is logged: the weigher never fails scheduling.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

try:
    from nova.scheduler import weights
except ImportError as error:  # pragma: no cover - depends on the host
    raise ImportError(
        "acceleron.scheduler.nova_weigher is a Nova scheduler weigher: it needs Nova "
        "installed beside it (the nova-scheduler's Python environment)."
    ) from error

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

from acceleron.scheduler import functions
from acceleron.scheduler.query import groups_from_flavor
from acceleron.scheduler.weigher import host_weight

LOG = logging.getLogger(__name__)
GROUP = "acceleron_weigher"
MICROVERSION = functions.MICROVERSION
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
    # Paths start with /v2; catalogs often register the endpoint with it.
    endpoint = api.get_endpoint()
    if not endpoint:
        raise LookupError("no accelerator endpoint in the catalog")
    api.endpoint_override = endpoint.rstrip("/").removesuffix("/v2")
    return api


class AcceleratorFunctionWeigher(weights.BaseHostWeigher):  # type: ignore[misc]
    """Prefer hosts whose accelerators already hold the requested functions."""

    def __init__(self, conf: cfg.ConfigOpts | None = None) -> None:
        super().__init__()
        if conf is None:
            import nova.conf

            conf = nova.conf.CONF  # Nova's global configuration, read by then
        self.conf = conf
        register_opts(conf)
        self._lock = threading.Lock()
        self._api: ks_adapter.Adapter | None = None

    def weight_multiplier(self, host_state: Any) -> float:
        return float(self.conf[GROUP].weight_multiplier)

    def weigh_objects(self, weighed_obj_list: Sequence[Any], weight_properties: Any) -> list[float]:
        """One look-up for all the hosts of a request; any failure weighs them all 0."""
        try:
            wanted, holders = self._holders(weight_properties)
        except Exception as error:
            LOG.warning("Acceleron weigher: every host weighs 0 for this request: %s: %s",
                        type(error).__name__, error)  # fmt: skip
            return [0.0] * len(weighed_obj_list)
        return [self._weight(item.obj, wanted, holders) for item in weighed_obj_list]

    def _weigh_object(self, host_state: Any, weight_properties: Any) -> float:
        weight: float = self.weigh_objects([_Weighed(host_state)], weight_properties)[0]
        return weight

    @staticmethod
    def _weight(host_state: Any, wanted: frozenset[str], holders: Mapping[str, set[str]]) -> float:
        name = getattr(host_state, "nodename", None) or host_state.host
        return host_weight({f for f in wanted if name in holders.get(f, ())}, wanted)

    def _holders(self, spec: Any) -> tuple[frozenset[str], dict[str, set[str]]]:
        """(the functions wanted, the hosts holding each)."""
        extra_specs: Mapping[str, str] = spec.flavor.extra_specs or {}
        profile = extra_specs.get("accel:device_profile")
        if profile:
            api = self._client()
            groups = self._profile_groups(api, profile)
        else:  # spec 001's inline extra specs (function1:..., function_name1:...)
            groups = [dict(g) for g in groups_from_flavor(extra_specs).groups]
            if not any(key.startswith("accel:") for group in groups for key in group):
                return frozenset(), {}
            api = self._client()
        wanted = functions.union(functions.wanted(api, groups).values())
        holders = {}
        for function in wanted:
            response = api.get("/v2/deployables", params={"function_uuid": function},
                               microversion=MICROVERSION)  # fmt: skip
            holders[function] = {d["hostname"] for d in response.json()["deployables"]}
        return wanted, holders

    @staticmethod
    def _profile_groups(api: ks_adapter.Adapter, name: str) -> list[dict[str, str]]:
        response = api.get("/v2/device_profiles", params={"name": name})
        found = response.json()["device_profiles"]
        if len(found) != 1:
            raise LookupError(f"device profile {name!r}: {len(found)} found, 1 expected")
        groups: list[dict[str, str]] = found[0]["groups"]
        return groups

    def _client(self) -> ks_adapter.Adapter:
        with self._lock:
            if self._api is None:
                self._api = load_adapter(self.conf)
            return self._api


class _Weighed:
    """What ``weigh_objects`` is given for one host (Nova's WeighedHost's shape)."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj
