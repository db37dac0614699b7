"""Names Acceleron publishes to Placement: resource classes, traits, provider names and uuids.

Pure functions, no I/O. Every name is normalised the way spec 004 asks — upper case,
spaces and hyphens become underscores — and then checked against Placement's rules. A
region type or function UUID is published in two spellings, however the driver reported
it: its 32 hex digits, ``CE48969398F0...`` (upstream Cyborg's, so existing flavors
match), and spec 004's, its groups joined by underscores, ``CE489693_98F0_...``.
Placement's rules: a custom name matches ``^CUSTOM_[A-Z0-9_]+$`` and has at most 255
characters; a standard trait or class must be one os-traits / os-resource-classes knows.
A value that cannot be made valid raises :class:`~acceleron.exceptions.InvalidPlacementName`
naming the driver and the device it came from (pass ``origin=``).

Resource classes (spec 001)::

    CUSTOM_ACCELERATOR_<TYPE>            CUSTOM_ACCELERATOR_FPGA
    CUSTOM_ACCELERATOR_MEMORY_<MEMORY>   CUSTOM_ACCELERATOR_MEMORY_HBM (the memory type,
                                         DDR, HBM, GDDR...; the accelerator type, _GPU,
                                         where the driver cannot tell)
    FPGA, PGPU, VGPU                     upstream Cyborg's standard classes, with standard=True

Traits::

    device type        CUSTOM_<TYPE>_<VENDOR>                  CUSTOM_FPGA_INTEL
    product            CUSTOM_<TYPE>_<VENDOR>_<PRODUCT>        CUSTOM_FPGA_INTEL_PAC_ARRIA10
    family (spec 001)  CUSTOM_<TYPE>_<VENDOR>_<FAMILY>         CUSTOM_FPGA_INTEL_ARRIA10
                       (FAMILIES: product -> family, for the cards drivers support)
    region type        spec 004: CUSTOM_<TYPE>_<VENDOR>_REGION_<ID>
                       spec 001: CUSTOM_<TYPE>_REGION_<VENDOR>_<ID>   (= upstream Cyborg's)
    function           spec 004: CUSTOM_<TYPE>_<VENDOR>_FUNCTION_<ID>
                       spec 001: CUSTOM_<TYPE>_FUNCTION_<VENDOR>_<ID>
                       upstream: CUSTOM_<TYPE>_FUNCTION_ID_<VENDOR>_<ID>
                       each form with both spellings of a UUID <ID>: 32 hex digits
                       (CE48969398F0...) and spec 004's groups (CE489693_98F0_...)
    programmable       CUSTOM_PROGRAMMABLE
    functionality      CUSTOM_<TYPE>_COMPUTE | _NETWORK | _STORAGE
    owner              OWNER_CYBORG (standard; Acceleron speaks Cyborg's API)

Resource providers: one per device and one per deployable under it (region, VF pool,
vGPU type, MIG profile). The name is ``<host>_<address>`` for a device (upstream
Cyborg's deployable naming) and ``<host>_<address>_<key>`` for a deployable, where
``address`` is the PCI address in canonical form (``0000:5e:00.0``) or another stable
device address, and ``key`` is the deployable's stable key within the device
(``region0``, ``vf_pool``, ``nvidia-222``). The uuid is
``uuid5(PROVIDER_NAMESPACE, "<host>\\n<address>\\n<key>")``: deterministic, so every
sync and every replica computes the same one, and unique across the cluster as long as
host names are (which Nova requires of compute nodes anyway). Names longer than
Placement's 200 characters are cut and end with a hash of the full name.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import os_resource_classes
import os_traits

from acceleron.exceptions import InvalidPlacementName

NAME_MAX = 255
PROVIDER_NAME_MAX = 200
CUSTOM_RE = re.compile(r"CUSTOM_[A-Z0-9_]+")
_TOKEN_RE = re.compile(r"[A-Z0-9_]+")

PROGRAMMABLE = "CUSTOM_PROGRAMMABLE"
OWNER = "OWNER_CYBORG"
# On a provider in maintenance that some device profile tolerates (docs/health.md).
MAINTENANCE = "CUSTOM_ACCELERON_MAINTENANCE"
REASON_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def reason_name(reason: str | None) -> str:
    """The name of a maintenance reason, what tolerations match: the text before the first
    ``:``, lower case (``burn-in: new card`` is ``burn-in``)."""
    return (reason or "").split(":", 1)[0].strip().lower()


TOLERATIONS_KEY = "accel:tolerations"


def tolerations(group: object) -> list[str]:
    """The maintenance reasons a device profile group tolerates (``accel:tolerations``,
    names separated by commas)."""
    if not isinstance(group, Mapping):
        return []
    value = group.get(TOLERATIONS_KEY)
    return [n.strip().lower() for n in str(value).split(",") if n.strip()] if value else []


def untolerant(groups: Sequence[Mapping[str, str]]) -> list[dict[str, str]]:
    """The groups as Acceleron's own claims query them: a group that tolerates no
    maintenance also forbids ``MAINTENANCE``, so it does not land on a provider whose
    maintenance another profile tolerates (its bind would be refused)."""
    out = []
    for group in groups:
        group = dict(group)
        if not tolerations(group) and not any(k.endswith(f":{MAINTENANCE}") for k in group):
            group[f"trait:{MAINTENANCE}"] = "forbidden"
        out.append(group)
    return out


def tolerated(reason: str | None, tolerations: Iterable[str]) -> bool:
    """Whether a maintenance with ``reason`` is one of ``tolerations`` (names)."""
    name = reason_name(reason)
    return bool(name) and name in {t.strip().lower() for t in tolerations}


def maintenance_traits(reason: str | None) -> set[str]:
    """The traits of a provider whose maintenance is tolerated: the general one, and one
    naming the reason (``CUSTOM_ACCELERON_MAINTENANCE_BURN_IN``) when it can be a name."""
    name = reason_name(reason)
    traits = {MAINTENANCE}
    if REASON_NAME_RE.fullmatch(name):
        traits.add(custom("ACCELERON_MAINTENANCE", name))
    return traits


FUNCTIONALITIES = ("COMPUTE", "NETWORK", "STORAGE")
# Upstream Cyborg's standard classes by device type (used with standard=True).
STANDARD_CLASSES = {"FPGA": "FPGA", "GPU": "PGPU", "PGPU": "PGPU", "VGPU": "VGPU"}
# Fixed forever: changing it would give every provider a new uuid.
PROVIDER_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "urn:acceleron:placement:resource-provider")

_PCI_RE = re.compile(
    r"(?:(?P<domain>[0-9a-f]{4,8}):)?(?P<bus>[0-9a-f]{2}):(?P<dev>[0-1][0-9a-f])\.(?P<fn>[0-7])",
    re.IGNORECASE,
)
_ADDRESS_RE = re.compile(r"[\x21-\x7e]+")


@dataclass(frozen=True)
class Origin:
    """Where a value came from, for error messages: the driver and the device."""

    driver: str = "unknown driver"
    device: str = "unknown device"


UNKNOWN = Origin()


class TraitForm(enum.Enum):
    """Which spec's spelling of region type and function traits."""

    SPEC_004 = "004"  # CUSTOM_<TYPE>_<VENDOR>_REGION_<ID>
    SPEC_001 = "001"  # CUSTOM_<TYPE>_REGION_<VENDOR>_<ID>
    UPSTREAM = "upstream"  # functions: CUSTOM_<TYPE>_FUNCTION_ID_<VENDOR>_<ID>


