"""Scheduler: tasks run when the MockClock says they are due, once per due time, and a failure stops nothing."""

from __future__ import annotations

import logging

import pytest

from storage.clock import MockClock
from storage.logdir.scheduler import Scheduler


def test_a_task_runs_after_its_delay_then_every_period(clock: MockClock) -> None:
    scheduler = Scheduler(clock)
    runs: list[int] = []
    scheduler.schedule("tick", lambda: runs.append(clock.milliseconds()), delay_ms=100, period_ms=30)
    start = clock.milliseconds()
    assert scheduler.run_due() == []
    clock.sleep(99)
    assert scheduler.run_due() == []
    clock.sleep(1)
    assert scheduler.run_due() == ["tick"]
    assert scheduler.run_due() == [], "due again only a period later"
    clock.sleep(30)
    assert scheduler.run_due() == ["tick"]
    assert [at - start for at in runs] == [100, 130]
    assert scheduler.next_due_ms() == start + 160


def test_a_late_run_happens_once_not_once_per_missed_period(clock: MockClock) -> None:
    scheduler = Scheduler(clock)
    runs: list[int] = []
    scheduler.schedule("tick", lambda: runs.append(1), delay_ms=0, period_ms=10)
    clock.sleep(1_000)
    assert scheduler.run_due() == ["tick"]
    assert scheduler.run_due() == []
    assert runs == [1]


def test_tasks_run_in_registration_order(clock: MockClock) -> None:
    scheduler = Scheduler(clock)
    for name in ("b", "a", "c"):
        scheduler.schedule(name, lambda: None, delay_ms=5, period_ms=5)
    clock.sleep(5)
    assert scheduler.run_due() == ["b", "a", "c"]


def test_a_failing_task_is_logged_and_stays_scheduled(clock: MockClock, caplog: pytest.LogCaptureFixture) -> None:
    scheduler = Scheduler(clock)
    runs: list[str] = []

    def fail() -> None:
        runs.append("fail")
        raise OSError("disk gone")

    scheduler.schedule("failing", fail, delay_ms=0, period_ms=10)
    scheduler.schedule("healthy", lambda: runs.append("healthy"), delay_ms=0, period_ms=10)
    with caplog.at_level(logging.ERROR):
        assert scheduler.run_due() == ["failing", "healthy"]
    assert "scheduled task failing failed" in caplog.text
    clock.sleep(10)
    scheduler.run_due()
    assert runs == ["fail", "healthy", "fail", "healthy"]


@pytest.mark.parametrize(("delay_ms", "period_ms"), [(0, 0), (-1, 10)])
def test_bad_intervals_are_refused(clock: MockClock, delay_ms: int, period_ms: int) -> None:
    with pytest.raises(ValueError, match="period_ms must be > 0"):
        Scheduler(clock).schedule("bad", lambda: None, delay_ms, period_ms)
