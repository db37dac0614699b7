"""The MIG geometry of Hopper GPUs: each GPU instance profile, and where it may sit.

A Hopper GPU in MIG mode has 8 memory slices and 7 compute slices. A GPU instance takes
a run of memory slices that must start at one of the positions its profile allows (its
*placements*, as ``nvidia-smi mig -lgipp`` prints them: ``{0,4}:4`` is "starts at slice
0 or 4, four slices long") and may not overlap another instance. So a GPU can have the
slices a profile needs free and still no position for it: a 3g.40gb needs slices 0-3 or
4-7 whole, and a 1g.10gb at slice 2 spoils the first, one at slice 5 the second.

The table is NVIDIA's (the MIG user guide's "Supported MIG Profiles", the profile ids
``nvidia-smi mig -lgip`` prints, which are not NVML's profile indexes); the three products
differ only in memory, so in names. A lent GPU's own answer
(``nvmlDeviceGetGpuInstancePossiblePlacements_v2``, read-only) is the check of it: see
docs/mig.md.

Pure: a ``Layout`` is the instances one GPU holds, checked; what is free for a profile
is computed from it. Memory slices are kept as a bit mask (bit ``i`` is slice ``i``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from collections.abc import Iterable, Mapping

from acceleron.exceptions import InvalidInput

# Why a GPU (or every GPU) cannot take a profile, worst first: the planner reports the
# mildest reason any GPU had.
UNKNOWN_PROFILE = "unknown_profile"  # the product has no such profile
INSTANCE_LIMIT = "instance_limit"  # the GPU holds as many of it as the profile allows
NO_FREE_SLICES = "no_free_slices"  # too few free memory or compute slices
NO_VALID_POSITION = "no_valid_position"  # enough free slices, none where it may start
REASONS = (UNKNOWN_PROFILE, INSTANCE_LIMIT, NO_FREE_SLICES, NO_VALID_POSITION)


@dataclasses.dataclass(frozen=True)
class Profile:
    """A GPU instance profile of one product: ``3g.40gb`` is profile 9 of an H100 80GB."""

    id: int  # the id nvidia-smi prints and ``nvmlDeviceGetGpuInstanceProfileInfo`` answers
    name: str  # "3g.40gb", NVML's "MIG 3g.40gb" without the prefix
    compute_slices: int
    memory_slices: int
    max_instances: int  # on one GPU
    starts: tuple[int, ...]  # the memory slices an instance may start at

    def span(self, start: int) -> int:
        """The memory slices an instance starting at ``start`` takes, as a mask."""
        return ((1 << self.memory_slices) - 1) << start

    @functools.cached_property
    def spans(self) -> tuple[int, ...]:
        """``span`` of each start, in the order of ``starts``."""
        return tuple(self.span(start) for start in self.starts)

    @property
    def placements(self) -> str:
        """The placements as ``nvidia-smi mig -lgipp`` prints them: ``{0,4}:4``."""
        return "{" + ",".join(map(str, self.starts)) + "}:" + str(self.memory_slices)


@dataclasses.dataclass(frozen=True)
class Product:
    """One GPU product's MIG table."""

    name: str  # "H100 80GB"
    pci_ids: tuple[str, ...]  # NVIDIA PCI device ids (lower case) of the boards
    memory_slices: int
    compute_slices: int
    profiles: tuple[Profile, ...]  # largest first

    def profile(self, name: str) -> Profile:
        """The profile called ``name``; InvalidInput names the ones the product has."""
        for profile in self.profiles:
            if profile.name == name:
                return profile
        raise InvalidInput(
            f"The {self.name} has no MIG profile {name!r}; it has "
            f"{', '.join(p.name for p in self.profiles)}."
        )

    def has(self, name: str) -> bool:
        return any(p.name == name for p in self.profiles)


@dataclasses.dataclass(frozen=True)
class Instance:
    """A GPU instance: its profile's name and the memory slice it starts at."""

    profile: str
    start: int


