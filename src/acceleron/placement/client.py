"""A thin, typed client for the Placement API, over a keystoneauth1 Adapter.

It does what a sync needs with as few calls as it can:

* every request carries one pinned microversion (:data:`MICROVERSION`);
* the generation of every provider it has seen is remembered, so a write needs no read
  first; a generation conflict (409 ``placement.concurrent_update``) re-reads the
  generation and tries again, up to ``max_attempts`` times; ``update_traits`` and
  ``update_inventories``, for providers shared with Nova, re-read the content too and
  merge again, so a concurrent change is kept;
* custom traits and resource classes are created on demand before they are used and
  remembered, so each is ensured once per client (one ``GET /traits?name=in:`` finds
  which of several already exist). If one vanished meanwhile (400 on use), it is
  ensured again and the write retried once.
* it never deletes a trait or a resource class: Placement keeps them global, and
  another provider (ours or not) may use them.

Errors become the domain exceptions of :mod:`acceleron.exceptions`:
:class:`~acceleron.exceptions.PlacementUnavailable` when Placement cannot be reached or
answers 5xx (retry later, with backoff), and other ``Placement*`` errors otherwise.

A client keeps small caches: use one per thread.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

import requests
from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import exceptions as ks_exc

from acceleron import metrics
from acceleron.exceptions import (
    AllocationConflict,
    Conflict,
    PlacementError,
    PlacementGenerationConflict,
    PlacementProviderExists,
    PlacementProviderInUse,
    PlacementProviderNotFound,
    PlacementUnavailable,
)
from acceleron.placement import batch

LOG = logging.getLogger(__name__)
# Placement's words for a trait or resource class it does not know (a 400).
_UNKNOWN_NAME = re.compile(
    r"No such (?P<what>trait\(s\)|resource class):? (?P<names>[A-Z0-9_, ]+[A-Z0-9_])"
)

# 1.20: POST /resource_providers returns the provider; 1.34: mappings in allocation
# candidates; 1.36: same_subtree; 1.39: required=in:A,B (any of several traits).
MICROVERSION = "1.39"
CONCURRENT_UPDATE = "placement.concurrent_update"
DUPLICATE_NAME = "placement.duplicate_name"
_IN_USE_CODES = (
    "placement.resource_provider.inuse",
    "placement.resource_provider.cannot_delete_parent",
    "placement.inventory.inuse",
)
# Placement's own words (a 400 with no error code) when a new provider's parent is missing.
_UNKNOWN_PARENT = "parent provider UUID does not exist"
_UNREACHABLE = (ks_exc.ConnectionError, ks_exc.EndpointNotFound, ks_exc.DiscoveryFailure)
_NAMES_PER_QUERY = 40
JSON = dict[str, Any]


@dataclass(frozen=True)
class Provider:
    uuid: str
    name: str
    generation: int
    parent_uuid: str | None = None
    root_uuid: str | None = None

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Provider:
        return cls(
            uuid=body["uuid"],
            name=body["name"],
            generation=body["generation"],
            parent_uuid=body.get("parent_provider_uuid"),
            root_uuid=body.get("root_provider_uuid"),
        )


@dataclass(frozen=True)
class Inventory:
    """One resource class's inventory; ``max_unit`` defaults to ``total``."""

    total: int
    reserved: int = 0
    min_unit: int = 1
    max_unit: int = 0
    step_size: int = 1
    allocation_ratio: float = 1.0

    def __post_init__(self) -> None:
        if self.max_unit == 0:
            object.__setattr__(self, "max_unit", self.total)

    def to_json(self) -> JSON:
        return {
            "total": self.total,
            "reserved": self.reserved,
            "min_unit": self.min_unit,
            "max_unit": self.max_unit,
            "step_size": self.step_size,
            "allocation_ratio": self.allocation_ratio,
        }

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Inventory:
        return cls(
            total=body["total"],
            reserved=body.get("reserved", 0),
            min_unit=body.get("min_unit", 1),
            max_unit=body.get("max_unit", 0),
            step_size=body.get("step_size", 1),
            allocation_ratio=float(body.get("allocation_ratio", 1.0)),
        )


@dataclass(frozen=True)
class Capacity:
    capacity: int
    used: int


@dataclass(frozen=True)
class ProviderSummary:
    resources: Mapping[str, Capacity]
    traits: frozenset[str]
    parent_uuid: str | None
    root_uuid: str | None


