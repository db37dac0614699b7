"""``acceleron claim`` and ``acceleron release``: accelerators without Nova.

``claim`` asks Placement for candidates as Nova would, ranks them with spec 001's
weigher, allocates, creates and binds the requests, follows any programming on
stderr, and prints the attach handles. ``release`` undoes all of it.

Placement is reached at ``--placement-url`` (env ``ACCELERON_PLACEMENT_URL``): by
default the all-in-one's, ``<API>/placement`` with its admin token, or the Keystone
catalog's ``placement`` endpoint when authenticating with Keystone.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from typing import Any

from cliff.command import Command
from cliff.lister import Lister
from keystoneauth1 import adapter, session, token_endpoint

from acceleron.cli.client import ApiClient, CommandError, api_client
from acceleron.cli.inventory import JsonColumn

ADMIN_TOKEN = "admin"  # the embedded Placement's noauth admin


def placement_client(client: ApiClient, url: str | None) -> Any:
    """The Placement client for the API the CLI talks to."""
    from acceleron.placement.client import PlacementClient

    endpoint: str | None = url
    if client.noauth:
        endpoint = url or f"{client.url.rstrip('/')}/placement"
        sess = session.Session(auth=token_endpoint.Token(endpoint, ADMIN_TOKEN))
    else:
        sess = client.session
    return PlacementClient(
        adapter.Adapter(sess, service_type="placement", endpoint_override=endpoint)
    )


def _claimer(command: Command, parsed_args: argparse.Namespace) -> Any:
    from acceleron.scheduler.claim import Claimer

    client = api_client(command)
    url = parsed_args.placement_url or os.environ.get("ACCELERON_PLACEMENT_URL")
    return Claimer(client.adapter, placement_client(client, url), timeout=parsed_args.timeout)


def _connection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--placement-url", metavar="URL", help="Placement's endpoint.")
    parser.add_argument(
        "--timeout", type=float, default=600.0, metavar="SECONDS",
        help="How long to wait for programming (default 600).",
    )  # fmt: skip


class Progress:
    """Each request's phase on stderr while it is being bound."""

    def __init__(self, out: Any) -> None:
        self._out = out
        self._last = ""

    def __call__(self, arqs: Sequence[Mapping[str, Any]]) -> None:
        line = ", ".join(f"group {a['device_profile_group_id']}: {_phase(a)}" for a in arqs)
        if line != self._last:
            self._out.write(f"binding: {line}\n")
            self._out.flush()
            self._last = line


def _phase(arq: Mapping[str, Any]) -> str:
    if arq["state"] != "BindStarted":
        return str(arq["state"])
    return f"{arq.get('phase') or 'allocate'} {arq.get('progress') or 0}%"


class Claim(Lister):
    """Claim the accelerators of a device profile for a consumer, and print their
    attach handles."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--profile", required=True, help="Device profile name.")
        parser.add_argument("--consumer", required=True, help="Consumer uuid (yours).")
        parser.add_argument("--project-id", default="acceleron", help="Placement project.")
        parser.add_argument("--user-id", default="acceleron", help="Placement user.")
        _connection_options(parser)
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[Any, Any]:
        from acceleron.exceptions import PlacementError
        from acceleron.scheduler.claim import ClaimFailed

        claimer = _claimer(self, parsed_args)
        try:
            claim = claimer.claim(
                parsed_args.profile,
                parsed_args.consumer,
                project_id=parsed_args.project_id,
                user_id=parsed_args.user_id,
                progress=Progress(self.app.stderr),
            )
        except (ClaimFailed, PlacementError) as error:
            raise CommandError(str(error)) from error
        self.app.stderr.write(f"Claimed on {claim.hostname} for {claim.consumer}.\n")
        columns = ("arq", "group", "type", "uuid", "info")
        rows = [
            tuple(JsonColumn(h[c]) if c == "info" else h[c] for c in columns)
            for h in claim.attach_handles
        ]
        return columns, rows


class Release(Command):
    """Release what a consumer claimed: its requests and its Placement allocation."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--consumer", required=True, help="Consumer uuid.")
        _connection_options(parser)
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        from acceleron.exceptions import PlacementError
        from acceleron.scheduler.claim import ClaimFailed

        try:
            count, dropped = _claimer(self, parsed_args).release(parsed_args.consumer)
        except (ClaimFailed, PlacementError) as error:
            raise CommandError(str(error)) from error
        allocation = "its allocation dropped" if dropped else "it had no allocation"
        self.app.stdout.write(
            f"Released {count} accelerator request(s) of {parsed_args.consumer}; {allocation}.\n"
        )
        return 0


COMMANDS: dict[str, type[Command]] = {"claim": Claim, "release": Release}
