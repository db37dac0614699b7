"""Placement sync: the inventory of each host, published as resource providers.

``Syncer.sync_host`` reads a host's inventory and what Acceleron last wrote to
Placement, lets ``placement.sync`` bring Placement to the desired tree, and
records the outcome. A host whose inventory did not change since its last sync
(``hosts.generation == hosts.synced_generation``) costs no Placement call at all.
``Syncer.sync_pending`` syncs the hosts that changed, several at once with the syncers
it is given (``[placement] sync_threads``); the API runs it after each changed report
and periodically, and when Placement is unreachable the hosts simply stay pending until
it answers again: nothing is lost. Two syncs of one process never take one host at
once (``HostLocks``), nor do two processes (``hosts.sync_owner``).

``placement.sync`` knows Placement only (``placement/`` reads no database); this
module reads and records Acceleron's side. The configuration and the host checks are
``service.placement.PlacementService``; the thread that runs the passes is
``api.workers.SyncWorker``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import queue
import threading
import uuid as uuidlib
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sqlalchemy import Connection, Row, bindparam, delete, func, insert, or_, select, update

from acceleron.db.clock import clock
from acceleron.db.models import (
    AcceleratorRequest,
    AttachHandle,
    Deployable,
    Device,
    DeviceProfile,
    Host,
    PlacementProvider,
    table,
    utcnow,
)
from acceleron.db.session import Database
from acceleron.exceptions import (
    AcceleronError,
    DatabaseBusy,
    DatabaseUnavailable,
    InvalidPlacementName,
    NotFound,
    PlacementError,
    PlacementProviderNotFound,
    PlacementUnavailable,
    UnknownHost,
)
from acceleron.mig import units
from acceleron.placement import names, tree
from acceleron.placement.client import PlacementClient, Provider
from acceleron.placement.sync import (
    UNSETTLED,
    Action,
    Known,
    finish,
    remove_flat,
    sync_flat,
    sync_tree,
)
from acceleron.placement.sync import Result as SyncResult
from acceleron.service import claim_view
from acceleron.vocabulary import UNHEALTHY

LOG = logging.getLogger(__name__)
HOSTS, DEVICES, DEPLOYABLES = table(Host), table(Device), table(Deployable)
PROVIDERS = table(PlacementProvider)
HOST = select(HOSTS).where(HOSTS.c.hostname == bindparam("host"))
_DEVICES = (
    select(DEVICES).where(DEVICES.c.hostname == bindparam("host")).order_by(DEVICES.c.pci_address)
)
_DEPLOYABLES = (
    select(DEPLOYABLES)
    .join(DEVICES, DEPLOYABLES.c.device_id == DEVICES.c.id)
    .where(DEVICES.c.hostname == bindparam("host"))
    .order_by(DEPLOYABLES.c.id)
)
_KNOWN = select(PROVIDERS).where(PROVIDERS.c.hostname == bindparam("host"))
HANDLES, ARQS = table(AttachHandle), table(AcceleratorRequest)
# What requests hold on a host, by deployable and by the provider they were allocated on.
_HELD = (
    select(HANDLES.c.deployable_id, ARQS.c.device_rp_uuid, func.count())
    .join(ARQS, ARQS.c.id == HANDLES.c.arq_id)
    .join(DEPLOYABLES, DEPLOYABLES.c.id == HANDLES.c.deployable_id)
    .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
    .where(DEVICES.c.hostname == bindparam("host"), ARQS.c.device_rp_uuid.is_not(None))
    .group_by(HANDLES.c.deployable_id, ARQS.c.device_rp_uuid)
)


# The slots of a host's partitionable GPUs that no request holds and that take units:
# those holding an instance (found there, or given back and not destroyed yet), and
# unhealthy ones (a slot whose instance failed: its instance unit, and its slices while
# the instance is there) (acceleron.mig.units).
_UNHELD_MIG = (
    select(HANDLES.c.deployable_id, HANDLES.c.attach_info)
    .join(DEPLOYABLES, DEPLOYABLES.c.id == HANDLES.c.deployable_id)
    .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
    .where(
        DEVICES.c.hostname == bindparam("host"),
        DEPLOYABLES.c.kind == units.KIND,
        HANDLES.c.host_in_use.is_(True) | (HANDLES.c.health == UNHEALTHY),
        HANDLES.c.arq_id.is_(None),
    )
)


def mig_taken(conn: Connection, hostname: str) -> dict[int, units.Taken]:
    """By partitionable GPU of the host, the units its slots that no request holds take
    (``_UNHELD_MIG``): what its provider reserves."""
    infos: dict[int, list[dict[str, Any]]] = {}
    for dep, info in conn.execute(_UNHELD_MIG, {"host": hostname}):
        infos.setdefault(int(dep), []).append(dict(info or {}))
    return {dep: units.taken(found) for dep, found in infos.items()}


def held_through(conn: Connection, hostname: str) -> dict[int, dict[str, int]]:
    """By deployable of the host, how many of its units requests hold through each
    provider (the one Placement allocated them on): what a pool reserves or counts."""
    found: dict[int, dict[str, int]] = {}
    for dep, rp, count in conn.execute(_HELD, {"host": hostname}):
        found.setdefault(int(dep), {})[str(rp)] = int(count)
    return found


_PENDING = select(HOSTS.c.hostname).where(HOSTS.c.generation != HOSTS.c.synced_generation)
_TAKE = update(HOSTS).where(
    HOSTS.c.hostname == bindparam("host"),
    HOSTS.c.generation != HOSTS.c.synced_generation,
    or_(HOSTS.c.sync_until.is_(None), HOSTS.c.sync_until <= clock()),
)
_GIVE_BACK = (
    update(HOSTS)
    .where(HOSTS.c.hostname == bindparam("host"), HOSTS.c.sync_owner == bindparam("mine"))
    .values(sync_owner=None, sync_until=None)
)


@dataclasses.dataclass(frozen=True)
class HostSync:
    """What one host's sync did (or, in a dry run, would do)."""

    hostname: str
    actions: list[Action]
    skipped: bool = False  # nothing changed since the last sync: no Placement call
    errors: list[str] = dataclasses.field(default_factory=list)


