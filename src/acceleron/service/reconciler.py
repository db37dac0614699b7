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
seen it for ``grace`` seconds, in two passes at least, without a break. What is found
is logged, and answered by ``POST /v2/placement/reconcile`` (2.9; ``acceleron
placement reconcile``), which is a pass over every host (one listing of the providers).

The API's periodic passes each read a slice of the hosts (``tick`` of ``ticks``, by
the hash of the host's name the sync's verification spreads its hosts by,
``publish.verify_slice``): the tree of each host's compute node (one small GET), that
host's providers, its requests. The ticks are spread over ``[reconciler] interval``, so
each host is read once an interval and a pass costs the same however large the region
is. A leak is first seen at most one interval after it appears, then once an interval:
it is freed (or, when freeing is off, reported) at the latest ``interval * (1 + max(1,
ceil(grace / interval)))`` seconds after it appears, never later than ``grace + 2 *
interval``, while the ticks keep their pace (Placement answering).

Each pass first ends the server-side claims whose actor's lease has passed
(``claims.recover``: kind ``claim``), so that what they held is freed at once rather
than found as leaks later.

A pass also notices providers someone else changed in Placement (a trait or an
inventory deleted by hand): of the providers it read whose generation moved since the
sync recorded it, each is read (inventories and traits) and compared with what the sync
wrote (its digest), the two reads at one generation (read again when a claim or a boot
allocated on it between them). Only allocations moved it: the new generation is
recorded. Its content differs: its host is marked not synced (``placement_synced``
false) for the sync's next pass to repair, rather than at its periodic verification of
every host (``drifted``).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from sqlalchemy import select, update

from acceleron.db.models import AcceleratorRequest, Host, PlacementProvider, table
from acceleron.db.session import Database, retry_on_deadlock
from acceleron.exceptions import AcceleronError, PlacementProviderNotFound
from acceleron.placement import sync, tree
from acceleron.placement.client import Inventory, PlacementClient, Provider
from acceleron.service import arqs, claims, cleaning
from acceleron.service.publish import Syncer, verify_slice

LOG = logging.getLogger(__name__)
PROVIDERS, HOSTS, ARQS = table(PlacementProvider), table(Host), table(AcceleratorRequest)
Allocations = Mapping[str, Mapping[str, int]]  # provider uuid -> class -> amount
Read = dict[str, tuple[int, Allocations]]  # provider uuid -> generation, allocations
READS = 3  # a moved provider's inventories and traits read again, at most, to agree


@dataclasses.dataclass(frozen=True)
class Leak:
    """One leak, and what this pass did about it."""

    kind: str  # allocation, request or claim
    consumer: str
    allocations: Allocations  # Acceleron's part of the consumer's (kind allocation), or
    # what the claim allocated (kind claim)
    requests: tuple[str, ...]  # the requests holding handles (kind request), or that the
    # claim created (kind claim)
    seen_for: float  # seconds the passes have seen it without a break (kind claim:
    # since the claim last moved)
    action: str  # waiting, would free, freed, released, reported, or failed: why; kind
    # claim: undone, released, would undo, would release, gone meanwhile
    hosts: frozenset[str] = frozenset()  # the hosts of the providers or requests found


