"""os-acc: what a compute node calls to attach accelerators to instances (spec 000).

Module-level calls use one ``Connector`` built from Acceleron's configuration
(``acceleron.conf``: ``[DEFAULT] host`` and the ``[agent]`` connection options),
or the one given to ``configure()``::

    import os_acc
    from concurrent.futures import ThreadPoolExecutor

    os_acc.initialize()  # once, at start of day
    with ThreadPoolExecutor(max_workers=1) as executor:
        future = executor.submit(os_acc.plug, instance_info, selected_rp, extra_specs)
        attachments = future.result()  # [{"pci_id": "0000:5e:00.1", ...}, ...]
    os_acc.unplug(instance_info)  # -> how many were released

``operations.rule_for(name)`` says whether an instance operation plugs, unplugs,
checks or records accelerators, leaves them alone, or is refused; ``before(name, ...)``
and ``after(name, ...)`` do what it says.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from os_acc import operations
from os_acc.connector import (
    AgentUnavailable,
    Connector,
    CyborgAgentUnavailable,
    NotReady,
    OsAccError,
    PlugFailed,
)
from os_acc.operations import UnsupportedOperation

__all__ = [
    "AgentUnavailable",
    "Connector",
    "CyborgAgentUnavailable",
    "NotReady",
    "OsAccError",
    "PlugFailed",
    "UnsupportedOperation",
    "after",
    "before",
    "check",
    "configure",
    "initialize",
    "operations",
    "plug",
    "record",
    "unplug",
]

_lock = threading.Lock()
_connector: Connector | None = None


def configure(connector: Connector | None = None, config_files: list[str] | None = None) -> None:
    """Use ``connector``, or build one from the configuration files (None: the usual
    search path for acceleron.conf)."""
    global _connector
    if connector is None:
        from acceleron import conf as confmod

        connector = Connector.from_conf(confmod.load([], config_files=config_files))
    with _lock:
        _connector = connector


def _default() -> Connector:
    if _connector is None:
        configure()
    assert _connector is not None
    return _connector


def initialize() -> None:
    """Wait for this host's agent to be ready; AgentUnavailable when it is not."""
    _default().initialize()


def plug(
    instance_info: Mapping[str, Any],
    selected_rp: Mapping[str, Any] | None,
    flavor_extra_specs: Mapping[str, str],
) -> list[dict[str, Any]]:
    """Attach the flavor's accelerators; one ``{"pci_id": <bdf>, ...}`` per accelerator.
    ``selected_rp`` None: no scheduler chose, this host's accelerators are claimed."""
    return _default().plug(instance_info, selected_rp, flavor_extra_specs)


def unplug(instance_info: Mapping[str, Any]) -> int:
    """Release the instance's accelerators; how many were released."""
    return _default().unplug(instance_info)


def check(instance_info: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The instance's accelerators, once each is bound here, present and healthy;
    NotReady naming those that are not."""
    return _default().check(instance_info)


def record(instance_info: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The state of each of the instance's accelerators now (for a crash dump)."""
    return _default().record(instance_info)


def before(
    operation: str,
    instance_info: Mapping[str, Any],
    selected_rp: Mapping[str, Any] | None = None,
    flavor_extra_specs: Mapping[str, str] | None = None,
) -> Any:
    """What the rule of an instance operation asks before it (plug, unplug, check...)."""
    return _default().before(operation, instance_info, selected_rp, flavor_extra_specs)


def after(
    operation: str,
    instance_info: Mapping[str, Any],
    selected_rp: Mapping[str, Any] | None = None,
    flavor_extra_specs: Mapping[str, str] | None = None,
) -> Any:
    """What the rule of an instance operation asks once it is done."""
    return _default().after(operation, instance_info, selected_rp, flavor_extra_specs)
