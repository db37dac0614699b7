"""What counts as a control character in text Acceleron takes in, once for the code base.

Names, descriptions, query values and bitstream fields hold no C0 control character and
no DEL. A host report's free text (attribute values a driver read from a device) may
also hold layout: tab, line feed and carriage return. Every check of either kind calls
``has_control``; no other module spells the character ranges.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_CONTROL_BUT_LAYOUT = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def has_control(value: str, *, layout: bool = False) -> bool:
    """Whether ``value`` holds a control character; with ``layout``, tab, line feed and
    carriage return do not count."""
    return (_CONTROL_BUT_LAYOUT if layout else _CONTROL).search(value) is not None
