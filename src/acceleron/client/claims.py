"""Claiming accelerators without Nova, over the API: what ``acceleron claim`` and
``release`` do, for any program without Nova.

The claim is the API's (``POST /v2/claims``, microversion 2.12; the one flow is
:func:`acceleron.service.claims.make`, docs/claims.md): it chooses the accelerators
with Placement and spec 001's weigher, allocates, creates and binds the requests, and
undoes everything when a step fails. This side sends it, follows the claim while
regions are programmed or vGPUs made (telling ``progress`` the requests at each look),
releases it when its binds fail or do not end in time, and returns the attach handles.
``release`` is ``DELETE /v2/claims/{consumer}``. An API older than 2.12 is refused
with the version it needs.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from keystoneauth1 import adapter as ks_adapter

from acceleron import microversion
from acceleron.client.arqs import Progress, wait_claim
from acceleron.client.errors import detail, parse_error
from acceleron.client.http import AcceleronClient, ApiError, CallFailed, as_client
from acceleron.exceptions import InvalidInput
from acceleron.uuids import parse

LOG = logging.getLogger(__name__)
CLAIMS = microversion.V2_12  # server-side claims
HELD = microversion.V2_16  # a claim shows its allocations


class ClaimFailed(Exception):
    """The claim could not be made; nothing of it is left behind."""


@dataclasses.dataclass(frozen=True)
class Claim:
    consumer: str
    hostname: str
    # provider -> class -> amount; None from an API older than 2.16 (it does not say)
    allocations: Mapping[str, Mapping[str, int]] | None
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
    the accelerator service)."""

    def __init__(
        self,
        api: AcceleronClient | ks_adapter.Adapter,
        *,
        timeout: float = 600.0,
        poll: float = 0.2,
    ) -> None:
        self.api = as_client(api)
        self.timeout = timeout
        self.poll = poll
        self._server_version: microversion.Version | None = None  # the API's latest (asked once)

    def claim(
        self,
        profile: str,
        consumer: str,
        *,
        project_id: str | None = None,
        progress: Progress | None = None,
    ) -> Claim:
        """Claim through the API (``POST /v2/claims``), then follow it while regions are
        programmed. ``project_id``: the project to claim for (admins and services;
        default: the caller's)."""
        consumer = _check_consumer(consumer)
        version = self._claims_version()
        body = {"device_profile_name": profile, "consumer_uuid": consumer}
        if project_id:
            body["project_id"] = project_id
        response = self._call("POST", "/v2/claims", json=body, microversion=version)
        if response.status_code != 201:
            raise ClaimFailed(f"{_held_hint(response, consumer)}")
        claim = wait_claim(
            lambda: self._json("GET", f"/v2/claims/{consumer}", microversion=version),
            response.json(),
            self.timeout,
            self.poll,
            progress,
        )
        if claim["state"] == "binding":
            self._release_claim(consumer)
            raise ClaimFailed(f"The binds of {consumer} did not end within {self.timeout:g} s.")
        if claim["state"] != "bound":
            self._release_claim(consumer)
            raise ClaimFailed(f"The accelerators could not be bound: {claim['failure_reason']}")
        LOG.info("Claimed %s for %s on %s", profile, consumer, claim["hostname"])
        arqs = claim["accelerator_requests"]
        return Claim(consumer, claim["hostname"], _held(claim), tuple(arqs))

    def release(self, consumer: str, made: Claim | None = None) -> tuple[int, bool]:
        """Release the consumer's claim: (its requests, whether there was a claim).
        ``made``: the claim as ``claim`` returned it, when the caller has it: its
        requests are counted from it, without reading the claim first."""
        consumer = _check_consumer(consumer)
        self._claims_version()
        if made is not None and made.consumer == consumer:
            count = len(made.arqs)
        else:
            shown = self._call("GET", f"/v2/claims/{consumer}", microversion=CLAIMS)
            if shown.status_code == 404:
                return 0, False
            if shown.status_code != 200:
                raise ClaimFailed(f"Cannot release the claim: {detail(shown)}")
            count = len(shown.json()["accelerator_requests"])
        response = self._call("DELETE", f"/v2/claims/{consumer}", microversion=CLAIMS)
        if response.status_code == 404 and made is not None:
            return 0, False
        if response.status_code != 204:
            raise ClaimFailed(f"Cannot release the claim: {detail(response)}")
        return count, True

    def _claims_version(self) -> microversion.Version:
        """The microversion to claim at; ClaimFailed for an API older than 2.12."""
        latest = self._version()
        if latest < CLAIMS:
            raise ClaimFailed(
                f"The Acceleron API at {self.api.where} supports microversions up to "
                f"{latest}; claims need {CLAIMS} or later: upgrade it."
            )
        return HELD if latest >= HELD else CLAIMS

    def _version(self) -> microversion.Version:
        """The API's latest microversion, asked once per Claimer."""
        if self._server_version is None:
            self._server_version = self._ask_version()
        return self._server_version

    def _ask_version(self) -> microversion.Version:
        """The API's latest microversion; 2.0 when it does not say."""
        response = self._call("GET", "/v2")
        if response.status_code != 200:
            return microversion.V2_0
        version = response.json().get("max_version") or response.json().get("version", "")
        try:
            return microversion.parse(str(version))
        except ValueError:
            return microversion.V2_0

    def _release_claim(self, consumer: str) -> None:
        response = self._call("DELETE", f"/v2/claims/{consumer}", microversion=CLAIMS)
        if response.status_code not in (204, 404):
            LOG.error("Releasing the claim of %s: %s", consumer, detail(response))

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            return self.api.send(method, path, **kwargs)
        except CallFailed as error:
            raise ClaimFailed(f"The accelerator API cannot be reached: {error}") from error

    def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            body: dict[str, Any] = self.api.check(self._call(method, path, **kwargs)).json()
        except ApiError as error:
            raise ClaimFailed(f"{method} {path}: {error}") from error
        return body


def _held(claim: Mapping[str, Any]) -> dict[str, dict[str, int]] | None:
    """What the API allocated for the claim (shown from 2.16; None before)."""
    shown = claim.get("allocations")
    if shown is None:
        return None
    return {rp: dict(held["resources"]) for rp, held in shown.items()}


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
        return parse(consumer, "consumer")
    except InvalidInput:
        raise ClaimFailed(f"The consumer must be a uuid, not {consumer!r}.") from None
