"""What the Python `Producer`'s transactions write, read over the wire by confluent-kafka (librdkafka) at
read_committed and read_uncommitted, through a listener on the Ray broker: the client filters aborted transactions
with the broker's aborted-transaction lists and stops at the last stable offset, so it must read exactly the
committed transactions (the model), and everything at read_uncommitted."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from cluster.protocol.listener import KafkaListener

pytestmark = pytest.mark.ray

TOPIC = "python-transactions"
PARTITIONS = 2
DEADLINE_S = 30.0


def consume(listener: KafkaListener, isolation: str, expected: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": listener.bootstrap_servers,
            "group.id": f"reader-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "isolation.level": isolation,
            "enable.auto.commit": "false",
        }
    )
    consumer.assign([TopicPartition(TOPIC, partition, 0) for partition in range(PARTITIONS)])
    received: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    settle = None
    try:
        while time.monotonic() < deadline and (settle is None or time.monotonic() < settle):
            message = consumer.poll(0.2)
            if len(received) >= expected and settle is None:
                # Whatever else comes in the next moment would be a record the model says is not there.
                settle = time.monotonic() + 1.0
            if message is None:
                continue
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                continue
            value = message.value()
            assert value is not None
            received.append(value)
    finally:
        consumer.close()
    return received


def test_confluent_read_committed_reads_only_what_the_python_producer_committed(
    start_test_broker: Callable[..., tuple[Any, Any]],
) -> None:
    from actors import Admin, Producer

    broker, _ = start_test_broker(log_dirs_count=1, transaction_state_log_num_partitions="1")
    Admin(broker).create_topic(TOPIC, PARTITIONS)
    model: list[tuple[list[bytes], bool]] = []
    with Producer(transactional_id="python-to-confluent", linger_ms=0) as producer:
        producer.init_transactions(DEADLINE_S)
        for number, commit in enumerate([True, False, True]):
            values = [f"txn{number}-{index}".encode() for index in range(5)]
            producer.begin_transaction()
            for index, value in enumerate(values):
                producer.send(TOPIC, value, partition=index % PARTITIONS)
            producer.flush(DEADLINE_S)
            if commit:
                producer.commit_transaction(DEADLINE_S)
            else:
                producer.abort_transaction(DEADLINE_S)
            model.append((values, commit))
        # One more left open: it holds the last stable offset, so read_committed stops before it.
        producer.begin_transaction()
        open_values = [b"open-0", b"open-1"]
        for index, value in enumerate(open_values):
            producer.send(TOPIC, value, partition=index % PARTITIONS)
        producer.flush(DEADLINE_S)
        committed = [value for values, commit in model if commit for value in values]
        everything = [value for values, _ in model for value in values] + open_values
        with KafkaListener({"listeners": "PLAINTEXT://127.0.0.1:0"}) as listener:
            assert sorted(consume(listener, "read_committed", len(committed))) == sorted(committed)
            assert sorted(consume(listener, "read_uncommitted", len(everything))) == sorted(everything)
            producer.commit_transaction(DEADLINE_S)
            assert sorted(consume(listener, "read_committed", len(committed) + 2)) == sorted(committed + open_values)