@dataclass(frozen=True)
class AllocationRequest:
    allocations: Mapping[str, Mapping[str, int]]  # provider uuid -> class -> amount
    mappings: Mapping[str, tuple[str, ...]]  # request group suffix -> provider uuids


@dataclass(frozen=True)
class Candidates:
    requests: tuple[AllocationRequest, ...]
    summaries: Mapping[str, ProviderSummary] = field(default_factory=dict)

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Candidates:
        requests_ = tuple(
            AllocationRequest(
                allocations={
                    rp: dict(alloc["resources"]) for rp, alloc in item["allocations"].items()
                },
                mappings={group: tuple(rps) for group, rps in item.get("mappings", {}).items()},
            )
            for item in body["allocation_requests"]
        )
        summaries = {
            rp: ProviderSummary(
                resources={
                    rc: Capacity(value["capacity"], value["used"])
                    for rc, value in summary["resources"].items()
                },
                traits=frozenset(summary.get("traits", ())),
                parent_uuid=summary.get("parent_provider_uuid"),
                root_uuid=summary.get("root_provider_uuid"),
            )
            for rp, summary in body["provider_summaries"].items()
        }
        return cls(requests_, summaries)


@dataclass(frozen=True)
class Consumer:
    """A consumer's allocations as Placement has them, and what guards a rewrite."""

    allocations: Mapping[str, Mapping[str, int]]  # provider uuid -> class -> amount
    generation: int | None
    project_id: str | None
    user_id: str | None
    consumer_type: str | None


def _error_detail(response: requests.Response) -> tuple[str, str | None]:
    """Placement's error message and code, from its JSON error body if there is one;
    without the HTTP boilerplate the detail starts with ("The server could not comply
    with the request since ...", then the message after a blank line)."""
    try:
        error = response.json()["errors"][0]
        detail = str(error.get("detail") or error.get("title"))
        return " ".join(detail.split("\n\n")[-1].split()) or detail, error.get("code")
    except (ValueError, KeyError, IndexError, TypeError):
        return " ".join(response.text.split())[:500] or response.reason, None


