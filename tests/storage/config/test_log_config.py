"""Tests for `storage.config.log_config.LogConfig`: Kafka's topic-config names, defaults, parsing and validation."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.config.log_config import LONG_MAX, LogConfig, kafka_name
from storage.errors import InvalidConfigError

# Spec section 1 (Kafka 3.x defaults), as Kafka prints them.
KAFKA_DEFAULTS = {
    "segment.bytes": "1073741824",
    "segment.ms": "604800000",
    "segment.jitter.ms": "0",
    "segment.index.bytes": "10485760",
    "index.interval.bytes": "4096",
    "flush.messages": "9223372036854775807",
    "flush.ms": "9223372036854775807",
    "retention.ms": "604800000",
    "retention.bytes": "-1",
    "cleanup.policy": "delete",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "max.compaction.lag.ms": "9223372036854775807",
    "delete.retention.ms": "86400000",
    "file.delete.delay.ms": "60000",
    "max.message.bytes": "1048588",
    "message.timestamp.type": "CreateTime",
    "message.timestamp.before.max.ms": "9223372036854775807",
    "message.timestamp.after.max.ms": "9223372036854775807",
    "message.timestamp.difference.max.ms": "9223372036854775807",
    "compression.type": "producer",
    "compression.gzip.level": "-1",
    "compression.lz4.level": "9",
    "compression.zstd.level": "3",
    "preallocate": "false",
    "min.insync.replicas": "1",
    "unclean.leader.election.enable": "false",
    "local.retention.ms": "-2",
    "local.retention.bytes": "-2",
    "leader.replication.throttled.replicas": "",
    "follower.replication.throttled.replicas": "",
    "errors.deadletterqueue.group.enable": "false",  # Kafka 4.4's (KIP-1191)
}
# raybroker's own topic configs (`storage.config.iceberg_topic_config`), listed after Kafka's.
RAYBROKER_DEFAULTS = {
    "iceberg.mode": "off",
    "iceberg.table": "",
    "iceberg.target.lag.ms": "60000",
    "iceberg.partition.spec": "",
    "iceberg.value.schema": "",
}


def test_defaults_are_kafkas() -> None:
    assert LogConfig().to_properties() == {**KAFKA_DEFAULTS, **RAYBROKER_DEFAULTS}


def test_default_values_have_python_types() -> None:
    config = LogConfig()
    assert config.segment_bytes == 1024**3
    assert config.retention_ms == 7 * 24 * 3600 * 1000
    assert config.flush_messages == LONG_MAX == 2**63 - 1
    assert config.min_cleanable_dirty_ratio == 0.5
    assert config.preallocate is False
    assert config.delete and not config.compact


def test_kafka_name() -> None:
    assert kafka_name("segment_bytes") == "segment.bytes"
    assert kafka_name("min_cleanable_dirty_ratio") == "min.cleanable.dirty.ratio"


def test_describe_lists_every_setting_with_its_default() -> None:
    described = LogConfig.describe()
    assert {name: default for name, (default, _) in described.items()} == {**KAFKA_DEFAULTS, **RAYBROKER_DEFAULTS}
    assert all(meaning for _, meaning in described.values())


# --- parsing -------------------------------------------------------------------------------------------


def test_from_properties_parses_strings() -> None:
    config = LogConfig.from_properties(
        {
            "segment.bytes": "1048576",
            "retention.ms": "-1",
            "retention.bytes": " 5000000000 ",
            "min.cleanable.dirty.ratio": "0.25",
            "preallocate": "true",
            "unclean.leader.election.enable": "False",
            "cleanup.policy": "compact,delete",
            "compression.type": "zstd",
            "message.timestamp.type": "LogAppendTime",
            "compression.zstd.level": "-7",
        }
    )
    assert config.segment_bytes == 1_048_576
    assert config.retention_ms == -1
    assert config.retention_bytes == 5_000_000_000
    assert config.min_cleanable_dirty_ratio == 0.25
    assert config.preallocate is True
    assert config.unclean_leader_election_enable is False
    assert config.compact and config.delete
    assert config.compression_type == "zstd"
    assert config.message_timestamp_type == "LogAppendTime"
    assert config.compression_zstd_level == -7
    assert config.segment_ms == 604_800_000  # untouched settings keep Kafka's default


def test_from_properties_accepts_native_values() -> None:
    config = LogConfig.from_properties(
        {"segment.bytes": 4096, "min.cleanable.dirty.ratio": 1, "preallocate": True, "cleanup.policy": "compact"}
    )
    assert (config.segment_bytes, config.min_cleanable_dirty_ratio, config.preallocate) == (4096, 1, True)
    assert config.compact and not config.delete


@pytest.mark.parametrize("text", ["true", "TRUE", "True", " true "])
def test_booleans_are_case_insensitive(text: str) -> None:
    assert LogConfig.from_properties({"preallocate": text}).preallocate is True


@pytest.mark.parametrize("policy", ["delete", "compact", "compact,delete", "delete,compact", "compact, delete"])
def test_cleanup_policy_lists(policy: str) -> None:
    config = LogConfig.from_properties({"cleanup.policy": policy})
    assert config.compact == ("compact" in policy)
    assert config.delete == ("delete" in policy)


def test_from_properties_over_a_base() -> None:
    base = LogConfig.from_properties({"segment.bytes": "2048", "retention.ms": "1000"})
    config = LogConfig.from_properties({"retention.ms": "5"}, base=base)
    assert (config.segment_bytes, config.retention_ms) == (2048, 5)
    assert base.retention_ms == 1000


def test_config_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        LogConfig().segment_bytes = 1  # type: ignore[misc]


# --- rejection -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["segment.byte", "log.segment.bytes", "log.retention.hours", "", "foo"])
def test_unknown_keys(key: str) -> None:
    with pytest.raises(InvalidConfigError):
        LogConfig.from_properties({key: "1"})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("segment.bytes", "abc"),
        ("segment.bytes", "1.5"),
        ("segment.bytes", "1e3"),
        ("segment.bytes", ""),
        ("segment.bytes", True),
        ("segment.bytes", 1024.0),
        ("segment.bytes", None),
        ("retention.ms", False),
        ("min.cleanable.dirty.ratio", "half"),
        ("min.cleanable.dirty.ratio", True),
        ("preallocate", "yes"),
        ("preallocate", "1"),
        ("preallocate", 1),
        ("cleanup.policy", 5),
        ("cleanup.policy", ["compact"]),
        ("compression.type", 4),
    ],
)
def test_wrong_types(key: str, value: object) -> None:
    with pytest.raises(InvalidConfigError):
        LogConfig.from_properties({key: value})


@pytest.mark.parametrize(
    "fields",
    [
        {"segment_bytes": True},
        {"preallocate": 0},
        {"min_cleanable_dirty_ratio": "0.5"},
        {"cleanup_policy": None},
    ],
)
def test_wrong_types_in_the_constructor(fields: dict[str, object]) -> None:
    with pytest.raises(InvalidConfigError):
        LogConfig(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("segment.bytes", "13"),
        ("segment.ms", "0"),
        ("segment.jitter.ms", "-1"),
        ("segment.index.bytes", "3"),
        ("index.interval.bytes", "-1"),
        ("flush.messages", "0"),
        ("flush.ms", "-1"),
        ("retention.ms", "-2"),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("min.cleanable.dirty.ratio", "-0.1"),
        ("min.cleanable.dirty.ratio", "nan"),
        ("min.cleanable.dirty.ratio", "inf"),
        ("min.compaction.lag.ms", "-1"),
        ("max.compaction.lag.ms", "0"),
        ("delete.retention.ms", "-1"),
        ("file.delete.delay.ms", "-1"),
        ("max.message.bytes", "-1"),
        ("message.timestamp.before.max.ms", "-1"),
        ("message.timestamp.after.max.ms", "-1"),
        ("compression.gzip.level", "0"),
        ("compression.gzip.level", "10"),
        ("compression.gzip.level", "-2"),
        ("compression.lz4.level", "0"),
        ("compression.lz4.level", "18"),
        ("compression.zstd.level", "23"),
        ("compression.zstd.level", "-131073"),
        ("min.insync.replicas", "0"),
        ("local.retention.ms", "-3"),
        ("local.retention.bytes", "-3"),
        ("compression.type", "brotli"),
        ("compression.type", "none"),
        ("message.timestamp.type", "createtime"),
        ("message.timestamp.type", "NoTimestampType"),
        ("cleanup.policy", "compact,foo"),
        ("cleanup.policy", "remove"),
        ("cleanup.policy", ""),
        ("cleanup.policy", "compact,"),
    ],
)
def test_out_of_range(key: str, value: str) -> None:
    with pytest.raises(InvalidConfigError):
        LogConfig.from_properties({key: value})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("segment.bytes", "14"),
        ("segment.ms", "1"),
        ("segment.index.bytes", "4"),
        ("index.interval.bytes", "0"),
        ("retention.ms", "-1"),
        ("retention.bytes", "-5"),
        ("min.cleanable.dirty.ratio", "0"),
        ("min.cleanable.dirty.ratio", "1"),
        ("compression.gzip.level", "-1"),
        ("compression.gzip.level", "1"),
        ("compression.gzip.level", "9"),
        ("compression.lz4.level", "1"),
        ("compression.lz4.level", "17"),
        ("compression.zstd.level", "-131072"),
        ("compression.zstd.level", "22"),
        ("local.retention.ms", "-2"),
        ("compression.type", "uncompressed"),
        ("flush.messages", "9223372036854775807"),
    ],
)
def test_range_edges_are_accepted(key: str, value: str) -> None:
    config = LogConfig.from_properties({key: value})
    assert config.to_properties()[key] == value or float(config.to_properties()[key]) == float(value)


def test_max_compaction_lag_below_min_is_rejected() -> None:
    with pytest.raises(InvalidConfigError):
        LogConfig.from_properties({"min.compaction.lag.ms": "1000", "max.compaction.lag.ms": "999"})
    config = LogConfig.from_properties({"min.compaction.lag.ms": "1000", "max.compaction.lag.ms": "1000"})
    assert config.max_compaction_lag_ms == config.min_compaction_lag_ms == 1000


def test_error_message_names_the_kafka_key() -> None:
    with pytest.raises(InvalidConfigError, match=r"segment\.bytes"):
        LogConfig.from_properties({"segment.bytes": "13"})
    with pytest.raises(InvalidConfigError, match=r"segment\.ms"):
        LogConfig.from_properties({"segment.ms": "soon"})


# --- writing back --------------------------------------------------------------------------------------


def test_to_properties_round_trips() -> None:
    config = LogConfig.from_properties(
        {
            "segment.bytes": "1048576",
            "cleanup.policy": "compact,delete",
            "min.cleanable.dirty.ratio": "0.1",
            "preallocate": "true",
            "compression.type": "lz4",
            "retention.ms": "-1",
        }
    )
    properties = config.to_properties()
    assert properties["preallocate"] == "true"
    assert properties["min.cleanable.dirty.ratio"] == "0.1"
    assert LogConfig.from_properties(properties) == config
    assert LogConfig.from_properties(LogConfig().to_properties()) == LogConfig()


@settings(max_examples=200, deadline=None)
@given(
    segment_bytes=st.integers(14, 2**31 - 1),
    retention_ms=st.integers(-1, LONG_MAX),
    ratio=st.floats(0, 1, allow_nan=False),
    preallocate=st.booleans(),
    policy=st.sampled_from(["delete", "compact", "compact,delete"]),
    zstd_level=st.integers(-131072, 22),
)
def test_to_properties_round_trips_any_valid_config(
    segment_bytes: int, retention_ms: int, ratio: float, preallocate: bool, policy: str, zstd_level: int
) -> None:
    config = LogConfig(
        segment_bytes=segment_bytes,
        retention_ms=retention_ms,
        min_cleanable_dirty_ratio=ratio,
        preallocate=preallocate,
        cleanup_policy=policy,
        compression_zstd_level=zstd_level,
    )
    assert LogConfig.from_properties(config.to_properties()) == config


def test_overrides_lists_only_changed_settings() -> None:
    assert LogConfig().overrides() == {}
    config = LogConfig.from_properties({"retention.ms": "1000", "preallocate": "true", "segment.bytes": "1073741824"})
    assert config.overrides() == {"retention.ms": "1000", "preallocate": "true"}
    assert LogConfig.from_properties(config.overrides()) == config


# --- derived settings ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "segment_ms", "max_lag_ms", "effective_ms"),
    [
        ("delete", 1000, 10, 1000),
        ("compact", 1000, 10, 10),
        ("compact,delete", 1000, 10, 10),
        ("compact", 1000, LONG_MAX, 1000),
        ("compact", 10, 1000, 10),
    ],
)
def test_effective_segment_ms(policy: str, segment_ms: int, max_lag_ms: int, effective_ms: int) -> None:
    config = LogConfig(cleanup_policy=policy, segment_ms=segment_ms, max_compaction_lag_ms=max_lag_ms)
    assert config.effective_segment_ms == effective_ms


def test_timestamp_windows_take_the_deprecated_difference_into_account() -> None:
    config = LogConfig(message_timestamp_before_max_ms=5000, message_timestamp_difference_max_ms=3000)
    assert config.timestamp_before_max_ms == 3000
    assert config.timestamp_after_max_ms == 3000
    config = LogConfig(message_timestamp_after_max_ms=100)
    assert (config.timestamp_before_max_ms, config.timestamp_after_max_ms) == (LONG_MAX, 100)


def test_nan_ratio_is_rejected_in_the_constructor_too() -> None:
    with pytest.raises(InvalidConfigError):
        LogConfig(min_cleanable_dirty_ratio=math.nan)
