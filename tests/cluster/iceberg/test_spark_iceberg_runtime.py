"""Spark's own Iceberg reader (Iceberg's Spark runtime from Maven Central, `get_spark(iceberg=True)`) over the tables
the broker's translation driver keeps, through the catalog `register_iceberg_catalog` names in Spark: a `key_value`
table's rows equal the committed records by (partition, offset), key and value bytes (the aborted transaction's
absent), and pyiceberg's scan of the same table; the same session sees the driver's later commits (and the driver
can still commit while Spark holds the catalog); the table's `.snapshots` metadata table lists pyiceberg's snapshots
and time travel reads the first; another broker's catalog replaces the session's. For each value mode (`value_json`,
`value_msgpack`), pyiceberg, Spark and Ray Data's `read_iceberg` read the same parsed rows and dead letters."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import ray

from actors.clients.admin import Admin
from actors.clients.producer import Producer
from cluster.iceberg.catalog import catalog_properties, open_catalog
from cluster.iceberg.translation_driver_actor import iceberg_catalog_properties, iceberg_driver_status
from cluster.spark.iceberg_runtime import register_iceberg_catalog, topic_table_name
from storage.config.broker_config import BrokerConfig
from tests.cluster.iceberg.driver_support import start_broker_with_driver

pytestmark = [pytest.mark.ray, pytest.mark.spark]

PARTITIONS = 3
TARGET_LAG_MS = "300"
WAIT_S = 60.0
Record = tuple[int, int, bytes, bytes]


@pytest.fixture(scope="module")
def config(start_test_broker: Callable[..., tuple[Any, list[Path]]]) -> Iterator[BrokerConfig]:
    yield start_broker_with_driver(start_test_broker, poll_interval_s=0.2)


@pytest.fixture(scope="module")
def catalog(config: BrokerConfig, spark: Any) -> str:
    """The broker's catalog named in the session (the driver's properties)."""
    return register_iceberg_catalog(spark)


def _identity(data: bytes) -> bytes:
    return data


def _produce(
    producer: Producer, topic: str, records: list[tuple[bytes, bytes]], headers: list[tuple[str, bytes]] | None = None
) -> list[Record]:
    futures = [producer.send(topic, key=key, value=value, headers=headers) for key, value in records]
    producer.flush()
    return [
        (f.result().partition, f.result().offset, key, value) for f, (key, value) in zip(futures, records, strict=True)
    ]


def _spark_records(spark: Any, topic: str) -> list[Record]:
    rows = spark.table(topic_table_name(topic)).select("partition", "offset", "key", "value").collect()
    return sorted((row["partition"], row["offset"], bytes(row["key"]), bytes(row["value"])) for row in rows)


def test_spark_reads_a_key_value_table_record_for_record(config: BrokerConfig, spark: Any, catalog: str) -> None:
    topic = "spark-runtime-kv"
    Admin().create_topic(
        topic, PARTITIONS, config={"iceberg.mode": "key_value", "iceberg.target.lag.ms": TARGET_LAG_MS}
    )
    not_utf8 = [(bytes([0xFF, 0xFE, i]), b"\x80\x00" + bytes([i]) * 3) for i in range(20)]
    with Producer(transactional_id="spark-runtime-tx", key_serializer=_identity, value_serializer=_identity) as tx:
        tx.init_transactions()
        tx.begin_transaction()
        committed = _produce(tx, topic, not_utf8, headers=[("h", b"\x00\xff"), ("trace", b"t")])
        tx.commit_transaction()
        tx.begin_transaction()
        aborted = _produce(tx, topic, [(b"a%d" % i, b"aborted-%d" % i) for i in range(15)])
        tx.abort_transaction()
        tx.begin_transaction()
        committed += _produce(tx, topic, [(b"c%d" % i, b"committed-%d" % i) for i in range(25)])
        tx.commit_transaction()
    first = _wait_for_offsets(topic, committed + aborted)
    assert _spark_records(spark, topic) == sorted(committed)

    # Every column as pyiceberg reads it: timestamps to the microsecond, timestamp types, headers.
    table = open_catalog(catalog_properties(config)).load_table(("raybroker", topic))
    assert _spark_columns(spark, topic) == _pyiceberg_columns(table)

    # The same session sees the driver's next commit: the driver can commit while Spark holds the catalog, and
    # Spark loads the table's current snapshot for each query.
    with Producer(key_serializer=_identity, value_serializer=_identity) as plain:
        later = _produce(plain, topic, [(b"l%d" % i, b"later-%d" % i) for i in range(10)])
    _wait_for_offsets(topic, committed + aborted + later)
    assert _spark_records(spark, topic) == sorted(committed + later)

    snapshots = spark.sql(f"SELECT snapshot_id, summary FROM {topic_table_name(topic)}.snapshots").collect()
    assert sorted(row["snapshot_id"] for row in snapshots) == sorted(s.snapshot_id for s in table.refresh().snapshots())
    as_of_first = spark.read.option("snapshot-id", first).table(topic_table_name(topic))
    assert sorted((row["partition"], row["offset"]) for row in as_of_first.collect()) == sorted(
        (p, o) for p, o, _, _ in committed
    )


def test_naming_another_catalog_replaces_the_sessions(
    config: BrokerConfig, spark: Any, catalog: str, tmp_path: Path
) -> None:
    """Another broker's catalog (here one made by hand) replaces the one Spark loaded, and back."""
    other = catalog_properties(BrokerConfig.from_properties({"log.dirs": str(tmp_path / "other")}))
    elsewhere = open_catalog(other)
    elsewhere.create_namespace("raybroker")
    table = elsewhere.create_table(
        ("raybroker", "elsewhere"), schema=pa.schema([("partition", pa.int32()), ("offset", pa.int64())])
    )
    table.append(pa.table({"partition": pa.array([7], pa.int32()), "offset": pa.array([70], pa.int64())}))
    Admin().create_topic(
        "spark-runtime-back", 1, config={"iceberg.mode": "key_value", "iceberg.target.lag.ms": TARGET_LAG_MS}
    )
    with Producer(key_serializer=_identity, value_serializer=_identity) as producer:
        _wait_for_offsets("spark-runtime-back", _produce(producer, "spark-runtime-back", [(b"k", b"v")]))
    try:
        register_iceberg_catalog(spark, other)
        assert [tuple(row) for row in spark.table("raybroker.raybroker.elsewhere").collect()] == [(7, 70)]
        assert not spark.catalog.tableExists("raybroker.raybroker.`spark-runtime-back`")
    finally:
        register_iceberg_catalog(spark)
    assert spark.catalog.tableExists("raybroker.raybroker.`spark-runtime-back`")
    assert not spark.catalog.tableExists("raybroker.raybroker.elsewhere")