# Hopper's shapes: (profile id, compute slices, memory slices, max instances, starts,
# media extensions). The +me profile is a 1g with the GPU's media engines: one a GPU.
_HOPPER = (
    (0, 7, 8, 1, (0,), False),
    (5, 4, 4, 1, (0,), False),
    (9, 3, 4, 2, (0, 4), False),
    (14, 2, 2, 3, (0, 2, 4), False),
    (15, 1, 2, 4, (0, 2, 4, 6), False),
    (19, 1, 1, 7, (0, 1, 2, 3, 4, 5, 6), False),
    (20, 1, 1, 1, (0, 1, 2, 3, 4, 5, 6), True),
)


def _hopper(name: str, pci_ids: tuple[str, ...], gb: Mapping[int, int]) -> Product:
    """A Hopper product whose instances of 1, 2, 4 and 8 memory slices are ``gb[n]`` GB."""
    profiles = tuple(
        Profile(
            id=profile_id,
            name=f"{compute}g.{gb[memory]}gb{'+me' if media else ''}",
            compute_slices=compute,
            memory_slices=memory,
            max_instances=most,
            starts=starts,
        )
        for profile_id, compute, memory, most, starts, media in _HOPPER
    )
    return Product(name, pci_ids, 8, 7, profiles)


PRODUCTS = (
    _hopper("H100 80GB", ("2330", "2331"), {1: 10, 2: 20, 4: 40, 8: 80}),  # SXM5, PCIe
    _hopper("H100 94GB", ("2321",), {1: 12, 2: 24, 4: 47, 8: 94}),  # H100 NVL
    _hopper("H200 141GB", ("2335", "233b"), {1: 18, 2: 35, 4: 71, 8: 141}),  # SXM, NVL
)


def product(key: str) -> Product:
    """A product by name (``H200 141GB``, case and spaces ignored) or PCI device id."""
    wanted = key.replace(" ", "").lower()
    for found in PRODUCTS:
        if wanted == found.name.replace(" ", "").lower() or wanted in found.pci_ids:
            return found
    raise InvalidInput(f"No MIG table for GPU {key!r}: Acceleron knows {tables()}.")


def tables() -> str:
    """The products with a MIG table and their PCI ids: ``H100 80GB (2330/2331), ...``."""
    return ", ".join(f"{p.name} ({'/'.join(p.pci_ids)})" for p in PRODUCTS)


def known(key: str) -> bool:
    """Whether ``product(key)`` answers."""
    try:
        product(key)
    except InvalidInput:
        return False
    return True


@dataclasses.dataclass(frozen=True)
class Refusal:
    """Why a GPU cannot take a profile: one of ``REASONS``, and the words for it."""

    reason: str
    message: str


