"""A host report as a readable tree, for ``acceleron agent --once --dry-run``.

0000:5e:00.0  FPGA  INTEL PAC_ARRIA10 (8086:09c4)  NUMA 0  driver intel_fpga
  region0  region, 2 accelerators, programmable
    region type  ce48969398f05f33946d560708be108a
    functions    d8424dc4a4a3c413f89e433683f9040b
    PCI 0000:5e:00.1
    PCI 0000:5e:00.2  (in use)
"""

from __future__ import annotations

from collections.abc import Iterator

from acceleron.report import HostReport
from acceleron.vocabulary import Deployable, Device

INDENT = "  "


def render(report: HostReport) -> str:
    count = len(report.devices)
    lines = [
        f"Host {report.hostname}: {count} device{'' if count == 1 else 's'} "
        f"(agent {report.agent_version}, report version {report.report_version})"
    ]
    for device in report.devices:
        lines.append("")
        lines.extend(_device(device))
    return "\n".join(lines) + "\n"


def _device(device: Device) -> Iterator[str]:
    numa = "unknown" if device.numa_node is None else str(device.numa_node)
    yield (
        f"{device.pci_address}  {device.type}  {device.vendor_name} {device.model} "
        f"({device.vendor_id}:{device.product_id})  NUMA {numa}  driver {device.driver}"
    )
    for deployable in device.deployables:
        yield from _deployable(deployable, 1)


def _deployable(dep: Deployable, depth: int) -> Iterator[str]:
    pad = INDENT * depth
    plural = "" if dep.num_accelerators == 1 else "s"
    head = f"{pad}{dep.key}  {dep.kind}, {dep.num_accelerators} accelerator{plural}"
    if dep.accelerator_type:
        head += f" of type {dep.accelerator_type}"
    if dep.programmable:
        head += ", programmable"
    yield head
    for label, value in _facts(dep):
        yield f"{pad}{INDENT}{label:<12} {value}"
    for handle in dep.attach_handles:
        in_use = "  (in use)" if handle.in_use else ""
        yield f"{pad}{INDENT}{handle.type} {handle.address}{in_use}"
    for child in dep.children:
        yield from _deployable(child, depth + 1)


def _facts(dep: Deployable) -> Iterator[tuple[str, str]]:
    if dep.region_type:
        yield "region type", dep.region_type
    if dep.bitstream_id:
        yield "bitstream", dep.bitstream_id
    if dep.function_uuids:
        yield "functions", ", ".join(dep.function_uuids)
    if dep.memory_mb is not None:
        yield "memory", f"{dep.memory_mb} MiB"
    if dep.traits:
        yield "traits", ", ".join(dep.traits)
