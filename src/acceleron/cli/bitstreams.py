"""``acceleron bitstream ...``: bitstreams through the REST API (2.7).

``upload`` creates the bitstream, then sends the file's bytes with a progress
bar on stderr. For an Intel GBS image it takes the region type (the header's
interface uuid) and the function (its one accelerator-type uuid) from the
header unless they are given, and says so. ``download`` checks the bytes
against the hash the API sends before the file appears under its name.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TextIO

import requests

from acceleron.cli.base import AnyCommand, Command, ShowOne
from acceleron.cli.client import ApiClient, CommandError
from acceleron.cli.inventory import _List, fetch, find_uuid, raw, show
from acceleron.exceptions import AcceleronError
from acceleron.microversion import V2_7

if TYPE_CHECKING:  # the bitstream store's package loads SQLAlchemy: only where needed
    from acceleron.bitstreams import Bitstream

PATH = "/v2/bitstreams"
VERSION = V2_7
HASH_HEADER = "X-Bitstream-Hash"
OCTET_STREAM = "application/octet-stream"
MIB = 1 << 20
CHUNK_SIZE = MIB
COLUMNS = ("uuid", "name", "status", "size", "function_uuid", "function_name",
           "region_type_uuid", "vendor", "visibility")  # fmt: skip
FILTERS = ("name", "function_uuid", "function_name", "region_type_uuid", "vendor")


class Progress:
    """A file to upload from whose reads draw a progress bar; its length lets the
    HTTP client announce the size, so that the API can refuse a file too large
    before any byte is sent."""

    WIDTH = 30

    def __init__(self, stream: BinaryIO, total: int, out: TextIO, label: str) -> None:
        self._stream = stream
        self._total = total
        self._out = out
        self._label = label
        self._sent = 0
        self._shown = -1
        # Every percent on a terminal; into a log or a pipe, every tenth.
        self._step = 1 if out.isatty() else 10

    def __len__(self) -> int:
        return self._total

    def read(self, size: int = -1) -> bytes:
        chunk = self._stream.read(size)
        self._sent += len(chunk)
        self._draw()
        return chunk

    def _draw(self) -> None:
        percent = 100 * self._sent // self._total if self._total else 100
        if percent == self._shown or (percent % self._step and percent < 100):
            return
        self._shown = percent
        bar = "#" * (self.WIDTH * percent // 100)
        self._out.write(
            f"\r{self._label} [{bar:<{self.WIDTH}}] {percent:3d}%  "
            f"{self._sent / MIB:.1f}/{self._total / MIB:.1f} MiB"
        )
        if self._sent >= self._total:
            self._out.write("\n")
        self._out.flush()


def bitstream_uuid(client: ApiClient, ident: str) -> str:
    """A bitstream by uuid or name."""
    query = {"name": ident}
    what = f"bitstream named {ident!r}"
    return find_uuid(client, PATH, ident, query, what, VERSION)


def _client(command: AnyCommand) -> ApiClient:
    return ApiClient(command.app.options)


def from_header(path: Path, meta: dict[str, Any], out: TextIO) -> None:
    """Fill region type and function from a GBS header where not given; say what."""
    from acceleron.drivers import gbs
    from acceleron.drivers.errors import BitstreamError

    try:
        header = gbs.read_header(path)
    except BitstreamError as error:
        if path.suffix.lower() == ".gbs":
            out.write(f"Nothing taken from the GBS header: {error}\n")
        return
    if meta.get("region_type_uuid") is None:
        meta["region_type_uuid"] = header.interface_uuid
        out.write(f"Region type {header.interface_uuid} taken from the GBS header.\n")
    functions = header.accelerator_type_uuids
    if meta.get("function_uuid") is not None or not functions:
        return
    if len(functions) == 1:
        meta["function_uuid"] = functions[0]
        out.write(f"Function {functions[0]} taken from the GBS header.\n")
    else:
        out.write(
            f"The GBS header names {len(functions)} functions ({', '.join(functions)}): "
            f"give one with --function-uuid.\n"
        )


def parse_properties(pairs: Sequence[str]) -> dict[str, str]:
    result = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CommandError(f"--property {pair!r}: expected KEY=VALUE.")
        result[key] = value
    return result


class UploadBitstream(ShowOne):
    """Upload a bitstream file: its metadata first, then its bytes.

    For a GBS file, the region type and the function come from its header
    unless given:

        acceleron bitstream upload nlb0.gbs --name nlb0 --function-name nlb0
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("file", type=Path, help="The bitstream file")
        parser.add_argument("--name", help="Its name (default: the file's name)")
        parser.add_argument("--function-uuid", help="The function (AFU) id it implements")
        parser.add_argument("--function-name", help="The function's name")
        parser.add_argument("--region-type", help="The region type (interface id) it fits")
        parser.add_argument("--vendor", help="The board vendor (the PCI vendor id is advised)")
        parser.add_argument(
            "--property",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="Further metadata (repeatable)",
        )
        parser.add_argument(
            "--public", action="store_true", help="Let every project see it (admins only)"
        )
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[Any, Any]:
        path: Path = parsed_args.file
        if not path.is_file():
            raise CommandError(f"{path}: no such file.")
        meta = {
            "name": parsed_args.name or path.name,
            "function_uuid": parsed_args.function_uuid,
            "function_name": parsed_args.function_name,
            "region_type_uuid": parsed_args.region_type,
            "vendor": parsed_args.vendor,
        }
        from_header(path, meta, self.app.stderr)
        body = {k: v for k, v in meta.items() if v is not None}
        body["properties"] = parse_properties(parsed_args.property)
        body["visibility"] = "public" if parsed_args.public else "private"
        client = _client(self)
        created = client.request("POST", PATH, json=body, microversion=VERSION)
        try:
            uploaded = self._send(client, created["uuid"], path)
        except BaseException:
            with contextlib.suppress(CommandError):  # no record without data stays behind
                client.request("DELETE", f"{PATH}/{created['uuid']}", microversion=VERSION)
            raise
        return raw(uploaded)

    def _send(self, client: ApiClient, uuid: str, path: Path) -> Any:
        with path.open("rb") as stream:
            progress = Progress(stream, path.stat().st_size, self.app.stderr, path.name)
            return client.request(
                "PUT",
                f"{PATH}/{uuid}/data",
                data=progress,
                headers={"Content-Type": OCTET_STREAM},
                microversion=VERSION,
            )


