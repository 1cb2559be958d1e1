"""Topic-level log configuration: Kafka's names (dots as underscores) and Kafka's defaults (pre-4.0).

`LogConfig(**fields)` validates on creation; `LogConfig.from_properties({"segment.bytes": "1024"})`
accepts Kafka's dotted names with string or native values, so a user's topic configs work unchanged.
Every key has Kafka's Java type (`int`, `long`, `double`, `boolean`, `string`), parsed and range-checked by
`storage.config.config_values`; `cleanup.policy` and the two throttled-replicas lists (Kafka lists) are kept as
their comma-separated text (`storage.config.throttled_replicas` checks the latter).
Unknown keys, values of the wrong type and values out of Kafka's ranges raise `InvalidConfigError`.

Beside Kafka's keys, raybroker's own `iceberg.*` keys say whether and how the topic is kept as an Iceberg table
(`storage.config.iceberg_topic_config` owns their syntax and checks; `cluster.iceberg` translates).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from storage.config.config_values import (
    LONG_MAX,
    check_fields,
    config_field,
    config_fields,
    config_from_properties,
    config_key,
    kafka_name,
    render_properties,
    render_value,
)
from storage.config.iceberg_topic_config import ICEBERG_MODES, check_iceberg_keys
from storage.config.throttled_replicas import ThrottledReplicas
from storage.errors import InvalidConfigError

CLEANUP_POLICIES = ("delete", "compact")
COMPRESSION_TYPES = ("uncompressed", "gzip", "snappy", "lz4", "zstd", "producer")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


@dataclass(frozen=True)
class LogConfig:
    """Per-topic log settings, named as Kafka's topic configs (`segment.bytes` -> `segment_bytes`)."""

    segment_bytes: int = config_field(1073741824, "int", "max size of a .log file before the log rolls", low=14)
    segment_ms: int = config_field(604800000, "long", "roll the active segment after this age", low=1)
    segment_jitter_ms: int = config_field(0, "long", "random amount subtracted from segment.ms per segment", low=0)
    segment_index_bytes: int = config_field(10485760, "int", "preallocated size of .index and .timeindex files", low=4)
    index_interval_bytes: int = config_field(4096, "int", "bytes of log between offset-index entries", low=0)
    flush_messages: int = config_field(
        LONG_MAX, "long", "fsync after this many messages beyond the recovery point", low=1
    )
    flush_ms: int = config_field(LONG_MAX, "long", "fsync when the last flush is older than this", low=0)
    retention_ms: int = config_field(
        604800000, "long", "delete segments whose newest record is older (-1: no limit)", low=-1
    )
    retention_bytes: int = config_field(-1, "long", "delete oldest segments while the log is larger (-1: no limit)")
    # A Kafka list, kept as its comma-separated text; __post_init__ checks each entry.
    cleanup_policy: str = config_field("delete", "string", "delete, compact, or both (comma separated)")
    min_cleanable_dirty_ratio: float = config_field(
        0.5, "double", "dirty/total bytes above which the cleaner runs", low=0, high=1
    )
    min_compaction_lag_ms: int = config_field(0, "long", "records younger than this are never compacted", low=0)
    max_compaction_lag_ms: int = config_field(
        LONG_MAX, "long", "compact dirty data older than this whatever the ratio", low=1
    )
    delete_retention_ms: int = config_field(
        86400000, "long", "tombstones live this long after their first cleaning", low=0
    )
    file_delete_delay_ms: int = config_field(60000, "long", "delay between renaming to .deleted and unlinking", low=0)
    max_message_bytes: int = config_field(1048588, "int", "largest record batch accepted (after compression)", low=0)
    message_timestamp_type: str = config_field(
        "CreateTime", "string", "CreateTime or LogAppendTime", choices=TIMESTAMP_TYPES
    )
    message_timestamp_before_max_ms: int = config_field(
        LONG_MAX, "long", "reject CreateTime older than now minus this", low=0
    )
    message_timestamp_after_max_ms: int = config_field(
        LONG_MAX, "long", "reject CreateTime newer than now plus this", low=0
    )
    message_timestamp_difference_max_ms: int = config_field(LONG_MAX, "long", "deprecated: both windows at once", low=0)
    compression_type: str = config_field(
        "producer", "string", "codec the log stores; producer keeps the producer's", choices=COMPRESSION_TYPES
    )
    compression_gzip_level: int = config_field(-1, "int", "gzip level 1..9, or -1 for zlib's default", low=-1, high=9)
    compression_lz4_level: int = config_field(9, "int", "lz4 level 1..17", low=1, high=17)
    compression_zstd_level: int = config_field(3, "int", "zstd level -131072..22", low=-131072, high=22)
    preallocate: bool = config_field(False, "boolean", "create .log files at full segment.bytes length")
    min_insync_replicas: int = config_field(
        1, "int", "replication (one replica here): kept for Kafka compatibility", low=1
    )
    unclean_leader_election_enable: bool = config_field(False, "boolean", "replication: kept for Kafka compatibility")
    local_retention_ms: int = config_field(-2, "long", "tiered storage: kept for Kafka compatibility", low=-2)
    local_retention_bytes: int = config_field(-2, "long", "tiered storage: kept for Kafka compatibility", low=-2)
    leader_replication_throttled_replicas: str = config_field(
        "", "string", "replicas whose leader-side replication is throttled: '*' or partition:broker pairs"
    )
    follower_replication_throttled_replicas: str = config_field(
        "", "string", "replicas whose follower-side replication is throttled: '*' or partition:broker pairs"
    )
    errors_deadletterqueue_group_enable: bool = config_field(
        False, "boolean", "Kafka 4.4: share groups may write their dead letters to this topic (KIP-1191)"
    )
    iceberg_mode: str = config_field(
        "off",
        "string",
        "raybroker: off, key_value, value_json or value_msgpack (the topic kept as an Iceberg table)",
        choices=ICEBERG_MODES,
    )
    iceberg_table: str = config_field("", "string", "raybroker: the Iceberg table, namespace.table (raybroker.<topic>)")
    iceberg_target_lag_ms: int = config_field(
        60000, "long", "raybroker: how far the Iceberg table may fall behind the log", low=1
    )
    iceberg_partition_spec: str = config_field(
        "", "string", "raybroker: the Iceberg table's partitioning, e.g. day(timestamp)"
    )
    iceberg_value_schema: str = config_field(
        "", "string", "raybroker: the value's columns in the value modes, an Iceberg schema (JSON) or Spark DDL"
    )

    def __post_init__(self) -> None:
        check_fields(self)
        policies = [part.strip() for part in self.cleanup_policy.split(",")]
        if not policies or any(policy not in CLEANUP_POLICIES for policy in policies):
            raise InvalidConfigError(
                f"invalid value {self.cleanup_policy!r} for cleanup.policy: expected delete, compact or both"
            )
        for name in ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas"):
            ThrottledReplicas.parse(name, getattr(self, name.replace(".", "_")))
        check_iceberg_keys(
            self.iceberg_mode, self.iceberg_table, self.iceberg_partition_spec, self.iceberg_value_schema
        )
        if self.compression_gzip_level == 0:
            raise InvalidConfigError("invalid value 0 for compression.gzip.level: expected 1..9 or -1")
        if self.max_compaction_lag_ms < self.min_compaction_lag_ms:
            raise InvalidConfigError(
                f"max.compaction.lag.ms ({self.max_compaction_lag_ms}) must be >= "
                f"min.compaction.lag.ms ({self.min_compaction_lag_ms})"
            )

    def throttled_replicas(self, side: str) -> ThrottledReplicas:
        """`leader.replication.throttled.replicas` (`side` "leader") or `follower.replication.throttled.replicas`
        ("follower"), parsed."""
        name = f"{side}.replication.throttled.replicas"
        return ThrottledReplicas.parse(name, getattr(self, name.replace(".", "_")))

    @property
    def compact(self) -> bool:
        """Whether `cleanup.policy` includes `compact`."""
        return "compact" in self._policies

    @property
    def delete(self) -> bool:
        """Whether `cleanup.policy` includes `delete`."""
        return "delete" in self._policies

    @property
    def _policies(self) -> tuple[str, ...]:
        return tuple(part.strip() for part in self.cleanup_policy.split(","))

    @property
    def effective_segment_ms(self) -> int:
        """Compacted logs roll by max.compaction.lag.ms too, so dirty data becomes cleanable in time."""
        return min(self.segment_ms, self.max_compaction_lag_ms) if self.compact else self.segment_ms

    @property
    def timestamp_before_max_ms(self) -> int:
        """The stricter of `message.timestamp.before.max.ms` and the deprecated difference setting."""
        return min(self.message_timestamp_before_max_ms, self.message_timestamp_difference_max_ms)

    @property
    def timestamp_after_max_ms(self) -> int:
        """The stricter of `message.timestamp.after.max.ms` and the deprecated difference setting."""
        return min(self.message_timestamp_after_max_ms, self.message_timestamp_difference_max_ms)

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any], base: LogConfig | None = None) -> LogConfig:
        """Builds a config from Kafka's dotted names (string values are parsed), over `base` or the defaults."""
        return config_from_properties(cls, properties, base, "topic config")

    def to_properties(self) -> dict[str, str]:
        """Every setting under its Kafka name, as the string Kafka would print."""
        return render_properties(self)

    def overrides(self) -> dict[str, str]:
        """Only the settings that differ from Kafka's defaults, by Kafka name."""
        default = LogConfig()
        return {
            kafka_name(spec.name): render_value(getattr(self, spec.name))
            for spec in config_fields(self)
            if getattr(self, spec.name) != getattr(default, spec.name)
        }

    @staticmethod
    def describe() -> dict[str, tuple[str, str]]:
        """Kafka name -> (default, meaning), for help texts."""
        return {
            kafka_name(spec.name): (render_value(spec.default), config_key(spec).doc)
            for spec in config_fields(LogConfig)
        }
