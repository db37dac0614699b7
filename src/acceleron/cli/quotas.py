"""``acceleron quota show``: a project's usage against its limits, per resource class."""

from __future__ import annotations

import argparse
from typing import Any

from acceleron.cli.base import Lister
from acceleron.cli.client import CommandError, api_client
from acceleron.cli.inventory import Shown
from acceleron.microversion import V2_14

PATH = "/v2/quotas"
VERSION = V2_14
COLUMNS = ("resource", "limit", "usage")


class ShowQuota(Lister):
    """Show a project's usage against its limit for each accelerator resource class.

    Limits are named class:<RESOURCE_CLASS>; an empty limit is unlimited. Without
    --project: the project of the credentials (with Keystone), or the all-in-one's
    project, admin.

        acceleron quota show --project 3f2a...
    """

    noun = "limits"

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--project", metavar="PROJECT_ID", help="The project's id.")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[Any, Any]:
        client = api_client(self)
        project = parsed_args.project or _own_project(client)
        body = client.request("GET", f"{PATH}/{project}", microversion=VERSION)
        return COLUMNS, [_row(quota) for quota in body["quota_set"]["quotas"]]


def _row(quota: dict[str, Any]) -> tuple[Any, ...]:
    """An unlimited class reads "unlimited" in a table (null in JSON, as the API has it)."""
    limit = quota["limit"]
    shown = Shown(limit, "unlimited") if limit is None else limit
    return quota["resource"], shown, quota["usage"]


def _own_project(client: Any) -> str:
    if client.noauth:
        return "admin"  # what the API takes a request without X-Project-Id for
    project: str | None = client.session.get_project_id()
    if not project:
        raise CommandError("The credentials name no project: give --project.")
    return project
