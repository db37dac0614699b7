"""The reference cloud's cleaning command (``[agent] cleaning_command``): a cleaning the
e2e tests hold open, to see what the cloud does while a device is being cleaned.

    python cloud/cleaning_gate.py DIRECTORY ADDRESS

It waits until ``DIRECTORY/open-ADDRESS`` exists (the test's word that the cleaning may
end), at most ``LIMIT`` seconds, then exits 0; ``DIRECTORY/failed-ADDRESS`` instead makes
it exit 1 (a cleaning that fails). ``DIRECTORY/at-ADDRESS`` tells the test it began.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

LIMIT = 120.0  # seconds; the cloud's [cleaning] timeout is longer


def main(directory: str, address: str) -> int:
    gate = Path(directory)
    gate.mkdir(parents=True, exist_ok=True)
    (gate / f"at-{address}").touch()
    deadline = time.monotonic() + LIMIT
    while time.monotonic() < deadline:
        if (gate / f"failed-{address}").exists():
            return 1
        if (gate / f"open-{address}").exists():
            return 0
        time.sleep(0.2)
    return 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