def _fail(origin: Origin, what: str, value: str, why: str) -> InvalidPlacementName:
    return InvalidPlacementName(
        f"{origin.driver} reported {what} {value!r} for device {origin.device}, which cannot "
        f"be made a Placement name: {why}",
        driver=origin.driver,
        device=origin.device,
        name=value,
    )


def normalize(value: str, *, what: str = "a name", origin: Origin = UNKNOWN) -> str:
    """Spec 004: upper case, spaces and hyphens to underscores; only A-Z, 0-9 and _ remain."""
    token = value.strip().upper().replace(" ", "_").replace("-", "_")
    if not token or not _TOKEN_RE.fullmatch(token):
        raise _fail(origin, what, value, "only letters, digits, spaces, '-' and '_' may be used.")
    return token


_HEX_ID_RE = re.compile(r"^[0-9A-F]{32}$")


def fold_key(value: str, *, what: str = "a key", origin: Origin = UNKNOWN) -> str:
    """A model or region type as ``[placement] functionality`` compares them:
    :func:`normalize`, and a UUID (hyphenated or not) as its 32 hex digits."""
    token = normalize(value, what=what, origin=origin)
    bare = token.replace("_", "")
    return bare if _HEX_ID_RE.match(bare) else token


def is_custom(name: str) -> bool:
    """Whether ``name`` is a valid custom trait or resource class name."""
    return CUSTOM_RE.fullmatch(name) is not None and len(name) <= NAME_MAX


