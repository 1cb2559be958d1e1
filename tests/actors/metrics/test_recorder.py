"""The in-process recorder: counts against a plain model, Kafka's conventions (the broker-wide `topic=""` series,
a Fetch also counted as FetchConsumer), histogram buckets as Prometheus' `le` reads them, gauge sources, and exact
counts under concurrent callers."""

from __future__ import annotations

import random
import threading
from collections import Counter

import pytest

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
    LATENCY_BUCKETS_MS,
    LOG_SIZE,
    MESSAGES_IN,
    REQUEST_TOTAL_TIME_MS,
    REQUESTS,
    SHARE_ACKNOWLEDGEMENT_REQUESTS,
    SHARE_BACKLOG,
    SHARE_FETCH_REQUESTS,
    SHARE_RECORD_ACKNOWLEDGEMENTS,
    SHARE_REDELIVERED,
)
from actors.metrics.recorder import NO_METRICS, BrokerMetrics, MetricsRecorder, Sample


def test_produced_and_fetched_count_per_topic_and_for_all_topics_as_kafka_does() -> None:
    recorder = MetricsRecorder()
    rng = random.Random(7)
    records: Counter[str] = Counter()
    bytes_in: Counter[str] = Counter()
    bytes_out: Counter[str] = Counter()
    for _ in range(500):
        topic = rng.choice(["orders", "clicks", "a.b-c_d"])
        if rng.random() < 0.6:
            count, size = rng.randint(1, 500), rng.randint(70, 1 << 20)
            recorder.produced(topic, count, size)
            records[topic] += count
            bytes_in[topic] += size
        else:
            size = rng.randint(0, 1 << 20)
            recorder.fetched(topic, size)
            bytes_out[topic] += size
    for topic in records | bytes_out:
        assert recorder.value(MESSAGES_IN, topic) == records[topic]
        assert recorder.value(BYTES_IN, topic) == bytes_in[topic]
        assert recorder.value(BYTES_OUT, topic) == bytes_out[topic]
    assert recorder.value(MESSAGES_IN, "") == sum(records.values())
    assert recorder.value(BYTES_IN, "") == sum(bytes_in.values())
    assert recorder.value(BYTES_OUT, "") == sum(bytes_out.values())
    assert recorder.value(MESSAGES_IN, "never") == 0


def test_a_topic_only_read_has_no_messages_in_series() -> None:
    recorder = MetricsRecorder()
    recorder.fetched("read-only", 100)
    counters = recorder.snapshot().counters
    assert (BYTES_OUT, ("read-only",)) in counters
    assert (MESSAGES_IN, ("read-only",)) not in counters
    assert (BYTES_IN, ("",)) not in counters


def test_a_fetch_counts_under_fetch_and_fetch_consumer_with_its_version() -> None:
    recorder = MetricsRecorder()
    recorder.request_answered("Fetch", 12, 3.0)
    recorder.request_answered("Fetch", 11, 600.0)
    recorder.request_answered("Produce", 10, 0.2)
    assert recorder.value(REQUESTS, "Fetch", "12") == 1
    assert recorder.value(REQUESTS, "FetchConsumer", "12") == 1
    assert recorder.value(REQUESTS, "FetchConsumer", "11") == 1
    assert recorder.value(REQUESTS, "Produce", "10") == 1
    assert recorder.value(REQUEST_TOTAL_TIME_MS, "Fetch") == 2
    assert recorder.value(REQUEST_TOTAL_TIME_MS, "FetchConsumer") == 2
    assert recorder.value(REQUEST_TOTAL_TIME_MS, "Produce") == 1


