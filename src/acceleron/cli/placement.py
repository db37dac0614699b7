"""``acceleron placement ...``: publishing the inventory to Placement, through the API."""

from __future__ import annotations

import argparse
from typing import Any

from acceleron.cli.base import Lister
from acceleron.cli.client import api_client
from acceleron.microversion import V2_6, V2_9

COLUMNS = ("host", "op", "provider", "uuid", "detail")
MICROVERSION = V2_6


def _rows(body: dict[str, Any]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for host in body["hosts"]:
        for action in host["actions"]:
            rows.append(
                (host["hostname"], action["op"], action["name"], action["uuid"], action["detail"])
            )
        rows.extend((host["hostname"], "error", "", "", error) for error in host["errors"])
    return rows


def summary(body: dict[str, Any], *, dry_run: bool) -> str:
    """The line under the table: the changes (an error row is none), then the errors."""
    changes = sum(len(host["actions"]) for host in body["hosts"])
    errors = sum(len(host["errors"]) for host in body["hosts"])
    verb = "would be made (dry run)" if dry_run else "made"
    line = f"{changes} change(s) {verb} in Placement"
    return f"{line}; {errors} error(s), shown as rows.\n" if errors else f"{line}.\n"


class _PlacementCommand(Lister):
    path = ""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument(
            "--dry-run", action="store_true", help="Show what would change; change nothing."
        )
        return parser

    def body(self, parsed_args: argparse.Namespace) -> dict[str, Any]:
        return {"dry_run": parsed_args.dry_run}

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[Any, Any]:
        body = api_client(self).request(
            "POST", self.path, json=self.body(parsed_args), microversion=MICROVERSION
        )
        self.app.stderr.write(summary(body, dry_run=parsed_args.dry_run))
        return COLUMNS, _rows(body)


class Sync(_PlacementCommand):
    """Publish the inventory to Placement now and show what changed.

    Acceleron keeps Placement in sync by itself; this checks every host (or one)
    against Placement at once, repairs what differs, and with --dry-run only
    shows the plan.
    """

    path = "/v2/placement/sync"

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--host", help="Only this host")
        parser.add_argument(
            "--changed-only",
            action="store_true",
            help="Only hosts whose inventory changed since their last sync.",
        )
        return parser

    def body(self, parsed_args: argparse.Namespace) -> dict[str, Any]:
        body = super().body(parsed_args)
        body["force"] = not parsed_args.changed_only
        if parsed_args.host:
            body["host"] = parsed_args.host
        return body


class MigrateToNested(_PlacementCommand):
    """Move every host from flat to nested providers (spec 001's upgrade procedure).

    First terminate the instances that use accelerators and set [placement]
    nested = true; then this takes Acceleron's inventories and traits off the
    compute node providers and publishes one provider per device and region.
    """

    path = "/v2/placement/migrate-to-nested"


class Reconcile(Lister):
    """Find and free leaked Placement allocations and accelerator requests.

    A leak is an allocation and a request that no longer explain each other
    (docs/reconciler.md).

    An allocation of Acceleron's resources that no request holds is freed (Acceleron's
    part of it taken out); a request holding a handle for a consumer that holds no
    allocation is unbound. Only leaks seen for [reconciler] grace seconds over two
    passes at least are freed (the API's own periodic passes count): run it with
    --dry-run first to see them, and what would be freed.
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--dry-run", action="store_true", help="Show the leaks; free nothing.")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[Any, Any]:
        body = api_client(self).request(
            "POST",
            "/v2/placement/reconcile",
            json={"dry_run": parsed_args.dry_run},
            microversion=V2_9,
        )
        leaks = body["leaks"]
        verb = "(dry run: nothing freed)" if parsed_args.dry_run else "found"
        self.app.stderr.write(f"{len(leaks)} leak(s) {verb}.\n")
        rows = [
            (leak["kind"], leak["consumer"], _held(leak), leak["seen_for"], leak["action"])
            for leak in leaks
        ]
        return ("kind", "consumer", "held", "seen for (s)", "action"), rows


def _held(leak: dict[str, Any]) -> str:
    if leak["kind"] == "request":
        return ", ".join(leak["requests"])
    return "; ".join(
        f"{rp}: {', '.join(f'{rc}={n}' for rc, n in sorted(resources.items()))}"
        for rp, resources in sorted(leak["allocations"].items())
    )