def is_trait(name: str) -> bool:
    """Whether Placement accepts ``name`` as a trait: standard (os-traits) or custom."""
    return is_custom(name) or name in _standard_traits()


def is_resource_class(name: str) -> bool:
    """Whether Placement accepts ``name`` as a resource class: standard or custom."""
    return is_custom(name) or name in os_resource_classes.STANDARDS


def check_custom(name: str, *, what: str = "name", origin: Origin = UNKNOWN) -> str:
    """``name`` if it is a valid custom trait or resource class name, else an error."""
    if not CUSTOM_RE.fullmatch(name):
        raise _fail(origin, what, name, "a custom name must match ^CUSTOM_[A-Z0-9_]+$.")
    if len(name) > NAME_MAX:
        raise _fail(origin, what, name, f"it is longer than {NAME_MAX} characters.")
    return name


@functools.cache
def _standard_traits() -> frozenset[str]:
    return frozenset(os_traits.get_traits())


def check_trait(name: str, *, origin: Origin = UNKNOWN) -> str:
    """``name`` if it is a standard trait os-traits knows or a valid custom trait."""
    if name.startswith("CUSTOM_"):
        return check_custom(name, what="trait", origin=origin)
    if not is_trait(name):
        raise _fail(origin, "trait", name, "it is neither a standard trait nor CUSTOM_*.")
    return name


def check_resource_class(name: str, *, origin: Origin = UNKNOWN) -> str:
    """``name`` if it is a standard resource class or a valid custom one."""
    if name.startswith("CUSTOM_"):
        return check_custom(name, what="resource class", origin=origin)
    if not is_resource_class(name):
        raise _fail(origin, "resource class", name, "it is neither standard nor CUSTOM_*.")
    return name


def custom(*parts: str, origin: Origin = UNKNOWN) -> str:
    """``CUSTOM_`` followed by the normalised parts joined by underscores, checked."""
    tokens = [normalize(part, origin=origin) for part in parts]
    return check_custom("_".join(["CUSTOM", *tokens]), origin=origin)


# Resource classes


def accelerator_class(device_type: str, *, standard: bool = False, origin: Origin = UNKNOWN) -> str:
    """``CUSTOM_ACCELERATOR_<TYPE>``, or upstream's standard class when ``standard`` is set.

    With ``standard=True`` a type without a standard class (QAT, say) keeps its custom one.
    """
    kind = normalize(device_type, what="device type", origin=origin)
    if standard and kind in STANDARD_CLASSES:
        return check_resource_class(STANDARD_CLASSES[kind], origin=origin)
    return custom("ACCELERATOR", kind, origin=origin)