@pytest.mark.parametrize(
    ("elapsed_ms", "bucket"),
    [
        (0.0, 0),
        (0.5, 0),  # le="0.5" holds 0.5 itself
        (0.5001, 1),
        (1.0, 1),
        (29_999.0, len(LATENCY_BUCKETS_MS) - 1),
        (30_000.0, len(LATENCY_BUCKETS_MS) - 1),
        (30_000.1, len(LATENCY_BUCKETS_MS)),  # +Inf
    ],
)
def test_latencies_land_in_the_bucket_prometheus_le_names(elapsed_ms: float, bucket: int) -> None:
    recorder = MetricsRecorder()
    recorder.request_answered("Metadata", 12, elapsed_ms)
    counts = recorder.snapshot().histograms[(REQUEST_TOTAL_TIME_MS, ("Metadata",))]
    assert len(counts) == len(LATENCY_BUCKETS_MS) + 1
    assert [index for index, count in enumerate(counts) if count] == [bucket]


def test_connections_open_close_and_failed_logins_per_listener() -> None:
    recorder = MetricsRecorder()
    for _ in range(3):
        recorder.connection_opened("PLAINTEXT")
    recorder.connection_opened("SASL_SSL")
    recorder.connection_closed("PLAINTEXT")
    recorder.authentication_failed("SASL_SSL")
    assert recorder.value(CONNECTION_COUNT, "PLAINTEXT") == 2
    assert recorder.value(CONNECTION_COUNT, "SASL_SSL") == 1
    assert recorder.value(CONNECTION_CREATION, "PLAINTEXT") == 3
    assert recorder.value(FAILED_AUTHENTICATION, "SASL_SSL") == 1
    assert recorder.value(FAILED_AUTHENTICATION, "PLAINTEXT") == 0


def test_isr_changes_count_shrinks_and_expands_only() -> None:
    recorder = MetricsRecorder()
    for before, after in [(3, 2), (2, 1), (1, 3), (3, 3), (2, 2)]:
        recorder.isr_changed(before, after)
    assert recorder.value(ISR_SHRINKS) == 2
    assert recorder.value(ISR_EXPANDS) == 1


def test_cleaner_passes_add_up_and_the_gauges_describe_the_last() -> None:
    recorder = MetricsRecorder()
    recorder.cleaned(1000, 250, 1.5)
    recorder.cleaned(4000, 1000, 0.25)
    recorder.cleaned(0, 0, 0.01)
    assert recorder.value(CLEANER_PASSES) == 3
    assert recorder.value(CLEANER_BYTES_READ) == 5000
    assert recorder.value(CLEANER_BYTES_WRITTEN) == 1250
    assert recorder.value(CLEANER_MAX_CLEAN_TIME) == 0.01
    assert recorder.value(CLEANER_RECOPY_PERCENT) == 0.0
    recorder.cleaned(800, 200, 2.0)
    assert recorder.value(CLEANER_RECOPY_PERCENT) == 25.0


def test_gauge_sources_are_read_at_each_snapshot_until_removed() -> None:
    recorder = MetricsRecorder()
    size = [100]

    def log_size() -> list[Sample]:
        return [(LOG_SIZE, ("orders", "0"), size[0])]

    def broken() -> list[Sample]:
        raise RuntimeError("closing")

    recorder.add_gauges(log_size)
    recorder.add_gauges(broken)
    assert recorder.value(LOG_SIZE, "orders", "0") == 100
    size[0] = 250
    assert recorder.value(LOG_SIZE, "orders", "0") == 250
    recorder.remove_gauges(log_size)
    recorder.remove_gauges(log_size)  # again: nothing happens
    assert (LOG_SIZE, ("orders", "0")) not in recorder.snapshot().gauges


def test_a_sources_counter_sample_is_the_counters_total_and_its_gauge_sample_a_gauge() -> None:
    """A source may give a counter's total it keeps itself (a share-partition's redelivered records): the snapshot
    holds it among the counters, which the export hands to Ray as differences, and a gauge's sample among the
    gauges."""
    recorder = MetricsRecorder()
    labels = ("workers", "tasks", "0")
    recorder.add_gauges(lambda: [(SHARE_REDELIVERED, labels, 7), (SHARE_BACKLOG, labels, 3)])
    snapshot = recorder.snapshot()
    assert snapshot.counters[(SHARE_REDELIVERED, labels)] == 7
    assert snapshot.gauges[(SHARE_BACKLOG, labels)] == 3
    assert (SHARE_REDELIVERED, labels) not in snapshot.gauges


