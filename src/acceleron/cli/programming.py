"""``acceleron deployable program`` and ``acceleron arq program``: load a bitstream into a
region through the REST API and follow its phases (queued, fetch, verify, program,
report) until the host's agent is done.

Progress goes to stderr: redrawn in place on a terminal, a line per change otherwise;
the result (the deployable or the request) is printed like ``show``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from acceleron.cli.base import ShowOne
from acceleron.cli.bitstreams import bitstream_uuid
from acceleron.cli.client import ApiClient, CommandError, api_client
from acceleron.cli.inventory import deployable_uuid, raw
from acceleron.microversion import V2_8

VERSION = V2_8
POLL = 0.3


class Follower:
    """Draws the phase and percentage of something being programmed until it ends."""

    def __init__(self, out: TextIO, label: str) -> None:
        self._out = out
        self._label = label
        self._last: tuple[str, int] | None = None
        self._tty = out.isatty()

    def show(self, phase: str, progress: int) -> None:
        if (phase, progress) == self._last:
            return
        self._last = (phase, progress)
        line = f"{self._label}: {phase:<8} {progress:3d}%"
        self._out.write(f"\r{line}" if self._tty else f"{line}\n")
        self._out.flush()

    def end(self, word: str) -> None:
        self._out.write(f"{chr(13) if self._tty else ''}{self._label}: {word}\n")
        self._out.flush()


def follow(
    read: Callable[[], Mapping[str, Any]],
    state: Callable[[Mapping[str, Any]], tuple[str | None, int, str | None]],
    follower: Follower,
    timeout: float,
) -> Mapping[str, Any]:
    """Poll ``read()`` until ``state`` says it ended: (phase, progress, error) with the
    phase None when done. CommandError on an error or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        item = read()
        phase, progress, error = state(item)
        if error:
            follower.end("failed")
            raise CommandError(f"Programming failed: {error}")
        if phase is None:
            follower.end("done")
            return item
        follower.show(phase, progress)
        if time.monotonic() >= deadline:
            raise CommandError(f"Still {phase} after {timeout:g} s; it goes on in the background.")
        time.sleep(POLL)


def _deployable_state(dep: Mapping[str, Any]) -> tuple[str | None, int, str | None]:
    phase = dep.get("program_phase")
    error = dep.get("program_error") if phase == "failed" else None
    return phase, dep.get("program_progress") or 0, error


def _arq_state(arq: Mapping[str, Any]) -> tuple[str | None, int, str | None]:
    return arq.get("phase"), arq.get("progress") or 0, arq.get("failure_reason")


def _wait_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-wait", action="store_true", help="Return once it is queued.")
    parser.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="How long to follow the programming (default 600).",
    )


class ProgramDeployable(ShowOne):
    """Program a region nothing uses with a bitstream (admin), and follow it."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("deployable", metavar="DEPLOYABLE", help="The region's uuid or name.")
        parser.add_argument("bitstream", metavar="BITSTREAM", help="The bitstream's uuid or name.")
        _wait_options(parser)
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[Any, Any]:
        client: ApiClient = api_client(self)
        path = f"/v2/deployables/{deployable_uuid(client, parsed_args.deployable)}"
        bitstream = bitstream_uuid(client, parsed_args.bitstream)
        body = [{"path": "/program", "op": "replace", "value": [{"image_uuid": bitstream}]}]
        dep = client.request("PATCH", f"{path}/program", json=body, microversion=VERSION)
        if not parsed_args.no_wait:
            label = dep.get("name") or parsed_args.deployable
            dep = follow(
                lambda: client.request("GET", path, microversion=VERSION),
                _deployable_state,
                Follower(self.app.stderr, label),
                parsed_args.timeout,
            )
        return raw(dep)


class ProgramArq(ShowOne):
    """Reprogram the region of a bound accelerator request, and follow it.

    The request's own project (or an admin) may do this.
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("arq", metavar="ARQ", help="The accelerator request's uuid.")
        which = parser.add_mutually_exclusive_group(required=True)
        for key in ("bitstream_id", "bitstream_name", "function_id", "function_name"):
            which.add_argument(f"--{key.replace('_', '-')}", dest=key, metavar="VALUE")
        _wait_options(parser)
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[Any, Any]:
        client: ApiClient = api_client(self)
        path = f"/v2/accelerator_requests/{parsed_args.arq}"
        keys = ("bitstream_id", "bitstream_name", "function_id", "function_name")
        body = {k: getattr(parsed_args, k) for k in keys if getattr(parsed_args, k)}
        arq = client.request("POST", f"{path}/program", json=body, microversion=VERSION)
        if not parsed_args.no_wait:
            arq = follow(
                lambda: client.request("GET", path, microversion=VERSION),
                _arq_state,
                Follower(self.app.stderr, parsed_args.arq),
                parsed_args.timeout,
            )
        return raw(arq)
