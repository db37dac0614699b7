"""The ``acceleron`` command.

Each command's module is imported only when that command runs (``--help`` imports
them all): a client command pays for its own imports, not for the server's.
A command name must be typed in full; a near miss is answered with suggestions.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import importlib
import inspect
import logging
import sys
from collections.abc import Sequence
from typing import Any

from cliff.app import App
from cliff.command import Command
from cliff.commandmanager import CommandManager, EntryPointWrapper
from cliff.help import HelpCommand

import acceleron
from acceleron.cli import client

# Command name -> "module:class" under acceleron.cli.
COMMANDS = {
    "all-in-one": "server:AllInOne",
    "api": "server:Api",
    "api reference": "server:ApiReference",
    "config sample": "server:ConfigSample",
    "db upgrade": "server:DbUpgrade",
    "db version": "server:DbVersion",
    "db rewrite-profiles": "server:DbRewriteProfiles",
    "status upgrade check": "status:UpgradeCheck",
    "adopt cyborg": "adopt:AdoptCyborg",
    "adopt revert": "adopt:AdoptRevert",
    "policy defaults": "server:PolicyDefaults",
    "agent": "agent:Agent",
    "profile list": "profiles:ListProfiles",
    "profile show": "profiles:ShowProfile",
    "profile create": "profiles:CreateProfile",
    "profile update": "profiles:UpdateProfile",
    "profile enable": "profiles:EnableProfile",
    "profile disable": "profiles:DisableProfile",
    "profile delete": "profiles:DeleteProfile",
    "device list": "inventory:ListDevices",
    "device show": "inventory:ShowDevice",
    "device enable": "inventory:EnableDevice",
    "device disable": "inventory:DisableDevice",
    "device maintenance": "health:Maintenance",
    "device drain": "health:Drain",
    "device history": "health:History",
    "deployable list": "inventory:ListDeployables",
    "deployable show": "inventory:ShowDeployable",
    "deployable program": "programming:ProgramDeployable",
    "host list": "hosts:ListHosts",
    "host show": "hosts:ShowHost",
    "placement sync": "placement:Sync",
    "placement migrate-to-nested": "placement:MigrateToNested",
    "placement reconcile": "placement:Reconcile",
    "bitstream upload": "bitstreams:UploadBitstream",
    "bitstream list": "bitstreams:ListBitstreams",
    "bitstream show": "bitstreams:ShowBitstream",
    "bitstream download": "bitstreams:DownloadBitstream",
    "bitstream delete": "bitstreams:DeleteBitstream",
    "arq list": "arqs:ListArqs",
    "arq show": "arqs:ShowArq",
    "arq delete": "arqs:DeleteArq",
    "arq program": "programming:ProgramArq",
    "quota show": "quotas:ShowQuota",
    "claim": "claim:Claim",
    "release": "claim:Release",
}
EXIT_UNKNOWN_COMMAND = 2


class LazyCommand(EntryPointWrapper):
    """A command whose module is imported when the command is looked up."""

    def __init__(self, name: str, target: str) -> None:
        self.name = name
        self.target = target

    def load(self) -> type[Command]:
        module, _, attr = self.target.partition(":")
        loaded: type[Command] = getattr(importlib.import_module(f"acceleron.cli.{module}"), attr)
        return loaded

    @property
    def value(self) -> str:
        return f"acceleron.cli.{self.target}"


class ExactCommandManager(CommandManager):
    """cliff's manager runs a command from a unique prefix of its words ("profil list"
    runs "profile list"); this one runs only a name typed in full."""

    def find_command(self, argv: list[str]) -> tuple[type[Command], str, list[str]]:
        for i in range(len(command_words(argv)), 0, -1):
            name = " ".join(argv[:i])
            if name in self.commands:
                return self.commands[name].load(), name, argv[i:]
        raise ValueError(f"Unknown command {argv!r}")


def command_words(argv: list[str]) -> list[str]:
    """The words that may name the command: those before its first option."""
    options = [i for i, word in enumerate(argv) if word.startswith("-")]
    return argv[: options[0]] if options else argv


def suggestions(words: list[str], names: list[str]) -> list[str]:
    """The command names closest to what was typed (compared word count for word count);
    a group's commands for the group's name alone ("profile")."""
    group = sorted(name for name in names if words and name.split()[: len(words)] == words)
    if group:
        return group
    scored = []
    for name in names:
        typed = " ".join(words[: len(name.split())])
        scored.append((difflib.SequenceMatcher(None, typed, name).ratio(), name))
    best = max((score for score, _ in scored), default=0.0)
    if best < 0.7:
        return []
    return sorted(name for score, name in scored if score >= best - 0.05)


class GlobalParser(argparse.ArgumentParser):
    """The options before the command, and after it those the commands do not share:
    ``--timeout`` after a command is the command's (``claim``, ``deployable program``,
    ``device drain``), not keystoneauth's HTTP timeout, which goes before the command.

    Where the command begins is the first word that is neither an option nor an
    option's value: the options that take a value are recorded as they are added
    (``record_valued``), argparse having no public table of its options."""

    COMMANDS_OWN = ("--timeout",)
    valued: set[str]

    def record_valued(self) -> None:
        """From now on, note each option added with a value to store or append (the
        actions of every option that takes one here: cliff's, keystoneauth's, ours)."""
        self.valued = set()
        for name, kind in ((None, _Store), ("store", _Store), ("append", _Append)):
            self.register("action", name, functools.partial(_noted, self.valued, kind))

    def parse_known_args(  # type: ignore[override]
        self, args: list[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        argv = list(sys.argv[1:] if args is None else args)
        start = self._command_start(argv)
        kept, commands_own = argv[:start], []
        words = iter(argv[start:])
        for word in words:
            if word in self.COMMANDS_OWN:
                commands_own += [word, next(words, "")]
            elif word.split("=", 1)[0] in self.COMMANDS_OWN:
                commands_own.append(word)
            else:
                kept.append(word)
        if namespace is None:
            parsed, rest = super().parse_known_args(kept)
        else:
            parsed, rest = super().parse_known_args(kept, namespace)
        return parsed, rest + commands_own

    def _command_start(self, argv: list[str]) -> int:
        index = 0
        while index < len(argv) and argv[index].startswith("-"):
            takes_value = argv[index] in self.valued
            index += 2 if takes_value else 1
        return index


class _Store(argparse.Action):
    """argparse's default action: the option's value, stored."""

    def __call__(
        self, parser: Any, namespace: argparse.Namespace, values: Any, option: Any = None
    ) -> None:
        setattr(namespace, self.dest, values)


class _Append(argparse.Action):
    """argparse's ``append``: each value, added to a new list."""

    def __call__(
        self, parser: Any, namespace: argparse.Namespace, values: Any, option: Any = None
    ) -> None:
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest, None) or []), values])


