"""Allocation writes made at the same moment go to Placement together (placement.batch):
alone when nothing is in flight; those that queued meanwhile in one batch, and those
that claims under way announced waited for; a batch Placement refuses written again
one by one (its releases first together); a batch whose outcome is unknown fails each
of its writes; a consumer never twice in one batch, and no batch over the limit."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from acceleron.exceptions import PlacementUnavailable
from acceleron.placement.batch import Body, Writes
from acceleron.placement.inprocess import FairLock
from tests.fixtures.waiting import wait_for


class Placement:
    """What reached Placement: single writes (consumer) and batches (their consumers);
    ``answer`` says what a batch gets (True: written, False: refused, or raised)."""

    def __init__(self, answer: Callable[[], bool] = lambda: True) -> None:
        self.alone: list[str] = []
        self.batches: list[list[str]] = []
        self.answer = answer
        self.hold = threading.Event()  # the first single write waits for it
        self.held = threading.Event()  # set once the first single write is in flight
        self.hold.set()

    def batch(self, bodies: dict[str, Body]) -> bool:
        self.batches.append(sorted(bodies))
        return self.answer()

    def one(self, consumer: str) -> Callable[[], None]:
        def send() -> None:
            self.alone.append(consumer)
            if len(self.alone) == 1:
                self.held.set()
                self.hold.wait(30)

        return send


def write(writes: Writes, placement: Placement, consumer: str, errors: list[Exception]) -> None:
    """``consumer`` written: a release (nothing left) when its name says so."""
    body: Body = {"allocations": {} if consumer.startswith("release") else {"rp": {"X": 1}}}
    try:
        writes.write(consumer, body, placement.batch, placement.one(consumer))
    except Exception as error:
        errors.append(error)


def queued_behind_one(
    writes: Writes, placement: Placement, consumers: list[str]
) -> tuple[list[threading.Thread], list[Exception]]:
    """The first of ``consumers`` in flight alone, the others queued behind it; then the
    first let go."""
    placement.hold.clear()
    errors: list[Exception] = []
    threads = [
        threading.Thread(target=write, args=(writes, placement, c, errors)) for c in consumers
    ]
    threads[0].start()
    assert placement.held.wait(30)
    for n, thread in enumerate(threads[1:], 1):
        thread.start()
        wait_for(lambda n=n: writes.waiting == n)  # type: ignore[misc]
    placement.hold.set()
    for thread in threads:
        thread.join(30)
        assert not thread.is_alive()
    return threads, errors


def test_a_write_with_nothing_in_flight_is_sent_alone_at_once() -> None:
    writes, placement = Writes(), Placement()
    write(writes, placement, "a", [])
    write(writes, placement, "b", [])
    assert placement.alone == ["a", "b"]
    assert placement.batches == []


def test_writes_made_while_one_is_in_flight_go_in_one_batch() -> None:
    writes, placement = Writes(), Placement()
    _, errors = queued_behind_one(writes, placement, ["a", "b", "c", "d"])
    assert errors == []
    assert placement.alone == ["a"]
    assert placement.batches == [["b", "c", "d"]]
    assert writes.waiting == 0
    write(writes, placement, "e", [])  # nothing in flight any more: alone
    assert placement.alone == ["a", "e"]


def test_the_writes_made_while_placement_s_turn_is_awaited_go_with_the_first() -> None:
    """Where Placement answers one request at a time, the sending thread takes the queue
    once its turn came: what arrived while it waited goes in the same batch."""
    turns = FairLock()
    writes, placement = Writes(turn=lambda: turns), Placement()
    errors: list[Exception] = []
    threads = [threading.Thread(target=write, args=(writes, placement, c, errors)) for c in "abc"]
    with turns:  # another request's turn
        threads[0].start()
        wait_for(lambda: turns.waiting == 1)
        for n, thread in enumerate(threads[1:], 2):
            thread.start()
            wait_for(lambda n=n: writes.waiting == n)  # type: ignore[misc]
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert placement.batches == [["a", "b", "c"]]
    assert placement.alone == []


def test_a_sender_waits_for_the_write_a_claim_under_way_announced() -> None:
    writes, placement = Writes(linger=60), Placement()
    errors: list[Exception] = []
    sender = threading.Thread(target=write, args=(writes, placement, "a", errors))
    with writes.announced():  # this thread's claim, under way
        sender.start()
        wait_for(lambda: writes.waiting == 1)  # "a" waits for the announced write
        assert placement.batches == [] and placement.alone == []
        write(writes, placement, "b", errors)
    sender.join(30)
    assert errors == []
    assert placement.batches == [["a", "b"]]


def test_an_announced_write_that_never_comes_lets_the_sender_go() -> None:
    writes, placement = Writes(linger=60), Placement()
    sender = threading.Thread(target=write, args=(writes, placement, "a", []))
    with writes.announced():  # a claim that ends without writing (nothing free, say)
        sender.start()
        wait_for(lambda: writes.waiting == 1)
    sender.join(30)
    assert not sender.is_alive()
    assert placement.alone == ["a"]


def test_a_batch_placement_refuses_is_written_again_one_by_one() -> None:
    writes, placement = Writes(), Placement(answer=lambda: False)
    _, errors = queued_behind_one(writes, placement, ["a", "b", "c"])
    assert errors == []
    assert placement.batches == [["b", "c"]]
    assert sorted(placement.alone) == ["a", "b", "c"]


def test_the_releases_of_a_refused_batch_go_together_again_before_the_others_go_alone() -> None:
    answers = iter([False, True])
    writes, placement = Writes(), Placement(answer=lambda: next(answers))
    consumers = ["a", "b", "release-c", "d", "release-e"]
    _, errors = queued_behind_one(writes, placement, consumers)
    assert errors == []
    assert placement.batches == [["b", "d", "release-c", "release-e"], ["release-c", "release-e"]]
    assert sorted(placement.alone) == ["a", "b", "d"]


def test_a_batch_whose_outcome_is_unknown_fails_each_of_its_writes() -> None:
    def unreachable() -> bool:
        raise PlacementUnavailable("Placement is unreachable")

    writes, placement = Writes(), Placement(answer=unreachable)
    _, errors = queued_behind_one(writes, placement, ["a", "b", "c"])
    assert [str(e) for e in errors] == ["Placement is unreachable"] * 2
    assert placement.alone == ["a"]  # not written again: it may have been written
    write(writes, placement, "d", [])
    assert placement.alone == ["a", "d"]


@pytest.mark.parametrize(("consumers", "limit", "batches"), [
    (["a", "b", "b", "c"], 32, [["b", "c"], ["b"]]),
    (["a", "b", "c", "d", "e"], 2, [["b", "c"], ["d", "e"]]),
])  # fmt: skip
def test_a_consumer_is_never_twice_in_a_batch_nor_a_batch_over_the_limit(
    consumers: list[str], limit: int, batches: list[list[str]]
) -> None:
    writes, placement = Writes(limit), Placement()
    _, errors = queued_behind_one(writes, placement, consumers)
    assert errors == []
    found = list(placement.batches) + [[c] for c in placement.alone[1:]]
    assert sorted(found) == sorted(batches)
