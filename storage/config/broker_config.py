"""Broker-level configuration (Kafka's `server.properties`): Kafka's names and defaults, validated on creation.

Every field is a Kafka broker key with dots as underscores (`log.segment.bytes` -> `log_segment_bytes`). Java
types are enforced (`storage.config.config_values`): an `int` key takes -2**31..2**31-1, a `long` key -2**63..2**63-1,
a `double` key any finite or infinite float, a `boolean` key `true`/`false` (any case), a `list` key a comma
list (blanks trimmed, empty entries dropped, as Kafka's `csvList`).

| Kafka key                                     | type    | default             | meaning                              |
|-----------------------------------------------|---------|---------------------|--------------------------------------|
| node.id (synonym broker.id)                   | int     | 0                   | this broker's id, >= 0               |
| log.dirs (falls back to log.dir)              | list    | /tmp/raybroker-logs | data dirs (Kafka: /tmp/kafka-logs)   |
| num.recovery.threads.per.data.dir             | int     | 1                   | threads per dir for load and close   |
| num.partitions                                | int     | 1                   | partitions of an auto-created topic  |
| log.retention.check.interval.ms               | long    | 300000              | period of the retention task         |
| log.flush.offset.checkpoint.interval.ms       | int     | 60000               | recovery-point checkpoint period     |
| log.flush.start.offset.checkpoint.interval.ms | int     | 60000               | log-start-offset checkpoint period   |
| replica.high.watermark.checkpoint.interval.ms | long    | 5000                | replication-offset checkpoint period |
| log.flush.scheduler.interval.ms               | long    | Long.MAX            | period of the flusher task           |
| log.initial.task.delay.ms                     | long    | 30000               | delay before the first periodic task |
| log.cleaner.enable, .threads, .io.*, ...      |         |                     | `storage.config.cleaner_config`      |
| offsets.topic.num.partitions                  | int     | 50                  | partitions of __consumer_offsets     |
| group.min.session.timeout.ms                  | int     | 6000                | shortest session a member may ask    |
| group.max.session.timeout.ms                  | int     | 1800000             | longest session a member may ask     |
| group.initial.rebalance.delay.ms              | int     | 3000                | a new group's first rebalance waits  |
| offsets.retention.minutes                     | int     | 10080               | committed offsets kept this long     |
| auto.create.topics.enable                     | boolean | true                | create a topic on first use          |
| delete.topic.enable                           | boolean | true                | allow DeleteTopics                   |
| producer.id.expiration.ms                     | int     | 86400000            | forget an idle producer id after it  |
| producer.id.expiration.check.interval.ms      | int     | 600000              | how often idle producers are dropped |
| default.replication.factor                    | int     | 1                   | replicas of a new topic by default   |
| offsets.topic.replication.factor              | short   | 3                   | __consumer_offsets replicas (capped) |
| metadata.replication.factor                   | short   | 3                   | metadata log copies (capped)         |
| replica.lag.time.max.ms                       | long    | 30000               | behind this long: out of the ISR     |
| broker.heartbeat.interval.ms                  | int     | 2000                | a broker's heartbeat period          |
| broker.session.timeout.ms                     | int     | 9000                | no heartbeat this long: fenced       |
| replica.fetch.wait.max.ms                     | int     | 500                 | a follower's fetch waits for records |
| replica.fetch.max.bytes                       | int     | 1048576             | bytes a follower's fetch asks for    |
| replica.fetch.response.max.bytes              | int     | 10485760            | bytes of one fetch of many partitions|
| replica.fetch.backoff.ms                      | int     | 1000                | pause after a failed follower fetch  |
| auto.leader.rebalance.enable                  | boolean | true                | lead from the preferred replica      |
| leader.imbalance.check.interval.seconds       | long    | 300                 | period of that check                 |
| listeners, socket.*, max.connections, ...     |         |                     | `storage.config.listener_config`     |
| max.request.partition.size.limit              | int     | 2000                | DescribeTopicPartitions page size    |
| num.network.threads                           | int     | 1 (Kafka: 3)        | listener processes per node          |
| max.incremental.fetch.session.cache.slots     | int     | 1000                | fetch sessions per listener process  |
| quota.window.num                              | int     | 11                  | samples of a client quota's rate   |
| quota.window.size.seconds                     | int     | 1                   | each sample's length                 |
| leader.replication.throttled.rate             | long    | Long.MAX_VALUE      | leaders' throttled bytes/s (dynamic) |
| follower.replication.throttled.rate           | long    | Long.MAX_VALUE      | followers' throttled bytes/s (dyn.)  |
| replica.alter.log.dirs.io.max.bytes.per.second | long   | Long.MAX_VALUE      | accepted (dynamic), nothing to bound |
| replication.quota.window.num                  | int     | 11                  | samples of a replication quota       |
| replication.quota.window.size.seconds         | int     | 1                   | each sample's length                 |
| ssl.*, sasl.*, authorizer.class.name, ...     |         |                     | `storage.config.security_config`     |
| transaction.*, transactional.id.*             |         |                     | `storage.config.transaction_config`  |
| group.consumer.*, group.coordinator.*         |         |                     | `...group_protocol_config`           |
| group.share.*                                 |         |                     | `...share_group_config`              |

| raybroker-only key                            | type    | default             | meaning                              |
|-----------------------------------------------|---------|---------------------|--------------------------------------|
| log.partitions.per.process                    | int     | 16                  | partition logs per actor process     |
| log.partitions.spare.processes                | int     | 1                   | empty partition hosts kept started   |
| raybroker.balancer.node.loss.grace.ms         | long    | 1800000             | lost this long: replicas re-created  |
| raybroker.balancer.partition.autobalancing.mode | string | off             | node_add: a broker joins, takes share |
| raybroker.balancer.replication.throttle       | long    | 104857600           | balancer's moves' B/s (-1: off)     |

`raybroker.balancer.node.loss.grace.ms` is how long a broker may be gone before its replicas are re-created on
running brokers (`actors.core.controller.self_healing`; -1: never). `raybroker.balancer.partition.autobalancing.mode`
(Redpanda's `partition_autobalancing_mode`): `node_add` balances the replicas (`Controller.balance`, what
`raybroker balance` does) whenever a running broker holds none while others hold more, so a node that joins takes
its share by itself; `off` (the default, Kafka's behaviour) moves nothing unless asked.
`raybroker.balancer.replication.throttle` bounds the copies of the moves the controller makes itself (drains,
self-healing, balancing) with the brokers' replication quotas, in bytes a second (Redpanda's
`raft_learner_recovery_rate`, whose 100 MiB/s default it takes; -1: no bound); a rate set with
`leader.replication.throttled.rate` or `follower.replication.throttled.rate` takes its place.

`iceberg.catalog.<key>` (any number of them, raybroker keys) is the catalog of the topics kept as Iceberg tables
(`cluster.iceberg.catalog`): each is handed as `<key>` to pyiceberg's `load_catalog`, so `iceberg.catalog.type=rest`
and `iceberg.catalog.uri=http://...` name a REST catalog; none set means the embedded SQLite catalog under the
metadata dir. They are kept verbatim as text in `iceberg_catalog` (the catalog checks them when it loads).

`log.partitions.per.process` and `log.partitions.spare.processes` are raybroker keys (no Kafka equivalent). Each
partition log lives in a partition host (`actors.server.partition_host`), an actor process holding up to
`log.partitions.per.process` of them, or with 1 in an actor process of its own (`actors.server.partition_log`). An
actor process costs ~61 MiB of its own and ~1-1.5 s of CPU to start (measured), where a partition in a running host
costs ~1.4 MiB and a call: at 1, a 24 GiB node holds ~400 partitions and every new partition waits for its process
to start (a 3-partition topic takes ~11x Kafka's time to create); at 16, a create is a call into a running host, and
the partitions of one host share its write thread and its interpreter (a slow write of one delays the others; a
host that dies takes its partitions offline until Ray restarts it and they are reopened from disk). The log manager
keeps `log.partitions.spare.processes` hosts holding no partition started (a host emptied by deletes counts), so a
new partition opens in a running process even when every other host is full; with one partition per process no
spare is kept. A host holds fewer than `log.partitions.per.process` when its process's open-file limit cannot hold
their files (five a partition: `actors.open_files`). `offsets.topic.num.partitions` keeps Kafka's default of 50 (4
hosts at 16 per process).

The Kafka-protocol listener's keys are checked and explained in `storage.config.listener_config`; together they
form `BrokerConfig.listener_config`. The security keys (TLS, SASL, ACLs) are `storage.config.security_config`'s and
form `BrokerConfig.security_config`, checked against the listeners' security protocols on creation; an `ssl.` or
`sasl.` key it does not declare is ignored with the warning below.

`num.network.threads` keeps Kafka's name with a raybroker meaning: Kafka runs that many network threads in one JVM,
raybroker that many listener processes (Ray actors) on each node, sharing its port through SO_REUSEPORT, since one
Python process serves requests on one core. Its default is 1, not Kafka's 3: in the load tests one listener process and
the partition actors it feeds already kept every core of the node busy (decoding and encoding requests is Python work),
so more listener processes would only compete with the partitions for the same cores, each costing a Ray worker's
memory; raise it on nodes with cores to spare.

Broker defaults of topic configs (Kafka's "server synonyms"); together they form `BrokerConfig.log_config`, the
`LogConfig` a topic gets when it overrides nothing. A negative retention in any unit means no time limit (-1):

| Kafka key                                  | type     | default     | topic config it defaults               |
|--------------------------------------------|----------|-------------|----------------------------------------|
| log.segment.bytes                          | int      | 1073741824  | segment.bytes                          |
| log.roll.ms / log.roll.hours               | long/int | unset / 168 | segment.ms (ms wins over hours)        |
| log.roll.jitter.ms / log.roll.jitter.hours | long/int | unset / 0   | segment.jitter.ms (ms wins over hours) |
| log.index.size.max.bytes                   | int      | 10485760    | segment.index.bytes                    |
| log.index.interval.bytes                   | int      | 4096        | index.interval.bytes                   |
| log.flush.interval.messages                | long     | Long.MAX    | flush.messages                         |
| log.flush.interval.ms                      | long     | unset       | flush.ms (unset: scheduler interval)   |
| log.retention.ms                           | long     | unset       | retention.ms (ms wins)                 |
| log.retention.minutes                      | int      | unset       | retention.ms (minutes beat hours)      |
| log.retention.hours                        | int      | 168         | retention.ms                           |
| log.retention.bytes                        | long     | -1          | retention.bytes                        |
| log.cleanup.policy                         | list     | delete      | cleanup.policy                         |
| log.cleaner.min.cleanable.ratio            | double   | 0.5         | min.cleanable.dirty.ratio              |
| log.cleaner.min.compaction.lag.ms          | long     | 0           | min.compaction.lag.ms                  |
| log.cleaner.max.compaction.lag.ms          | long     | Long.MAX    | max.compaction.lag.ms                  |
| log.cleaner.delete.retention.ms            | long     | 86400000    | delete.retention.ms                    |
| log.segment.delete.delay.ms                | long     | 60000       | file.delete.delay.ms                   |
| message.max.bytes                          | int      | 1048588     | max.message.bytes                      |
| log.message.timestamp.type                 | string   | CreateTime  | message.timestamp.type                 |
| log.message.timestamp.before.max.ms        | long     | Long.MAX    | message.timestamp.before.max.ms        |
| log.message.timestamp.after.max.ms         | long     | Long.MAX    | message.timestamp.after.max.ms         |
| log.message.timestamp.difference.max.ms    | long     | Long.MAX    | message.timestamp.difference.max.ms    |
| compression.type                           | string   | producer    | compression.type                       |
| compression.gzip.level                     | int      | -1          | compression.gzip.level                 |
| compression.lz4.level                      | int      | 9           | compression.lz4.level                  |
| compression.zstd.level                     | int      | 3           | compression.zstd.level                 |
| log.preallocate                            | boolean  | false       | preallocate                            |
| min.insync.replicas                        | int      | 1           | min.insync.replicas                    |
| unclean.leader.election.enable             | boolean  | false       | unclean.leader.election.enable         |
| log.local.retention.ms                     | long     | -2          | local.retention.ms                     |
| log.local.retention.bytes                  | long     | -2          | local.retention.bytes                  |

Loading (`from_properties`, `load_server_properties`): `broker.id` is read as `node.id` (both set and different
is an error, as in Kafka); `log.dir` is read only when `log.dirs` is absent; the listeners a KRaft file names in
`controller.listener.names` are dropped from `listeners`. Keys of Kafka's broker that do not
apply to raybroker (the receive socket buffer, ZooKeeper, KRaft quorum, security: `IGNORED_KAFKA_KEYS`
and `IGNORED_KAFKA_KEY_PREFIXES`) load with one logged warning and are listed in `BrokerConfig.ignored_keys`; any
other unknown key raises `InvalidConfigError` (with the closest known key as a hint), so a typo never passes
silently.

Deviations from Kafka's validation: every periodic-task interval must be >= 1 ms (Kafka accepts 0 for the two
`log.flush.*.checkpoint.interval.ms` keys; raybroker's scheduler needs a positive period), and the default data
dir is `/tmp/raybroker-logs` instead of `/tmp/kafka-logs`, so a local raybroker never touches a local Kafka.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from storage.config.cleaner_config import CleanerConfig, CleanerKeys
from storage.config.config_values import (
    LONG_MAX,
    check_fields,
    config_field,
    config_fields,
    kafka_name,
    key_values,
    parse_value,
    render_properties,
    values_from_properties,
)
from storage.config.group_protocol_config import GroupProtocolConfig, GroupProtocolKeys
from storage.config.listener_config import ListenerConfig, ListenerKeys
from storage.config.log_config import LogConfig
from storage.config.security_config import SecurityConfig, SecurityKeys
from storage.config.share_group_config import ShareGroupConfig, ShareGroupKeys
from storage.config.transaction_config import TransactionConfig, TransactionKeys
from storage.errors import CorruptCheckpointError, InvalidConfigError
from storage.files.meta_properties import parse_properties

logger = logging.getLogger(__name__)

DEFAULT_LOG_DIR = "/tmp/raybroker-logs"

MS_PER_MINUTE = 60_000
MS_PER_HOUR = 3_600_000

IGNORED_KAFKA_KEYS = frozenset(
    {
        "broker.rack",
        "controlled.shutdown.enable",
        "controller.listener.names",
        "controller.quorum.bootstrap.servers",
        "controller.quorum.voters",
        "inter.broker.listener.name",
        "inter.broker.protocol.version",
        "log.dir.failure.timeout.ms",
        "log.message.format.version",
        "metadata.log.dir",
        "metric.reporters",
        "num.io.threads",
        "num.replica.fetchers",
        "process.roles",
        "security.inter.broker.protocol",
        "socket.receive.buffer.bytes",
        "zookeeper.connect",
        "zookeeper.connection.timeout.ms",
        "zookeeper.session.timeout.ms",
    }
)
# Families of keys for the network and security layers, which raybroker does not have (Ray carries the calls).
IGNORED_KAFKA_KEY_PREFIXES = ("listener.name.", "sasl.", "ssl.")
# The prefix of the Iceberg catalog's properties (see the module docstring).
ICEBERG_CATALOG_PREFIX = "iceberg.catalog."

# Broker key (as a field name) -> the LogConfig field it is the default of, when the value passes unchanged.
# The broker keys IncrementalAlterConfigs may set at run time (Kafka's dynamic per-broker and cluster-default configs
# that raybroker serves): the replication throttles.
DYNAMIC_BROKER_KEYS = frozenset(
    {
        "leader.replication.throttled.rate",
        "follower.replication.throttled.rate",
        "replica.alter.log.dirs.io.max.bytes.per.second",
    }
)

_TOPIC_SYNONYMS = {
    "log_segment_bytes": "segment_bytes",
    "log_index_size_max_bytes": "segment_index_bytes",
    "log_index_interval_bytes": "index_interval_bytes",
    "log_flush_interval_messages": "flush_messages",
    "log_retention_bytes": "retention_bytes",
    "log_cleanup_policy": "cleanup_policy",
    "log_cleaner_min_cleanable_ratio": "min_cleanable_dirty_ratio",
    "log_cleaner_min_compaction_lag_ms": "min_compaction_lag_ms",
    "log_cleaner_max_compaction_lag_ms": "max_compaction_lag_ms",
    "log_cleaner_delete_retention_ms": "delete_retention_ms",
    "log_segment_delete_delay_ms": "file_delete_delay_ms",
    "message_max_bytes": "max_message_bytes",
    "log_message_timestamp_type": "message_timestamp_type",
    "log_message_timestamp_before_max_ms": "message_timestamp_before_max_ms",
    "log_message_timestamp_after_max_ms": "message_timestamp_after_max_ms",
    "log_message_timestamp_difference_max_ms": "message_timestamp_difference_max_ms",
    "compression_type": "compression_type",
    "compression_gzip_level": "compression_gzip_level",
    "compression_lz4_level": "compression_lz4_level",
    "compression_zstd_level": "compression_zstd_level",
    "log_preallocate": "preallocate",
    "min_insync_replicas": "min_insync_replicas",
    "unclean_leader_election_enable": "unclean_leader_election_enable",
    "log_local_retention_ms": "local_retention_ms",
    "log_local_retention_bytes": "local_retention_bytes",
}


@dataclass(frozen=True)
class BrokerConfig(CleanerKeys, ListenerKeys, SecurityKeys, TransactionKeys, GroupProtocolKeys, ShareGroupKeys):
    """One broker's settings (see the module docstring for every key, its default and its meaning).

    The cleaner's, the listener's, the security, the transaction, the group protocol and the share group keys are
    declared once, by `CleanerKeys`, `ListenerKeys`, `SecurityKeys`, `TransactionKeys`, `GroupProtocolKeys` and
    `ShareGroupKeys`, which this class extends; `log_config` (the topic defaults), `cleaner_config`,
    `listener_config`, `security_config`, `transaction_config`, `group_protocol_config` and `share_group_config` are
    derived on creation; `ignored_keys` lists the Kafka keys a
    loaded file set that raybroker does not use. Every key's type and range is checked here; the ranges of topic-config
    synonyms, the rules across cleaner keys, the listeners' syntax and the security rules are checked by
    `LogConfig`, `CleanerConfig`, `ListenerConfig` and `SecurityConfig`.
    """

    node_id: int = config_field(0, "int", low=0)
    log_dirs: tuple[str, ...] = config_field((DEFAULT_LOG_DIR,), "list")
    num_recovery_threads_per_data_dir: int = config_field(1, "int", low=1)
    num_partitions: int = config_field(1, "int", low=1)
    log_retention_check_interval_ms: int = config_field(300000, "long", low=1)
    log_flush_offset_checkpoint_interval_ms: int = config_field(60000, "int", low=1)
    log_flush_start_offset_checkpoint_interval_ms: int = config_field(60000, "int", low=1)
    replica_high_watermark_checkpoint_interval_ms: int = config_field(5000, "long", low=1)
    log_flush_scheduler_interval_ms: int = config_field(LONG_MAX, "long", low=1)
    log_initial_task_delay_ms: int = config_field(30000, "long", low=0)
    offsets_topic_num_partitions: int = config_field(50, "int", low=1)
    group_min_session_timeout_ms: int = config_field(6000, "int", low=0)
    group_max_session_timeout_ms: int = config_field(1800000, "int", low=0)
    group_initial_rebalance_delay_ms: int = config_field(3000, "int", low=0)
    offsets_retention_minutes: int = config_field(10080, "int", low=1)
    auto_create_topics_enable: bool = config_field(True, "boolean")
    delete_topic_enable: bool = config_field(True, "boolean")
    producer_id_expiration_ms: int = config_field(86400000, "int", low=1)
    producer_id_expiration_check_interval_ms: int = config_field(600000, "int", low=1)
    log_partitions_per_process: int = config_field(16, "int", low=1)
    log_partitions_spare_processes: int = config_field(1, "int", low=0)
    raybroker_balancer_node_loss_grace_ms: int = config_field(1800000, "long", low=-1)
    raybroker_balancer_partition_autobalancing_mode: str = config_field("off", "string", choices=("off", "node_add"))
    raybroker_balancer_replication_throttle: int = config_field(104857600, "long", low=-1)
    default_replication_factor: int = config_field(1, "int", low=1)
    offsets_topic_replication_factor: int = config_field(3, "int", low=1, high=32767)
    metadata_replication_factor: int = config_field(3, "int", low=1, high=32767)
    replica_lag_time_max_ms: int = config_field(30000, "long", low=1)
    broker_heartbeat_interval_ms: int = config_field(2000, "int", low=1)
    broker_session_timeout_ms: int = config_field(9000, "int", low=1)
    replica_fetch_wait_max_ms: int = config_field(500, "int", low=0)
    replica_fetch_max_bytes: int = config_field(1048576, "int", low=0)
    replica_fetch_response_max_bytes: int = config_field(10485760, "int", low=0)
    replica_fetch_backoff_ms: int = config_field(1000, "int", low=0)
    auto_leader_rebalance_enable: bool = config_field(True, "boolean")
    leader_imbalance_check_interval_seconds: int = config_field(300, "long", low=1)
    # DescribeTopicPartitions answers at most this many partitions per response (Kafka's default).
    max_request_partition_size_limit: int = config_field(2000, "int", low=1)
    num_network_threads: int = config_field(1, "int", low=1)
    max_incremental_fetch_session_cache_slots: int = config_field(1000, "int", low=0)
    quota_window_num: int = config_field(11, "int", low=1)
    quota_window_size_seconds: int = config_field(1, "int", low=1)
    leader_replication_throttled_rate: int = config_field(LONG_MAX, "long", low=0)
    follower_replication_throttled_rate: int = config_field(LONG_MAX, "long", low=0)
    replica_alter_log_dirs_io_max_bytes_per_second: int = config_field(LONG_MAX, "long", low=0)
    replication_quota_window_num: int = config_field(11, "int", low=1)
    replication_quota_window_size_seconds: int = config_field(1, "int", low=1)
    log_segment_bytes: int = config_field(1073741824, "int")
    log_roll_ms: int | None = config_field(None, "long")
    log_roll_hours: int = config_field(168, "int")
    log_roll_jitter_ms: int | None = config_field(None, "long")
    log_roll_jitter_hours: int = config_field(0, "int")
    log_index_size_max_bytes: int = config_field(10485760, "int")
    log_index_interval_bytes: int = config_field(4096, "int")
    log_flush_interval_messages: int = config_field(LONG_MAX, "long")
    log_flush_interval_ms: int | None = config_field(None, "long")
    log_retention_ms: int | None = config_field(None, "long")
    log_retention_minutes: int | None = config_field(None, "int")
    log_retention_hours: int = config_field(168, "int")
    log_retention_bytes: int = config_field(-1, "long")
    log_cleanup_policy: str = config_field("delete", "string")
    log_cleaner_min_cleanable_ratio: float = config_field(0.5, "double")
    log_cleaner_min_compaction_lag_ms: int = config_field(0, "long")
    log_cleaner_max_compaction_lag_ms: int = config_field(LONG_MAX, "long")
    log_cleaner_delete_retention_ms: int = config_field(86400000, "long")
    log_segment_delete_delay_ms: int = config_field(60000, "long")
    message_max_bytes: int = config_field(1048588, "int")
    log_message_timestamp_type: str = config_field("CreateTime", "string")
    log_message_timestamp_before_max_ms: int = config_field(LONG_MAX, "long")
    log_message_timestamp_after_max_ms: int = config_field(LONG_MAX, "long")
    log_message_timestamp_difference_max_ms: int = config_field(LONG_MAX, "long")
    compression_type: str = config_field("producer", "string")
    compression_gzip_level: int = config_field(-1, "int")
    compression_lz4_level: int = config_field(9, "int")
    compression_zstd_level: int = config_field(3, "int")
    log_preallocate: bool = config_field(False, "boolean")
    min_insync_replicas: int = config_field(1, "int")
    unclean_leader_election_enable: bool = config_field(False, "boolean")
    log_local_retention_ms: int = config_field(-2, "long")
    log_local_retention_bytes: int = config_field(-2, "long")
    ignored_keys: tuple[str, ...] = ()
    # (key after `iceberg.catalog.`, value) pairs, in the order given.
    iceberg_catalog: tuple[tuple[str, str], ...] = ()
    log_config: LogConfig = field(init=False, repr=False, compare=False)
    cleaner_config: CleanerConfig = field(init=False, repr=False, compare=False)
    listener_config: ListenerConfig = field(init=False, repr=False, compare=False)
    security_config: SecurityConfig = field(init=False, repr=False, compare=False)
    transaction_config: TransactionConfig = field(init=False, repr=False, compare=False)
    group_protocol_config: GroupProtocolConfig = field(init=False, repr=False, compare=False)
    share_group_config: ShareGroupConfig = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_fields(self)
        if not self.log_dirs or any(not directory.strip() for directory in self.log_dirs):
            raise InvalidConfigError(f"invalid value {list(self.log_dirs)!r} for log.dirs: expected non-empty paths")
        if not isinstance(self.ignored_keys, tuple) or not all(isinstance(key, str) for key in self.ignored_keys):
            raise InvalidConfigError(f"invalid ignored_keys {self.ignored_keys!r}: expected a tuple of strings")
        if not isinstance(self.iceberg_catalog, tuple) or not all(
            isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(part, str) for part in pair) and pair[0]
            for pair in self.iceberg_catalog
        ):
            raise InvalidConfigError(
                f"invalid iceberg catalog properties {self.iceberg_catalog!r}: expected (key, value) strings"
            )
        object.__setattr__(self, "log_config", self._build_log_config())
        object.__setattr__(self, "cleaner_config", CleanerConfig(**key_values(self, CleanerKeys)))
        object.__setattr__(self, "listener_config", ListenerConfig(**key_values(self, ListenerKeys)))
        object.__setattr__(self, "security_config", SecurityConfig(**key_values(self, SecurityKeys)))
        object.__setattr__(self, "transaction_config", TransactionConfig(**key_values(self, TransactionKeys)))
        object.__setattr__(self, "group_protocol_config", GroupProtocolConfig(**key_values(self, GroupProtocolKeys)))
        object.__setattr__(self, "share_group_config", ShareGroupConfig(**key_values(self, ShareGroupKeys)))
        self.security_config.check_listeners(endpoint.security_protocol for endpoint in self.listener_config.endpoints)

    def _log_config_sources(self) -> dict[str, tuple[str, Any]]:
        """LogConfig field -> (the broker field its value comes from, the value), with Kafka's precedence."""
        sources = {topic: (broker, getattr(self, broker)) for broker, topic in _TOPIC_SYNONYMS.items()}
        if self.log_roll_ms is not None:
            sources["segment_ms"] = ("log_roll_ms", self.log_roll_ms)
        else:
            sources["segment_ms"] = ("log_roll_hours", self.log_roll_hours * MS_PER_HOUR)
        if self.log_roll_jitter_ms is not None:
            sources["segment_jitter_ms"] = ("log_roll_jitter_ms", self.log_roll_jitter_ms)
        else:
            sources["segment_jitter_ms"] = ("log_roll_jitter_hours", self.log_roll_jitter_hours * MS_PER_HOUR)
        if self.log_flush_interval_ms is not None:
            sources["flush_ms"] = ("log_flush_interval_ms", self.log_flush_interval_ms)
        else:
            sources["flush_ms"] = ("log_flush_scheduler_interval_ms", self.log_flush_scheduler_interval_ms)
        if self.log_retention_ms is not None:
            broker, retention_ms = "log_retention_ms", self.log_retention_ms
        elif self.log_retention_minutes is not None:
            broker, retention_ms = "log_retention_minutes", self.log_retention_minutes * MS_PER_MINUTE
        else:
            broker, retention_ms = "log_retention_hours", self.log_retention_hours * MS_PER_HOUR
        # Kafka reads any negative retention, in any unit, as "no time limit".
        sources["retention_ms"] = (broker, max(retention_ms, -1))
        return sources

    def topic_config_synonyms(self) -> dict[str, str]:
        """Topic config (Kafka name) -> the broker key (Kafka name) its default comes from, with Kafka's precedence
        (`segment.ms` -> `log.roll.ms` when set, else `log.roll.hours`): what DescribeConfigs reports as synonyms."""
        return {kafka_name(topic): kafka_name(broker) for topic, (broker, _) in self._log_config_sources().items()}

    def _build_log_config(self) -> LogConfig:
        sources = self._log_config_sources()
        for topic, (broker, value) in sources.items():
            try:
                LogConfig(**{topic: value})
            except InvalidConfigError as exc:
                raise InvalidConfigError(
                    f"invalid value {getattr(self, broker)!r} for {kafka_name(broker)} "
                    f"(the broker default of topic config {kafka_name(topic)}): {exc.message}"
                ) from exc
        try:
            return LogConfig(**{topic: value for topic, (_, value) in sources.items()})
        except InvalidConfigError as exc:
            raise InvalidConfigError(f"inconsistent broker defaults of topic configs: {exc.message}") from exc

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> BrokerConfig:
        """A config from Kafka's dotted keys; string values are parsed as Kafka parses them.

        Raises `InvalidConfigError` for an unknown key (not in `IGNORED_KAFKA_KEYS`), an unparsable value,
        or a value out of range; logs one warning naming the ignored keys.
        """
        props = {str(key).strip(): value for key, value in properties.items()}
        if "broker.id" in props:
            broker_id = parse_value("broker.id", props.pop("broker.id"), "int")
            if "node.id" in props and parse_value("node.id", props["node.id"], "int") != broker_id:
                raise InvalidConfigError(
                    f"broker.id ({broker_id}) and node.id ({props['node.id']!r}) must be equal when both are set"
                )
            props.setdefault("node.id", broker_id)
        log_dir = props.pop("log.dir", None)
        if log_dir is not None:
            props.setdefault("log.dirs", log_dir)
        if "controller.listener.names" in props and "listeners" in props:
            props["listeners"] = _without_controller_listeners(props["listeners"], props["controller.listener.names"])
        catalog = tuple(
            (key.removeprefix(ICEBERG_CATALOG_PREFIX), _catalog_value(key, props.pop(key)))
            for key in [key for key in props if key.startswith(ICEBERG_CATALOG_PREFIX)]
        )
        if any(not key for key, _ in catalog):
            raise InvalidConfigError(
                f"invalid broker config {ICEBERG_CATALOG_PREFIX!r}: a catalog property needs a name"
            )
        values, other_keys = values_from_properties(cls, props)
        ignored = [key for key in other_keys if key in IGNORED_KAFKA_KEYS or key.startswith(IGNORED_KAFKA_KEY_PREFIXES)]
        unknown = [key for key in other_keys if key not in ignored]
        if unknown:
            hints = [_describe_unknown(key) for key in unknown]
            raise InvalidConfigError(f"unknown broker config(s): {', '.join(hints)}")
        if ignored:
            logger.warning("ignoring Kafka broker settings that raybroker does not use: %s", ", ".join(ignored))
        return cls(**values, ignored_keys=tuple(ignored), iceberg_catalog=catalog)

    def to_properties(self) -> dict[str, str]:
        """Every set key under its Kafka name, as Kafka would print it (unset optional keys are left out), and the
        `iceberg.catalog.` properties: what `from_properties` reads back into the same config."""
        catalog = {ICEBERG_CATALOG_PREFIX + key: value for key, value in self.iceberg_catalog}
        return {**render_properties(self), **catalog}


