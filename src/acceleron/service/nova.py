"""Telling Nova that binds ended: ``POST /os-server-external-events``.

For each accelerator request whose bind resolved, one ``accelerator-request-bound``
event with ``tag`` = the ARQ's uuid and ``status`` ``completed`` or ``failed``;
Nova's compute waits for them before it builds the instance. The events are sent
from a background thread so that no API request waits for Nova. A per-event 422
(the instance is not on a host yet) is expected and tolerated; Nova unreachable
or answering 5xx is retried a few times with a growing delay, then logged.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

from acceleron import conf as confmod
from acceleron.service.arqs import Resolved

LOG = logging.getLogger(__name__)
EVENT = "accelerator-request-bound"
MICROVERSION = "2.82"  # the first with accelerator-request-bound
# Per-event codes Nova may answer in a 207 that are not errors for us.
TOLERATED = (200, 422)


def events(resolved: Sequence[Resolved]) -> list[dict[str, str]]:
    return [
        {"name": EVENT, "server_uuid": r.instance_uuid, "tag": r.arq_uuid, "status": r.status}
        for r in resolved
    ]


def adapter_from_conf(conf: cfg.ConfigOpts) -> ks_adapter.Adapter | None:
    """A keystoneauth adapter for Nova from ``[nova]``; None when it is not configured."""
    session, auth = confmod.load_session(conf, "nova")
    if auth is None and not conf.nova.endpoint_override:
        return None
    return ks_loading.load_adapter_from_conf_options(
        conf, "nova", session=session, auth=auth, raise_exc=False
    )


class NovaNotifier:
    """Sends events in the background; ``notify`` never blocks."""

    def __init__(
        self,
        make_adapter: Callable[[], ks_adapter.Adapter | None],
        attempts: int = 5,
        first_delay: float = 1.0,
    ) -> None:
        self._make_adapter = make_adapter
        self._adapter: ks_adapter.Adapter | None = None
        self._configured: bool | None = None  # None: not looked at yet
        self._attempts = attempts
        self._first_delay = first_delay
        self._queue: queue.Queue[list[Resolved] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self.sent: list[dict[str, str]] = []  # every event Nova accepted (for operators' logs)

    def start(self) -> bool:
        """Start the sender's thread; False (and nothing done) when it runs already: an
        app started twice (a test serving it again) has one sender, stopped by the start
        that made it."""
        if self._thread is not None and self._thread.is_alive():
            return False
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="nova-events", daemon=True)
        self._thread.start()
        return True

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def notify(self, resolved: Sequence[Resolved]) -> None:
        # Once it is known that no Nova is configured (the all-in-one), nothing is queued:
        # waking the sender's thread for nothing costs the event loop a GIL hand-off.
        if resolved and self._configured is not False:
            self._queue.put(list(resolved))

    def drain(self, timeout: float = 10.0) -> None:
        """Wait (at most ``timeout`` s) until every queued event was handled."""
        deadline = time.monotonic() + timeout
        with self._queue.all_tasks_done:
            while self._queue.unfinished_tasks:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._queue.all_tasks_done.wait(left)

    def _run(self) -> None:
        while True:
            batch = self._queue.get()
            try:
                if batch is None:
                    return
                self._deliver(batch)
            finally:
                self._queue.task_done()

    def _deliver(self, batch: list[Resolved]) -> None:
        delay = self._first_delay
        for attempt in range(1, self._attempts + 1):
            try:
                if self._send(batch):
                    return
            except ks_exc.ClientException as error:
                LOG.warning(
                    "Nova unreachable for %d event(s) (attempt %d): %s", len(batch), attempt, error
                )
            if self._stopping.wait(delay):
                break
            delay *= 2
        LOG.error(
            "Gave up telling Nova of %s", ", ".join(f"{r.arq_uuid} {r.status}" for r in batch)
        )

    def _send(self, batch: list[Resolved]) -> bool:
        """True when Nova took the events (or told us they are not for it)."""
        if self._configured is None:
            self._adapter = self._make_adapter()
            self._configured = self._adapter is not None
        if self._adapter is None:
            return True  # no Nova configured (the all-in-one): nobody to tell
        body = {"events": events(batch)}
        response = self._adapter.post(
            "/os-server-external-events", json=body, microversion=MICROVERSION
        )
        if response.status_code >= 500:
            LOG.warning("Nova answered %s to %d event(s)", response.status_code, len(batch))
            return False
        self._log_results(response, batch)
        return True

    def _log_results(self, response: Any, batch: list[Resolved]) -> None:
        if response.status_code >= 400:
            LOG.error(
                "Nova refused %d event(s): %s %s",
                len(batch),
                response.status_code,
                response.text[:500],
            )
            return
        for event in response.json().get("events", []):
            code = event.get("code", 200)
            if code in TOLERATED:
                self.sent.append(event)
                if code == 422:
                    LOG.info(
                        "Nova: instance %s is not on a host yet (event %s)",
                        event.get("server_uuid"),
                        event.get("tag"),
                    )
            else:
                LOG.warning(
                    "Nova did not take event %s for %s: %s",
                    event.get("tag"),
                    event.get("server_uuid"),
                    code,
                )