def test_concurrent_callers_lose_no_count() -> None:
    recorder = MetricsRecorder()
    threads, calls = 8, 5000

    def work() -> None:
        for _ in range(calls):
            recorder.produced("orders", 3, 100)
            recorder.fetched("orders", 7)
            recorder.request_answered("Produce", 9, 1.0)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert recorder.value(MESSAGES_IN, "orders") == threads * calls * 3
    assert recorder.value(BYTES_IN, "orders") == threads * calls * 100
    assert recorder.value(BYTES_OUT, "orders") == threads * calls * 7
    assert recorder.value(REQUESTS, "Produce", "9") == threads * calls


def test_no_metrics_records_nothing_and_takes_every_call() -> None:
    metrics: BrokerMetrics = NO_METRICS
    metrics.produced("t", 1, 1)
    metrics.fetched("t", 1)
    metrics.request_answered("Produce", 9, 1.0)
    metrics.connection_opened("PLAINTEXT")
    metrics.connection_closed("PLAINTEXT")
    metrics.authentication_failed("PLAINTEXT")
    metrics.isr_changed(2, 1)
    metrics.cleaned(1, 1, 1.0)
    metrics.share_requested(True, ["t"], ["t"])
    metrics.share_acknowledged({"Accept": 1})
    metrics.add_gauges(list)
    metrics.remove_gauges(list)


def test_share_requests_count_once_per_topic_and_for_all_topics_and_acknowledgements_by_type() -> None:
    """Kafka's BrokerTopicMetrics share meters mark each topic of a request once, and the all-topics meter once for
    each of them; RecordAcknowledgementsPerSec adds the records of each type."""
    metrics = MetricsRecorder()
    metrics.share_requested(False, ["a", "b", "a"], [])
    metrics.share_requested(True, ["a", "b"], ["b", "b"])
    metrics.share_acknowledged({"Accept": 5, "Reject": 1})
    metrics.share_acknowledged({"Accept": 2, "Release": 3})
    assert [metrics.value(SHARE_FETCH_REQUESTS, topic) for topic in ("a", "b", "")] == [1, 1, 2]
    assert metrics.value(FAILED_SHARE_FETCH_REQUESTS, "") == 0
    assert [metrics.value(SHARE_ACKNOWLEDGEMENT_REQUESTS, topic) for topic in ("a", "b", "")] == [1, 1, 2]
    assert [metrics.value(FAILED_SHARE_ACKNOWLEDGEMENT_REQUESTS, topic) for topic in ("a", "b", "")] == [0, 1, 1]
    counts = [metrics.value(SHARE_RECORD_ACKNOWLEDGEMENTS, kind) for kind in ("Accept", "Release", "Reject")]
    assert counts == [7, 3, 1]


def test_iceberg_rounds_count_files_bytes_dead_letters_and_failures_per_topic() -> None:
    recorder = MetricsRecorder()
    recorder.iceberg_committed("clicks", 3, 3000, 0)
    recorder.iceberg_committed("clicks", 2, 500, 7)
    recorder.iceberg_round_failed("clicks")
    assert recorder.value(ICEBERG_FILES_WRITTEN, "clicks") == 5
    assert recorder.value(ICEBERG_BYTES_WRITTEN, "clicks") == 3500
    assert recorder.value(ICEBERG_DEAD_LETTERS, "clicks") == 7
    assert recorder.value(ICEBERG_ROUNDS_FAILED, "clicks") == 1
    assert recorder.value(ICEBERG_ROUNDS_FAILED, "views") == 0