class PlacementClient:
    """Typed access to Placement through ``adapter`` (any keystoneauth1 Adapter)."""

    def __init__(
        self,
        adapter: ks_adapter.Adapter,
        *,
        microversion: str = MICROVERSION,
        max_attempts: int = 4,
    ) -> None:
        self._adapter = adapter
        self._microversion = microversion
        self._max_attempts = max_attempts
        self._writes: batch.Writes | None = None
        self._generations: dict[str, int] = {}
        self._known_traits: set[str] = set()
        self._known_classes: set[str] = set()

    @property
    def adapter(self) -> ks_adapter.Adapter:
        """The keystoneauth1 Adapter this client sends through."""
        return self._adapter

    def batching(self, writes: batch.Writes) -> PlacementClient:
        """This client, its consumers' allocation writes (``put_allocations``,
        ``replace_allocations``) sent together with those of other threads made at the
        same moment (``placement.batch``)."""
        self._writes = writes
        return self

    # Plumbing

    def _send(self, method: str, path: str, body: JSON | None, doing: str) -> requests.Response:
        kwargs: dict[str, Any] = {
            "microversion": self._microversion,
            "microversion_service_type": "placement",
            "raise_exc": False,
            "headers": {"Accept": "application/json"},
        }
        if body is not None:
            kwargs["json"] = body
        kind = metrics.placement_kind(path)
        metrics.PLACEMENT_REQUESTS.labels(method, kind).inc()
        try:
            response: requests.Response = self._adapter.request(path, method, **kwargs)
        except _UNREACHABLE as error:
            metrics.PLACEMENT_ERRORS.labels(kind, "unreachable").inc()
            raise PlacementUnavailable(
                f"Placement is unreachable while {doing}: {error}"
            ) from error
        if response.status_code >= 400:
            metrics.PLACEMENT_ERRORS.labels(kind, _error_kind(response.status_code)).inc()
        if response.status_code >= 500:
            detail, code = _error_detail(response)
            raise PlacementUnavailable(
                f"Placement failed while {doing} ({response.status_code}): {detail}",
                status=response.status_code,
                code=code,
            )
        return response

    def _failure(self, response: requests.Response, doing: str) -> PlacementError:
        detail, code = _error_detail(response)
        status = response.status_code
        message = f"Placement refused {doing} ({status}): {detail}"
        if status == 404:
            return PlacementProviderNotFound(message, status=status, code=code)
        if status == 409 and code == DUPLICATE_NAME:
            return PlacementProviderExists(message, status=status, code=code)
        if status == 409 and code in _IN_USE_CODES:
            return PlacementProviderInUse(message, status=status, code=code)
        return PlacementError(message, status=status, code=code)

    def _call(
        self, method: str, path: str, doing: str, body: JSON | None = None
    ) -> requests.Response:
        """Send and raise for any answer but 2xx."""
        response = self._send(method, path, body, doing)
        if response.status_code >= 400:
            raise self._failure(response, doing)
        return response

    def _get(self, path: str, doing: str) -> JSON:
        body: JSON = self._call("GET", path, doing).json()
        return body

    def _remember(self, uuid: str, body: Mapping[str, Any]) -> int:
        generation = int(body["resource_provider_generation"])
        self._generations[uuid] = generation
        return generation

    def generation(self, uuid: str) -> int | None:
        """The last generation of ``uuid`` this client saw, if any."""
        return self._generations.get(uuid)

    def forget(self, uuid: str | None = None) -> None:
        """Drop remembered generations (of one provider, or all)."""
        if uuid is None:
            self._generations.clear()
        else:
            self._generations.pop(uuid, None)

    # Providers

    def get_provider(self, uuid: str) -> Provider | None:
        response = self._send("GET", f"/resource_providers/{uuid}", None, f"reading {uuid}")
        if response.status_code == 404:
            self.forget(uuid)
            return None
        if response.status_code >= 400:
            raise self._failure(response, f"reading provider {uuid}")
        return self._remember_generation(Provider.from_json(response.json()))

    def _remember_generation(self, provider: Provider) -> Provider:
        self._generations[provider.uuid] = provider.generation
        return provider

    def find_provider(self, name: str) -> Provider | None:
        """The provider named ``name`` (a compute node's is its hypervisor host name)."""
        query = urlencode({"name": name})
        body = self._get(f"/resource_providers?{query}", f"looking up provider {name!r}")
        found = [
            self._remember_generation(Provider.from_json(rp)) for rp in body["resource_providers"]
        ]
        return found[0] if found else None

    def provider_names(self) -> list[str]:
        """Names of every provider (one call; for error messages, not for hot paths)."""
        return [provider.name for provider in self.list_providers()]

    def list_providers(self) -> list[Provider]:
        """Every provider, with its generation (one call)."""
        body = self._get("/resource_providers", "listing resource providers")
        return [
            self._remember_generation(Provider.from_json(rp)) for rp in body["resource_providers"]
        ]

    def get_tree(self, uuid: str) -> list[Provider]:
        """Every provider in the tree holding ``uuid`` (one call); empty if there is none."""
        body = self._get(f"/resource_providers?in_tree={uuid}", f"reading the tree of {uuid}")
        return [
            self._remember_generation(Provider.from_json(rp)) for rp in body["resource_providers"]
        ]

    def create_provider(self, uuid: str, name: str, parent_uuid: str | None = None) -> Provider:
        """Create a provider (one call: at 1.20+ the answer is the provider itself).

        PlacementProviderNotFound (status 400) when ``parent_uuid`` does not exist."""
        body: JSON = {"uuid": uuid, "name": name}
        if parent_uuid is not None:
            body["parent_provider_uuid"] = parent_uuid
        doing = f"creating provider {name!r}"
        response = self._send("POST", "/resource_providers", body, doing)
        if response.status_code == 400 and _UNKNOWN_PARENT in response.text:
            raise PlacementProviderNotFound(
                f"Placement refused {doing}: its parent provider {parent_uuid} does not exist.",
                status=400,
            )
        if response.status_code >= 400:
            raise self._failure(response, doing)
        return self._remember_generation(Provider.from_json(response.json()))

    def move_provider(self, uuid: str, name: str, parent_uuid: str | None) -> Provider:
        """Give a provider another parent (Placement 1.37+ allows re-parenting)."""
        body: JSON = {"name": name, "parent_provider_uuid": parent_uuid}
        doing = f"moving provider {name!r} under {parent_uuid}"
        response = self._call("PUT", f"/resource_providers/{uuid}", doing, body)
        return self._remember_generation(Provider.from_json(response.json()))

    def delete_provider(self, uuid: str) -> bool:
        """Delete one provider; False if it was already gone.

        Placement refuses (PlacementProviderInUse) while it has allocations or children.
        """
        doing = f"deleting provider {uuid}"
        response = self._send("DELETE", f"/resource_providers/{uuid}", None, doing)
        self.forget(uuid)
        if response.status_code == 404:
            return False
        if response.status_code >= 400:
            raise self._failure(response, doing)
        return True

    def delete_subtree(self, uuid: str, tree: Sequence[Provider] | None = None) -> int:
        """Delete ``uuid`` and its descendants, deepest first; how many were deleted.

        Pass ``tree`` (from :meth:`get_tree`) to save the read. Providers with
        allocations (and so their ancestors) are kept; the others are deleted, then
        PlacementProviderInUse names the ones kept.
        """
        providers = list(tree) if tree is not None else self.get_tree(uuid)
        deleted, kept = 0, []
        for rp in _descendants_deepest_first(providers, uuid):
            try:
                deleted += self.delete_provider(rp)
            except PlacementProviderInUse:
                kept.append(rp)
        if kept:
            raise PlacementProviderInUse(
                f"Deleted {deleted} provider(s) under {uuid}; kept {', '.join(kept)}: they "
                f"(or their children) still have allocations.",
                status=409,
            )
        return deleted

    # Writes guarded by the provider generation

    def _generation_for(self, uuid: str, generation: int | None) -> int:
        if generation is not None:
            return generation
        known = self._generations.get(uuid)
        if known is not None:
            return known
        return self._read_generation(uuid)

    def _read_generation(self, uuid: str) -> int:
        provider = self.get_provider(uuid)
        if provider is None:
            raise PlacementProviderNotFound(f"Resource provider {uuid} does not exist.")
        return provider.generation

    def _put_guarded(
        self,
        uuid: str,
        path: str,
        make_body: Callable[[int], JSON],
        generation: int | None,
        doing: str,
        repair: Callable[[], None] | None = None,
        attempts: int | None = None,
    ) -> JSON:
        """PUT with the provider generation; on a generation conflict re-read and retry.

        After ``attempts`` conflicts, PlacementGenerationConflict. On a 400, ``repair``
        (if given) runs once and the PUT is tried again.
        """
        limit = attempts or self._max_attempts
        current = self._generation_for(uuid, generation)
        conflicts = 0
        while True:
            response = self._send("PUT", path, make_body(current), doing)
            if response.status_code == 400 and repair is not None:
                repair()
                repair = None
                continue
            if response.status_code == 409 and _error_detail(response)[1] == CONCURRENT_UPDATE:
                conflicts += 1
                if conflicts >= limit:
                    break
                LOG.debug("Generation conflict on %s while %s; retrying", uuid, doing)
                current = self._read_generation(uuid)
                continue
            if response.status_code >= 400:
                raise self._failure(response, doing)
            body: JSON = response.json()
            self._remember(uuid, body)
            return body
        self.forget(uuid)
        raise PlacementGenerationConflict(
            f"Resource provider {uuid} kept changing while {doing}; gave up after "
            f"{conflicts} generation conflicts.",
            status=409,
            code=CONCURRENT_UPDATE,
        )

    # Inventories

    def get_inventories(self, uuid: str) -> tuple[int, dict[str, Inventory]]:
        """The provider's generation and inventories."""
        body = self._get(f"/resource_providers/{uuid}/inventories", f"reading inventory of {uuid}")
        inventories = {rc: Inventory.from_json(inv) for rc, inv in body["inventories"].items()}
        return self._remember(uuid, body), inventories

    def set_inventories(
        self, uuid: str, inventories: Mapping[str, Inventory], *, generation: int | None = None
    ) -> int:
        """Replace all of the provider's inventories (one call); the new generation.

        Custom resource classes are ensured first. Removing a class that is allocated
        raises PlacementProviderInUse. A generation conflict is retried with the same
        inventories: for a provider others write too, use :meth:`update_inventories`.
        """
        return self._put_inventories(uuid, inventories, generation, None)

    def update_inventories(
        self,
        uuid: str,
        change: Callable[[Mapping[str, Inventory]], Mapping[str, Inventory]],
        *,
        read: tuple[int, Mapping[str, Inventory]] | None = None,
    ) -> int:
        """Write ``change(current inventories)``, keeping what others write meanwhile.

        After a generation conflict the inventories are read again and ``change`` applied
        to them anew, so a concurrent change (Nova's, on a compute node) is not lost.
        ``read`` (generation, inventories) is a read just made, to save the first GET.
        """

        def attempt(first: bool) -> int:
            generation, current = read if first and read is not None else self.get_inventories(uuid)
            wanted = dict(change(current))
            if wanted == current:
                return generation
            return self._put_inventories(uuid, wanted, generation, 1)

        return self._retrying(uuid, "updating its inventory", attempt)

    def _retrying(self, uuid: str, doing: str, attempt: Callable[[bool], int]) -> int:
        """Run read-change-write ``attempt`` until no generation conflict stops it."""
        for number in range(self._max_attempts):
            try:
                return attempt(number == 0)
            except PlacementGenerationConflict:
                continue
        raise PlacementGenerationConflict(
            f"Resource provider {uuid} kept changing while {doing}.",
            status=409,
            code=CONCURRENT_UPDATE,
        )

    def _put_inventories(
        self,
        uuid: str,
        inventories: Mapping[str, Inventory],
        generation: int | None,
        attempts: int | None,
    ) -> int:
        self.ensure_resource_classes(inventories)

        def make_body(gen: int) -> JSON:
            invs = {rc: inv.to_json() for rc, inv in inventories.items()}
            return {"resource_provider_generation": gen, "inventories": invs}

        def repair() -> None:
            self._known_classes.difference_update(inventories)
            self.ensure_resource_classes(inventories)

        path = f"/resource_providers/{uuid}/inventories"
        doing = f"setting inventory of {uuid}"
        body = self._put_guarded(uuid, path, make_body, generation, doing, repair, attempts)
        return int(body["resource_provider_generation"])

    def reshape(self, inventories: Mapping[str, tuple[int, Mapping[str, Inventory]]]) -> None:
        """Replace several providers' inventories in one transaction (``POST /reshaper``,
        no allocation moved): all are written or none. ``inventories``: by provider,
        the generation it was read at and its new inventories. PlacementGenerationConflict
        when one changed since. The reshaper answers no generation: theirs are forgotten.
        """
        self.ensure_resource_classes({rc for _, invs in inventories.values() for rc in invs})
        body = {
            "inventories": {
                uuid: {
                    "resource_provider_generation": generation,
                    "inventories": {rc: inv.to_json() for rc, inv in invs.items()},
                }
                for uuid, (generation, invs) in inventories.items()
            },
            "allocations": {},
        }
        doing = f"setting the inventories of {len(inventories)} providers at once"
        response = self._send("POST", "/reshaper", body, doing)
        for uuid in inventories:
            self.forget(uuid)
        if response.status_code == 409 and _error_detail(response)[1] == CONCURRENT_UPDATE:
            raise PlacementGenerationConflict(
                f"A provider changed while {doing}.", status=409, code=CONCURRENT_UPDATE
            )
        if response.status_code >= 400:
            raise self._failure(response, doing)

    # Traits

    def get_traits(self, uuid: str) -> tuple[int, frozenset[str]]:
        """The provider's generation and traits."""
        body = self._get(f"/resource_providers/{uuid}/traits", f"reading traits of {uuid}")
        return self._remember(uuid, body), frozenset(body["traits"])

    def set_traits(self, uuid: str, traits: Iterable[str], *, generation: int | None = None) -> int:
        """Replace all of the provider's traits (one call); the new generation.

        Custom traits are ensured first. Traits the provider loses stay in Placement.
        """
        return self._put_traits(uuid, sorted(set(traits)), generation, None)

    def _put_traits(
        self, uuid: str, wanted: list[str], generation: int | None, attempts: int | None
    ) -> int:
        self.ensure_traits(wanted)

        def repair() -> None:
            self._known_traits.difference_update(wanted)
            self.ensure_traits(wanted)

        body = self._put_guarded(
            uuid,
            f"/resource_providers/{uuid}/traits",
            lambda gen: {"resource_provider_generation": gen, "traits": wanted},
            generation,
            f"setting traits of {uuid}",
            repair,
            attempts,
        )
        return int(body["resource_provider_generation"])

    def update_traits(
        self, uuid: str, *, add: Iterable[str] = (), remove: Iterable[str] = ()
    ) -> int:
        """Add and remove some traits, keeping the others (for a provider we share).

        Reads the current traits and writes the merge; after a conflict, reads again.
        """
        add_set, remove_set = set(add), set(remove)

        def attempt(_first: bool) -> int:
            generation, current = self.get_traits(uuid)
            wanted = (current | add_set) - remove_set
            if wanted == current:
                return generation
            return self._put_traits(uuid, sorted(wanted), generation, attempts=1)

        return self._retrying(uuid, "updating its traits", attempt)

    # Traits and resource classes (global; created, never deleted)

    def ensure_traits(self, names: Iterable[str]) -> None:
        """Make sure every custom trait in ``names`` exists (standard ones always do)."""
        wanted = [n for n in dict.fromkeys(names) if n.startswith("CUSTOM_")]
        missing = [n for n in wanted if n not in self._known_traits]
        if len(missing) > 1:
            existing = self._existing_traits(missing)
            self._known_traits.update(existing)
            missing = [n for n in missing if n not in existing]
        for name in missing:
            self._call("PUT", f"/traits/{quote(name)}", f"creating trait {name}")
            self._known_traits.add(name)

    def _existing_traits(self, names: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for start in range(0, len(names), _NAMES_PER_QUERY):
            chunk = ",".join(names[start : start + _NAMES_PER_QUERY])
            query = urlencode({"name": f"in:{chunk}"})
            found.update(self._get(f"/traits?{query}", "listing traits")["traits"])
        return found

    def ensure_resource_classes(self, names: Iterable[str]) -> None:
        """Make sure every custom resource class in ``names`` exists."""
        wanted = [n for n in dict.fromkeys(names) if n.startswith("CUSTOM_")]
        missing = [n for n in wanted if n not in self._known_classes]
        if len(missing) > 1:
            listed = self._get("/resource_classes", "listing resource classes")
            existing = {rc["name"] for rc in listed["resource_classes"]}
            self._known_classes.update(n for n in missing if n in existing)
            missing = [n for n in missing if n not in existing]
        for name in missing:
            self._call("PUT", f"/resource_classes/{quote(name)}", f"creating class {name}")
            self._known_classes.add(name)

    # Usage

    def get_usages(self, uuid: str) -> dict[str, int]:
        """How much of each resource class is allocated on the provider."""
        body = self._get(f"/resource_providers/{uuid}/usages", f"reading usages of {uuid}")
        self._remember(uuid, body)
        return {rc: int(n) for rc, n in body["usages"].items()}

    def get_allocations(self, uuid: str) -> dict[str, dict[str, int]]:
        """The provider's allocations: consumer uuid -> resource class -> amount."""
        body = self._get(
            f"/resource_providers/{uuid}/allocations", f"reading allocations of {uuid}"
        )
        self._remember(uuid, body)
        return {
            consumer: dict(alloc["resources"]) for consumer, alloc in body["allocations"].items()
        }

    # Scheduling

    def get_allocation_candidates(self, params: Sequence[tuple[str, str]]) -> Candidates:
        """``GET /allocation_candidates`` with the query ``params`` (name, value pairs).
        A trait or resource class Placement does not know (a device profile may name one
        no host has published yet, or a misspelled one) is a Conflict that names it: no
        provider can have it."""
        try:
            body = self._get(
                f"/allocation_candidates?{urlencode(list(params))}", "listing allocation candidates"
            )
        except PlacementError as error:
            unknown = _UNKNOWN_NAME.search(str(error)) if error.status == 400 else None
            if unknown is None:
                raise
            raise Conflict(
                f"No resource provider has {unknown.group('what')} {unknown.group('names')}: "
                "Placement does not know the name. Is it misspelled in the device profile? "
                "Otherwise no host has published it yet."
            ) from error
        return Candidates.from_json(body)

    # Consumers

    def put_allocations(
        self,
        consumer: str,
        allocations: Mapping[str, Mapping[str, int]],
        *,
        project_id: str,
        user_id: str,
        consumer_type: str = "INSTANCE",
    ) -> None:
        """Allocate for a new consumer; AllocationConflict when Placement says no (409)."""
        body = {
            "allocations": {
                rp: {"resources": dict(resources)} for rp, resources in allocations.items()
            },
            "project_id": project_id,
            "user_id": user_id,
            "consumer_generation": None,
            "consumer_type": consumer_type,
        }
        self._write_consumer(consumer, body, f"allocating for {consumer}")

    def get_consumer(self, consumer: str) -> Consumer:
        """The consumer's allocations (none: an empty mapping)."""
        body = self._get(
            f"/allocations/{quote(consumer)}", f"reading the allocations of {consumer}"
        )
        return Consumer(
            allocations={rp: dict(a["resources"]) for rp, a in body["allocations"].items()},
            generation=body.get("consumer_generation"),
            project_id=body.get("project_id"),
            user_id=body.get("user_id"),
            consumer_type=body.get("consumer_type"),
        )

    def replace_allocations(
        self, consumer: str, read: Consumer, allocations: Mapping[str, Mapping[str, int]]
    ) -> None:
        """Write the consumer's allocations anew (empty: none left), unless they changed
        since ``read``: AllocationConflict then. A consumer Placement reads as type
        ``unknown`` (written with no type, as Nova's servers may be) is written as
        INSTANCE: a write may not name ``unknown``."""
        kind = read.consumer_type if read.consumer_type not in (None, "unknown") else None
        body = {
            "allocations": {rp: {"resources": dict(r)} for rp, r in allocations.items()},
            "consumer_generation": read.generation,
            "project_id": read.project_id,
            "user_id": read.user_id,
            "consumer_type": kind or "INSTANCE",
        }
        self._write_consumer(consumer, body, f"rewriting the allocations of {consumer}")

    def _write_consumer(self, consumer: str, body: JSON, doing: str) -> None:
        """``_put_consumer``, or with others' writes (``batching``)."""
        if self._writes is None:
            self._put_consumer(consumer, body, doing)
            return
        alone = lambda: self._put_consumer(consumer, body, doing)  # noqa: E731
        self._writes.write(consumer, body, self._post_allocations, alone)

    def _post_allocations(self, bodies: Mapping[str, JSON]) -> bool:
        """Write several consumers' allocations in one transaction (each body as a PUT
        takes it); False when Placement refused them (then none was written)."""
        doing = f"writing the allocations of {len(bodies)} consumers"
        response = self._send("POST", "/allocations", dict(bodies), doing)
        if response.status_code >= 400:
            LOG.debug("Placement refused %s: %s", doing, _error_detail(response)[0])
            return False
        return True

    def _put_consumer(self, consumer: str, body: JSON, doing: str) -> None:
        response = self._send("PUT", f"/allocations/{quote(consumer)}", body, doing)
        if response.status_code == 409:
            detail, code = _error_detail(response)
            raise AllocationConflict(f"Placement refused {doing}: {detail}", status=409, code=code)
        if response.status_code >= 400:
            raise self._failure(response, doing)

    def get_consumer_allocations(self, consumer: str) -> dict[str, dict[str, int]]:
        """What a consumer holds: provider uuid -> resource class -> amount (empty: nothing)."""
        body = self._get(
            f"/allocations/{quote(consumer)}", f"reading the allocations of {consumer}"
        )
        return {rp: dict(alloc["resources"]) for rp, alloc in body["allocations"].items()}

    def delete_allocations(self, consumer: str) -> bool:
        """Drop a consumer's allocations; False when it had none."""
        doing = f"deleting the allocations of {consumer}"
        response = self._send("DELETE", f"/allocations/{quote(consumer)}", None, doing)
        if response.status_code == 404:
            return False
        if response.status_code >= 400:
            raise self._failure(response, doing)
        return True


def _descendants_deepest_first(providers: Sequence[Provider], uuid: str) -> list[str]:
    children: dict[str | None, list[str]] = {}
    for rp in providers:
        children.setdefault(rp.parent_uuid, []).append(rp.uuid)
    order: list[str] = []
    stack = [uuid]
    while stack:
        current = stack.pop()
        order.append(current)
        stack.extend(children.get(current, ()))
    return order[::-1]


def _error_kind(status: int) -> str:
    """A failed answer's label in acceleron_placement_errors."""
    if status >= 500:
        return "server_error"
    return {409: "conflict", 404: "not_found"}.get(status, "refused")
