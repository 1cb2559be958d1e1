"""Periodic tasks on an injected clock (Kafka's `Scheduler`, driven like its `MockScheduler`).

`schedule(name, task, delay_ms, period_ms)` registers a task first due `delay_ms` from now, then every
`period_ms` after each run. `run_due()` runs, in registration order, every task due at the clock's current
time, and is all there is to the scheduler: a thread that calls it every tick runs the broker's periodic
work (`actors.server.log_manager_actor`), and a test calls it after moving a `MockClock`. A task that raises is
logged and stays scheduled, so one failing pass never stops the others. A run that comes late (a long
previous task, a tick missed) runs once, not once per missed period.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from storage.clock import Clock

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class _Task:
    name: str
    run: Callable[[], object]
    period_ms: int
    due_ms: int


class Scheduler:
    """Named periodic tasks over `clock`; see the module docstring."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._tasks: list[_Task] = []

    def schedule(self, name: str, task: Callable[[], object], delay_ms: int, period_ms: int) -> None:
        """Runs `task` first `delay_ms` from now, then every `period_ms` after each run."""
        if period_ms <= 0 or delay_ms < 0:
            raise ValueError(f"task {name}: period_ms must be > 0 and delay_ms >= 0, not {period_ms}, {delay_ms}")
        with self._lock:
            self._tasks.append(_Task(name, task, period_ms, self.clock.milliseconds() + delay_ms))

    def next_due_ms(self) -> int | None:
        """When the earliest task is due (None without tasks)."""
        with self._lock:
            return min((task.due_ms for task in self._tasks), default=None)

    def run_due(self) -> list[str]:
        """Runs every task due now; returns their names, in the order they ran."""
        now_ms = self.clock.milliseconds()
        with self._lock:
            due = [task for task in self._tasks if task.due_ms <= now_ms]
            for task in due:
                task.due_ms = now_ms + task.period_ms
        for task in due:
            try:
                task.run()
            except Exception:
                logger.exception("scheduled task %s failed", task.name)
        return [task.name for task in due]
