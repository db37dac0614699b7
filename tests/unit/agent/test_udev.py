"""udev events: optional, said once when unavailable, and each event asks for a scan."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from acceleron.agent.udev import UdevWatcher

pyudev = pytest.importorskip("pyudev")


def test_without_pyudev_the_agent_says_so_and_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="acceleron.agent")
    monkeypatch.setitem(sys.modules, "pyudev", None)  # import pyudev raises ImportError
    watcher = UdevWatcher(lambda: None)
    assert watcher.start() is False
    assert caplog.messages == [
        "pyudev is not installed: no rescan on udev events, periodic scans only"
    ]
    watcher.stop()  # harmless


def test_without_libudev_the_agent_says_so_and_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def no_libudev() -> None:
        raise ImportError("No library named udev")  # what pyudev raises then

    monkeypatch.setattr(pyudev, "Context", no_libudev)
    assert UdevWatcher(lambda: None).start() is False
    assert caplog.messages == [
        "udev events unavailable (No library named udev): periodic scans only"
    ]


def test_events_of_real_devices_ask_for_a_scan() -> None:
    pci = Path("/sys/bus/pci/devices")
    paths = sorted(pci.iterdir())[:2] if pci.is_dir() else []
    if not paths:
        pytest.skip("no PCI devices in this machine's sysfs")
    events: list[int] = []
    watcher = UdevWatcher(lambda: events.append(1))
    if not watcher.start():
        pytest.skip("no udev netlink socket here")
    try:
        context = pyudev.Context()
        for path in paths:
            watcher._handle(pyudev.Devices.from_path(context, str(path.resolve())))
    finally:
        watcher.stop()
    assert len(events) == len(paths)


def test_a_pci_error_recovery_event_is_a_fault() -> None:
    events: list[str] = []
    watcher = UdevWatcher(lambda: events.append("scan"), lambda: events.append("fault"))

    class Event:
        action, subsystem, sys_name = "change", "pci", "0000:3b:00.0"

        def __init__(self, **properties: str) -> None:
            self.properties = properties

    watcher._handle(Event(ERROR_EVENT="BEGIN_RECOVERY", DEVICE_ONLINE="0"))
    watcher._handle(Event(DRIVER="nvidia"))
    assert events == ["fault", "scan"]
