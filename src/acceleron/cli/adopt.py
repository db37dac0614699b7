"""``acceleron adopt cyborg`` and ``acceleron adopt revert``: take over from a running
Cyborg, and the way back (docs/adopt-from-cyborg.md).

Like ``acceleron db ...`` they run on the service's host: they read the configuration
files (``--config-file``) for Acceleron's database, Placement and logging, and Cyborg's
database (never written) at the URL that ``--database``, ``--database-file`` or
``$ACCELERON_CYBORG_DATABASE`` gives. The work is ``acceleron.service.adopt``'s (with
``cyborg_db`` reading Cyborg) and ``acceleron.service.adopt_revert``'s.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acceleron.cli.base import Command
from acceleron.cli.client import CommandError
from acceleron.cli.server import load_conf

if TYPE_CHECKING:
    from oslo_config import cfg

    from acceleron.db.session import Database
    from acceleron.exceptions import AcceleronError
    from acceleron.service.adopt_plan import Plan
    from acceleron.service.device_profiles import Limits, NameMapping
    from acceleron.service.placement import PlacementService

EXIT_REFUSED = 1
DATABASE_ENV = "ACCELERON_CYBORG_DATABASE"


class AdoptCyborg(Command):
    """Adopt a running Cyborg's device profiles, requests and Placement allocations.

    With Acceleron's agents already reporting the same devices: creates Cyborg's device
    profiles (same names and uuids, groups rewritten to the names Acceleron publishes),
    keeps its accelerator requests (uuid, project, state, instance, creation time, and a
    bound one's attach handle with its uuid), moves every server's allocation from
    Cyborg's providers to Acceleron's in one write per server, then deletes Cyborg's
    providers. Anything it cannot map stops it before any change. Run it again after an
    interruption, or after Cyborg changed: it does what is left, and adopts what is new.

    Cyborg's database URL holds its password: give it in a file (--database-file, read
    by its owner only) or in $ACCELERON_CYBORG_DATABASE rather than on the command line.

        acceleron adopt cyborg --database-file cyborg-db.url --dry-run --plan-file plan.json
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        source = parser.add_mutually_exclusive_group()
        source.add_argument(
            "--database",
            metavar="URL",
            help=f"Cyborg's database (read only); default: ${DATABASE_ENV}",
        )
        source.add_argument(
            "--database-file",
            type=Path,
            metavar="PATH",
            help="A file whose first line is Cyborg's database URL",
        )
        parser.add_argument(
            "--mapping",
            type=Path,
            help="Renames for the device profiles' groups, as for `acceleron db "
            "rewrite-profiles` (resource classes Acceleron publishes otherwise are renamed "
            "without one; an earlier run's renames are kept)",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Print the whole plan; change nothing"
        )
        parser.add_argument(
            "--plan-file",
            type=Path,
            metavar="PATH",
            help="Write the plan there (JSON), with what the way back needs (`acceleron "
            "adopt revert`); a run without --dry-run writes it in any case, by default to "
            "<state_path>/cyborg-adoption-<time>.json",
        )
        parser.add_argument(
            "--bind-timeout",
            type=float,
            default=300,
            metavar="SECONDS",
            help="A request in BindStarted for longer (Nova's [DEFAULT] arq_binding_timeout, "
            "after which Nova gives the bind up) is adopted as Unbound; a younger one stops "
            "the adoption (default: 300)",
        )
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        from acceleron.db import session as db_session
        from acceleron.exceptions import AcceleronError
        from acceleron.service import adopt, adopt_plan, adopt_revert, cyborg_db
        from acceleron.service.placement import PlacementService

        conf = remote_placement_conf(self)
        url = _database_url(parsed_args)
        mapping = _mapping(parsed_args.mapping)
        plan_file = parsed_args.plan_file or (
            None if parsed_args.dry_run else _default_plan_file(conf)
        )
        db = db_session.from_conf(conf)
        # Cyborg's allocations are on one provider per device: the adoption publishes
        # that shape; the API's sync then moves the hosts to pools as it moves any
        # existing cloud (docs/adopt-from-cyborg.md).
        conf.set_override("pools", "false", "placement")
        try:
            service = PlacementService(conf, db)
            cyborg = cyborg_db.read_cyborg(url)
            hosts = {d.hostname for d in cyborg.devices}
            ours = adopt.read_acceleron(db, hosts, service.options)
            view = adopt.read_placement(service.client(), cyborg, ours)
            settings = adopt_plan.Settings(
                mapping=mapping, limits=_limits(conf), bind_timeout=parsed_args.bind_timeout
            )
            plan = adopt_plan.plan(cyborg, ours, view, settings=settings)
            if parsed_args.plan_file is None and (plan.problems or plan.nothing_to_do):
                plan_file = None  # the default file: only for a run that changes something
            if plan_file is not None:
                _write(plan_file, adopt_revert.document(plan))
            return self._run(plan, db, service, dry_run=parsed_args.dry_run, plan_file=plan_file)
        except AcceleronError as error:
            raise CommandError(error.message) from error
        finally:
            db.dispose()

    def _run(
        self,
        plan: Plan,
        db: Database,
        service: PlacementService,
        *,
        dry_run: bool,
        plan_file: Path | None,
    ) -> int:
        from acceleron.service import adopt

        err = self.app.stderr
        refusal = adopt.AdoptionRefused(plan.problems) if plan.problems else None
        shown = _show(self, plan.lines(), refusal)
        if plan_file is not None:
            err.write(f"The plan is in {plan_file}: keep it for the way back.\n")
        if shown is not None:
            return shown
        if plan.nothing_to_do:
            err.write("Nothing to do: everything is adopted already.\n")
            return 0
        if dry_run:
            err.write("Dry run: nothing was changed. Run without --dry-run to adopt.\n")
            return 0
        done = adopt.apply(db, service.client(), service.syncer(), plan, say=_say(self))
        err.write(
            f"Adopted: {done.summary()}. Now point the catalog's accelerator endpoint at "
            "Acceleron, stop Cyborg's services, and restart nova-compute on every host (it "
            "keeps Cyborg's providers, deleted now, in its cache and fails every claim "
            "until then).\n"
        )
        return 0