def memory_class(kind: str, *, origin: Origin = UNKNOWN) -> str:
    """``CUSTOM_ACCELERATOR_MEMORY_<KIND>``: spec 001 names the memory type (``_DDR``,
    ``_HBM``); where the driver cannot tell, the sync passes the accelerator type."""
    return custom("ACCELERATOR", "MEMORY", kind, origin=origin)


_ACCELERATOR_PREFIX = "CUSTOM_ACCELERATOR_"
_MEMORY_PREFIX = "CUSTOM_ACCELERATOR_MEMORY_"
MEMORY_PREFIX = _MEMORY_PREFIX
_STANDARD_ACCELERATOR_CLASSES = frozenset(STANDARD_CLASSES.values())  # FPGA, PGPU, VGPU
_RESOURCES = "resources:"


def is_memory_class(name: str) -> bool:
    """Whether ``name`` is an accelerator memory class (counted in MB, not accelerators)."""
    return name.startswith(_MEMORY_PREFIX)


def is_accelerator_class(name: str) -> bool:
    """Whether a unit of ``name`` is one accelerator (one request, one attach handle):
    ``CUSTOM_ACCELERATOR_<TYPE>`` other than memory, or upstream's standard classes
    (``FPGA``, ``PGPU``, ``VGPU``). Memory (in MB) and every other class are amounts
    that travel with a group's allocation, never accelerators."""
    if name.startswith(_ACCELERATOR_PREFIX):
        return not name.startswith(_MEMORY_PREFIX) and len(name) > len(_ACCELERATOR_PREFIX)
    return name in _STANDARD_ACCELERATOR_CLASSES


def accelerator_amounts(group: Mapping[str, object]) -> dict[str, int]:
    """The accelerators a device profile group asks for, by class, in the group's order
    (``resources:<class>`` entries of :func:`is_accelerator_class` classes; an amount
    that is not a whole number counts none)."""
    found: dict[str, int] = {}
    for key, value in group.items():
        name = key[len(_RESOURCES) :] if key.startswith(_RESOURCES) else ""
        text = str(value).strip()
        if is_accelerator_class(name) and text.isascii() and text.isdigit():
            found[name] = found.get(name, 0) + int(text)
    return found


def accelerators(group: Mapping[str, object]) -> list[str]:
    """The class of each accelerator a device profile group asks for, one entry per
    accelerator (one request each), in order: ``FPGA=2, CUSTOM_ACCELERATOR_MEMORY_HBM=100``
    is ``[FPGA, FPGA]``. The one place that says how many accelerators a group is."""
    return [rc for rc, n in accelerator_amounts(group).items() for _ in range(n)]


# Traits


def device_type_trait(device_type: str, vendor: str, *, origin: Origin = UNKNOWN) -> str:
    """``CUSTOM_<TYPE>_<VENDOR>``, e.g. ``CUSTOM_FPGA_INTEL``."""
    return custom(device_type, vendor, origin=origin)


def product_trait(device_type: str, vendor: str, product: str, *, origin: Origin = UNKNOWN) -> str:
    """``CUSTOM_<TYPE>_<VENDOR>_<PRODUCT>``, e.g. ``CUSTOM_FPGA_INTEL_PAC_ARRIA10``."""
    return custom(device_type, vendor, product, origin=origin)


# Spec 001's device family, by vendor and product (the model drivers report): what
# software in an image is built for, not a product name. Cards missing here get no
# family trait (their product trait still names them).
FAMILIES = {
    ("INTEL", "PAC_ARRIA10"): "ARRIA10",
    ("INTEL", "PAC_N3000"): "ARRIA10",
    ("INTEL", "XEON_FPGA"): "ARRIA10",
    ("INTEL", "PAC_D5005"): "STRATIX10",
    ("XILINX", "U200"): "ULTRASCALE_PLUS",
    ("XILINX", "U250"): "ULTRASCALE_PLUS",
    ("XILINX", "U280"): "ULTRASCALE_PLUS",
    ("XILINX", "U50"): "ULTRASCALE_PLUS",
    ("NVIDIA", "V100"): "VOLTA",
    ("NVIDIA", "T4"): "TURING",
    ("NVIDIA", "A100"): "AMPERE",
    ("NVIDIA", "A40"): "AMPERE",
    ("NVIDIA", "L4"): "ADA_LOVELACE",
    ("NVIDIA", "H100"): "HOPPER",
}


