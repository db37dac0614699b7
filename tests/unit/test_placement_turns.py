"""The embedded Placement's lock on SQLite: requests take their turns in order."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from acceleron.placement.inprocess import Turns, _one_at_a_time
from tests.fixtures.waiting import wait_for


def test_requests_are_answered_in_the_order_they_came() -> None:
    turns, entered, first_done = Turns(), [], threading.Event()

    def app(environ: dict[str, Any], _start: Callable[..., Any]) -> Iterable[bytes]:
        entered.append(environ["n"])
        if environ["n"] == 0:
            first_done.wait(10)
        return [b""]

    serialized = _one_at_a_time(app, turns)
    threads = [threading.Thread(target=serialized, args=({"n": n}, None)) for n in range(6)]
    threads[0].start()
    wait_for(lambda: entered == [0])
    for n, thread in enumerate(threads[1:], 1):
        thread.start()
        wait_for(lambda n=n: turns.waiting == n)  # type: ignore[misc]
    first_done.set()
    for thread in threads:
        thread.join(10)
    assert entered == [0, 1, 2, 3, 4, 5]


def test_a_thread_coming_straight_back_waits_behind_those_waiting() -> None:
    """What ``threading.Lock`` gets wrong: the thread that ends its turn takes the lock
    again before a waiter wakes (a pass of back-to-back requests starved claims)."""
    turns, order = Turns(), []

    def waiter() -> None:
        with turns:
            order.append("waiter")

    thread = threading.Thread(target=waiter)
    with turns:
        thread.start()
        wait_for(lambda: turns.waiting == 1)
    with turns:
        order.append("back at once")
    thread.join(10)
    assert order == ["waiter", "back at once"]
    assert turns.waiting == 0
