"""A JSON file a host keeps on its own disk (the fake driver's state, the NVIDIA driver's
MIG slot map, the agent's task journal): read whole, a missing file as nothing and a
damaged one as nothing with a warning; written whole into a new file, flushed to disk,
that then replaces the old one, so that a crash leaves the old file or the new, never
half of one."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

LOG = logging.getLogger(__name__)


def load(path: Path, what: str) -> Any:
    """What the file holds; None when it is missing, or unreadable (``what`` it is, in
    the warning)."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        LOG.warning("Ignoring the unreadable %s %s: %s", what, path, error)
        return None


def replace(path: Path, data: Any) -> None:
    """Write ``data`` as the file's whole content, atomically (key order kept)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "w", dir=path.parent, prefix=f".{path.name}-", delete=False
    ) as tmp:
        json.dump(data, tmp, indent=1)
        tmp.flush()
        os.fsync(tmp.fileno())
    os.replace(tmp.name, path)
