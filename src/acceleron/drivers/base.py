"""The driver contract: what a driver reports and what it can be asked to do.

Drivers return the frozen dataclasses of ``acceleron.vocabulary`` (Device,
Deployable, AttachHandle, Health), a tree per physical card.

They store nothing and know no HTTP. Everything a driver reads comes from under
its ``root`` directory (``/`` on a real host, a fake sysfs tree in tests).
``spec004_view()`` renders the same data as spec 004's discover() dictionary.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from acceleron.vocabulary import AttachHandle, Device, Health, walk


@runtime_checkable
class Driver(Protocol):
    """What every driver does. Constructed as ``cls(conf, root)``."""

    name: str

    def discover(self) -> Sequence[Device]:
        """Every device this driver manages on the host. Never raises for one bad device:
        a device that vanishes or cannot be read mid-scan is left out (and logged)."""
        ...

    def health(self, device: Device) -> Health:
        """The device's health now, from what the hardware exposes. Never raises for a
        fault: a device it cannot read is itself the fault."""
        ...


@runtime_checkable
class Watching(Protocol):
    """A driver that hears of faults as they happen (NVML's XID events): it records them
    for health() and calls ``notify`` so that the agent scans at once."""

    def start_watch(self, notify: Callable[[], None]) -> None: ...

    def stop_watch(self) -> None: ...


@runtime_checkable
class Programmable(Protocol):
    """A driver whose regions can be loaded with a bitstream."""

    def program(self, device: Device, deployable_key: str, bitstream: Path) -> None:
        """Load ``bitstream`` into the region ``deployable_key`` of ``device``."""
        ...


@runtime_checkable
class Mediated(Protocol):
    """A driver that makes vGPUs on request: an mdev, or a VF given a vGPU type. The
    handle is one the driver reported; both calls are idempotent."""

    def create_mdev(self, device: Device, handle: AttachHandle) -> None: ...

    def remove_mdev(self, device: Device, handle: AttachHandle) -> None: ...


@runtime_checkable
class Partitionable(Protocol):
    """A driver that carves GPUs on demand (a ``mig_gpu`` deployable): the MIG instance
    (GPU and compute instance) a slot handle asks for is made where the GPU allows, and
    destroyed at release. Both are idempotent; neither touches another slot's instance."""

    def make_mig_instance(
        self, device: Device, handle: AttachHandle, profile: str
    ) -> Mapping[str, str]:
        """Make a ``profile`` instance for the slot ``handle``; what the workload is
        given of it (its uuid, profile and start, as the slot's info names them).
        NoMigPlacement when the GPU has no position for it."""
        ...

    def destroy_mig_instance(self, device: Device, handle: AttachHandle) -> None: ...


@runtime_checkable
class Cleanable(Protocol):
    """A driver that cleans what a tenant gave back before the next one gets it.

    ``method``: ``reset`` (a function-level reset of each PCI handle) or ``scrub`` (a
    GPU's or slice's memory cleared; an FPGA region loaded with ``image``, its blank
    image, when one is given). ``handles``: the addresses of the attach handles given
    back (a whole device's or region's, all of them). CleaningUnsupported when the
    hardware allows no such cleaning here; any other DriverError when it failed."""

    def clean(
        self,
        device: Device,
        deployable_key: str,
        handles: Sequence[str],
        method: str,
        image: Path | None,
    ) -> None: ...


def scrub_by_programming(
    driver: Programmable, device: Device, key: str, method: str, image: Path | None
) -> None:
    """An FPGA driver's cleaning: ``scrub`` loads the region's blank ``image``; without
    one, or for another method, CleaningUnsupported saying what is missing."""
    from acceleron.drivers.errors import CleaningUnsupported

    if method != "scrub":
        raise CleaningUnsupported(
            f"{device.pci_address} {key} can be scrubbed (loaded with its blank image), not "
            f"{method}: choose scrub, or command ([agent] cleaning_command)"
        )
    if image is None:
        raise CleaningUnsupported(
            f"no blank image for {device.pci_address} {key}: upload a public bitstream named "
            f"as [cleaning] blank_bitstream_name says, built for its region type"
        )
    driver.program(device, key, image)


class CleanedByProgramming:
    """An FPGA driver's cleaning (Cleanable): a region scrubbed with its blank image
    (``scrub_by_programming``)."""

    def clean(
        self: Programmable,
        device: Device,
        deployable_key: str,
        handles: Sequence[str],
        method: str,
        image: Path | None,
    ) -> None:
        scrub_by_programming(self, device, deployable_key, method, image)


def spec004_view(devices: Sequence[Device]) -> dict[str, dict[str, Any]]:
    """Spec 004's discover() dictionary: keyed by PCI BDF, with type/vendor/product
    and, per region, region-type-uuid, bitstream-id and function-uuid."""
    view: dict[str, dict[str, Any]] = {}
    for device in devices:
        regions = [
            {
                "region-type-uuid": dep.region_type,
                "bitstream-id": dep.bitstream_id,
                "function-uuid": dep.function_uuids[0] if dep.function_uuids else None,
            }
            for dep in walk(device.deployables)
            if dep.kind == "region"
        ]
        view[device.pci_address] = {
            "type": device.type,
            "vendor": device.vendor_name,
            "product": device.model,
            "regions": regions,
        }
    return view