class HostLocks:
    """A lock per host name, for the syncs of one process (the sync threads' passes, the
    verification, an operator's request): one host is synced by one at a time."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._held: dict[str, tuple[threading.Lock, int]] = {}  # the lock, its users

    @contextlib.contextmanager
    def hold(self, hostname: str) -> Iterator[None]:
        with self._mutex:
            lock, users = self._held.get(hostname, (threading.Lock(), 0))
            self._held[hostname] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._mutex:
                lock, users = self._held[hostname]
                if users == 1:
                    del self._held[hostname]
                else:
                    self._held[hostname] = (lock, users - 1)


class Syncer:
    """Syncs hosts through one Placement client (a client is not thread-safe)."""

    def __init__(
        self,
        db: Database,
        client_factory: Callable[[], PlacementClient],
        options: tree.Options,
        *,
        create_compute_nodes: bool = False,
        locks: HostLocks | None = None,
        pools: Callable[[], bool] | None = None,
        keep_pools: bool = False,
        retire_after: float = 0.0,
        sync_lease: float = 60.0,
    ) -> None:
        self.db = db
        # Seconds this process holds a host it publishes ([placement] sync_lease).
        self.sync_lease = sync_lease
        # Seconds a provider no longer wanted is kept out of its tree before deletion.
        self.retire_after = retire_after
        self.client = client_factory()
        self.options = options
        # Whether pools are published now ([placement] pools = auto asks the schema).
        self.pools = pools
        # Whether a host published in pools stays so (auto: the switch is one way).
        self.keep_pools = keep_pools
        # The syncs of one process (its sync threads, an operator's request): one at a
        # time on a host.
        self.locks = locks or HostLocks()
        # The embedded mode has no Nova: it creates the compute node providers itself.
        self.create_compute_nodes = create_compute_nodes

    def sync_pending(self, others: Sequence[Syncer] = ()) -> list[HostSync]:
        """Sync the hosts whose inventory changed since their last sync, each taken by
        this process first (``hosts.sync_owner``, a lease of ``sync_lease`` seconds in
        the database's time): a host another API process is publishing is left to it,
        and taken over once its lease has passed (that process stopped). The
        verification and the operator's syncs (``sync_all``, ``sync_host``) take none.
        ``others``: syncers of this process that take hosts beside this one, each in a
        thread of its own (a first publication waits on Placement more than it works).
        Placement unreachable (or any failure a host's sync does not own) ends the pass:
        the hosts left stay pending."""
        with self.db.reader() as conn:
            hosts = list(conn.execute(_PENDING).scalars())
        if not others or len(hosts) < 2:
            return [done for host in hosts if (done := self._sync_taken(host)) is not None]
        free: queue.SimpleQueue[Syncer] = queue.SimpleQueue()
        for syncer in (self, *others):
            free.put(syncer)
        stopped = threading.Event()

        def one(hostname: str) -> HostSync | None:
            if stopped.is_set():
                return None
            syncer = free.get()
            try:
                return syncer._sync_taken(hostname)
            except BaseException:
                stopped.set()
                raise
            finally:
                free.put(syncer)

        threads = min(len(others) + 1, len(hosts))
        with ThreadPoolExecutor(threads, thread_name_prefix="placement-sync") as pool:
            futures = [pool.submit(one, host) for host in hosts]
        failed = [error for future in futures if (error := future.exception()) is not None]
        if failed:  # Placement away first: the sync thread backs off
            raise next((e for e in failed if isinstance(e, PlacementUnavailable)), failed[0])
        return [done for future in futures if (done := future.result()) is not None]

    def _sync_taken(self, hostname: str) -> HostSync | None:
        """``sync_host`` under the host's lease; None when another process holds it (or
        has just published it)."""
        mine = uuidlib.uuid4().hex
        with self.db.writer() as conn:
            taken = conn.execute(
                _TAKE.values(sync_owner=mine, sync_until=clock(self.sync_lease)), {"host": hostname}
            ).rowcount
        if taken != 1:
            return None
        try:
            return self._guarded(hostname, self.sync_host)
        finally:
            try:
                with self.db.writer() as conn:
                    conn.execute(_GIVE_BACK, {"host": hostname, "mine": mine})
            except (DatabaseBusy, DatabaseUnavailable) as error:  # it passes by itself
                LOG.warning("Cannot give back the sync lease of %s: %s", hostname, error)

    def hostnames(self) -> list[str]:
        with self.db.reader() as conn:
            return list(conn.execute(select(HOSTS.c.hostname).order_by(HOSTS.c.hostname)).scalars())

    def sync_all(self, *, dry_run: bool = False) -> list[HostSync]:
        """Check every host's providers against Placement (and repair them)."""
        return [
            self._guarded(host, lambda h: self.sync_host(h, force=True, dry_run=dry_run))
            for host in self.hostnames()
        ]

    def verify(self, hostnames: Iterable[str] | None = None) -> list[HostSync]:
        """The verification of ``hostnames`` (default: every host) where no reconciler
        runs, host by host: one small GET of the host's tree (``in_tree`` of its compute
        node) tells whether Placement holds it as its last sync recorded it (each
        provider there, under the same parent, at the generation recorded: Placement
        bumps it at every change, allocations included); the others are checked and
        repaired as ``sync_all`` checks every host. The checked hosts' outcomes. With a
        reconciler, its passes verify the hosts they read (``verify_read``)."""
        done = [self._guarded(host, self._verify_host) for host in self._names(hostnames)]
        return [result for result in done if not result.skipped]

    def verify_tick(self, tick: int, ticks: int) -> list[HostSync]:
        """The verification's ``tick``-th slice of hosts, when it is spread over
        ``ticks`` ticks (``verify_slice``): the sync thread runs one a tick, so that every
        host is verified once per ``[placement] verify_interval`` and Placement never
        serves one long request for it."""
        return self.verify(verify_slice(self.hostnames(), tick, ticks))

    def _names(self, hostnames: Iterable[str] | None) -> list[str]:
        return self.hostnames() if hostnames is None else sorted(hostnames)

    def verify_read(self, hostname: str, compute: str, read: Sequence[Provider]) -> HostSync:
        """One host of the verification, from the tree of its compute node ``compute`` as
        a reconciler pass just read it: what the verification does, without a read of
        its own. A provider's generation is left to that pass, which reads each one at
        another generation than recorded, records the moves of allocations alone and
        has the sync repair the rest (reading those again here would read twice the
        providers that claims and boots keep moving)."""
        check = functools.partial(self._verify_host, generations=False, given=(compute, read))
        return self._guarded(hostname, check)

    def _verify_host(
        self,
        hostname: str,
        generations: bool = True,
        given: tuple[str, Sequence[Provider]] | None = None,
    ) -> HostSync:
        """One host of a verification: skipped when Placement holds it as recorded (at
        the generations recorded, with ``generations``); otherwise checked in full from
        the tree just read (``given``: a compute node and its tree, read already)."""
        with self.db.reader() as conn:
            host = conn.execute(HOST, {"host": hostname}).first()
        if host is None:
            return HostSync(hostname, [], skipped=True)
        if not host.rp_uuid:
            return self.sync_host(hostname, force=True)
        if given is not None and given[0] == host.rp_uuid:
            read = given[1]
        else:  # empty when the compute node is gone
            read = self.client.get_tree(str(host.rp_uuid))
        # Synced by an earlier release, which recorded nothing for claims' views: again.
        unrecorded = (host.published or {}).get("generation") != host.synced_generation
        if not unrecorded and self._as_recorded(hostname, str(host.rp_uuid), read, generations):
            return HostSync(hostname, [], skipped=True)
        return self.sync_host(hostname, force=True, read=read)

    def _as_recorded(
        self, hostname: str, compute: str, read: Sequence[Provider], generations: bool
    ) -> bool:
        """Whether the tree of ``compute`` as ``read`` from Placement holds every
        provider of the host as its last sync recorded it."""
        actual = {p.uuid: p for p in read}
        with self.db.reader() as conn:
            recorded = conn.execute(_KNOWN, {"host": hostname}).all()
        return compute in actual and not any(
            _moved(r, actual.get(r.uuid), generations) for r in recorded
        )

    def migrate_to_nested(self, *, dry_run: bool = False) -> list[HostSync]:
        """Spec 001's upgrade from flat to nested providers, host by host: a host still
        in use keeps its flat inventory and gets its error, the others move."""
        return [
            self._guarded(host, lambda h: self._migrate(h, dry_run)) for host in self.hostnames()
        ]

    def _migrate(self, hostname: str, dry_run: bool) -> HostSync:
        removed = self.remove_flat(hostname, dry_run=dry_run)
        synced = self.sync_host(hostname, force=True, dry_run=dry_run)
        return HostSync(
            hostname, removed.actions + synced.actions, errors=removed.errors + synced.errors
        )

    def _guarded(self, hostname: str, work: Callable[[str], HostSync]) -> HostSync:
        """One host of a pass: its error is its own; Placement being away ends the pass."""
        try:
            with self.locks.hold(hostname):
                return work(hostname)
        except PlacementUnavailable:
            raise
        except AcceleronError as error:
            LOG.error("Placement sync of %s failed: %s", hostname, error.message)
            return HostSync(hostname, [], errors=[error.message])

    def sync_host(
        self,
        hostname: str,
        *,
        force: bool = False,
        dry_run: bool = False,
        read: Sequence[Provider] | None = None,
    ) -> HostSync:
        """Bring Placement up to date for one host. ``force`` checks even an unchanged
        host's providers (periodic verification); ``dry_run`` only plans; ``read``: the
        tree of its compute node as just read from Placement (nested providers)."""
        with self.db.reader() as conn:
            host = conn.execute(HOST, {"host": hostname}).first()
            if host is None:
                raise NotFound(f"Host {hostname!r} has never reported.")
            if host.generation == host.synced_generation and not (force or dry_run):
                return HostSync(hostname, [], skipped=True)
            devices = list(conn.execute(_DEVICES, {"host": hostname}))
            deployables = list(conn.execute(_DEPLOYABLES, {"host": hostname}))
            known = {row.uuid: _known(row) for row in conn.execute(_KNOWN, {"host": hostname})}
            maintained = any(tree.maintenance(d) is not None for d in devices) or any(
                d.status == tree.MAINTAINING for d in deployables
            )
            tolerated = tolerated_reasons(conn) if maintained else frozenset()
            # With pools = auto, a host published in pools stays so: an API process that
            # has not seen the switch yet must not publish it per device again meanwhile.
            pooled = self.options.nested and (
                self.options.pools
                or bool(self.pools and self.pools())
                or (self.keep_pools and any(k.owned.get("members") for k in known.values()))
            )
            held = held_through(conn, hostname) if pooled else {}
            partitioned = (
                mig_taken(conn, hostname) if any(d.kind == units.KIND for d in deployables) else {}
            )
        compute, created, root = self.compute_node(host, dry_run=dry_run)
        if read is None and root is not None and not known and not dry_run:
            # A host's first sync: its compute node just found, bare to us (a dry run
            # reads the tree: it makes no create that a refusal would correct).
            read = [root]
        if not dry_run:  # Acceleron's claims forbid it: Placement must know the name
            self.client.ensure_traits([names.MAINTENANCE])
        options = dataclasses.replace(
            self.options, tolerated=tolerated, pools=pooled, mig_taken=partitioned
        )
        try:
            result, errors, placed, desired = self._publish(
                hostname, compute, devices, deployables, known, dry_run, options, read, held
            )
        except PlacementProviderNotFound as error:
            self._recheck_compute_node(hostname, compute, error, dry_run)
            raise
        result.actions[:0] = created
        if not dry_run:
            # New pools are recorded (with their members) before they get their inventory:
            # a server Placement allocates on one finds its devices at bind. Until that
            # inventory is given, the host is not synced (a failure leaves it to redo).
            synced = -1 if result.deferred else host.generation
            seen = claim_view.published(host.generation, desired)
            self._record(hostname, synced, compute, result.known, errors, seen)
            _place(self.db, deployables, placed)
            if result.deferred:
                finish(self.client, compute, result)
                self._record(hostname, host.generation, compute, result.known, errors, seen)
        if result.actions and not dry_run:
            done = Counter(action.op for action in result.actions)
            LOG.info(
                "Published %s to Placement: %s",
                hostname,
                ", ".join(f"{op} {count}" for op, count in sorted(done.items())),
            )
        for action in result.actions:
            LOG.debug("Placement %s %s %s %s", action.op, action.name, action.uuid, action.detail)
        return HostSync(hostname, result.actions, errors=errors)

    def _publish(
        self,
        hostname: str,
        compute: str,
        devices: Sequence[Row[Any]],
        deployables: Sequence[Row[Any]],
        known: dict[str, Known],
        dry_run: bool,
        options: tree.Options,
        read: Sequence[Provider] | None = None,
        held: dict[int, dict[str, int]] | None = None,
    ) -> tuple[SyncResult, list[str], dict[int, str], list[tree.DesiredProvider]]:
        """The nested tree or the flat contribution, synced; the devices left out
        (``read``: the tree as just read, for the nested one); the provider of each
        deployable published in a nested tree (by id), and that tree."""
        if not options.nested:
            good, errors = _publishable(hostname, devices, deployables, options)
            flat = self._sync_flat(compute, good, deployables, known.get(compute), dry_run, options)
            return flat, errors, {}, []
        desired, errors = _desired(hostname, compute, devices, deployables, options, held)
        synced = sync_tree(
            self.client,
            compute,
            desired,
            known,
            dry_run=dry_run,
            read=read,
            defer_pools=True,
            retire_after=self.retire_after,
        )
        return synced, errors, _providers_of(hostname, devices, deployables, desired), desired

    def _recheck_compute_node(
        self, hostname: str, compute: str, error: PlacementError, dry_run: bool
    ) -> None:
        """After a provider was not found: if it is the compute node (Nova recreated it),
        forget its uuid and leave the host pending, to look it up by name next pass."""
        if dry_run or self.client.get_provider(compute) is not None:
            return
        LOG.warning(
            "Compute node provider %s of %s is gone from Placement (%s); looking it "
            "up again by name next pass",
            compute,
            hostname,
            error.message,
        )
        with self.db.writer() as conn:
            conn.execute(
                update(HOSTS)
                .where(HOSTS.c.hostname == hostname)
                .values(rp_uuid=None, synced_generation=-1)
            )

    def _sync_flat(
        self,
        compute: str,
        devices: Sequence[Row[Any]],
        deployables: Sequence[Row[Any]],
        known: Known | None,
        dry_run: bool,
        options: tree.Options,
    ) -> SyncResult:
        provider = self.client.get_provider(compute)
        if provider is None:
            raise PlacementProviderNotFound(
                f"Compute node provider {compute} vanished from Placement."
            )
        inventories, traits = tree.flat_contribution(devices, deployables, options)
        return sync_flat(self.client, provider, inventories, traits, known, dry_run=dry_run)

    def remove_flat(self, hostname: str, *, dry_run: bool = False) -> HostSync:
        """Spec 001's upgrade from flat to nested providers, for one host: take what flat
        mode put on the compute node off it (refused while instances still use it)."""
        with self.db.reader() as conn:
            host = conn.execute(HOST, {"host": hostname}).first()
            known = {row.uuid: _known(row) for row in conn.execute(_KNOWN, {"host": hostname})}
        if host is None:
            raise NotFound(f"Host {hostname!r} has never reported.")
        compute, _, _ = self.compute_node(host, dry_run=dry_run)
        record = known.get(compute)
        provider = self.client.get_provider(compute)
        if record is None or not record.owned or provider is None:
            return HostSync(hostname, [])
        actions = remove_flat(self.client, provider, record, dry_run=dry_run)
        if not dry_run:
            with self.db.writer() as conn:
                conn.execute(delete(PROVIDERS).where(PROVIDERS.c.uuid == compute))
                conn.execute(
                    update(HOSTS).where(HOSTS.c.hostname == hostname).values(synced_generation=-1)
                )
        return HostSync(hostname, actions)

    def compute_node(
        self, host: Row[Any], *, dry_run: bool = False
    ) -> tuple[str, list[Action], Provider | None]:
        """The uuid of the host's compute node provider (Nova's, found by its name), the
        action of creating it when the embedded mode must, and the provider when it was
        read or made just now (None when the host's record had its uuid)."""
        if host.rp_uuid:
            return str(host.rp_uuid), [], None
        found = self.client.find_provider(host.hostname)
        if found is not None:
            return found.uuid, [], found
        if not self.create_compute_nodes:
            raise UnknownHost(unknown_host_message(self.client, host.hostname))
        compute = str(uuidlib.uuid5(names.PROVIDER_NAMESPACE, f"compute-node\n{host.hostname}"))
        made = None if dry_run else self.client.create_provider(compute, host.hostname)
        return compute, [Action("create", compute, host.hostname, "compute node (embedded)")], made

    def _record(
        self,
        hostname: str,
        generation: int,
        compute: str,
        known: dict[str, Known],
        errors: Sequence[str],
        published: dict[str, Any],
    ) -> None:
        """What the sync wrote; ``errors``: the devices it left out, and why (the host is
        not synced while there are any, though its next pass has nothing new to try);
        ``published``: what claims' views read of it (``claim_view.published``)."""
        with self.db.writer() as conn:
            conn.execute(
                update(HOSTS)
                .where(HOSTS.c.hostname == hostname)
                .values(
                    synced_generation=generation,
                    rp_uuid=compute,
                    placement_errors=list(errors),
                    published=published,
                )
            )
            _store_known(conn, hostname, known)


PROFILES = table(DeviceProfile)
tolerations = names.tolerations


def tolerated_reasons(conn: Connection) -> frozenset[str]:
    """Every maintenance reason an enabled device profile tolerates."""
    found: set[str] = set()
    rows = conn.execute(select(PROFILES.c.groups).where(PROFILES.c.enabled.is_(True)))
    for groups in rows.scalars():
        for group in groups or []:
            found.update(tolerations(group))
    return frozenset(found)


def verify_slice(hostnames: Iterable[str], tick: int, ticks: int) -> list[str]:
    """The hosts that tick ``tick`` of a verification spread over ``ticks`` ticks checks:
    each host at one of any ``ticks`` consecutive ticks, by a hash of its name (CRC-32:
    the same in every process and release), so that a host coming or going moves no
    other to another tick. Sorted by name."""
    slot = tick % ticks
    return sorted(h for h in hostnames if zlib.crc32(h.encode()) % ticks == slot)


def _moved(row: Row[Any], actual: Provider | None, generations: bool = True) -> bool:
    """Whether Placement may hold a provider otherwise than the sync recorded it: gone,
    moved, at another generation (with ``generations``), never settled; a retired one
    still in the tree, or moved out of it (the sync deletes it once nothing uses it and
    its delay has passed)."""
    if row.retired:
        return actual is not None or row.parent_uuid is None
    return (
        actual is None
        or (generations and actual.generation != row.generation)
        or actual.parent_uuid != row.parent_uuid
        or row.digest == UNSETTLED
    )


def _known(row: Row[Any]) -> Known:
    return Known(
        row.uuid,
        row.name,
        row.parent_uuid,
        row.generation,
        row.digest,
        row.retired,
        owned=row.owned or {},
        since=row.updated_at or row.created_at,
    )


def _desired(
    hostname: str,
    compute: str,
    devices: Sequence[Row[Any]],
    deployables: Sequence[Row[Any]],
    options: tree.Options,
    held: dict[int, dict[str, int]] | None = None,
) -> tuple[list[tree.DesiredProvider], list[str]]:
    """The desired tree; a device whose names cannot be made valid is left out (each
    device is rendered alone first; with pools, the good ones then together)."""
    providers: list[tree.DesiredProvider] = []
    errors: list[str] = []
    good: list[Row[Any]] = []
    for device in devices:
        mine = [d for d in deployables if d.device_id == device.id]
        try:
            providers += tree.desired_tree(hostname, compute, [device], mine, options)
        except InvalidPlacementName as error:
            LOG.error("Not publishing %s %s: %s", hostname, device.pci_address, error.message)
            errors.append(error.message)
            continue
        good.append(device)
    if options.pools:
        ids = {d.id for d in good}
        mine = [d for d in deployables if d.device_id in ids]
        providers = tree.desired_tree(hostname, compute, good, mine, options, held)
    return providers, errors


def _providers_of(
    hostname: str,
    devices: Sequence[Row[Any]],
    deployables: Sequence[Row[Any]],
    desired: Sequence[tree.DesiredProvider],
) -> dict[int, str]:
    """The provider each published deployable's inventory is on: its pool's, its card's
    for a whole device, its own otherwise."""
    wanted = {p.uuid for p in desired}
    pooled = {member: p.uuid for p in desired for member in p.members}
    addresses = {d.id: d.pci_address for d in devices}
    found: dict[int, str] = {}
    for dep in deployables:
        if dep.id in pooled:
            found[dep.id] = pooled[dep.id]
            continue
        own = (
            names.provider_uuid(hostname, addresses[dep.device_id])
            if dep.kind == "device" and dep.device_id in addresses
            else dep.uuid
        )
        if own in wanted:
            found[dep.id] = own
    return found


def _place(db: Database, deployables: Sequence[Row[Any]], placed: dict[int, str]) -> None:
    """Record in each deployable the provider the sync published it in
    (``deployables.rp_uuid``, what a bind names): a pool's, or its own."""
    changed = [
        {"dep": dep.id, "rp": placed[dep.id]}
        for dep in deployables
        if dep.id in placed and dep.rp_uuid != placed[dep.id]
    ]
    if changed:
        with db.writer() as conn:
            conn.execute(
                update(DEPLOYABLES)
                .where(DEPLOYABLES.c.id == bindparam("dep"))
                .values(rp_uuid=bindparam("rp")),
                changed,
            )


def _publishable(
    hostname: str,
    devices: Sequence[Row[Any]],
    deployables: Sequence[Row[Any]],
    options: tree.Options,
) -> tuple[list[Row[Any]], list[str]]:
    """Flat mode: the devices whose names can be made valid, and why the others cannot."""
    good: list[Row[Any]] = []
    errors: list[str] = []
    for device in devices:
        mine = [d for d in deployables if d.device_id == device.id]
        try:
            tree.flat_contribution([device], mine, options)
        except InvalidPlacementName as error:
            LOG.error("Not publishing %s %s: %s", hostname, device.pci_address, error.message)
            errors.append(error.message)
            continue
        good.append(device)
    return good, errors


def _store_known(conn: Connection, hostname: str, known: dict[str, Known]) -> None:
    stored = {row.uuid: row for row in conn.execute(_KNOWN, {"host": hostname})}
    gone = [row.id for uuid, row in stored.items() if uuid not in known]
    if gone:
        conn.execute(delete(PROVIDERS).where(PROVIDERS.c.id.in_(gone)))
    for uuid, item in known.items():
        values = {
            "name": item.name,
            "parent_uuid": item.parent_uuid,
            "generation": item.generation,
            "digest": item.digest,
            "retired": item.retired,
            "owned": {k: list(v) for k, v in item.owned.items()},
        }
        row = stored.get(uuid)
        if row is None:
            conn.execute(insert(PROVIDERS).values(uuid=uuid, hostname=hostname, **values))
        elif any(getattr(row, k) != v for k, v in values.items()):
            conn.execute(
                update(PROVIDERS)
                .where(PROVIDERS.c.id == row.id)
                .values({**values, "updated_at": utcnow()})
            )


def unknown_host_message(client: PlacementClient, hostname: str) -> str:
    """Why a host is refused, with the compute node names it could have meant."""
    short = hostname.split(".", 1)[0]
    candidates = [
        n for n in client.provider_names() if n.split(".", 1)[0] == short and n != hostname
    ]
    hint = f" Did you mean {', '.join(repr(c) for c in candidates)}?" if candidates else ""
    return (
        f"Placement has no compute node named {hostname!r}: set [DEFAULT] host on that host "
        f"to the name the compute service uses (often its fully qualified name).{hint}"
    )
