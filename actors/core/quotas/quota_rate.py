"""A client's byte rate as Kafka's quota sensors measure it, and the throttle time a quota violation earns.

Kafka's `Rate` over a `WindowedSum`: `quota.window.num` samples (default 11) of `quota.window.size.seconds` (default
1 s) each. A value is added to the current sample (a new one starts when the current is older than one window,
replacing the oldest past the count); the rate is the sum of the samples not yet obsolete (started within
`num * size`) over the time they span, counted as at least `num - 1` whole windows, so a client's first burst is
measured against ten seconds rather than the moment it took. When a recorded value takes the rate above the
quota, the throttle time is `(rate - quota) / quota * window` (Kafka's `QuotaUtils.throttleTime`): how long the
client must stay silent for the rate over the window to fall back to the quota.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

# Kafka's `quota.window.num` and `quota.window.size.seconds` defaults.
QUOTA_WINDOW_NUM = 11
QUOTA_WINDOW_SIZE_MS = 1000


@dataclass(slots=True)
class _Sample:
    start_ms: int
    total: float
    events: int


class SampledRate:
    """One quota sensor's samples; see the module docstring. Its `rate` is the byte rate a quota is measured by; the
    same samples of throttle times answer their `average` (Kafka's throttle-time sensor). Not thread-safe: one event
    loop records into it, the metrics exporter reads it (a moment's inconsistency in a gauge, never an error)."""

    def __init__(self, samples: int = QUOTA_WINDOW_NUM, window_ms: int = QUOTA_WINDOW_SIZE_MS) -> None:
        self._count = samples
        self._window_ms = window_ms
        self._samples: deque[_Sample] = deque()

    def record(self, value: float, now_ms: int, quota: float) -> int:
        """Adds `value` at `now_ms`; the throttle time in ms if the rate is now above `quota` (per second), else 0."""
        self._purge(now_ms)
        if not self._samples or now_ms - self._samples[-1].start_ms >= self._window_ms:
            self._samples.append(_Sample(now_ms, 0.0, 0))
            while len(self._samples) > self._count:
                self._samples.popleft()
        self._samples[-1].total += value
        self._samples[-1].events += 1
        window_ms = self._window_size_ms(now_ms, self._samples[0].start_ms)
        rate = sum(sample.total for sample in self._samples) * 1000.0 / window_ms
        if rate <= quota:
            return 0
        return round((rate - quota) / quota * window_ms)

    def unrecord(self, value: float) -> None:
        """Takes back the `value` just recorded (a throttled Fetch answers no records, so its bytes do not count:
        Kafka's `unrecordQuotaSensor`)."""
        if self._samples:
            self._samples[-1].total -= value
            self._samples[-1].events -= 1

    def rate(self, now_ms: int) -> float:
        """The values a second over the window now (Kafka's `Rate.measure`; 0 with none recorded). Reads a copy of
        the samples and changes nothing, so another thread may ask."""
        live = self._live(now_ms)
        if not live:
            return 0.0
        return sum(sample.total for sample in live) * 1000.0 / self._window_size_ms(now_ms, live[0].start_ms)

    def average(self, now_ms: int) -> float:
        """The mean of the values recorded within the window (Kafka's `Avg`; 0 with none recorded); as `rate`,
        from any thread."""
        live = self._live(now_ms)
        events = sum(sample.events for sample in live)
        return sum(sample.total for sample in live) / events if events else 0.0

    def _live(self, now_ms: int) -> list[_Sample]:
        expire_age_ms = self._count * self._window_ms
        return [sample for sample in list(self._samples) if now_ms - sample.start_ms < expire_age_ms]

    def _purge(self, now_ms: int) -> None:
        expire_age_ms = self._count * self._window_ms
        while self._samples and now_ms - self._samples[0].start_ms >= expire_age_ms:
            self._samples.popleft()

    def _window_size_ms(self, now_ms: int, oldest_start_ms: int) -> int:
        elapsed_ms = now_ms - oldest_start_ms
        full_windows = elapsed_ms // self._window_ms
        if full_windows < self._count - 1:
            elapsed_ms += (self._count - 1 - full_windows) * self._window_ms
        return max(elapsed_ms, 1)
