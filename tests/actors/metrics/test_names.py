"""The table of exported names: valid for Prometheus and for Ray (which silently drops a metric with an invalid
name), unique, in the JMX exporter's shape (lowercase names, label names as Kafka's MBean keys spell them)."""

from __future__ import annotations

import re

from actors.metrics.names import EXPORTED, LATENCY_BUCKETS_MS, RAYBROKER_ONLY, MetricKind, exported_series

# Ray's `ray.util.metrics` rule (a name outside it is discarded with only a warning), without the ':' Ray warns of.
RAY_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# Labels Ray adds to every series: a metric of ours must not use them.
RAY_LABELS = {"Component", "NodeAddress", "SessionName", "Version", "WorkerId"}


def test_every_name_is_valid_for_ray_and_prometheus_and_lowercase() -> None:
    for spec in EXPORTED:
        assert RAY_NAME.match(spec.name), spec.name
        assert spec.name == spec.name.lower(), spec.name
        assert spec.name.startswith("kafka_"), spec.name
        assert not spec.name.endswith("_total"), spec.name  # Ray appends it to counters
        assert spec.help, spec.name


def test_names_and_series_are_unique() -> None:
    names = [spec.name for spec in EXPORTED]
    assert len(names) == len(set(names))
    series = [name for spec in EXPORTED for name in spec.series]
    assert len(series) == len(set(series)) == len(exported_series())


def test_labels_are_kafka_keys_and_never_rays() -> None:
    for spec in EXPORTED:
        assert len(spec.labels) == len(set(spec.labels)), spec.name
        for label in spec.labels:
            assert LABEL_NAME.match(label) and label not in RAY_LABELS and label != "le", (spec.name, label)


def test_series_suffixes_follow_the_kind() -> None:
    for spec in EXPORTED:
        if spec.kind is MetricKind.COUNTER:
            assert spec.series == (f"{spec.name}_total",)
        elif spec.kind is MetricKind.HISTOGRAM:
            assert spec.buckets == LATENCY_BUCKETS_MS
            assert spec.series == (f"{spec.name}_bucket", f"{spec.name}_count", f"{spec.name}_sum")
        else:
            assert spec.series == (spec.name,)
            assert not spec.buckets


def test_latency_buckets_are_positive_and_increasing() -> None:
    assert all(bound > 0 for bound in LATENCY_BUCKETS_MS)
    assert list(LATENCY_BUCKETS_MS) == sorted(set(LATENCY_BUCKETS_MS))


def test_the_names_kafka_operators_query_are_there() -> None:
    """The series the issue names, exactly as the JMX exporter and kafka_exporter spell them."""
    assert {
        "kafka_server_brokertopicmetrics_messagesin_total",
        "kafka_server_brokertopicmetrics_bytesin_total",
        "kafka_server_brokertopicmetrics_bytesout_total",
        "kafka_network_requestmetrics_requests_total",
        "kafka_network_requestmetrics_totaltimems_count",
        "kafka_server_replicamanager_underreplicatedpartitions",
        "kafka_controller_kafkacontroller_offlinepartitionscount",
        "kafka_server_replicamanager_isrshrinks_total",
        "kafka_server_replicamanager_isrexpands_total",
        "kafka_log_log_size",
        "kafka_consumergroup_lag",
        "kafka_server_socket_server_metrics_connection_count",
        "kafka_server_socket_server_metrics_failed_authentication_total",
    } <= exported_series()
    assert set(EXPORTED) >= RAYBROKER_ONLY
