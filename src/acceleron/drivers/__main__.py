"""Show what the drivers find on this host, without the agent or the API.

    python -m acceleron.drivers [--config-file acceleron.conf] [--drivers intel_fpga,pci]
                                [--root /] [--spec004]

Prints JSON: every device tree (or spec 004's view with ``--spec004``), plus each
driver's health verdict per device. Discovery reads sysfs and NVML only; it needs
no root privileges and changes nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from acceleron import conf as confmod
from acceleron.drivers import load_drivers
from acceleron.drivers.base import spec004_view


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m acceleron.drivers", description=__doc__)
    parser.add_argument("--config-file", action="append", default=[], help="acceleron.conf")
    parser.add_argument("--drivers", help="comma-separated drivers (default: enabled_drivers)")
    parser.add_argument("--root", default="/", help="root directory to read sysfs under")
    parser.add_argument("--spec004", action="store_true", help="print spec 004's view only")
    parser.add_argument("--debug", action="store_true", help="log what the drivers skip")
    return parser.parse_args(argv)


def report(argv: Sequence[str]) -> dict[str, Any]:
    args = parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING)
    conf = confmod.load([], config_files=args.config_file or None)
    if args.drivers:
        conf.set_override("enabled_drivers", args.drivers.split(","), group="agent")
    out: dict[str, Any] = {}
    for driver in load_drivers(conf, Path(args.root)):
        devices = driver.discover()
        if args.spec004:
            out[driver.name] = spec004_view(devices)
            continue
        out[driver.name] = [
            {**dataclasses.asdict(d), "health": dataclasses.asdict(driver.health(d))}
            for d in devices
        ]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    result = report(sys.argv[1:] if argv is None else argv)
    sys.stdout.write(json.dumps(result, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
