"""What a bitstream is, whichever store holds it, and how look-up keys compare.

Function ids and region types are UUIDs (spec 002, spec 004). Drivers, Glance
images and device profiles do not agree on how they spell one, so they are
compared folded: lower-case hex with the dashes removed. Stores keep the
canonical spelling (lower case, dashed).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from types import MappingProxyType

from acceleron.bitstreams import signatures
from acceleron.exceptions import InvalidInput
from acceleron.text import has_control
from acceleron.uuids import parse

NAME_MAX = 255
VALUE_MAX = 255

# The metadata every store understands, by the Glance image property it maps to.
FUNCTION_UUID_KEY = "accel:function_uuid"
FUNCTION_NAME_KEY = "accel:function_name"
REGION_TYPE_KEY = "accel:region_type_uuid"
VENDOR_KEY = "accel:vendor"
ACCEL_KEYS = frozenset({FUNCTION_UUID_KEY, FUNCTION_NAME_KEY, REGION_TYPE_KEY, VENDOR_KEY})

# Who sees a bitstream: every project ("public"), or only the project that owns it.
PUBLIC = "public"
VISIBILITIES = ("private", PUBLIC)
# A record created without its bytes yet; an upload makes it active.
QUEUED = "queued"
ACTIVE = "active"

# Names an extra property may not take: Glance's own image attributes and the keys above.
RESERVED_KEYS = ACCEL_KEYS | frozenset(
    {
        "id",
        "name",
        "status",
        "visibility",
        "protected",
        "checksum",
        "os_hash_algo",
        "os_hash_value",
        "owner",
        "size",
        "virtual_size",
        "min_ram",
        "min_disk",
        "created_at",
        "updated_at",
        "tags",
        "self",
        "file",
        "schema",
        "disk_format",
        "container_format",
        "direct_url",
        "locations",
        "os_hidden",
        "stores",
    }
)


def fold_uuid(value: str) -> str:
    """The form function ids and region types are compared in."""
    return value.strip().lower().replace("-", "")


def _optional_uuid(value: str | None, field: str) -> str | None:
    return None if value is None else parse(value, field)


def check_text(value: str, field: str, limit: int = NAME_MAX) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"{field}: must be a non-empty string.")
    if len(value) > limit or has_control(value):
        raise InvalidInput(
            f"{field}: at most {limit} characters and no control characters, got {value[:64]!r}."
        )
    return value


def _optional_text(value: str | None, field: str, limit: int = NAME_MAX) -> str | None:
    return None if value is None else check_text(value, field, limit)


def _optional_choice(value: str | None, field: str, choices: tuple[str, ...]) -> str | None:
    if value is not None and value not in choices:
        raise InvalidInput(f"{field}: {value!r} is not one of {', '.join(choices)}.")
    return value


def _check_properties(properties: Mapping[str, str]) -> Mapping[str, str]:
    for key, value in properties.items():
        check_text(key, "properties", NAME_MAX)
        if key in RESERVED_KEYS:
            raise InvalidInput(
                f"properties: {key!r} is reserved; give it as its own field, or pick another key."
            )
        limit = signatures.SIGNATURE_MAX if key == signatures.SIGNATURE_KEY else VALUE_MAX
        check_text(value, f"properties[{key!r}]", limit)
    signatures.check_upload(properties)
    return MappingProxyType(dict(properties))


@dataclasses.dataclass(frozen=True)
class Bitstream:
    """One bitstream as a store describes it. ``id`` is its UUID (the Glance image id)."""

    id: str
    name: str
    size: int | None
    # Algorithm and hex digest the bytes must hash to: sha256 locally, Glance's os_hash_*.
    hash_algo: str | None
    hash_value: str | None
    vendor: str | None = None
    function_uuid: str | None = None
    function_name: str | None = None
    region_type_uuid: str | None = None
    properties: Mapping[str, str] = dataclasses.field(default_factory=dict, hash=False)
    status: str = ACTIVE
    owner: str | None = None
    visibility: str = PUBLIC
    created_at: dt.datetime | None = None
    updated_at: dt.datetime | None = None

    def describe(self) -> str:
        return f"{self.id} ({self.name!r})"

    def visible_to(self, project: str | None) -> bool:
        """Whether ``project`` sees it (None: a caller who sees every project's)."""
        return project is None or self.visibility == PUBLIC or self.owner == project


@dataclasses.dataclass(frozen=True)
class NewBitstream:
    """What an uploader says about the bytes it uploads."""

    name: str
    vendor: str | None = None
    function_uuid: str | None = None
    function_name: str | None = None
    region_type_uuid: str | None = None
    properties: Mapping[str, str] = dataclasses.field(default_factory=dict, hash=False)
    owner: str | None = None
    # None: the store's default (public in the local store, Glance's own otherwise).
    visibility: str | None = None

    def normalized(self) -> NewBitstream:
        """Checked, with UUIDs in canonical form; InvalidInput names the bad field."""
        return NewBitstream(
            name=check_text(self.name, "name"),
            vendor=_optional_text(self.vendor, "vendor", 64),
            function_uuid=_optional_uuid(self.function_uuid, "function_uuid"),
            function_name=_optional_text(self.function_name, "function_name"),
            region_type_uuid=_optional_uuid(self.region_type_uuid, "region_type_uuid"),
            properties=_check_properties(self.properties),
            owner=_optional_text(self.owner, "owner"),
            visibility=_optional_choice(self.visibility, "visibility", VISIBILITIES),
        )


@dataclasses.dataclass(frozen=True)
class Query:
    """Criteria ANDed together; a criterion left None is not applied.

    Look-ups choose among active bitstreams only; a listing may ask for any
    ``status`` (None). ``project`` limits the result to what that project sees:
    public bitstreams and its own.
    """

    name: str | None = None
    function_uuid: str | None = None
    function_name: str | None = None
    region_type_uuid: str | None = None
    vendor: str | None = None
    status: str | None = ACTIVE
    project: str | None = None

    def normalized(self) -> Query:
        return dataclasses.replace(
            self,
            function_uuid=_optional_uuid(self.function_uuid, "function_id"),
            region_type_uuid=_optional_uuid(self.region_type_uuid, "region type"),
        )

    @property
    def has_criteria(self) -> bool:
        """Whether it asks for some metadata (not only a status or a project's view)."""
        criteria = (self.name, self.function_uuid, self.function_name, self.region_type_uuid,
                    self.vendor)  # fmt: skip
        return any(value is not None for value in criteria)

    def matches(self, bitstream: Bitstream) -> bool:
        return (
            _unset_or_equal(self.name, bitstream.name)
            and _unset_or_equal(self.function_name, bitstream.function_name)
            and _unset_or_same_uuid(self.function_uuid, bitstream.function_uuid)
            and _unset_or_same_uuid(self.region_type_uuid, bitstream.region_type_uuid)
            and _unset_or_equal(self.vendor, bitstream.vendor)
            and _unset_or_equal(self.status, bitstream.status)
            and bitstream.visible_to(self.project)
        )

    def describe(self) -> str:
        parts = [
            f"{label} {value!r}"
            for label, value in (
                ("name", self.name),
                ("function_id", self.function_uuid),
                ("function_name", self.function_name),
                ("region type", self.region_type_uuid),
                ("vendor", self.vendor),
            )
            if value is not None
        ]
        return " and ".join(parts) or "any bitstream"


def _unset_or_equal(wanted: str | None, actual: str | None) -> bool:
    """A filter field matches when it is not set, or equals the bitstream's."""
    return wanted is None or wanted == actual


def _unset_or_same_uuid(wanted: str | None, actual: str | None) -> bool:
    """A uuid filter field matches when it is not set, or names the same uuid in any
    spelling."""
    return wanted is None or (actual is not None and fold_uuid(wanted) == fold_uuid(actual))
