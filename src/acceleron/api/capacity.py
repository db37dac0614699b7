"""Who gets the API's threads, and how many uploads run at once.

Three kinds of thread, so that what is slow never holds what others need:

* **database work** (on PostgreSQL and MariaDB: ``Call.run``) runs on threads of its
  own, as many as the connection pool holds (``[database] max_pool_size +
  max_overflow``), so a thread never waits for a connection. A share of them
  (``[api] service_reserve`` percent) is kept for services, the agents and Nova
  (role ``service``, or a service token): however many users' requests wait,
  agents' reports and Nova's binds still get through. A request that finds no
  thread free within ``[api] queue_timeout`` seconds is answered 503
  ``acceleron.overloaded`` with Retry-After;
* **outbound work** (the bitstream store, Glance, Placement: ``Call.outbound``),
  which waits on other services or on files, on threads of its own
  (``OUTBOUND_THREADS``);
* everything else short (token validation, a file write) on the default pool.

Request bodies and answers are never waited for on a thread: they are read and
written on the event loop (see ``middleware`` for the clients that stall).

Uploads (``PUT /v2/bitstreams/{uuid}/data``) are read on the event loop into a spool
file and hold no thread while the client sends; a project may run
``[bitstreams] max_uploads_per_project`` of them at once in one API process, the
next is answered 429 ``acceleron.over_limit``.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from oslo_config import cfg

from acceleron.context import RequestContext
from acceleron.exceptions import OverLimit, Overloaded

T = TypeVar("T")


def is_service(context: RequestContext) -> bool:
    """Agents and Nova: the role ``service``, or a service token beside the user's."""
    return "service" in context.roles or context.has_service_token


OUTBOUND_THREADS = 40


class Threads:
    """The threads for database work (a share kept for services) and outbound work."""

    def __init__(self, threads: int, reserve_percent: int, queue_timeout: float) -> None:
        self.threads = threads
        self.reserved = min(threads - 1, max(1, threads * reserve_percent // 100))
        self._queue_timeout = queue_timeout
        self._limiters: tuple[anyio.CapacityLimiter, ...] = ()  # made in the event loop

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> Threads:
        threads = max(2, conf.database.max_pool_size + conf.database.max_overflow)
        return cls(threads, conf.api.service_reserve, conf.api.queue_timeout)

    def _made(self) -> tuple[anyio.CapacityLimiter, ...]:
        if not self._limiters:
            self._limiters = (
                anyio.CapacityLimiter(self.threads - self.reserved),  # anyone's
                anyio.CapacityLimiter(self.threads),  # every admitted request
                anyio.CapacityLimiter(self.threads),  # the threads: admission counted them
                anyio.CapacityLimiter(OUTBOUND_THREADS),
            )
        return self._limiters

    async def outbound(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a thread for work that waits on another service or a file."""
        return await anyio.to_thread.run_sync(fn, *args, limiter=self._made()[3])

    async def database(self, service: bool, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a thread for database work, once admitted: services may take
        any, others all but the reserved ones."""
        others, admitted, pool, _ = self._made()
        async with contextlib.AsyncExitStack() as stack:
            if not service:
                await stack.enter_async_context(self._admission(others))
            await stack.enter_async_context(self._admission(admitted))
            return await anyio.to_thread.run_sync(fn, *args, limiter=pool)

    @contextlib.asynccontextmanager
    async def _admission(self, limiter: anyio.CapacityLimiter) -> AsyncIterator[None]:
        """A token of ``limiter`` while the block runs; Overloaded when none comes free in
        ``queue_timeout`` seconds (the wait is bounded, not the work)."""
        admitted = False
        with anyio.move_on_after(self._queue_timeout):
            await limiter.acquire()
            admitted = True
        if not admitted:
            raise Overloaded(
                f"Every thread for database work stayed busy for {self._queue_timeout:g} s; "
                f"retry shortly."
            )
        try:
            yield
        finally:
            limiter.release()


class UploadSlots:
    """How many uploads each project runs at once (in this process)."""

    def __init__(self, per_project: int) -> None:
        self.per_project = per_project
        self._running: collections.Counter[str] = collections.Counter()

    @contextlib.contextmanager
    def taken(self, project: str) -> Any:
        """One of the project's slots while the block runs; OverLimit if none is free.
        (Event-loop code only: no lock needed.)"""
        if self._running[project] >= self.per_project:
            raise OverLimit(
                f"Project {project or '(none)'} already has {self.per_project} upload(s) in "
                f"progress ([bitstreams] max_uploads_per_project); retry when one ends."
            )
        self._running[project] += 1
        try:
            yield
        finally:
            self._running[project] -= 1
