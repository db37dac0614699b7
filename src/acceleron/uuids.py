"""What counts as a UUID, once for the whole code base.

A UUID is 32 hexadecimal digits, in any case, written either in the dashed
8-4-4-4-12 form or with no dash at all. Braces, ``urn:uuid:`` prefixes, stray
dashes and surrounding white space (all of which ``uuid.UUID`` accepts) are not:
an identifier that passes here is one the API can echo back unchanged.
"""

from __future__ import annotations

import re
import uuid

_UUID_RE = re.compile(
    r"[0-9a-f]{8}(-?)[0-9a-f]{4}\1[0-9a-f]{4}\1[0-9a-f]{4}\1[0-9a-f]{12}", re.IGNORECASE
)


def is_uuid_like(value: str) -> bool:
    """Whether ``value`` is a UUID as this module's docstring spells one."""
    return _UUID_RE.fullmatch(value) is not None


def canonical(value: str) -> str:
    """``value`` (UUID-like, see ``is_uuid_like``) as a lower-case dashed UUID."""
    if not is_uuid_like(value):
        raise ValueError(f"{value!r} is not a UUID")
    return str(uuid.UUID(hex=value))
