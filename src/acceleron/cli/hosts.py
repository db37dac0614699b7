"""``acceleron host list`` and ``host show``: the reporting hosts, when each last
reported, and whether Placement shows all of its inventory (and why not)."""

from __future__ import annotations

import argparse
from typing import Any
from urllib.parse import quote

from acceleron.cli.base import ShowOne
from acceleron.cli.client import api_client
from acceleron.cli.inventory import RAW_FORMATS, _List, raw, show

HOSTS = "/v2/hosts"
COLUMNS = ("hostname", "devices", "agent_version", "last_report_at", "placement_synced",
           "placement_errors")  # fmt: skip


def _table(host: dict[str, Any]) -> dict[str, Any]:
    """A host for a table: its Placement errors as one line each."""
    errors = host.get("placement_errors")
    return {**host, "placement_errors": "\n".join(errors) if errors else ""}


class ListHosts(_List):
    """List the hosts whose agents report, with whether Placement is in step (and why not)."""

    noun = "hosts"

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[Any, Any]:
        hosts = api_client(self).request("GET", HOSTS)["hosts"]
        if parsed_args.formatter not in RAW_FORMATS:
            hosts = [_table(h) for h in hosts]
        return self.emit(parsed_args, hosts, COLUMNS)


class ShowHost(ShowOne):
    """Show a host: its last report, and why devices were left out of Placement."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("hostname", help="The host's name, as its agent reports it.")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[Any, Any]:
        path = f"{HOSTS}/{quote(parsed_args.hostname, safe='')}"
        host = show(api_client(self), path)["host"]
        return raw(host if parsed_args.formatter in RAW_FORMATS else _table(host))
