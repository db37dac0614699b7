"""Waking the agents' long polls for work (``POST /v2/hosts/{host}/tasks/claim?wait=``).

A task queued by this process wakes the host's waiting polls as soon as its
transaction commits (``Database.listen``). With ``[api] task_wakeup = notify`` on
PostgreSQL, a task queued by another API process wakes them too: the queuing
transaction sends ``pg_notify`` and every API process LISTENs (``db.listen``).
Otherwise a waiting poll looks again every ``POLL`` seconds. Where signals reach the
process, a poll looks once, when it comes, and then only when woken: a signal lost
delays that host's task until the agent's next poll (at most its ``wait``, 60 s), whose
first look finds it. Each look is a database query: at 10,000 hosts polling every 20 s,
one more look a poll is 500 queries a second (``bench/region.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from acceleron.db.listen import ANYTHING, ChannelListener
from acceleron.db.session import Database, Signal
from acceleron.service import tasks

POLL = 0.25  # seconds between two looks when no signal can reach this process
MODES = ("notify", "local", "poll")


class TaskWakeup:
    """The polls waiting per host, woken by the task signals this process hears."""

    def __init__(self, db: Database, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"task_wakeup: one of {', '.join(MODES)}, not {mode!r}")
        self._db = db
        self.mode = mode
        self._waiting: dict[str, set[asyncio.Event]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._remote: ChannelListener | None = None

    def start(self) -> bool:
        """Listen for task signals on the running loop; False (and nothing done) in poll
        mode or when started already (an app started twice: a test serving it again)."""
        if self.mode == "poll" or self._loop is not None:
            return False
        self._loop = asyncio.get_running_loop()
        self._db.listen(self._heard)
        if self.mode == "notify" and self._db.backend == "postgresql":
            self._db.notify_channels = True
            self._remote = ChannelListener(self._db, [tasks.CHANNEL])
            self._remote.start()
        return True

    def stop(self) -> None:
        self._db.unlisten(self._heard)
        if self._remote is not None:
            self._db.notify_channels = False
            self._remote.stop()
            self._remote = None
        self._loop = None

    @property
    def listening(self) -> bool:
        """Whether signals from other API processes reach this one now."""
        return self._remote is not None and self._remote.listening.is_set()

    def waiters(self, hostname: str) -> int:
        """How many polls wait for ``hostname``'s work now."""
        return len(self._waiting.get(hostname, ()))

    @property
    def interval(self) -> float | None:
        """How long a waiting poll sleeps between two looks at the database; None: until
        woken (signals from every API process reach this one)."""
        if self._loop is not None and self.listening:
            return None
        return POLL  # another API process's tasks are found by looking

    @contextlib.contextmanager
    def waiting(self, hostname: str) -> Iterator[asyncio.Event]:
        """An event set when a task is queued for ``hostname``, while the block runs.
        Register before looking at the database, so no task slips in between."""
        event = asyncio.Event()
        self._waiting.setdefault(hostname, set()).add(event)
        try:
            yield event
        finally:
            waiting = self._waiting.get(hostname)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self._waiting[hostname]

    def wake_all(self) -> None:
        """Wake every waiting poll (the server stops: they answer at once)."""
        self._heard(frozenset({(tasks.CHANNEL, ANYTHING)}))

    def _heard(self, signals: frozenset[Signal]) -> None:  # any thread
        hosts = {payload for channel, payload in signals if channel == tasks.CHANNEL}
        loop = self._loop
        if hosts and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wake, hosts)

    def _wake(self, hosts: set[str]) -> None:  # on the event loop
        names = list(self._waiting) if ANYTHING in hosts else hosts
        for name in names:
            for event in self._waiting.get(name, ()):
                event.set()


async def sleep(event: asyncio.Event, seconds: float) -> bool:
    """Until ``event`` is set or ``seconds`` pass; whether it was set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)
    return event.is_set()