def load_server_properties(path: str | Path) -> BrokerConfig:
    """Read a Java properties file (Kafka's `server.properties`) into a `BrokerConfig`.

    Raises `InvalidConfigError` carrying `path` when the file cannot be read, is not a properties file, or
    holds an invalid or unknown key.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InvalidConfigError(f"cannot read broker config: {exc.strerror or exc}", path=path) from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        # Kafka loads server.properties with Properties.load(InputStream), which reads ISO-8859-1.
        text = data.decode("latin-1")
    try:
        return BrokerConfig.from_properties(parse_properties(text, path=path))
    except (InvalidConfigError, CorruptCheckpointError) as exc:
        raise InvalidConfigError(exc.message, path=path) from exc


def _without_controller_listeners(listeners: Any, controller_names: Any) -> Any:
    """`listeners` without the KRaft controller's own endpoints (`controller.listener.names`): a KRaft server's
    file lists them beside its broker listeners, and raybroker has no KRaft controller to serve them."""
    if not isinstance(listeners, str) or not isinstance(controller_names, str):
        return listeners
    names = {name.strip().upper() for name in controller_names.split(",")}
    kept = [entry for entry in listeners.split(",") if entry.split("://", 1)[0].strip().upper() not in names]
    return ",".join(kept)


def _catalog_value(key: str, value: Any) -> str:
    """An `iceberg.catalog.` property's value, as text (a properties file gives text; a Python caller may not)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InvalidConfigError(f"invalid value {value!r} for {key}: expected a string")
    return str(value).strip()


def _describe_unknown(key: str) -> str:
    candidates = [*(kafka_name(spec.name) for spec in config_fields(BrokerConfig)), "broker.id", "log.dir"]
    close = difflib.get_close_matches(key, candidates, n=1)
    return f"{key!r} (did you mean {close[0]!r}?)" if close else repr(key)


__all__ = [
    "ICEBERG_CATALOG_PREFIX",
    "IGNORED_KAFKA_KEYS",
    "IGNORED_KAFKA_KEY_PREFIXES",
    "BrokerConfig",
    "load_server_properties",
]
