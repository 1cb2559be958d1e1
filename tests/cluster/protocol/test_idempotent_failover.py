"""A retried idempotent batch after a leader failover, over 127.0.0.1: Produce requests with an idempotent
producer's batches go to a partition of three replicas (`acks=-1`), its leader is lost, and the same requests sent
again reach the new leader, which answers each of the producer's last 5 batches as Kafka does
(`UnifiedLog.append` for a duplicate): error NONE, the batch's original base offset, and its original max timestamp
as log append time, with nothing written twice. The oracle is the first answers and the records the log held
before the retries. No Ray: the listener serves the in-process broker of three nodes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from actors.core.in_process_broker import InProcessBroker
from cluster.protocol.handlers.produce import PRODUCE_KEY
from cluster.protocol.listener import KafkaListener
from cluster.protocol.messages import build
from storage.partition.producer_state import NUM_BATCHES_TO_RETAIN
from storage.records.record_batch import RecordBatchBuilder
from tests.cluster.protocol.helpers import exchange, records_of, run, start_broker, start_local_listener

PRODUCE_VERSION = 9
PRODUCER_ID = 4242
BASE_TIMESTAMP_MS = 1_700_000_000_000
BATCHES = 7


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[InProcessBroker, KafkaListener]]:
    broker = start_broker(tmp_path / "broker", nodes=3, min_insync_replicas="2")
    try:
        with start_local_listener(broker) as listener:
            yield broker, listener
    finally:
        broker.close()


def idempotent_batch(sequence: int, count: int) -> bytes:
    builder = RecordBatchBuilder(producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=sequence)
    for index in range(count):
        builder.append(None, f"record-{sequence + index}".encode(), timestamp=BASE_TIMESTAMP_MS + sequence + index)
    return builder.build()


def produce(listener: KafkaListener, records: bytes) -> Any:
    """The partition answer of one `acks=-1` Produce of `records` into t-0, over a socket."""
    body = build(
        load_request_schema(PRODUCE_KEY, PRODUCE_VERSION),
        {
            "transactional_id": None,
            "acks": -1,
            "timeout": 30000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": records}]}],
        },
    )
    _, response = run(exchange(listener.port, body))
    (topic,) = response.responses
    (partition,) = topic.partition_responses
    return partition


def test_the_new_leader_answers_a_retried_batch_with_its_original_offset_and_time(
    served: tuple[InProcessBroker, KafkaListener],
) -> None:
    broker, listener = served
    broker.controller.create_topic("t", 1, replication_factor=3)
    sent: list[tuple[bytes, Any]] = []
    sequence = 0
    for index in range(BATCHES):
        records = idempotent_batch(sequence, 1 + index % 3)
        sequence += 1 + index % 3
        answer = produce(listener, records)
        assert answer.error_code == ErrorCode.none
        sent.append((records, answer))
    state = broker.controller.partition_state("t", 0)
    before = records_of(broker.internal_partition("t", 0).read(0, 1 << 20))

    broker.lose_node(state.leader)
    assert broker.controller.partition_state("t", 0).leader != state.leader
    for records, original in sent[-NUM_BATCHES_TO_RETAIN:]:
        retried = produce(listener, records)
        last_timestamp = max(timestamp for _, _, _, timestamp in records_of(records))
        assert (retried.error_code, retried.base_offset) == (ErrorCode.none, original.base_offset)
        assert retried.log_append_time is not None
        assert int(retried.log_append_time.timestamp() * 1000) == last_timestamp
    assert records_of(broker.internal_partition("t", 0).read(0, 1 << 20)) == before
    following = produce(listener, idempotent_batch(sequence, 1))
    assert (following.error_code, following.base_offset) == (ErrorCode.none, len(before))
