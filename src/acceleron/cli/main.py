"""The ``acceleron`` command."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from cliff.app import App
from cliff.command import Command
from cliff.commandmanager import CommandManager

import acceleron
from acceleron.cli import (
    agent,
    arqs,
    bitstreams,
    claim,
    client,
    inventory,
    placement,
    profiles,
    programming,
    server,
)


class AcceleronApp(App):
    def __init__(self) -> None:
        manager = CommandManager(None)
        commands: dict[str, type[Command]] = {
            **server.COMMANDS,
            **profiles.COMMANDS,
            **agent.COMMANDS,
            **inventory.COMMANDS,
            **placement.COMMANDS,
            **bitstreams.COMMANDS,
            **programming.COMMANDS,
            **arqs.COMMANDS,
            **claim.COMMANDS,
        }
        for name, command in commands.items():
            manager.add_command(name, command)
        super().__init__(
            description="Acceleron: accelerator management for clouds.",
            version=acceleron.__version__,
            command_manager=manager,
            deferred_help=True,
        )

    def build_option_parser(
        self, description: str | None, version: str | None, argparse_kwargs: Any = None
    ) -> argparse.ArgumentParser:
        parser = super().build_option_parser(description, version, argparse_kwargs)
        parser.add_argument(
            "--config-file",
            action="append",
            metavar="PATH",
            help="Configuration file (repeatable); default: acceleron.conf in ~/.acceleron, "
            "~, /etc/acceleron or /etc. For the server-side commands.",
        )
        client.register_arguments(parser, sys.argv[1:])
        return parser

    def configure_logging(self) -> None:
        """Plain messages on stderr; server commands set up full logging themselves."""
        handler = logging.StreamHandler(self.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        root = logging.getLogger()
        root.handlers[:] = [handler]
        root.setLevel(logging.DEBUG if self.options.verbose_level > 1 else logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    return AcceleronApp().run(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
