"""``acceleron profile ...``: device profiles through the REST API."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from cliff.columns import FormattableColumn

from acceleron.cli.base import Command, Lister, ShowOne
from acceleron.cli.client import CommandError, api_client

PATH = "/v2/device_profiles"
COLUMNS = ("uuid", "name", "enabled", "groups", "description", "created_at", "updated_at")
LIST_COLUMNS = ("uuid", "name", "enabled", "groups", "description")


class GroupsColumn(FormattableColumn[list[dict[str, str]]]):
    """Groups as readable lines in tables, as the raw list in JSON/YAML."""

    def human_readable(self) -> str:
        return "\n".join(
            f"[{i}] " + ", ".join(f"{k}={v}" for k, v in group.items())
            for i, group in enumerate(self._value)
        )

    def machine_readable(self) -> list[dict[str, str]]:
        return self._value


def _row(profile: dict[str, Any], columns: Sequence[str]) -> tuple[Any, ...]:
    return tuple(_cell(profile, c) for c in columns)


def _cell(profile: dict[str, Any], column: str) -> Any:
    if column == "groups":
        return GroupsColumn(profile["groups"])
    value = profile.get(column)
    return Blank(value) if value is None else value


class Blank(FormattableColumn[None]):
    """Nothing, in a table (None in the other formats)."""

    def human_readable(self) -> str:
        return ""

    def machine_readable(self) -> None:
        return None


def parse_groups(groups_json: str | None, group_args: Sequence[str]) -> list[dict[str, str]]:
    """Groups from a JSON list, or from ``--group key=value,key=value`` options."""
    if groups_json and group_args:
        raise CommandError("Give the groups either as JSON or with --group, not both.")
    if groups_json:
        try:
            groups = json.loads(groups_json)
        except ValueError as error:
            raise CommandError(f"The groups are not valid JSON: {error}") from error
        return groups if isinstance(groups, list) else [groups]
    result = []
    for text in group_args:
        group = {}
        for pair in filter(None, (p.strip() for p in text.split(","))):
            key, sep, value = pair.rpartition("=")
            if not sep or not key:
                raise CommandError(f"--group {text!r}: expected key=value pairs.")
            group[key] = value
        result.append(group)
    if not result:
        raise CommandError("Give the groups as JSON or with at least one --group.")
    return result


class ListProfiles(Lister):
    """List device profiles."""

    noun = "device profiles"

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument(
            "--name", action="append", default=[], help="Only this name (repeatable)."
        )
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[Any, Any]:
        body = api_client(self).get(PATH, name=",".join(parsed_args.name))
        return LIST_COLUMNS, [_row(p, LIST_COLUMNS) for p in body["device_profiles"]]


class _OneProfile(ShowOne):
    """Base of the commands that act on one profile and show it."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("profile", help="uuid or name of the device profile")
        return parser

    def patch(self, ident: str, ops: list[dict[str, Any]]) -> tuple[Any, Any]:
        profile = api_client(self).patch(f"{PATH}/{ident}", ops)["device_profile"]
        return COLUMNS, _row(profile, COLUMNS)


class ShowProfile(_OneProfile):
    """Show a device profile by uuid or name."""

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[Any, Any]:
        profile = api_client(self).get(f"{PATH}/{parsed_args.profile}")["device_profile"]
        return COLUMNS, _row(profile, COLUMNS)


class CreateProfile(ShowOne):
    """Create a device profile.

    Groups are given as JSON (as `openstack accelerator device profile create`
    takes them) or with one --group per group:

        acceleron profile create fpga-gzip \\
            --group resources:CUSTOM_ACCELERATOR_FPGA=1,accel:function_name=gzip
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("name", help="Name of the new profile")
        parser.add_argument(
            "groups", nargs="?", help='Groups as JSON, e.g. \'[{"resources:FPGA": "1"}]\''
        )
        parser.add_argument(
            "--group",
            action="append",
            default=[],
            metavar="KEY=VALUE,...",
            help="One request group (repeat for more groups, in order).",
        )
        parser.add_argument("--description", help="What the profile is for")
        parser.add_argument("--uuid", help="Use this uuid instead of a generated one")
        parser.add_argument(
            "--disabled", action="store_true", help="Create it disabled (no new requests)."
        )
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[Any, Any]:
        body: dict[str, Any] = {
            "name": parsed_args.name,
            "groups": parse_groups(parsed_args.groups, parsed_args.group),
        }
        if parsed_args.description is not None:
            body["description"] = parsed_args.description
        if parsed_args.uuid:
            body["uuid"] = parsed_args.uuid
        if parsed_args.disabled:
            body["enabled"] = False
        profile = api_client(self).post(PATH, [body])
        return COLUMNS, _row(profile, COLUMNS)


class UpdateProfile(_OneProfile):
    """Change a device profile's description."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        group = parser.add_mutually_exclusive_group(required=True)
        group.add_argument("--description", help="The new description")
        group.add_argument("--no-description", action="store_true", help="Remove the description")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[Any, Any]:
        if parsed_args.no_description:
            ops = [{"op": "remove", "path": "/description"}]
        else:
            ops = [{"op": "replace", "path": "/description", "value": parsed_args.description}]
        return self.patch(parsed_args.profile, ops)


class EnableProfile(_OneProfile):
    """Allow new accelerator requests to use a device profile."""

    enabled = True

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[Any, Any]:
        ops = [{"op": "replace", "path": "/enabled", "value": self.enabled}]
        return self.patch(parsed_args.profile, ops)


class DisableProfile(EnableProfile):
    """Stop new accelerator requests from using a device profile (existing ones stay)."""

    enabled = False


class DeleteProfile(Command):
    """Delete device profiles (all or none: every one must exist and be unused)."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("profiles", nargs="+", help="uuids or names")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        api_client(self).request("DELETE", PATH, params={"value": ",".join(parsed_args.profiles)})
        return 0
