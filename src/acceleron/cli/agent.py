"""``acceleron agent``: the per-host agent (docs/agent.md).

It reads the configuration files (``--config-file``) like the server commands;
the drivers and the agent's modules are imported only when it runs.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from acceleron.cli.base import Command
from acceleron.cli.client import CommandError, connection_failure, unreachable
from acceleron.cli.server import load_conf

if TYPE_CHECKING:
    from oslo_config import cfg

    from acceleron.agent.client import UnknownHost
    from acceleron.agent.loop import Agent as AgentLoop
    from acceleron.drivers.base import Driver

EXIT_UNKNOWN_HOST = 2


class Agent(Command):
    """Run the agent: discover this host's accelerators and report them to the API.

    Scans at start, every [agent] report_interval seconds and on udev events, and
    sends one full report per scan; stops on SIGTERM or SIGINT. Exits with 2 when
    the API does not know this host's name ([DEFAULT] host) as a compute node.
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument(
            "--once",
            action="store_true",
            help="One scan and one report, then exit: 0 when the API accepted it.",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Print what would be reported and send nothing (implies --once).",
        )
        parser.add_argument(
            "--driver",
            action="append",
            metavar="NAME",
            help="Use this driver (repeatable) instead of [agent] enabled_drivers.",
        )
        parser.add_argument(
            "-f",
            "--format",
            choices=("tree", "json"),
            default="tree",
            help="Dry-run output: a readable tree per device, or the exact report JSON.",
        )
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        from acceleron import logs

        conf = load_conf(self)
        if parsed_args.driver:
            _check_drivers(parsed_args.driver)
            conf.set_override("enabled_drivers", parsed_args.driver, "agent")
        drivers = _drivers(conf)
        if parsed_args.dry_run:  # stdout is the report; warnings go to stderr as they are
            return self.dry_run(conf, drivers, parsed_args.format)
        logs.setup(conf, "acceleron-agent")
        agent = _agent(conf, drivers)
        if parsed_args.once:
            return self.once(agent, conf)
        return self.serve(agent, conf)

    def dry_run(self, conf: cfg.ConfigOpts, drivers: list[Driver], fmt: str) -> int:
        from acceleron import text_tree
        from acceleron.agent import discovery
        from acceleron.report import to_json

        drivers_log = logging.getLogger("acceleron.drivers")
        level = drivers_log.level
        drivers_log.setLevel(min(level or logging.INFO, logging.INFO))  # what they skipped
        try:
            scan = discovery.scan(drivers)
        finally:
            drivers_log.setLevel(level)
        report = discovery.build_report(conf.host, scan.devices)
        if fmt == "json":
            self.app.stdout.write(json.dumps(to_json(report), indent=2) + "\n")
        else:
            self.app.stdout.write(text_tree.report(report))
        found = {device.driver for device in scan.devices}
        for driver in drivers:
            if driver.name not in found and driver.name not in scan.failed:
                self.app.stderr.write(nothing_found(driver, Path(conf.agent.root)) + "\n")
        if not scan.complete:
            self.app.stderr.write(
                f"Driver(s) {', '.join(scan.failed)} failed: the agent would send no report "
                "for this scan.\n"
            )
            return 1
        return 0

    def once(self, agent: AgentLoop, conf: cfg.ConfigOpts) -> int:
        from acceleron.agent.client import ApiUnavailable, UnknownHost

        try:
            sent = agent.report_once()
        except UnknownHost as error:
            return self.unknown_host(error)
        except ApiUnavailable as error:
            lost = connection_failure(error)
            if lost is not None:
                message = unreachable(agent.client.where, lost)
                raise CommandError(f"{message} {_origin(conf)}") from error
            raise CommandError(f"Report not sent: {error}") from error
        return 0 if sent else 1

    def serve(self, agent: AgentLoop, conf: cfg.ConfigOpts) -> int:
        from acceleron.agent import loop, tasks
        from acceleron.agent.client import UnknownHost

        runner = tasks.TaskRunner(
            tasks.Settings.from_conf(conf), agent.drivers, agent.client, agent.schedule.event
        )
        if conf.agent.metrics_port:
            from prometheus_client import start_http_server

            start_http_server(conf.agent.metrics_port, conf.agent.metrics_host)
        try:
            loop.serve(agent, conf.agent.udev, runner)
        except UnknownHost as error:
            return self.unknown_host(error)
        return 0

    def unknown_host(self, error: UnknownHost) -> int:
        from acceleron.agent.client import unknown_host_message

        self.app.stderr.write(unknown_host_message(error) + "\n")
        return EXIT_UNKNOWN_HOST


def nothing_found(driver: Driver, root: Path) -> str:
    """Why a driver found no device: what it reports, and which PCI functions the host has."""
    from acceleron.drivers.sysfs import PCI_DEVICES, Sysfs, scan

    doc = (sys.modules[type(driver).__module__].__doc__ or "").split("\n\n")[0]
    what = re.sub(r"\s*\((docs/|see )[^)]*\)", "", " ".join(doc.split()))
    functions = scan(Sysfs(root))
    vendors = Counter(fn.vendor for fn in functions)
    listed = ", ".join(f"{vendor} ({count})" for vendor, count in sorted(vendors.items()))
    where = root / PCI_DEVICES
    line = f"Driver {driver.name} found no device ({what.rstrip('.').replace('`', '')})"
    if not functions:
        return f"{line}; {where} has no PCI function."
    count = len(functions)
    return f"{line}. {where} has {count} PCI functions, of vendors {listed}: none is one of those."


def _origin(conf: cfg.ConfigOpts) -> str:
    """Where the agent's API URL came from, for the message that names it."""
    if conf.agent.api_endpoint:
        return "That URL comes from [agent] api_endpoint."
    return (
        "That URL is the Keystone catalog's accelerator endpoint ([agent] api_endpoint "
        "overrides it)."
    )


def _check_drivers(names: list[str]) -> None:
    """Every --driver names an installed driver; else which ones are."""
    from acceleron.drivers import available_drivers

    known = sorted(available_drivers())
    unknown = [name for name in names if name not in known]
    if unknown:
        raise CommandError(
            f"--driver {unknown[0]!r}: no such driver. The drivers are: "
            f"{', '.join(known) or 'none installed'}."
        )


def _drivers(conf: cfg.ConfigOpts) -> list[Driver]:
    from acceleron.drivers import load_drivers
    from acceleron.drivers.errors import DriverConfigError

    try:
        return load_drivers(conf, Path(conf.agent.root))
    except DriverConfigError as error:
        raise CommandError(f"Configuration error: {error.message}") from error


def _agent(conf: cfg.ConfigOpts, drivers: list[Driver]) -> AgentLoop:
    from acceleron.agent.client import connect
    from acceleron.agent.loop import Agent as AgentLoop
    from acceleron.agent.loop import Settings
    from acceleron.client.http import OptionsError

    try:
        client = connect(conf)
    except OptionsError as error:
        raise CommandError(f"Configuration error: {error}") from error
    return AgentLoop(Settings.from_conf(conf), drivers, client)
