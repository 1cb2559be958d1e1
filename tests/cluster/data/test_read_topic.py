"""`read_topic` on a real broker and a real local Ray: its rows equal what the Python `Consumer` and confluent-kafka
(over the Kafka listener) read from the same offsets, for batches compressed by librdkafka, headers, CreateTime and
LogAppendTime timestamps and a compacted log; the value formats decode as json/msgpack decode the consumers'
values; bounds in read_kafka's forms, a consistent snapshot, bounded blocks, and bad reads refused with typed errors
before any task starts."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import msgpack
import pyarrow as pa
import pytest
import ray

from actors.calls import call
from actors.clients.admin import Admin
from actors.clients.broker import Broker
from actors.clients.producer import Producer
from cluster.data import read_topic
from cluster.data.datasource import TopicDatasource, read_settings
from cluster.data.read_planning import plan_topic_read
from cluster.protocol.listener import KafkaListener
from storage.errors import InvalidRequestError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from tests.cluster.data.support import Row, confluent_rows, consumer_rows, dataset_rows

pytestmark = [
    pytest.mark.ray,
    # Ray Data's DataContext reads its own deprecated fields when it is copied into a task; the warning is Ray's.
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context"),
]

# Recent: the test broker's retention (7 days) runs every 500 ms and would delete older records.
BASE_MS = int(time.time() * 1000) - 600_000
PAGES = ("/", "/cart", "/help")


def event(index: int) -> dict[str, Any]:
    return {"user": f"u{index % 5}", "page": PAGES[index % 3], "latency_ms": 10 + index, "ok": index % 4 != 0}


@pytest.fixture(scope="module")
def listener(start_test_broker: Callable[..., tuple[Any, Any]]) -> Iterator[KafkaListener]:
    ray.data.DataContext.get_current().enable_progress_bars = False
    start_test_broker(log_dirs_count=1)
    with KafkaListener({"listeners": "PLAINTEXT://127.0.0.1:0"}) as started:
        yield started


def confluent_produce(listener: KafkaListener, topic: str, count: int, first: int = 0, **config: str) -> None:
    """`count` records through librdkafka: keys (some null), values (some null), headers (some records), explicit
    CreateTime timestamps, alternating partitions."""
    from confluent_kafka import Producer as KafkaProducer

    producer = KafkaProducer({"bootstrap.servers": listener.bootstrap_servers, "linger.ms": "20", **config})
    errors: list[Any] = []
    for index in range(first, first + count):
        producer.produce(
            topic,
            key=None if index % 7 == 0 else f"key-{index % 13}".encode(),
            value=None if index % 11 == 5 else json.dumps(event(index)).encode(),
            headers=[("index", str(index).encode()), ("empty", None)] if index % 3 == 0 else None,
            timestamp=BASE_MS + index,
            partition=index % 2,
            on_delivery=lambda error, _: errors.append(error) if error is not None else None,
        )
    assert producer.flush(30) == 0 and errors == []


def ends_of(topic: str) -> dict[int, int]:
    broker = Broker.connect()
    return {p: call(broker.partition(topic, p).offsets.remote())[1] for p in broker.topic(topic).partitions}


@pytest.fixture(scope="module")
def topics(listener: KafkaListener) -> dict[str, str]:
    """Topics holding what each test reads: librdkafka's lz4 and zstd batches plus the Python producer's gzip ones
    (`plain`), LogAppendTime (`append_time`), a compacted log with gaps (`compacted`), msgpack values."""
    admin = Admin()
    admin.create_topic("plain", partitions=2)
    confluent_produce(listener, "plain", 300, **{"compression.type": "lz4"})
    confluent_produce(listener, "plain", 200, first=300, **{"compression.type": "zstd"})
    with Producer(compression_type="gzip") as producer:
        producer.send_many("plain", [json.dumps(event(i)).encode() for i in range(500, 700)], partition=1).result()
    admin.create_topic("append_time", partitions=2, config={"message.timestamp.type": "LogAppendTime"})
    confluent_produce(listener, "append_time", 50)
    compacted = {"cleanup.policy": "compact", "segment.bytes": "2048", "min.cleanable.dirty.ratio": "0.01"}
    admin.create_topic("compacted", partitions=1, config=compacted)
    with Producer(batch_size=512) as producer:
        for index in range(300):
            producer.send("compacted", f"v{index}".encode(), key=f"k{index % 10}".encode(), partition=0)
    handle = Broker.connect().partition("compacted", 0)
    found = call(handle.cleanable.remote(None))
    assert found is not None
    call(handle.clean.remote(found.first_dirty_offset, found.first_uncleanable_offset))
    admin.create_topic("msgpack", partitions=2)
    with Producer() as producer:
        for partition in range(2):
            values = [msgpack.packb(event(i)) for i in range(partition, 200, 2)]
            producer.send_many("msgpack", values, partition=partition, timestamps=[BASE_MS] * len(values)).result()
    return {"plain": "plain", "append_time": "append_time", "compacted": "compacted", "msgpack": "msgpack"}


@pytest.mark.parametrize("topic", ["plain", "append_time", "compacted"])
def test_rows_equal_what_the_python_consumer_and_confluent_kafka_read(
    listener: KafkaListener, topics: dict[str, str], topic: str
) -> None:
    ends = ends_of(topic)
    rows = dataset_rows(read_topic(topic).take_all())
    assert rows == consumer_rows(topic, len(ends), ends)
    assert rows == confluent_rows(listener.bootstrap_servers, topic, len(ends), ends)
    assert len(rows) == (sum(ends.values()) if topic != "compacted" else len(rows))
    if topic == "append_time":
        assert {row[6] for row in rows} == {1} and all(row[5] >= BASE_MS + 60_000 for row in rows)
    if topic == "compacted":
        assert 10 <= len(rows) < sum(ends.values()), "the cleaner left gaps"
    if topic == "plain":
        assert any(row[7] for row in rows) and any(row[3] is None for row in rows)


def test_bounds_in_read_kafkas_forms_read_the_consumers_rows_between_them(topics: dict[str, str]) -> None:
    ends = ends_of("plain")
    every = consumer_rows("plain", 2, ends)

    def between(starts: dict[int, int], stops: dict[int, int]) -> list[Row]:
        return [row for row in every if starts[row[1]] <= row[2] < stops[row[1]]]

    by_offsets = read_topic("plain", start={"plain": {0: 10, 1: 20}}, end={"plain": {1: 150}})
    assert dataset_rows(by_offsets.take_all()) == between({0: 10, 1: 20}, {0: ends[0], 1: 150})
    since = datetime.fromtimestamp(0, tz=UTC) + timedelta(milliseconds=BASE_MS + 100)
    until = (since + timedelta(milliseconds=250)).replace(tzinfo=None)  # naive: UTC
    by_time = dataset_rows(read_topic("plain", start=since, end=until).take_all())
    assert by_time == [row for row in every if BASE_MS + 100 <= row[5] < BASE_MS + 350]
    uncommitted = read_topic("plain", start=5, end=40, isolation="read_uncommitted")
    assert dataset_rows(uncommitted.take_all()) == between({0: 5, 1: 5}, {0: 40, 1: 40})


def test_value_formats_decode_the_values_as_json_and_msgpack_do(topics: dict[str, str]) -> None:
    ends = ends_of("plain")
    raw = {(row[1], row[2]): row[4] for row in consumer_rows("plain", 2, ends)}
    text = read_topic("plain", value_format="string", columns=["partition", "offset", "value"]).take_all()
    assert {(row["partition"], row["offset"]): row["value"] for row in text} == {
        position: None if value is None else value.decode() for position, value in raw.items()
    }
    schema = pa.schema([("user", pa.string()), ("latency_ms", pa.int64()), ("ok", pa.bool_())])
    for value_schema in (schema, None):
        decoded = read_topic("plain", value_format="json", value_schema=value_schema).take_all()
        expected = {position: json.loads(value) if value else None for position, value in raw.items()}
        for row in decoded:
            wanted = expected[(row["partition"], row["offset"])]
            for name in ("user", "latency_ms", "ok"):
                assert row[name] == (None if wanted is None else wanted[name])
        if value_schema is None:
            assert "page" in decoded[0], "the inferred schema has every field"
    msgpack_ends = ends_of("msgpack")
    values = {(row[1], row[2]): msgpack.unpackb(row[4]) for row in consumer_rows("msgpack", 2, msgpack_ends)}
    rows = read_topic("msgpack", value_format="msgpack", columns=["partition", "offset", "page", "ok"]).take_all()
    assert {(r["partition"], r["offset"]): {"page": r["page"], "ok": r["ok"]} for r in rows} == {
        position: {"page": value["page"], "ok": value["ok"]} for position, value in values.items()
    }


def test_columns_keep_only_those_and_a_value_field_named_like_a_kafka_column_wins_the_name(
    topics: dict[str, str],
) -> None:
    read = read_topic("msgpack", value_format="msgpack", value_schema=pa.schema([("offset", pa.string())]))
    assert read.schema().names == [
        "key",
        "offset",
        "topic",
        "partition",
        "kafka_offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    narrow = read_topic("plain", columns=["offset", "key"])
    assert narrow.schema().names == ["offset", "key"]
    assert narrow.count() == sum(ends_of("plain").values())


def test_a_read_sees_exactly_the_offsets_fixed_when_it_was_planned(topics: dict[str, str]) -> None:
    Admin().create_topic("growing", partitions=2)
    with Producer() as producer:
        producer.send_many("growing", [b"before"] * 400).result()
    dataset = read_topic("growing", columns=["partition", "offset", "value"])
    planned = plan_topic_read("growing")
    with Producer() as producer:
        producer.send_many("growing", [b"after"] * 400).result()
    rows = dataset.take_all()
    assert len(rows) == 400 and {row["value"] for row in rows} == {b"before"}
    assert dataset.count() == 400, "a second execution reads the same offsets"
    following = read_topic("growing", start=planned.next_start())
    assert following.count() == 400 and {row["value"] for row in following.take_all()} == {b"after"}


def test_blocks_are_bounded_by_the_target_block_size_and_a_hot_partition_reads_in_parallel(
    topics: dict[str, str],
) -> None:
    Admin().create_topic("hot", partitions=1)
    with Producer(batch_size=1_000_000) as producer:
        producer.send_many("hot", [bytes(1000)] * 4000, partition=0).result()
    context = ray.data.DataContext.get_current()
    target = context.target_max_block_size
    context.target_max_block_size = 256 * 1024
    try:
        plan = plan_topic_read("hot")
        settings = read_settings(plan, columns=None, value_format="binary", value_schema=None, fail_on_data_loss=True)
        source = TopicDatasource(plan.ranges, settings)
        estimate = source.estimate_inmemory_data_size()
        assert estimate is not None and 4000 * 1000 <= estimate <= 4000 * 1300
        tasks = source.get_read_tasks(64)
        assert len(tasks) == 16, "4 MB in blocks of 256 KiB"
        materialized = read_topic("hot").materialize()
        sizes = [entry.metadata.size_bytes for b in materialized.iter_internal_ref_bundles() for entry in b.blocks]
        assert sum(1 for _ in sizes) >= 16 and max(sizes) <= 1.5 * 256 * 1024
        assert materialized.count() == 4000
    finally:
        context.target_max_block_size = target
    assert read_topic("hot", override_num_blocks=3).materialize().num_blocks() == 3


def test_bad_reads_are_refused_with_typed_errors_before_any_task_starts(topics: dict[str, str]) -> None:
    Admin().create_topic("trimmed", partitions=1)
    with Producer() as producer:
        producer.send_many("trimmed", [b"x"] * 50, partition=0).result()
    Admin().delete_records("trimmed", 0, 20)
    with pytest.raises(UnknownTopicOrPartitionError):
        read_topic(["plain", "no-such-topic"])
    with pytest.raises(OffsetOutOfRangeError, match="below the log start offset 20"):
        read_topic("trimmed", start=5)
    assert read_topic("trimmed", start=5, fail_on_data_loss=False).count() == 30
    with pytest.raises(OffsetOutOfRangeError, match="past the last offset"):
        read_topic("trimmed", end=51)
    with pytest.raises(InvalidRequestError, match="in the future"):
        read_topic("trimmed", end=datetime.now(tz=UTC) + timedelta(minutes=5))
    with pytest.raises(InvalidRequestError, match="takes no value_schema"):
        read_topic("trimmed", value_schema=pa.schema([("a", pa.int64())]))
    with pytest.raises(InvalidRequestError, match="cannot hold a decoded json value"):
        read_topic("trimmed", value_format="json", value_schema=pa.dictionary(pa.int8(), pa.string()))
    with pytest.raises(InvalidRequestError, match="value_format must be one of"):
        read_topic("trimmed", value_format="avro")
    with pytest.raises(InvalidRequestError, match="not among the rows' columns"):
        read_topic("trimmed", columns=["offset", "nope"])
    with pytest.raises(InvalidRequestError, match="isolation must be"):
        read_topic("trimmed", isolation="read_everything")
