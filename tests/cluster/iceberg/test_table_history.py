"""`read_topic(..., history="table")` and the Spark bridge's `read_topics(..., history="table")` on a real broker over
Ray with its translation driver: a topic whose first records are in its Iceberg table and then deleted from the log
(DeleteRecords: as retention would), and whose later records are in the log only, reads back as one Dataset (one
DataFrame) equal to everything produced, each record once, by (partition, offset), key and value, decoded by the
read's value format; the log alone has only the later records. A read with other bounds, of a topic not kept as a
table, or with an unknown history is refused before anything is read."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from actors.clients.admin import Admin
from actors.clients.broker import Broker
from actors.clients.producer import Producer
from cluster.data import read_topic
from cluster.iceberg.catalog import catalog_properties, open_catalog
from cluster.iceberg.key_value_table import load_or_create_table
from cluster.iceberg.translation import table_offsets, translate_once
from cluster.iceberg.translation_driver_actor import iceberg_driver_status
from cluster.spark.kafka_source import kafka_spark_schema, read_topics
from storage.config.broker_config import BrokerConfig
from storage.errors import InvalidRequestError
from tests.cluster.iceberg.driver_support import start_broker_with_driver

pytestmark = [pytest.mark.ray, pytest.mark.spark]

PARTITIONS = 3
TOPIC = "history-kv"
ROUNDS_APART_MS = 3_600_000
WAIT_S = 60.0
Row = tuple[int, int, bytes, str]


@pytest.fixture(scope="module")
def config(start_test_broker: Callable[..., tuple[Any, list[Path]]]) -> Iterator[BrokerConfig]:
    yield start_broker_with_driver(start_test_broker, poll_interval_s=0.2)


def _identity(data: bytes) -> bytes:
    return data


def _produce(producer: Producer, start: int, count: int) -> list[Row]:
    sent = [(b"k%d" % i, f"value-{i}") for i in range(start, start + count)]
    futures = [producer.send(TOPIC, key=key, value=value.encode()) for key, value in sent]
    producer.flush()
    return [
        (f.result().partition, f.result().offset, key, value) for f, (key, value) in zip(futures, sent, strict=True)
    ]


def _rows(dataset: Any) -> list[Row]:
    return sorted((row["partition"], row["offset"], row["key"], row["value"]) for row in dataset.take_all())


class History(NamedTuple):
    """The topic's records: those in its table (deleted from its log) and those in its log only."""

    translated: list[Row]
    tail: list[Row]


@pytest.fixture(scope="module")
def history(config: BrokerConfig) -> History:
    """`TOPIC` with 60 records translated into its table and deleted from its log, then 30 more in its log."""
    # Translated by hand, so the split between table and log is known: the driver runs its first round of the topic
    # as soon as it sees it (nothing to commit yet, the topic is empty), and its next an hour later.
    Admin().create_topic(
        TOPIC, PARTITIONS, config={"iceberg.mode": "key_value", "iceberg.target.lag.ms": str(ROUNDS_APART_MS)}
    )
    deadline = time.monotonic() + WAIT_S
    while not any(status.rounds >= 1 for status in iceberg_driver_status(TOPIC)):
        assert time.monotonic() < deadline, f"no first round of {TOPIC}: {iceberg_driver_status(TOPIC)}"
        time.sleep(0.1)
    table = load_or_create_table(open_catalog(catalog_properties(config)), ("raybroker", TOPIC), "")
    with Producer(key_serializer=_identity, value_serializer=_identity) as producer:
        translated = _produce(producer, 0, 60)
        assert translate_once(TOPIC, table, Broker.connect()).rows == 60
        tail = _produce(producer, 60, 30)
    offsets = table_offsets(table.refresh())
    for partition, offset in offsets.items():
        Admin().delete_records(TOPIC, partition, offset)
    return History(translated, tail)


def test_the_table_and_the_log_after_it_read_as_one_dataset(history: History) -> None:
    combined = read_topic(TOPIC, history="table", value_format="string")
    assert _rows(combined) == sorted(history.translated + history.tail)
    assert _rows(read_topic(TOPIC, value_format="string")) == sorted(history.tail)
    assert set(combined.schema().names) == set(read_topic(TOPIC).schema().names)