def family_of(vendor: str, product: str) -> str | None:
    """The family of a product in :data:`FAMILIES` (names compared normalised), if any;
    a model that is itself one of the vendor's families is its own."""
    try:
        key = (normalize(vendor), normalize(product))
    except InvalidPlacementName:
        return None
    if key in FAMILIES:
        return FAMILIES[key]
    known = {family for (maker, _), family in FAMILIES.items() if maker == key[0]}
    return key[1] if key[1] in known else None


def family_trait(
    device_type: str, vendor: str, product: str, *, origin: Origin = UNKNOWN
) -> str | None:
    """Spec 001's family trait ``CUSTOM_<TYPE>_<VENDOR>_<FAMILY>``, e.g.
    ``CUSTOM_FPGA_INTEL_ARRIA10`` for a PAC Arria10; None for a product not in
    :data:`FAMILIES`."""
    family = family_of(vendor, product)
    return None if family is None else custom(device_type, vendor, family, origin=origin)


def _id_trait(
    kind: str, device_type: str, vendor: str, value: str, form: TraitForm, origin: Origin
) -> str:
    ident = normalize(value, what=f"a {kind.lower()} id", origin=origin)
    if form is TraitForm.SPEC_004:
        return custom(device_type, vendor, kind, ident, origin=origin)
    if form is TraitForm.UPSTREAM and kind == "FUNCTION":
        return custom(device_type, "FUNCTION_ID", vendor, ident, origin=origin)
    return custom(device_type, kind, vendor, ident, origin=origin)


def region_type_trait(
    device_type: str,
    vendor: str,
    region_type: str,
    *,
    form: TraitForm = TraitForm.SPEC_004,
    origin: Origin = UNKNOWN,
) -> str:
    """Region type trait in one form (upstream's region form is spec 001's)."""
    return _id_trait("REGION", device_type, vendor, region_type, form, origin)


def function_trait(
    device_type: str,
    vendor: str,
    function_id: str,
    *,
    form: TraitForm = TraitForm.SPEC_004,
    origin: Origin = UNKNOWN,
) -> str:
    """Function trait in one form."""
    return _id_trait("FUNCTION", device_type, vendor, function_id, form, origin)


