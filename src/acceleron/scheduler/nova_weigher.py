"""Spec 001's weigher as a Nova host weigher (import it only where Nova is installed).

Enable it in nova.conf of the scheduler::

    [filter_scheduler]
    weight_classes = nova.scheduler.weights.all_weighers,
        acceleron.scheduler.nova_weigher.AcceleratorFunctionWeigher

A host weighs 1.0 (times ``[filter_scheduler] accelerator_function_weight_multiplier``
if set, else 1.0) when one of its accelerators already holds a function the flavor asks
for, else 0.0: AFaaS requests land where no programming is needed. The functions come
from the flavor's device profile (``accel:device_profile``, read through Nova's own
accelerator client, ``[cyborg]`` in nova.conf) or from its inline extra specs; which
host holds which function comes from Acceleron's inventory
(``GET /v2/deployables?hostname=&function_uuid=``), remembered for a minute.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

try:
    from nova import context as nova_context
    from nova.accelerator import cyborg
    from nova.scheduler import weights
except ImportError as error:  # pragma: no cover - depends on the host
    raise ImportError(
        "acceleron.scheduler.nova_weigher is a Nova scheduler weigher: it needs Nova "
        "installed beside it (the nova-scheduler's Python environment)."
    ) from error

from acceleron.scheduler.query import groups_from_flavor
from acceleron.scheduler.weigher import host_weight, wanted_functions

CACHE_SECONDS = 60.0


class AcceleratorFunctionWeigher(weights.BaseHostWeigher):  # type: ignore[misc]
    """Prefer hosts whose accelerators already hold the requested function."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._held: dict[tuple[str, str], tuple[float, bool]] = {}

    def weight_multiplier(self, host_state: Any) -> float:
        from nova.conf import CONF

        value = getattr(CONF.filter_scheduler, "accelerator_function_weight_multiplier", 1.0)
        return float(value)

    def _weigh_object(self, host_state: Any, weight_properties: Any) -> float:
        functions = self._functions(weight_properties)
        if not functions:
            return 0.0
        held = {f for f in functions if self._holds(host_state.host, f)}
        return host_weight(held, functions)

    def _functions(self, spec: Any) -> frozenset[str]:
        extra_specs: Mapping[str, str] = spec.flavor.extra_specs or {}
        profile = extra_specs.get("accel:device_profile")
        if profile:
            client = cyborg.get_client(nova_context.get_admin_context())
            groups = client.get_device_profile_groups(profile)
        else:
            groups = groups_from_flavor(extra_specs).groups
        return _union(wanted_functions(groups).values())

    def _holds(self, host: str, function: str) -> bool:
        key, now = (host, function), time.monotonic()
        with self._lock:
            cached = self._held.get(key)
        if cached is not None and now - cached[0] < CACHE_SECONDS:
            return cached[1]
        client = cyborg.get_client(nova_context.get_admin_context())
        response = client._client.get(  # Nova's keystoneauth adapter for the accelerator API
            "/deployables", params={"hostname": host, "function_uuid": function}
        )
        held = bool(response.json().get("deployables")) if response else False
        with self._lock:
            self._held[key] = (now, held)
        return held


def _union(sets: Iterable[frozenset[str]]) -> frozenset[str]:
    found: frozenset[str] = frozenset()
    for item in sets:
        found |= item
    return found
