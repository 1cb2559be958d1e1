"""Cleaner I/O throttling (Kafka's `Throttler`): `log.cleaner.io.max.bytes.per.second` over all of a pass's
reads and writes."""

from __future__ import annotations

import time
from collections.abc import Callable

from storage.clock import Clock

# Kafka's Throttler measures the rate over windows of at least 300 ms.
THROTTLE_CHECK_INTERVAL_MS = 300


class Throttler:
    """Keeps bytes/second under `rate` by sleeping (Kafka's `Throttler`, checked every 300 ms)."""

    def __init__(self, rate_bytes_per_second: float, clock: Clock, sleep_ms: Callable[[int], None]) -> None:
        self._rate = rate_bytes_per_second
        self._clock = clock
        self._sleep_ms = sleep_ms
        self._period_start_ns = clock.nanoseconds()
        self._observed = 0

    def maybe_throttle(self, observed_bytes: int) -> None:
        self._observed += observed_bytes
        now_ns = self._clock.nanoseconds()
        elapsed_ns = now_ns - self._period_start_ns
        if elapsed_ns <= THROTTLE_CHECK_INTERVAL_MS * 1_000_000 or self._observed <= 0:
            return
        elapsed_ms = elapsed_ns / 1_000_000
        if self._observed * 1000 / elapsed_ms > self._rate:
            sleep_ms = round(self._observed * 1000 / self._rate - elapsed_ms)
            if sleep_ms > 0:
                self._sleep_ms(sleep_ms)
        self._period_start_ns = self._clock.nanoseconds()
        self._observed = 0


def real_sleep_ms(duration_ms: int) -> None:
    time.sleep(duration_ms / 1000)
