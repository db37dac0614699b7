"""``acceleron device maintenance`` and ``acceleron device drain``: taking a device (or
one region) out of service, waiting for what uses it to end, and bringing it back; and
``acceleron device history``: who held it, and how it was cleaned after (docs/cleaning.md).

``maintenance on DEVICE|REGION --reason TEXT`` takes it out for new binds at once (its
Placement inventory is reserved); existing binds stay. ``drain DEVICE`` does the same
and then waits, showing on stderr what is still bound, until nothing is: the device can
then be reprogrammed or serviced, and ``maintenance off`` brings it back. Admin only.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from acceleron.cli.base import Command, Lister, ShowOne
from acceleron.cli.client import ApiClient, CommandError, api_client
from acceleron.cli.inventory import (
    DEPLOYABLES,
    DEVICE_HELP,
    DEVICES,
    deployable_uuid,
    device_uuid,
    raw,
)
from acceleron.microversion import V2_13, V2_17

VERSION = V2_13
DEFAULT_REASON = "drain"


def target(client: ApiClient, ident: str) -> str:
    """The maintenance path of a device, or else of a deployable (a region) by that name."""
    try:
        uuid = device_uuid(client, ident)
        client.request("GET", f"{DEVICES}/{uuid}", microversion=VERSION)
        return f"{DEVICES}/{uuid}/maintenance"
    except CommandError as as_device:
        try:
            return f"{DEPLOYABLES}/{deployable_uuid(client, ident)}/maintenance"
        except CommandError:
            raise as_device from None


def maintenance(client: ApiClient, path: str, on: bool, reason: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"maintenance": on}
    if reason is not None:
        body["reason"] = reason
    answer: dict[str, Any] = client.request("POST", path, json=body, microversion=VERSION)
    return answer


class Maintenance(ShowOne):
    """Put a device or one region in maintenance with a reason, or take it out again.

    In maintenance, new binds are refused and its Placement inventory is reserved;
    existing binds stay. The reason is kept with the time. Its name, the text before
    the first ':', is what a device profile's accel:tolerations names to still land
    there ('burn-in: new card').
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("action", choices=("on", "off"))
        parser.add_argument(
            "target", metavar="DEVICE|REGION", help=f"{DEVICE_HELP}; or a deployable's uuid or name"
        )
        parser.add_argument("--reason", help="Why (required with 'on').")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[Any, Any]:
        on = parsed_args.action == "on"
        if on and not parsed_args.reason:
            raise CommandError("--reason: say why it goes into maintenance.")
        client = api_client(self)
        path = target(client, parsed_args.target)
        return raw(maintenance(client, path, on, parsed_args.reason if on else None))


def _bind_line(bind: dict[str, Any]) -> str:
    instance = bind["instance_uuid"] or "-"
    where = f"{bind['deployable']} {bind['attach_handle']}"
    return f"  {bind['arq_uuid']}  {bind['state']}  instance {instance}  {where}"


class Drain(Command):
    """Put a device in maintenance and wait until the requests bound to it end.

    Progress (what is still bound, and for which instance) goes to stderr. When nothing
    is bound any more the device can be reprogrammed or serviced; bring it back with
    'acceleron device maintenance off DEVICE'. Exits 1 if --timeout passes first.
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("device", help=DEVICE_HELP)
        parser.add_argument(
            "--reason",
            default=DEFAULT_REASON,
            help=f"Maintenance reason (default {DEFAULT_REASON!r}).",
        )
        parser.add_argument(
            "--timeout", type=float, default=3600.0, help="Seconds to wait at most (default 3600)."
        )
        parser.add_argument(
            "--interval", type=float, default=5.0, help="Seconds between two looks (default 5)."
        )
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        client = api_client(self)
        uuid = device_uuid(client, parsed_args.device)
        device = client.request("GET", f"{DEVICES}/{uuid}", microversion=VERSION)
        if device["status"] != "maintaining":
            maintenance(client, f"{DEVICES}/{uuid}/maintenance", True, parsed_args.reason)
        label = f"{device['hostname']} {device['pci_address']}"
        deadline = time.monotonic() + parsed_args.timeout
        last: list[str] | None = None
        while True:
            body = client.request("GET", f"{DEVICES}/{uuid}/binds", microversion=VERSION)
            lines = [_bind_line(b) for b in body["binds"]]
            if lines != last:
                count = len(lines)
                head = f"{label}: {count} request(s) still bound" if count else f"{label}: drained"
                self.app.stderr.write("\n".join([head, *lines]) + "\n")
                last = lines
            if not lines:
                self.app.stdout.write(
                    f"Device {uuid} is drained and in maintenance: service it, then "
                    f"'acceleron device maintenance off {uuid}'.\n"
                )
                return 0
            if time.monotonic() >= deadline:
                self.app.stderr.write(f"{label}: still in use after {parsed_args.timeout:g} s\n")
                return 1
            time.sleep(parsed_args.interval)


HISTORY_COLUMNS = ("released_at", "project_id", "instance_uuid", "deployable", "attach_handle",
                   "cleaning_method", "cleaning", "cleaning_seconds")  # fmt: skip


class History(Lister):
    """A device's tenancies, newest first, and how each was cleaned after.

    Each: who held one of its attach handles (project, instance, request), what its
    region held when it was given back, and how and when it was cleaned. Admin only.
    """

    noun = "tenancies"

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("device", help=DEVICE_HELP)
        parser.add_argument("--limit", type=int, default=100, help="Most shown (100).")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[Any, Any]:
        client = api_client(self)
        uuid = device_uuid(client, parsed_args.device)
        found = client.request(
            "GET",
            f"{DEVICES}/{uuid}/history",
            params={"limit": parsed_args.limit},
            microversion=V2_17,
        )
        items: list[dict[str, Any]] = found["tenancies"]
        if parsed_args.formatter in ("json", "yaml") or parsed_args.columns:
            columns = tuple(items[0]) if items else HISTORY_COLUMNS
        else:
            columns = HISTORY_COLUMNS
        return columns, [tuple(item.get(c) for c in columns) for item in items]
