"""Xilinx (AMD) Alveo cards: vendor 10ee, class 0x1200xx (docs/design/hardware.md §4).

An Alveo card shows two PFs in one slot: the management PF (``.0``, kernel driver
``xclmgmt``) and the user PF (``.1``, ``xocl``). They are merged into one device
keyed by the management PF with one ``region0`` deployable. Its attach handle is
the user PF only: the management PF stays on the host, where ``xbmgmt`` programs
the card through it (XRT's split for clouds). While the user PF is gone (a reset,
a removal) the region has no handle. XRT's optional sysfs attributes
give the region type (``interface_uuids``) and what is loaded (``xclbinuuid``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from oslo_config import cfg

from acceleron.drivers import command
from acceleron.drivers.base import CleanedByProgramming
from acceleron.drivers.errors import TargetNotFound
from acceleron.drivers.health import EventHold, hex_value, pci_health, worst
from acceleron.drivers.sysfs import (
    XILINX_FPGA,
    PciFunction,
    Sysfs,
    classify,
    make_device,
    model_name,
    normalize_uuid,
    pci_handle,
    scan,
    still_present,
)
from acceleron.vocabulary import DEGRADED, UNHEALTHY, Deployable, Device, Health, walk

LOG = logging.getLogger(__name__)

# Management PF id -> board; the user PF is the next id (5000/5001 and so on).
MODELS = {"5000": "U200", "5004": "U250", "500c": "U280", "5020": "U50"}
# Product -> the memory family kernels use first: DDR4 on U200/U250; HBM2 on U280 (which
# also has DDR4) and U50.
MEMORY = {"5000": "DDR", "5004": "DDR", "500c": "HBM", "5020": "HBM"}
USER_IDS = {"5001": "5000", "5005": "5004", "500d": "500c", "5021": "5020"}


def is_management(fn: PciFunction) -> bool:
    """xclmgmt is the management driver, xocl the user one; unbound, trust the ids,
    then the function number (.0 is management)."""
    if fn.driver in ("xclmgmt", "xocl"):
        return fn.driver == "xclmgmt"
    if fn.device in MODELS or fn.device in USER_IDS:
        return fn.device in MODELS
    return fn.bdf.function == 0


class XilinxFpgaDriver(CleanedByProgramming):
    """Xilinx Alveo FPGAs from sysfs; programs an xclbin with ``xbmgmt``."""

    name = "xilinx_fpga"

    def __init__(self, conf: cfg.ConfigOpts, root: Path) -> None:
        self.conf = conf
        self.sysfs = Sysfs(root)
        self.events = EventHold(conf.agent.health_event_hold)

    def discover(self) -> list[Device]:
        slots: dict[str, list[PciFunction]] = {}
        for fn in scan(self.sysfs):
            if classify(fn) == XILINX_FPGA:
                slots.setdefault(fn.bdf.slot_address, []).append(fn)
        devices = (self._device(functions) for _, functions in sorted(slots.items()))
        return [device for device in devices if device is not None]

    def _device(self, functions: Sequence[PciFunction]) -> Device | None:
        """The card, keyed by its management PF (else its user PF); None when that PF
        vanished while being read. A user PF that is gone leaves no handle."""
        mgmt = next((fn for fn in functions if is_management(fn)), None)
        user = next((fn for fn in functions if not is_management(fn)), None)
        main = mgmt or user
        assert main is not None  # a slot has at least one function
        region = self._region(mgmt, user)
        if not still_present(self.sysfs, main):
            return None
        if user is not None and user is not main and not still_present(self.sysfs, user):
            user, region = None, self._region(mgmt, None)
        if user is None:
            LOG.warning("Xilinx FPGA %s shows no user PF: no accelerator to offer", main.address)
        return make_device(
            main,
            type="FPGA",
            driver=self.name,
            model=model_name(MODELS, USER_IDS.get(main.device, main.device)),
            vendor_board_info=self._board(mgmt, user),
            deployables=(region,),
        )

    def _region(self, mgmt: PciFunction | None, user: PciFunction | None) -> Deployable:
        """region0: the user PF is its handle (none without it); the management PF stays."""
        xclbin = normalize_uuid(self.sysfs.read(user.path / "xclbinuuid")) if user else None
        if xclbin == "0" * 32:  # XRT writes zeros when nothing is loaded
            xclbin = None
        handles = (pci_handle(user.address),) if user else ()
        main = mgmt or user
        product = USER_IDS.get(main.device, main.device) if main else ""
        return Deployable(
            key="region0",
            kind="region",
            num_accelerators=len(handles),
            programmable=True,
            region_type=self._first_uuid(mgmt, user, "interface_uuids"),
            bitstream_id=xclbin,
            function_uuids=(xclbin,) if xclbin else (),
            memory_type=MEMORY.get(product),
            attributes={
                "management_address": mgmt.address if mgmt else None,
                "user_address": user.address if user else None,
                "logic_uuid": self._first_uuid(mgmt, user, "logic_uuids"),
            },
            attach_handles=handles,
        )

    def _first_uuid(
        self, mgmt: PciFunction | None, user: PciFunction | None, name: str
    ) -> str | None:
        """First uuid of an XRT attribute (one per line), management PF first."""
        for fn in (mgmt, user):
            text = self.sysfs.read(fn.path / name) if fn else None
            if text:
                return normalize_uuid(text.split()[0])
        return None

    def _board(self, mgmt: PciFunction | None, user: PciFunction | None) -> dict[str, Any]:
        vbnv = self.sysfs.read(mgmt.path / "VBNV") if mgmt else None
        return {
            "management_address": mgmt.address if mgmt else None,
            "user_address": user.address if user else None,
            "vbnv": vbnv,
        }

    def health(self, device: Device) -> Health:
        """PCI and AER, then what XRT's user-function driver (xocl) shows in sysfs:
        ``dev_offline`` (1 while the card is being reset or has gone offline) and ``ready``
        (0 until the shell is up)."""
        found = [pci_health(self.sysfs, device, self.events)]
        for handle in (h for dep in walk(device.deployables) for h in dep.attach_handles):
            path = self.sysfs.path("sys/bus/pci/devices", handle.address)
            if self.sysfs.read_int(path / "dev_offline") == 1:
                found.append(Health(UNHEALTHY, f"Xilinx {handle.address} is offline (xocl)"))
            if hex_value(self.sysfs.read(path / "ready")) == 0:
                found.append(Health(DEGRADED, f"Xilinx {handle.address} is not ready (xocl)"))
        return worst(found)

    def program(self, device: Device, deployable_key: str, bitstream: Path) -> None:
        """Run ``[xilinx_fpga] program_command`` (xbmgmt) against the management PF."""
        current = next((d for d in self.discover() if d.pci_address == device.pci_address), None)
        if current is None or deployable_key != "region0":
            raise TargetNotFound(
                f"Xilinx FPGA {device.pci_address} has no region {deployable_key!r} on this host"
            )
        user = current.deployables[0].attributes["user_address"] or ""
        opts = self.conf.xilinx_fpga
        values = {**command.pci_values(device.pci_address, bitstream), "user_address": user}
        command.run(opts.program_command, values, opts.program_timeout)
