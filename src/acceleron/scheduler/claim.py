"""Claiming accelerators without Nova: what ``acceleron claim`` and ``release`` do.

A claim, for a consumer (a uuid: an instance, a job, a container):

1. reads the device profile from the Acceleron API, creates the accelerator requests
   (a project over its quota is refused here, before anything is allocated), and asks
   Placement for allocation candidates with the query Nova would build
   (:mod:`acceleron.scheduler.query`);
2. ranks them with spec 001's weigher (regions that already hold a wanted function
   first, then free capacity) and allocates the best for the consumer; when another
   consumer took that capacity meanwhile (409), it asks again, a few times;
3. binds each request to the provider Placement mapped its group to, on that
   provider's compute node (the quota is counted again, against racing claims);
4. waits while regions are programmed or vGPUs made, telling ``progress`` the phases;
5. returns the attach handles. Anything failing on the way undoes what was done: the
   requests are deleted and the allocation dropped.

``release`` deletes the consumer's requests and its allocation.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid as uuidlib
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from keystoneauth1 import adapter as ks_adapter

from acceleron.client import arqs as arqs_api
from acceleron.client.arqs import Progress, bind_body, wait_claim, wait_resolved
from acceleron.client.errors import detail, parse_error
from acceleron.client.http import AcceleronClient, ApiError, CallFailed, as_client
from acceleron.exceptions import AllocationConflict, PlacementError
from acceleron.placement import names
from acceleron.placement.client import AllocationRequest, Candidates, PlacementClient
from acceleron.scheduler import functions, query, weigher

LOG = logging.getLogger(__name__)
MICROVERSION = "2.11"  # attach_target
CLAIMS = "2.12"  # server-side claims
HELD = "2.16"  # a claim shows its allocations
ATTEMPTS = 5  # choices made again after an allocation conflict


class ClaimFailed(Exception):
    """The claim could not be made; nothing of it is left behind."""


@dataclasses.dataclass(frozen=True)
class Claim:
    consumer: str
    hostname: str
    allocations: Mapping[str, Mapping[str, int]]  # provider -> class -> amount
    arqs: tuple[Mapping[str, Any], ...]  # the bound accelerator requests

    @property
    def attach_handles(self) -> list[dict[str, Any]]:
        return [
            {
                "arq": a["uuid"],
                "group": a["device_profile_group_id"],
                "type": a["attach_handle_type"],
                "uuid": a["attach_handle_uuid"],
                "info": a["attach_handle_info"],
                "target": a.get("attach_target", "VM"),
            }
            for a in self.arqs
        ]


class Claimer:
    """Claims over the Acceleron API (``api``: its client, or a keystoneauth Adapter for
    the accelerator service) and Placement."""

    def __init__(
        self,
        api: AcceleronClient | ks_adapter.Adapter,
        placement: PlacementClient,
        *,
        timeout: float = 600.0,
        poll: float = 0.2,
    ) -> None:
        self.api = as_client(api)
        self.placement = placement
        self.timeout = timeout
        self.poll = poll
        self._hosts: dict[str, str] = {}  # root provider uuid -> compute node name
        self._server_version: tuple[int, int] | None = None  # the API's latest (asked once)

    # --- claim ------------------------------------------------------------------------

    def claim(
        self,
        profile: str,
        consumer: str,
        *,
        project_id: str | None = None,
        user_id: str = "acceleron",
        progress: Progress | None = None,
    ) -> Claim:
        """Claim through the API (``POST /v2/claims``, 2.12: the API allocates, binds and
        undoes on failure), then follow it while regions are programmed. Against an API
        older than 2.12, the same flow runs here (``claim_here``). ``project_id``: the
        project to claim for (admins and services; default: the caller's)."""
        consumer = _check_consumer(consumer)
        if not self._server_claims():
            return self.claim_here(profile, consumer, project_id=project_id or "acceleron",
                                   user_id=user_id, progress=progress)  # fmt: skip
        body = {"device_profile_name": profile, "consumer_uuid": consumer}
        if project_id:
            body["project_id"] = project_id
        version = HELD if self._version() >= (2, 16) else CLAIMS
        response = self._call("POST", "/v2/claims", json=body, microversion=version)
        if response.status_code != 201:
            raise ClaimFailed(f"{_held_hint(response, consumer)}")
        claim = wait_claim(
            lambda: self._json("GET", f"/v2/claims/{consumer}", microversion=version),
            response.json(), self.timeout, self.poll, progress,
        )  # fmt: skip
        if claim["state"] == "binding":
            self._release_claim(consumer)
            raise ClaimFailed(f"The binds of {consumer} did not end within {self.timeout:g} s.")
        if claim["state"] != "bound":
            self._release_claim(consumer)
            raise ClaimFailed(f"The accelerators could not be bound: {claim['failure_reason']}")
        LOG.info("Claimed %s for %s on %s", profile, consumer, claim["hostname"])
        arqs = claim["accelerator_requests"]
        return Claim(consumer, claim["hostname"], self._held(claim), tuple(arqs))

    def _held(self, claim: Mapping[str, Any]) -> dict[str, dict[str, int]]:
        """What the API allocated for the claim: shown in it from 2.16, else Placement's."""
        shown = claim.get("allocations")
        if shown is None:
            return self.placement.get_consumer_allocations(claim["consumer_uuid"])
        return {rp: dict(held["resources"]) for rp, held in shown.items()}

    def _server_claims(self) -> bool:
        """Whether the API takes claims itself (2.12 or later)."""
        return self._version() >= (2, 12)

    def _version(self) -> tuple[int, int]:
        """The API's latest microversion, asked once per Claimer."""
        if self._server_version is None:
            self._server_version = self._ask_version()
        return self._server_version

    def _ask_version(self) -> tuple[int, int]:
        """The API's latest microversion; (2, 0) when it does not say."""
        response = self._call("GET", "/v2")
        if response.status_code != 200:
            return (2, 0)
        version = response.json().get("max_version") or response.json().get("version", "")
        try:
            major, minor = (int(p) for p in str(version).split("."))
        except ValueError:
            return (2, 0)
        return (major, minor)

    def _release_claim(self, consumer: str) -> None:
        response = self._call("DELETE", f"/v2/claims/{consumer}", microversion=CLAIMS)
        if response.status_code not in (204, 404):
            LOG.error("Releasing the claim of %s: %s", consumer, detail(response))

    def claim_here(
        self,
        profile: str,
        consumer: str,
        *,
        project_id: str = "acceleron",
        user_id: str = "acceleron",
        progress: Progress | None = None,
    ) -> Claim:
        """The claim flow on this side of the API, over HTTP and Placement (for APIs
        older than 2.12)."""
        consumer = _check_consumer(consumer)
        groups = self._groups(profile)
        # The requests first: a project over its quota is refused before anything is
        # allocated in Placement.
        arqs = arqs_api.create(self._call, profile, ClaimFailed, "Cannot create the requests")
        made = [a["uuid"] for a in arqs]
        try:
            request, hostname = self._allocate(groups, consumer, project_id, user_id)
        except BaseException:
            self._undo(consumer, made, allocated=False)
            raise
        try:
            self._bind(arqs, request, hostname, consumer)
            bound = self._wait(consumer, progress)
        except BaseException:
            self._undo(consumer, made)
            raise
        failed = [a for a in bound if a["state"] != "Bound"]
        if failed:
            self._undo(consumer, made)
            reasons = "; ".join(f"{a['uuid']}: {a.get('failure_reason') or a['state']}"
                                for a in failed)  # fmt: skip
            raise ClaimFailed(f"The accelerators could not be bound: {reasons}")
        LOG.info("Claimed %s for %s on %s", profile, consumer, hostname)
        ordered = sorted(bound, key=lambda a: a["device_profile_group_id"])
        return Claim(consumer, hostname, request.allocations, tuple(ordered))

    def _groups(self, profile: str) -> list[dict[str, str]]:
        body = self._json("GET", "/v2/device_profiles", params={"name": profile})
        if len(body["device_profiles"]) != 1:
            raise ClaimFailed(f"Device profile {profile!r} not found.")
        found = body["device_profiles"][0]
        if not found.get("enabled", True):
            raise ClaimFailed(
                f"Device profile {profile!r} is disabled: it takes no new requests "
                f"(`acceleron profile enable {profile}` allows them again)."
            )
        groups: list[dict[str, str]] = found["groups"]
        return groups

    def _allocate(
        self, groups: Sequence[Mapping[str, str]], consumer: str, project: str, user: str
    ) -> tuple[AllocationRequest, str]:
        """Allocate the best candidate; choose again while others win the race."""
        params = query.profile_query(names.untolerant(groups)).params()
        wanted = self._functions(groups)
        for attempt in range(1, ATTEMPTS + 1):
            candidates = self.placement.get_allocation_candidates(params)
            best = weigher.best(candidates, wanted)
            if best is None:
                raise ClaimFailed(
                    "No host has the accelerators the profile asks for free: they are all in "
                    "use or disabled, or none matches its groups (`acceleron deployable list "
                    "--tree` shows what there is)."
                )
            hostname = self._hostname(best, candidates)  # before anything is allocated
            try:
                self.placement.put_allocations(
                    consumer, best.allocations, project_id=project, user_id=user
                )
            except AllocationConflict as error:
                self._refuse_if_held(consumer)
                LOG.info("Allocation conflict (attempt %d of %d): %s", attempt, ATTEMPTS, error)
                time.sleep(0.05 * attempt)
                continue
            return best, hostname
        raise ClaimFailed(f"Other consumers took the capacity {ATTEMPTS} times: try again.")

    def _refuse_if_held(self, consumer: str) -> None:
        """A consumer that holds allocations already gets no new ones (Placement answers
        409, every time): say so instead of trying again."""
        held = self.placement.get_consumer_allocations(consumer)
        if held:
            amounts = Counter[str]()
            for resources in held.values():
                amounts.update(resources)
            what = ", ".join(f"{amount} {rc}" for rc, amount in sorted(amounts.items()))
            raise ClaimFailed(
                f"Consumer {consumer} already holds allocations in Placement ({what}): "
                f"release them first (`acceleron release --consumer {consumer}`), or claim "
                "for another consumer uuid."
            )

    def _functions(self, groups: Sequence[Mapping[str, str]]) -> dict[str, frozenset[str]]:
        """The functions each group wants, for the weigher (a function named by name or
        a bitstream is looked up in the bitstream catalogue)."""
        try:
            return functions.wanted(self.api, groups)
        except CallFailed as error:
            raise ClaimFailed(f"The accelerator API cannot be reached: {error}") from error

    def _hostname(self, request: AllocationRequest, candidates: Candidates) -> str:
        """The compute node the allocation lands on: its root provider's name."""
        roots = {
            summary.root_uuid
            for rp in request.allocations
            if (summary := candidates.summaries.get(rp)) is not None and summary.root_uuid
        }
        if len(roots) != 1:
            raise ClaimFailed(f"The allocation spans {len(roots)} hosts; expected one.")
        uuid = roots.pop()
        if uuid not in self._hosts:  # a compute node's name does not change: ask once
            root = self.placement.get_provider(uuid)
            if root is None:
                raise ClaimFailed("The chosen host vanished from Placement.")
            self._hosts[uuid] = root.name
        return self._hosts[uuid]

    def _bind(
        self,
        arqs: Sequence[Mapping[str, Any]],
        request: AllocationRequest,
        hostname: str,
        consumer: str,
    ) -> None:
        providers = {}
        for arq in arqs:
            group = arq["device_profile_group_id"]
            mapped = request.mappings.get(f"{query.GROUP_PREFIX}{group}")
            if not mapped:
                raise ClaimFailed(f"Placement mapped no provider to group {group}.")
            providers[group] = mapped[0]
        body = bind_body(arqs, providers, hostname, consumer)
        arqs_api.bind(self._call, body, ClaimFailed, "Cannot bind the requests")

    def _wait(self, consumer: str, progress: Progress | None) -> list[dict[str, Any]]:
        return wait_resolved(self._call, consumer, self.timeout, self.poll, ClaimFailed, progress)

    # --- release ----------------------------------------------------------------------

    def release(self, consumer: str) -> tuple[int, bool]:
        """Delete the consumer's requests and its allocation: (requests, whether an
        allocation was dropped). A claim the API made is released by the API."""
        consumer = _check_consumer(consumer)
        if self._server_claims():
            shown = self._call("GET", f"/v2/claims/{consumer}", microversion=CLAIMS)
            if shown.status_code == 200:
                count = len(shown.json()["accelerator_requests"])
                response = self._call("DELETE", f"/v2/claims/{consumer}", microversion=CLAIMS)
                if response.status_code != 204:
                    raise ClaimFailed(f"Cannot release the claim: {detail(response)}")
                return count, True
        held = self._json("GET", "/v2/accelerator_requests", params={"instance": consumer})
        response = self._call("DELETE", f"/v2/accelerator_requests?instance={consumer}")
        if response.status_code != 204:
            raise ClaimFailed(f"Cannot delete the requests: {detail(response)}")
        dropped = self.placement.delete_allocations(consumer)
        return len(held["arqs"]), dropped

    def _undo(self, consumer: str, arqs: Sequence[str], allocated: bool = True) -> None:
        """Undo what a claim did, every step whatever the others do: the requests it made
        (``arqs``, bound or not) and its allocation. What cannot be undone now is logged,
        and the API's reconciler frees it later."""
        try:
            response = self._call(
                "DELETE", "/v2/accelerator_requests", params={"arqs": ",".join(arqs)}
            )
            if response.status_code not in (204, 404):  # 404: deleted meanwhile
                raise ClaimFailed(f"cannot delete its requests: {detail(response)}")
        except ClaimFailed as error:
            LOG.error("Undoing the claim of %s: %s", consumer, error)
        if not allocated:
            return
        try:
            self.placement.delete_allocations(consumer)
        except PlacementError as error:
            LOG.error("Undoing the claim of %s: %s", consumer, error.message)

    # --- HTTP ---------------------------------------------------------------------------

    def _call(self, method: str, path: str, microversion: str = MICROVERSION,
              **kwargs: Any) -> Any:  # fmt: skip
        try:
            return self.api.send(method, path, microversion=microversion, **kwargs)
        except CallFailed as error:
            raise ClaimFailed(f"The accelerator API cannot be reached: {error}") from error

    def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            body: dict[str, Any] = self.api.check(self._call(method, path, **kwargs)).json()
        except ApiError as error:
            raise ClaimFailed(f"{method} {path}: {error}") from error
        return body


def _held_hint(response: Any, consumer: str) -> str:
    """Why the API refused a claim; for a consumer that has one, what to do."""
    text = detail(response)
    if response.status_code == 409 and "has a claim already" in text:
        return (
            f"Consumer {consumer} already holds a claim: release it first (`acceleron "
            f"release --consumer {consumer}`), or claim for another consumer uuid."
        )
    if 400 <= response.status_code < 500:  # the API's own words say what is wrong
        return str(parse_error(response.text, response.reason).detail)
    return f"Cannot claim: {text}"


def _check_consumer(consumer: str) -> str:
    try:
        return str(uuidlib.UUID(consumer))
    except ValueError:
        raise ClaimFailed(f"The consumer must be a uuid, not {consumer!r}.") from None
