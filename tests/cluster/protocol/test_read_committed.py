"""Isolation levels over the wire: transactional data written into the in-process broker's logs
(`tests.transaction_scenario`: commits, aborts, interleaved and open transactions on three partitions) read by
confluent-kafka and kafka-python consumers at read_committed and read_uncommitted, each compared with the
scenario's model; ListOffsets' latest offset at both levels; Fetch's own answer (last stable offset, aborted
transactions, null list for read_uncommitted); and a read_committed long poll woken by a COMMIT marker.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_request_schema

from actors.core.in_process_broker import InProcessBroker
from cluster.protocol.listener import KafkaListener
from cluster.protocol.messages import build
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from storage.partition.log import LogAppendInfo
from storage.records.record_batch import ControlRecordType
from tests.cluster.protocol.helpers import (
    QUIET_S,
    READ_DEADLINE_S,
    confluent_consume_all,
    exchange,
    records_of,
    run,
    start_broker,
)
from tests.transaction_scenario import EPOCH, PARTITIONS, C, Scenario, write_scenario

TOPIC = "transactions"
FETCH_KEY = 1
LIST_OFFSETS_KEY = 2


def write_into(view: InProcessBrokerView, topic: str, *, leave_open: bool = True) -> Scenario:
    """The scenario written into `topic`'s leader logs; each write wakes the partition's long polls."""

    def append(partition: int, batch: bytes) -> LogAppendInfo:
        return view.broker.leader(topic, partition).append(batch)

    def mark(partition: int, producer_id: int, epoch: int, commit: bool) -> LogAppendInfo:
        result = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        return view.broker.leader(topic, partition).append_transaction_marker(producer_id, epoch, 0, result)

    return write_scenario(append, mark, leave_open=leave_open)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaListener, InProcessBrokerView, Scenario]]:
    broker: InProcessBroker = start_broker(tmp_path_factory.mktemp("read-committed"))
    view = InProcessBrokerView(broker)
    broker.controller.create_topic(TOPIC, PARTITIONS, {})
    scenario = write_into(view, TOPIC)
    settings = {"listeners": "PLAINTEXT://127.0.0.1:0", "auto.create.topics.enable": "false"}
    try:
        with KafkaListener(settings, view) as listener:
            yield listener, view, scenario
    finally:
        broker.close()


def kafka_python_read(bootstrap: str, isolation: str, expected: int) -> tuple[list[tuple[int, int, bytes]], Any]:
    """What a kafka-python consumer at `isolation` reads of every partition from offset 0, and its end offsets."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level=isolation)
    try:
        partitions = [TopicPartition(TOPIC, partition) for partition in range(PARTITIONS)]
        consumer.assign(partitions)
        for partition in partitions:
            consumer.seek(partition, 0)
        received: list[tuple[int, int, bytes]] = []
        deadline = time.monotonic() + READ_DEADLINE_S
        quiet_until: float | None = None
        while time.monotonic() < deadline and (quiet_until is None or time.monotonic() < quiet_until):
            for records in consumer.poll(timeout_ms=200).values():
                received.extend((record.partition, record.offset, record.value) for record in records)
            if len(received) >= expected and quiet_until is None:
                quiet_until = time.monotonic() + QUIET_S
        ends = {tp.partition: end for tp, end in consumer.end_offsets(partitions).items()}
        return received, ends
    finally:
        consumer.close()


def by_partition(records: list[tuple[int, int, bytes]]) -> dict[int, list[tuple[int, bytes]]]:
    """Each partition's (offset, value) in the order read (consumers interleave partitions, never reorder one)."""
    found: dict[int, list[tuple[int, bytes]]] = {}
    for partition, offset, value in records:
        found.setdefault(partition, []).append((offset, value))
    return found


def confluent_read(bootstrap: str, isolation: str, expected: int) -> tuple[list[tuple[int, int, bytes]], Any]:
    received, watermarks = confluent_consume_all(bootstrap, TOPIC, PARTITIONS, isolation, expected)
    return received, {partition: high for partition, (_, high) in watermarks.items()}


@pytest.mark.parametrize("read", [confluent_read, kafka_python_read], ids=["confluent", "kafka-python"])
@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_a_consumer_reads_what_its_isolation_level_allows(
    served: tuple[KafkaListener, InProcessBrokerView, Scenario], isolation: str, read: Callable[..., Any]
) -> None:
    listener, _, scenario = served
    expected = scenario.read(isolation)
    received, ends = read(listener.bootstrap_servers, isolation, len(expected))
    assert by_partition(received) == by_partition(expected)
    assert ends == {partition: scenario.end(partition, isolation) for partition in range(PARTITIONS)}