def _spark_columns(spark: Any, topic: str) -> list[tuple[Any, ...]]:
    rows = spark.sql(
        "SELECT partition, offset, unix_micros(timestamp) AS micros, timestamp_type, key, value, headers"
        f" FROM {topic_table_name(topic)}"
    ).collect()
    return sorted(
        (
            row["partition"],
            row["offset"],
            row["micros"],
            row["timestamp_type"],
            bytes(row["key"]),
            bytes(row["value"]),
            [(header["key"], bytes(header["value"])) for header in row["headers"] or []],
        )
        for row in rows
    )


def _pyiceberg_columns(table: Any) -> list[tuple[Any, ...]]:
    data = table.scan().to_arrow()
    micros = pc.cast(data["timestamp"], pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_pylist()
    return sorted(
        (
            row["partition"],
            row["offset"],
            micro,
            row["timestamp_type"],
            row["key"],
            row["value"],
            [(header["key"], header["value"]) for header in row["headers"] or []],
        )
        for row, micro in zip(data.to_pylist(), micros, strict=True)
    )


def _wait_for_offsets(topic: str, records: list[Record]) -> int:
    """The table's snapshot id once its offsets pass every one of `records` (those of an aborted transaction too:
    the table's offsets are the log's last stable offsets, past its markers)."""
    deadline = time.monotonic() + WAIT_S
    ends = {partition: 1 + max(o for p, o, _, _ in records if p == partition) for partition, _, _, _ in records}
    while time.monotonic() < deadline:
        statuses = iceberg_driver_status(topic)
        if statuses and statuses[0].snapshot_id is not None and statuses[0].lag == 0:
            reached = {p.partition: p.table_offset for p in statuses[0].partitions}
            if all(reached.get(partition, 0) >= end for partition, end in ends.items()):
                return statuses[0].snapshot_id
        time.sleep(0.2)
    raise AssertionError(f"{topic}: the table did not reach {ends} in {WAIT_S} s: {iceberg_driver_status(topic)}")


ENCODERS: dict[str, Callable[[dict[str, Any]], bytes]] = {
    "value_json": lambda value: json.dumps(value).encode(),
    "value_msgpack": lambda value: msgpack.packb(value),
}


@pytest.mark.parametrize("mode", sorted(ENCODERS))
def test_every_reader_reads_a_value_table_and_its_dead_letters(
    config: BrokerConfig, spark: Any, catalog: str, mode: str
) -> None:
    """pyiceberg, Spark's Iceberg runtime and Ray Data's `read_iceberg` read the same rows of a value mode's table:
    the committed values that parse, by (partition, offset), the aborted transaction's absent; the others in the
    dead-letter table."""
    topic = f"spark-runtime-{mode.replace('_', '-')}"
    Admin().create_topic(
        topic,
        PARTITIONS,
        config={
            "iceberg.mode": mode,
            "iceberg.value.schema": "id BIGINT NOT NULL, name STRING",
            "iceberg.target.lag.ms": TARGET_LAG_MS,
        },
    )
    encode = ENCODERS[mode]
    values = [encode({"id": i, "name": f"n{i}"}) if i % 4 else b"\xc1 not a value %d" % i for i in range(40)]
    with Producer(transactional_id=f"{topic}-tx", key_serializer=_identity, value_serializer=_identity) as tx:
        tx.init_transactions()
        tx.begin_transaction()
        committed = _produce(tx, topic, [(b"k%d" % i, value) for i, value in enumerate(values[:20])])
        tx.commit_transaction()
        tx.begin_transaction()
        aborted = _produce(tx, topic, [(b"a%d" % i, encode({"id": -i, "name": "aborted"})) for i in range(10)])
        tx.abort_transaction()
        tx.begin_transaction()
        committed += _produce(tx, topic, [(b"k%d" % i, value) for i, value in enumerate(values[20:], 20)])
        tx.commit_transaction()
    _wait_for_offsets(topic, committed + aborted)
    parsed = [(p, o, _id(v, mode)) for p, o, _, v in committed if not v.startswith(b"\xc1")]
    expected = sorted((p, o, i, f"n{i}") for p, o, i in parsed)
    dead_expected = sorted((p, o, v) for p, o, _, v in committed if v.startswith(b"\xc1"))
    catalog_kwargs = {"name": catalog, **iceberg_catalog_properties()}
    for name in (topic, f"{topic}_dlq"):
        table = open_catalog(catalog_properties(config)).load_table(("raybroker", name))
        spark_rows = [row.asDict() for row in spark.table(f"raybroker.raybroker.`{name}`").collect()]
        ray_rows = ray.data.read_iceberg(table_identifier=f"raybroker.{name}", catalog_kwargs=catalog_kwargs)
        for reader, rows in {
            "pyiceberg": table.scan().to_arrow().to_pylist(),
            "spark": spark_rows,
            "ray data": ray_rows.take_all(),
        }.items():
            if name == topic:
                got = sorted((r["partition"], r["offset"], r["id"], r["name"]) for r in rows)
                assert got == expected, reader
            else:
                assert sorted((r["partition"], r["offset"], bytes(r["value"])) for r in rows) == dead_expected, reader


def _id(value: bytes, mode: str) -> int:
    decoded = json.loads(value) if mode == "value_json" else msgpack.unpackb(value)
    return int(decoded["id"])
