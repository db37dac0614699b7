"""The periodic verification's pace: which hosts each tick verifies, and when ticks come."""

from __future__ import annotations

from acceleron.api.workers import VERIFY_TICK, VerifyTicks
from acceleron.service.publish import verify_slice

HOSTS = [f"compute-{n:04d}" for n in range(200)]


def test_each_host_has_one_tick_of_any_interval() -> None:
    ticks = 12
    slices = [verify_slice(HOSTS, tick, ticks) for tick in range(ticks)]
    assert sorted(h for part in slices for h in part) == HOSTS
    assert [verify_slice(HOSTS, tick, ticks) for tick in range(7, 7 + ticks)] == (
        slices[7:] + slices[:7]
    )
    assert verify_slice(HOSTS, 0, 1) == HOSTS


def test_a_host_coming_or_going_moves_no_other() -> None:
    ticks = 12
    slices = [verify_slice(HOSTS, tick, ticks) for tick in range(ticks)]
    grown = [verify_slice([*HOSTS, "new-host"], tick, ticks) for tick in range(ticks)]
    assert [[h for h in part if h != "new-host"] for part in grown] == slices
    shrunk = [verify_slice(HOSTS[1:], tick, ticks) for tick in range(ticks)]
    assert shrunk == [[h for h in part if h != HOSTS[0]] for part in slices]


def test_ticks_divide_the_interval_and_come_in_turn() -> None:
    pace = VerifyTicks.every(600, now=1000.0)
    assert pace.ticks == round(600 / VERIFY_TICK) and pace.ticks * pace.seconds == 600
    assert not pace.due(1000.0) and pace.due(1000.0 + pace.seconds)
    for _ in range(pace.ticks):
        pace.advance(pace.at)
    assert (pace.tick, pace.at) == (pace.ticks, 1600.0 + pace.seconds)


def test_a_late_tick_pushes_the_next_back_instead_of_a_burst() -> None:
    pace = VerifyTicks.every(600, now=0.0)
    late = pace.at + 10 * pace.seconds  # Placement was away for ten ticks
    pace.advance(late)
    assert pace.tick == 1 and not pace.due(late) and pace.at == late + pace.seconds


def test_an_interval_shorter_than_a_tick_is_one_tick() -> None:
    pace = VerifyTicks.every(2, now=0.0)
    assert (pace.ticks, pace.seconds, pace.at) == (1, 2.0, 2.0)


def test_a_failed_tick_is_tried_again_a_tick_later() -> None:
    """The reconciler's pace: a pass that failed keeps its slice for the next try."""
    pace = VerifyTicks.every(300, now=0.0)
    pace.advance(pace.at)
    failed = pace.at + 1.0
    pace.retry(failed)
    assert pace.tick == 1 and not pace.due(failed) and pace.at == failed + pace.seconds
