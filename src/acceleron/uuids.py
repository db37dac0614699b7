"""What counts as a UUID, once for the whole code base.

A UUID is 32 hexadecimal digits, in any case, written either in the dashed
8-4-4-4-12 form or with no dash at all. Braces, ``urn:uuid:`` prefixes, stray
dashes and surrounding white space (all of which ``uuid.UUID`` accepts) are not:
an identifier that passes here is one the API can echo back unchanged.

``parse`` is how every part of Acceleron (the API's services and the clients alike)
reads a UUID it was given; nothing else calls ``uuid.UUID`` on outside input.
"""

from __future__ import annotations

import re
import uuid

from acceleron.exceptions import InvalidInput

_UUID_RE = re.compile(
    r"[0-9a-f]{8}(-?)[0-9a-f]{4}\1[0-9a-f]{4}\1[0-9a-f]{4}\1[0-9a-f]{12}", re.IGNORECASE
)


def is_uuid_like(value: str) -> bool:
    """Whether ``value`` is a UUID as this module's docstring spells one."""
    return _UUID_RE.fullmatch(value) is not None


def parse(value: str, field: str) -> str:
    """``value`` as a lower-case dashed UUID; InvalidInput naming ``field`` when it is
    not UUID-like (see ``is_uuid_like``)."""
    if not is_uuid_like(value):
        raise InvalidInput(f"{field}: {value[:64]!r} is not a UUID.")
    return str(uuid.UUID(hex=value))


def same(a: str, b: str) -> bool:
    """Whether two spellings name one UUID (or, not being UUIDs, are equal)."""
    if is_uuid_like(a) and is_uuid_like(b):
        return uuid.UUID(hex=a) == uuid.UUID(hex=b)
    return a == b
