"""The kind of a device's memory, as spec 001 names memory resource classes
(``CUSTOM_ACCELERATOR_MEMORY_<DDR|HBM|GDDR...>``).

Drivers read it where the hardware tells it: NVML's product name carries it on data
centre GPUs ("NVIDIA H100 80GB HBM3"); otherwise each driver keeps a table of the
cards it supports (a PAC Arria10 has DDR4, an Alveo U280 HBM2). The class names the
memory family, not its generation: HBM3 and HBM2e are both ``HBM``, so that a flavor
asking for HBM fits either.
"""

from __future__ import annotations

import re

# Longest first: GDDR6 is GDDR, not DDR; LPDDR5 is LPDDR.
FAMILIES = ("LPDDR", "GDDR", "HBM", "DDR", "QDR")
_WORD = re.compile(r"\b(" + "|".join(FAMILIES) + r")\d*[A-Z]?\b", re.IGNORECASE)


def family(text: str | None) -> str | None:
    """The memory family a text names (``HBM3`` -> ``HBM``, ``GDDR6X`` -> ``GDDR``), or
    None when it names none."""
    match = _WORD.search(text or "")
    return match.group(1).upper() if match else None
