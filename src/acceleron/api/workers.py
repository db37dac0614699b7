"""The API process's background workers: the Placement sync's thread, and the
event-loop tasks that reap binds (and cleanings), prune the devices' histories, refresh
the metrics, reconcile Placement, and recover (once, at the start) the claims whose
maker is gone.

``create_app``'s lifespan starts them all and stops them all; the Nova events' sender
(``service.nova.NovaNotifier``) and the tasks' wake-ups (``api.wakeup``) beside them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable

from fastapi import FastAPI
from oslo_config import cfg
from starlette.datastructures import State

from acceleron.api import placement as placement_api
from acceleron.api.services import services
from acceleron.exceptions import AcceleronError, PlacementUnavailable
from acceleron.service import bind_tasks, leases, stats, tenancies
from acceleron.service.placement import PlacementService
from acceleron.service.publish import Syncer

LOG = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def running(
    app: FastAPI, service: PlacementService | None, conf: cfg.ConfigOpts
) -> AsyncIterator[None]:
    """Every background worker, for the lifespan of ``app``. An app started twice (a
    test serving it again) keeps the first start's workers, stopped by that start."""
    parts = services(app)
    started = start_sync(app.state, service, conf)
    nova_started = parts.nova.start()
    wakeup_started = parts.task_wakeup.start()
    tasks = [asyncio.create_task(reap_binds(app)), asyncio.create_task(prune_history(app))]
    if conf.metrics.enabled:
        tasks.append(asyncio.create_task(refresh_metrics(app)))
    if service is not None:
        tasks.append(asyncio.create_task(recover_claims(app)))
    if service is not None and conf.reconciler.interval:
        tasks.append(asyncio.create_task(reconcile(app, service.periodic)))
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        if wakeup_started:
            parts.task_wakeup.stop()
        if nova_started:
            parts.nova.stop()
        if started is not None:
            started.stop()
            app.state.sync_worker = None


def wake_sync(state: State) -> None:
    """Ask the Placement sync for a pass now (a host's inventory changed); nothing when
    Placement is disabled."""
    worker: SyncWorker | None = state.sync_worker
    if worker is not None:
        worker.wake()


def start_sync(
    state: State, service: PlacementService | None, conf: cfg.ConfigOpts
) -> SyncWorker | None:
    """Start the app's Placement sync worker, through the service present at the start
    (a test may have put its own in ``state.placement``); the worker started, which the
    caller stops at the end. None when Placement is disabled or a worker runs already:
    an app started twice (a test serving it again) neither starts nor stops another."""
    if service is None or state.sync_worker is not None:
        return None
    worker = SyncWorker(
        service.syncer,
        conf.placement.sync_interval,
        conf.placement.verify_interval,
        reconciled=bool(conf.reconciler.interval),
        leads=service.periodic.holds,
        threads=conf.placement.sync_threads,
    )
    worker.start()
    state.sync_worker = worker
    return worker


VERIFY_TICK = 5.0  # seconds between two slices of the periodic verification, about


@dataclasses.dataclass
class VerifyTicks:
    """The periodic verification's pace: ``ticks`` ticks of ``seconds`` each per
    ``[placement] verify_interval``, the next one due at ``at`` (``time.monotonic``),
    each verifying its slice of hosts (``publish.verify_slice``); the reconciler's
    passes over ``[reconciler] interval`` likewise. A tick that comes late
    (Placement away, a long pass) pushes the next ones back: no catching up in a burst."""

    ticks: int
    seconds: float
    at: float
    tick: int = 0

    @classmethod
    def every(cls, interval: float, now: float) -> VerifyTicks:
        ticks = max(1, round(interval / VERIFY_TICK))
        return cls(ticks, interval / ticks, now + interval / ticks)

    def due(self, now: float) -> bool:
        return now >= self.at

    def advance(self, now: float) -> None:
        self.tick += 1
        self.at += self.seconds
        if self.at <= now:
            self.at = now + self.seconds

    def retry(self, now: float) -> None:
        """The same tick again, one tick's length from ``now`` (its pass failed)."""
        self.at = now + self.seconds


