"""Running a vendor's programming tool: one configurable command line, no shell.

The command is an option (``[intel_fpga] program_command``...) whose words may hold
``{placeholders}``; each word is formatted on its own after splitting, so a value
with spaces stays one argument and nothing is ever interpreted by a shell.
"""

from __future__ import annotations

import logging
import shlex
import subprocess
from pathlib import Path

from acceleron.drivers.errors import DriverConfigError, ProgrammingError
from acceleron.drivers.sysfs import parse_bdf

LOG = logging.getLogger(__name__)
_TAIL = 2000  # characters of the tool's output kept in an error message


def build_argv(template: str, values: dict[str, str]) -> list[str]:
    """Split ``template`` like a shell would, then fill each word's placeholders."""
    try:
        return [word.format(**values) for word in shlex.split(template)]
    except (KeyError, IndexError, ValueError) as error:
        known = ", ".join(f"{{{name}}}" for name in sorted(values))
        raise DriverConfigError(
            f"program command {template!r} is invalid ({error}); placeholders: {known}"
        ) from error


def run(
    template: str, values: dict[str, str], timeout: float, what: str = "programming tool"
) -> str:
    """Run the command; return its output, or raise ProgrammingError saying why not."""
    argv = build_argv(template, values)
    if not argv:
        raise DriverConfigError(f"the {what}'s command is empty")
    LOG.info("%s: %s", what, shlex.join(argv))
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError as error:
        raise ProgrammingError(f"{what} {argv[0]!r} is not installed") from error
    except PermissionError as error:
        raise ProgrammingError(f"{what} {argv[0]!r} cannot be run: {error}") from error
    except subprocess.TimeoutExpired as error:
        raise ProgrammingError(f"{argv[0]} did not finish within {timeout:g} s") from error
    if done.returncode != 0:
        output = (done.stderr or done.stdout or "").strip()[-_TAIL:]
        raise ProgrammingError(f"{argv[0]} failed with exit status {done.returncode}: {output}")
    return done.stdout


def pci_values(address: str, image: Path) -> dict[str, str]:
    """Placeholders for a PCI target: {address} (dddd:bb:ss.f), {segment}, {bus},
    {device}, {function} (hex with 0x, as fpgaconf takes them) and {image}."""
    bdf = parse_bdf(address)
    return {
        "address": address,
        "segment": f"0x{bdf.domain:04x}",
        "bus": f"0x{bdf.bus:02x}",
        "device": f"0x{bdf.slot:02x}",
        "function": f"0x{bdf.function:x}",
        "image": str(image),
    }