def _noted(valued: set[str], kind: type[argparse.Action], **kwargs: Any) -> argparse.Action:
    action = kind(**kwargs)
    if action.nargs != 0:
        valued.update(action.option_strings)
    return action


# oslo.log's command-line options, as every OpenStack service takes them: (names, dest,
# takes a value). cliff has --log-file and --debug already; the services read them too.
LOG_ARGUMENTS = (
    (("--log-dir", "--logdir"), "log_dir", True),
    (("--log-config-append", "--log-config"), "log_config_append", True),
    (("--log-date-format",), "log_date_format", True),
    (("--use-syslog",), "use_syslog", False),
    (("--syslog-log-facility",), "syslog_log_facility", True),
    (("--use-journal",), "use_journal", False),
    (("--use-json",), "use_json", False),
)


def _register_log_arguments(parser: argparse.ArgumentParser) -> None:
    """oslo.log's options for the commands that serve (api, agent, all-in-one) and those
    that log what they change (adopt cyborg): each sets its [DEFAULT] option."""
    # cliff's own --log-file and --debug, replaced (the parser resolves the conflict).
    parser.add_argument(
        "--log-file", "--logfile", dest="log_file", help="Log to this file ([DEFAULT] log_file)."
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        default=False,
        help="Show tracebacks on errors; a service logs at DEBUG ([DEFAULT] debug).",
    )
    group = parser.add_argument_group(
        "Service logging (oslo.log's options, before the command: api, agent, all-in-one, "
        "adopt cyborg)"
    )
    for names, dest, takes_value in LOG_ARGUMENTS:
        what = f"[DEFAULT] {dest}"
        if takes_value:
            group.add_argument(*names, dest=dest, metavar="VALUE", help=f"Sets {what}.")
        else:
            group.add_argument(
                *names, dest=dest, action="store_true", default=None, help=f"Sets {what} to true."
            )


def log_arguments(options: argparse.Namespace) -> list[str]:
    """The oslo.log options given on the command line, as oslo.config takes them."""
    args = ["--debug"] if getattr(options, "debug", False) else []
    if getattr(options, "log_file", None):
        args += ["--log-file", options.log_file]
    for names, dest, takes_value in LOG_ARGUMENTS:
        value = getattr(options, dest, None)
        if value and takes_value:
            args += [names[0], value]
        elif value:
            args.append(names[0])
    return args


