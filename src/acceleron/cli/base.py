"""The bases of the CLI's commands: cliff's, with help that keeps its paragraphs and
examples as written, and lists that say so when they are empty."""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import textwrap
from collections.abc import Iterable, Sequence
from typing import Any

from cliff import command, lister, show

# Any command, lists and shows included (for type hints).
AnyCommand = command.Command


def _filled(text: str) -> str:
    """A description's paragraphs filled one by one to the terminal's width, as argparse
    fills help; an indented paragraph (an example) keeps its lines."""
    width = max(shutil.get_terminal_size().columns - 2, 20)
    paragraphs = []
    for paragraph in text.strip("\n").split("\n\n"):
        if paragraph.startswith(" "):
            paragraphs.append(paragraph)
        else:
            paragraphs.append(textwrap.fill(" ".join(paragraph.split()), width))
    return "\n\n".join(paragraphs)


def _formatted(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    if parser.description:
        parser.description = _filled(parser.description)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


class _Acceleron:
    app: Any

    def run(self, parsed_args: argparse.Namespace) -> int:
        """The command; a CommandError is its message on standard error, once, and exit
        status 1 (cliff would log it, and a server command's log adds the exception to
        the line: the message twice). Where a server command's log goes elsewhere too (a
        file, the journal, syslog), the message is logged there. --debug: cliff's
        traceback."""
        from acceleron.cli.client import CommandError

        try:
            result: int = super().run(parsed_args)  # type: ignore[misc]
            return result
        except CommandError as error:
            if getattr(self.app.options, "debug", False):
                raise
            message = str(error)
        self.app.stderr.write(f"{message}\n")
        if "acceleron.logs" in sys.modules:  # set up by a server command
            from acceleron import logs

            logs.elsewhere(logging.ERROR, message, skip=(self.app.stderr,))
        return 1

    def get_epilog(self) -> str:
        """None. cliff reads the metadata of every installed distribution (0.2 s) to say
        which plugin provides a command; every command here is Acceleron's."""
        return ""


class Command(_Acceleron, command.Command):
    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        return _formatted(super().get_parser(prog_name))


class ShowOne(_Acceleron, show.ShowOne):
    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        return _formatted(super().get_parser(prog_name))


class Lister(_Acceleron, lister.Lister):
    """A list; in a table, an empty one is the line "No <noun>." (the header alone with
    --print-empty; nothing when the command has no noun)."""

    noun: str | None = None

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        return _formatted(super().get_parser(prog_name))

    def produce_output(
        self,
        parsed_args: argparse.Namespace,
        column_names: Sequence[str],
        data: Iterable[Sequence[Any]],
    ) -> int:
        rows = list(data)
        table = parsed_args.formatter == "table" and not parsed_args.print_empty
        if not rows and self.noun and table:
            return self.say_empty()
        result: int = super().produce_output(parsed_args, column_names, rows)
        return result

    def say_empty(self) -> int:
        self.app.stdout.write(f"No {self.noun}.\n")
        return 0
