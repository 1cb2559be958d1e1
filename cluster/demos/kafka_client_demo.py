"""The Kafka-client step of `raybroker demo`: an unmodified Kafka client (confluent-kafka, librdkafka) creates a
topic, produces to it and consumes it back through the broker's Kafka-protocol listener, timed.

The oracle is what the producer's delivery reports said: every (partition, offset, value) delivered must be read
back exactly once.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

TOPIC = "clicks"
PARTITIONS = 2
# How long the client waits for the broker before the step gives up.
TIMEOUT_S = 60.0
# (partition, offset, value) of one record, as a delivery report and a consumed message name it.
Delivered = tuple[int | None, int | None, bytes | None]


def run_kafka_clients(bootstrap_servers: str, records: int, say: Callable[[str], None]) -> bool:
    """Creates `TOPIC`, produces `records` values and reads them back; True when all came back exactly once."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS)]).values():
        future.result(TIMEOUT_S)
    say(f"Kafka AdminClient created topic {TOPIC!r} with {PARTITIONS} partitions")

    delivered: list[Delivered] = []
    failures: list[str] = []

    def report(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            failures.append(str(error))
        else:
            delivered.append((message.partition(), message.offset(), message.value()))

    producer = Producer({"bootstrap.servers": bootstrap_servers, "linger.ms": 5, "compression.type": "lz4"})
    produce_started = time.monotonic()
    for index in range(records):
        while True:
            try:
                producer.produce(TOPIC, value=b"click-%d" % index, key=b"user-%d" % (index % 50), on_delivery=report)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    left = producer.flush(TIMEOUT_S)
    produce_s = time.monotonic() - produce_started
    if left or failures:
        say(f"Kafka producer: {left} records undelivered, {len(failures)} failed ({failures[:1]})")
        return False
    say(f"Kafka producer (acks=all, lz4) delivered {len(delivered)} records in {produce_s:.2f} s")

    consumer = Consumer(
        {"bootstrap.servers": bootstrap_servers, "group.id": "demo-kafka-client", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([TOPIC])
    read: list[Delivered] = []
    consume_started = time.monotonic()
    try:
        while len(read) < len(delivered) and time.monotonic() - consume_started < TIMEOUT_S:
            for message in consumer.consume(num_messages=1000, timeout=0.5):
                if message.error() is not None:
                    raise KafkaException(message.error())
                read.append((message.partition(), message.offset(), message.value()))
    finally:
        consumer.close()
    consume_s = time.monotonic() - consume_started
    exactly_once = len(read) == len(delivered) and set(read) == set(delivered)
    say(
        f"Kafka consumer (group, subscribe) read {len(read)} records in {consume_s:.2f} s: exactly once: {exactly_once}"
    )
    return exactly_once