def fetch_request(version: int, isolation_level: int, partition: int, offset: int, max_wait_ms: int = 0) -> Any:
    values: dict[str, Any] = {
        "replica_id": -1,
        "max_wait": max_wait_ms,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": isolation_level,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": TOPIC,
                "partitions": [
                    {
                        "partition": partition,
                        "current_leader_epoch": -1,
                        "fetch_offset": offset,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    return build(load_request_schema(FETCH_KEY, version), values)


@pytest.mark.parametrize("version", [4, 11])
def test_fetch_answers_the_last_stable_offset_and_the_aborted_transactions(
    served: tuple[KafkaListener, InProcessBrokerView, Scenario], version: int
) -> None:
    listener, _, scenario = served
    for partition in range(PARTITIONS):
        for level, isolation in ((0, "read_uncommitted"), (1, "read_committed")):
            _, response = run(exchange(listener.port, fetch_request(version, level, partition, 0)))
            answer = response.responses[0].partitions[0]
            assert answer.error_code == 0
            lso = scenario.last_stable_offset(partition)
            assert (answer.high_watermark, answer.last_stable_offset) == (scenario.ends[partition], lso)
            # Whole batches up to the isolation's end, which is always a batch's first offset.
            assert (
                max(offset for offset, *_ in records_of(bytes(answer.records)))
                == scenario.end(partition, isolation) - 1
            )
            if level == 0:
                assert answer.aborted_transactions is None
            else:
                listed = {(txn.producer_id, txn.first_offset) for txn in answer.aborted_transactions}
                assert listed == scenario.aborted_from(partition, 0)


def test_a_fetch_from_past_every_aborted_transaction_lists_none(
    served: tuple[KafkaListener, InProcessBrokerView, Scenario],
) -> None:
    listener, _, scenario = served
    # Partition 1 ends with a committed transaction and a plain record, after its one abort.
    start = max(r.offset for r in scenario.records if r.partition == 1)
    assert scenario.aborted_from(1, start) == set() and scenario.aborted_from(1, 0)
    _, response = run(exchange(listener.port, fetch_request(11, 1, 1, start)))
    assert list(response.responses[0].partitions[0].aborted_transactions) == []


def list_offsets_request(isolation_level: int, partition: int, timestamp: int) -> Any:
    values = {
        "replica_id": -1,
        "isolation_level": isolation_level,
        "topics": [
            {
                "name": TOPIC,
                "partitions": [{"partition_index": partition, "current_leader_epoch": -1, "timestamp": timestamp}],
            }
        ],
    }
    return build(load_request_schema(LIST_OFFSETS_KEY, 7), values)


def listed_offset(listener: KafkaListener, isolation_level: int, partition: int, timestamp: int) -> int:
    _, response = run(exchange(listener.port, list_offsets_request(isolation_level, partition, timestamp)))
    answer = response.topics[0].partitions[0]
    assert answer.error_code == 0
    return int(answer.offset)


def test_list_offsets_latest_is_the_lso_for_read_committed_and_lookups_stay_below_it(
    served: tuple[KafkaListener, InProcessBrokerView, Scenario],
) -> None:
    listener, _, scenario = served
    for partition in range(PARTITIONS):
        assert listed_offset(listener, 0, partition, -1) == scenario.ends[partition]
        assert listed_offset(listener, 1, partition, -1) == scenario.last_stable_offset(partition)
        assert listed_offset(listener, 1, partition, -2) == 0
    # Partition 2's last records lie past its LSO (behind E's open transaction): found at read_uncommitted only.
    lso = scenario.last_stable_offset(2)
    last = max((r for r in scenario.records if r.partition == 2), key=lambda r: r.offset)
    below = max((r for r in scenario.records if r.partition == 2 and r.offset < lso), key=lambda r: r.offset)
    assert last.offset >= lso
    for timestamp in (last.timestamp, -3):
        assert listed_offset(listener, 0, 2, timestamp) == last.offset
        assert listed_offset(listener, 1, 2, timestamp) == -1
    assert listed_offset(listener, 1, 2, below.timestamp) == below.offset


def test_a_read_committed_long_poll_waits_for_the_commit_marker(tmp_path: Path) -> None:
    broker = start_broker(tmp_path / "long-poll")
    view = InProcessBrokerView(broker)
    broker.controller.create_topic(TOPIC, PARTITIONS, {})
    scenario = write_into(view, TOPIC)
    lso = scenario.last_stable_offset(0)
    settings = {"listeners": "PLAINTEXT://127.0.0.1:0", "auto.create.topics.enable": "false"}
    try:
        with KafkaListener(settings, view) as listener:
            first_open = min(r.offset for r in scenario.records if (r.partition, r.fate) == (0, "open"))
            assert lso == first_open
            commit = broker.leader(TOPIC, 0).append_transaction_marker
            timer = threading.Timer(0.5, commit, (C, EPOCH, 0, ControlRecordType.COMMIT))
            started = time.monotonic()
            timer.start()
            _, response = run(exchange(listener.port, fetch_request(11, 1, 0, lso, max_wait_ms=10_000)))
            waited = time.monotonic() - started
            timer.join()
            answer = response.responses[0].partitions[0]
            assert 0.4 < waited < 5.0
            assert answer.last_stable_offset == scenario.ends[0] + 1
            assert next(offset for offset, *_ in records_of(bytes(answer.records))) == lso
    finally:
        broker.close()