class ListBitstreams(_List):
    """List the bitstreams the caller sees (public ones and the project's own)."""

    noun = "bitstreams"

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        for name in FILTERS:
            flag = "--region-type" if name == "region_type_uuid" else f"--{name.replace('_', '-')}"
            parser.add_argument(flag, dest=name, help=f"Only those whose {name} is this.")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[Any, Any]:
        query = {n: getattr(parsed_args, n) for n in FILTERS if getattr(parsed_args, n)}
        items = fetch(_client(self), PATH, "bitstreams", query, VERSION)
        return self.emit(parsed_args, items, COLUMNS)


class ShowBitstream(ShowOne):
    """Show a bitstream."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("bitstream", help="uuid or name of the bitstream")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[Any, Any]:
        client = _client(self)
        path = f"{PATH}/{bitstream_uuid(client, parsed_args.bitstream)}"
        return raw(show(client, path, VERSION))


class DeleteBitstream(Command):
    """Delete bitstreams."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("bitstreams", nargs="+", help="uuids or names of the bitstreams")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        client = _client(self)
        uuids = [bitstream_uuid(client, ident) for ident in parsed_args.bitstreams]
        for uuid in uuids:
            client.request("DELETE", f"{PATH}/{uuid}", microversion=VERSION)
        return 0


class DownloadBitstream(Command):
    """Download a bitstream, verified against the hash the API sends."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("bitstream", help="uuid or name of the bitstream")
        parser.add_argument(
            "-o",
            "--output",
            help="Where to write it (default: its name, here; '-': standard output, where "
            "the last chunk only comes once the whole is verified)",
        )
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        from acceleron.bitstreams.transfer import verified, write_verified

        client = _client(self)
        path = f"{PATH}/{bitstream_uuid(client, parsed_args.bitstream)}"
        record = show(client, path, VERSION)
        output = parsed_args.output or Path(record["name"]).name
        with client.stream(f"{path}/data", microversion=VERSION) as response:
            expected = _expected(record, response.headers.get(HASH_HEADER, ""))
            chunks = response.iter_content(CHUNK_SIZE)
            try:
                if output == "-":
                    for chunk in verified(chunks, expected):
                        sys.stdout.buffer.write(chunk)
                    return 0
                write_verified(chunks, Path(output), expected)
            except (requests.RequestException, ConnectionError) as error:
                raise CommandError(
                    f"{output}: the download broke off ({error}); nothing was kept."
                ) from error
            except (AcceleronError, OSError) as error:
                raise CommandError(f"{output}: {error}") from error
        self.app.stderr.write(f"{output}: {record['size']} bytes, {expected.hash_algo} verified.\n")
        return 0


def _expected(record: dict[str, Any], header: str) -> Bitstream:
    """What the bytes must be: the size the API showed and the hash it sent."""
    from acceleron.bitstreams import Bitstream

    algo, sep, value = header.partition(":")
    if not sep:
        raise CommandError(f"The API sent no {HASH_HEADER} header: the bytes cannot be checked.")
    return Bitstream(
        id=record["uuid"],
        name=record["name"],
        size=record["size"],
        hash_algo=algo,
        hash_value=value,
    )
