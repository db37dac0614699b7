"""``acceleron status upgrade check``: run on the service's host, against its database."""

from __future__ import annotations

import argparse
import traceback

from acceleron.cli.base import Command
from acceleron.cli.server import load_conf

# oslo.upgradecheck's exit status when a check could not run (beside 0, 1 and 2).
EXIT_ERROR = 255


class UpgradeCheck(Command):
    """Check what would break the next step of an upgrade (oslo.upgradecheck).

    Checks the schema (pending expand or contract revisions), the agents' versions and
    the device profiles' names. Exit status: 0 all passed, 1 a warning (the details say
    what to do next), 2 a failure (fix it before going on), 255 a check could not run.
    """

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        from acceleron.db import session as db_session
        from acceleron.service.upgrade_checks import Checks

        db = db_session.from_conf(load_conf(self))
        try:
            return int(Checks(db).check())
        except Exception:
            self.app.stdout.write(f"Error:\n{traceback.format_exc()}")
            return EXIT_ERROR
        finally:
            db.dispose()
