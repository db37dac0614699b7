"""The compute side of attaching accelerators (spec 000's os-acc), over the REST API.

``Connector`` talks to the Acceleron API as the compute host's service does: with
the keystoneauth options of ``[agent]`` (the same credentials the host's agent
uses) or a client given to it. Its three calls:

* ``initialize()`` waits until the host's agent has reported and, where Acceleron
  publishes to Placement, its inventory is there; ``AgentUnavailable`` otherwise;
* ``plug(instance_info, selected_rp, flavor_extra_specs)`` creates the accelerator
  requests of the flavor (``accel:device_profile=<name>``, or spec 001's inline
  extra specs), binds them to the providers chosen, waits while a region is
  programmed or a vGPU made, and returns one entry per accelerator: ``pci_id``
  (the BDF, as the spec says; only for what is attached to the VM) with the attach
  handle's type, uuid and info and the ``attach_target``;
* ``unplug(instance_info)`` releases the instance's accelerators; how many.

A Connector holds no state between calls but its HTTP session, so one may be
shared by threads (a ThreadPoolExecutor, as the spec shows).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from acceleron.client import arqs as arqs_api
from acceleron.client.arqs import bind_body, wait_claim, wait_resolved
from acceleron.client.errors import detail
from acceleron.client.http import AcceleronClient, ApiError, CallFailed
from acceleron.exceptions import InvalidInput
from acceleron.microversion import V2_11, V2_15
from acceleron.scheduler.query import (
    GROUP_PREFIX,
    groups_from_flavor,
    is_device_class,
    split_regions,
)
from acceleron.uuids import parse
from os_acc import operations

if TYPE_CHECKING:
    from oslo_config import cfg

LOG = logging.getLogger(__name__)
MICROVERSION = V2_11  # attach_target
CLAIMS = V2_15  # a claim's hostname
PROFILE_KEY = "accel:device_profile"
# accel: keys a device profile takes (spec 002); the inline specs may give others.
PROFILE_ACCEL_KEYS = ("bitstream_id", "bitstream_name", "function_id", "function_name")


class OsAccError(Exception):
    """Base class of what os_acc raises; ``str()`` says why in one sentence."""


class AgentUnavailable(OsAccError):
    """The API cannot be reached, or this host's agent has not reported (in time)."""


CyborgAgentUnavailable = AgentUnavailable  # the name spec 000 gives it


class PlugFailed(OsAccError):
    """The accelerators could not be attached; nothing is left held."""


