"""The Spark bridge's read over topics' Iceberg tables and their logs: `read_topics(..., history="table")`.

A topic kept as a `key_value` Iceberg table (`iceberg.mode`) has its history in the table, also past the log's
retention. The read takes each topic's table at its current snapshot and the log from the offsets that snapshot holds
up to (`cluster.iceberg.topic_tables`; a partition the table has nothing of, from the log start), as one DataFrame
of Spark's Kafka-source schema: each record once, the table's and the log's parts meeting at the snapshot's offsets.
It equals a full read of the topics while their logs still hold everything.

The table's part is read by Spark's own Parquet reader from the data files the snapshot lists (a `key_value` table is
only appended to), so the warehouse must be one Spark's filesystems reach (a local `file:` warehouse, HDFS, `s3a:`).
Its rows become the Kafka schema's: the topic added, `timestamp_type` as `timestampType`.

What such a read accepts: the whole history a read_committed read sees (`startingOffsets` "earliest", `endingOffsets`
"latest", `isolationLevel` "read_committed"; no `assign`, no timestamps), `failOnDataLoss` and `minPartitions`;
values as `binary`, `string`, or `json` with a `valueSchema` (the table's values are not sampled to infer one).
Anything else is refused with `InvalidRequestError` before anything is read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import reduce
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from actors.clients.broker import Broker
from cluster.iceberg.topic_tables import snapshot_data_files, table_snapshots
from cluster.iceberg.translation_driver_actor import iceberg_catalog_properties
from cluster.records.isolation import READ_COMMITTED
from cluster.records.read_plan import EARLIEST
from cluster.spark.planning import topic_partitions
from storage.errors import InvalidRequestError

# Options a read over table and log takes as given, and those it must have at one value (the whole history).
PASSED_OPTIONS = frozenset({"failOnDataLoss", "minPartitions"})
FIXED_OPTIONS = {"startingOffsets": "earliest", "endingOffsets": "latest", "isolationLevel": READ_COMMITTED}
VALUE_FORMATS = ("binary", "string", "json")


def check_history_read(options: Mapping[str, Any], value_format: str, value_schema: object) -> dict[str, Any]:
    """The plan options of a read over table and log (`PASSED_OPTIONS`); `InvalidRequestError` for any other read
    (see the module docstring)."""
    fixed = {name: options[name] for name in FIXED_OPTIONS if name in options}
    others = sorted(set(options) - PASSED_OPTIONS - set(FIXED_OPTIONS))
    if others or any(value != FIXED_OPTIONS[name] for name, value in fixed.items()):
        wanted = ", ".join(f"{name}={value!r}" for name, value in FIXED_OPTIONS.items())
        raise InvalidRequestError(
            f"history='table' reads the whole history a read_committed read sees ({wanted}; "
            f"failOnDataLoss and minPartitions as any read); got {dict(options)!r}"
        )
    if value_format not in VALUE_FORMATS:
        raise InvalidRequestError(f"history='table' reads values as {', '.join(VALUE_FORMATS)}; got {value_format!r}")
    if value_format == "json" and value_schema is None:
        raise InvalidRequestError("history='table' with valueFormat='json' needs a valueSchema")
    return {name: options[name] for name in PASSED_OPTIONS if name in options}


def table_parts(
    spark: SparkSession, topics: str | Sequence[str] | None, kafka_schema: T.StructType
) -> tuple[dict[str, dict[str, int]], DataFrame | None]:
    """The topics' tables at their current snapshots: the log's starting offsets after them (`startingOffsets` JSON
    covering every partition) and the tables' rows in `kafka_schema` (None when no table has a snapshot yet)."""
    partitions = topic_partitions(Broker.connect(), topics, None)
    names = sorted({topic for topic, _ in partitions})
    properties = iceberg_catalog_properties()
    snapshots = table_snapshots(names, properties)
    starts: dict[str, dict[str, int]] = {}
    for topic, partition in partitions:
        held = snapshots[topic].offsets if topic in snapshots else {}
        starts.setdefault(topic, {})[str(partition)] = held.get(partition, EARLIEST)
    tables = []
    for topic, snapshot in sorted(snapshots.items()):
        files = snapshot_data_files(snapshot)
        if files:
            tables.append(_kafka_rows(spark.read.parquet(*files), topic, kafka_schema))
    return starts, reduce(DataFrame.unionByName, tables) if tables else None


def _kafka_rows(rows: DataFrame, topic: str, kafka_schema: T.StructType) -> DataFrame:
    """A topic table's rows as the Kafka schema's columns."""
    source = {
        "key": F.col("key"),
        "value": F.col("value"),
        "topic": F.lit(topic),
        "partition": F.col("partition"),
        "offset": F.col("offset"),
        "timestamp": F.col("timestamp"),
        "timestampType": F.col("timestamp_type"),
        "headers": F.col("headers"),
    }
    return rows.select(*[source[field.name].cast(field.dataType).alias(field.name) for field in kafka_schema])
