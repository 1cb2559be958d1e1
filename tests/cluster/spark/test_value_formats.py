"""`cluster.spark.spark_value_formats` (over `cluster.records.value_formats`): schema inference and value decoding,
alone and
through `read_topics` in real Spark."""

from __future__ import annotations

import datetime
import json
import time
from collections import Counter
from typing import Any

import msgpack
import pyarrow as pa
import pytest
from pyspark.sql import types as T

from actors.clients.admin import Admin
from cluster.records.value_formats import ArrowValueDecoder
from cluster.spark.kafka_source import kafka_spark_schema, read_topics
from cluster.spark.spark_value_formats import decode_values, infer_value_type, value_layout
from tests.cluster.spark.helpers import append, unique_topic

NOW_MS = int(time.time() * 1000)
PAGES = ("/", "/cart", "/help")


def events(count: int) -> list[dict[str, Any]]:
    return [{"user": f"u{i % 4}", "page": PAGES[i % 3], "latency_ms": 10 + i, "timestamp": i} for i in range(count)]


# --- without Spark ---------------------------------------------------------------------------------------


def test_inference_widens_numbers_unites_struct_fields_and_types_lonely_nulls_as_strings() -> None:
    inferred = infer_value_type(
        [
            {"a": 1, "b": None, "c": [1, 2], "d": {"x": True}},
            {"a": 2.5, "e": "text", "c": [], "d": {"y": b"raw"}},
            None,
        ]
    )
    assert inferred == T.StructType(
        [
            T.StructField("a", T.DoubleType()),
            T.StructField("b", T.StringType()),
            T.StructField("c", T.ArrayType(T.LongType())),
            T.StructField("d", T.StructType([T.StructField("x", T.BooleanType()), T.StructField("y", T.BinaryType())])),
            T.StructField("e", T.StringType()),
        ]
    )


def test_inference_of_mixed_and_special_values() -> None:
    assert infer_value_type([1, "two"]) == T.StringType()
    assert infer_value_type([{1: "a"}, {2: "b"}]) == T.MapType(T.LongType(), T.StringType())
    assert infer_value_type([datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)]) == T.TimestampType()
    assert infer_value_type([None, None]) is None
    assert infer_value_type([]) is None


def test_the_arrow_decoder_replaces_value_by_the_fields_and_nulls_what_does_not_convert() -> None:
    value_type = T.StructType(
        [
            T.StructField("page", T.StringType()),
            T.StructField("n", T.LongType()),
            T.StructField("timestamp", T.LongType()),
        ]
    )
    layout = value_layout(kafka_spark_schema(), value_type)
    assert layout.names == (
        "key",
        "page",
        "n",
        "timestamp",
        "topic",
        "partition",
        "offset",
        "kafka_timestamp",
        "timestampType",
    )
    values = [
        msgpack.packb({"page": "/", "n": 1, "timestamp": 5}),
        msgpack.packb({"page": 7, "n": "not a number"}),
        b"\xc1 is not msgpack",
        msgpack.packb([1, 2]),
        None,
    ]
    count = len(values)
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([b"k"] * count),
            pa.array(values, type=pa.binary()),
            pa.array(["t"] * count),
            pa.array([0] * count, type=pa.int32()),
            pa.array(range(count), type=pa.int64()),
            pa.array([NOW_MS * 1000] * count, type=pa.timestamp("us", tz="UTC")),
            pa.array([0] * count, type=pa.int32()),
        ],
        names=list(kafka_spark_schema().names),
    )
    decoded = ArrowValueDecoder.for_layout("msgpack", layout.arrow).assemble(batch)
    assert decoded.schema.names == list(layout.names)
    assert decoded.column("page").to_pylist() == ["/", "7", None, None, None]
    assert decoded.column("n").to_pylist() == [1, None, None, None, None]
    assert decoded.column("timestamp").to_pylist() == [5, None, None, None, None]
    assert decoded.column("offset").to_pylist() == list(range(count))


# --- in Spark --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def page_views(spark_broker: Any) -> tuple[str, str, list[dict[str, Any]]]:
    """Two topics holding the same events, one as msgpack values and one as JSON values."""
    data = events(120)
    names = []
    for serialize in (msgpack.packb, lambda event: json.dumps(event).encode()):
        topic = unique_topic("views")
        Admin().create_topic(topic, 2)
        for partition in range(2):
            mine = data[partition::2]
            append(spark_broker, topic, partition, [{"value": serialize(e), "timestamp": NOW_MS} for e in mine])
        names.append(topic)
    return names[0], names[1], data


def page_counts(df: Any) -> dict[str, tuple[int, int]]:
    from pyspark.sql import functions as F

    grouped = df.groupBy("page").agg(F.count("*").alias("n"), F.sum("latency_ms").alias("s"))
    return {row["page"]: (row["n"], row["s"]) for row in grouped.collect()}


def expected_counts(data: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    counts = Counter(e["page"] for e in data)
    return {page: (counts[page], sum(e["latency_ms"] for e in data if e["page"] == page)) for page in counts}


@pytest.mark.ray
@pytest.mark.spark
@pytest.mark.parametrize("value_format", ["msgpack", "json"])
@pytest.mark.parametrize("schema", [None, "user string, page string, latency_ms long, timestamp long"])
def test_values_decode_into_columns_with_a_given_or_inferred_schema(
    spark: Any, page_views: tuple[str, str, list[dict[str, Any]]], value_format: str, schema: str | None
) -> None:
    msgpack_topic, json_topic, data = page_views
    topic = msgpack_topic if value_format == "msgpack" else json_topic
    df = read_topics(spark, topics=topic, valueFormat=value_format, valueSchema=schema)
    assert df.columns == [
        "key",
        "user",
        "page",
        "latency_ms",
        "timestamp",
        "topic",
        "partition",
        "offset",
        "kafka_timestamp",
        "timestampType",
    ]
    assert dict(df.dtypes)["latency_ms"] == "bigint" and dict(df.dtypes)["kafka_timestamp"] == "timestamp"
    assert page_counts(df) == expected_counts(data)


@pytest.mark.ray
@pytest.mark.spark
def test_string_format_and_decode_values_on_any_kafka_dataframe(
    spark: Any, page_views: tuple[str, str, list[dict[str, Any]]]
) -> None:
    msgpack_topic, json_topic, data = page_views
    text = read_topics(spark, topics=json_topic, valueFormat="string")
    assert dict(text.dtypes)["value"] == "string"
    assert sorted(json.loads(row["value"])["latency_ms"] for row in text.select("value").collect()) == [
        e["latency_ms"] for e in data
    ]
    raw = read_topics(spark, topics=msgpack_topic)
    assert page_counts(decode_values(raw, "msgpack", "page string, latency_ms long")) == expected_counts(data)
    raw_json = read_topics(spark, topics=json_topic)
    assert page_counts(decode_values(raw_json, "json")) == expected_counts(data)