@dataclasses.dataclass(frozen=True)
class Layout:
    """The GPU instances one GPU of ``product`` holds. Make one with ``Layout.of`` (or
    ``adding``), which checks them; ``mask`` and ``compute`` are derived from them."""

    product: Product
    instances: tuple[Instance, ...] = ()
    mask: int = 0  # the memory slices taken
    compute: int = 0  # the compute slices taken

    @classmethod
    def of(cls, product: Product, instances: Iterable[Instance] = ()) -> Layout:
        """The layout of these instances; InvalidInput when one names a profile the
        product lacks, starts where its profile may not, overlaps another, or is one
        too many (of its profile, or of the GPU's compute slices)."""
        layout = cls(product)
        for instance in instances:
            layout = layout.adding(instance)
        return layout

    def adding(self, instance: Instance) -> Layout:
        """This layout with one more instance, checked as ``of`` checks."""
        profile = self.product.profile(instance.profile)
        if instance.start not in profile.starts:
            raise InvalidInput(
                f"A {profile.name} instance cannot start at memory slice {instance.start} "
                f"of an {self.product.name}: its placements are {profile.placements}."
            )
        refusal = self.refusal(profile.name)
        if refusal is not None and refusal.reason != NO_VALID_POSITION:
            raise InvalidInput(refusal.message)
        span = profile.span(instance.start)
        if self.mask & span:
            raise InvalidInput(
                f"A {profile.name} instance at memory slice {instance.start} overlaps "
                f"{', '.join(self._overlapping(span))}."
            )
        return Layout(
            self.product,
            (*self.instances, instance),
            self.mask | span,
            self.compute + profile.compute_slices,
        )

    def removing(self, instance: Instance) -> Layout:
        """This layout without ``instance``; InvalidInput when it holds none such."""
        if instance not in self.instances:
            raise InvalidInput(
                f"No {instance.profile} instance starts at memory slice {instance.start}."
            )
        kept = list(self.instances)
        kept.remove(instance)
        return Layout.of(self.product, kept)

    def _overlapping(self, span: int) -> list[str]:
        return [
            f"the {i.profile} at {i.start}"
            for i in self.instances
            if self.product.profile(i.profile).span(i.start) & span
        ]

    @functools.cached_property
    def counts(self) -> Counter[str]:
        return Counter(i.profile for i in self.instances)

    @property
    def free_memory_slices(self) -> int:
        return self.product.memory_slices - self.mask.bit_count()

    @property
    def free_compute_slices(self) -> int:
        return self.product.compute_slices - self.compute

    def free_starts(self, name: str) -> tuple[int, ...]:
        """The positions a new instance of profile ``name`` could start at now."""
        profile = self.product.profile(name)
        if not self._room_for(profile):
            return ()
        return tuple(
            s for s, span in zip(profile.starts, profile.spans, strict=True) if not self.mask & span
        )

    def fits(self, name: str) -> bool:
        """Whether the GPU can take one more instance of profile ``name``."""
        return bool(self.free_starts(name))

    def refusal(self, name: str) -> Refusal | None:
        """Why the GPU cannot take profile ``name``, or None when it can."""
        if not self.product.has(name):
            return Refusal(UNKNOWN_PROFILE, f"The {self.product.name} has no {name} profile.")
        profile = self.product.profile(name)
        if self.counts[name] >= profile.max_instances:
            return Refusal(
                INSTANCE_LIMIT,
                f"The GPU already holds {profile.max_instances} {name} instance(s), as many "
                f"as an {self.product.name} allows.",
            )
        if (
            self.free_memory_slices < profile.memory_slices
            or self.free_compute_slices < profile.compute_slices
        ):
            return Refusal(
                NO_FREE_SLICES,
                f"A {name} needs {profile.memory_slices} memory and {profile.compute_slices} "
                f"compute slices; the GPU has {self.free_memory_slices} and "
                f"{self.free_compute_slices} free.",
            )
        if not self.free_starts(name):
            return Refusal(
                NO_VALID_POSITION,
                f"The GPU has {self.free_memory_slices} memory slices free "
                f"({self.free_slices_text()}), but a {name} may start only at "
                f"{profile.placements} and each such position is partly taken.",
            )
        return None

    def free_slices_text(self) -> str:
        """The free memory slices, as ``1, 5-7``."""
        free = [i for i in range(self.product.memory_slices) if not self.mask >> i & 1]
        runs: list[list[int]] = []
        for i in free:
            if runs and runs[-1][-1] == i - 1:
                runs[-1].append(i)
            else:
                runs.append([i])
        return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)

    def capacity(self, profile: Profile) -> int:
        """How many more instances of ``profile`` the GPU could take at once."""
        return capacity(profile, self.mask, self.free_compute_slices, self.counts[profile.name])

    def _room_for(self, profile: Profile) -> bool:
        return (
            self.counts[profile.name] < profile.max_instances
            and self.free_compute_slices >= profile.compute_slices
        )


def capacity(profile: Profile, mask: int, free_compute: int, held: int) -> int:
    """How many more instances of ``profile`` fit side by side on a GPU whose taken
    memory slices are ``mask``, with ``free_compute`` compute slices left and ``held``
    instances of the profile already: its free positions (each profile's positions are
    aligned to its size, so they never overlap one another), bounded by the compute
    slices and the profile's limit."""
    room = min(profile.max_instances - held, free_compute // profile.compute_slices)
    if room <= 0:
        return 0
    free = 0
    for span in profile.spans:
        if not mask & span:
            free += 1
    return min(room, free)
