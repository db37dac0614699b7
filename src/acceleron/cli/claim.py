"""``acceleron claim`` and ``acceleron release``: accelerators without Nova.

``claim`` asks the API for a claim (``POST /v2/claims``, docs/claims.md): the API asks
Placement for candidates as Nova would, ranks them with spec 001's weigher, allocates,
creates and binds the requests. The command follows any programming on stderr and
prints the attach handles. ``release`` undoes all of it (``DELETE /v2/claims/{uuid}``).
Against an API older than 2.12, the same flow runs in the command itself.

Placement is reached at ``--placement-url`` (env ``ACCELERON_PLACEMENT_URL``): by
default the all-in-one's, ``<API>/placement`` with its admin token, or the Keystone
catalog's ``placement`` endpoint when authenticating with Keystone.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from keystoneauth1 import adapter, session, token_endpoint

from acceleron.cli.base import AnyCommand, Command, Lister
from acceleron.cli.client import (
    ApiClient,
    CommandError,
    api_client,
    connection_failure,
    unreachable,
)
from acceleron.cli.inventory import JsonColumn

ADMIN_TOKEN = "admin"  # the embedded Placement's noauth admin
EXIT_NOTHING_RELEASED = 1


def placement_client(client: ApiClient, url: str | None) -> Any:
    """The Placement client for the API the CLI talks to."""
    from acceleron.placement.client import PlacementClient

    endpoint = placement_url(client, url)
    if client.noauth:
        sess = session.Session(auth=token_endpoint.Token(endpoint, ADMIN_TOKEN))
    else:
        sess = client.session
    return PlacementClient(
        adapter.Adapter(sess, service_type="placement", endpoint_override=endpoint)
    )


def placement_url(client: ApiClient, url: str | None) -> str | None:
    """Placement's endpoint: ``url``, or the all-in-one's, or (None) the catalog's."""
    if url or not client.noauth:
        return url
    return f"{client.url}/placement"


def _claimer(command: AnyCommand, parsed_args: argparse.Namespace, timeout: float = 0) -> Any:
    from acceleron.scheduler.claim import Claimer

    client = api_client(command)
    return Claimer(client.api, placement_client(client, _option(parsed_args)), timeout=timeout)


def _option(parsed_args: argparse.Namespace) -> str | None:
    url: str | None = parsed_args.placement_url or os.environ.get("ACCELERON_PLACEMENT_URL")
    return url


@contextlib.contextmanager
def _failures(command: AnyCommand, parsed_args: argparse.Namespace) -> Iterator[None]:
    """The claim flow's errors as one line each; an unreachable API or Placement in the
    CLI's words."""
    from acceleron.exceptions import PlacementError
    from acceleron.scheduler.claim import ClaimFailed

    try:
        yield
    except (ClaimFailed, PlacementError) as error:
        lost = connection_failure(error)
        if lost is None:
            raise CommandError(str(error)) from error
        client = api_client(command)
        if isinstance(error, PlacementError):
            where = placement_url(client, _option(parsed_args))
            raise unreachable(where, lost, "Placement") from error
        raise unreachable(client.url, lost) from error


def _placement_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--placement-url", metavar="URL",
        help="Placement's endpoint (env ACCELERON_PLACEMENT_URL; default: the all-in-one's, "
        "or the Keystone catalog's).",
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
    """Claim a device profile's accelerators for a consumer; print the handles.

    Placement chooses as it would for Nova, Acceleron binds (programming a region
    first when the profile asks for a function no region holds), and the attach
    handles are printed.
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--profile", required=True, help="Device profile name.")
        parser.add_argument("--consumer", required=True, help="Consumer uuid (yours).")
        parser.add_argument(
            "--project-id",
            help="Project to claim for (admins and services; default: the caller's).",
        )
        parser.add_argument("--user-id", default="acceleron", help="Placement user.")
        parser.add_argument(
            "--timeout", type=float, default=600.0, metavar="SECONDS",
            help="How long to wait while regions are programmed or vGPUs made (default 600).",
        )  # fmt: skip
        _placement_option(parser)
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[Any, Any]:
        with _failures(self, parsed_args):
            claim = _claimer(self, parsed_args, parsed_args.timeout).claim(
                parsed_args.profile,
                parsed_args.consumer,
                project_id=parsed_args.project_id,
                user_id=parsed_args.user_id,
                progress=Progress(self.app.stderr),
            )
        self.app.stderr.write(f"Claimed on {claim.hostname} for {claim.consumer}.\n")
        columns = ("arq", "group", "type", "uuid", "info", "target")
        rows = [
            tuple(JsonColumn(h[c]) if c == "info" else h[c] for c in columns)
            for h in claim.attach_handles
        ]
        return columns, rows


class Release(Command):
    """Release what a consumer claimed: its requests and its Placement allocation.

    A consumer that holds nothing is an error (a mistyped uuid, say), unless
    --if-exists is given.
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--consumer", required=True, help="Consumer uuid.")
        parser.add_argument(
            "--if-exists", action="store_true",
            help="A consumer that holds nothing is not an error.",
        )  # fmt: skip
        _placement_option(parser)
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        consumer = parsed_args.consumer
        with _failures(self, parsed_args):
            count, dropped = _claimer(self, parsed_args).release(consumer)
        if not count and not dropped:
            self.app.stderr.write(
                f"Nothing to release: consumer {consumer} holds no accelerator requests and "
                "no allocation.\n"
            )
            return 0 if parsed_args.if_exists else EXIT_NOTHING_RELEASED
        allocation = "its allocation dropped" if dropped else "it had no allocation"
        self.app.stdout.write(
            f"Released {count} accelerator request(s) of {consumer}; {allocation}.\n"
        )
        return 0
