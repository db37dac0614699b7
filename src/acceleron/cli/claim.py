"""``acceleron claim`` and ``acceleron release``: accelerators without Nova.

``claim`` asks the API for a claim (``POST /v2/claims``, microversion 2.12 or later;
docs/claims.md): the API asks Placement for candidates as Nova would, ranks them with
spec 001's weigher, allocates, creates and binds the requests. The command follows any
programming on stderr and prints the attach handles. ``release`` undoes all of it
(``DELETE /v2/claims/{uuid}``). Both talk to the API alone.
"""

from __future__ import annotations

import argparse
import contextlib
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from acceleron.cli.base import AnyCommand, Command, Lister
from acceleron.cli.client import CommandError, api_client, connection_failure, unreachable
from acceleron.cli.inventory import JsonColumn

EXIT_NOTHING_RELEASED = 1


def _claimer(command: AnyCommand, timeout: float = 600.0) -> Any:
    from acceleron.client.claims import Claimer

    return Claimer(api_client(command).api, timeout=timeout)


@contextlib.contextmanager
def _failures(command: AnyCommand) -> Iterator[None]:
    """The claim's errors as one line each; an unreachable API in the CLI's words."""
    from acceleron.client.claims import ClaimFailed

    try:
        yield
    except ClaimFailed as error:
        lost = connection_failure(error)
        if lost is None:
            raise CommandError(str(error)) from error
        client = api_client(command)
        raise unreachable(client.url, lost, endpoint=client.endpoint) from error


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
    handles are printed. Without --consumer, a new consumer uuid is made and printed
    with the command that releases the claim.
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--profile", required=True, help="Device profile name.")
        parser.add_argument(
            "--consumer", help="Consumer uuid (yours); default: a new one, printed."
        )
        parser.add_argument(
            "--project-id",
            help="Project to claim for (admins and services; default: the caller's).",
        )
        parser.add_argument(
            "--timeout",
            type=float,
            default=600.0,
            metavar="SECONDS",
            help="How long to wait while regions are programmed or vGPUs made (default 600).",
        )
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[Any, Any]:
        consumer = parsed_args.consumer or str(uuid.uuid4())
        with _failures(self):
            claim = _claimer(self, parsed_args.timeout).claim(
                parsed_args.profile,
                consumer,
                project_id=parsed_args.project_id,
                progress=Progress(self.app.stderr),
            )
        self.app.stderr.write(f"Claimed on {claim.hostname} for consumer {claim.consumer}.\n")
        if not parsed_args.consumer:
            self.app.stderr.write(
                f"Release it with: acceleron release --consumer {claim.consumer}\n"
            )
        columns = ("arq", "group", "type", "uuid", "info", "target")
        rows = [
            tuple(JsonColumn(h[c]) if c == "info" else h[c] for c in columns)
            for h in claim.attach_handles
        ]
        return columns, rows


class Release(Command):
    """Release what a consumer claimed: its requests and its Placement allocation.

    A consumer without a claim is an error (a mistyped uuid, say), unless --if-exists
    is given.
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--consumer", required=True, help="Consumer uuid.")
        parser.add_argument(
            "--if-exists",
            action="store_true",
            help="A consumer without a claim is not an error.",
        )
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        consumer = parsed_args.consumer
        with _failures(self):
            count, claimed = _claimer(self).release(consumer)
        if not claimed:
            self.app.stderr.write(f"Nothing to release: consumer {consumer} has no claim.\n")
            return 0 if parsed_args.if_exists else EXIT_NOTHING_RELEASED
        self.app.stdout.write(
            f"Released the claim of {consumer}: {count} accelerator request(s) deleted, "
            "its allocation dropped.\n"
        )
        return 0