class SyncWorker:
    """The Placement sync's thread: runs ``sync_pending`` when woken and every
    ``interval`` seconds, and, unless the reconciler's passes verify the hosts
    (``reconciled``), a slice of the verification every few seconds (``VerifyTicks``:
    every host once per ``verify_interval``); backs off while Placement is away (hosts
    stay pending)."""

    MAX_BACKOFF = 300.0

    def __init__(
        self,
        make_syncer: Callable[[], Syncer],
        interval: float,
        verify_interval: float,
        *,
        reconciled: bool = False,
        leads: Callable[[], bool] = lambda: True,
        threads: int = 1,
    ) -> None:
        self._make_syncer = make_syncer
        self._threads = threads  # hosts synced at once in a pass over the pending ones
        self._interval = interval
        self._verify_interval = verify_interval
        # The reconciler's passes verify the hosts, from the trees they read: no ticks here.
        self._reconciled = reconciled
        self._leads = leads  # whether this process does the verification's ticks now
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.passes = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="placement-sync", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def wake(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        syncer: Syncer | None = None
        others: list[Syncer] = []  # beside it in a pass over the pending hosts
        backoff = 1.0
        ticks = VerifyTicks.every(self._verify_interval, time.monotonic())
        next_pass, woken = 0.0, True
        while not self._stop.is_set():
            wait = float(self._interval)
            try:
                syncer = syncer or self._make_syncer()
                others = others or [self._make_syncer() for _ in range(self._threads - 1)]
                if woken or time.monotonic() >= next_pass:
                    syncer.sync_pending(others)
                    next_pass = time.monotonic() + self._interval
                verifying = self._verify_interval and not self._reconciled
                if verifying and ticks.due(time.monotonic()):
                    if self._leads():
                        syncer.verify_tick(ticks.tick, ticks.ticks)
                    ticks.advance(time.monotonic())
                due = min(next_pass, ticks.at) if verifying else next_pass
                wait, backoff = max(due - time.monotonic(), 0.0), 1.0
            except PlacementUnavailable as error:
                LOG.warning("Placement is unreachable (%s); retrying in %.0f s", error, backoff)
                wait, backoff = backoff, min(backoff * 2, self.MAX_BACKOFF)
            except Exception:
                LOG.exception("Placement sync pass failed")
            self.passes += 1
            woken = self._wake.wait(wait)
            self._wake.clear()


async def reap_binds(app: FastAPI) -> None:
    """Fail the binds that outlived [binding] bind_timeout, every reap_interval seconds."""
    parts = services(app)
    conf = parts.conf.binding
    while True:
        await asyncio.sleep(conf.reap_interval)
        try:  # on the threads for database work, with the share kept for services
            resolved = await parts.threads.database(
                True,
                functools.partial(
                    bind_tasks.reap,
                    policy=parts.cleaning,
                    cleaning_timeout=parts.conf.cleaning.timeout,
                ),
                parts.db,
                conf.bind_timeout,
            )
        except AcceleronError as error:  # the database is away: the next round tries again
            LOG.warning("Reaping binds failed: %s", error.message)
            continue
        except Exception:  # nothing must end the reaper
            LOG.exception("Reaping binds failed")
            continue
        parts.nova.notify(resolved)


PRUNE_INTERVAL = 3600.0  # seconds between two prunings of the devices' histories


async def prune_history(app: FastAPI) -> None:
    """Forget the tenancies older than [cleaning] history_days, every hour."""
    parts = services(app)
    while True:
        try:
            pruned = await parts.threads.database(
                True, tenancies.prune, parts.db, parts.conf.cleaning.history_days
            )
            if pruned:
                LOG.info(
                    "Forgot %d tenancies older than %d days",
                    pruned,
                    parts.conf.cleaning.history_days,
                )
        except AcceleronError as error:  # the database is away: the next round tries again
            LOG.warning("Pruning the devices' histories failed: %s", error.message)
        except Exception:  # nothing must end the pruner
            LOG.exception("Pruning the devices' histories failed")
        await asyncio.sleep(PRUNE_INTERVAL)


async def refresh_metrics(app: FastAPI) -> None:
    """The state gauges from the database, at once and every [metrics] refresh_interval."""
    parts = services(app)
    publishing = app.state.placement is not None
    while True:
        try:
            await parts.threads.database(True, stats.refresh, parts.db, publishing)
            app.state.metrics_refreshes += 1
        except AcceleronError as error:  # the database is away: the next round tries again
            LOG.warning("Refreshing the metrics failed: %s", error.message)
        except Exception:  # nothing must end the refresher
            LOG.exception("Refreshing the metrics failed")
        await asyncio.sleep(parts.conf.metrics.refresh_interval)


async def recover_claims(app: FastAPI) -> None:
    """Once, at the start: end the claims whose actor's lease has passed (in the
    database's time; an earlier process killed while it made or ended them, say: its
    claims are ended here or by a later reconciler pass, once their lease passed)."""
    reconciler = placement_api.reconciler_of(app)
    try:
        done = await services(app).threads.outbound(reconciler.claims)
    except AcceleronError as error:  # Placement or the database away: the passes do it
        LOG.warning("Recovering claims failed: %s", error.message)
        return
    except Exception:
        LOG.exception("Recovering claims failed")
        return
    if done:
        LOG.warning("Ended %d claim(s) whose lease had passed", len(done))
    app.state.claims_recovered = done


async def reconcile(app: FastAPI, periodic: leases.Holder) -> None:
    """The reconciler's passes (docs/reconciler.md): ``[reconciler] interval`` spread in
    ticks of a few seconds as the verification's are (``VerifyTicks``), each a pass over
    its slice of the hosts, so that every host is read once an interval. A tick that
    fails (Placement or the database away) is tried again a tick later. A tick runs only
    while this process holds ``periodic``, the lease its sync thread's verification
    ticks ask for too (``leases``): one process of the region does both."""
    parts = services(app)
    conf = parts.conf.reconciler
    ticks = VerifyTicks.every(conf.interval, time.monotonic())
    while True:
        await asyncio.sleep(max(ticks.at - time.monotonic(), 0.0))
        if not await parts.threads.database(True, periodic.holds):
            ticks.advance(time.monotonic())  # another process does the passes
            continue
        reconciler = placement_api.reconciler_of(app)
        run = functools.partial(
            reconciler.run,
            free=conf.free,
            tick=ticks.tick,
            ticks=ticks.ticks,
            now=ticks.at,
            # the hosts it reads, for the sync (whose thread then does not verify)
            verify=bool(parts.conf.placement.verify_interval),
        )
        try:
            await parts.threads.outbound(run)
            if reconciler.drifted:  # hosts Placement changed behind the sync's back
                wake_sync(app.state)
        except AcceleronError as error:  # Placement or the database away: next round
            LOG.warning("Reconciling Placement and requests failed: %s", error.message)
            ticks.retry(time.monotonic())
            continue
        except Exception:  # nothing must end the reconciler
            LOG.exception("Reconciling Placement and requests failed")
        ticks.advance(time.monotonic())