class Reconciler:
    """Finds the leaks and frees those that have lasted; passes take turns."""

    def __init__(
        self,
        db: Database,
        client_factory: Callable[[], PlacementClient],
        grace: float,
        claim_timeout: float = claims.TIMEOUT,
        policy: cleaning.Policy = cleaning.DEFAULT,
        verifier: Callable[[], Syncer] | None = None,
    ) -> None:
        self.db = db
        # The periodic passes verify the hosts they read (the sync's verification, from
        # the trees read here: one read of a host serves both).
        self.verifier = verifier
        self._new_client = client_factory
        self.grace = grace
        self.claim_timeout = claim_timeout
        self.policy = policy  # how a handle it frees is cleaned
        # (kind, consumer) -> when a pass first saw it (monotonic), in how many passes,
        # and on which hosts the last passes that read them saw it
        self._sightings: dict[tuple[str, str], tuple[float, int, frozenset[str]]] = {}
        self._lock = threading.Lock()
        # host -> its providers' generations and allocations, as the last pass read them
        self._read: dict[str, Read] = {}
        # The hosts the last pass found changed in Placement behind the sync's back.
        self.drifted: list[str] = []

    def run(
        self,
        *,
        free: bool = True,
        dry_run: bool = False,
        tick: int = 0,
        ticks: int = 1,
        now: float | None = None,
        verify: bool = False,
    ) -> list[Leak]:
        """One pass: the leaks found, each with what was done. ``free`` False only
        reports them; ``dry_run`` changes nothing (and says what would be freed).
        ``verify``: the pass also verifies each host it read for the sync
        (``Syncer.verify_read``, from the tree read here; the API's periodic passes).

        ``ticks`` 1 (the default): every host, from one listing of the providers;
        otherwise only the hosts of slice ``tick`` of ``ticks`` (``verify_slice``), each
        host's tree read on its own. ``now``: the pass's time (``time.monotonic``; the
        periodic passes give the time their tick was due, so that a host's passes are
        an interval apart even when one of them started late)."""
        with self._lock:
            moment = time.monotonic() if now is None else now
            client = self._new_client()
            recovered = self._claims(client, dry_run)
            hosts = self._hosts(tick, ticks)
            if ticks <= 1:
                listing = client.list_providers()
                trees = _by_tree(hosts, listing)
            else:
                trees = self._trees(client, hosts)
                listing = [p for _, tree_read in trees.values() for p in tree_read]
            covered = None if ticks <= 1 else frozenset(hosts)
            self.drifted = self._drift(client, listing, covered, dry_run)
            found = [
                *self._allocations(client, listing, covered),
                *self._requests(client, covered),
            ]
            leaks = [
                *recovered,
                *(
                    self._act(client, leak, free, dry_run)
                    for leak in self._aged(found, covered, moment)
                ),
            ]
            if verify and self.verifier is not None and not dry_run:
                verifying = self.verifier()
                for host, (compute, tree_read) in trees.items():
                    verifying.verify_read(host, compute, tree_read)
            return leaks

    def claims(self, *, dry_run: bool = False) -> list[Leak]:
        """Only the claims whose actor's lease passed, ended (the API's start)."""
        with self._lock:
            return self._claims(self._new_client(), dry_run)

    def _claims(self, client: PlacementClient, dry_run: bool) -> list[Leak]:
        """Claims are Acceleron's own work: finished whatever ``free`` says."""
        return [
            Leak("claim", c.consumer, c.allocations, c.requests, c.age, c.action)
            for c in claims.recover(
                self.db, client, self.claim_timeout, dry_run=dry_run, policy=self.policy
            )
        ]

    # --- finding -----------------------------------------------------------------------

    def _hosts(self, tick: int, ticks: int) -> dict[str, str | None]:
        """The hosts this pass reads (every host with ``ticks`` 1), each with its compute
        node's uuid; what earlier passes read of hosts gone since is forgotten."""
        with self.db.reader() as conn:
            rows = conn.execute(select(HOSTS.c.hostname, HOSTS.c.rp_uuid))
            every: dict[str, str | None] = {row.hostname: row.rp_uuid for row in rows}
        self._read = {host: read for host, read in self._read.items() if host in every}
        if ticks <= 1:
            return every
        return {host: every[host] for host in verify_slice(every, tick, ticks)}

    @staticmethod
    def _trees(
        client: PlacementClient, hosts: Mapping[str, str | None]
    ) -> dict[str, tuple[str, list[Provider]]]:
        """The tree of each of ``hosts``' compute nodes as Placement has it (a small GET
        each), by host, with its compute node."""
        return {host: (node, client.get_tree(node)) for host, node in hosts.items() if node}

    def _drift(
        self,
        client: PlacementClient,
        listing: Sequence[Provider],
        covered: frozenset[str] | None,
        dry_run: bool,
    ) -> list[str]:
        """The hosts (of those ``covered``; None: every host) one of whose providers
        Placement holds otherwise than the sync wrote it; marked not synced (the sync's
        next pass repairs them)."""
        now = {p.uuid: p for p in listing}
        query = select(PROVIDERS).where(
            PROVIDERS.c.retired.is_(False), PROVIDERS.c.digest != sync.UNSETTLED
        )
        if covered is not None:
            query = query.where(PROVIDERS.c.hostname.in_(sorted(covered)))
        with self.db.reader() as conn:
            rows = conn.execute(query).all() if covered is None or covered else []
        drifted: set[str] = set()
        for row in rows:
            actual = now.get(row.uuid)
            if actual is None or actual.generation == row.generation or row.hostname in drifted:
                continue  # one gone: the next sync notices
            try:
                found = _read_at_one_generation(client, row.uuid)
            except PlacementProviderNotFound:
                continue
            if found is None:  # allocated on between each two reads: the next pass looks
                continue
            read, inventories, traits = found
            if _digest(actual, inventories, traits, row.owned) != row.digest:
                drifted.add(row.hostname)
            elif not dry_run:  # only allocations moved it: as the sync would record it
                with self.db.writer() as conn:
                    conn.execute(
                        update(PROVIDERS)
                        .where(
                            PROVIDERS.c.uuid == row.uuid,
                            PROVIDERS.c.generation == row.generation,
                            PROVIDERS.c.digest == row.digest,
                        )
                        .values(generation=read)
                    )
        if drifted:
            LOG.warning(
                "Placement holds providers of %s otherwise than Acceleron wrote them: "
                "marked not synced",
                ", ".join(sorted(drifted)),
            )
            if not dry_run:
                with self.db.writer() as conn:
                    conn.execute(
                        update(HOSTS)
                        .where(HOSTS.c.hostname.in_(drifted))
                        .values(synced_generation=-1)
                    )
        return sorted(drifted)

    def _allocations(
        self,
        client: PlacementClient,
        listing: Sequence[Provider],
        covered: frozenset[str] | None,
    ) -> list[Leak]:
        """Consumers holding Acceleron's resources with no request holding a handle:
        those the allocations of the providers read name, each read again as Placement
        has it (all of Acceleron's part, on whichever host)."""
        owned = _providers(self.db, hosts=covered)
        suspects = self._suspects(client, owned, listing, covered)
        holders = holding(self.db, consumers=None if covered is None else suspects)
        leaks = []
        for consumer in sorted(suspects - holders.keys()):
            held = client.get_consumer(consumer).allocations
            owned.update(_providers(self.db, uuids=held.keys() - owned.keys()))
            mine = {rp: _ours(r, owned[rp][1]) for rp, r in held.items() if rp in owned}
            mine = {rp: r for rp, r in mine.items() if r}
            if mine:
                seen = frozenset(owned[rp][0] for rp in mine)
                leaks.append(_leak("allocation", consumer, mine, hosts=seen))
        return leaks

    def _suspects(
        self,
        client: PlacementClient,
        owned: Mapping[str, tuple[str, Any]],
        listing: Sequence[Provider],
        covered: frozenset[str] | None,
    ) -> set[str]:
        """The consumers the allocations of Acceleron's providers read name (of the
        hosts ``covered``; None: every host).

        Placement bumps a provider's generation when an allocation is written on it, so
        a provider whose generation has not moved since the last pass is not read again:
        a pass over a quiet cloud is its listing, not a call per provider (17,000 at
        1,000 hosts). Dropping a consumer's allocations bumps nothing: what was read
        before may name consumers gone since (``_allocations`` reads each again)."""
        generations = {p.uuid: p.generation for p in listing}
        read: dict[str, Read] = {}
        for uuid in owned.keys() & generations.keys():  # one gone: the next sync notices
            host, _ = owned[uuid]
            before = self._read.get(host, {}).get(uuid)
            if before is None or before[0] != generations[uuid]:
                try:
                    allocations = client.get_allocations(uuid)
                except PlacementProviderNotFound:
                    continue
                generation = client.generation(uuid)  # as read with the allocations
                before = (generations[uuid] if generation is None else generation, allocations)
            read.setdefault(host, {})[uuid] = before
        if covered is None:
            self._read = read
        else:
            self._read = {h: r for h, r in self._read.items() if h not in covered} | read
        return {
            consumer
            for mine in read.values()
            for uuid, (_, allocations) in mine.items()
            for consumer, resources in allocations.items()
            if _ours(resources, owned[uuid][1])
        }

    def _requests(self, client: PlacementClient, covered: frozenset[str] | None) -> list[Leak]:
        """Requests (bound on the hosts ``covered``; None: every request) holding
        handles for consumers without any allocation."""
        return [
            _leak("request", consumer, requests=tuple(u for u, _ in held), hosts=hosts)
            for consumer, held in _holding_on(self.db, covered).items()
            if not client.get_consumer(consumer).allocations
            for hosts in [frozenset(h for _, h in held if h)]
        ]

    def _aged(self, found: list[Leak], covered: frozenset[str] | None, now: float) -> list[Leak]:
        """The leaks with how long they have been seen. A leak seen before that this
        pass did not find is forgotten once no host is left where it was seen and this
        pass did not read (a pass over every host: forgotten at once)."""

        def unread(hosts: frozenset[str]) -> frozenset[str]:
            return frozenset() if covered is None else hosts - covered

        keys = {(leak.kind, leak.consumer) for leak in found}
        seen = {}
        for key, (first, passes, hosts) in self._sightings.items():
            if key in keys or unread(hosts):
                seen[key] = (first, passes, hosts if key in keys else unread(hosts))
        aged = []
        for leak in found:
            key = (leak.kind, leak.consumer)
            first, passes, hosts = seen.get(key, (now, 0, frozenset()))
            here = leak.hosts if covered is None else leak.hosts & covered
            seen[key] = (first, passes + 1, unread(hosts) | here)
            aged.append(dataclasses.replace(leak, seen_for=round(now - first, 1)))
        self._sightings = seen
        return aged

    def _due(self, leak: Leak) -> bool:
        """Seen in two passes at least, for ``grace`` seconds at least."""
        _, passes, _ = self._sightings.get((leak.kind, leak.consumer), (0.0, 0, frozenset()))
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
        self._sightings.pop((leak.kind, leak.consumer), None)
        return dataclasses.replace(leak, action=action)

    def _free(self, client: PlacementClient, leak: Leak) -> str:
        if leak.kind == "request":
            reason = (
                f"released by the reconciler: consumer {leak.consumer} holds no "
                f"allocation in Placement any more"
            )
            released = release_orphans(self.db, leak.consumer, leak.requests, reason, self.policy)
            return "released" if released else "gone meanwhile"
        if holding(self.db, consumers=[leak.consumer]):  # bound since the pass looked
            return "bound meanwhile"
        consumer = client.get_consumer(leak.consumer)
        kept = {
            rp: _without(resources, leak.allocations.get(rp, {}))
            for rp, resources in consumer.allocations.items()
        }
        kept = {rp: left for rp, left in kept.items() if left}
        client.replace_allocations(leak.consumer, consumer, kept)
        return "freed"


