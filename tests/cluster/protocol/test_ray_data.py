"""Ray Data over the wire: `ray.data.read_kafka` reads a raybroker topic and `Dataset.write_kafka` writes one.

Both run confluent-kafka inside Ray tasks: read_kafka asks Metadata for the partitions, the watermarks (ListOffsets
earliest and latest) and, for a datetime bound, ListOffsets by timestamp, then fetches each partition with an
assigned consumer; write_kafka produces each row as JSON. The oracle is what was produced: each record's partition,
offset, key, value, headers and CreateTime timestamp, and the items a dataset was made of.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cluster.protocol.listener import KafkaListener

pytestmark = [
    pytest.mark.ray,
    # Ray Data's DataContext reads its own deprecated fields when it is copied into a task; the warning is Ray's.
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context"),
]

PARTITIONS = 2
RECORDS = 12
# Recent: records older than `log.retention.hours` (168) would be deleted by the broker's retention under the test.
BASE_TIMESTAMP_MS = int(time.time() * 1000) - 60_000
DEADLINE_S = 30.0
CREATE_TIME = 1  # confluent-kafka's TIMESTAMP_CREATE_TIME, read_kafka's `timestamp_type` of a producer's timestamp


def timestamp_of(index: int) -> int:
    """The CreateTime the `index`-th record of `ray-data-in` is produced with (ms)."""
    return BASE_TIMESTAMP_MS + index * 10


def utc(timestamp_ms: int) -> datetime:
    return datetime.fromtimestamp(timestamp_ms // 1000, tz=UTC) + timedelta(milliseconds=timestamp_ms % 1000)


@pytest.fixture(scope="module")
def listener(start_test_broker: Callable[..., tuple[Any, Any]]) -> Iterator[KafkaListener]:
    start_test_broker(log_dirs_count=1, num_partitions=str(PARTITIONS))
    with KafkaListener({"listeners": "PLAINTEXT://127.0.0.1:0", "num.partitions": str(PARTITIONS)}) as started:
        yield started


@pytest.fixture(scope="module")
def produced(listener: KafkaListener) -> list[dict[str, Any]]:
    """`RECORDS` records in topic `ray-data-in` as read_kafka's rows should show them, from the delivery reports:
    keyed and unkeyed, one header each, explicit timestamps, alternating partitions."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = "ray-data-in"
    admin = AdminClient({"bootstrap.servers": listener.bootstrap_servers})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)])[topic].result(DEADLINE_S)
    producer = Producer({"bootstrap.servers": listener.bootstrap_servers, "linger.ms": "5"})
    rows: list[dict[str, Any]] = []
    errors: list[Any] = []

    for index in range(RECORDS):
        key = None if index % 5 == 0 else f"key-{index}".encode()
        headers = [("index", str(index).encode())]
        timestamp = timestamp_of(index)

        def report(
            error: Any, message: Any, key: bytes | None = key, headers: Any = headers, timestamp: int = timestamp
        ) -> None:
            # The report says where the record went; what it carried is what was sent.
            if error is not None:
                errors.append(error)
                return
            rows.append(
                {
                    "offset": message.offset(),
                    "key": key,
                    "value": message.value(),
                    "topic": topic,
                    "partition": message.partition(),
                    "timestamp": timestamp,
                    "timestamp_type": CREATE_TIME,
                    "headers": dict(headers),
                }
            )

        producer.produce(
            topic,
            partition=index % PARTITIONS,
            key=key,
            value=f'{{"index": {index}}}'.encode(),
            headers=headers,
            timestamp=timestamp,
            on_delivery=report,
        )
    assert producer.flush(DEADLINE_S) == 0
    assert errors == []
    assert len(rows) == RECORDS
    return rows


def read_rows(listener: KafkaListener, **bounds: Any) -> list[dict[str, Any]]:
    """Every row `read_kafka` returns for `ray-data-in` within `bounds`, in (partition, offset) order."""
    import ray

    dataset = ray.data.read_kafka(
        "ray-data-in", bootstrap_servers=listener.bootstrap_servers, override_num_blocks=PARTITIONS, **bounds
    )
    return sorted(dataset.take_all(), key=lambda row: (row["partition"], row["offset"]))


def by_position(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda row: (row["partition"], row["offset"]))


def test_read_kafka_returns_every_record_with_its_columns(
    listener: KafkaListener, produced: list[dict[str, Any]]
) -> None:
    assert read_rows(listener) == by_position(produced)


def test_read_kafka_between_offsets_and_from_a_time(listener: KafkaListener, produced: list[dict[str, Any]]) -> None:
    # Per-partition [start, end) offsets.
    start, end = {0: 1, 1: 2}, {0: 4, 1: 3}
    bounded = read_rows(listener, start_offset={"ray-data-in": start}, end_offset={"ray-data-in": end})
    assert bounded == [
        row for row in by_position(produced) if start[row["partition"]] <= row["offset"] < end[row["partition"]]
    ]

    # From the first record at or after one time to the first at or after another (ListOffsets by timestamp).
    since_ms, until_ms = timestamp_of(4) - 5, timestamp_of(9) - 5
    between_times = read_rows(listener, start_offset=utc(since_ms), end_offset=utc(until_ms))
    assert between_times == [row for row in by_position(produced) if since_ms <= row["timestamp"] < until_ms]


def test_write_kafka_rows_are_read_back_as_json(listener: KafkaListener) -> None:
    import ray

    from actors import Consumer

    topic = "ray-data-out"
    items = [{"user": f"u{index}", "clicks": index * 3, "page": f"/p{index % 3}"} for index in range(10)]
    ray.data.from_items(items, override_num_blocks=1).write_kafka(
        topic, listener.bootstrap_servers, key_field="user", producer_config={"acks": "all"}
    )

    consumer = Consumer()
    consumer.assign([(topic, partition) for partition in range(PARTITIONS)])
    consumer.seek_to_beginning()
    received: list[tuple[bytes | None, Any]] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(received) < len(items) and time.monotonic() < deadline:
        received += [(record.key, json.loads(record.value)) for record in consumer.poll(timeout_ms=500)]
    consumer.close()
    expected = [(item["user"].encode(), item) for item in items]
    assert sorted(received, key=repr) == sorted(expected, key=repr)
