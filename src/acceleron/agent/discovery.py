"""One scan: ask every driver, merge what they found, build the host report.

Two duties belong here rather than to the drivers:

* **One device, one driver.** Two drivers may claim the same PCI address (the
  generic ``pci`` driver's ``device_spec`` listing a card a vendor driver also
  reports). The first enabled driver wins, in ``[agent] enabled_drivers`` order,
  and the other's copy is dropped with a warning.
* **No partial report.** A report is the host's full state: whatever it leaves
  out, the service removes. If a driver raises, its devices would look gone, so
  the scan is marked incomplete and the caller sends nothing (the next scan
  tries again) rather than a report that deletes a working device.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

import acceleron
from acceleron.drivers.base import Driver
from acceleron.drivers.sysfs import shared_scan
from acceleron.report import HostReport
from acceleron.vocabulary import DEGRADED, HEALTHY, Device, Health

LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Scan:
    """What one scan found; ``failed`` names the drivers whose discover() raised."""

    devices: tuple[Device, ...]
    failed: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return not self.failed


def scan(drivers: Sequence[Driver]) -> Scan:
    """Every driver's devices, merged; a driver that raises is logged and named in failed."""
    found: list[tuple[str, Sequence[Device]]] = []
    failed: list[str] = []
    with shared_scan():  # the drivers share one read of the host's PCI functions
        for driver in drivers:
            try:
                devices = driver.discover()
            except Exception:
                LOG.exception("Driver %s failed to discover its devices", driver.name)
                failed.append(driver.name)
                continue
            found.append((driver.name, [with_health(driver, d) for d in devices]))
    return Scan(devices=merge(found), failed=tuple(failed))


def with_health(driver: Driver, device: Device) -> Device:
    """The device with its driver's health verdict; a check that raises makes it
    degraded (the check is broken, not necessarily the device), never the scan fail."""
    try:
        health = driver.health(device)
    except Exception as error:
        LOG.exception("Driver %s failed to check %s's health", driver.name, device.pci_address)
        health = Health(DEGRADED, f"health check failed: {error!r}"[:500])
    if health.state != HEALTHY:
        LOG.info("Device %s is %s: %s", device.pci_address, health.state, health.reason)
    return dataclasses.replace(device, health=health)


def merge(found: Sequence[tuple[str, Sequence[Device]]]) -> tuple[Device, ...]:
    """The devices in driver order, each PCI address once: the first driver to report it wins."""
    owners: dict[str, str] = {}
    devices: list[Device] = []
    for name, driver_devices in found:
        for device in driver_devices:
            owner = owners.get(device.pci_address)
            if owner is not None:
                LOG.warning(
                    "Device %s is reported by drivers %s and %s; keeping %s's (the first in "
                    "[agent] enabled_drivers). Make only one driver claim it.",
                    device.pci_address,
                    owner,
                    name,
                    owner,
                )
                continue
            owners[device.pci_address] = name
            devices.append(device)
    return tuple(devices)


def build_report(hostname: str, devices: Sequence[Device]) -> HostReport:
    return HostReport(
        hostname=hostname, agent_version=acceleron.__version__, devices=tuple(devices)
    )
