"""The loop: backoff schedule, scan schedule (periodic, udev debounce), retries, stop."""

from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path

import pytest
from oslo_config import cfg

from acceleron.agent.client import ApiUnavailable, connect
from acceleron.agent.loop import Agent, Schedule, Settings, backoff_delay
from acceleron.drivers import load_drivers


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- backoff ---------------------------------------------------------------------------


def test_backoff_doubles_up_to_the_cap() -> None:
    top = [backoff_delay(n, initial=1.0, cap=60.0, jitter=1.0) for n in range(9)]
    assert top == [1, 2, 4, 8, 16, 32, 60, 60, 60]


def test_jitter_spreads_each_step_over_its_upper_half() -> None:
    for attempt in range(10):
        ceiling = backoff_delay(attempt, 0.5, 30.0, jitter=1.0)
        assert backoff_delay(attempt, 0.5, 30.0, jitter=0.0) == ceiling / 2
        assert ceiling / 2 <= backoff_delay(attempt, 0.5, 30.0, jitter=0.37) <= ceiling


def test_backoff_stays_capped_after_days_of_retries() -> None:
    assert backoff_delay(10_000, 1.0, 60.0, jitter=1.0) == 60.0


# -- the scan schedule ------------------------------------------------------------------


def test_first_scan_at_once_then_periodic() -> None:
    clock = FakeClock()
    schedule = Schedule(debounce=2.0, clock=clock)
    assert schedule.due == clock.now
    assert schedule.wait() is True
    schedule.next_scan(60.0)
    assert schedule.due == clock.now + 60


def test_a_burst_of_events_makes_one_scan_debounce_seconds_after_its_first() -> None:
    clock = FakeClock()
    schedule = Schedule(debounce=2.0, clock=clock)
    schedule.wait()
    schedule.next_scan(60.0)
    start = clock.now
    for _ in range(40):  # enabling VFs: dozens of events in a second
        schedule.event()
        clock.now += 0.025
    assert schedule.due == start + 2.0
    clock.now = start + 2.0
    assert schedule.wait() is True  # the scan
    schedule.next_scan(60.0)
    assert schedule.due == clock.now + 60  # the burst is served


def test_an_event_during_a_scan_brings_another_scan() -> None:
    clock = FakeClock()
    schedule = Schedule(debounce=2.0, clock=clock)
    schedule.wait()  # a scan starts...
    clock.now += 0.5
    schedule.event()  # ...the device changes while sysfs is being read...
    schedule.next_scan(60.0)  # ...the scan ends
    assert schedule.due == clock.now + 2.0


def test_events_do_not_cut_a_backoff_short() -> None:
    clock = FakeClock()
    schedule = Schedule(debounce=2.0, clock=clock)
    schedule.wait()
    schedule.next_scan(30.0, hold=True)
    schedule.event()
    assert schedule.due == clock.now + 30


def test_an_event_wakes_a_waiting_loop_and_stop_ends_it() -> None:
    schedule = Schedule(debounce=0.05)
    schedule.wait()
    schedule.next_scan(3600.0)
    woke: list[bool] = []
    thread = threading.Thread(target=lambda: woke.append(schedule.wait()))
    thread.start()
    schedule.event()
    thread.join(timeout=5)
    assert woke == [True]
    thread = threading.Thread(target=lambda: woke.append(schedule.wait()))
    thread.start()
    schedule.next_scan(3600.0)
    schedule.stop()
    thread.join(timeout=5)
    assert woke == [True, False]


# -- the loop ---------------------------------------------------------------------------


def unreachable_agent(conf: cfg.ConfigOpts, tmp_path: Path) -> Agent:
    conf.set_override("api_endpoint", "http://127.0.0.1:1", group="agent")
    conf.set_override("backoff_initial", 0.02, group="agent")
    conf.set_override("backoff_max", 0.08, group="agent")
    return Agent(Settings.from_conf(conf), load_drivers(conf, tmp_path), connect(conf))


def test_report_once_raises_while_the_api_is_unreachable(
    agent_conf: cfg.ConfigOpts, tmp_path: Path
) -> None:
    agent = unreachable_agent(agent_conf, tmp_path)
    with pytest.raises(ApiUnavailable) as raised:
        agent.report_once()
    url = "http://127.0.0.1:1/v2/hosts/fakehost/report"
    assert str(raised.value) == f"cannot reach {url}: Connection refused"


def test_the_loop_backs_off_logging_each_attempt_once_until_stopped(
    agent_conf: cfg.ConfigOpts, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="acceleron.agent")
    agent = unreachable_agent(agent_conf, tmp_path)
    thread = threading.Thread(target=agent.run)
    thread.start()
    deadline = time.monotonic() + 10
    while "attempt 5" not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.01)
    agent.stop()
    thread.join(timeout=5)
    assert not thread.is_alive()
    attempts = [r.getMessage() for r in caplog.records if "Report not sent" in r.getMessage()]
    assert len(attempts) >= 5
    for number, message in enumerate(attempts[:5], 1):
        assert re.fullmatch(
            rf"Report not sent \(attempt {number}\): cannot reach http://127.0.0.1:1/\S+: "
            r"Connection refused. Retrying in 0\.[0-9]+ s\.",
            message,
        ), message


def test_settings_come_from_the_configuration(agent_conf: cfg.ConfigOpts) -> None:
    agent_conf.set_override("report_interval", 30, group="agent")
    agent_conf.set_override("backoff_max", 0.5, group="agent")  # below initial: raised to it
    settings = Settings.from_conf(agent_conf)
    assert settings == Settings("fakehost", 30.0, 1.0, 1.0, 2.0)


def test_a_fault_scans_at_once_but_not_during_a_backoff() -> None:
    clock = FakeClock()
    schedule = Schedule(debounce=2.0, clock=clock)
    schedule.wait()
    schedule.next_scan(60.0)
    schedule.urgent()  # an XID, or a PCI error recovery uevent: no debounce
    assert schedule.due == clock.now
    schedule.next_scan(30.0, hold=True)  # the API is away: a fault does not cut it short
    schedule.urgent()
    assert schedule.due == clock.now + 30