class NotReady(OsAccError):
    """``check()`` found accelerators of the instance that are not as its requests say."""

    def __init__(self, message: str, accelerators: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.accelerators = accelerators  # what check() would have returned


class Connector:
    """``client``: the API's client (a host agent's, ``ReportClient.api``, shares its
    connection)."""

    def __init__(
        self,
        client: AcceleronClient,
        hostname: str,
        timeout: float = 300.0,
        poll: float = 0.2,
    ) -> None:
        self.client = client
        self.hostname = hostname
        self.timeout = timeout
        self.poll = poll

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> Connector:
        """Reach the API as ``[agent]`` says, for the host ``[DEFAULT] host``."""
        client = AcceleronClient.from_conf(conf, str(MICROVERSION))
        return cls(client, conf.host, timeout=float(conf.binding.bind_timeout))

    # --- the three calls of spec 000 ---------------------------------------------

    def initialize(self, timeout: float | None = None) -> None:
        """Return once the host's agent has reported and its inventory is published."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        path = f"/v2/hosts/{quote(self.hostname, safe='')}"
        while True:
            response = self._call("GET", path)
            host = response.json()["host"] if response.status_code == 200 else None
            if host is not None and host.get("placement_synced") is not False:
                return
            if time.monotonic() >= deadline:
                state = "has not reported" if host is None else "is not in Placement yet"
                raise AgentUnavailable(
                    f"The accelerator agent of {self.hostname} {state}: is it running, and "
                    f"is [DEFAULT] host the compute node's name?"
                )
            time.sleep(self.poll)

    def plug(
        self,
        instance_info: Mapping[str, Any],
        selected_rp: Mapping[str, Any] | None,
        flavor_extra_specs: Mapping[str, str],
    ) -> list[dict[str, Any]]:
        """Attach the flavor's accelerators to the instance; one entry per accelerator.
        Without ``selected_rp`` (no scheduler chose providers), this host's accelerators
        are claimed: allocated in Placement for the instance and bound by the API."""
        instance = _instance_uuid(instance_info)
        profile, suffixes = self._profile(flavor_extra_specs)
        if selected_rp is None:
            return self._plug_claimed(instance_info, instance, profile)
        arqs = arqs_api.create(
            self._call, profile, PlugFailed, f"Cannot request profile {profile!r}"
        )
        try:
            providers = providers_by_group(
                selected_rp, {a["device_profile_group_id"] for a in arqs}, suffixes
            )
            self._bind(arqs, providers, instance, instance_info.get("project_id"))
            bound = self._wait(instance)
        except BaseException:
            self._delete(f"arqs={','.join(a['uuid'] for a in arqs)}")
            raise
        failed = [a for a in bound if a["state"] != "Bound"]
        if failed:
            self._delete(f"instance={instance}")
            reasons = "; ".join(
                f"{a['uuid']}: {a.get('failure_reason') or a['state']}" for a in failed
            )
            raise PlugFailed(f"Accelerators of instance {instance} could not be bound: {reasons}")
        LOG.info(
            "Plugged %d accelerator(s) into %s (%s)",
            len(bound),
            instance,
            instance_info.get("name") or "unnamed",
        )
        return [attachment(a) for a in sorted(bound, key=lambda a: a["device_profile_group_id"])]

    def unplug(self, instance_info: Mapping[str, Any]) -> int:
        """Release every accelerator of the instance (its claim too, if plug made one);
        how many were released."""
        instance = _instance_uuid(instance_info)
        held = self._json("GET", "/v2/accelerator_requests", params={"instance": instance})
        self._release_claim(instance)
        self._delete(f"instance={instance}")
        count = len(held["arqs"])
        LOG.info("Unplugged %d accelerator(s) from %s", count, instance)
        return count

    def before(
        self,
        operation: str,
        instance_info: Mapping[str, Any],
        selected_rp: Mapping[str, Any] | None = None,
        flavor_extra_specs: Mapping[str, str] | None = None,
    ) -> Any:
        """Do what ``operations.rule_for(operation)`` asks before the operation; what that
        call returns (None for nothing). UnsupportedOperation for a refused one."""
        action = operations.rule_for(operation).before
        return self._do(action, instance_info, selected_rp, flavor_extra_specs)

    def after(
        self,
        operation: str,
        instance_info: Mapping[str, Any],
        selected_rp: Mapping[str, Any] | None = None,
        flavor_extra_specs: Mapping[str, str] | None = None,
    ) -> Any:
        """Do what the rule of ``operation`` asks once the operation is done."""
        action = operations.rule_for(operation).after
        return self._do(action, instance_info, selected_rp, flavor_extra_specs)

    def _do(
        self,
        action: operations.Action,
        instance_info: Mapping[str, Any],
        selected_rp: Mapping[str, Any] | None,
        flavor_extra_specs: Mapping[str, str] | None,
    ) -> Any:
        Action = operations.Action
        if action is Action.PLUG:
            if flavor_extra_specs is None:
                raise PlugFailed("Plugging needs flavor_extra_specs.")
            return self.plug(instance_info, selected_rp, flavor_extra_specs)
        if action is Action.UNPLUG:
            return self.unplug(instance_info)
        if action is Action.CHECK:
            return self.check(instance_info)
        if action is Action.RECORD:
            return self.record(instance_info)
        return None

    def check(self, instance_info: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The instance's accelerators (``record()``'s entries), once each is found bound
        to the instance on this host, its handle and device present, the device enabled
        and healthy, and an FPGA region not being programmed; ``NotReady`` naming every
        one that is not."""
        accelerators = self.record(instance_info)
        problems = [
            f"{a['arq_uuid']}: {'; '.join(a['problems'])}" for a in accelerators if a["problems"]
        ]
        if problems:
            raise NotReady(
                f"Accelerators of instance {_instance_uuid(instance_info)} are not ready: "
                + " | ".join(problems),
                accelerators,
            )
        return accelerators

    def record(self, instance_info: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The state of each of the instance's accelerators now, in group order: the
        request, its attach handle, the device (and, for an FPGA region, what it holds),
        and ``problems`` (empty when it is bound here and healthy). What a crash dump is
        read against; JSON-serialisable."""
        instance = _instance_uuid(instance_info)
        arqs = self._json(
            "GET", "/v2/accelerator_requests", OsAccError, params={"instance": instance}
        )
        held = sorted(arqs["arqs"], key=lambda a: (a["device_profile_group_id"], a["uuid"]))
        deployables = self._deployables({a["hostname"] for a in held if a.get("hostname")})
        devices: dict[str, dict[str, Any]] = {}
        entries = []
        for arq in held:
            found = _deployable_of(arq, deployables)
            device = None
            if found is not None:
                uuid = found[0]["device_uuid"]
                if uuid not in devices:
                    path = f"/v2/devices/{quote(uuid, safe='')}"
                    devices[uuid] = self._json("GET", path, OsAccError)
                device = devices[uuid]
            entries.append(accelerator_state(arq, found, device, self.hostname))
        LOG.info("Recorded the state of %d accelerator(s) of %s", len(entries), instance)
        return entries

    # --- steps ------------------------------------------------------------------------

    def _deployables(self, hosts: set[str]) -> list[dict[str, Any]]:
        """Every deployable of those hosts, page after page."""
        found: list[dict[str, Any]] = []
        for host in sorted(hosts):
            params: dict[str, str] = {"hostname": host}
            while True:
                page = self._json("GET", "/v2/deployables", OsAccError, params=params)
                found.extend(page["deployables"])
                if not page.get("deployables_links") or not page["deployables"]:
                    break
                params = {"hostname": host, "marker": page["deployables"][-1]["uuid"]}
        return found

    def _profile(self, extra_specs: Mapping[str, str]) -> tuple[str, tuple[str, ...]]:
        """The device profile the flavor names, or one made for its inline specs; and
        for inline specs, the flavor's suffix of each group (as Nova maps them)."""
        named = extra_specs.get(PROFILE_KEY)
        try:
            request = groups_from_flavor(extra_specs)
        except InvalidInput as error:
            raise PlugFailed(
                f"The flavor's accelerator extra specs are invalid: {error}"
            ) from error
        if named:
            _refuse_inline_beside(named, request.groups)
            return named, ()
        groups, suffixes = inline_groups(request.groups, request.suffixes)
        if not groups:
            raise PlugFailed("The flavor asks for no accelerator: nothing to plug.")
        return self._ensure_profile(groups), suffixes

    def _ensure_profile(self, groups: list[dict[str, str]]) -> str:
        """A profile named after its content: the same inline specs share one."""
        digest = hashlib.sha256(json.dumps(groups, sort_keys=True).encode()).hexdigest()
        name = f"os-acc-{digest[:16]}"
        found = self._json("GET", "/v2/device_profiles", params={"name": name})
        if found["device_profiles"]:
            return name
        body = [{"name": name, "groups": groups, "description": "flavor extra specs (os-acc)"}]
        response = self._call("POST", "/v2/device_profiles", json=body)
        if response.status_code not in (201, 409):  # 409: another host made it meanwhile
            raise PlugFailed(f"Cannot record the flavor's request: {detail(response)}")
        return name

    def _bind(
        self,
        arqs: Sequence[Mapping[str, Any]],
        providers: Mapping[int, str],
        instance: str,
        project: str | None,
    ) -> None:
        body = bind_body(arqs, providers, self.hostname, instance, project)
        arqs_api.bind(self._call, body, PlugFailed, "Cannot bind the accelerators")

    def _plug_claimed(
        self, instance_info: Mapping[str, Any], instance: str, profile: str
    ) -> list[dict[str, Any]]:
        body = {"device_profile_name": profile, "consumer_uuid": instance,
                "hostname": self.hostname}  # fmt: skip
        if instance_info.get("project_id"):
            body["project_id"] = instance_info["project_id"]
        response = self._call("POST", "/v2/claims", json=body, microversion=CLAIMS)
        if response.status_code != 201:
            raise PlugFailed(
                f"Cannot claim profile {profile!r} on {self.hostname}: {detail(response)}"
            )
        path = f"/v2/claims/{quote(instance, safe='')}"
        claim = wait_claim(
            lambda: self._json("GET", path, microversion=CLAIMS),
            response.json(),
            self.timeout,
            self.poll,
        )
        if claim["state"] != "bound":
            self._release_claim(instance)
            late = f"not bound within {self.timeout:.0f} s"
            reason = claim.get("failure_reason") or (late if claim["state"] != "failed" else "")
            raise PlugFailed(
                f"Accelerators of instance {instance} could not be bound: {reason or 'failed'}"
            )
        arqs = sorted(claim["accelerator_requests"], key=lambda a: a["device_profile_group_id"])
        LOG.info("Claimed and plugged %d accelerator(s) into %s", len(arqs), instance)
        return [attachment(a) for a in arqs]

    def _release_claim(self, instance: str) -> None:
        """Release the instance's claim, if it has one (404: none, or an API before
        2.12)."""
        path = f"/v2/claims/{quote(instance, safe='')}"
        response = self._call("DELETE", path, microversion=CLAIMS)
        if response.status_code not in (204, 404):
            LOG.error("Releasing the claim of %s failed: %s", instance, detail(response))

    def _wait(self, instance: str) -> list[dict[str, Any]]:
        return wait_resolved(self._call, instance, self.timeout, self.poll, PlugFailed)

    def _delete(self, selector: str) -> None:
        response = self._call("DELETE", f"/v2/accelerator_requests?{selector}")
        if response.status_code not in (204, 404):
            LOG.error("Releasing accelerators (%s) failed: %s", selector, detail(response))

    # --- HTTP --------------------------------------------------------------------------

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        kwargs.setdefault("microversion", MICROVERSION)
        try:
            return self.client.send(method, path, **kwargs)
        except CallFailed as error:
            raise AgentUnavailable(f"The accelerator API cannot be reached: {error}") from error

    def _json(
        self, method: str, path: str, error: type[OsAccError] = PlugFailed, **kwargs: Any
    ) -> dict[str, Any]:
        try:
            body: dict[str, Any] = self.client.check(self._call(method, path, **kwargs)).json()
        except ApiError as failed:
            raise error(f"{method} {path}: {failed}") from failed
        return body


def providers_by_group(
    selected_rp: Mapping[str, Any], groups: set[int], suffixes: Sequence[str] = ()
) -> dict[int, str]:
    """The provider chosen for each group, from what the compute service passes:

    * ``{"uuid": <rp>}``: one provider for every group;
    * ``{"device_profile_<i>": [<rp>], ...}``: Nova's request-group mapping of a
      device profile's groups;
    * ``{"<suffix>": [<rp>], ...}``: Nova's (and Placement's) mapping of a flavor's
      inline groups, keyed by their suffixes (``resources1:`` is ``"1"``, the unsuffixed
      group ``""``); ``suffixes[i]`` is group ``i``'s. Read so when it names every group;
    * ``{"<i>": <rp>, ...}``: by 0-based group index.
    """
    if isinstance(selected_rp.get("uuid"), str):
        return dict.fromkeys(groups, selected_rp["uuid"])
    chosen: dict[str, str] = {}
    for key, value in selected_rp.items():
        rp = value[0] if isinstance(value, list) and value else value
        if isinstance(key, str) and isinstance(rp, str):
            chosen[key] = rp
    by_suffix = {i: chosen[s] for i, s in enumerate(suffixes) if s in chosen}
    if suffixes and groups <= set(by_suffix):
        return {i: by_suffix[i] for i in sorted(groups)}
    found: dict[int, str] = {}
    for key, rp in chosen.items():
        index = key.removeprefix(GROUP_PREFIX)
        if index.isascii() and index.isdigit():
            found[int(index)] = rp
    missing = sorted(groups - set(found))
    if missing:
        named = [repr(suffixes[i]) for i in missing if i < len(suffixes)]
        also = f" (flavor suffix(es) {', '.join(named)})" if named else ""
        raise PlugFailed(
            f"selected_rp names no provider for group(s) {missing}{also}: {selected_rp}"
        )
    return found


def attachment(arq: Mapping[str, Any]) -> dict[str, Any]:
    """What plug() returns for one bound request."""
    info = arq.get("attach_handle_info") or {}
    target = arq.get("attach_target") or "VM"
    pci_id = None
    # Only what goes to the VM gets a pci_id: what a compute service attaches.
    if target == "VM" and all(k in info for k in ("domain", "bus", "device", "function")):
        pci_id = f"{info['domain']}:{info['bus']}:{info['device']}.{info['function']}"
    return {
        "pci_id": pci_id,
        "arq_uuid": arq["uuid"],
        "device_profile_group_id": arq["device_profile_group_id"],
        "attach_target": target,
        "attach_handle_type": arq["attach_handle_type"],
        "attach_handle_uuid": arq["attach_handle_uuid"],
        "attach_handle_info": info,
    }


def _deployable_of(
    arq: Mapping[str, Any], deployables: Sequence[Mapping[str, Any]]
) -> tuple[Mapping[str, Any], Mapping[str, Any]] | None:
    """The deployable holding the request's attach handle, and that handle."""
    wanted = arq.get("attach_handle_uuid")
    if not wanted:
        return None
    for deployable in deployables:
        for handle in deployable.get("attach_handles") or ():
            # An mdev's request shows the mdev's uuid, the handle's address.
            if wanted in (handle["uuid"], handle["address"]):
                return deployable, handle
    return None


def accelerator_state(
    arq: Mapping[str, Any],
    found: tuple[Mapping[str, Any], Mapping[str, Any]] | None,
    device: Mapping[str, Any] | None,
    hostname: str,
) -> dict[str, Any]:
    """One entry of ``record()``: what the request, its handle and device say now, and
    what is wrong with them (``problems``)."""
    problems = []
    if arq["state"] != "Bound":
        problems.append(f"state {arq['state']}, not Bound")
    elif arq.get("hostname") != hostname:
        problems.append(f"bound on host {arq.get('hostname')}, not {hostname}")
    entry: dict[str, Any] = {
        "arq_uuid": arq["uuid"],
        "device_profile_name": arq["device_profile_name"],
        "device_profile_group_id": arq["device_profile_group_id"],
        "state": arq["state"],
        "attach_target": arq.get("attach_target", "VM"),
        "attach_handle_type": arq.get("attach_handle_type"),
        "attach_handle_uuid": arq.get("attach_handle_uuid"),
        "attach_handle_info": arq.get("attach_handle_info"),
        "device": None,
        "deployable": None,
        "problems": problems,
    }
    if arq["state"] != "Bound":
        return entry
    if found is None:
        problems.append("its attach handle is not among the host's deployables")
        return entry
    deployable, handle = found
    if handle.get("state") != "present":
        problems.append(f"attach handle {handle['address']} is {handle.get('state')}")
    entry["deployable"] = {
        k: deployable.get(k)
        for k in (
            "uuid",
            "name",
            "kind",
            "key",
            "accelerator_type",
            "region_type",
            "bitstream_id",
            "function_uuids",
            "program_phase",
            "program_error",
        )
    }
    # A region's failed programming is the problem of the request that asked for it
    # (its failure_reason), not of another that binds to the region as it is.
    phase = deployable.get("program_phase")
    if arq.get("failure_reason"):
        problems.append(f"{deployable['name']}: {arq['failure_reason']}")
    elif phase and phase != "failed":
        problems.append(f"{deployable['name']} is being programmed ({phase})")
    if device is not None:
        entry["device"] = {
            k: device.get(k)
            for k in (
                "uuid",
                "type",
                "vendor",
                "model",
                "pci_address",
                "status",
                "state",
                "health",
                "driver_name",
            )
        }
        for field, good in (("status", "enabled"), ("state", "present"), ("health", "ok")):
            if device.get(field) not in (good, None):
                problems.append(f"device {device.get('pci_address')} is {device[field]}")
    return entry


def inline_groups(
    groups: Sequence[Mapping[str, str]], suffixes: Sequence[str]
) -> tuple[list[dict[str, str]], tuple[str, ...]]:
    """The device profile groups of a flavor's inline groups, and each one's flavor
    suffix. A group of N FPGA regions is N groups of one, as a profile stores it
    (``split_regions``), each with its flavor group's suffix: each maps to the provider
    Nova chose for that group."""
    found: list[dict[str, str]] = []
    found_suffixes: list[str] = []
    for group, suffix in zip(groups, suffixes, strict=True):
        split = split_regions([_profile_group(group)])
        found.extend(split)
        found_suffixes.extend([suffix] * len(split))
    return found, tuple(found_suffixes)


def _profile_group(group: Mapping[str, str]) -> dict[str, str]:
    """A group read from inline specs, keeping only what a device profile takes."""
    kept = {k: v for k, v in group.items() if not k.startswith("accel:")}
    kept.update({k: v for k, v in group.items() if k[6:] in PROFILE_ACCEL_KEYS})
    return kept


def _refuse_inline_beside(profile: str, inline: Sequence[Mapping[str, str]]) -> None:
    """PlugFailed when the flavor asks for accelerators inline as well as by profile.

    Nova would schedule both, but ask for the profile's accelerators only: what the
    inline groups got from Placement would be allocated and never attached.
    Groups of other resources (a NIC's VFs, say) are Nova's and are left alone.
    """
    asking = [g for g in inline if any(_is_accelerator_entry(k) for k in g)]
    if asking:
        keys = ", ".join(sorted({k for g in asking for k in g}))
        raise PlugFailed(
            f"The flavor names device profile {profile!r} and also asks for accelerators "
            f"inline ({keys}): put them in the device profile, or drop "
            f"{PROFILE_KEY} and ask inline only."
        )


def _is_accelerator_entry(key: str) -> bool:
    kind, _, name = key.partition(":")
    return kind == "accel" or (kind == "resources" and is_device_class(name))


def _instance_uuid(instance_info: Mapping[str, Any]) -> str:
    value = instance_info.get("uuid")
    try:
        return parse(str(value), "uuid")
    except InvalidInput:
        raise PlugFailed(f"instance_info needs the instance's uuid, got {value!r}") from None
