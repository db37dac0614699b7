"""Intel QuickAssist (QAT) from sysfs (docs/design/hardware.md §5).

Each PF (every id of §1.2, from DH895xCC to 402xx) is one device with one
``vf_pool`` deployable holding its VFs as PCI attach handles. The pool is there
with 0 handles before VFs are enabled, so the tree keeps its shape when they
appear. Gen4+ devices (``qat/`` directory) add their ``cfg_services`` as an
attribute and a trait such as ``CUSTOM_QAT_SYM_ASYM``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from oslo_config import cfg

from acceleron.drivers.health import EventHold, pci_health, worst
from acceleron.drivers.sysfs import (
    INTEL_QAT,
    CleanedByReset,
    PciFunction,
    Sysfs,
    classify,
    make_device,
    model_name,
    pci_handle,
    scan,
    trait_part,
    virtual_functions,
)
from acceleron.vocabulary import UNHEALTHY, Deployable, Device, Health

MODELS = {
    "0435": "DH895XCC",
    "37c8": "C62X",
    "19e2": "C3XXX",
    "18ee": "200XX",
    "6f54": "D15XX",
    "18a0": "C4XXX",
    "4940": "4XXX",
    "4942": "401XX",
    "4944": "402XX",
}


class IntelQatDriver(CleanedByReset):
    """Intel QAT PFs with their VF pools."""

    name = "intel_qat"

    def __init__(self, conf: cfg.ConfigOpts, root: Path) -> None:
        self.conf = conf
        self.sysfs = Sysfs(root)
        self.events = EventHold(conf.agent.health_event_hold)

    def discover(self) -> list[Device]:
        return [self._device(fn) for fn in scan(self.sysfs) if classify(fn) == INTEL_QAT]

    def _device(self, pf: PciFunction) -> Device:
        services = self.sysfs.read(pf.path / "qat/cfg_services")
        attributes: dict[str, Any] = {"sriov_totalvfs": pf.sriov_totalvfs}
        if self.sysfs.listdir(pf.path / "qat"):
            attributes["cfg_services"] = services
            attributes["state"] = self.sysfs.read(pf.path / "qat/state")
        handles = tuple(pci_handle(vf.address) for vf in virtual_functions(self.sysfs, pf))
        pool = Deployable(
            key="vf_pool",
            kind="vf_pool",
            num_accelerators=len(handles),
            traits=(f"CUSTOM_QAT_{_services_trait(services)}",) if services else (),
            attributes=attributes,
            attach_handles=handles,
        )
        return make_device(
            pf,
            type="QAT",
            driver=self.name,
            model=model_name(MODELS, pf.device),
            deployables=(pool,),
        )

    def health(self, device: Device) -> Health:
        """PCI and AER, then the device state (``qat/state``, 4xxx and later: ``down``
        means its firmware is stopped) and the firmware heartbeat the kernel checks
        (debugfs ``qat_<name>_<BDF>/heartbeat/status``: 0 alive, -1 unresponsive; root
        only, skipped when unreadable)."""
        address = device.pci_address
        found = [pci_health(self.sysfs, device, self.events)]
        state = self.sysfs.read(self.sysfs.path("sys/bus/pci/devices", address, "qat/state"))
        if state == "down":
            found.append(Health(UNHEALTHY, f"QAT {address} is down (firmware stopped)"))
        for debug in self.sysfs.children(self.sysfs.path("sys/kernel/debug"), "qat_"):
            if not debug.name.endswith(f"_{address}"):
                continue
            status = self.sysfs.read(debug / "heartbeat/status")
            if status is not None and status.strip() not in ("0", ""):
                found.append(Health(UNHEALTHY, f"QAT {address} firmware heartbeat failed"))
        return worst(found)


def _services_trait(services: str) -> str:
    """``sym;asym`` -> ``SYM_ASYM``; ``dc`` -> ``DC``."""
    return "_".join(trait_part(s) for s in services.split(";") if s.strip())
