"""The broker's metrics: Kafka's names (`names`), what the roles report and its in-process record (`recorder`),
gauges computed from the broker's state (`gauges`), their export to Ray's metrics agents (`ray_export`), and the
cluster-wide reads behind the controller's gauges and `raybroker status` (`cluster_view`).

`names`, `recorder` and `gauges` are Ray-free: the plain roles take a `BrokerMetrics` (`NO_METRICS` by default)
and tests assert on a `MetricsRecorder`.
"""

from actors.metrics.names import EXPORTED, MetricKind, MetricSpec, exported_series
from actors.metrics.recorder import NO_METRICS, BrokerMetrics, MetricsRecorder, MetricsSnapshot

__all__ = [
    "EXPORTED",
    "NO_METRICS",
    "BrokerMetrics",
    "MetricKind",
    "MetricSpec",
    "MetricsRecorder",
    "MetricsSnapshot",
    "exported_series",
]
