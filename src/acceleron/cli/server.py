"""Commands that run on the service's own host: servers, schema, config, policy.

These read the configuration files (``--config-file``); every other command
talks to the REST API.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acceleron.cli.base import AnyCommand, Command, Lister
from acceleron.cli.client import CommandError

if TYPE_CHECKING:
    from oslo_config import cfg

# The server-side modules (FastAPI, SQLAlchemy, Alembic, uvicorn) are imported
# inside the commands that need them: client commands must start fast.


def load_conf(
    command: AnyCommand, overrides: dict[str, dict[str, Any]] | None = None
) -> cfg.ConfigOpts:
    from oslo_config import cfg

    from acceleron import conf as confmod
    from acceleron.cli.main import log_arguments

    files = command.app.options.config_file or None
    try:
        return confmod.load(
            log_arguments(command.app.options), config_files=files, overrides=overrides
        )
    except cfg.Error as error:
        raise CommandError(f"Configuration error: {error}") from error


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` for the server, before anything is printed or
    started; one clear line when the port is taken."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        reason = (error.strerror or str(error)).lower()
        hint = ""
        if error.errno == errno.EADDRINUSE:
            hint = " Stop what holds it, or choose another: make run PORT=..., or --port."
        raise CommandError(f"Cannot listen on {host}:{port}: {reason}.{hint}") from error
    return sock


def serve(conf: cfg.ConfigOpts, host: str, port: int, workers: int = 1) -> None:
    """Run the API until interrupted; refuse to start on an out-of-date schema."""
    import uvicorn

    from acceleron import logs
    from acceleron.api.app import UVICORN_OPTIONS, Server, create_app
    from acceleron.db import migrate
    from acceleron.db import session as db_session
    from acceleron.exceptions import SchemaOutOfDate

    sock = listen(host, port)
    logs.setup(conf, "acceleron-api")
    db = db_session.from_conf(conf)
    try:
        migrate.check(db)
    except SchemaOutOfDate as error:
        sock.close()
        raise CommandError(error.message) from error
    finally:
        db.dispose()
    if workers > 1:  # uvicorn binds once more, for its worker processes
        sock.close()
        os.environ["ACCELERON_CONFIG_FILES"] = json.dumps(conf.config_file)
        _command_line_to_environment(conf)
        _metrics_directory()
        uvicorn.run(
            "acceleron.api.app:from_environment",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            **UVICORN_OPTIONS,
            timeout_graceful_shutdown=conf.api.shutdown_timeout,
        )
    else:
        app = create_app(conf, settle=True)
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            **UVICORN_OPTIONS,
            timeout_graceful_shutdown=conf.api.shutdown_timeout,
        )
        with contextlib.suppress(KeyboardInterrupt):  # uvicorn hands Ctrl-C on at the end
            Server(config, app).run(sockets=[sock])


def _command_line_to_environment(conf: cfg.ConfigOpts) -> None:
    """The options the command line set (oslo.log's: --log-file, --debug, ...) for the
    worker processes, which read the files and the environment (OS_<GROUP>__<OPTION>)."""
    from oslo_config import cfg

    for name in (
        "debug",
        "log_file",
        "log_dir",
        "log_config_append",
        "log_date_format",
        "use_syslog",
        "syslog_log_facility",
        "use_journal",
        "use_json",
    ):
        found = conf.get_location(name)
        if found is not None and found.location == cfg.Locations.command_line:
            os.environ[f"OS_DEFAULT__{name.upper()}"] = str(conf[name])


def _metrics_directory() -> None:
    """Where worker processes write their metrics for a scrape of any to add up: the
    operator's PROMETHEUS_MULTIPROC_DIR (emptied: values of a previous run would count
    again), else a directory of our own, removed at exit."""
    import atexit
    import shutil
    import tempfile

    from acceleron.metrics import MULTIPROC_ENV

    directory = os.environ.get(MULTIPROC_ENV)
    if directory:
        for stale in Path(directory).glob("*.db"):
            stale.unlink()
    else:
        directory = tempfile.mkdtemp(prefix="acceleron-metrics-")
        atexit.register(shutil.rmtree, directory, True)
        os.environ[MULTIPROC_ENV] = directory


def _upgrade(conf: cfg.ConfigOpts, phase: str | None, revision: str | None) -> str:
    """Run one phase, both, or up to one revision; what each phase was and is."""
    from acceleron.db import migrate
    from acceleron.db import session as db_session
    from acceleron.exceptions import AcceleronError

    steps = {"expand": migrate.expand, "contract": migrate.contract, None: migrate.all_phases}
    db = db_session.from_conf(conf)
    try:
        before = migrate.state(db)
        if revision is not None:
            migrate.to_revision(db, revision)
        else:
            steps[phase](db)
        after = migrate.state(db)
    except AcceleronError as error:
        raise CommandError(error.message) from error
    finally:
        db.dispose()
    lines = []
    # The phase run; with --revision or neither, both (each names its own revisions: the
    # line before the split, 0001 to 0015, would show as the contract phase's too).
    for name in (phase,) if phase else ("expand", "contract"):
        was, now = getattr(before, name).current, getattr(after, name).current
        lines.append(f"Database schema ({name}): {was or 'empty'} -> {now or 'empty'}\n")
    return "".join(lines)


class Api(Command):
    """Run the API server (cloud mode; the schema must be up to date)."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--host", help="Address to listen on ([api] host_ip)")
        parser.add_argument("--port", type=int, help="Port to listen on ([api] port)")
        parser.add_argument("--workers", type=int, help="Worker processes ([api] workers)")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        conf = load_conf(self)
        serve(
            conf,
            parsed_args.host or conf.api.host_ip,
            parsed_args.port or conf.api.port,
            parsed_args.workers or conf.api.workers,
        )
        return 0


