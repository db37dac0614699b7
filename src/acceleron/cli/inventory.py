"""``acceleron device ...`` and ``acceleron deployable ...``: the inventory through REST.

``deployable show``, ``deployable list --tree`` and ``device show --tree`` draw
the tree, device -> deployables (-> children) -> attach handles::

    host-a  0000:0c:00.0  FPGA  INTEL PAC_ARRIA10 (8086:09c4)  NUMA 0  enabled  (7c0e...)
    ├── region0  [region]  capacity 2  region type ce489693  functions gzip  (5a1f...)
    │   ├── PCI 0000:0c:00.1  in use
    │   └── region0/vfs  [vf_pool]  capacity 2  (9b3c...)
    └── region1  [region]  capacity 1  region type 9926ab6d  (0d4e...)

Functions and bitstreams are shown by the names the bitstreams the caller sees give
them; other 32-hex ids (region types, unnamed functions) by their first 8 digits, in
the tables too. Vendors are their name and PCI id ("INTEL (8086)"). The tables keep to
a few columns (``-c`` names any field of the API's); on a terminal, tables and trees are
fitted to its width. Any other output format (``-f json``, ``-f yaml``) gives the
API's own data, and ``-f value`` or ``-f csv`` the ids in full.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cliff.columns import FormattableColumn

from acceleron.cli.base import AnyCommand, Lister, ShowOne
from acceleron.cli.client import ApiClient, CommandError, api_client
from acceleron.microversion import V2_5, V2_7, V2_13, V2_18, Version
from acceleron.text_tree import Node, draw, topology
from acceleron.uuids import is_uuid_like, parse

DEVICES = "/v2/devices"
DEPLOYABLES = "/v2/deployables"
BITSTREAMS = "/v2/bitstreams"
# The tree needs the 2.5 views (kind, key, parent uuids, attach handles), and 2.13's
# health and maintenance.
TREE_VERSION = V2_13
# A device's line says where it sits: 2.18's pcie_switch and nvlink_domain.
DEVICE_VERSION = V2_18
DEVICE_COLUMNS = ("uuid", "hostname", "pci_address", "type", "vendor", "model", "numa_node",
                  "pcie_switch", "nvlink_domain", "status", "state", "health")  # fmt: skip
DEPLOYABLE_COLUMNS = ("uuid", "name", "kind", "num_accelerators", "availability",
                      "region_type", "functions", "bitstream_id")  # fmt: skip
DEVICE_FILTERS = ("type", "vendor", "hostname", "status", "state", "pci_address", "health")
DEPLOYABLE_FILTERS = ("name", "kind", "key", "parent_uuid", "root_uuid", "device_uuid",
                      "hostname", "type", "availability", "instance_uuid", "rp_uuid",
                      "driver_name", "bitstream_id", "region_type", "function_uuid")  # fmt: skip
RAW_FORMATS = ("json", "yaml")
DEVICE_HELP = "uuid of the device, its PCI address, or HOST_PCI-ADDRESS (host vm: vm_0000:2b:00.0)"
MARK = "  ◀"
SHORT = 8  # hex digits shown of an id that has no name


class JsonColumn(FormattableColumn[Any]):
    """Objects and lists as JSON in tables, as they are in JSON/YAML."""

    def human_readable(self) -> str:
        return json.dumps(self._value, sort_keys=True)

    def machine_readable(self) -> Any:
        return self._value


class Shown(FormattableColumn[Any]):
    """A value as a person reads it in a table (a name, a short id), as it is in the
    other formats."""

    def __init__(self, value: Any, text: str) -> None:
        super().__init__(value)
        self.text = text

    def human_readable(self) -> str:
        return self.text

    def machine_readable(self) -> Any:
        return self._value


def short(ident: str) -> str:
    """The first digits of a 32-hex id or uuid, enough to tell ids apart when reading."""
    return ident.replace("-", "")[:SHORT].lower()


@dataclasses.dataclass(frozen=True)
class Names:
    """The names the bitstreams the caller sees give functions and bitstreams, by id
    (lower case, without hyphens)."""

    functions: Mapping[str, str] = dataclasses.field(default_factory=dict)
    bitstreams: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, client: ApiClient, items: Iterable[Mapping[str, Any]]) -> Names:
        """The names, read from the API only when an item has a function or bitstream; an
        API without bitstreams (before 2.7) names nothing."""
        if not any(_functions(i) or i.get("bitstream_id") for i in items):
            return cls()
        try:
            bitstreams = fetch(client, BITSTREAMS, "bitstreams", {}, V2_7)
        except CommandError:
            return cls()
        functions = {
            _key(b["function_uuid"]): b["function_name"]
            for b in bitstreams
            if b.get("function_uuid") and b.get("function_name")
        }
        return cls(functions, {_key(b["uuid"]): b["name"] for b in bitstreams if b.get("name")})

    def function(self, ident: str) -> str:
        return self.functions.get(_key(ident)) or short(ident)

    def bitstream(self, ident: str) -> str:
        return self.bitstreams.get(_key(ident)) or short(ident)


def _key(ident: str) -> str:
    return ident.replace("-", "").lower()


def _functions(item: Mapping[str, Any]) -> list[str]:
    """Every function of a deployable (the one ``function_uuid`` of views before 2.5)."""
    found: list[str] = item.get("function_uuids") or []
    return found or ([item["function_uuid"]] if item.get("function_uuid") else [])


def vendor(device: Mapping[str, Any]) -> str:
    """A device's vendor as every view shows it: its name and PCI id, "INTEL (8086)"."""
    name = device.get("vendor_name")
    return f"{name} ({device['vendor']})" if name else str(device["vendor"])


