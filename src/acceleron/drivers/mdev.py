"""Making and removing vGPUs through sysfs (docs/design/hardware.md §2.1 and §2.2).

Two of the three vGPU forms need a write before a workload can use a handle:

* an **mdev** (types on the PF or on its VFs): the handle's uuid is written to
  ``<parent>/mdev_supported_types/<type>/create``, and ``1`` to
  ``/sys/bus/mdev/devices/<uuid>/remove`` removes it;
* a **VF of the vendor VFIO form**: the type id is written to the VF's
  ``nvidia/current_vgpu_type``, and ``0`` frees it.

Both are idempotent: creating what exists, or removing what is gone, does nothing.
"""

from __future__ import annotations

import logging

from acceleron.drivers.errors import TargetNotFound
from acceleron.drivers.sysfs import Sysfs, format_bdf
from acceleron.vocabulary import AttachHandle

LOG = logging.getLogger(__name__)


def needs_preparing(handle_type: str, info: dict[str, str]) -> bool:
    """Whether a handle must be made on the host before it is attached."""
    return handle_type == "MDEV" or bool(info.get("vgpu_type"))


def parent_address(info: dict[str, str]) -> str:
    """The PCI address an attach_handle_info names (the mdev's parent, or the VF)."""
    try:
        return format_bdf(*(int(info[k], 16) for k in ("domain", "bus", "device", "function")))
    except (KeyError, ValueError) as error:
        raise TargetNotFound(f"the handle names no PCI address: {info}") from error


def create(sysfs: Sysfs, handle: AttachHandle) -> None:
    """Make the vGPU behind ``handle`` on this host."""
    parent = parent_address(dict(handle.info))
    if handle.type == "MDEV":
        if sysfs.path("sys/bus/mdev/devices", handle.address).exists():
            return
        mdev_type = handle.info.get("asked_type") or ""
        target = sysfs.path("sys/bus/pci/devices", parent, "mdev_supported_types", mdev_type)
        sysfs.write(target / "create", handle.address, f"create mdev {handle.address}")
        LOG.info("Created mdev %s of type %s on %s", handle.address, mdev_type, parent)
        return
    type_id = handle.info.get("vgpu_type") or ""
    current = sysfs.path("sys/bus/pci/devices", parent, "nvidia/current_vgpu_type")
    if sysfs.read(current) == type_id:
        return
    sysfs.write(current, type_id, f"give VF {parent} vGPU type {type_id}")
    LOG.info("VF %s now has vGPU type %s", parent, type_id)


def remove(sysfs: Sysfs, handle: AttachHandle) -> None:
    """Remove the vGPU behind ``handle`` (nothing to do when it is gone already)."""
    if handle.type == "MDEV":
        target = sysfs.path("sys/bus/mdev/devices", handle.address, "remove")
        if not target.parent.exists():
            return
        sysfs.write(target, "1", f"remove mdev {handle.address}")
        LOG.info("Removed mdev %s", handle.address)
        return
    parent = parent_address(dict(handle.info))
    current = sysfs.path("sys/bus/pci/devices", parent, "nvidia/current_vgpu_type")
    if sysfs.read(current) in (None, "0"):
        return
    sysfs.write(current, "0", f"free VF {parent}")
    LOG.info("VF %s freed of its vGPU type", parent)
