"""Every metric raybroker exports, in one table: Kafka's names as the Prometheus JMX exporter renders them.

Operators' dashboards and alerts are written against the series the JMX exporter makes of Kafka's MBeans
(`prometheus/jmx_exporter`, `examples/kafka-2_0_0.yml`): `kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,
topic=T` becomes the counter `kafka_server_brokertopicmetrics_messagesin_total{topic="T"}`, a gauge's `Value` keeps
its lowercased name, label names keep the MBean key's case (`topic`, `partition`, `request`, `logDirectory`). Where
Kafka exports nothing (consumer lag) the names are kafka_exporter's (`danielqsj/kafka_exporter`), and the socket
server's counts are named as Strimzi's JMX exporter rules name them. A few series have no Kafka counterpart
(`RAYBROKER_ONLY`); they take the family's prefix.

`MetricSpec.name` is the name a process records (`ray.util.metrics`); a counter's series gets `_total` appended, a
histogram's `_bucket`, `_count` and `_sum` (`MetricSpec.series`). Ray's exporter puts `ray_` in front of every name
(`RAY_PREFIX`); the Prometheus scrape config in `configs/prometheus.yml` strips it again, so that Prometheus stores
the names below. Ray also adds its own labels (`NodeAddress`, `WorkerId`, `SessionName`, ...): one series per
process, which queries sum (`sum by (topic) (...)`).

Deviations a dashboard author must know:
- `kafka_network_requestmetrics_totaltimems` is a histogram (buckets in ms) where the JMX exporter gives a summary
  (`quantile="0.99"` gauges): quantiles come from `histogram_quantile(0.99, sum by (le, request) (rate(
  ..._bucket[1m])))`. Its `_count` is the JMX exporter's `_count` series; its `_sum` is approximate (Ray rebuilds it
  from the bucket midpoints), so a mean is not to be taken from it.
- As on Kafka, the per-topic counters come twice: per topic, and the broker's total with `topic=""` (the series
  without a `topic` label once Prometheus has it), so `sum` over all series counts twice: select `{topic!=""}` or
  `{topic=""}`. A Fetch request counts under `request="Fetch"` and `request="FetchConsumer"` (Kafka's
  `RequestMetrics` does the same; raybroker's replicas never fetch over the Kafka protocol, so there is no
  `FetchFollower`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

RAY_PREFIX = "ray_"


class MetricKind(Enum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


# Request latency buckets in ms: a produce or metadata request answers in 0.1-10 ms, a long-poll fetch waits up to
# its `fetch.max.wait.ms` (500 by default), and a request waits at most `request.timeout.ms` (30000).
LATENCY_BUCKETS_MS: tuple[float, ...] = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000)


@dataclass(frozen=True, eq=False)
class MetricSpec:
    """One metric: its recorded name, kind, help text, label names, and a histogram's bucket bounds. Compared and
    hashed by identity: each spec is one module constant, and the hot paths key dicts by it."""

    name: str
    kind: MetricKind
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()

    @property
    def series(self) -> tuple[str, ...]:
        """The series names Prometheus stores for this metric (after `ray_` is stripped)."""
        if self.kind is MetricKind.COUNTER:
            return (f"{self.name}_total",)
        if self.kind is MetricKind.HISTOGRAM:
            return (f"{self.name}_bucket", f"{self.name}_count", f"{self.name}_sum")
        return (self.name,)


def _counter(name: str, help_text: str, *labels: str) -> MetricSpec:
    return MetricSpec(name, MetricKind.COUNTER, help_text, labels)


def _gauge(name: str, help_text: str, *labels: str) -> MetricSpec:
    return MetricSpec(name, MetricKind.GAUGE, help_text, labels)


# --- BrokerTopicMetrics: recorded where the log takes client records (partition processes) and where Fetch answers
# leave (the Kafka listeners) ---------------------------------------------------------------------------------------
MESSAGES_IN = _counter(
    "kafka_server_brokertopicmetrics_messagesin", "Records appended to leader logs from producers.", "topic"
)
BYTES_IN = _counter(
    "kafka_server_brokertopicmetrics_bytesin", "Bytes of record batches appended to leader logs by producers.", "topic"
)
BYTES_OUT = _counter(
    "kafka_server_brokertopicmetrics_bytesout", "Bytes of record batches in Fetch answers to Kafka consumers.", "topic"
)
# Kafka's ReassignmentBytesInPerSec and ReassignmentBytesOutPerSec, counted for all topics only, as Kafka does.
REASSIGNMENT_BYTES_IN = _counter(
    "kafka_server_brokertopicmetrics_reassignmentbytesin",
    "Bytes this broker's replicas being added by a reassignment fetched from their leaders.",
)
REASSIGNMENT_BYTES_OUT = _counter(
    "kafka_server_brokertopicmetrics_reassignmentbytesout",
    "Bytes this broker's leaders sent to replicas being added by a reassignment.",
)

# --- RequestMetrics: the Kafka listeners --------------------------------------------------------------------------
REQUESTS = _counter(
    "kafka_network_requestmetrics_requests", "Kafka requests answered, per API and version.", "request", "version"
)
REQUEST_TOTAL_TIME_MS = MetricSpec(
    "kafka_network_requestmetrics_totaltimems",
    MetricKind.HISTOGRAM,
    "Time from a request read to its answer written, in ms, per API.",
    ("request",),
    LATENCY_BUCKETS_MS,
)

# --- SocketServer, per listener name: the Kafka listeners ---------------------------------------------------------
CONNECTION_COUNT = _gauge(
    "kafka_server_socket_server_metrics_connection_count", "Connections open on the listener.", "listener"
)
CONNECTION_CREATION = _counter(
    "kafka_server_socket_server_metrics_connection_creation", "Connections accepted by the listener.", "listener"
)
FAILED_AUTHENTICATION = _counter(
    "kafka_server_socket_server_metrics_failed_authentication",
    "Connections closed after a failed SASL authentication.",
    "listener",
)

# --- FetchSessionCache: the Kafka listeners' incremental fetch sessions (KIP-227), per listener process -------------
FETCH_SESSIONS = _gauge(
    "kafka_server_fetchsessioncache_numincrementalfetchsessions", "Incremental fetch sessions the listener keeps."
)
FETCH_SESSION_PARTITIONS = _gauge(
    "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached",
    "Partitions held by the listener's incremental fetch sessions.",
)

# --- Client quotas, per user and client id as the quota that applies tags them: the Kafka listeners ---------------
PRODUCE_THROTTLE_TIME = _gauge(
    "kafka_server_produce_throttle_time",
    "Average throttle time of Produce requests over the quota window, ms.",
    "user",
    "client_id",
)
PRODUCE_BYTE_RATE = _gauge(
    "kafka_server_produce_byte_rate", "Produce request bytes a second over the quota window.", "user", "client_id"
)
FETCH_THROTTLE_TIME = _gauge(
    "kafka_server_fetch_throttle_time",
    "Average throttle time of consumer Fetch requests over the quota window, ms.",
    "user",
    "client_id",
)
FETCH_BYTE_RATE = _gauge(
    "kafka_server_fetch_byte_rate", "Fetch answer record bytes a second over the quota window.", "user", "client_id"
)
REQUEST_TIME = _gauge(
    "kafka_server_request_request_time",
    "Request handling time as a percentage of one thread over the quota window (request_percentage's measure).",
    "user",
    "client_id",
)
REQUEST_THROTTLE_TIME = _gauge(
    "kafka_server_request_throttle_time",
    "Average throttle time of requests a request_percentage quota throttled over the quota window, ms.",
    "user",
    "client_id",
)

# --- ReplicaManager and KafkaController: the controller, from the replication state it holds ----------------------
UNDER_REPLICATED_PARTITIONS = _gauge(
    "kafka_server_replicamanager_underreplicatedpartitions",
    "Partitions with a leader and fewer in-sync replicas than replicas (the whole cluster's, from the controller).",
)
REASSIGNING_PARTITIONS = _gauge(
    "kafka_server_replicamanager_reassigningpartitions",
    "Partitions whose replicas are being moved: reassignments, drains, self-healing (the whole cluster's).",
)
LEADER_REPLICATION_BYTE_RATE = _gauge(
    "kafka_server_leaderreplication_byte_rate",
    "Bytes a second this broker's leaders sent to throttled replicas out of their ISR (the leader quota's rate).",
)
FOLLOWER_REPLICATION_BYTE_RATE = _gauge(
    "kafka_server_followerreplication_byte_rate",
    "Bytes a second this broker's throttled followers out of their ISR fetched (the follower quota's rate).",
)
ISR_SHRINKS = _counter("kafka_server_replicamanager_isrshrinks", "Changes that took replicas out of an ISR.")
ISR_EXPANDS = _counter("kafka_server_replicamanager_isrexpands", "Changes that added replicas to an ISR.")
OFFLINE_PARTITIONS = _gauge(
    "kafka_controller_kafkacontroller_offlinepartitionscount", "Partitions without a leader: no in-sync replica runs."
)
ACTIVE_CONTROLLER = _gauge(
    "kafka_controller_kafkacontroller_activecontrollercount", "1 on the process of the cluster's controller."
)
GLOBAL_TOPIC_COUNT = _gauge("kafka_controller_kafkacontroller_globaltopiccount", "Topics in the cluster.")
GLOBAL_PARTITION_COUNT = _gauge("kafka_controller_kafkacontroller_globalpartitioncount", "Partitions in the cluster.")

# --- Log, per replica: the partition processes --------------------------------------------------------------------
LOG_SIZE = _gauge("kafka_log_log_size", "Bytes of the replica's log segments.", "topic", "partition")
LOG_END_OFFSET = _gauge("kafka_log_log_logendoffset", "The replica's log end offset.", "topic", "partition")
LOG_START_OFFSET = _gauge("kafka_log_log_logstartoffset", "The replica's log start offset.", "topic", "partition")
LOG_SEGMENTS = _gauge("kafka_log_log_numlogsegments", "Segments of the replica's log.", "topic", "partition")

# --- LogCleaner: the cleaner processes; LogCleanerManager: the log managers ---------------------------------------
CLEANER_PASSES = _counter("kafka_log_logcleaner_passes", "Compaction passes cleaned (the heavy phase).")
CLEANER_BYTES_READ = _counter("kafka_log_logcleaner_read_bytes", "Bytes of segments compaction passes read.")
CLEANER_BYTES_WRITTEN = _counter("kafka_log_logcleaner_written_bytes", "Bytes of segments compaction passes wrote.")
CLEANER_MAX_CLEAN_TIME = _gauge("kafka_log_logcleaner_max_clean_time_secs", "Duration of the cleaner's last pass, s.")
CLEANER_RECOPY_PERCENT = _gauge(
    "kafka_log_logcleaner_cleaner_recopy_percent", "Bytes written as a percentage of bytes read, last pass."
)
UNCLEANABLE_PARTITIONS = _gauge(
    "kafka_log_logcleanermanager_uncleanable_partitions_count",
    "Partitions whose last compaction failed, per log dir.",
    "logDirectory",
)

# --- Consumer groups, kafka_exporter's names: the controller, from the group coordinator's offsets -----------------
CONSUMER_GROUP_LAG = _gauge(
    "kafka_consumergroup_lag",
    "Partition high watermark minus the group's committed offset (0 when the group is caught up).",
    "consumergroup",
    "topic",
    "partition",
)
CONSUMER_GROUP_OFFSET = _gauge(
    "kafka_consumergroup_current_offset", "The group's committed offset.", "consumergroup", "topic", "partition"
)

SHARE_FETCH_REQUESTS = _counter(
    "kafka_server_brokertopicmetrics_totalsharefetchrequests",
    "ShareFetch requests that fetched from the topic's partitions (once a request per topic).",
    "topic",
)
FAILED_SHARE_FETCH_REQUESTS = _counter(
    "kafka_server_brokertopicmetrics_failedsharefetchrequests",
    "ShareFetch requests in which a partition of the topic answered an error (once a request per topic).",
    "topic",
)
SHARE_ACKNOWLEDGEMENT_REQUESTS = _counter(
    "kafka_server_brokertopicmetrics_totalshareacknowledgementrequests",
    "ShareFetch and ShareAcknowledge requests that acknowledged records of the topic (once a request per topic).",
    "topic",
)
FAILED_SHARE_ACKNOWLEDGEMENT_REQUESTS = _counter(
    "kafka_server_brokertopicmetrics_failedshareacknowledgementrequests",
    "Acknowledging requests in which a partition of the topic refused its acknowledgements (once a request per topic).",
    "topic",
)

# --- Share groups (KIP-932), Kafka 4.2's ShareGroupMetrics and SharePartitionMetrics: the partition processes, where
# the share-partitions live ----------------------------------------------------------------------------------------
SHARE_RECORD_ACKNOWLEDGEMENTS = _counter(
    "kafka_server_sharegroupmetrics_recordacknowledgements",
    "Records share consumers acknowledged, by type (Accept, Release, Reject, Renew).",
    "ackType",
)
SHARE_IN_FLIGHT_MESSAGES = _gauge(
    "kafka_server_sharepartitionmetrics_inflightmessagecount",
    "Records a share-partition tracks between its start and end offsets (SPSO to SPEO).",
    "group",
    "topic",
    "partition",
)
SHARE_IN_FLIGHT_BATCHES = _gauge(
    "kafka_server_sharepartitionmetrics_inflightbatchcount",
    "Ranges of in-flight records in one state a share-partition tracks.",
    "group",
    "topic",
    "partition",
)
SHARE_LOCK_TIMEOUTS = _counter(
    "kafka_server_sharepartitionmetrics_acquisitionlocktimeout",
    "Records whose acquisition lock expired before their holder acknowledged them (Kafka's "
    "AcquisitionLockTimeoutPerSec).",
    "group",
    "topic",
    "partition",
)
SHARE_REDELIVERED = _counter(
    "kafka_server_sharepartitionmetrics_redeliveredrecords",
    "Records acquired again after an earlier delivery (released, or their lock expired).",
    "group",
    "topic",
    "partition",
)
SHARE_ARCHIVED = _counter(
    "kafka_server_sharepartitionmetrics_archivedrecords",
    "Records archived undelivered: rejected by a consumer (reason reject) or at the group's delivery count limit "
    "(reason delivery_limit); the dead letters, when the group has a dead-letter topic.",
    "group",
    "topic",
    "partition",
    "reason",
)
SHARE_BACKLOG = _gauge(
    "kafka_server_sharepartitionmetrics_backlog",
    "Records of the partition the share group has not acknowledged or archived (the high watermark less the start "
    "offset and the records done above it: DescribeShareGroupOffsets' lag).",
    "group",
    "topic",
    "partition",
)

# --- Iceberg topics (raybroker's own: `cluster.iceberg.translation_driver` records them) -----------------------------
ICEBERG_LAG = _gauge(
    "kafka_server_icebergtopicmetrics_lag",
    "Offsets of the topic's partitions not yet in its Iceberg table (last stable offset less the table's offset).",
    "topic",
)
ICEBERG_FILES_WRITTEN = _counter(
    "kafka_server_icebergtopicmetrics_fileswritten", "Data files committed to the topic's Iceberg table.", "topic"
)
ICEBERG_BYTES_WRITTEN = _counter(
    "kafka_server_icebergtopicmetrics_byteswritten",
    "Bytes of data files committed to the topic's Iceberg table.",
    "topic",
)
ICEBERG_DEAD_LETTERS = _counter(
    "kafka_server_icebergtopicmetrics_deadletters",
    "Records of the topic committed to its dead-letter table (values that do not fit iceberg.value.schema).",
    "topic",
)
ICEBERG_ROUNDS_FAILED = _counter(
    "kafka_server_icebergtopicmetrics_roundsfailed",
    "Translation rounds of the topic that failed (catalog or warehouse unreachable, a commit refused).",
    "topic",
)

EXPORTED: tuple[MetricSpec, ...] = (
    MESSAGES_IN,
    BYTES_IN,
    BYTES_OUT,
    REASSIGNMENT_BYTES_IN,
    REASSIGNMENT_BYTES_OUT,
    REQUESTS,
    REQUEST_TOTAL_TIME_MS,
    CONNECTION_COUNT,
    CONNECTION_CREATION,
    FAILED_AUTHENTICATION,
    FETCH_SESSIONS,
    FETCH_SESSION_PARTITIONS,
    PRODUCE_THROTTLE_TIME,
    PRODUCE_BYTE_RATE,
    FETCH_THROTTLE_TIME,
    FETCH_BYTE_RATE,
    REQUEST_TIME,
    REQUEST_THROTTLE_TIME,
    UNDER_REPLICATED_PARTITIONS,
    REASSIGNING_PARTITIONS,
    LEADER_REPLICATION_BYTE_RATE,
    FOLLOWER_REPLICATION_BYTE_RATE,
    ISR_SHRINKS,
    ISR_EXPANDS,
    OFFLINE_PARTITIONS,
    ACTIVE_CONTROLLER,
    GLOBAL_TOPIC_COUNT,
    GLOBAL_PARTITION_COUNT,
    LOG_SIZE,
    LOG_END_OFFSET,
    LOG_START_OFFSET,
    LOG_SEGMENTS,
    CLEANER_PASSES,
    CLEANER_BYTES_READ,
    CLEANER_BYTES_WRITTEN,
    CLEANER_MAX_CLEAN_TIME,
    CLEANER_RECOPY_PERCENT,
    UNCLEANABLE_PARTITIONS,
    CONSUMER_GROUP_LAG,
    CONSUMER_GROUP_OFFSET,
    SHARE_FETCH_REQUESTS,
    FAILED_SHARE_FETCH_REQUESTS,
    SHARE_ACKNOWLEDGEMENT_REQUESTS,
    FAILED_SHARE_ACKNOWLEDGEMENT_REQUESTS,
    SHARE_RECORD_ACKNOWLEDGEMENTS,
    SHARE_LOCK_TIMEOUTS,
    SHARE_REDELIVERED,
    SHARE_ARCHIVED,
    SHARE_IN_FLIGHT_MESSAGES,
    SHARE_IN_FLIGHT_BATCHES,
    SHARE_BACKLOG,
    ICEBERG_LAG,
    ICEBERG_FILES_WRITTEN,
    ICEBERG_BYTES_WRITTEN,
    ICEBERG_DEAD_LETTERS,
    ICEBERG_ROUNDS_FAILED,
)
# Series with no Kafka or kafka_exporter counterpart, named in the shape of their family.
RAYBROKER_ONLY = frozenset(
    {
        CLEANER_PASSES,
        CLEANER_BYTES_READ,
        CLEANER_BYTES_WRITTEN,
        SHARE_BACKLOG,
        SHARE_REDELIVERED,
        SHARE_ARCHIVED,
        ICEBERG_LAG,
        ICEBERG_FILES_WRITTEN,
        ICEBERG_BYTES_WRITTEN,
        ICEBERG_DEAD_LETTERS,
        ICEBERG_ROUNDS_FAILED,
    }
)


def exported_series() -> frozenset[str]:
    """Every series name Prometheus stores from raybroker (after the scrape config strips `ray_`)."""
    return frozenset(series for spec in EXPORTED for series in spec.series)
