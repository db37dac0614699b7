"""``acceleron device ...`` and ``acceleron deployable ...``: the inventory through REST.

``deployable show``, ``deployable list --tree`` and ``device show --tree`` draw
the tree, device -> deployables (-> children) -> attach handles::

    host-a  0000:0c:00.0  FPGA  INTEL PAC_ARRIA10  enabled  (7c0e...)
    ├── region0  [region]  capacity 2  region type ce48...  functions d842...  (5a1f...)
    │   ├── PCI 0000:0c:00.1  in use
    │   └── region0/vfs  [vf_pool]  capacity 2  (9b3c...)
    └── region1  [region]  capacity 1  region type 9926...  (0d4e...)

Any other output format (``-f json``, ``-f yaml``) gives the API's own data.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cliff.columns import FormattableColumn

from acceleron.cli.base import AnyCommand, Lister, ShowOne
from acceleron.cli.client import ApiClient, CommandError, api_client
from acceleron.microversion import V2_5, V2_13, Version
from acceleron.tree import Node, draw
from acceleron.uuids import is_uuid_like, parse

DEVICES = "/v2/devices"
DEPLOYABLES = "/v2/deployables"
# The tree needs the 2.5 views (kind, key, parent uuids, attach handles), and 2.13's
# health and maintenance.
TREE_VERSION = V2_13
DEVICE_COLUMNS = ("uuid", "hostname", "pci_address", "type", "vendor", "model", "status",
                  "state", "health")  # fmt: skip
DEPLOYABLE_COLUMNS = ("uuid", "name", "kind", "key", "hostname", "num_accelerators",
                      "region_type", "bitstream_id", "rp_uuid")  # fmt: skip
DEVICE_FILTERS = ("type", "vendor", "hostname", "status", "state", "pci_address", "health")
DEPLOYABLE_FILTERS = ("name", "kind", "key", "parent_uuid", "root_uuid", "device_uuid",
                      "hostname", "type", "availability", "instance_uuid", "rp_uuid",
                      "driver_name", "bitstream_id", "region_type", "function_uuid")  # fmt: skip
RAW_FORMATS = ("json", "yaml")
DEVICE_HELP = "uuid of the device, its PCI address, or HOST_PCI-ADDRESS (host vm: vm_0000:2b:00.0)"
MARK = "  ◀"


class JsonColumn(FormattableColumn[Any]):
    """Objects and lists as JSON in tables, as they are in JSON/YAML."""

    def human_readable(self) -> str:
        return json.dumps(self._value, sort_keys=True)

    def machine_readable(self) -> Any:
        return self._value


def _cell(value: Any) -> Any:
    return JsonColumn(value) if isinstance(value, dict | list) else value


def _row(item: Mapping[str, Any], columns: Sequence[str]) -> tuple[Any, ...]:
    return tuple(_cell(item.get(column)) for column in columns)


def raw(item: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """Every field of an API object, for ShowOne."""
    columns = tuple(item)
    return columns, _row(item, columns)


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
    words = [device["hostname"], device["pci_address"], device["type"],
             f"{device['vendor_name']} {device['model']}", device["status"]]  # fmt: skip
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


def deployable_line(dep: Mapping[str, Any]) -> str:
    words = [dep["key"], f"[{dep['kind']}]", f"capacity {dep['num_accelerators']}"]
    functions = ", ".join(dep.get("function_uuids") or []) or dep.get("function_uuid")
    shown = {**dep, "functions": functions}
    for field, label in (("region_type", "region type"), ("functions", "functions"),
                         ("bitstream_id", "bitstream"), ("instance_uuid", "instance")):  # fmt: skip
        if shown.get(field):
            words.append(f"{label} {shown[field]}")
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


def _node(
    dep: Mapping[str, Any], kids: Mapping[str | None, list[Mapping[str, Any]]], mark: str | None
) -> Node:
    shown = dep["uuid"] == mark
    leaves = [Node(line) for line in attribute_lines(dep["attributes"])] if shown else []
    leaves += [Node(handle_line(h)) for h in dep["attach_handles"]]
    leaves += [_node(child, kids, mark) for child in kids.get(dep["uuid"], [])]
    return Node(deployable_line(dep) + (MARK if shown else ""), leaves)


def device_tree(
    device: Mapping[str, Any], deployables: Sequence[Mapping[str, Any]], mark: str | None = None
) -> list[str]:
    """A device and its deployables as a tree; the deployable ``mark`` is marked and
    shows its attributes. A deployable whose parent is not listed hangs from the device."""
    listed = {dep["uuid"] for dep in deployables}
    kids: dict[str | None, list[Mapping[str, Any]]] = defaultdict(list)
    for dep in deployables:
        kids[dep["parent_uuid"] if dep["parent_uuid"] in listed else None].append(dep)
    return draw([Node(device_line(device), [_node(d, kids, mark) for d in kids[None]])])


def draw_all(
    client: ApiClient, deployables: Iterable[Mapping[str, Any]], mark: str | None = None
) -> list[str]:
    """The trees of the devices the deployables are on, by host and PCI address, a blank
    line between two."""
    by_device: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for dep in deployables:
        by_device[dep["device_uuid"]].append(dep)
    devices = [show(client, f"{DEVICES}/{uuid}", TREE_VERSION) for uuid in by_device]
    devices.sort(key=lambda d: (d["hostname"], d["pci_address"]))
    lines: list[str] = []
    for device in devices:
        lines.extend([""] * bool(lines) + device_tree(device, by_device[device["uuid"]], mark))
    return lines


def write(command: AnyCommand, lines: Sequence[str]) -> int:
    command.app.stdout.write("".join(f"{line}\n" for line in lines))
    return 0


# --- commands -------------------------------------------------------------------------


class _List(Lister):
    """Table columns in tables; every field of the API's objects in JSON and YAML."""

    def emit(
        self, parsed_args: argparse.Namespace, items: list[dict[str, Any]], short: Sequence[str]
    ) -> tuple[Any, Any]:
        columns = tuple(items[0]) if items and parsed_args.formatter in RAW_FORMATS else short
        return columns, [_row(item, columns) for item in items]


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
        device = show(client, f"{DEVICES}/{uuid}", TREE_VERSION)
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
        return self.emit(parsed_args, self._items(parsed_args, None), DEPLOYABLE_COLUMNS)


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
