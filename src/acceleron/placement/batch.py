"""Consumers' allocation writes made at the same moment, sent to Placement together.

A claim writes its consumer's allocation (``PUT /allocations/{consumer}``), and its
release writes the consumer's allocations anew, guarded by the generation it read.
Each PUT costs Placement about the same whatever it carries (the request, its schema
check, one transaction), and the embedded Placement answers one request at a time, so
concurrent claims queued behind each other's writes. ``POST /allocations`` writes
several consumers in one transaction, each with its own consumer generation (None: a
new consumer), all or nothing, for a fraction of a PUT's cost a consumer (the figures:
docs/benchmark-runs.md, "Under contention").

``Writes`` is a group commit: a write arriving while nothing is being sent is sent at
once (alone, a plain PUT: nothing waits for company); those arriving meanwhile queue,
and when the send ends the first of them sends the whole queue (up to ``LIMIT``
consumers) in one POST, and so on. Where Placement answers one request at a time (the
embedded one on SQLite), the sending thread takes the queue only once Placement's turn
came (``inprocess.turns``): the writes that arrived while it waited go with it. And
the API announces each claim being made or ended (``announced``, while it runs): the
sending thread waits up to ``LINGER`` (10 ms) for the writes announced and not made
yet, as long as there are any; a claim that ends without writing lets it go at once.

Nothing is written that its caller did not ask, with the generation it read:

* a batch Placement refuses (409: capacity taken meanwhile, a generation moved, a
  consumer not new; or 400: a provider gone) is written again one consumer at a time,
  each PUT answering for itself, as if no batch had been tried; its releases (writes
  that leave a consumer nothing: they need no capacity) first go together again;
* a batch that fails otherwise (unreachable, 5xx: it may have been written) fails each
  of its writes the same way, as their own PUT would have.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

from acceleron import metrics
from acceleron.exceptions import AcceleronError, PlacementUnavailable

LIMIT = 32  # consumers in one POST /allocations at most
# Seconds a sending thread waits at most for the writes announced (``announced``): what a
# batched write saves Placement (docs/benchmark-runs.md, "Under contention") is worth
# more than the wait where the process is short of CPU.
LINGER = 0.01
Body = dict[str, object]  # a consumer's body, as PUT /allocations/{consumer} takes it
# Sends a batch (consumer -> body): True when written, False when Placement refused it
# (409, 400): each is then written alone. Raises when the outcome is unknown.
SendBatch = Callable[[dict[str, Body]], bool]
SendOne = Callable[[], None]


@dataclasses.dataclass(eq=False)
class _Write:
    consumer: str
    body: Body
    ended: threading.Event = dataclasses.field(default_factory=threading.Event)
    lead: bool = False  # this write's thread sends the queue
    refused: bool = False  # its batch was refused: its own thread writes it alone
    error: AcceleronError | None = None

    def leads(self) -> bool:
        """Whether this write's thread sends the next batch (set by another thread)."""
        return self.lead


