"""Tests for `storage.config.iceberg_topic_config`: the `iceberg.*` topic configs parsed and checked when set, through
`LogConfig` as every topic config is."""

from __future__ import annotations

import pytest

from storage.config.iceberg_topic_config import PartitionTerm, parse_partition_spec, table_identifier
from storage.config.log_config import LogConfig
from storage.errors import InvalidConfigError


def test_key_value_topic_config_parses_every_iceberg_key() -> None:
    config = LogConfig.from_properties(
        {
            "iceberg.mode": "key_value",
            "iceberg.table": "analytics.clicks",
            "iceberg.target.lag.ms": "5000",
            "iceberg.partition.spec": "day(timestamp), bucket(16, key), partition",
        }
    )
    assert (config.iceberg_mode, config.iceberg_target_lag_ms) == ("key_value", 5000)
    assert config.overrides()["iceberg.table"] == "analytics.clicks"
    assert parse_partition_spec(config.iceberg_partition_spec) == (
        PartitionTerm("day", "timestamp"),
        PartitionTerm("bucket", "key", 16),
        PartitionTerm("identity", "partition"),
    )


def test_table_identifier_defaults_to_the_raybroker_namespace_and_splits_at_the_last_dot() -> None:
    assert table_identifier("", "clicks") == ("raybroker", "clicks")
    assert table_identifier("a.b.events", "clicks") == ("a.b", "events")


def test_empty_partition_spec_is_unpartitioned() -> None:
    assert parse_partition_spec("") == ()
    assert parse_partition_spec("  ") == ()


@pytest.mark.parametrize(
    ("properties", "reason"),
    [
        ({"iceberg.mode": "parquet"}, "expected one of"),
        ({"iceberg.mode": "value_json"}, "not supported yet"),
        ({"iceberg.target.lag.ms": "0"}, "at least 1"),
        ({"iceberg.target.lag.ms": "soon"}, "expected an integer"),
        ({"iceberg.table": "clicks"}, "expected namespace.table"),
        ({"iceberg.table": "a..b"}, "expected namespace.table"),
        ({"iceberg.table": "ns.clicks table"}, "expected namespace.table"),
        ({"iceberg.partition.spec": "day(key)"}, "key takes only identity, bucket, truncate"),
        ({"iceberg.partition.spec": "bucket(key)"}, "bucket and truncate take (N > 0, COLUMN)"),
        ({"iceberg.partition.spec": "bucket(0, key)"}, "bucket and truncate take (N > 0, COLUMN)"),
        ({"iceberg.partition.spec": "day(3, timestamp)"}, "bucket and truncate take (N > 0, COLUMN)"),
        ({"iceberg.partition.spec": "month(ts)"}, "no column 'ts'"),
        ({"iceberg.partition.spec": "headers"}, "no column 'headers'"),
        ({"iceberg.partition.spec": "day(timestamp),,key"}, "'' is not COLUMN"),
        ({"iceberg.partition.spec": "key, identity(key)"}, "given twice"),
        ({"iceberg.partition.spec": "day(timestamp"}, "is not COLUMN"),
    ],
)
def test_bad_iceberg_values_are_refused_with_the_reason(properties: dict[str, str], reason: str) -> None:
    with pytest.raises(InvalidConfigError, match=r"iceberg\.") as raised:
        LogConfig.from_properties(properties)
    assert reason in str(raised.value)
