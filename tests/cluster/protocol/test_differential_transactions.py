"""Differential tests of transactions: one confluent-kafka transactional sequence (commits, an abort, transactions
of three producers interleaved on three partitions, one left open) run against Apache Kafka 3.9.1 and against
raybroker's listener, then read by confluent-kafka consumers at read_committed and read_uncommitted: the records
each sees (partition, offset, value), and each partition's end as the consumer finds it (ListOffsets at its level:
the last stable offset for read_committed, the high watermark for read_uncommitted) compared.

`test_kafka_reads_transactions_as_the_model_says` runs on Kafka alone: Kafka's answers equal the model the
sequence implies (the fates the producers gave their records), which is the model raybroker's own tests of the read
side hold raybroker to (`tests.transaction_scenario`, `test_read_committed.py`).

`test_raybroker_reads_transactions_as_kafka` runs the sequence on both and compares everything, the model
included (which holds each record's offset: markers take offsets, so the same sequence must give the same offsets).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from cluster.protocol.listener import KafkaListener
from tests.cluster.protocol.helpers import confluent_consume_all

pytestmark = [pytest.mark.ray, pytest.mark.kafka]

PARTITIONS = 3
DEADLINE_S = 30.0
QUIET = {"log_level": 0}
Read = list[tuple[int, int, bytes]]


@pytest.fixture(scope="module")
def raybroker(start_test_broker: Callable[..., tuple[Any, Any]]) -> Iterator[str]:
    # 3 partitions of `__transaction_state`, not Kafka's 50: a partition actor takes ~1 s to start.
    start_test_broker(num_partitions="1", transaction_state_log_num_partitions="3")
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "num.partitions": "1",
        "transaction.state.log.num.partitions": "3",
    }
    with KafkaListener(settings) as started:
        yield started.bootstrap_servers


@dataclass
class Sequence:
    """What the transactional sequence produced: each record's (partition, offset, value) and fate."""

    fates: dict[tuple[int, int, bytes], str]
    # The producer whose transaction is still open when the consumers read; aborted by `close`.
    open_producer: Any

    def read_uncommitted(self) -> Read:
        return sorted(self.fates)

    def read_committed(self) -> Read:
        """Committed and plain records below each partition's first open record."""
        first_open = {}
        for (partition, offset, _), fate in self.fates.items():
            if fate == "open":
                first_open[partition] = min(offset, first_open.get(partition, offset))
        return sorted(
            record
            for record, fate in self.fates.items()
            if fate in ("committed", "plain") and record[1] < first_open.get(record[0], record[1] + 1)
        )

    def close(self) -> None:
        self.open_producer.abort_transaction(DEADLINE_S)


def _create(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)], operation_timeout=10)[topic].result(timeout=DEADLINE_S)


class _Producer:
    """A confluent-kafka producer (transactional with `transactional_id`) that records what it sent, flushed after
    each send so the sequence lands in the same order on both brokers."""

    def __init__(self, bootstrap: str, topic: str, transactional_id: str | None) -> None:
        from confluent_kafka import Producer

        config = {"bootstrap.servers": bootstrap, "linger.ms": "0", **QUIET}
        if transactional_id is not None:
            config["transactional.id"] = transactional_id
        self.producer = Producer(config)
        self.topic = topic
        self.sent: list[tuple[int, int, bytes]] = []
        if transactional_id is not None:
            self.producer.init_transactions(DEADLINE_S)

    def send(self, partition: int, value: str) -> None:
        errors: list[Any] = []

        def report(error: Any, message: Any) -> None:
            if error is not None:
                errors.append(error)
            else:
                self.sent.append((message.partition(), message.offset(), message.value()))

        self.producer.produce(self.topic, value=value.encode(), partition=partition, on_delivery=report)
        assert self.producer.flush(DEADLINE_S) == 0
        assert errors == []


def _wait_for_markers(bootstrap: str, topic: str, partitions: list[int]) -> None:
    """Waits until each partition's last stable offset reached its high watermark: a coordinator answers EndTxn
    before it writes the markers, so without the wait a later send may land before a marker on one broker and
    after it on the other, and the offsets would differ."""
    from confluent_kafka import Consumer, TopicPartition

    consumers = {
        level: Consumer(
            {"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}", "isolation.level": level, **QUIET}
        )
        for level in ("read_committed", "read_uncommitted")
    }
    try:
        deadline = time.monotonic() + DEADLINE_S
        while True:
            ends = {
                level: [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions]
                for level, consumer in consumers.items()
            }
            if ends["read_committed"] == ends["read_uncommitted"]:
                return
            assert time.monotonic() < deadline, ends
            time.sleep(0.05)
    finally:
        for consumer in consumers.values():
            consumer.close()