def summary(command: type[Command]) -> str:
    """A command's first sentence, as the help lists it."""
    return (inspect.getdoc(command) or "").split("\n\n")[0].rstrip(".")


class GroupHelp(HelpCommand):
    """Print the help of a command, or list a group's commands ("profile")."""

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        words = parsed_args.cmd
        group = sorted(n for n in COMMANDS if words and n.split()[: len(words)] == words)
        if not group or " ".join(words) in COMMANDS:
            result: int = super().take_action(parsed_args)
            return result
        width = max(map(len, group))
        self.app.stdout.write(
            f"The {' '.join(words)} commands (each with --help for its options):\n"
        )
        for name in group:
            text = summary(LazyCommand(name, COMMANDS[name]).load())
            self.app.stdout.write(f"  {name:<{width}}  {text}\n")
        return 0


class AcceleronApp(App):
    def __init__(self, argv: Sequence[str] = ()) -> None:
        self.argv = list(argv)  # for the options: Keystone's are loaded only when wanted
        self.showed_help = False
        manager = ExactCommandManager(None)
        for name, target in COMMANDS.items():
            manager.commands[name] = LazyCommand(name, target)
        super().__init__(
            description="Acceleron: accelerator management for clouds.",
            version=acceleron.__version__,
            command_manager=manager,
            deferred_help=True,
        )
        manager.add_command("help", GroupHelp)

    def build_option_parser(
        self, description: str | None, version: str | None, argparse_kwargs: Any = None
    ) -> argparse.ArgumentParser:
        # An option added here replaces cliff's of the same name (--version, --log-file,
        # --debug): argparse's own way to redefine one.
        kwargs = {**(argparse_kwargs or {}), "conflict_handler": "resolve"}
        parser = super().build_option_parser(description, version, kwargs)
        parser.__class__ = GlobalParser  # cliff makes a plain ArgumentParser
        assert isinstance(parser, GlobalParser)
        parser.record_valued()
        # The program's name, whatever started the process (cliff takes sys.argv[0]).
        parser.prog = "acceleron"
        parser.add_argument(
            "--version", action="version", version=f"acceleron {acceleron.__version__}"
        )
        parser.add_argument(
            "--config-file",
            action="append",
            metavar="PATH",
            help="Configuration file (repeatable); default: acceleron.conf in ~/.acceleron, "
            "~, /etc/acceleron or /etc. For the server-side commands; given, a client "
            "command calls the API it describes ([api] public_endpoint, else host_ip and "
            "port) unless --os-url names another.",
        )
        _register_log_arguments(parser)
        client.register_arguments(parser, self.argv)
        return parser

    def configure_logging(self) -> None:
        """Plain messages on stderr; server commands set up full logging themselves."""
        handler = logging.StreamHandler(self.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        root = logging.getLogger()
        root.handlers[:] = [handler]
        verbose = self.options.verbose_level > 1 or self.options.debug
        root.setLevel(logging.DEBUG if verbose else logging.WARNING)

    def interact(self) -> None:
        """No command given: the help, not cliff's interactive prompt."""
        self.showed_help = True
        self.run_subcommand(["help"])

    def run(self, argv: list[str]) -> int:
        result: int = super().run(argv)
        return 0 if self.showed_help else result

    def run_subcommand(self, argv: list[str]) -> int:
        try:
            self.command_manager.find_command(argv)
        except ValueError:
            return self.unknown_command(argv)
        result: int = super().run_subcommand(argv)
        return result

    def unknown_command(self, argv: list[str]) -> int:
        words = command_words(argv)
        typed = " ".join(words) or " ".join(argv)
        self.stderr.write(f"'{typed}' is not a command: see 'acceleron help'.\n")
        close = suggestions(words, [name for name, _ in self.command_manager])
        if close:
            self.stderr.write(f"Did you mean: {', '.join(close)}?\n")
        return EXIT_UNKNOWN_COMMAND


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    return AcceleronApp(words).run(words)


def console() -> None:
    """The ``acceleron`` program.

    keystoneauth and the embedded Placement import osprofiler when it is installed (the
    test extras bring it, for Glance) to trace requests for a profiler that Acceleron
    never configures. With the oslo.config and WebOb it pulls in, that import is a
    quarter of a client command's start-up: this process goes without it.
    """
    sys.modules.setdefault("osprofiler", None)  # type: ignore[arg-type]
    sys.exit(main())


if __name__ == "__main__":
    console()