class AdoptRevert(Command):
    """The way back to Cyborg, in Placement, from an adoption's plan file.

    With Acceleron's API and agents stopped: creates Cyborg's providers again as they
    were before the adoption (uuid, name, parent, inventories, traits), sets each adopted
    server's allocation back on them in one write (its other allocations as they are
    now; a server deleted since is left alone), and deletes Acceleron's providers on
    Cyborg's hosts. A server that holds an accelerator of Acceleron's that the adoption
    did not move there (booted since) stops it before any change.

        acceleron adopt revert --plan-file plan.json --dry-run
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument(
            "--plan-file",
            type=Path,
            required=True,
            metavar="PATH",
            help="The plan an adoption wrote (acceleron adopt cyborg --plan-file)",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Print what it would do; change nothing"
        )
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        from acceleron.db import session as db_session
        from acceleron.exceptions import AcceleronError
        from acceleron.service import adopt_revert
        from acceleron.service.placement import PlacementService

        conf = remote_placement_conf(self)
        document = _read_document(parsed_args.plan_file)
        db = db_session.from_conf(conf)  # unused: PlacementService wants one
        try:
            client = PlacementService(conf, db).client()
            steps = adopt_revert.plan(client, document)
            refusal = adopt_revert.RevertRefused(steps.problems) if steps.problems else None
            shown = _show(self, steps.lines(), refusal)
            if shown is not None:
                return shown
            if parsed_args.dry_run:
                self.app.stderr.write(
                    "Dry run: nothing was changed. Run without --dry-run to go back.\n"
                )
                return 0
            adopt_revert.apply(client, steps, say=_say(self))
        except AcceleronError as error:
            raise CommandError(error.message) from error
        finally:
            db.dispose()
        self.app.stderr.write(
            "Cyborg's providers and allocations are back. Now start Cyborg's services, point "
            "the catalog's accelerator endpoint at Cyborg, and restart nova-compute on every "
            "host.\n"
        )
        return 0


def _show(command: Command, lines: list[str], refusal: AcceleronError | None) -> int | None:
    """Print a plan's lines, then why it is refused (EXIT_REFUSED); None when it is not."""
    for line in lines:
        command.app.stdout.write(line + "\n")
    if refusal is None:
        return None
    command.app.stderr.write(refusal.message + "\n")
    return EXIT_REFUSED