def test_spark_reads_the_table_and_the_log_after_it_as_one_dataframe(history: History, spark: Any) -> None:
    """The same through the Spark bridge: the same rows, in Spark's Kafka-source schema, on the JVM reader and in
    Python workers alike; JSON values decoded by the schema given."""
    everything = history.translated + history.tail
    for jvm in (True, False):
        combined = read_topics(spark, topics=TOPIC, history="table", valueFormat="string", jvm=jvm)
        plain = read_topics(spark, topics=TOPIC, valueFormat="string", jvm=jvm)
        assert _types(combined) == _types(plain)
        assert _spark_rows(combined) == sorted(everything)
    headers = read_topics(spark, topics=TOPIC, history="table", includeHeaders=True)
    assert headers.columns == kafka_spark_schema(True).names
    assert headers.count() == len(everything)
    parsed = read_topics(spark, topics=TOPIC, history="table", valueFormat="json", valueSchema="v string")
    assert parsed.where("v IS NOT NULL").count() == 0  # the values are not JSON objects: null, as Spark's from_json
    assert parsed.count() == len(everything)


def _types(df: Any) -> list[tuple[str, Any]]:
    return [(field.name, field.dataType) for field in df.schema]


def _spark_rows(df: Any) -> list[Row]:
    return sorted((row["partition"], row["offset"], bytes(row["key"]), row["value"]) for row in df.collect())


def test_a_read_the_table_cannot_answer_is_refused_before_it_starts(config: BrokerConfig) -> None:
    Admin().create_topic("history-plain", 1)
    with pytest.raises(InvalidRequestError, match=r"iceberg\.mode=off"):
        read_topic("history-plain", history="table")
    with pytest.raises(InvalidRequestError, match="start='earliest'"):
        read_topic("history-plain", history="table", start=5)
    with pytest.raises(InvalidRequestError, match="history must be 'log' or 'table'"):
        read_topic("history-plain", history="iceberg")


def test_a_spark_read_the_table_cannot_answer_is_refused_before_it_starts(spark: Any) -> None:
    Admin().create_topic("history-plain-spark", 1)
    with pytest.raises(InvalidRequestError, match=r"iceberg\.mode=off"):
        read_topics(spark, topics="history-plain-spark", history="table")
    refused: list[tuple[dict[str, Any], str]] = [
        ({"startingOffsets": "latest"}, "startingOffsets='earliest'"),
        ({"isolationLevel": "read_uncommitted"}, "isolationLevel='read_committed'"),
        ({"startingTimestamp": 5}, "startingTimestamp"),
        ({"valueFormat": "msgpack"}, "reads values as binary, string, json"),
        ({"valueFormat": "json"}, "needs a valueSchema"),
        ({"history": "iceberg"}, "history must be 'log' or 'table'"),
    ]
    for options, message in refused:
        with pytest.raises(InvalidRequestError, match=re.escape(message)):
            read_topics(spark, topics="history-plain-spark", **{"history": "table", **options})
    with pytest.raises(InvalidRequestError, match="assign"):
        read_topics(spark, assign={"history-plain-spark": [0]}, history="table")


def test_the_combined_read_equals_the_logs_records_while_producers_run(config: BrokerConfig, spark: Any) -> None:
    """A producer writes all along while the driver translates every 300 ms: each combined read (Ray Data's, then
    Spark's) taken in the middle holds each record once and equals the log's records up to where it ends, read
    after it; the table held records when the reads ran, so both parts made them."""
    topic = "history-live"
    Admin().create_topic(topic, PARTITIONS, config={"iceberg.mode": "key_value", "iceberg.target.lag.ms": "300"})
    stop = threading.Event()

    def produce() -> None:
        with Producer(key_serializer=_identity, value_serializer=_identity, linger_ms=1) as producer:
            burst = 0
            while not stop.is_set():
                for i in range(40):
                    producer.send(topic, key=b"k%d-%d" % (burst, i), value=b"v%d-%d" % (burst, i))
                producer.flush()
                burst += 1
                time.sleep(0.05)

    writer = threading.Thread(target=produce, name="history-live-writer")
    writer.start()
    try:
        deadline = time.monotonic() + WAIT_S
        while not any(p.table_offset for status in iceberg_driver_status(topic) for p in status.partitions):
            assert time.monotonic() < deadline, f"nothing of {topic} translated: {iceberg_driver_status(topic)}"
            time.sleep(0.1)
        for read in ("ray data", "spark", "ray data", "spark"):
            time.sleep(0.5)
            translated = sum(p.table_offset for status in iceberg_driver_status(topic) for p in status.partitions)
            if read == "spark":
                got = read_topics(spark, topics=topic, history="table").collect()
                combined = sorted((r["partition"], r["offset"], bytes(r["key"]), bytes(r["value"])) for r in got)
            else:
                rows = read_topic(topic, history="table").take_all()
                combined = sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in rows)
            log = sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in read_topic(topic).take_all())
            ends = {p: o + 1 for p, o, _, _ in combined}
            assert translated > 0 and len(combined) > translated, (read, translated, len(combined))
            assert len({(p, o) for p, o, _, _ in combined}) == len(combined), read
            assert combined == [row for row in log if row[1] < ends.get(row[0], 0)], read
    finally:
        stop.set()
        writer.join(30)