class AllInOne(Command):
    """Run Acceleron on one machine: API, Placement and agent in one process.

    The API, the real Placement and this host's agent run in one process, SQLite and
    bitstreams in one data directory. Without authentication by default ([DEFAULT]
    auth_strategy = noauth: every caller is an admin); with auth_strategy = keystone,
    API and Placement calls need a Keystone token.
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument(
            "--data-dir", help="Directory for the databases and bitstreams ([DEFAULT] state_path)"
        )
        parser.add_argument("--host", help="Address to listen on ([api] host_ip)")
        parser.add_argument("--port", type=int, help="Port to listen on ([api] port)")
        parser.add_argument(
            "--driver",
            action="append",
            metavar="NAME",
            help="Driver of the agent (repeatable; default: [agent] enabled_drivers, the fake "
            "driver). E.g. --driver nvidia_gpu --driver intel_fpga for this host's devices.",
        )
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        from acceleron import allinone, logs
        from acceleron.exceptions import SchemaOutOfDate, UpgradeInProgress

        overrides: dict[str, dict[str, Any]] = {}
        if parsed_args.data_dir:
            overrides["DEFAULT"] = {"state_path": str(Path(parsed_args.data_dir).resolve())}
        if parsed_args.driver:
            overrides["agent"] = {"enabled_drivers": parsed_args.driver}
        conf = load_conf(self, overrides)
        host = parsed_args.host or conf.api.host_ip
        port = parsed_args.port or conf.api.port
        sock = listen(host, port)
        # Before the banner: a log that cannot be written stops the command here.
        logs.setup(conf, "acceleron-all-in-one")
        self.app.stdout.write(banner(conf, f"http://{host}:{port}"))
        self.app.stdout.flush()
        try:
            allinone.run(conf, sock)
        except (SchemaOutOfDate, UpgradeInProgress) as error:  # its schema upgrade at start
            raise CommandError(error.message) from error
        return 0


def banner(conf: cfg.ConfigOpts, url: str) -> str:
    """What the all-in-one prints first: where everything is, and what to try."""
    from acceleron.cli.client import DEFAULT_URL

    keystone = conf.auth_strategy == "keystone"
    auth = (
        "Keystone: callers need a token"
        if keystone
        else "no authentication: every caller is an admin"
    )
    token = "" if keystone else "   (X-Auth-Token: admin)"
    cli = ".venv/bin/acceleron"
    lines = [
        f"Acceleron all-in-one ({auth})",
        f"  API        {url}/v2",
        f"  Placement  {url}/placement{token}",
        f"  page       {url}/ui",
        *([f"  metrics    {url}/metrics"] if conf.metrics.enabled else []),
        f"  agent      {conf.host}, drivers {', '.join(conf.agent.enabled_drivers)}",
        f"  data       {conf.state_path}",
        "Try, in another terminal"
        + (" with your OS_* credentials set" if keystone else "")
        + " (docs/quickstart.md goes further):",
        *([f"  export ACCELERON_URL={url}"] if url != DEFAULT_URL else []),
        f"  {cli} deployable list --tree",
        f"  {cli} profile create qat-try --group resources:CUSTOM_ACCELERATOR_QAT=1",
        f"  {cli} claim --profile qat-try",
    ]
    return "".join(f"{line}\n" for line in lines)


class DbUpgrade(Command):
    """Upgrade the database schema: both phases by default, or one.

    --expand applies the additions the previous release keeps working with (run it
    while that release serves); --contract applies the rest, once no process of the
    previous release runs. Without either, both (a stopped service, or a first install).
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        phase = parser.add_mutually_exclusive_group()
        for name, what in (("expand", "additions"), ("contract", "once all is upgraded")):
            phase.add_argument(
                f"--{name}",
                dest="phase",
                action="store_const",
                const=name,
                help=f"Only the {name} phase ({what})",
            )
        phase.add_argument("--revision", help="Up to this revision (e.g. expand@head, 0015)")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        self.app.stdout.write(_upgrade(load_conf(self), parsed_args.phase, parsed_args.revision))
        return 0


