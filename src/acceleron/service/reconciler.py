"""Placement allocations and accelerator requests that no longer explain each other.

Two kinds of leak, left by a claim that failed halfway, an instance deleted while its
requests stayed, or a hand in Placement:

* ``allocation``: a consumer holds Acceleron's resources in Placement (any class on a
  provider Acceleron owns; on a compute node in flat mode, the classes Acceleron put
  there) while no request of Acceleron holds a handle for it: that capacity is lost to
  everyone. Freeing it takes Acceleron's part out of the consumer's allocations (a
  Nova instance's VCPU and memory stay), guarded by the consumer's generation.
* ``request``: a request holds a handle (BindStarted or Bound) for a consumer that holds
  no allocation at all in Placement any more: that handle is lost to everyone.
  Freeing it unbinds the request (handle freed, vGPU removed), saying why in its
  ``failure_reason``.

A boot or a claim allocates before it binds, and a deleted instance loses its
allocation before its requests, so a leak is acted on only when the passes have
seen it for ``grace`` seconds, in two passes at least, without a break: a leak is
freed (or, when freeing is off, reported) at the latest ``grace + 2 * interval``
seconds after it appears. What is found is logged, and answered by
``POST /v2/placement/reconcile`` (2.9; ``acceleron placement reconcile``).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import select

from acceleron.db.models import PlacementProvider, table
from acceleron.db.session import Database
from acceleron.exceptions import AcceleronError, PlacementProviderNotFound
from acceleron.placement.client import PlacementClient
from acceleron.service import arqs

LOG = logging.getLogger(__name__)
PROVIDERS = table(PlacementProvider)
Allocations = Mapping[str, Mapping[str, int]]  # provider uuid -> class -> amount


@dataclasses.dataclass(frozen=True)
class Leak:
    """One leak, and what this pass did about it."""

    kind: str  # allocation or request
    consumer: str
    allocations: Allocations  # Acceleron's part of the consumer's (kind allocation)
    requests: tuple[str, ...]  # the requests holding handles (kind request)
    seen_for: float  # seconds the passes have seen it without a break
    action: str  # waiting, would free, freed, released, reported, or failed: why


class Reconciler:
    """Finds the leaks and frees those that have lasted; passes take turns."""

    def __init__(
        self, db: Database, client_factory: Callable[[], PlacementClient], grace: float
    ) -> None:
        self.db = db
        self._new_client = client_factory
        self.grace = grace
        # (kind, consumer) -> when a pass first saw it (monotonic), and in how many passes
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}
        self._lock = threading.Lock()

    def run(self, *, free: bool = True, dry_run: bool = False) -> list[Leak]:
        """One pass: the leaks found, each with what was done. ``free`` False only
        reports them; ``dry_run`` changes nothing (and says what would be freed)."""
        with self._lock:
            client = self._new_client()
            holders = arqs.holding(self.db)
            found = [*self._allocations(client, holders), *self._requests(client, holders)]
            return [self._act(client, leak, free, dry_run) for leak in self._aged(found)]

    # --- finding -----------------------------------------------------------------------

    def _allocations(self, client: PlacementClient, holders: Mapping[str, Any]) -> list[Leak]:
        """Consumers holding Acceleron's resources with no request holding a handle."""
        with self.db.reader() as conn:
            providers = list(conn.execute(select(PROVIDERS.c.uuid, PROVIDERS.c.owned)))
        held: dict[str, dict[str, dict[str, int]]] = {}
        for provider in providers:
            try:
                allocations = client.get_allocations(provider.uuid)
            except PlacementProviderNotFound:
                continue  # gone meanwhile: the next sync notices
            owned = (provider.owned or {}).get("classes")  # flat mode: only these are ours
            for consumer, resources in allocations.items():
                ours = {rc: n for rc, n in resources.items() if owned is None or rc in owned}
                if ours and consumer not in holders:
                    held.setdefault(consumer, {})[provider.uuid] = ours
        return [_leak("allocation", consumer, mine) for consumer, mine in held.items()]

    def _requests(self, client: PlacementClient, holders: Mapping[str, list[str]]) -> list[Leak]:
        """Requests holding handles for consumers without any allocation."""
        return [
            _leak("request", consumer, requests=tuple(uuids))
            for consumer, uuids in holders.items()
            if not client.get_consumer(consumer).allocations
        ]

    def _aged(self, found: list[Leak]) -> list[Leak]:
        """The leaks with how long they have been seen; a leak not seen again is forgotten."""
        now = time.monotonic()
        keys = {(leak.kind, leak.consumer) for leak in found}
        seen = {k: v for k, v in self._seen.items() if k in keys}
        aged = []
        for leak in found:
            key = (leak.kind, leak.consumer)
            first, passes = seen.get(key, (now, 0))
            seen[key] = (first, passes + 1)
            aged.append(dataclasses.replace(leak, seen_for=round(now - first, 1)))
        self._seen = seen
        return aged

    def _due(self, leak: Leak) -> bool:
        """Seen in two passes at least, for ``grace`` seconds at least."""
        _, passes = self._seen.get((leak.kind, leak.consumer), (0.0, 0))
        return passes >= 2 and leak.seen_for >= self.grace

    # --- acting --------------------------------------------------------------------------

    def _act(self, client: PlacementClient, leak: Leak, free: bool, dry_run: bool) -> Leak:
        if not self._due(leak):
            return dataclasses.replace(leak, action="waiting")
        if dry_run:
            return dataclasses.replace(leak, action="would free")
        if not free:
            LOG.warning("Leak found (freeing is off): %s", describe(leak))
            return dataclasses.replace(leak, action="reported")
        try:
            action = self._free(client, leak)
        except AcceleronError as error:
            LOG.error("Could not free %s: %s", describe(leak), error.message)
            return dataclasses.replace(leak, action=f"failed: {error.message}")
        LOG.warning("%s %s", action.capitalize(), describe(leak))
        self._seen.pop((leak.kind, leak.consumer), None)
        return dataclasses.replace(leak, action=action)

    def _free(self, client: PlacementClient, leak: Leak) -> str:
        if leak.kind == "request":
            reason = (f"released by the reconciler: consumer {leak.consumer} holds no "
                      f"allocation in Placement any more")  # fmt: skip
            released = arqs.release_orphans(self.db, leak.consumer, leak.requests, reason)
            return "released" if released else "gone meanwhile"
        if leak.consumer in arqs.holding(self.db):  # bound since the pass looked
            return "bound meanwhile"
        consumer = client.get_consumer(leak.consumer)
        kept = {rp: _without(resources, leak.allocations.get(rp, {}))
                for rp, resources in consumer.allocations.items()}  # fmt: skip
        kept = {rp: left for rp, left in kept.items() if left}
        client.replace_allocations(leak.consumer, consumer, kept)
        return "freed"


def _without(resources: Mapping[str, int], ours: Mapping[str, int]) -> dict[str, int]:
    return {rc: n for rc, n in resources.items() if rc not in ours}


def _leak(
    kind: str, consumer: str, allocations: Allocations | None = None, requests: tuple[str, ...] = ()
) -> Leak:
    return Leak(kind, consumer, allocations or {}, requests, seen_for=0.0, action="")


def describe(leak: Leak) -> str:
    if leak.kind == "request":
        return (f"request(s) {', '.join(leak.requests)} bound for consumer {leak.consumer}, "
                f"which holds no allocation")  # fmt: skip
    held = "; ".join(
        f"{rp}: {', '.join(f'{rc}={n}' for rc, n in sorted(r.items()))}"
        for rp, r in sorted(leak.allocations.items())
    )
    return f"allocation of consumer {leak.consumer} that no request holds ({held})"
