"""``acceleron arq list|show|delete``: accelerator requests through the REST API."""

from __future__ import annotations

import argparse
from typing import Any

from acceleron.cli.base import Command, ShowOne
from acceleron.cli.client import api_client
from acceleron.cli.inventory import _List, raw, show
from acceleron.microversion import V2_11

PATH = "/v2/accelerator_requests"
VERSION = V2_11
COLUMNS = ("uuid", "state", "device_profile_name", "device_profile_group_id", "hostname",
           "instance_uuid", "attach_handle_type", "attach_target", "phase")  # fmt: skip


class ListArqs(_List):
    """List accelerator requests (a project's own; admins and services see all)."""

    noun = "accelerator requests"

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--instance", metavar="UUID", help="Only this instance's.")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[Any, Any]:
        params = {"instance": parsed_args.instance} if parsed_args.instance else {}
        body = api_client(self).request("GET", PATH, params=params, microversion=VERSION)
        return self.emit(parsed_args, body["arqs"], COLUMNS)


class ShowArq(ShowOne):
    """Show an accelerator request, with its attach handle once Bound."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("arq", metavar="ARQ", help="The accelerator request's uuid.")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[Any, Any]:
        return raw(show(api_client(self), f"{PATH}/{parsed_args.arq}", VERSION))


class DeleteArq(Command):
    """Delete accelerator requests (unbinding the bound ones)."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("arqs", metavar="ARQ", nargs="+", help="uuids to delete.")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        joined = ",".join(parsed_args.arqs)
        api_client(self).request("DELETE", PATH, params={"arqs": joined}, microversion=VERSION)
        return 0
