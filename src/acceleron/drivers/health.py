"""Device health from what the hardware already exposes: the checks drivers share.

A health check never raises for a fault: a file it cannot read is no evidence, a
device that is gone is itself the fault. Two kinds of signal:

* **States** the hardware holds (a QAT device ``down``, an FPGA error register not
  zero, a GPU with remapped rows pending): read at every scan; the device is healthy
  again as soon as the state clears.
* **Events** (a PCIe AER counter going up, an NVIDIA XID): the hardware counts or
  sends them and never takes them back, so :class:`EventHold` keeps the device in the
  state the event calls for ``hold`` seconds after the last one, then lets it go
  (``[agent] health_event_hold``). A counter already above zero when the agent starts
  counts as one event then: nobody knows how old it is, so it is held once.

Kernel interfaces read here (Documentation/ABI/testing in the kernel tree):
``aer_dev_fatal`` and ``aer_dev_nonfatal`` (sysfs-bus-pci-devices-aer_stats: one
``<name> <count>`` line per error, then ``TOTAL_ERR_FATAL`` / ``TOTAL_ERR_NONFATAL``).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from acceleron.drivers.sysfs import PCI_DEVICES, Sysfs, normalize_hex_id, read_function
from acceleron.vocabulary import DEGRADED, HEALTHY, UNHEALTHY, Device, Health, worst_verdict

Clock = Callable[[], float]
DEFAULT_HOLD = 600.0


def worst(found: Iterable[Health]) -> Health:
    """One verdict from several checks: the worst state, with the reasons of every
    check in that state; the per-deployable and per-handle verdicts merged the same way."""
    found = list(found)
    return dataclasses.replace(
        worst_verdict(found),
        deployables=_merged(h.deployables for h in found),
        handles=_merged(h.handles for h in found),
    )


def _merged(scopes: Iterable[Mapping[str, Health]]) -> dict[str, Health]:
    """Several checks' verdicts of one scope (by deployable key, or by handle address),
    merged by key; those with nothing wrong left out."""
    parts: dict[str, list[Health]] = {}
    for scope in scopes:
        for key, part in scope.items():
            parts.setdefault(key, []).append(part)
    merged = {key: worst(items) for key, items in parts.items()}
    return {k: v for k, v in merged.items() if v.state != HEALTHY or v.handles}


class EventHold:
    """Events seen per (subject, signal): the state they call for lasts ``hold`` seconds
    after the last one. Thread-safe (NVML's event thread records XIDs)."""

    def __init__(self, hold: float = DEFAULT_HOLD, clock: Clock = time.monotonic) -> None:
        self.hold = hold
        self._clock = clock
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}
        self._events: dict[tuple[str, str], tuple[float, Health]] = {}

    def count(self, subject: str, signal: str, value: int | None, health: Health) -> None:
        """A counter read now; a rise since the last read (or a first read above 0) is an
        event calling for ``health``."""
        if value is None:
            return
        with self._lock:
            before = self._counts.get((subject, signal), 0)
            self._counts[(subject, signal)] = value
        if value > before:
            self.event(subject, signal, health)

    def event(self, subject: str, signal: str, health: Health) -> None:
        with self._lock:
            self._events[(subject, signal)] = (self._clock(), health)

    def active(self, subject: str) -> list[Health]:
        """The held verdicts of ``subject``, the expired ones dropped."""
        now = self._clock()
        with self._lock:
            live = []
            for key, (at, health) in list(self._events.items()):
                if key[0] != subject:
                    continue
                if now - at >= self.hold:
                    del self._events[key]
                else:
                    live.append(health)
            return live


def counter_total(text: str | None, total_name: str) -> int | None:
    """The ``TOTAL_...`` line of an AER statistics file; None when absent or unreadable."""
    for line in (text or "").splitlines():
        name, _, value = line.rpartition(" ")
        if name.strip() == total_name and value.strip().isdigit():
            return int(value)
    return None


def aer_health(sysfs: Sysfs, path: Path, subject: str, events: EventHold) -> list[Health]:
    """PCIe AER: a fatal uncorrectable error makes the function unhealthy, a non-fatal one
    degraded, for the hold after the counter last rose."""
    fatal = counter_total(sysfs.read(path / "aer_dev_fatal"), "TOTAL_ERR_FATAL")
    nonfatal = counter_total(sysfs.read(path / "aer_dev_nonfatal"), "TOTAL_ERR_NONFATAL")
    fatal_health = Health(UNHEALTHY, f"PCIe AER: {fatal} fatal error(s) on {subject}")
    events.count(subject, "aer_fatal", fatal, fatal_health)
    nonfatal_health = Health(DEGRADED, f"PCIe AER: {nonfatal} non-fatal error(s) on {subject}")
    events.count(subject, "aer_nonfatal", nonfatal, nonfatal_health)
    return events.active(subject)


def hex_value(text: str | None) -> int | None:
    """An error register as the kernel prints it (``0x0``, ``0x100``); None when unreadable."""
    if text is None:
        return None
    try:
        return int(text.strip(), 16)
    except ValueError:
        return None


def scoped(key: str, found: Iterable[Health], handle: str | None = None) -> Health:
    """Verdicts that belong to one deployable (or, ``handle``, to one of its attach
    handles by its address), as a device-level Health holding them."""
    part = worst(found)
    if part.state == HEALTHY:
        return Health()
    if handle is not None:
        part = Health(handles={handle: part})
    return Health(deployables={key: part})


def pci_health(sysfs: Sysfs, device: Device, events: EventHold | None = None) -> Health:
    """What every PCI device shows: gone or changed identity (unhealthy), no kernel
    driver bound (degraded), and PCIe AER errors when ``events`` is given. Reads only
    the few files it needs (a full read_function costs ten times more)."""
    path = sysfs.path(PCI_DEVICES, device.pci_address)
    vendor = normalize_hex_id(sysfs.read(path / "vendor"))
    product = normalize_hex_id(sysfs.read(path / "device"))
    driver = sysfs.link_name(path / "driver")
    if vendor is None or product is None:  # gone, or listed under another spelling
        fn = read_function(sysfs, device.pci_address)
        if fn is None:
            return Health(UNHEALTHY, f"PCI device {device.pci_address} is gone or unreadable")
        path, vendor, product, driver = fn.path, fn.vendor, fn.device, fn.driver
    if vendor != device.vendor_id or product != device.product_id:
        return Health(UNHEALTHY, f"PCI device {device.pci_address} is now {vendor}:{product}")
    found = [] if events is None else aer_health(sysfs, path, device.pci_address, events)
    if driver is None:
        found.append(Health(DEGRADED, f"no kernel driver is bound to {device.pci_address}"))
    return worst(found)
