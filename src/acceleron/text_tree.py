"""The one text-tree renderer: ``acceleron agent --once --dry-run`` draws a host report
with it, and the CLI's ``--tree`` views draw the API's inventory with it.

A tree is a list of :class:`Node` (a line of text and the nodes under it); :func:`draw`
gives its lines with connectors::

    0000:5e:00.0  FPGA  INTEL PAC_ARRIA10 (8086:09c4)  NUMA 0  driver intel_fpga
    └── region0  region, 2 accelerators, programmable
        ├── region type  ce48969398f05f33946d560708be108a
        ├── PCI 0000:5e:00.1
        └── PCI 0000:5e:00.2  (in use)

:func:`report` is the host report's tree (the agent's dry run); the CLI builds its
nodes from the API's views in cli/inventory.py. A device's line says where it sits
(:func:`topology`): its NUMA node, and its PCIe switch and NVLink domain when it has
them (``NUMA 1  PCIe switch 0000:b1:00.0  NVLink nvlink-0000:b3:00.0``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple

from acceleron.vocabulary import Deployable, Device

if TYPE_CHECKING:  # the CLI draws trees too, and need not load pydantic for it
    from acceleron.report import HostReport

# Last-child and middle-child connectors, and what continues below each.
LAST, MIDDLE = ("└── ", "    "), ("├── ", "│   ")


class Node(NamedTuple):
    text: str
    children: Sequence[Node] = ()


def draw(roots: Sequence[Node]) -> list[str]:
    """Each root's line, then its children's branches with tree connectors."""
    lines: list[str] = []
    for root in roots:
        lines.append(root.text)
        lines.extend(_branches(root.children, ""))
    return lines


def _branches(nodes: Sequence[Node], prefix: str) -> Iterator[str]:
    for index, node in enumerate(nodes):
        connector, below = LAST if index == len(nodes) - 1 else MIDDLE
        yield f"{prefix}{connector}{node.text}"
        yield from _branches(node.children, prefix + below)


# --- a host report (the agent's dry run) ----------------------------------------------


def report(host: HostReport) -> str:
    """The report's header, then one tree per device, a blank line between two."""
    count = len(host.devices)
    lines = [
        f"Host {host.hostname}: {count} device{'' if count == 1 else 's'} "
        f"(agent {host.agent_version}, report version {host.report_version})"
    ]
    for device in host.devices:
        lines.append("")
        lines.extend(draw([device_node(device)]))
    return "\n".join(lines) + "\n"


def device_node(device: Device) -> Node:
    text = (
        f"{device.pci_address}  {device.type}  {device.vendor_name} {device.model} "
        f"({device.vendor_id}:{device.product_id})  "
        f"{topology(device.numa_node, device.pcie_switch, device.nvlink_domain)}  "
        f"driver {device.driver}"
    )
    return Node(text, [deployable_node(dep) for dep in device.deployables])


def topology(numa_node: int | None, pcie_switch: str | None, nvlink_domain: str | None) -> str:
    """Where a device sits, in words: ``NUMA 0  PCIe switch 0000:17:00.0  NVLink
    nvlink-0000:18:00.0``; an unknown NUMA node says so, no switch or NVLink says nothing."""
    words = [f"NUMA {'unknown' if numa_node is None else numa_node}"]
    if pcie_switch:
        words.append(f"PCIe switch {pcie_switch}")
    if nvlink_domain:
        words.append(f"NVLink {nvlink_domain}")
    return "  ".join(words)


def deployable_node(dep: Deployable) -> Node:
    plural = "" if dep.num_accelerators == 1 else "s"
    text = f"{dep.key}  {dep.kind}, {dep.num_accelerators} accelerator{plural}"
    if dep.accelerator_type:
        text += f" of type {dep.accelerator_type}"
    if dep.programmable:
        text += ", programmable"
    children = [Node(f"{label:<12} {value}") for label, value in _facts(dep)]
    for handle in dep.attach_handles:
        in_use = "  (in use)" if handle.in_use else ""
        children.append(Node(f"{handle.type} {handle.address}{in_use}"))
    children.extend(deployable_node(child) for child in dep.children)
    return Node(text, children)


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
