"""The two bulk paths give the same rows: `read_topic` (Ray Data) and `read_topics` (the Spark bridge) over the same
offsets, for every value format, with headers, null keys and values, and values that do not decode. Both decode
through `cluster.records`; this checks that nothing either engine adds changes a row."""

from __future__ import annotations

import json
import time
from typing import Any

import msgpack
import pyarrow as pa
import pytest

from actors.clients.admin import Admin
from cluster.data import read_topic
from cluster.data.read_planning import timestamp_ms
from storage.records.compression import CompressionType
from tests.cluster.spark.helpers import append, unique_topic

pytestmark = [
    pytest.mark.ray,
    pytest.mark.spark,
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context"),
]

BASE_MS = int(time.time() * 1000) - 60_000
FIELDS = ("user", "page", "latency_ms", "ok")


def event(index: int) -> dict[str, Any]:
    return {"user": f"u{index % 5}", "page": f"/p{index % 3}", "latency_ms": index * 7, "ok": index % 2 == 0}


@pytest.fixture(scope="module")
def topics(spark_broker: Any) -> dict[str, str]:
    """A topic of msgpack values and one of JSON values, each with headers, null keys, a null value and a value
    that does not decode, over two partitions in batches of several codecs."""
    names = {}
    for value_format, encode in (("msgpack", msgpack.packb), ("json", lambda e: json.dumps(e).encode())):
        topic = unique_topic(f"parity-{value_format}")
        Admin().create_topic(topic, 2)
        for partition in range(2):
            for batch, codec in enumerate((CompressionType.NONE, CompressionType.LZ4, CompressionType.ZSTD)):
                records = []
                for index in range(partition * 100 + batch * 30, partition * 100 + batch * 30 + 30):
                    value = encode(event(index)) if index % 17 else (None if index % 2 else b"\xc1 not a value")
                    records.append(
                        {
                            "key": None if index % 4 == 0 else f"k{index}".encode(),
                            "value": value,
                            "timestamp": BASE_MS + index,
                            "headers": (("i", str(index).encode()), ("none", None)) if index % 3 == 0 else (),
                        }
                    )
                append(spark_broker, topic, partition, records, compression=codec)
        names[value_format] = topic
    return names


def spark_rows(df: Any) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    collected = df.withColumn("timestamp", F.unix_millis("timestamp")).collect()
    return sorted((row.asDict(recursive=True) for row in collected), key=lambda r: (r["partition"], r["offset"]))


def ray_rows(dataset: Any) -> list[dict[str, Any]]:
    rows = []
    for row in dataset.take_all():
        row["timestamp"] = timestamp_ms(row["timestamp"])
        rows.append(row)
    return sorted(rows, key=lambda r: (r["partition"], r["offset"]))


@pytest.mark.parametrize(
    ("value_format", "schema"),
    [
        ("binary", None),
        ("string", None),
        ("json", None),
        ("json", "user string, page string, latency_ms long, ok boolean"),
        ("msgpack", None),
        ("msgpack", "user string, page string, latency_ms long, ok boolean"),
    ],
)
def test_read_topic_and_read_topics_give_the_same_rows(
    spark: Any, topics: dict[str, str], value_format: str, schema: str | None
) -> None:
    from cluster.spark.kafka_source import read_topics

    topic = topics["msgpack" if value_format == "msgpack" else "json"]
    arrow_schema = None
    if schema is not None:
        arrow_schema = pa.schema(
            [("user", pa.string()), ("page", pa.string()), ("latency_ms", pa.int64()), ("ok", pa.bool_())]
        )
    spark_df = read_topics(spark, topics=topic, includeHeaders=True, valueFormat=value_format, valueSchema=schema)
    dataset = read_topic(topic, value_format=value_format, value_schema=arrow_schema)
    assert dataset.schema().names == spark_df.columns
    ours, theirs = ray_rows(dataset), spark_rows(spark_df)
    assert len(ours) == 2 * 90
    assert ours == theirs
    if value_format in ("json", "msgpack"):
        assert {row["user"] for row in ours} == {f"u{i}" for i in range(5)} | {None}
