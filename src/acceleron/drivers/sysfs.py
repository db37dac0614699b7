"""Reading PCI devices from sysfs: the one module every sysfs-based driver uses.

Everything is read under a ``root`` directory (``/`` on a host, a fake tree in
tests), symlinks are resolved inside that root, and a file that cannot be read
(gone, ``ENODEV``, no permission, a directory where a file was expected) reads
as ``None``: the device it belongs to is skipped, never the whole scan.

Also here: PCI address (BDF) parsing and formatting, the id hygiene rules of
``docs/design/hardware.md`` §7, the classification table of §1.2, and the small
builders (PCI attach handles, board info) that drivers share; health checks are in
``acceleron.drivers.health``.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import errno
import functools
import logging
import os
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from acceleron.vocabulary import AttachHandle, Device

LOG = logging.getLogger(__name__)

PCI_DEVICES = "sys/bus/pci/devices"
_MAX_LINKS = 40


# ---------------------------------------------------------------------------
# PCI addresses


@dataclasses.dataclass(frozen=True, order=True)
class Bdf:
    """A PCI address: domain (segment), bus, slot (device) and function."""

    domain: int
    bus: int
    slot: int
    function: int

    def __str__(self) -> str:
        return f"{self.domain:04x}:{self.bus:02x}:{self.slot:02x}.{self.function:x}"

    @property
    def slot_address(self) -> str:
        """Domain, bus and slot without the function: ``dddd:bb:ss``."""
        return str(self)[:-2]


# Domain of 4 to 8 hex digits (Intel VMD uses 5: "10000:"); lspci without -D omits it.
_BDF_RE = re.compile(
    r"(?:(?P<domain>[0-9a-f]{1,8}):)?(?P<bus>[0-9a-f]{1,2}):(?P<slot>[0-9a-f]{1,2})"
    r"\.(?P<function>[0-7])"
)


def parse_bdf(text: str | bytes) -> Bdf:
    """Parse ``dddd:bb:ss.f`` in any case, with a 4-8 digit domain or none (domain 0).

    NVML's ``00000000:3B:00.0`` parses too. Raises ValueError for anything else.
    """
    value = (text.decode() if isinstance(text, bytes) else text).strip().lower()
    match = _BDF_RE.fullmatch(value)
    if not match:
        raise ValueError(f"not a PCI address: {value!r}")
    bdf = Bdf(
        int(match["domain"] or "0", 16),
        int(match["bus"], 16),
        int(match["slot"], 16),
        int(match["function"], 16),
    )
    if bdf.slot > 0x1F:
        raise ValueError(f"not a PCI address (slot above 0x1f): {value!r}")
    return bdf


def normalize_bdf(text: str | bytes) -> str:
    """The canonical lower-case form ``dddd:bb:ss.f`` of a PCI address."""
    return str(parse_bdf(text))


def format_bdf(domain: int, bus: int, slot: int, function: int) -> str:
    """Canonical form from integer fields (as NVML's pci info struct gives them)."""
    return str(Bdf(domain, bus, slot, function))


def is_bdf(text: str) -> bool:
    try:
        parse_bdf(text)
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------------------
# Id hygiene


def normalize_hex_id(text: str | None, width: int = 4) -> str | None:
    """``0x10DE`` / ``10de`` -> ``10de``; ``None`` or garbage -> ``None``."""
    if text is None:
        return None
    value = text.strip().lower().removeprefix("0x")
    if not value or not re.fullmatch(r"[0-9a-f]+", value):
        return None
    return value.zfill(width)


def normalize_uuid(text: str | bytes | None) -> str | None:
    """A UUID as 32 lower-case hex digits, dashes removed; ``None`` if it is not one."""
    if text is None:
        return None
    value = (text.decode() if isinstance(text, bytes) else text).strip().lower()
    value = value.replace("-", "").removeprefix("0x")
    return value if re.fullmatch(r"[0-9a-f]{32}", value) else None


def trait_part(text: str) -> str:
    """Upper case, every character outside ``A-Z0-9_`` made ``_`` (custom trait syntax)."""
    return re.sub(r"[^A-Z0-9_]", "_", text.strip().upper())


# ---------------------------------------------------------------------------
# Reading files under the root


class Sysfs:
    """Paths and reads under ``root``; every read is tolerant (``None`` on failure)."""

    def __init__(self, root: Path | str = "/") -> None:
        self.root = Path(os.path.realpath(root))

    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    def realpath(self, path: Path) -> Path:
        """``realpath`` that never leaves the root: absolute link targets and ``..``
        are taken relative to the root, as a chroot would. (Strings, not Path objects:
        discovery resolves thousands of links.)"""
        root = str(self.root).rstrip("/")
        pending = self._relative(path).split("/")
        pending.reverse()  # a stack: the next component last
        done: list[str] = []
        hops = 0
        while pending:
            part = pending.pop()
            if part in ("", "."):
                continue
            if part == "..":
                if done:
                    done.pop()
                continue
            target = _readlink("/".join((root, *done, part)))
            if target is None:  # not a link, or not there: taken as it is
                done.append(part)
                continue
            hops += 1
            if hops > _MAX_LINKS:
                raise OSError(errno.ELOOP, "too many levels of symbolic links", str(path))
            if target.startswith("/"):
                done = []
            pending.extend(reversed(target.split("/")))
        return Path("/".join((root, *done))) if done else self.root

    def _relative(self, path: Path) -> str:
        """``path`` relative to the root (an absolute path outside it: relative to /)."""
        text = str(path)
        if not text.startswith("/"):
            return text
        root = str(self.root).rstrip("/") + "/"
        return text[len(root) :] if text.startswith(root) else text.lstrip("/")

    def resolve(self, path: Path) -> Path | None:
        """``realpath`` of an existing path, or ``None`` when it (or its target) is gone."""
        try:
            target = self.realpath(path)
        except OSError:
            return None
        return target if os.path.exists(target) else None

    def write(self, path: Path, value: str, doing: str) -> None:
        """Write an attribute file: TargetNotFound when it is not there (sysfs makes no
        new files: the device is gone), DriverError saying why when the write failed."""
        from acceleron.drivers.errors import DriverError, TargetNotFound

        if not path.exists():
            raise TargetNotFound(f"cannot {doing}: {path} does not exist")
        try:
            path.write_text(value)
        except FileNotFoundError as error:
            raise TargetNotFound(f"cannot {doing}: {path} does not exist") from error
        except OSError as error:
            reason = errno.errorcode.get(error.errno or 0, "error")
            raise DriverError(
                f"cannot {doing}: writing {path} failed ({reason}: {error.strerror})"
            ) from error

    def read(self, path: Path) -> str | None:
        """The stripped content of an attribute file; ``None`` when it cannot be read."""
        return self.read_file(str(path))

    @staticmethod
    def read_file(path: str) -> str | None:
        """``read`` of a path given as a string (the scan's hot path)."""
        try:
            with open(path, encoding="utf-8", errors="strict") as file:
                return file.read().strip()
        except (OSError, UnicodeDecodeError) as error:
            if not isinstance(error, FileNotFoundError):
                LOG.debug("cannot read %s: %s", path, error)
            return None

    def read_int(self, path: Path, base: int = 10) -> int | None:
        value = self.read(path)
        if value is None:
            return None
        try:
            return int(value, base)
        except ValueError:
            return None

    def link_name(self, path: Path) -> str | None:
        """The last component of a symlink's target (``driver``, ``iommu_group``)."""
        try:
            return PurePosixPath(os.readlink(path)).name or None
        except OSError:
            return None

    def listdir(self, path: Path) -> list[str]:
        """Entry names, naturally sorted (``virtfn2`` before ``virtfn10``); ``[]`` on error."""
        try:
            names = os.listdir(path)
        except OSError:
            return []
        return sorted(names, key=natural_key)

    def children(self, path: Path, prefix: str) -> Iterator[Path]:
        """Entries of ``path`` whose names start with ``prefix``, naturally sorted."""
        for name in self.listdir(path):
            if name.startswith(prefix):
                yield path / name


# Within a discovery cycle (``shared_scan``): each path's link target, or None for a path
# that is no link. Resolving a device's links walks the same directories again and again.
_LINKS: contextvars.ContextVar[dict[str, str | None] | None] = contextvars.ContextVar(
    "sysfs_links", default=None
)


def _readlink(path: str) -> str | None:
    links = _LINKS.get()
    if links is not None and path in links:
        return links[path]
    try:
        target: str | None = os.readlink(path)
    except OSError:  # not a link (EINVAL), or not there
        target = None
    if links is not None:
        links[path] = target
    return target


@functools.lru_cache(maxsize=4096)  # sysfs repeats its names on every device
def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", name))


def suffix_index(name: str) -> int | None:
    """The trailing number of a name (``region3`` -> 3, ``dfl-port.1`` -> 1)."""
    match = re.search(r"(\d+)\Z", name)
    return int(match.group(1)) if match else None


# ---------------------------------------------------------------------------
# PCI functions


@dataclasses.dataclass(frozen=True)
class PciFunction:
    """What sysfs says about one PCI function. Ids are lower hex without ``0x``."""

    address: str
    path: Path  # the real device directory (symlinks resolved inside the root)
    vendor: str
    device: str
    class_code: str  # 6 hex digits: class, subclass, prog-if
    subsystem_vendor: str | None = None
    subsystem_device: str | None = None
    revision: str | None = None
    numa_node: int | None = None  # None when the kernel says -1 (unknown)
    driver: str | None = None  # bound kernel driver, None when unbound
    iommu_group: int | None = None
    sriov_totalvfs: int | None = None  # None when not SR-IOV capable
    sriov_numvfs: int = 0
    vf_addresses: tuple[str, ...] = ()  # from virtfn* links, in virtfn order
    physfn: str | None = None  # the PF's address, for a VF

    @property
    def is_vf(self) -> bool:
        return self.physfn is not None

    @property
    def bdf(self) -> Bdf:
        return parse_bdf(self.address)


def pci_addresses(sysfs: Sysfs) -> list[str]:
    """Every address under ``sys/bus/pci/devices``, canonical and sorted; ``[]`` without sysfs."""
    found = []
    for name in sysfs.listdir(sysfs.path(PCI_DEVICES)):
        try:
            found.append(parse_bdf(name))
        except ValueError:
            LOG.debug("ignoring %s in %s: not a PCI address", name, PCI_DEVICES)
    return [str(bdf) for bdf in sorted(found)]


def _pci_dir(sysfs: Sysfs, address: str) -> Path | None:
    """The real directory of a function, found by its bus link (any domain width)."""
    devices = sysfs.path(PCI_DEVICES)
    link = devices / address
    if not os.path.exists(link):  # e.g. listed with an upper-case or longer domain
        names = (n for n in sysfs.listdir(devices) if _names_address(n, address))
        link = next((devices / n for n in names), link)
    return sysfs.resolve(link)


def _names_address(name: str, address: str) -> bool:
    """Whether a directory name under /sys/bus/pci/devices is ``address`` (a BDF in any
    domain width or case)."""
    return is_bdf(name) and normalize_bdf(name) == address


def read_function(sysfs: Sysfs, address: str) -> PciFunction | None:
    """The record of one function, or ``None`` when it is gone or its ids cannot be read.
    Its directory is listed once, and only the attributes it holds are opened."""
    path = _pci_dir(sysfs, address)
    if path is None:
        return None
    base = str(path)
    try:
        names = set(os.listdir(base))
    except OSError:
        return None

    def attribute(name: str) -> str | None:
        return sysfs.read_file(f"{base}/{name}") if name in names else None

    def number(name: str) -> int | None:
        value = attribute(name)
        try:
            return None if value is None else int(value)
        except ValueError:
            return None

    vendor = normalize_hex_id(attribute("vendor"))
    device = normalize_hex_id(attribute("device"))
    class_code = normalize_hex_id(attribute("class"), width=6)
    if vendor is None or device is None or class_code is None:
        LOG.info("PCI device %s vanished or is unreadable; skipping it", address)
        return None
    numa_node = number("numa_node")
    return PciFunction(
        address=address,
        path=path,
        vendor=vendor,
        device=device,
        class_code=class_code,
        subsystem_vendor=normalize_hex_id(attribute("subsystem_vendor")),
        subsystem_device=normalize_hex_id(attribute("subsystem_device")),
        revision=normalize_hex_id(attribute("revision"), width=2),
        numa_node=numa_node if numa_node is not None and numa_node >= 0 else None,
        driver=sysfs.link_name(path / "driver") if "driver" in names else None,
        iommu_group=_int_or_none(sysfs.link_name(path / "iommu_group"))
        if "iommu_group" in names
        else None,
        sriov_totalvfs=number("sriov_totalvfs"),
        sriov_numvfs=number("sriov_numvfs") or 0,
        vf_addresses=tuple(_linked_addresses(sysfs, path, names, "virtfn")),
        physfn=next(iter(_linked_addresses(sysfs, path, names, "physfn")), None),
    )


def _int_or_none(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def _linked_addresses(sysfs: Sysfs, path: Path, names: set[str], prefix: str) -> Iterator[str]:
    """Addresses that ``prefix*`` links among ``names`` point at (``virtfnN``,
    ``physfn``), naturally sorted; links whose target is gone (a VF removed mid-scan)
    are skipped."""
    for name in sorted((n for n in names if n.startswith(prefix)), key=natural_key):
        if prefix == "virtfn" and suffix_index(name) is None:
            continue
        link = path / name
        target = sysfs.resolve(link)
        if target is None or not is_bdf(target.name):
            LOG.info("%s points at a PCI device that is gone; skipping it", link)
            continue
        yield normalize_bdf(target.name)


# Scans shared by every driver within one discovery cycle (see ``shared_scan``): per
# root, every function read, by address.
_Scanned = tuple[list[PciFunction], dict[str, PciFunction]]
_SHARED: contextvars.ContextVar[dict[Path, _Scanned] | None] = contextvars.ContextVar(
    "shared_scan", default=None
)


@contextlib.contextmanager
def shared_scan() -> Iterator[None]:
    """Within the block, ``scan`` reads the host's PCI functions once per root, however
    many drivers ask, and ``virtual_functions`` takes the VFs from that scan; a link is
    read once: one discovery cycle of the agent is one block, and reads each function
    once."""
    token, links = _SHARED.set({}), _LINKS.set({})
    try:
        yield
    finally:
        _LINKS.reset(links)
        _SHARED.reset(token)


def scan(sysfs: Sysfs) -> list[PciFunction]:
    """Every readable PCI function of the host, VFs included, sorted by address."""
    shared = _SHARED.get()
    if shared is not None and sysfs.root in shared:
        return shared[sysfs.root][0]
    found = (read_function(sysfs, address) for address in pci_addresses(sysfs))
    functions = [fn for fn in found if fn is not None]
    if shared is not None:
        shared[sysfs.root] = (functions, {fn.address: fn for fn in functions})
    return functions


def still_present(sysfs: Sysfs, fn: PciFunction) -> bool:
    """Whether a function the scan listed is still there. Drivers ask after reading a
    card: one that vanished meanwhile is left out (and logged) rather than reported
    from whatever its half-gone directory still showed."""
    if sysfs.read(fn.path / "vendor") is not None:
        return True
    LOG.info("PCI device %s vanished during the scan; leaving it out", fn.address)
    return False


def virtual_functions(sysfs: Sysfs, pf: PciFunction) -> list[PciFunction]:
    """The PF's VFs that are there and readable, in ``virtfn`` order: from this
    discovery cycle's scan when there is one (``shared_scan``), else read afresh."""
    shared = _SHARED.get()
    scanned = None if shared is None else shared.get(sysfs.root)
    if scanned is not None:
        found = (scanned[1].get(address) for address in pf.vf_addresses)
    else:
        found = (read_function(sysfs, address) for address in pf.vf_addresses)
    return [vf for vf in found if vf is not None]


def owning_function(sysfs: Sysfs, path: Path) -> str | None:
    """The address of the PCI device a sysfs node sits under (its nearest BDF ancestor)."""
    target = sysfs.resolve(path)
    if target is None:
        return None
    for part in (target, *target.parents):
        if part == sysfs.root:
            break
        if is_bdf(part.name):
            return normalize_bdf(part.name)
    return None


# ---------------------------------------------------------------------------
# Topology: the nearest PCIe switch

# A host bridge's directory under /sys/devices: where a PCI domain's hierarchy starts
# (``pci0000:00``; Intel VMD starts a domain of its own below a PCI device, ``pci10000:e0``).
_HOST_BRIDGE = re.compile(r"pci[0-9a-f]{4,8}:[0-9a-f]{2}")
PCI_BRIDGE_CLASS = "0604"  # class and subclass of a PCI-to-PCI bridge (switch ports too)


def bridge_chain(path: Path) -> list[Path]:
    """The PCI bridges above a function, from its root port down to its parent: the
    BDF-named directories of its real sysfs path below the last host bridge (``[]`` for
    a function on a root bus, as an integrated device or one in a virtual machine's
    flat PCI bus)."""
    parts = path.parts
    starts = [i for i, part in enumerate(parts) if _HOST_BRIDGE.fullmatch(part)]
    if not starts:
        return []
    below = parts[starts[-1] + 1 : -1]
    if not all(is_bdf(part) for part in below):
        return []  # not a PCI function's directory: nothing to say
    top = Path(*parts[: starts[-1] + 1])
    return [top.joinpath(*below[: i + 1]) for i in range(len(below))]


def pcie_switch(fn: PciFunction) -> str | None:
    """The PCI address of the upstream port of the nearest PCIe switch above ``fn``: the
    bridge above the function's parent bridge, when that bridge is itself below the root
    port. In sysfs a function behind a switch sits at
    ``pci0000:00/<root port>/<switch upstream port>/<switch downstream port>/<function>``:
    two functions behind one switch have different downstream ports and the same upstream
    port, which names the switch (behind nested switches, the one nearest the function).
    None when there is no switch: the function hangs off a root port (or a root bus),
    or its parent's parent is the root port (a PCIe-to-PCI bridge, not a switch), or the
    candidate is no PCI bridge by its class."""
    chain = bridge_chain(fn.path)
    if len(chain) < 3:  # root port, upstream port, downstream port at least
        return None
    upstream = chain[-2]
    klass = normalize_hex_id(Sysfs.read_file(str(upstream / "class")), width=6)
    if klass is not None and not klass.startswith(PCI_BRIDGE_CLASS):
        return None
    return normalize_bdf(upstream.name)


# ---------------------------------------------------------------------------
# Classification (docs/design/hardware.md §1.2): ordered rules, the first match wins.


@dataclasses.dataclass(frozen=True)
class Category:
    """What a PCI function is: ``name`` picks the driver, ``device_type`` is spec 004's."""

    name: str
    device_type: str
    vf_only: bool = False  # a VF id: never a device by itself


INTEL_FPGA_VF_IDS = {
    "09c4": "09c5",  # PAC Arria10
    "0b30": "0b31",  # PAC N3000
    "0b2b": "0b2c",  # PAC D5005
    "bcce": "bccf",  # OFS / Agilex N6000-class
    "bcc0": "bcc1",  # integrated Xeon+FPGA
    "bcbd": "bcbf",  # integrated Xeon+FPGA
}
QAT_VF_IDS = {
    "0435": "0443",  # DH895xCC
    "37c8": "37c9",  # C62x
    "19e2": "19e3",  # C3xxx
    "18ee": "18ef",  # 200xx
    "6f54": "6f55",  # D15xx
    "18a0": "18a1",  # C4xxx
    "4940": "4941",  # 4xxx
    "4942": "4943",  # 401xx
    "4944": "4945",  # 402xx
}
ASCEND_IDS = ("d100", "d801")  # Ascend 310, Ascend 910

NVIDIA_GPU = Category("nvidia_gpu", "GPU")
AMD_GPU = Category("amd_gpu", "GPU")
INTEL_FPGA = Category("intel_fpga", "FPGA")
INTEL_FPGA_VF = Category("intel_fpga", "FPGA", vf_only=True)
XILINX_FPGA = Category("xilinx_fpga", "FPGA")
INTEL_QAT = Category("intel_qat", "QAT")
INTEL_QAT_VF = Category("intel_qat", "QAT", vf_only=True)
ASCEND = Category("ascend", "AICHIP")
ACCELERATOR = Category("accelerator", "PCI")


def _cls(fn: PciFunction, *prefixes: str) -> bool:
    return fn.class_code.startswith(prefixes)


_RULES: tuple[tuple[Category, Callable[[PciFunction], bool]], ...] = (
    (NVIDIA_GPU, lambda f: f.vendor == "10de" and _cls(f, "0300", "0302")),
    (AMD_GPU, lambda f: f.vendor == "1002" and _cls(f, "0300", "0302", "0380")),
    (INTEL_FPGA, lambda f: f.vendor == "8086" and f.device in INTEL_FPGA_VF_IDS),
    (INTEL_FPGA_VF, lambda f: f.vendor == "8086" and f.device in INTEL_FPGA_VF_IDS.values()),
    (XILINX_FPGA, lambda f: f.vendor == "10ee" and _cls(f, "12")),
    (INTEL_QAT, lambda f: f.vendor == "8086" and f.device in QAT_VF_IDS),
    (INTEL_QAT_VF, lambda f: f.vendor == "8086" and f.device in QAT_VF_IDS.values()),
    (ASCEND, lambda f: f.vendor == "19e5" and f.device in ASCEND_IDS and _cls(f, "12")),
    (ACCELERATOR, lambda f: _cls(f, "12")),
)


def identify(fn: PciFunction) -> Category | None:
    """The first rule of §1.2 the ids and class match, VF ids included."""
    return next((category for category, rule in _RULES if rule(fn)), None)


def classify(fn: PciFunction) -> Category | None:
    """Like ``identify`` but ``None`` for VFs: they are reached from their PF only."""
    category = identify(fn)
    if fn.is_vf or category is None or category.vf_only:
        return None
    return category


def device_type(fn: PciFunction) -> str:
    """Spec 004's type for any function: the §1.2 category's, else from the PCI class;
    ``PCI`` when nothing better is known."""
    category = identify(fn)
    if category is not None and category.device_type != "PCI":
        return category.device_type
    if _cls(fn, "03"):
        return "GPU"
    if _cls(fn, "02"):
        return "NIC"
    if _cls(fn, "0108"):
        return "SSD"
    return "PCI"


VENDOR_NAMES = {
    "8086": "INTEL",
    "10de": "NVIDIA",
    "1002": "AMD",
    "10ee": "XILINX",
    "1172": "ALTERA",
    "19e5": "HUAWEI",
    "1bd4": "INSPUR",
    "15b3": "MELLANOX",
    "14e4": "BROADCOM",
    "1924": "SOLARFLARE",
    "1d0f": "AMAZON",
    "1af4": "REDHAT",
    "144d": "SAMSUNG",
    "1c2c": "SILICOM",
}


def vendor_name(vendor_id: str) -> str:
    """Upper-case name for traits; an unknown vendor is named by its id (``1ABC``)."""
    return VENDOR_NAMES.get(vendor_id, vendor_id.upper())


def model_name(table: dict[str, str], device_id: str) -> str:
    """A model from a driver's device-id table; an unknown id names itself (``2FFF``)."""
    return table.get(device_id, device_id.upper())


# ---------------------------------------------------------------------------
# Builders shared by the drivers


def pci_handle_info(address: str) -> dict[str, str]:
    """Upstream's PCI attach_handle_info: domain, bus, device and function as hex strings."""
    bdf = parse_bdf(address)
    return {
        "domain": f"{bdf.domain:04x}",
        "bus": f"{bdf.bus:02x}",
        "device": f"{bdf.slot:02x}",
        "function": f"{bdf.function:x}",
    }


def passed_through(fn: PciFunction) -> bool:
    """Bound to ``vfio-pci``: a VM most likely has it (docs/design/hardware.md §7). A card reported
    whole for that reason has its handle marked in use on the host."""
    return fn.driver == "vfio-pci"


def pci_handle(
    address: str, *, in_use: bool = False, type: str = "PCI", **extra: str
) -> AttachHandle:
    return AttachHandle(
        type=type,
        address=address,
        info={**pci_handle_info(address), **extra},
        in_use=in_use,
    )


def board_info(fn: PciFunction) -> dict[str, Any]:
    """``std_board_info`` of a device: the PCI facts every driver reports the same way."""
    return {
        "class_code": fn.class_code,
        "subsystem_vendor_id": fn.subsystem_vendor,
        "subsystem_device_id": fn.subsystem_device,
        "revision": fn.revision,
        "kernel_driver": fn.driver,
        "iommu_group": fn.iommu_group,
        "sriov_totalvfs": fn.sriov_totalvfs,
    }


def make_device(fn: PciFunction, *, driver: str, model: str, **fields: Any) -> Device:
    """A ``Device`` keyed by the function's address, with its PCI identity filled in.
    ``fields`` may override ``type`` and ``vendor_name`` or set ``deployables`` and
    ``vendor_board_info``."""
    values: dict[str, Any] = {
        "pci_address": fn.address,
        "type": device_type(fn),
        "vendor_id": fn.vendor,
        "vendor_name": vendor_name(fn.vendor),
        "product_id": fn.device,
        "model": model,
        "driver": driver,
        "numa_node": fn.numa_node,
        "pcie_switch": pcie_switch(fn),
        "std_board_info": board_info(fn),
    }
    values.update(fields)
    return Device(**values)


def reset_functions(sysfs: Sysfs, addresses: Sequence[str], what: str) -> None:
    """Clean by resetting: a reset of each PCI function at ``addresses`` (the kernel's
    ``reset`` attribute, by the device's ``reset_method``: a function-level reset, or a
    bus reset). CleaningUnsupported when one is no PCI function, or has no reset."""
    from acceleron.drivers.errors import CleaningUnsupported

    if not addresses or not all(is_bdf(a) for a in addresses):
        raise CleaningUnsupported(f"{what} has no PCI function to reset")
    for address in addresses:
        target = sysfs.path("sys/bus/pci/devices", normalize_bdf(address), "reset")
        if not target.exists():
            raise CleaningUnsupported(
                f"{address} cannot be reset: the kernel offers no reset for it (no "
                f"{target.relative_to(sysfs.root)})"
            )
        sysfs.write(target, "1", f"reset {address}")
        LOG.info("Reset %s (%s)", address, what)


def clean_by_reset(sysfs: Sysfs, handles: Sequence[str], method: str, what: str) -> None:
    """A PCI function driver's cleaning: ``reset`` resets each handle's function; it can
    do no other (CleaningUnsupported, saying what to choose instead)."""
    from acceleron.drivers.errors import CleaningUnsupported

    if method != "reset":
        raise CleaningUnsupported(
            f"{what} can be reset (a function-level reset), not {method}ed, by its driver: "
            f"choose reset, or command ([agent] cleaning_command) for a vendor's tool"
        )
    reset_functions(sysfs, handles, what)


class CleanedByReset:
    """A PCI function driver's cleaning (drivers.base.Cleanable): each handle given back
    reset (``clean_by_reset``)."""

    sysfs: Sysfs

    def clean(
        self,
        device: Device,
        deployable_key: str,
        handles: Sequence[str],
        method: str,
        image: Path | None,
    ) -> None:
        clean_by_reset(self.sysfs, handles, method, f"{device.pci_address} {deployable_key}")