def run_sequence(bootstrap: str, topic: str) -> Sequence:
    """The transactional sequence (see the module docstring) on `topic`, created here."""
    _create(bootstrap, topic)
    run = uuid.uuid4().hex[:8]
    plain = _Producer(bootstrap, topic, None)
    a = _Producer(bootstrap, topic, f"a-{run}")
    b = _Producer(bootstrap, topic, f"b-{run}")
    c = _Producer(bootstrap, topic, f"c-{run}")
    fates: dict[tuple[int, int, bytes], str] = {}

    def settle(producer: _Producer, fate: str) -> None:
        fates.update(dict.fromkeys(producer.sent, fate))
        producer.sent.clear()

    plain.send(0, "plain-0")
    a.producer.begin_transaction()
    b.producer.begin_transaction()
    a.send(0, "a-0")
    b.send(0, "b-0")
    b.send(1, "b-1")
    a.send(1, "a-1")
    a.send(2, "a-2")
    plain.send(1, "plain-1")
    b.producer.abort_transaction(DEADLINE_S)
    settle(b, "aborted")
    a.producer.commit_transaction(DEADLINE_S)
    settle(a, "committed")
    _wait_for_markers(bootstrap, topic, list(range(PARTITIONS)))
    c.producer.begin_transaction()
    c.send(2, "c-2")
    c.send(0, "c-0")
    plain.send(2, "plain-2")
    plain.send(0, "plain-3")
    a.producer.begin_transaction()
    a.send(1, "a-3")
    a.producer.commit_transaction(DEADLINE_S)
    settle(a, "committed")
    _wait_for_markers(bootstrap, topic, [1])
    settle(plain, "plain")
    settle(c, "open")
    return Sequence(fates, c.producer)


def consume(bootstrap: str, topic: str, isolation: str, expected: int) -> tuple[Read, dict[int, int]]:
    """What a confluent consumer at `isolation` reads of every partition from offset 0, and each partition's end
    as it finds it (ListOffsets at its isolation level)."""
    read, watermarks = confluent_consume_all(bootstrap, topic, PARTITIONS, isolation, expected)
    return sorted(read), {partition: high for partition, (_, high) in watermarks.items()}


def read_both_levels(bootstrap: str, topic: str) -> dict[str, tuple[Read, dict[int, int]]]:
    sequence = run_sequence(bootstrap, topic)
    try:
        return {
            "read_committed": consume(bootstrap, topic, "read_committed", len(sequence.read_committed())),
            "read_uncommitted": consume(bootstrap, topic, "read_uncommitted", len(sequence.read_uncommitted())),
            "model": (sequence.read_committed(), {}),
            "model_uncommitted": (sequence.read_uncommitted(), {}),
        }
    finally:
        sequence.close()


def test_kafka_reads_transactions_as_the_model_says(kafka: str) -> None:
    answers = read_both_levels(kafka, "transactions-model")
    assert answers["read_committed"][0] == answers["model"][0]
    assert answers["read_uncommitted"][0] == answers["model_uncommitted"][0]
    committed_ends, uncommitted_ends = answers["read_committed"][1], answers["read_uncommitted"][1]
    # c's transaction is open on partitions 0 and 2 (its records there sit below the high watermark), not on 1.
    first_open = {
        p: min(o for q, o, v in answers["model_uncommitted"][0] if q == p and v.startswith(b"c-")) for p in (0, 2)
    }
    assert committed_ends == {0: first_open[0], 1: uncommitted_ends[1], 2: first_open[2]}


def test_raybroker_reads_transactions_as_kafka(kafka: str, raybroker: str) -> None:
    """Slow (~11 s): the whole transactional sequence (four producers, commits, aborts, an open transaction) run on both
    brokers and read back by a consumer at each isolation level from each."""
    ours = read_both_levels(raybroker, "transactions-differential")
    theirs = read_both_levels(kafka, "transactions-differential")
    assert ours == theirs