def _cell(item: Mapping[str, Any], column: str, names: Names) -> Any:
    value = item.get(column)
    if column == "vendor" and "vendor_name" in item:
        return Shown(value, vendor(item))
    if column == "region_type" and value:
        return Shown(value, short(value))
    if column == "functions":  # function_uuids (function_uuid before 2.5), by name
        return Shown(_functions(item), ", ".join(map(names.function, _functions(item))))
    if value is None:
        return Shown(None, "")
    if column == "bitstream_id" and value:
        return Shown(value, names.bitstream(value))
    return JsonColumn(value) if isinstance(value, dict | list) else value


def _row(
    item: Mapping[str, Any], columns: Sequence[str], names: Names = Names()
) -> tuple[Any, ...]:
    return tuple(_cell(item, column, names) for column in columns)


def raw(item: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """Every field of an API object, for ShowOne."""
    columns = tuple(item)
    return columns, tuple(JsonColumn(v) if isinstance(v, dict | list) else v for v in item.values())


# --- talking to the API ---------------------------------------------------------------


def add_list_options(
    parser: argparse.ArgumentParser, filters: Sequence[str]
) -> argparse.ArgumentParser:
    for name in filters:
        parser.add_argument(
            f"--{name.replace('_', '-')}",
            dest=name,
            metavar=name.upper(),
            help=f"Only those whose {name} is this ('None': those without one).",
        )
    parser.add_argument("--sort-key", help="Field to sort on (default created_at).")
    parser.add_argument("--sort-dir", choices=("asc", "desc"), help="Sort direction.")
    parser.add_argument("--limit", type=int, help="One page of at most this many.")
    parser.add_argument("--marker", help="Start after the item with this uuid.")
    return parser


def list_query(parsed_args: argparse.Namespace, filters: Sequence[str]) -> dict[str, Any]:
    names = (*filters, "sort_key", "sort_dir", "limit", "marker")
    return {n: getattr(parsed_args, n) for n in names if getattr(parsed_args, n) is not None}


def fetch(
    client: ApiClient,
    path: str,
    noun: str,
    query: Mapping[str, Any],
    version: Version | None = None,
) -> list[dict[str, Any]]:
    """Every item of a list (only one page when ``limit`` is given)."""
    params = dict(query)
    extra = {"microversion": version} if version else {}
    items: list[dict[str, Any]] = []
    while True:
        body = client.request("GET", path, params=params, **extra)
        items.extend(body[noun])
        if "limit" in query or not body.get(f"{noun}_links") or not body[noun]:
            return items
        params["marker"] = body[noun][-1]["uuid"]


def find_uuid(
    client: ApiClient,
    path: str,
    ident: str,
    query: Mapping[str, str],
    what: str,
    version: Version | None = None,
) -> str:
    """The uuid of ``ident``: itself when it is one, else that of the one item the list
    at ``path`` has for ``query``, as OSC finds a name. ``what`` names the item for
    the errors ("deployable named 'x'")."""
    if is_uuid_like(ident):
        return parse(ident, what)
    found = fetch(client, path, path.rsplit("/", 1)[1], query, version)
    if not found:
        raise CommandError(f"No {what}.")
    if len(found) > 1:
        which = ", ".join(
            f"{item['uuid']} on {item['hostname']}" if item.get("hostname") else item["uuid"]
            for item in found
        )
        raise CommandError(
            f"{what[:1].upper()}{what[1:]}: {len(found)} match ({which}). Give a uuid."
        )
    uuid: str = found[0]["uuid"]
    return uuid


def device_uuid(client: ApiClient, ident: str) -> str:
    """A device by uuid, PCI address (when one host has it) or HOST_PCI-ADDRESS, the
    name its Placement provider has."""
    host, _, address = ident.rpartition("_")
    query = {"pci_address": address, **({"hostname": host} if host else {})}
    where = f"on {host}" if host else "on any host"
    return find_uuid(client, DEVICES, ident, query, f"device at {address} {where}")


def deployable_uuid(client: ApiClient, ident: str) -> str:
    """A deployable by uuid or name."""
    return find_uuid(client, DEPLOYABLES, ident, {"name": ident}, f"deployable named {ident!r}")


def show(client: ApiClient, path: str, version: Version | None = None) -> dict[str, Any]:
    extra = {"microversion": version} if version else {}
    body: dict[str, Any] = client.request("GET", path, **extra)
    return body


# --- drawing the tree ----------------------------------------------------------------


def device_line(device: Mapping[str, Any]) -> str:
    """A device's line: where it is, what it is, where it sits (NUMA node, PCIe switch,
    NVLink domain), its status and condition."""
    product = f" ({device['vendor']}:{device['product_id']})" if device.get("product_id") else ""
    sits = topology(device.get("numa_node"), device.get("pcie_switch"), device.get("nvlink_domain"))
    words = [device["hostname"], device["pci_address"], device["type"],
             f"{device['vendor_name']} {device['model']}{product}", sits,
             device["status"]]  # fmt: skip
    if device["state"] != "present":
        words.append(device["state"])
    return "  ".join([*words, *condition_words(device), f"({device['uuid']})"])


def condition_words(item: Mapping[str, Any]) -> list[str]:
    """Health other than healthy, and maintenance, with their reasons."""
    words = []
    if item.get("health") not in (None, "ok", "healthy"):
        reason = item.get("health_reason")
        words.append(f"health {item['health']}" + (f" ({reason})" if reason else ""))
    if item.get("maintenance_reason"):
        words.append(f"maintenance ({item['maintenance_reason']})")
    elif item.get("status") == "maintaining" and "kind" in item:
        words.append("maintenance")
    return words


def deployable_line(dep: Mapping[str, Any], names: Names = Names()) -> str:
    """A deployable's line: functions and bitstream by name where ``names`` has one,
    region type (and unnamed functions) by their first digits; a vGPU type's name."""
    words = [dep["key"], f"[{dep['kind']}]", f"capacity {dep['num_accelerators']}"]
    type_name = (dep.get("attributes") or {}).get("type_name")
    if type_name:
        words.append(f"type {type_name}")
    if dep.get("region_type"):
        words.append(f"region type {short(dep['region_type'])}")
    if _functions(dep):
        words.append(f"functions {', '.join(map(names.function, _functions(dep)))}")
    if dep.get("bitstream_id"):
        words.append(f"bitstream {names.bitstream(dep['bitstream_id'])}")
    if dep.get("instance_uuid"):
        words.append(f"instance {dep['instance_uuid']}")
    return "  ".join([*words, *condition_words(dep), f"({dep['uuid']})"])


def handle_line(handle: Mapping[str, Any]) -> str:
    use = "in use" if handle["in_use"] else "busy on host" if handle["host_in_use"] else "free"
    lost = "  lost" if handle["state"] == "lost" else ""
    return f"{handle['type']} {handle['address']}  {use}{lost}"


def attribute_lines(attributes: Mapping[str, Any], prefix: str = "") -> list[str]:
    lines = []
    for key, value in attributes.items():
        if isinstance(value, Mapping):
            lines.extend(attribute_lines(value, f"{prefix}{key}."))
        else:
            lines.append(f"{prefix}{key} = {value}")
    return lines


@dataclasses.dataclass(frozen=True)
class _Tree:
    kids: Mapping[str | None, list[Mapping[str, Any]]]
    mark: str | None
    names: Names

    def node(self, dep: Mapping[str, Any]) -> Node:
        shown = dep["uuid"] == self.mark
        leaves = [Node(line) for line in attribute_lines(dep["attributes"])] if shown else []
        leaves += [Node(handle_line(h)) for h in dep["attach_handles"]]
        leaves += [self.node(child) for child in self.kids.get(dep["uuid"], [])]
        return Node(deployable_line(dep, self.names) + (MARK if shown else ""), leaves)


def device_tree(
    device: Mapping[str, Any],
    deployables: Sequence[Mapping[str, Any]],
    mark: str | None = None,
    names: Names = Names(),
) -> list[str]:
    """A device and its deployables as a tree; the deployable ``mark`` is marked and
    shows its attributes. A deployable whose parent is not listed hangs from the device."""
    listed = {dep["uuid"] for dep in deployables}
    kids: dict[str | None, list[Mapping[str, Any]]] = defaultdict(list)
    for dep in deployables:
        kids[dep["parent_uuid"] if dep["parent_uuid"] in listed else None].append(dep)
    tree = _Tree(kids, mark, names)
    return draw([Node(device_line(device), [tree.node(d) for d in kids[None]])])


def draw_all(
    client: ApiClient, deployables: Iterable[Mapping[str, Any]], mark: str | None = None
) -> list[str]:
    """The trees of the devices the deployables are on, by host and PCI address, a blank
    line between two."""
    by_device: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for dep in deployables:
        by_device[dep["device_uuid"]].append(dep)
    names = Names.of(client, [d for group in by_device.values() for d in group])
    devices = [show(client, f"{DEVICES}/{uuid}", DEVICE_VERSION) for uuid in by_device]
    devices.sort(key=lambda d: (d["hostname"], d["pci_address"]))
    lines: list[str] = []
    for device in devices:
        tree = device_tree(device, by_device[device["uuid"]], mark, names)
        lines.extend([""] * bool(lines) + tree)
    return lines


def fitted(lines: Sequence[str], out: Any) -> list[str]:
    """On a terminal, each line cut to its width (the cut marked "…"); elsewhere (a pipe,
    a file) every line whole."""
    isatty = getattr(out, "isatty", None)
    if out is not sys.stdout or isatty is None or not isatty():
        return list(lines)
    width = shutil.get_terminal_size().columns
    return [line if len(line) <= width else line[: width - 1] + "…" for line in lines]


def write(command: AnyCommand, lines: Sequence[str]) -> int:
    out = command.app.stdout
    out.write("".join(f"{line}\n" for line in fitted(lines, out)))
    return 0


# --- commands -------------------------------------------------------------------------


class _List(Lister):
    """A few columns in tables (any field of the API's with ``-c``); every field of the
    API's objects in JSON and YAML."""

    def emit(
        self,
        parsed_args: argparse.Namespace,
        items: list[dict[str, Any]],
        few: Sequence[str],
        names: Names = Names(),
    ) -> tuple[Any, Any]:
        raw = parsed_args.formatter in RAW_FORMATS
        if not items or not (raw or parsed_args.columns):
            return few, [_row(item, few, names) for item in items]
        extra = () if raw else tuple(c for c in few if c not in items[0])  # "functions"
        columns = (*items[0], *extra)
        return columns, [_row(item, columns, names) for item in items]


class ListDevices(_List):
    """List devices (the physical cards)."""

    noun = "devices"

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = add_list_options(super().get_parser(prog_name), DEVICE_FILTERS)
        parser.add_argument(
            "--unhealthy",
            action="store_true",
            help="Only devices that are not healthy (degraded or unhealthy).",
        )
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[Any, Any]:
        query = list_query(parsed_args, DEVICE_FILTERS)
        if parsed_args.unhealthy:
            if "health" in query:
                raise CommandError("--unhealthy and --health: give one of them.")
            query["health"] = "degraded,unhealthy"
        items = fetch(api_client(self), DEVICES, "devices", query)
        return self.emit(parsed_args, items, DEVICE_COLUMNS)


class ShowDevice(ShowOne):
    """Show a device; with --tree, draw its deployables and attach handles."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("device", help=DEVICE_HELP)
        parser.add_argument("--tree", action="store_true", help="Draw its tree.")
        return parser

    def run(self, parsed_args: argparse.Namespace) -> int:
        if not parsed_args.tree or parsed_args.formatter in RAW_FORMATS:
            return super().run(parsed_args)
        client = api_client(self)
        uuid = device_uuid(client, parsed_args.device)
        device = show(client, f"{DEVICES}/{uuid}", DEVICE_VERSION)
        query = {"device_uuid": device["uuid"]}
        deployables = fetch(client, DEPLOYABLES, "deployables", query, TREE_VERSION)
        return write(self, device_tree(device, deployables))

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[Any, Any]:
        client = api_client(self)
        return raw(show(client, f"{DEVICES}/{device_uuid(client, parsed_args.device)}"))


def parse_attributes(pairs: Sequence[str]) -> dict[str, str]:
    """``--attribute key=value`` options as attribute filters."""
    result = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CommandError(f"--attribute {pair!r}: expected KEY=VALUE.")
        if key in DEPLOYABLE_FILTERS:
            raise CommandError(f"--attribute {key}: use --{key.replace('_', '-')} instead.")
        result[key] = value
    return result


class ListDeployables(_List):
    """List deployables; with --tree, draw them on their devices' trees."""

    noun = "deployables"

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = add_list_options(super().get_parser(prog_name), DEPLOYABLE_FILTERS)
        parser.add_argument(
            "--attribute",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="Only those with this attribute (dotted KEY: nested; VALUE None: without "
            "it). Repeatable.",
        )
        parser.add_argument("--tree", action="store_true", help="Draw the trees.")
        return parser

    def _items(self, parsed_args: argparse.Namespace, version: Version | None) -> list[Any]:
        query = list_query(parsed_args, DEPLOYABLE_FILTERS)
        query.update(parse_attributes(parsed_args.attribute))
        return fetch(api_client(self), DEPLOYABLES, "deployables", query, version)

    def run(self, parsed_args: argparse.Namespace) -> int:
        if not parsed_args.tree or parsed_args.formatter in RAW_FORMATS:
            return super().run(parsed_args)
        items = self._items(parsed_args, TREE_VERSION)
        return write(self, draw_all(api_client(self), items)) if items else self.say_empty()

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[Any, Any]:
        items = self._items(parsed_args, None)
        table = parsed_args.formatter == "table"
        names = Names.of(api_client(self), items) if table else Names()
        return self.emit(parsed_args, items, DEPLOYABLE_COLUMNS, names)


class ShowDeployable(ShowOne):
    """Draw a deployable on its device's tree, with its attributes.

    Any other output format (-f json, -f yaml) gives the API's data.
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("deployable", help="uuid or name of the deployable")
        return parser

    def run(self, parsed_args: argparse.Namespace) -> int:
        if parsed_args.formatter != "table":
            return super().run(parsed_args)
        client = api_client(self)
        uuid = deployable_uuid(client, parsed_args.deployable)
        dep = show(client, f"{DEPLOYABLES}/{uuid}", TREE_VERSION)
        query = {"device_uuid": dep["device_uuid"]}
        tree = fetch(client, DEPLOYABLES, "deployables", query, TREE_VERSION)
        return write(self, draw_all(client, tree, mark=dep["uuid"]))

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[Any, Any]:
        client = api_client(self)
        uuid = deployable_uuid(client, parsed_args.deployable)
        return raw(show(client, f"{DEPLOYABLES}/{uuid}"))


class EnableDevice(ShowOne):
    """Put a device back in service."""

    status = "enable"

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("device", help=DEVICE_HELP)
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[Any, Any]:
        client = api_client(self)
        path = f"{DEVICES}/{device_uuid(client, parsed_args.device)}/{self.status}"
        return raw(client.request("POST", path, microversion=V2_5))


class DisableDevice(EnableDevice):
    """Take a device out of service: nothing new is scheduled on it.

    Its inventory is reserved in Placement; what already uses it stays.
    """

    status = "disable"
