"""A partitionable GPU in Placement: its MIG slices as units, a profile as the units it takes.

A GPU carved on demand (a ``mig_gpu`` deployable) is one provider whose inventory is:

* ``CUSTOM_ACCELERATOR_MIG_INSTANCE``: the instances it can hold at once (one per compute
  slice: 7 on Hopper), one a request: what quotas and requests count, as for any
  accelerator class;
* ``CUSTOM_MIG_COMPUTE_SLICE`` and ``CUSTOM_MIG_MEMORY_SLICE``: its compute and memory
  slices (7 and 8 on Hopper), amounts that travel with the request's allocation.

It carries ``CUSTOM_MIG_PARTITIONABLE`` and a trait naming its product
(``CUSTOM_MIG_H100_80GB``): a profile's name tells its memory, so its product. A device
profile group asks for ``accel:mig_profile=3g.40gb``; ``expand`` turns it into what Nova's
query reads (resources and traits), so one provider gives all the units at once. Placement
counts units, not positions: the bind's planner (``acceleron.mig.planner``) finds where the
instance may start, or refuses.

Instances Acceleron did not make (found on the GPU, or not destroyed yet) are no
request's allocation: the sync reserves their units (``Taken``). Pure: no database.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping

from acceleron.exceptions import InvalidInput
from acceleron.mig import geometry

KIND = "mig_gpu"  # the deployable kind of a GPU carved on demand
KEY = "mig"  # its key within the device
ACCELERATOR_TYPE = "MIG_INSTANCE"  # CUSTOM_ACCELERATOR_MIG_INSTANCE
INSTANCE_CLASS = "CUSTOM_ACCELERATOR_MIG_INSTANCE"
COMPUTE_CLASS = "CUSTOM_MIG_COMPUTE_SLICE"
MEMORY_CLASS = "CUSTOM_MIG_MEMORY_SLICE"
PARTITIONABLE = "CUSTOM_MIG_PARTITIONABLE"
PROFILE_KEY = "accel:mig_profile"
# What a slot handle's attach_handle_info says of the instance it holds.
INFO_PROFILE, INFO_START, INFO_UUID = "mig_profile", "gpu_instance_start", "mig_uuid"
# A slot that is one of the GPU's SR-IOV virtual functions (a GPU carved for VMs): the
# MIG-backed vGPU type made on it with its instance, what the VM is given.
INFO_VGPU = "vgpu_type"


def product_trait(product: geometry.Product) -> str:
    """``CUSTOM_MIG_H100_80GB``: the product whose profile a request names."""
    return "CUSTOM_MIG_" + re.sub(r"[^A-Z0-9]+", "_", product.name.upper()).strip("_")


def vgpu_suffix(profile: geometry.Profile) -> str:
    """How a MIG-backed vGPU type of ``profile`` ends its name: its compute slices, its
    memory in GB and the compute series, ``-3-40C`` for a 3g.40gb (NVIDIA's types read
    ``NVIDIA H100XM-3-40C``), ``-1-10CME`` for a 1g.10gb+me."""
    found = re.fullmatch(r"(\d+)g\.(\d+)gb(\+me)?", profile.name)
    if found is None:
        raise InvalidInput(f"MIG profile {profile.name!r} has no vGPU type name.")
    return f"-{found[1]}-{found[2]}C{'ME' if found[3] else ''}"


def find(name: str) -> tuple[geometry.Product, geometry.Profile]:
    """The product and profile a profile name (``3g.40gb``) belongs to: names tell the
    memory, so one product each. InvalidInput names the known profiles."""
    for product in geometry.PRODUCTS:
        if product.has(name):
            return product, product.profile(name)
    known = "; ".join(
        f"{p.name}: {', '.join(f.name for f in p.profiles)}" for p in geometry.PRODUCTS
    )
    raise InvalidInput(
        f"{PROFILE_KEY}: no GPU has a MIG profile {name!r}; the profiles are {known}."
    )


def expand(group: Mapping[str, str], where: str) -> dict[str, str]:
    """The group with what ``accel:mig_profile`` asks for written out: one instance, its
    compute and memory slices, its product's trait and ``CUSTOM_MIG_PARTITIONABLE``.
    Entries the group gives itself must agree (a stored group expands to itself)."""
    name = group.get(PROFILE_KEY)
    if name is None:
        return dict(group)
    product, profile = find(name)
    wanted = {
        f"resources:{INSTANCE_CLASS}": "1",
        f"resources:{COMPUTE_CLASS}": str(profile.compute_slices),
        f"resources:{MEMORY_CLASS}": str(profile.memory_slices),
        f"trait:{product_trait(product)}": "required",
        f"trait:{PARTITIONABLE}": "required",
    }
    out = dict(group)
    for key, value in wanted.items():
        if out.setdefault(key, value) != value:
            raise InvalidInput(
                f"{where}: {PROFILE_KEY}={name} asks for {key}={value}; the group says "
                f"{out[key]}: leave it out."
            )
    extra = [
        k
        for k in out
        if k.startswith("resources:") and k not in wanted and _is_mig_class(k[len("resources:") :])
    ]
    if extra:
        raise InvalidInput(f"{where}: {PROFILE_KEY} sets the MIG units itself: leave out {extra}.")
    return out


def _is_mig_class(name: str) -> bool:
    return name in (INSTANCE_CLASS, COMPUTE_CLASS, MEMORY_CLASS)


@dataclasses.dataclass(frozen=True)
class Taken:
    """Units of a GPU no request's allocation covers: instances, compute, memory slices."""

    instances: int = 0
    compute: int = 0
    memory: int = 0

    def plus(self, profile: geometry.Profile) -> Taken:
        return Taken(
            self.instances + 1,
            self.compute + profile.compute_slices,
            self.memory + profile.memory_slices,
        )


def taken(infos: Iterable[Mapping[str, str]]) -> Taken:
    """What the instances of these slot handles' infos take (a name no table knows counts
    one instance and no slice)."""
    found = Taken()
    for info in infos:
        name = str(info.get(INFO_PROFILE) or "")
        try:
            found = found.plus(find(name)[1])
        except InvalidInput:
            found = Taken(found.instances + 1, found.compute, found.memory)
    return found


def layout(product: geometry.Product, infos: Iterable[Mapping[str, str]]) -> geometry.Layout:
    """The instances the slot handles' infos say a GPU holds, checked (InvalidInput when
    they overlap or break the table)."""
    return geometry.Layout.of(
        product,
        (
            geometry.Instance(str(i[INFO_PROFILE]), int(i[INFO_START]))
            for i in infos
            if i.get(INFO_PROFILE) and str(i.get(INFO_START, "")).isdigit()
        ),
    )