def _read_at_one_generation(
    client: PlacementClient, uuid: str
) -> tuple[int, dict[str, Inventory], frozenset[str]] | None:
    """The provider's generation, inventories and traits, read at one generation; None
    when it moved between the two reads each time (a claim or a boot allocating on it:
    no sign of drift)."""
    for _ in range(READS):
        generation, inventories = client.get_inventories(uuid)
        read, traits = client.get_traits(uuid)
        if read == generation:
            return generation, inventories, traits
    return None


# --- the requests: which hold handles, and releasing those of a consumer gone ----------


def holding(db: Database, consumers: Collection[str] | None = None) -> dict[str, list[str]]:
    """The consumers (instances) requests hold handles for, each with those requests (of
    ``consumers`` only, when given)."""
    query = select(ARQS.c.instance_uuid, ARQS.c.uuid).where(
        ARQS.c.state.in_(arqs.HOLDING), ARQS.c.instance_uuid.is_not(None)
    )
    if consumers is not None:
        if not consumers:
            return {}
        query = query.where(ARQS.c.instance_uuid.in_(sorted(consumers)))
    found: dict[str, list[str]] = {}
    with db.reader() as conn:
        for row in conn.execute(query.order_by(ARQS.c.id)):
            found.setdefault(row.instance_uuid, []).append(row.uuid)
    return found


