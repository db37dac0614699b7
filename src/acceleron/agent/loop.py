"""The agent's loop: scan, report, wait; retry with backoff while the API is away.

A scan runs at start, every ``report_interval`` seconds, and ``udev_debounce``
seconds after the first of a burst of udev events (the whole burst makes one
scan; see ``Schedule``). Each scan that every driver completed is sent as one full report.

While the API is unreachable or answers 5xx, the agent retries with capped,
jittered exponential backoff, scanning again before each try: every report is
the whole state, so nothing is queued and the newest state is what arrives when
the API is back. udev events do not shorten a backoff wait.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from oslo_config import cfg

from acceleron import metrics
from acceleron.agent import discovery
from acceleron.agent.client import ApiUnavailable, ReportClient, ReportRefused, UnknownHost
from acceleron.agent.udev import UdevWatcher
from acceleron.drivers.base import Driver, Watching

LOG = logging.getLogger(__name__)
Clock = Callable[[], float]
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class AgentStopping(BaseException):  # like KeyboardInterrupt: not an error
    """Raised by the signal handlers to abandon whatever the agent is doing and stop."""


def backoff_delay(attempt: int, initial: float, cap: float, jitter: float) -> float:
    """Seconds before retry ``attempt`` (0 for the first): ``initial`` doubled per attempt,
    at most ``cap``, then scaled by ``jitter`` (0 to 1) into the upper half of that, so
    that agents which lost the API together do not come back together."""
    ceiling = min(cap, initial * 2.0 ** min(attempt, 60))
    return ceiling * (0.5 + 0.5 * jitter)


@dataclasses.dataclass(frozen=True)
class Settings:
    hostname: str
    report_interval: float = 60.0
    backoff_initial: float = 1.0
    backoff_max: float = 60.0
    udev_debounce: float = 2.0

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> Settings:
        agent = conf.agent
        return cls(
            hostname=conf.host,
            report_interval=float(agent.report_interval),
            backoff_initial=agent.backoff_initial,
            backoff_max=max(agent.backoff_max, agent.backoff_initial),
            udev_debounce=agent.udev_debounce,
        )


class Schedule:
    """When the next scan is due; thread-safe, so udev's thread can bring it forward.

    The first udev event after a scan started makes the next scan due ``debounce``
    seconds later (unless one is due sooner); the events of those seconds join it, so
    a burst costs one scan and a storm at most one scan per ``debounce`` seconds.
    """

    def __init__(self, debounce: float, clock: Clock = time.monotonic) -> None:
        self._debounce = debounce
        self._clock = clock
        self._cond = threading.Condition()
        self._due = clock()  # the first scan: now
        self._event_at: float | None = None  # first event not yet seen by a scan
        self._hold = False
        self._stopping = False

    @property
    def due(self) -> float:
        with self._cond:
            return self._due_locked()

    def next_scan(self, delay: float, hold: bool = False) -> None:
        """The next scan in ``delay`` seconds; with ``hold`` (backing off) events wait too."""
        with self._cond:
            self._due = self._clock() + delay
            self._hold = hold

    def event(self) -> None:
        """Something changed on the host: scan soon."""
        with self._cond:
            if self._event_at is None:
                self._event_at = self._clock()
                self._cond.notify_all()

    def urgent(self) -> None:
        """A fault was heard of (an NVML XID): scan now, without the udev debounce."""
        with self._cond:
            if not self._hold:
                self._due = min(self._due, self._clock())
                self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()

    def wait(self) -> bool:
        """Block until the next scan is due (True) or stop() was called (False)."""
        with self._cond:
            while not self._stopping:
                remaining = self._due_locked() - self._clock()
                if remaining <= 0:
                    self._event_at = None  # the scan about to run sees those changes
                    return True
                self._cond.wait(remaining)
            return False

    def _due_locked(self) -> float:
        if self._event_at is None or self._hold:
            return self._due
        return min(self._due, self._event_at + self._debounce)


class Agent:
    def __init__(
        self,
        settings: Settings,
        drivers: Sequence[Driver],
        client: ReportClient,
        clock: Clock = time.monotonic,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.settings = settings
        self.drivers = list(drivers)
        self.client = client
        self.schedule = Schedule(settings.udev_debounce, clock)
        self._jitter = jitter
        self._last_digest: str | None = None

    def report_once(self) -> bool:
        """One scan and, when every driver completed it, one report.

        True when the API accepted it; False when nothing was sent or the API refused
        the report (both logged). Raises ApiUnavailable and UnknownHost.
        """
        scan = discovery.scan(self.drivers)
        if not scan.complete:
            LOG.error(
                "Not reporting this scan: driver(s) %s failed (see above). A report without "
                "their devices would make the service remove them; the next scan tries again.",
                ", ".join(scan.failed),
            )
            return False
        report = discovery.build_report(self.settings.hostname, scan.devices)
        try:
            self.client.report(report)
        except UnknownHost:
            metrics.AGENT_REPORTS.labels("failed").inc()
            raise
        except ReportRefused as error:
            metrics.AGENT_REPORTS.labels("failed").inc()
            LOG.error("Report of %d device(s) not accepted: %s", len(report.devices), error)
            return False
        except BaseException:
            metrics.AGENT_REPORTS.labels("failed").inc()
            raise
        metrics.AGENT_REPORTS.labels("sent").inc()
        digest = report.digest()
        log = LOG.info if digest != self._last_digest else LOG.debug
        log(
            "Reported %d device(s) of %s to %s",
            len(report.devices),
            report.hostname,
            self.client.where,
        )
        self._last_digest = digest
        return True

    def run(self) -> None:
        """Scan and report until stop(); raises UnknownHost."""
        failures = 0
        while self.schedule.wait():
            try:
                self.report_once()
            except ApiUnavailable as error:
                delay = self.retry_delay(failures)
                failures += 1
                LOG.warning(
                    "Report not sent (attempt %d): %s. Retrying in %.3g s.", failures, error, delay
                )
                self.schedule.next_scan(delay, hold=True)
                continue
            if failures:
                LOG.info("The API is reachable again after %d failed attempt(s)", failures)
                failures = 0
            self.schedule.next_scan(self.settings.report_interval)

    def retry_delay(self, attempt: int) -> float:
        s = self.settings
        return backoff_delay(attempt, s.backoff_initial, s.backoff_max, self._jitter())

    def stop(self) -> None:
        """Stop after the report in flight, if any (from another thread)."""
        self.schedule.stop()


def _raise_stopping(signum: int, frame: object) -> None:
    raise AgentStopping(signal.Signals(signum).name)


class Worker(Protocol):
    """Work beside the scans (the task runner): run() until stop()."""

    def run(self) -> None: ...

    def stop(self) -> None: ...


def serve(agent: Agent, watch_udev: bool = True, worker: Worker | None = None) -> None:
    """Run the agent in the main thread until SIGTERM or SIGINT; raises UnknownHost.
    ``worker`` (the task runner) runs in a thread of its own meanwhile.

    A signal abandons whatever is in progress (a scan, a report in flight, a wait):
    every report is the full state, so the next start simply sends a new one; a task
    in progress is taken up again at the next start.
    """
    watcher = UdevWatcher(agent.schedule.event, agent.schedule.urgent) if watch_udev else None
    watching = [d for d in agent.drivers if isinstance(d, Watching)]
    previous = {sig: signal.signal(sig, _raise_stopping) for sig in STOP_SIGNALS}
    thread = threading.Thread(target=worker.run, name="tasks", daemon=True) if worker else None
    try:
        if watcher is not None:
            watcher.start()
        if thread is not None:
            thread.start()
        for driver in watching:
            driver.start_watch(agent.schedule.urgent)
        LOG.info(
            "Agent of %s started: drivers %s, a scan every %d s",
            agent.settings.hostname,
            ", ".join(d.name for d in agent.drivers) or "none",
            agent.settings.report_interval,
        )
        agent.run()
    except AgentStopping as stopping:
        LOG.info("Agent stopping (%s)", stopping)
    finally:
        if worker is not None:
            worker.stop()
        for driver in watching:
            driver.stop_watch()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if watcher is not None:
            watcher.stop()
