"""The embedded Placement's lock on SQLite: requests take their turns in order."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from acceleron.placement.inprocess import FairLock, _one_at_a_time
from tests.fixtures.waiting import wait_for


def test_requests_are_answered_in_the_order_they_came() -> None:
    turns, entered, first_done = FairLock(), [], threading.Event()

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


def waiting(turns: FairLock, order: list[str]) -> threading.Thread:
    """A thread waiting for its turn (the caller holds it), writing "waiter" in it."""

    def waiter() -> None:
        with turns:
            order.append("waiter")

    thread = threading.Thread(target=waiter)
    thread.start()
    wait_for(lambda: turns.waiting == 1)
    return thread


def test_a_thread_coming_straight_back_waits_behind_those_waiting() -> None:
    """What ``threading.Lock`` gets wrong: the thread that ends its turn takes the lock
    again before a waiter wakes (a pass of back-to-back requests starved claims)."""
    turns, order = FairLock(), list[str]()
    with turns:
        thread = waiting(turns, order)
    with turns:
        order.append("back at once")
    thread.join(10)
    assert order == ["waiter", "back at once"]
    assert turns.waiting == 0


def test_the_thread_whose_turn_it_is_may_take_it_again() -> None:
    """A thread sending requests in its turn (``placement.batch``) is not stopped by its
    own turn; the turn passes on only once it let go of every take."""
    turns, order = FairLock(), list[str]()
    with turns:
        thread = waiting(turns, order)
        with turns:
            order.append("again")
        order.append("still mine")
    thread.join(10)
    assert order == ["again", "still mine", "waiter"]
