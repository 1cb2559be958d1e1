"""What the Ray Data tests share: records as comparable tuples, read by the Python `Consumer`, by confluent-kafka
over the Kafka listener and by `read_topic`, so each read is checked against two independent consumers."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from actors.clients.consumer import Consumer
from cluster.data.read_planning import timestamp_ms

# (topic, partition, offset, key, value, timestamp ms, timestamp type (0 CreateTime, 1 LogAppendTime), headers)
Row = tuple[str, int, int, bytes | None, Any, int, int, tuple[tuple[str, bytes | None], ...]]
DEADLINE_S = 60.0


def dataset_rows(rows: Iterable[dict[str, Any]], value: str = "value") -> list[Row]:
    """`read_topic` rows as `Row`s, by position."""
    return sorted(
        (
            row["topic"],
            row["partition"],
            row["offset"],
            row["key"],
            row[value],
            timestamp_ms(row["timestamp"]),
            row["timestampType"],
            tuple((header["key"], header["value"]) for header in row.get("headers") or ()),
        )
        for row in rows
    )


def consumer_rows(topic: str, partitions: int, ends: dict[int, int]) -> list[Row]:
    """What the Python `Consumer` reads from the log start of each partition up to `ends`."""
    consumer = Consumer(auto_offset_reset="earliest")
    rows: list[Row] = []
    try:
        consumer.assign([(topic, partition) for partition in range(partitions)])
        consumer.seek_to_beginning()
        deadline = time.monotonic() + DEADLINE_S
        while any(consumer.position((topic, p)) < ends[p] for p in range(partitions)) and time.monotonic() < deadline:
            for record in consumer.poll(timeout_ms=200):
                if record.offset < ends[record.partition]:
                    rows.append(
                        (
                            record.topic,
                            record.partition,
                            record.offset,
                            record.key,
                            record.value,
                            record.timestamp,
                            int(record.timestamp_type),
                            tuple(record.headers),
                        )
                    )
    finally:
        consumer.close()
    return sorted(rows)


def confluent_rows(bootstrap: str, topic: str, partitions: int, ends: dict[int, int]) -> list[Row]:
    """What confluent-kafka (librdkafka) reads over the Kafka listener from offset 0 of each partition up to `ends`
    (its timestamp types are 1 CreateTime and 2 LogAppendTime; here one less, as the Spark schema has them)."""
    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka import TopicPartition

    consumer = KafkaConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "ray-data-oracle",
            "enable.auto.commit": "false",
            "isolation.level": "read_committed",
        }
    )
    rows: list[Row] = []
    done = {p for p in range(partitions) if ends[p] == 0}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + DEADLINE_S
        while len(done) < partitions and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=500, timeout=0.5):
                assert message.error() is None, message.error()
                partition, offset = message.partition(), message.offset()
                if offset >= ends[partition]:
                    continue
                kind, stamp = message.timestamp()
                rows.append(
                    (
                        message.topic(),
                        partition,
                        offset,
                        message.key(),
                        message.value(),
                        stamp,
                        kind - 1,
                        tuple(message.headers() or ()),
                    )
                )
                if offset == ends[partition] - 1:
                    done.add(partition)
    finally:
        consumer.close()
    return sorted(rows)