class DbVersion(Command):
    """Show where the database schema stands in each phase (expand, contract).

    Exit status 0 when both are up to date, 2 otherwise.
    """

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        from acceleron.db import migrate
        from acceleron.db import session as db_session

        db = db_session.from_conf(load_conf(self))
        try:
            schema = migrate.state(db)
        finally:
            db.dispose()
        lines = [f"{p.name + ':':9} {p.describe()}" for p in (schema.expand, schema.contract)]
        lines += [f"unknown:  {revision} (not this release's)" for revision in schema.foreign]
        self.app.stdout.write("".join(f"{line}\n" for line in lines))
        return 0 if schema.up_to_date else 2


class DbRewriteProfiles(Lister):
    """Rewrite resource class, trait and property names in stored device profiles.

    Shows what would change; nothing is written unless --apply is given. The
    mapping file (YAML or JSON) has resource_classes and traits sections (old
    name: new name) and a properties list ({key, value, trait}) turning an
    accel: property into a required trait. Without --mapping, the names this
    release renamed.
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument(
            "--mapping", type=Path, help="Mapping file (default: this release's renames)"
        )
        parser.add_argument("--apply", action="store_true", help="Store the changes")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[Any, Any]:
        import yaml

        from acceleron.db import session as db_session
        from acceleron.exceptions import AcceleronError
        from acceleron.service import device_profiles

        data: Any = None
        if parsed_args.mapping is not None:
            try:
                data = yaml.safe_load(parsed_args.mapping.read_text())
            except (OSError, yaml.YAMLError) as error:
                raise CommandError(f"Cannot read {parsed_args.mapping}: {error}") from error
        db = db_session.from_conf(load_conf(self))
        try:
            mapping = (
                device_profiles.RELEASE_RENAMES
                if parsed_args.mapping is None
                else device_profiles.NameMapping.from_dict(data)
            )
            report = device_profiles.rewrite_profiles(db, mapping, apply=parsed_args.apply)
        except AcceleronError as error:
            raise CommandError(error.message) from error
        finally:
            db.dispose()
        verb = "rewritten" if parsed_args.apply else "would change (dry run: add --apply)"
        self.app.stderr.write(f"{len(report.changes)} device profile(s) {verb}.\n")
        for entry in report.unmatched:
            self.app.stderr.write(f"Mapping entry matched no stored profile: {entry}\n")
        rows = [
            (c.name, index, json.dumps(before), json.dumps(after))
            for c in report.changes
            for index, (before, after) in enumerate(zip(c.before, c.after, strict=True))
            if before != after
        ]
        return ("profile", "group", "before", "after"), rows


class ConfigSample(Command):
    """Print a sample acceleron.conf with every option, generated from the code."""

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        from acceleron import conf as confmod

        self.app.stdout.write(confmod.sample())
        return 0


class ApiReference(Command):
    """Print the API reference (Markdown) or, with --openapi, the OpenAPI schema."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--openapi", action="store_true", help="The schema as JSON")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        from acceleron import conf as confmod
        from acceleron.api import reference
        from acceleron.api.app import create_app

        app = create_app(confmod.load([], config_files=[]), check_schema=False)
        render = reference.openapi_json if parsed_args.openapi else reference.render
        self.app.stdout.write(render(app))
        return 0


class PolicyDefaults(Command):
    """Print the default policy rules as a policy file."""

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        from acceleron.api import policy

        self.app.stdout.write(policy.defaults_yaml())
        return 0