def _holding_on(
    db: Database, hosts: Collection[str] | None
) -> dict[str, list[tuple[str, str | None]]]:
    """The consumers requests bound on ``hosts`` (None: anywhere) hold handles for,
    each with those requests and their hosts."""
    query = select(ARQS.c.instance_uuid, ARQS.c.uuid, ARQS.c.hostname).where(
        ARQS.c.state.in_(arqs.HOLDING), ARQS.c.instance_uuid.is_not(None)
    )
    if hosts is not None:
        if not hosts:
            return {}
        query = query.where(ARQS.c.hostname.in_(sorted(hosts)))
    found: dict[str, list[tuple[str, str | None]]] = {}
    with db.reader() as conn:
        for row in conn.execute(query.order_by(ARQS.c.id)):
            found.setdefault(row.instance_uuid, []).append((row.uuid, row.hostname))
    return found


def _providers(
    db: Database, *, hosts: Collection[str] | None = None, uuids: Collection[str] | None = None
) -> dict[str, tuple[str, Any]]:
    """Acceleron's providers (of ``hosts``, or of ``uuids``; neither: every one), each
    with its host and what it owns on a compute node in flat mode."""
    query = select(PROVIDERS.c.uuid, PROVIDERS.c.hostname, PROVIDERS.c.owned)
    for column, values in ((PROVIDERS.c.hostname, hosts), (PROVIDERS.c.uuid, uuids)):
        if values is not None:
            if not values:
                return {}
            query = query.where(column.in_(sorted(values)))
    with db.reader() as conn:
        return {row.uuid: (row.hostname, row.owned) for row in conn.execute(query)}


