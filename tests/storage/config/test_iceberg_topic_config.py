"""Tests for `storage.config.iceberg_topic_config`: the `iceberg.*` topic configs parsed and checked when set, through
`LogConfig` as every topic config is."""

from __future__ import annotations

import json

import pytest

from storage.config.iceberg_topic_config import PartitionTerm, parse_partition_spec, table_identifier
from storage.config.iceberg_value_schema import ValueColumn, parse_value_schema
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


def _iceberg_schema(*fields: dict[str, object]) -> str:
    return json.dumps(
        {"type": "struct", "fields": [{"id": i + 1, "required": False, **f} for i, f in enumerate(fields)]}
    )


def test_value_schema_in_spark_ddl_and_as_an_iceberg_schema_give_the_same_columns() -> None:
    ddl = "id BIGINT NOT NULL, `name` VARCHAR(20), score double, seen TIMESTAMP, day DATE, raw BINARY, ok BOOLEAN"
    iceberg = _iceberg_schema(
        {"name": "id", "type": "long", "required": True},
        {"name": "name", "type": "string"},
        {"name": "score", "type": "double"},
        {"name": "seen", "type": "timestamptz"},
        {"name": "day", "type": "date"},
        {"name": "raw", "type": "binary"},
        {"name": "ok", "type": "boolean"},
    )
    expected = (
        ValueColumn("id", "long", True),
        ValueColumn("name", "string"),
        ValueColumn("score", "double"),
        ValueColumn("seen", "timestamptz"),
        ValueColumn("day", "date"),
        ValueColumn("raw", "binary"),
        ValueColumn("ok", "boolean"),
    )
    assert parse_value_schema(ddl) == parse_value_schema(iceberg) == expected
    config = LogConfig.from_properties(
        {
            "iceberg.mode": "value_json",
            "iceberg.value.schema": ddl,
            "iceberg.partition.spec": "day(seen), bucket(8, id)",
        }
    )
    assert config.iceberg_mode == "value_json"


def test_columns_named_like_nested_types_are_columns() -> None:
    assert parse_value_schema("map STRING, `array` INT, dec DOUBLE") == (
        ValueColumn("map", "string"),
        ValueColumn("array", "int"),
        ValueColumn("dec", "double"),
    )


def test_key_value_does_not_read_the_value_schema() -> None:
    assert LogConfig.from_properties({"iceberg.mode": "key_value", "iceberg.value.schema": "x"}).iceberg_value_schema


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
        ({"iceberg.mode": "value_json"}, "the value modes need the value's columns"),
        ({"iceberg.mode": "value_msgpack", "iceberg.value.schema": "id BIGINT,"}, "'' is not `NAME TYPE [NOT NULL]`"),
        ({"iceberg.mode": "value_json", "iceberg.value.schema": "id DECIMAL(10, 2)"}, "decimals are not supported yet"),
        ({"iceberg.mode": "value_json", "iceberg.value.schema": "tags ARRAY<STRING>"}, "nested types (struct, list"),
        (
            {
                "iceberg.mode": "value_json",
                "iceberg.value.schema": _iceberg_schema({"name": "a", "type": {"type": "list"}}),
            },
            "field 'a': nested types",
        ),
        ({"iceberg.mode": "value_json", "iceberg.value.schema": "id UUID"}, "type UUID is not one of BOOLEAN"),
        ({"iceberg.mode": "value_json", "iceberg.value.schema": "id INT(3)"}, "only VARCHAR(N) and CHAR(N)"),
        ({"iceberg.mode": "value_json", "iceberg.value.schema": "offset BIGINT"}, "'offset' is the record's own"),
        ({"iceberg.mode": "value_json", "iceberg.value.schema": "a INT, a STRING"}, "'a' is given twice"),
        ({"iceberg.mode": "value_json", "iceberg.value.schema": "{"}, "not JSON"),
        ({"iceberg.mode": "value_json", "iceberg.value.schema": '{"type": "struct", "fields": []}'}, "at least one"),
        (
            {"iceberg.mode": "value_json", "iceberg.value.schema": _iceberg_schema({"name": "a", "type": "uuid"})},
            "type 'uuid' is not one of boolean",
        ),
        (
            {
                "iceberg.mode": "value_json",
                "iceberg.value.schema": "n DOUBLE",
                "iceberg.partition.spec": "bucket(4, n)",
            },
            "n takes only identity",
        ),
        (
            {"iceberg.mode": "value_json", "iceberg.value.schema": "n DOUBLE", "iceberg.partition.spec": "key"},
            "no column 'key'",
        ),
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
