"""``acceleron adopt cyborg``: take over from a running Cyborg (docs/adopt-from-cyborg.md).

Like ``acceleron db ...`` it runs on the service's host: it reads the configuration
files (``--config-file``) for Acceleron's database and Placement, and Cyborg's database
at ``--database`` (never written). The work is ``acceleron.service.adopt``'s.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from acceleron.cli.base import Command
from acceleron.cli.client import CommandError
from acceleron.cli.server import load_conf

if TYPE_CHECKING:
    from acceleron.db.session import Database
    from acceleron.service.adopt import Plan
    from acceleron.service.device_profiles import NameMapping
    from acceleron.service.placement import PlacementService

EXIT_REFUSED = 1


class AdoptCyborg(Command):
    """Adopt a running Cyborg's device profiles, requests and Placement allocations.

    With Acceleron's agents already reporting the same devices: creates Cyborg's device
    profiles (same names and uuids, groups rewritten to the names Acceleron publishes),
    keeps its accelerator requests (uuid, project, state, instance, attach handle),
    moves every server's allocation from Cyborg's providers to Acceleron's in one write
    per server, then deletes Cyborg's providers. Anything it cannot map stops it before
    any change. Run it again after an interruption: it finishes what is left.

        acceleron adopt cyborg --database mysql+pymysql://cyborg:PW@db/cyborg --dry-run
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument(
            "--database", required=True, metavar="URL", help="Cyborg's database (read only)"
        )
        parser.add_argument(
            "--mapping",
            type=Path,
            help="Renames for the device profiles' groups, as for `acceleron db "
            "rewrite-profiles` (resource classes Acceleron publishes otherwise are renamed "
            "without one)",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Print the whole plan; change nothing"
        )
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        from acceleron.db import session as db_session
        from acceleron.exceptions import AcceleronError
        from acceleron.service import adopt, device_profiles
        from acceleron.service.placement import PlacementService

        conf = load_conf(self)
        if conf.placement.mode == "disabled" or not conf.placement.nested:
            raise CommandError(
                "Adopting Cyborg moves allocations to Acceleron's nested providers: set "
                "[placement] mode (remote) and nested = true."
            )
        mapping = _mapping(parsed_args.mapping)
        db = db_session.from_conf(conf)
        try:
            service = PlacementService(conf, db)
            cyborg = adopt.read_cyborg(parsed_args.database)
            hosts = {d.hostname for d in cyborg.devices}
            ours = adopt.read_ours(db, hosts, service.options)
            view = adopt.read_placement(service.client(), cyborg, ours)
            section = conf.device_profiles
            limits = device_profiles.Limits(
                max_groups=section.max_groups,
                max_accelerators=section.max_accelerators,
                max_accelerators_per_group=section.max_accelerators_per_group,
            )
            plan = adopt.plan(cyborg, ours, view, mapping, limits)
            return self._run(plan, db, service, dry_run=parsed_args.dry_run)
        except AcceleronError as error:
            raise CommandError(error.message) from error
        finally:
            db.dispose()

    def _run(self, plan: Plan, db: Database, service: PlacementService, *, dry_run: bool) -> int:
        from acceleron.service import adopt

        out, err = self.app.stdout, self.app.stderr
        for line in plan.lines():
            out.write(line + "\n")
        if plan.problems:
            err.write(adopt.AdoptionRefused(plan.problems).message + "\n")
            return EXIT_REFUSED
        if plan.nothing_to_do:
            err.write("Nothing to do: everything is adopted already.\n")
            return 0
        if dry_run:
            err.write("Dry run: nothing was changed. Run without --dry-run to adopt.\n")
            return 0

        def say(line: str) -> None:
            out.write(f"done: {line}\n")

        adopt.apply(db, service.client(), service.syncer(), plan, say=say)
        err.write(
            "Adopted: point the catalog's accelerator endpoint at Acceleron, stop "
            "Cyborg's services, and restart nova-compute on every host (it keeps Cyborg's "
            "providers, deleted now, in its cache and fails every claim until then).\n"
        )
        return 0


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
