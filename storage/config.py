"""Topic-level log configuration: Kafka's names (dots as underscores) and Kafka's defaults (pre-4.0).

`LogConfig(**fields)` validates on creation; `LogConfig.from_properties({"segment.bytes": "1024"})`
accepts Kafka's dotted names with string or native values, so a user's topic configs work unchanged.
Unknown keys, values of the wrong type and values out of Kafka's ranges raise `InvalidConfigError`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from storage.errors import InvalidConfigError

LONG_MAX = 2**63 - 1

CLEANUP_POLICIES = ("delete", "compact")
COMPRESSION_TYPES = ("uncompressed", "gzip", "snappy", "lz4", "zstd", "producer")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


@dataclass(frozen=True)
class _Range:
    low: float | None = None
    high: float | None = None
    choices: tuple[Any, ...] = ()


def _conf(default: Any, doc: str, low: float | None = None, high: float | None = None, choices: tuple = ()) -> Any:
    return field(default=default, metadata={"doc": doc, "range": _Range(low, high, choices)})


@dataclass(frozen=True)
class LogConfig:
    """Per-topic log settings, named as Kafka's topic configs (`segment.bytes` -> `segment_bytes`)."""

    segment_bytes: int = _conf(1073741824, "max size of a .log file before the log rolls", low=14)
    segment_ms: int = _conf(604800000, "roll the active segment after this age", low=1)
    segment_jitter_ms: int = _conf(0, "random amount subtracted from segment.ms per segment", low=0)
    segment_index_bytes: int = _conf(10485760, "preallocated size of .index and .timeindex files", low=4)
    index_interval_bytes: int = _conf(4096, "bytes of log between offset-index entries", low=0)
    flush_messages: int = _conf(LONG_MAX, "fsync after this many messages beyond the recovery point", low=1)
    flush_ms: int = _conf(LONG_MAX, "fsync when the last flush is older than this", low=0)
    retention_ms: int = _conf(604800000, "delete segments whose newest record is older (-1: no limit)", low=-1)
    retention_bytes: int = _conf(-1, "delete oldest segments while the log is larger (-1: no limit)")
    cleanup_policy: str = _conf("delete", "delete, compact, or both (comma separated)")
    min_cleanable_dirty_ratio: float = _conf(0.5, "dirty/total bytes above which the cleaner runs", low=0, high=1)
    min_compaction_lag_ms: int = _conf(0, "records younger than this are never compacted", low=0)
    max_compaction_lag_ms: int = _conf(LONG_MAX, "compact dirty data older than this whatever the ratio", low=1)
    delete_retention_ms: int = _conf(86400000, "tombstones live this long after their first cleaning", low=0)
    file_delete_delay_ms: int = _conf(60000, "delay between renaming to .deleted and unlinking", low=0)
    max_message_bytes: int = _conf(1048588, "largest record batch accepted (after compression)", low=0)
    message_timestamp_type: str = _conf("CreateTime", "CreateTime or LogAppendTime", choices=TIMESTAMP_TYPES)
    message_timestamp_before_max_ms: int = _conf(LONG_MAX, "reject CreateTime older than now minus this", low=0)
    message_timestamp_after_max_ms: int = _conf(LONG_MAX, "reject CreateTime newer than now plus this", low=0)
    message_timestamp_difference_max_ms: int = _conf(LONG_MAX, "deprecated: both windows at once", low=0)
    compression_type: str = _conf(
        "producer", "codec the log stores; producer keeps the producer's", choices=COMPRESSION_TYPES
    )
    compression_gzip_level: int = _conf(-1, "gzip level 1..9, or -1 for zlib's default", low=-1, high=9)
    compression_lz4_level: int = _conf(9, "lz4 level 1..17", low=1, high=17)
    compression_zstd_level: int = _conf(3, "zstd level -131072..22", low=-131072, high=22)
    preallocate: bool = _conf(False, "create .log files at full segment.bytes length")
    min_insync_replicas: int = _conf(1, "replication (one replica here): kept for Kafka compatibility", low=1)
    unclean_leader_election_enable: bool = _conf(False, "replication: kept for Kafka compatibility")
    local_retention_ms: int = _conf(-2, "tiered storage: kept for Kafka compatibility", low=-2)
    local_retention_bytes: int = _conf(-2, "tiered storage: kept for Kafka compatibility", low=-2)

    def __post_init__(self) -> None:
        for spec in fields(self):
            value = getattr(self, spec.name)
            name = kafka_name(spec.name)
            _check_type(name, value, spec.type)
            if isinstance(value, float) and math.isnan(value):
                raise InvalidConfigError(f"invalid value {value!r} for {name}: not a number")  # NaN passes < and >
            bounds: _Range = spec.metadata["range"]
            if bounds.low is not None and value < bounds.low:
                raise InvalidConfigError(f"invalid value {value!r} for {name}: must be at least {bounds.low:g}")
            if bounds.high is not None and value > bounds.high:
                raise InvalidConfigError(f"invalid value {value!r} for {name}: must be at most {bounds.high:g}")
            if bounds.choices and value not in bounds.choices:
                raise InvalidConfigError(f"invalid value {value!r} for {name}: expected one of {list(bounds.choices)}")
        policies = [part.strip() for part in self.cleanup_policy.split(",")]
        if not policies or any(policy not in CLEANUP_POLICIES for policy in policies):
            raise InvalidConfigError(
                f"invalid value {self.cleanup_policy!r} for cleanup.policy: expected delete, compact or both"
            )
        if self.compression_gzip_level == 0:
            raise InvalidConfigError("invalid value 0 for compression.gzip.level: expected 1..9 or -1")
        if self.max_compaction_lag_ms < self.min_compaction_lag_ms:
            raise InvalidConfigError(
                f"max.compaction.lag.ms ({self.max_compaction_lag_ms}) must be >= "
                f"min.compaction.lag.ms ({self.min_compaction_lag_ms})"
            )

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
        known = {spec.name: spec for spec in fields(cls)}
        values: dict[str, Any] = {}
        for key, raw in properties.items():
            name = str(key).strip().replace(".", "_")
            spec = known.get(name)
            if spec is None:
                raise InvalidConfigError(f"unknown topic config {key!r}")
            values[name] = _parse(str(key), raw, spec.type)
        return dataclasses.replace(base or cls(), **values)

    def to_properties(self) -> dict[str, str]:
        """Every setting under its Kafka name, as the string Kafka would print."""
        return {kafka_name(spec.name): _render(getattr(self, spec.name)) for spec in fields(self)}

    def overrides(self) -> dict[str, str]:
        """Only the settings that differ from Kafka's defaults, by Kafka name."""
        default = LogConfig()
        return {
            kafka_name(spec.name): _render(getattr(self, spec.name))
            for spec in fields(self)
            if getattr(self, spec.name) != getattr(default, spec.name)
        }

    @staticmethod
    def describe() -> dict[str, tuple[str, str]]:
        """Kafka name -> (default, meaning), for help texts."""
        return {kafka_name(spec.name): (_render(spec.default), spec.metadata["doc"]) for spec in fields(LogConfig)}


def kafka_name(field_name: str) -> str:
    """`segment_bytes` -> `segment.bytes`."""
    return field_name.replace("_", ".")


def _check_type(name: str, value: Any, type_name: Any) -> None:
    expected = {"int": int, "float": (int, float), "bool": bool, "str": str}[str(type_name)]
    if isinstance(value, bool) and type_name != "bool":
        raise InvalidConfigError(f"invalid value {value!r} for {name}: expected {type_name}")
    if not isinstance(value, expected):
        raise InvalidConfigError(f"invalid value {value!r} for {name}: expected {type_name}")


def _parse(key: str, raw: Any, type_name: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    text = raw.strip()
    try:
        if type_name == "int":
            return int(text)
        if type_name == "float":
            return float(text)
    except ValueError:
        raise InvalidConfigError(f"invalid value {raw!r} for {key}: expected {type_name}") from None
    if type_name == "bool":
        if text.lower() not in ("true", "false"):
            raise InvalidConfigError(f"invalid value {raw!r} for {key}: expected true or false")
        return text.lower() == "true"
    return text


def _render(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
