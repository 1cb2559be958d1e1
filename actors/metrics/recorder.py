"""What the broker's roles tell about their work, and the in-process record of it: `BrokerMetrics`.

The roles call one method per batch, request or event, never per record: a partition's append (`produced`), a
Kafka Fetch answer (`fetched`), a Kafka request answered (`request_answered`), a ShareFetch or ShareAcknowledge
(`share_requested`), a connection opened or closed, a failed login, an ISR change, a compaction pass, a share
consumer's acknowledgements applied (`share_acknowledged`), an Iceberg translation round committed or failed
(`iceberg_committed`, `iceberg_round_failed`).
Values the broker already holds (a log's size, the cluster's offline partitions, consumer lag, a share-partition's
in-flight records and backlog) are not pushed: a role registers a `GaugeSource`, read each time the metrics are
exported. A source may also give a counter's total so far, one the role keeps itself and that only grows (a
share-partition's redelivered and archived records: counted inside its state changes, which hold no recorder).

`NO_METRICS` does nothing: the plain classes take it by default, so they run and are tested without a recorder.
The plain roles of `actors.core` see only their part of `BrokerMetrics`, `actors.core.role_metrics.RoleMetrics`
(that package imports nothing of `actors` outside itself).
`MetricsRecorder` keeps the counts of one process in memory under one lock: ~1 us of CPU a call (`produced` 0.9-1.1
us, `request_answered` 1.8 us, measured with every core busy), where one `ray.util.metrics.Counter.inc` costs 3.5
us of CPU (11-13 us of wall time): the four series of an append (messages and bytes, per topic and in all) would add
~14 us to a 16 KiB batch whose validation takes ~100 us. `actors.metrics.ray_export` reads a
recorder's `snapshot()` every few seconds and hands the differences to Ray's metrics. Tests assert on `value`.

Kafka's conventions live here, not in the roles: a per-topic counter also counts under `topic=""` (the broker's
total series, as Kafka registers `BrokerTopicMetrics` without a topic), and a Fetch request also under
`FetchConsumer` (see `actors.metrics.names`).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from actors.core.role_metrics import NoRoleMetrics, RoleMetrics
from actors.metrics.names import (
    BYTES_IN,
    BYTES_OUT,
    CLEANER_BYTES_READ,
    CLEANER_BYTES_WRITTEN,
    CLEANER_MAX_CLEAN_TIME,
    CLEANER_PASSES,
    CLEANER_RECOPY_PERCENT,
    CONNECTION_COUNT,
    CONNECTION_CREATION,
    FAILED_AUTHENTICATION,
    FAILED_SHARE_ACKNOWLEDGEMENT_REQUESTS,
    FAILED_SHARE_FETCH_REQUESTS,
    ICEBERG_BYTES_WRITTEN,
    ICEBERG_DEAD_LETTERS,
    ICEBERG_FILES_WRITTEN,
    ICEBERG_ROUNDS_FAILED,
    ISR_EXPANDS,
    ISR_SHRINKS,
    MESSAGES_IN,
    REASSIGNMENT_BYTES_IN,
    REASSIGNMENT_BYTES_OUT,
    REQUEST_TOTAL_TIME_MS,
    REQUESTS,
    SHARE_ACKNOWLEDGEMENT_REQUESTS,
    SHARE_FETCH_REQUESTS,
    SHARE_RECORD_ACKNOWLEDGEMENTS,
    MetricKind,
    MetricSpec,
)

Labels = tuple[str, ...]
# One gauge value: its metric, its label values (in the spec's label order) and the value.
Sample = tuple[MetricSpec, Labels, float]
GaugeSource = Callable[[], Iterable[Sample]]

ALL_TOPICS = ""
FETCH_REQUEST = "Fetch"
# Kafka's RequestMetrics counts a consumer's Fetch under both names.
FETCH_CONSUMER_REQUEST = "FetchConsumer"


class BrokerMetrics(RoleMetrics, Protocol):
    """What the broker's roles report (see the module docstring): the plain roles' events (`RoleMetrics`: `produced`,
    `isr_changed`, `share_acknowledged`) and those of the Kafka listener, the cleaner and the gauge sources."""

    def fetched(self, topic: str, size_bytes: int) -> None:
        """A Kafka Fetch answer carried `size_bytes` of record batches of `topic`."""

    def request_answered(self, request: str, version: int, elapsed_ms: float) -> None:
        """A Kafka request (`request` is its API's name, e.g. `Produce`) was answered `elapsed_ms` after it was read."""

    def connection_opened(self, listener: str) -> None: ...

    def connection_closed(self, listener: str) -> None: ...

    def authentication_failed(self, listener: str) -> None: ...

    def share_requested(self, acknowledging: bool, topics: Iterable[str], failed: Iterable[str]) -> None:
        """A ShareFetch fetched (`acknowledging` False) or a request acknowledged (True) records of `topics`, and a
        partition of each of `failed` answered an error; each topic counts once."""

    def cleaned(self, bytes_read: int, bytes_written: int, elapsed_s: float) -> None:
        """A compaction pass read and wrote these bytes in `elapsed_s`."""

    def iceberg_committed(self, topic: str, files: int, size_bytes: int, dead_letters: int) -> None:
        """A translation round of `topic` committed `files` data files of `size_bytes` to its Iceberg table (and
        dead-letter table), `dead_letters` records of them to the dead-letter table."""

    def iceberg_round_failed(self, topic: str) -> None:
        """A translation round of `topic` failed (it is tried again at the next pass)."""

    def add_gauges(self, source: GaugeSource) -> None:
        """Reads `source` each time the metrics are exported, until `remove_gauges`."""

    def remove_gauges(self, source: GaugeSource) -> None: ...


class NoMetrics(NoRoleMetrics):
    """Records nothing."""

    def fetched(self, topic: str, size_bytes: int) -> None:
        pass

    def request_answered(self, request: str, version: int, elapsed_ms: float) -> None:
        pass

    def connection_opened(self, listener: str) -> None:
        pass

    def connection_closed(self, listener: str) -> None:
        pass

    def authentication_failed(self, listener: str) -> None:
        pass

    def share_requested(self, acknowledging: bool, topics: Iterable[str], failed: Iterable[str]) -> None:
        pass

    def cleaned(self, bytes_read: int, bytes_written: int, elapsed_s: float) -> None:
        pass

    def iceberg_committed(self, topic: str, files: int, size_bytes: int, dead_letters: int) -> None:
        pass

    def iceberg_round_failed(self, topic: str) -> None:
        pass

    def add_gauges(self, source: GaugeSource) -> None:
        pass

    def remove_gauges(self, source: GaugeSource) -> None:
        pass


NO_METRICS = NoMetrics()


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """A process's metrics at one moment: counters and histogram buckets since the recorder started, gauges now.
    Keys are (metric, label values); a histogram's value is its bucket counts, the last one for values above the
    highest bound (`+Inf`)."""

    counters: dict[tuple[MetricSpec, Labels], float]
    histograms: dict[tuple[MetricSpec, Labels], tuple[int, ...]]
    gauges: dict[tuple[MetricSpec, Labels], float]


def _request_names(request: str) -> tuple[str, ...]:
    """The names a request counts under: a Fetch also as FetchConsumer (every Kafka-protocol Fetch here is a
    consumer's)."""
    return (request, FETCH_CONSUMER_REQUEST) if request == FETCH_REQUEST else (request,)


class MetricsRecorder:
    """One process's metrics, in memory (see the module docstring). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # topic -> [records in, bytes in, bytes out]: the hot paths' counts, one dict lookup a call.
        self._traffic: dict[str, list[int]] = {}
        # (API name, version) -> requests answered, and API name -> latency bucket counts.
        self._requests: dict[tuple[str, int], int] = {}
        self._latencies: dict[str, list[int]] = {}
        self._counters: dict[tuple[MetricSpec, Labels], float] = {}
        self._gauges: dict[tuple[MetricSpec, Labels], float] = {}
        self._sources: list[GaugeSource] = []

    # --- the roles' events ------------------------------------------------------------------------

    def produced(self, topic: str, records: int, size_bytes: int) -> None:
        with self._lock:
            traffic = self._traffic.get(topic)
            if traffic is None:
                traffic = self._traffic[topic] = [0, 0, 0]
            traffic[0] += records
            traffic[1] += size_bytes

    def fetched(self, topic: str, size_bytes: int) -> None:
        with self._lock:
            traffic = self._traffic.get(topic)
            if traffic is None:
                traffic = self._traffic[topic] = [0, 0, 0]
            traffic[2] += size_bytes

    def request_answered(self, request: str, version: int, elapsed_ms: float) -> None:
        bucket = bisect.bisect_left(REQUEST_TOTAL_TIME_MS.buckets, elapsed_ms)
        with self._lock:
            key = (request, version)
            self._requests[key] = self._requests.get(key, 0) + 1
            counts = self._latencies.get(request)
            if counts is None:
                counts = self._latencies[request] = [0] * (len(REQUEST_TOTAL_TIME_MS.buckets) + 1)
            counts[bucket] += 1

    def connection_opened(self, listener: str) -> None:
        with self._lock:
            self._add(CONNECTION_CREATION, (listener,), 1)
            key = (CONNECTION_COUNT, (listener,))
            self._gauges[key] = self._gauges.get(key, 0) + 1

    def connection_closed(self, listener: str) -> None:
        with self._lock:
            key = (CONNECTION_COUNT, (listener,))
            self._gauges[key] = self._gauges.get(key, 0) - 1

    def authentication_failed(self, listener: str) -> None:
        with self._lock:
            self._add(FAILED_AUTHENTICATION, (listener,), 1)

    def isr_changed(self, before: int, after: int) -> None:
        if after == before:
            return
        with self._lock:
            self._add(ISR_SHRINKS if after < before else ISR_EXPANDS, (), 1)

    def share_requested(self, acknowledging: bool, topics: Iterable[str], failed: Iterable[str]) -> None:
        total, failures = (
            (SHARE_ACKNOWLEDGEMENT_REQUESTS, FAILED_SHARE_ACKNOWLEDGEMENT_REQUESTS)
            if acknowledging
            else (SHARE_FETCH_REQUESTS, FAILED_SHARE_FETCH_REQUESTS)
        )
        with self._lock:
            # Kafka marks the all-topics meter once for each topic too.
            for spec, names in ((total, set(topics)), (failures, set(failed))):
                for topic in names:
                    self._add(spec, (topic,), 1)
                    self._add(spec, (ALL_TOPICS,), 1)

    def share_acknowledged(self, records_by_type: Mapping[str, int]) -> None:
        with self._lock:
            for ack_type, records in records_by_type.items():
                self._add(SHARE_RECORD_ACKNOWLEDGEMENTS, (ack_type,), records)

    def reassignment_bytes_in(self, size_bytes: int) -> None:
        with self._lock:
            self._add(REASSIGNMENT_BYTES_IN, (), size_bytes)

    def reassignment_bytes_out(self, size_bytes: int) -> None:
        with self._lock:
            self._add(REASSIGNMENT_BYTES_OUT, (), size_bytes)

    def cleaned(self, bytes_read: int, bytes_written: int, elapsed_s: float) -> None:
        with self._lock:
            self._add(CLEANER_PASSES, (), 1)
            self._add(CLEANER_BYTES_READ, (), bytes_read)
            self._add(CLEANER_BYTES_WRITTEN, (), bytes_written)
            self._gauges[(CLEANER_MAX_CLEAN_TIME, ())] = elapsed_s
            self._gauges[(CLEANER_RECOPY_PERCENT, ())] = 100.0 * bytes_written / bytes_read if bytes_read else 0.0

    def iceberg_committed(self, topic: str, files: int, size_bytes: int, dead_letters: int) -> None:
        with self._lock:
            self._add(ICEBERG_FILES_WRITTEN, (topic,), files)
            self._add(ICEBERG_BYTES_WRITTEN, (topic,), size_bytes)
            if dead_letters:
                self._add(ICEBERG_DEAD_LETTERS, (topic,), dead_letters)

    def iceberg_round_failed(self, topic: str) -> None:
        with self._lock:
            self._add(ICEBERG_ROUNDS_FAILED, (topic,), 1)

    def add_gauges(self, source: GaugeSource) -> None:
        with self._lock:
            self._sources.append(source)

    def remove_gauges(self, source: GaugeSource) -> None:
        with self._lock:
            if source in self._sources:
                self._sources.remove(source)

    def _add(self, spec: MetricSpec, labels: Labels, amount: float) -> None:
        key = (spec, labels)
        self._counters[key] = self._counters.get(key, 0) + amount

    # --- reading --------------------------------------------------------------------------------

    def snapshot(self) -> MetricsSnapshot:
        """Everything recorded so far, and the gauge sources read now (a source that fails is left out)."""
        with self._lock:
            counters = dict(self._counters)
            totals = [0, 0, 0]
            for topic, traffic in self._traffic.items():
                for spec, index in ((MESSAGES_IN, 0), (BYTES_IN, 1), (BYTES_OUT, 2)):
                    if traffic[index]:
                        counters[(spec, (topic,))] = traffic[index]
                        totals[index] += traffic[index]
            for spec, index in ((MESSAGES_IN, 0), (BYTES_IN, 1), (BYTES_OUT, 2)):
                if totals[index]:
                    counters[(spec, (ALL_TOPICS,))] = totals[index]
            histograms: dict[tuple[MetricSpec, Labels], tuple[int, ...]] = {}
            for (request, version), answered in self._requests.items():
                for name in _request_names(request):
                    counters[(REQUESTS, (name, str(version)))] = answered
            for request, counts in self._latencies.items():
                for name in _request_names(request):
                    histograms[(REQUEST_TOTAL_TIME_MS, (name,))] = tuple(counts)
            gauges = dict(self._gauges)
            sources = list(self._sources)
        for source in sources:
            try:
                samples = list(source())
            except Exception:
                # A role in the middle of closing; its values are simply not refreshed this time.
                continue
            for spec, labels, value in samples:
                # A source's counter sample is the counter's total so far (it only grows), a gauge's its value now.
                (counters if spec.kind is MetricKind.COUNTER else gauges)[(spec, labels)] = value
        return MetricsSnapshot(counters, histograms, gauges)

    def value(self, spec: MetricSpec, *labels: str) -> float:
        """The current value of one series (0 when never recorded); for a histogram, its count."""
        snapshot = self.snapshot()
        key = (spec, tuple(labels))
        if spec.kind is MetricKind.HISTOGRAM:
            return sum(snapshot.histograms.get(key, ()))
        if spec.kind is MetricKind.COUNTER:
            return snapshot.counters.get(key, 0)
        return snapshot.gauges.get(key, 0)
