"""Drivers: what accelerators a host has, as plain dataclasses (see ``base``).

Drivers are entry points of the group ``acceleron.drivers`` (pyproject.toml);
``[agent] enabled_drivers`` names the ones the agent uses, and ``load_drivers``
builds them. Every driver is constructed as ``cls(conf, root)``.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

from oslo_config import cfg

from acceleron.drivers.base import Driver
from acceleron.drivers.errors import DriverConfigError

ENTRY_POINT_GROUP = "acceleron.drivers"


def available_drivers() -> dict[str, EntryPoint]:
    """Installed drivers by name."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def load_driver(name: str, conf: cfg.ConfigOpts, root: Path = Path("/")) -> Driver:
    """One driver by entry-point name; DriverConfigError when there is none."""
    found = available_drivers()
    if name not in found:
        known = ", ".join(sorted(found)) or "none installed"
        raise DriverConfigError(
            f"unknown driver {name!r} in [agent] enabled_drivers; available: {known}"
        )
    driver = found[name].load()(conf, root)
    if not isinstance(driver, Driver):
        raise DriverConfigError(f"entry point {name!r} does not give a driver: {driver!r}")
    return driver


def load_drivers(conf: cfg.ConfigOpts, root: Path = Path("/")) -> list[Driver]:
    """The drivers ``[agent] enabled_drivers`` names, in that order, each once."""
    names = list(dict.fromkeys(n.strip() for n in conf.agent.enabled_drivers if n.strip()))
    return [load_driver(name, conf, root) for name in names]
