"""A Java transactional producer pipelining through committed and aborted transactions, on raybroker and on Apache
Kafka: Kafka's own client (kafka-clients 4.1, `java/PipelinedTransactions.java`) with its defaults for exactly-once
work (acks=all, 5 requests in flight per connection, linger.ms 5), unkeyed records (the sticky partitioner fills
one partition's batches, so several Produce requests of one connection carry batches of one partition at once),
every third transaction aborted, on a 3-partition topic whose 1 MiB segments roll many times. Both brokers finalize
`transaction.version` 2, so the client speaks transactions v2; it flushes before each commit, as its EndTxn may
otherwise overtake the transaction's batches (a race in Kafka's Java client: docs/clients.md).

The oracle is the list of transactions the program reports committed: a read_committed consumer must read exactly
their records, each once, every partition in the order they were sent, and nothing of an aborted one. Both brokers
run the same number of transactions and must read back the same records. The quick mode runs `TRANSACTIONS`;
`RAYBROKER_RELIABILITY=long` runs the program for `LONG_S` seconds against raybroker (and the same count against
Kafka is not needed there: the oracle decides)."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.kafka_broker import KafkaBroker
from tests.cluster.applications.java_programs import JavaProcess, java_classpath
from tests.reliability.modes import LONG

pytestmark = [pytest.mark.kafka, pytest.mark.ray]

KAFKA_CLIENTS = ("org.apache.kafka", "kafka-clients", "4.1.0")
SOURCE = Path(__file__).parent / "java" / "PipelinedTransactions.java"
PARTITIONS = 3
RECORDS_PER_TRANSACTION = 150
TRANSACTIONS = 240
LONG_S = 300
SEGMENT_BYTES = 1 << 20
# The program's own bound on its run: the quick mode's transactions take ~5 s here.
QUICK_S = 120
READ_DEADLINE_S = 120.0
QUIET_S = 1.0


@pytest.fixture(scope="module")
def classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    return java_classpath([KAFKA_CLIENTS], {SOURCE.name: SOURCE.read_text()}, tmp_path_factory.mktemp("java"))


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    created = admin.create_topics(
        [NewTopic(topic, num_partitions=PARTITIONS, config={"segment.bytes": str(SEGMENT_BYTES)})]
    )
    created[topic].result(timeout=60)


def run_program(
    classpath: str, bootstrap: str, topic: str, seconds: int, transactions: int, log: Path, server_log: Path | None
) -> list[int]:
    """Runs the producer to its end; the transactions it committed. A failure shows the end of the program's output
    and of `server_log` (the broker's own log, when it has one)."""
    program = JavaProcess(
        classpath,
        "PipelinedTransactions",
        [bootstrap, topic, f"txn-{topic}", str(RECORDS_PER_TRANSACTION), str(seconds), str(transactions), "unkeyed"],
        log,
    )
    try:
        code = program.wait(seconds + 120)
    finally:
        program.stop()
    output = program.output()
    server = "" if server_log is None else server_log.read_text(errors="replace")[-3000:]
    assert code == 0, f"{output[-3000:]}\n--- end of the broker's log ---\n{server}"
    lines = output.splitlines()
    ended = [line.split() for line in lines if line.startswith(("commit ", "abort "))]
    assert [int(number) for _, number in ended] == list(range(len(ended)))
    assert f"done {len(ended)}" in lines
    return [int(number) for kind, number in ended if kind == "commit"]


def read_committed(bootstrap: str, topic: str, expected: int) -> dict[int, list[bytes]]:
    """Every partition's values as a read_committed consumer reads them from offset 0: polled until `expected`
    records came, then `QUIET_S` more to see that nothing else comes."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex}",
            "enable.auto.commit": "false",
            "isolation.level": "read_committed",
        }
    )
    read: dict[int, list[bytes]] = {partition: [] for partition in range(PARTITIONS)}
    try:
        consumer.assign([TopicPartition(topic, partition, 0) for partition in range(PARTITIONS)])
        count = 0
        deadline = time.monotonic() + READ_DEADLINE_S
        quiet_until = None
        while time.monotonic() < (deadline if quiet_until is None else quiet_until):
            for message in consumer.consume(num_messages=1000, timeout=0.2):
                assert message.error() is None, message.error()
                read[message.partition()].append(message.value())
                count += 1
            if count >= expected and quiet_until is None:
                quiet_until = time.monotonic() + QUIET_S
        assert count >= expected, f"read {count} of {expected} records within {READ_DEADLINE_S:.0f} s"
    finally:
        consumer.close()
    return read


def check_exactly_committed(read: dict[int, list[bytes]], committed: list[int]) -> Counter[str]:
    """Asserts the read records are exactly those of the committed transactions, each once, in send order per
    partition; returns them as a multiset of (transaction, index) names."""
    names = Counter(value.split()[0].decode() for values in read.values() for value in values)
    expected = Counter(f"t{t}-{i}" for t in committed for i in range(RECORDS_PER_TRANSACTION))
    duplicated = sorted(name for name, count in names.items() if count > 1)
    assert not duplicated, f"{len(duplicated)} records read twice, e.g. {duplicated[:5]}"
    missing, unexpected = sorted(expected - names), sorted(names - expected)
    assert names == expected, f"missing {missing[:5]} ({len(missing)}), unexpected (aborted?) {unexpected[:5]}"
    for partition, values in read.items():
        order = [tuple(int(part) for part in value.split()[0].decode()[1:].split("-")) for value in values]
        assert order == sorted(order), f"partition {partition} out of send order"
    return names


def test_a_pipelining_java_transactional_producer_reads_back_exactly_its_committed_transactions(
    classpath: str, raybroker_servers: str, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    results = {}
    servers = (
        ("raybroker", raybroker_servers, None),
        ("kafka", kafka_broker.bootstrap_servers, kafka_broker.nodes[0].log_path),
    )
    for name, bootstrap, server_log in servers:
        topic = f"pipelined-{name}-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, topic)
        long_run = LONG and name == "raybroker"
        seconds, count = (LONG_S, 10**9) if long_run else (QUICK_S, TRANSACTIONS)
        committed = run_program(classpath, bootstrap, topic, seconds, count, tmp_path / f"{name}.log", server_log)
        if not long_run:
            assert len(committed) == TRANSACTIONS - TRANSACTIONS // 3
        read = read_committed(bootstrap, topic, len(committed) * RECORDS_PER_TRANSACTION)
        results[name] = check_exactly_committed(read, committed)
    if not LONG:
        assert results["raybroker"] == results["kafka"]
