"""Build provider trees shaped like the ones Acceleron publishes (spec 001), with the client.

compute node RP -> device RP (type and product traits) -> deployable RPs carrying the
inventory: FPGA regions (region type, function, CUSTOM_PROGRAMMABLE, functionality),
vGPU types, a QAT VF pool. Device-level traits are repeated on the deployables, as
spec 001 asks, so one granular group can match one provider.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from acceleron.placement import names
from acceleron.placement.client import Inventory, PlacementClient


@dataclass(frozen=True)
class Region:
    key: str
    region_type: str
    function: str | None = None
    programmable: bool = True
    functionality: str | None = None


def add_compute_node(client: PlacementClient, host: str) -> str:
    """A compute node as Nova makes it (its uuid is Nova's business; any will do here)."""
    uuid = str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, host))
    client.create_provider(uuid, host)
    client.set_inventories(uuid, {"VCPU": Inventory(16), "MEMORY_MB": Inventory(32768)})
    return uuid


def _device(
    client: PlacementClient, root: str, host: str, address: str, traits: Iterable[str]
) -> str:
    uuid = names.provider_uuid(host, address)
    client.create_provider(uuid, names.provider_name(host, address), parent_uuid=root)
    client.set_traits(uuid, traits)
    return uuid


def _deployable(
    client: PlacementClient,
    device: str,
    host: str,
    address: str,
    key: str,
    inventory: Mapping[str, Inventory],
    traits: Iterable[str],
) -> str:
    uuid = names.provider_uuid(host, address, key)
    client.create_provider(uuid, names.provider_name(host, address, key), parent_uuid=device)
    client.set_inventories(uuid, inventory)
    client.set_traits(uuid, traits)
    return uuid


def region_traits(vendor: str, product: str, region: Region) -> list[str]:
    traits = [
        names.device_type_trait("fpga", vendor),
        names.product_trait("fpga", vendor, product),
        *names.region_type_traits("fpga", vendor, region.region_type),
    ]
    if region.function:
        traits += names.function_traits("fpga", vendor, region.function)
    if region.programmable:
        traits.append(names.PROGRAMMABLE)
    if region.functionality:
        traits.append(names.functionality_trait("fpga", region.functionality))
    return traits


def add_fpga(
    client: PlacementClient,
    root: str,
    host: str,
    address: str,
    vendor: str,
    product: str,
    regions: Iterable[Region],
) -> dict[str, str]:
    """An FPGA and its regions; the uuids by key ("" for the device)."""
    device_traits = [
        names.device_type_trait("fpga", vendor),
        names.product_trait("fpga", vendor, product),
    ]
    made = {"": _device(client, root, host, address, device_traits)}
    rc = names.accelerator_class("fpga")
    for region in regions:
        traits = region_traits(vendor, product, region)
        made[region.key] = _deployable(
            client, made[""], host, address, region.key, {rc: Inventory(1)}, traits
        )
    return made


def add_gpu(
    client: PlacementClient,
    root: str,
    host: str,
    address: str,
    vendor: str,
    product: str,
    vgpu_types: Mapping[str, int],
) -> dict[str, str]:
    """A GPU whose vGPU types are child providers; the uuids by type ("" for the GPU)."""
    device_traits = [
        names.device_type_trait("gpu", vendor),
        names.product_trait("gpu", vendor, product),
    ]
    made = {"": _device(client, root, host, address, device_traits)}
    rc = names.accelerator_class("vgpu")
    for vgpu_type, count in vgpu_types.items():
        traits = [*device_traits, names.product_trait("vgpu", vendor, vgpu_type)]
        made[vgpu_type] = _deployable(
            client, made[""], host, address, vgpu_type, {rc: Inventory(count)}, traits
        )
    return made


def add_qat(
    client: PlacementClient, root: str, host: str, address: str, product: str, vfs: int
) -> dict[str, str]:
    """A QAT card whose VFs are one pool provider; the uuids ("" and "vf_pool")."""
    traits = [names.device_type_trait("qat", "intel"), names.product_trait("qat", "intel", product)]
    made = {"": _device(client, root, host, address, traits)}
    inventory = {names.accelerator_class("qat"): Inventory(vfs)}
    made["vf_pool"] = _deployable(client, made[""], host, address, "vf_pool", inventory, traits)
    return made