def _say(command: Command) -> Callable[[str], None]:
    """What prints each change as it is done."""

    def say(line: str) -> None:
        command.app.stdout.write(f"done: {line}\n")

    return say


def remote_placement_conf(command: Command) -> cfg.ConfigOpts:
    """The configuration, refused unless Placement is the cloud's (remote, nested), and
    logging set up as the service's when the configuration sends it somewhere (a file,
    the journal, syslog): every change is logged there as well as printed."""
    from acceleron import logs

    conf = load_conf(command)
    if conf.placement.mode != "remote" or not conf.placement.nested:
        raise CommandError(
            "Cyborg's providers and allocations are in the cloud's Placement, and the "
            "adoption moves them to Acceleron's nested providers: set [placement] mode = "
            f"remote (it is {conf.placement.mode}) and nested = true. Nothing was changed."
        )
    if conf.log_file or conf.log_dir or conf.use_journal or conf.use_syslog:
        try:
            logs.setup(conf, "acceleron-adopt")
        except logs.LoggingUnavailable as error:
            raise CommandError(f"{error} Nothing was changed.") from error
    return conf


def _database_url(parsed_args: argparse.Namespace) -> str:
    """Cyborg's database URL: the option, the file's first line, or the environment."""
    if parsed_args.database:
        return str(parsed_args.database)
    path: Path | None = parsed_args.database_file
    if path is not None:
        try:
            lines = path.read_text().splitlines()
        except OSError as error:
            raise CommandError(f"Cannot read {path}: {error.strerror or error}") from error
        url = lines[0].strip() if lines else ""
        if not url:
            raise CommandError(f"{path} is empty: its first line must be Cyborg's database URL.")
        return url
    url = os.environ.get(DATABASE_ENV, "").strip()
    if not url:
        raise CommandError(
            f"Say where Cyborg's database is: --database-file PATH (a file holding its URL), "
            f"${DATABASE_ENV}, or --database URL."
        )
    return url


def _default_plan_file(conf: cfg.ConfigOpts) -> Path:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path(conf.state_path) / f"cyborg-adoption-{stamp}.json"


def _write(path: Path, document: dict[str, Any]) -> None:
    """Write the plan's document whole, or not at all (before any change is made)."""
    part = path.with_name(path.name + ".part")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        part.write_text(json.dumps(document, indent=2, sort_keys=True, default=str) + "\n")
        part.replace(path)
    except OSError as error:
        raise CommandError(
            f"Cannot write the plan to {path}: {error.strerror or error}. Nothing was changed."
        ) from error


def _read_document(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text())
    except OSError as error:
        raise CommandError(f"Cannot read {path}: {error.strerror or error}") from error
    except ValueError as error:
        raise CommandError(f"{path} is not a plan file (JSON): {error}") from error
    if not isinstance(document, dict):
        raise CommandError(f"{path} is not a plan file: it holds no JSON object.")
    return document


def _limits(conf: cfg.ConfigOpts) -> Limits:
    from acceleron.service import device_profiles

    section = conf.device_profiles
    return device_profiles.Limits(
        max_groups=section.max_groups,
        max_accelerators=section.max_accelerators,
        max_accelerators_per_group=section.max_accelerators_per_group,
    )


def _mapping(path: Path | None) -> NameMapping:
    from acceleron.exceptions import AcceleronError
    from acceleron.service import device_profiles

    if path is None:
        return device_profiles.NameMapping()
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise CommandError(f"Cannot read {path}: {error}") from error
    try:
        return device_profiles.NameMapping.from_dict(data)
    except AcceleronError as error:
        raise CommandError(error.message) from error
