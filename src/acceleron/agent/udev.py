"""Rescan when udev says a PCI or mdev device changed (added, removed, bound, unbound).

Optional: it needs pyudev (``pip install acceleron[udev]``) and libudev, and a
netlink socket, which many containers do not get. Without them the agent says
so once and relies on its periodic scan. Events only trigger a scan (the
schedule debounces them); what changed is always read from sysfs again. A PCI error
recovery event (the kernel's ``ERROR_EVENT`` uevent, sent while AER recovers a device)
is a health fault: it calls ``on_fault`` instead, which scans at once.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Any

LOG = logging.getLogger(__name__)
SUBSYSTEMS = ("pci", "mdev")


def _import_pyudev() -> Any:
    return importlib.import_module("pyudev")


class UdevWatcher:
    """Calls ``on_event`` from a background thread for every PCI or mdev uevent."""

    def __init__(
        self, on_event: Callable[[], None], on_fault: Callable[[], None] | None = None
    ) -> None:
        self._on_event = on_event
        self._on_fault = on_fault or on_event
        self._observer: Any = None

    def start(self) -> bool:
        """Watch; False (logged once) when udev cannot be used here."""
        try:
            pyudev = _import_pyudev()
        except ImportError:
            LOG.info("pyudev is not installed: no rescan on udev events, periodic scans only")
            return False
        try:
            monitor = pyudev.Monitor.from_netlink(pyudev.Context())
            for subsystem in SUBSYSTEMS:
                monitor.filter_by(subsystem)
            observer = pyudev.MonitorObserver(monitor, callback=self._handle, name="acceleron-udev")
            observer.daemon = True
            observer.start()
        except Exception as error:  # libudev not loadable (ImportError, OSError), no netlink
            LOG.warning("udev events unavailable (%s): periodic scans only", error)
            return False
        self._observer = observer
        LOG.debug("Watching udev events of %s", ", ".join(SUBSYSTEMS))
        return True

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer = None

    def _handle(self, device: Any) -> None:
        LOG.debug("udev: %s %s %s", device.action, device.subsystem, device.sys_name)
        properties = getattr(device, "properties", None)
        error = properties.get("ERROR_EVENT") if properties is not None else None
        if error:
            LOG.warning("udev: PCI error recovery on %s: %s", device.sys_name, error)
            self._on_fault()
        else:
            self._on_event()