@retry_on_deadlock
def release_orphans(
    db: Database,
    consumer: str,
    uuids: Sequence[str],
    reason: str,
    policy: cleaning.Policy = cleaning.DEFAULT,
) -> list[str]:
    """Unbind those of ``uuids`` still holding a handle for ``consumer`` (a consumer that
    holds no allocation any more), ``reason`` recorded, their handles cleaned as
    ``policy`` says; the ones released."""
    with db.writer() as conn:
        rows = arqs.lock(
            conn,
            ARQS.c.uuid.in_(uuids)
            & (ARQS.c.instance_uuid == consumer)
            & ARQS.c.state.in_(arqs.HOLDING),
        )
        for arq in rows:
            arqs.release(conn, arq, reason, policy)
            LOG.warning("Released %s of %s: %s", arq.uuid, consumer, reason)
    return [arq.uuid for arq in rows]


def _digest(
    actual: Provider,
    inventories: Mapping[str, Inventory],
    traits: frozenset[str],
    owned: Mapping[str, Any] | None,
) -> str:
    """What the sync's digest of a provider would be for what Placement holds: all of
    it, or on a compute node in flat mode, Acceleron's classes and traits there."""
    if not owned:
        return tree.DesiredProvider("", "", actual.parent_uuid, inventories, traits).digest()
    classes, mine = set(owned.get("classes", ())), set(owned.get("traits", ()))
    ours = {rc: inv for rc, inv in inventories.items() if rc in classes}
    return sync.flat_digest(ours, frozenset(traits & mine))


def _ours(resources: Mapping[str, int], owned: Mapping[str, Any] | None) -> dict[str, int]:
    """Acceleron's part of a consumer's resources on one of its providers: all of them,
    or on a compute node in flat mode, the classes Acceleron put there."""
    classes = (owned or {}).get("classes")
    return {rc: n for rc, n in resources.items() if classes is None or rc in classes}


def _without(resources: Mapping[str, int], ours: Mapping[str, int]) -> dict[str, int]:
    return {rc: n for rc, n in resources.items() if rc not in ours}


def _leak(
    kind: str,
    consumer: str,
    allocations: Allocations | None = None,
    requests: tuple[str, ...] = (),
    hosts: frozenset[str] = frozenset(),
) -> Leak:
    return Leak(kind, consumer, allocations or {}, requests, 0.0, "", hosts)


def describe(leak: Leak) -> str:
    if leak.kind == "claim":
        return f"claim of consumer {leak.consumer}, whose maker is gone"
    if leak.kind == "request":
        return (
            f"request(s) {', '.join(leak.requests)} bound for consumer {leak.consumer}, "
            f"which holds no allocation"
        )
    held = "; ".join(
        f"{rp}: {', '.join(f'{rc}={n}' for rc, n in sorted(r.items()))}"
        for rp, r in sorted(leak.allocations.items())
    )
    return f"allocation of consumer {leak.consumer} that no request holds ({held})"


def _by_tree(
    hosts: Mapping[str, str | None], listing: Sequence[Provider]
) -> dict[str, tuple[str, list[Provider]]]:
    """The providers of one listing in the tree of each of ``hosts``' compute nodes, by
    host, with its compute node."""
    found: dict[str, list[Provider]] = {node: [] for node in hosts.values() if node}
    for provider in listing:
        if provider.root_uuid in found:
            found[provider.root_uuid].append(provider)
    return {host: (node, found[node]) for host, node in hosts.items() if node}
