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
from oslo_config import cfg

from acceleron.scheduler import functions


class AcceleratorFunctionWeigher(weights.BaseHostWeigher):  # type: ignore[misc]
    """Prefer hosts whose accelerators already hold the requested functions."""

    def __init__(self, conf: cfg.ConfigOpts | None = None) -> None:
        super().__init__()
        if conf is None:
            import nova.conf

            conf = nova.conf.CONF  # Nova's global configuration, read by then
        self.conf = conf
        functions.register_opts(conf)
        self._lock = threading.Lock()
        self._api: ks_adapter.Adapter | None = None

    def weight_multiplier(self, host_state: Any) -> float:
        return float(self.conf[functions.GROUP].weight_multiplier)

    def weigh_objects(self, weighed_obj_list: Sequence[Any], weight_properties: Any) -> list[float]:
        """One look-up for all the hosts of a request; any failure weighs them all 0."""
        flavor = getattr(weight_properties, "flavor", None)
        extra_specs: Mapping[str, str] = getattr(flavor, "extra_specs", None) or {}
        names = [_name(item.obj) for item in weighed_obj_list]
        return functions.weigh_hosts(self._client, extra_specs, names, forget=self._forget)

    def _weigh_object(self, host_state: Any, weight_properties: Any) -> float:
        weight: float = self.weigh_objects([_Weighed(host_state)], weight_properties)[0]
        return weight

    def _client(self) -> ks_adapter.Adapter:
        with self._lock:
            if self._api is None:
                self._api = functions.load_adapter(self.conf)
            return self._api

    def _forget(self) -> None:
        """The API was unreachable: the next request reads the catalog again."""
        with self._lock:
            self._api = None


class _Weighed:
    """What ``weigh_objects`` is given for one host (Nova's WeighedHost's shape)."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj


def _name(host_state: Any) -> str:
    """The host's name for Acceleron: its compute node's (the name Placement knows)."""
    name: str = getattr(host_state, "nodename", None) or host_state.host
    return name
