"""Injected time, so rolling, retention and compaction are testable (Kafka's `Time` / `MockTime`).

Storage code never calls `time.time()` directly: it asks the `Clock` it was given.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Wall-clock milliseconds and a monotonic nanosecond counter."""

    def milliseconds(self) -> int: ...

    def nanoseconds(self) -> int: ...


class SystemClock:
    """The real clock."""

    def milliseconds(self) -> int:
        return time.time_ns() // 1_000_000

    def nanoseconds(self) -> int:
        return time.monotonic_ns()


class MockClock:
    """A clock that moves only when a test calls `sleep`."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now_ns = start_ms * 1_000_000

    def milliseconds(self) -> int:
        return self._now_ns // 1_000_000

    def nanoseconds(self) -> int:
        return self._now_ns

    def sleep(self, duration_ms: int) -> None:
        """Advance the clock by `duration_ms`."""
        self._now_ns += duration_ms * 1_000_000


SYSTEM_CLOCK = SystemClock()
