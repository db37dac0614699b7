"""Microversions of the Acceleron API: one list, one comment per entry, and the one
way to read a version. Both sides import it: the API (``acceleron.api``) and its
clients (the CLI, the agent, the scheduler, os_acc), so it imports no FastAPI.

A request names its version with ``OpenStack-API-Version: accelerator 2.x``;
a bare ``2.x`` is accepted too (older clients send it), ``latest`` means the
newest, and a missing header means 2.0, which is what Nova sends. Anything
else, or a version outside the list, is answered 406 (the API maps
:class:`NotAcceptable`).

Adding a version: append it here with what it changes and add its ``V2_x``
constant below (every one lives here: no other module spells a version), branch on
it in the handler (``version >= V2_4``; a route that appears with it takes
``requires(V2_x, ...)`` from ``acceleron.api.common``, a field ``require(...)``), add
a test, and describe it in docs/api/microversions.md and the changelog. A client
asks for ``V2_x`` (keystoneauth takes it as it is) and reads an API's versions with
:func:`parse`.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from acceleron.exceptions import InvalidInput

SERVICE_TYPE = "accelerator"
HEADER = "OpenStack-API-Version"
MIN_HEADER = "OpenStack-API-Minimum-Version"
MAX_HEADER = "OpenStack-API-Maximum-Version"


class Version(NamedTuple):
    major: int
    minor: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


VERSIONS: list[str] = [
    "2.0",  # The v2 API: device profiles, accelerator requests, deployables, devices.
    "2.1",  # ARQ PATCH accepts /project_id (admin only).
    "2.2",  # GET /v2/device_profiles/{name}: look a profile up by name as well as uuid.
    "2.3",  # Devices show their operator status ("enabled" or "maintaining").
    "2.4",  # Device profiles show "enabled"; PATCH changes description and enabled.
    "2.5",  # Hosts: PUT /v2/hosts/{host}/report (agents), GET /v2/hosts[/{host}]. Devices
    #         show id, pci_address, numa_node, state, health, driver_name, vendor_name
    #         and product_id, board info as objects, and filter on status, state and
    #         pci_address; deployables show id, kind, key, hostname, device/parent/root uuids,
    #         availability, programming progress, attributes as an object, attach handles
    #         and more; attributes show deployable_uuid and parent_uuid;
    #         GET /v2/deployables/{uuid}/attributes[/{key}] (404 before 2.5).
    "2.6",  # Placement: POST /v2/placement/sync (plan, check, repair) and
    #         POST /v2/placement/migrate-to-nested.
    "2.7",  # Bitstreams: /v2/bitstreams (upload, list, show, download, delete).
    "2.8",  # Accelerator requests show phase, progress and failure_reason; programming
    #         (deployable program and run-time programming of a bound request) is
    #         asynchronous with phases; agent tasks (/v2/hosts/{host}/tasks).
    "2.9",  # POST /v2/placement/reconcile: allocations no request holds, and requests
    #         holding handles for consumers without allocations, found and freed.
    "2.10",  # Deployables show memory_type (what names their memory class); hosts show
    #          placement_errors (why devices were left out of Placement).
    "2.11",  # Accelerator requests show attach_target (VM, host or none, from the
    #          group's accel:attach_target); before 2.11, a bound request whose target
    #          is not VM shows no attach handle, so that a client attaching every handle
    #          it sees (Nova) leaves it alone.
    "2.12",  # Claims: POST /v2/claims, GET and DELETE /v2/claims/{consumer} (docs/claims.md).
    "2.13",  # Health and maintenance: devices and deployables show health (healthy,
    #          degraded, unhealthy: "ok"/"failed" before), its reason and since when, and
    #          maintenance reason and since; devices filter on health; POST
    #          /v2/devices/{uuid}/maintenance and /v2/deployables/{uuid}/maintenance
    #          (admin); GET /v2/devices/{uuid}/binds (the drain); accelerator requests
    #          show the health of what they are bound to.
    "2.14",  # GET /v2/quotas/{project_id}: a project's usage against its limit for each
    #          accelerator resource class (limits named class:<RESOURCE_CLASS>).
    "2.15",  # POST /v2/claims takes hostname (admins and services): the claim lands on
    #          that host (os_acc on a compute node without a scheduler).
    "2.16",  # A claim shows its allocations (provider uuid -> resources), as Placement
    #          holds them: its client needs not ask Placement again.
    "2.17",  # A device between tenants: deployables show the provenance of what they hold;
    #          devices and deployables what is being cleaned; GET /v2/devices/{uuid}/history.
    "2.18",  # Devices show where they sit: pcie_switch (the PCI address of their nearest
    #          PCIe switch) and nvlink_domain (a name their NVLink peers share).
]

V2_0 = Version(2, 0)
V2_1 = Version(2, 1)
V2_2 = Version(2, 2)
V2_3 = Version(2, 3)
V2_4 = Version(2, 4)
V2_5 = Version(2, 5)
V2_6 = Version(2, 6)
V2_7 = Version(2, 7)
V2_8 = Version(2, 8)
V2_9 = Version(2, 9)
V2_10 = Version(2, 10)
V2_11 = Version(2, 11)
V2_12 = Version(2, 12)
V2_13 = Version(2, 13)
V2_14 = Version(2, 14)
V2_15 = Version(2, 15)
V2_16 = Version(2, 16)
V2_17 = Version(2, 17)
V2_18 = Version(2, 18)
_NUMBER = re.compile(r"(\d{1,9})\.(\d{1,9})", re.ASCII)  # longer is no version of ours


def parse(text: str) -> Version:
    """``"2.16"`` as a Version (surrounding blanks allowed); ValueError for anything
    that is not ``<major>.<minor>``. The one reading of a version, on either side."""
    match = _NUMBER.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"Invalid microversion {text!r}: expected '<major>.<minor>'.")
    return Version(int(match.group(1)), int(match.group(2)))


MIN_VERSION = parse(VERSIONS[0])
MAX_VERSION = parse(VERSIONS[-1])
_KNOWN = frozenset(map(parse, VERSIONS))


class NotAcceptable(Exception):
    """The requested microversion is malformed or not supported."""


def needs(what: str, version: Version) -> str:
    """The one wording of "this needs a later microversion"."""
    return f"{what} needs microversion {version} or later."


def require(
    version: Version, needed: Version, what: str, error: type[Exception] = InvalidInput
) -> None:
    """Refuse what a request asks for (a field, a filter, a way of looking up) when its
    microversion ``version`` is older than ``needed``: ``error`` (a 400 unless told)
    says ``what`` needs ``needed``. Whole routes take ``api.common.requires`` instead."""
    if version < needed:
        raise error(needs(what, needed))


def negotiate(header: str | None) -> Version:
    """The version a request asks for, from its ``OpenStack-API-Version`` header."""
    if header is None or not header.strip():
        return MIN_VERSION
    value = header.strip()
    words = value.split()
    if len(words) == 2 and words[0].lower() == SERVICE_TYPE:
        value = words[1]
    elif len(words) != 1:
        raise NotAcceptable(
            f"Invalid {HEADER} header {header!r}: expected '{SERVICE_TYPE} <major>.<minor>'."
        )
    if value.lower() == "latest":
        return MAX_VERSION
    try:
        version = parse(value)
    except ValueError as error:
        raise NotAcceptable(str(error)) from None
    if version not in _KNOWN:
        raise NotAcceptable(
            f"Version {version} is not supported: this API supports {MIN_VERSION} to {MAX_VERSION}."
        )
    return version