def _unique(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


def id_spellings(value: str, *, what: str = "an id", origin: Origin = UNKNOWN) -> tuple[str, ...]:
    """Both spellings of a UUID for a trait: its 32 hex digits (upstream Cyborg's, what
    drivers report) and spec 004's, its groups joined by underscores; ``ce48...08a``
    gives ``CE48...08A`` and ``CE489693_98F0_5F33_946D_560708BE108A``, however it was
    reported. Any other id has one spelling, :func:`normalize`'s."""
    token = normalize(value, what=what, origin=origin)
    bare = token.replace("_", "")
    if not _HEX_ID_RE.match(bare):
        return (token,)
    return (bare, "_".join((bare[:8], bare[8:12], bare[12:16], bare[16:20], bare[20:])))


def region_type_traits(
    device_type: str, vendor: str, region_type: str, *, origin: Origin = UNKNOWN
) -> tuple[str, ...]:
    """The region type trait in every form (spec 004, spec 001 = upstream), each with
    both spellings of the id (:func:`id_spellings`), so flavors written any way match."""
    forms = (TraitForm.SPEC_004, TraitForm.SPEC_001)
    spellings = id_spellings(region_type, what="a region id", origin=origin)
    return _unique(
        region_type_trait(device_type, vendor, ident, form=f, origin=origin)
        for f in forms
        for ident in spellings
    )


def function_traits(
    device_type: str, vendor: str, function_id: str, *, origin: Origin = UNKNOWN
) -> tuple[str, ...]:
    """The function trait in every form (spec 004, spec 001, upstream Cyborg), each with
    both spellings of the id."""
    spellings = id_spellings(function_id, what="a function id", origin=origin)
    return _unique(
        function_trait(device_type, vendor, ident, form=f, origin=origin)
        for f in TraitForm
        for ident in spellings
    )


def functionality_trait(device_type: str, functionality: str, *, origin: Origin = UNKNOWN) -> str:
    """``CUSTOM_<TYPE>_COMPUTE``, ``_NETWORK`` or ``_STORAGE`` (spec 001)."""
    kind = normalize(functionality, what="functionality", origin=origin)
    if kind not in FUNCTIONALITIES:
        raise _fail(origin, "functionality", functionality, f"use one of {FUNCTIONALITIES}.")
    return custom(device_type, kind, origin=origin)


# Resource providers


def canonical_address(address: str, *, origin: Origin = UNKNOWN) -> str:
    """A PCI address as ``dddd:bb:dd.f`` in lower case (domain 0000 when left out).

    Any other printable address without spaces is kept as it is, for devices that are
    not on PCI.
    """
    value = address.strip()
    match = _PCI_RE.fullmatch(value)
    if match:
        domain = (match["domain"] or "0000").lower().rjust(4, "0")
        return f"{domain}:{match['bus'].lower()}:{match['dev'].lower()}.{match['fn']}"
    if not _ADDRESS_RE.fullmatch(value):
        raise _fail(origin, "device address", address, "it is empty or holds spaces.")
    return value


def _check_word(value: str, what: str, origin: Origin) -> str:
    if not _ADDRESS_RE.fullmatch(value):
        raise _fail(origin, what, value, "it is empty or holds spaces.")
    return value


def _provider_parts(host: str, address: str, key: str, origin: Origin) -> list[str]:
    parts = [_check_word(host, "host name", origin), canonical_address(address, origin=origin)]
    if key:
        parts.append(_check_word(key, "deployable key", origin))
    return parts


def provider_name(host: str, address: str, key: str = "", *, origin: Origin = UNKNOWN) -> str:
    """``<host>_<address>`` for a device, ``<host>_<address>_<key>`` for a deployable."""
    name = "_".join(_provider_parts(host, address, key, origin))
    if len(name) <= PROVIDER_NAME_MAX:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    return f"{name[: PROVIDER_NAME_MAX - 17]}_{digest}"


def provider_uuid(host: str, address: str, key: str = "", *, origin: Origin = UNKNOWN) -> str:
    """The provider's deterministic uuid: uuid5 over host, address and deployable key."""
    parts = _provider_parts(host, address, key, origin)
    seed = "\n".join(parts if key else [*parts, ""])
    return str(uuid.uuid5(PROVIDER_NAMESPACE, seed))


def pool_uuid(host: str, key: str) -> str:
    """A pool's deterministic uuid (uuid5 over the host and the pool's key): the same on
    every sync and in every process, unique across the cloud."""
    return str(uuid.uuid5(PROVIDER_NAMESPACE, f"pool\n{host}\n{key}"))


def pool_name(host: str, resource_class: str, key: str) -> str:
    """``<host>_<class>_<first 8 hex of the key>``, e.g. ``compute-1_GPU_3fa2b1c0``: the
    accelerator class without ``CUSTOM_ACCELERATOR_``, a pool's devices being identical."""
    short = resource_class.removeprefix("CUSTOM_ACCELERATOR_")
    tail = f"_{short}_{key[:8]}"
    return f"{host[: PROVIDER_NAME_MAX - len(tail)]}{tail}"