class Writes:
    """The group commit of one process's consumer allocation writes. ``turn``: Placement's
    turn, where it answers one request at a time (the embedded one on SQLite:
    ``inprocess.turns``), which the sending thread waits for before it takes the queue:
    the writes that came meanwhile go too."""

    def __init__(
        self,
        limit: int = LIMIT,
        turn: Callable[[], AbstractContextManager[object] | None] = lambda: None,
        linger: float = LINGER,
    ) -> None:
        self._limit = limit
        self._turn = turn
        self._linger = linger
        self._mutex = threading.Lock()
        self._arrived = threading.Condition(self._mutex)  # a write came, or won't
        self._queue: list[_Write] = []
        self._busy = False  # a thread is sending (or waits for Placement's turn to)
        self._announced = 0  # writes announced (``announced``) not made yet
        self._mine = threading.local()  # whether this thread's write is announced

    @contextlib.contextmanager
    def announced(self) -> Iterator[None]:
        """While the block runs, its thread will likely write (a claim being made or
        ended): a sending thread waits for that write, up to ``linger`` seconds."""
        with self._mutex:
            self._announced += 1
        self._mine.pending = True
        try:
            yield
        finally:
            self._unannounce()

    def _unannounce(self) -> None:
        """This thread's announced write came, or will not."""
        if getattr(self._mine, "pending", False):
            self._mine.pending = False
            with self._mutex:
                self._announced -= 1
                self._arrived.notify_all()

    @property
    def waiting(self) -> int:
        """How many writes wait to be sent (the sending thread's own until it takes them)."""
        with self._mutex:
            return len(self._queue)

    def write(self, consumer: str, body: Body, send_batch: SendBatch, send_one: SendOne) -> None:
        """Write ``body`` for ``consumer``: at once when nothing is being sent, with the
        writes that queued meanwhile (``send_batch``) or alone (``send_one``, its own
        PUT); else in the next batch, sent by the thread whose turn it is. Raises what
        its own PUT would."""
        mine = _Write(consumer, body)
        self._unannounce()
        with self._mutex:
            self._queue.append(mine)
            if not self._busy:
                self._busy = mine.lead = True
            self._arrived.notify_all()
        if not mine.lead:
            mine.ended.wait()
        if mine.leads():  # this thread sends the queue
            try:
                self._wait_for_announced()
                with self._turn() or contextlib.nullcontext():
                    self._send(self._take(mine), send_batch, send_one)
            finally:
                self._next()
        if mine.refused:
            metrics.ALLOCATION_WRITES.labels("refused").inc()
            send_one()
        elif mine.error is not None:
            raise mine.error

    def _wait_for_announced(self) -> None:
        """Up to ``linger`` seconds, while writes are announced and the batch has room."""
        deadline = time.monotonic() + self._linger
        with self._arrived:
            while self._announced > 0 and len(self._queue) < self._limit:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._arrived.wait(left)

    def _take(self, first: _Write) -> list[_Write]:
        """The queue's writes for one batch: ``first``, then those of other consumers (a
        consumer twice in a batch cannot be), up to the limit."""
        with self._mutex:
            batch, kept, consumers = [first], [], {first.consumer}
            for write in self._queue:
                if write is first:
                    continue
                if len(batch) < self._limit and write.consumer not in consumers:
                    batch.append(write)
                    consumers.add(write.consumer)
                else:
                    kept.append(write)
            self._queue = kept
        return batch

    def _send(self, batch: list[_Write], send_batch: SendBatch, send_one: SendOne) -> None:
        """Send ``batch`` and wake its writes (the first one is the caller's own, whose
        ``send_one`` sends it when it is alone)."""
        try:
            if len(batch) == 1:  # nobody to share it with: a plain PUT
                metrics.ALLOCATION_WRITES.labels("alone").inc()
                send_one()
            elif not self._sent(batch, send_batch):
                # Refused, nothing written. Releases (no allocations left) need no
                # capacity: they go together again, before the others go alone.
                freeing = [w for w in batch if not w.body.get("allocations")]
                rest = [w for w in batch if w not in freeing]
                again = len(freeing) > 1 and rest and self._sent(freeing, send_batch)
                for write in rest if again else batch:
                    write.refused = True
        finally:
            for write in batch[1:]:
                write.ended.set()

    def _sent(self, writes: list[_Write], send_batch: SendBatch) -> bool:
        """Whether ``writes`` are done with: written in one batch, or failed with it when
        its outcome is unknown (each fails as its own PUT would have); False when
        Placement refused it (nothing written)."""
        try:
            if not send_batch({w.consumer: w.body for w in writes}):
                return False
        except Exception as error:
            failed = (
                error
                if isinstance(error, AcceleronError)
                else PlacementUnavailable(f"Writing allocations failed: {error}")
            )
            for write in writes:
                write.error = failed
            return True
        metrics.ALLOCATION_WRITES.labels("batched").inc(len(writes))
        return True

    def _next(self) -> None:
        """The write or batch in flight ended: the first queued write's thread sends the
        queue, or nothing is in flight any more."""
        with self._mutex:
            if not self._queue:
                self._busy = False
                return
            first = self._queue[0]
            first.lead = True
        first.ended.set()
