"""A process's metrics handed to Ray's: each Ray node's metrics agent serves them to Prometheus beside Ray's own.

Why Ray's metrics (`ray.util.metrics`) and not an HTTP endpoint per broker process: the counts are made in many
processes per node (every partition actor or host, the listeners, the cleaners, the controller), and Ray already
gathers every worker's metrics into one endpoint per node (`http://<node>:<metrics_export_port>/metrics`, the one
Ray's own Grafana dashboards read). An endpoint of our own would need a port per process, or a collector that
gathers from every process over Ray calls: what Ray's agent already is. What it costs, and how it is paid:
- Ray's recording calls are slow for a hot path (3.5 us of CPU a `Counter.inc`), so the roles record into the
  process's `MetricsRecorder` (~1 us), and a daemon thread hands Ray the differences every half of Ray's report
  interval (`export_interval_s`).
- Ray's agent serves what workers reported every `metrics_report_interval_ms` (10 s by default, 1 s at least): a
  value reaches Prometheus up to 1.5 intervals (15 s by default) after it was recorded.
- Ray renames (`ray_` in front: `configs/prometheus.yml` strips it) and adds its labels, among them `WorkerId`: one
  series per process, so queries sum (`sum by (topic)`). A restarted process starts new series.
- Ray drops a gauge that was not set again within two report intervals (a gone partition's size disappears by
  itself), so every gauge is set again at every export: a partition process sets 4 (5-20 us each), a partition host
  of 100 partitions 400, ~2-8 ms of CPU per export. A histogram reaches Ray as bucket counts and its `_sum` is
  rebuilt from bucket midpoints; observations are replayed here at the midpoints, which gives Ray the same counts.

`exported_metrics()` is the process's recorder, exported once Ray is up; `RAYBROKER_METRICS=off` in the
environment of the processes (set before Ray starts: workers inherit it) makes it `NO_METRICS`, for measuring what
metrics cost.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import ray
from ray.util.metrics import Counter, Gauge, Histogram

from actors.metrics.names import MetricKind, MetricSpec
from actors.metrics.recorder import NO_METRICS, BrokerMetrics, Labels, MetricsRecorder, MetricsSnapshot

logger = logging.getLogger(__name__)

# The shortest export interval: Ray reports at most once a second (`metrics_report_interval_ms` is floored at 1000).
MIN_EXPORT_INTERVAL_S = 1.0
METRICS_SWITCH = "RAYBROKER_METRICS"

_process_lock = threading.Lock()
_process_metrics: BrokerMetrics | None = None


class RayMetricsExporter:
    """Hands one recorder's metrics to Ray: counters and histograms as the differences since the last export,
    gauges as they are now. `export()` runs on the caller's thread; `start()` runs it every `interval_s` on a
    daemon thread of its own."""

    def __init__(self, recorder: MetricsRecorder, interval_s: float = MIN_EXPORT_INTERVAL_S) -> None:
        self._recorder = recorder
        self._interval_s = interval_s
        self._ray_metrics: dict[MetricSpec, Any] = {}
        self._exported_counters: dict[tuple[MetricSpec, Labels], float] = {}
        self._exported_histograms: dict[tuple[MetricSpec, Labels], tuple[int, ...]] = {}
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="raybroker-metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()

    def _run(self) -> None:
        while not self._stopping.wait(self._interval_s):
            try:
                self.export()
            except Exception:
                logger.exception("exporting metrics to Ray failed")

    def export(self) -> None:
        if not ray.is_initialized():
            # A driver between `ray.shutdown()` and its next `ray.init()`: the counts wait for the next session.
            return
        snapshot = self._recorder.snapshot()
        self._export_counters(snapshot)
        self._export_histograms(snapshot)
        for (spec, labels), value in snapshot.gauges.items():
            self._metric(spec).set(value, _tags(spec, labels))

    def _export_counters(self, snapshot: MetricsSnapshot) -> None:
        for key, total in snapshot.counters.items():
            delta = total - self._exported_counters.get(key, 0)
            if delta > 0:
                spec, labels = key
                self._metric(spec).inc(delta, _tags(spec, labels))
                self._exported_counters[key] = total

    def _export_histograms(self, snapshot: MetricsSnapshot) -> None:
        for key, counts in snapshot.histograms.items():
            before = self._exported_histograms.get(key, (0,) * len(counts))
            if counts == before:
                continue
            spec, labels = key
            histogram, tags = self._metric(spec), _tags(spec, labels)
            for midpoint, now, then in zip(_midpoints(spec.buckets), counts, before, strict=True):
                for _ in range(now - then):
                    histogram.observe(midpoint, tags)
            self._exported_histograms[key] = counts

    def _metric(self, spec: MetricSpec) -> Any:
        metric = self._ray_metrics.get(spec)
        if metric is None:
            if spec.kind is MetricKind.COUNTER:
                metric = Counter(spec.name, spec.help, tag_keys=spec.labels)
            elif spec.kind is MetricKind.HISTOGRAM:
                metric = Histogram(spec.name, spec.help, boundaries=list(spec.buckets), tag_keys=spec.labels)
            else:
                metric = Gauge(spec.name, spec.help, tag_keys=spec.labels)
            self._ray_metrics[spec] = metric
        return metric


def _tags(spec: MetricSpec, labels: Labels) -> dict[str, str]:
    return dict(zip(spec.labels, labels, strict=True))


def _midpoints(bounds: tuple[float, ...]) -> list[float]:
    """A value inside each bucket (bounds are positive), and twice the highest bound for `+Inf`: the values Ray's
    agent itself uses when it rebuilds a histogram from bucket counts."""
    lower = (0.0, *bounds[:-1])
    return [(low + high) / 2 for low, high in zip(lower, bounds, strict=True)] + [bounds[-1] * 2]


def export_interval_s() -> float:
    """Half of Ray's report interval (`metrics_report_interval_ms`, 10 s by default; read from Ray's config, as Ray's
    own recorder reads it), at least 1 s: every gauge is set again before Ray's expiry of two intervals, and a
    value waits at most half an interval longer than Ray makes it wait anyway."""
    return max(MIN_EXPORT_INTERVAL_S, ray._config.metrics_report_interval_ms() / 2000)


def metrics_enabled() -> bool:
    return os.environ.get(METRICS_SWITCH, "on").strip().lower() not in ("off", "0", "false")


def exported_metrics() -> BrokerMetrics:
    """This process's `MetricsRecorder`, exported to Ray from the first call made while Ray is up (once per
    process); `NO_METRICS` when `RAYBROKER_METRICS=off`."""
    global _process_metrics
    with _process_lock:
        if _process_metrics is None:
            if not metrics_enabled():
                _process_metrics = NO_METRICS
            elif ray.is_initialized():
                recorder = MetricsRecorder()
                RayMetricsExporter(recorder, export_interval_s()).start()
                _process_metrics = recorder
        return NO_METRICS if _process_metrics is None else _process_metrics
