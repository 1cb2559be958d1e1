"""The in-process broker: three simulated nodes replicating a topic with real follower threads, a lost leader
replaced from the ISR without losing an acknowledged record, a node that comes back catching up, and a broker closed
with nothing left running and opened again with its topics and records, what it records in its metrics, and a new
leader answering a retried idempotent batch as the old one did. The oracle is the list of records each `acks=all`
append acknowledged."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.core.in_process_broker import InProcessBroker
from actors.metrics.names import BYTES_IN, ISR_EXPANDS, ISR_SHRINKS, MESSAGES_IN
from actors.metrics.recorder import MetricsRecorder
from storage import file_names
from storage.errors import (
    BrokerNotAvailableError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from storage.files.checkpoint_file import OffsetCheckpointFile
from storage.partition.producer_state import NUM_BATCHES_TO_RETAIN
from storage.records.record_batch import RecordBatchBuilder, iter_batches

DEADLINE_S = 10.0
# Followers answer an idle fetch within 50 ms, so a test never waits long on a long poll.
PROPERTIES = {"replica.fetch.wait.max.ms": "50", "replica.fetch.backoff.ms": "20", "min.insync.replicas": "2"}
# What an `acks=all` append may answer instead of an acknowledgement while nodes come and go.
REFUSED = (
    NotEnoughReplicasError,
    NotEnoughReplicasAfterAppendError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    BrokerNotAvailableError,
)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    running = InProcessBroker(tmp_path, nodes=3, properties=PROPERTIES)
    try:
        yield running
    finally:
        running.close()


def batch(*values: bytes) -> bytes:
    builder = RecordBatchBuilder()
    for value in values:
        builder.append(None, value, timestamp=1_700_000_000_000)
    return builder.build()


def values(data: bytes) -> list[bytes | None]:
    return [record.value for fetched in iter_batches(data) for record in fetched.records()]


def wait_until(condition: object, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_acks_all_appends_reach_every_replica_and_survive_the_leaders_loss(broker: InProcessBroker) -> None:
    broker.controller.create_topic("t", 1, replication_factor=3)
    acknowledged: list[bytes | None] = []
    for index in range(5):
        value = f"v{index}".encode()
        leader = broker.leader("t", 0)
        leader.await_replicated(leader.append(batch(value), acks=-1))
        acknowledged.append(value)
    state = broker.controller.partition_state("t", 0)
    for node in state.replicas:
        assert values(bytes(broker.replica_on(node, "t", 0).log.read(0, 1 << 20, isolation="log_end").records)) == (
            acknowledged
        )
    with pytest.raises(NotLeaderOrFollowerError):
        broker.replica_on(state.replicas[1], "t", 0).append(batch(b"to a follower"))

    changed = broker.lose_node(state.leader)
    new_state = broker.controller.partition_state("t", 0)
    assert [s.partition for s in changed] == [0]
    assert new_state.leader in state.isr and new_state.leader != state.leader
    assert new_state.leader_epoch == state.leader_epoch + 1
    leader = broker.leader("t", 0)
    leader.await_replicated(leader.append(batch(b"after"), acks=-1))
    acknowledged.append(b"after")
    assert values(broker.internal_partition("t", 0).read(0, 1 << 20)) == acknowledged

    broker.restart_node(state.leader)
    returned = broker.replica_on(state.leader, "t", 0)
    wait_until(lambda: returned.log.log_end_offset == len(acknowledged), "the returned node to catch up")
    assert returned.replica.following


def test_a_closed_broker_leaves_nothing_running_and_reopens_with_its_topics_and_records(tmp_path: Path) -> None:
    before = {thread.ident for thread in threading.enumerate()}
    first = InProcessBroker(tmp_path, nodes=2, properties=PROPERTIES)
    first.controller.create_topic("kept", 2, {"retention.ms": "600000"}, replication_factor=2)
    leader = first.leader("kept", 1)
    leader.await_replicated(leader.append(batch(b"a", b"b"), acks=-1))
    first.close()
    assert {thread.ident for thread in threading.enumerate() if thread.is_alive()} <= before

    second = InProcessBroker(tmp_path, nodes=2, properties=PROPERTIES)
    try:
        assert second.controller.describe_topic("kept").config == {"retention.ms": "600000"}
        assert values(second.internal_partition("kept", 1).read(0, 1 << 20)) == [b"a", b"b"]
        with pytest.raises(UnknownTopicOrPartitionError):
            second.leader("gone", 0)
    finally:
        second.close()


def test_a_partition_with_one_replica_reopened_behind_its_checkpointed_high_watermark_shows_its_whole_log(
    tmp_path: Path,
) -> None:
    """A replica's log reopens at its replication-offset-checkpoint entry (here lowered to 1, as a crash between two
    checkpoints leaves it) and waits for the controller's state: a leader alone in its ISR then commits its whole
    log at once (Kafka's `makeLeader` then `maybeIncrementLeaderHW`), so a partition with one replica loses sight of
    none of its records."""
    first = InProcessBroker(tmp_path, nodes=1, properties=PROPERTIES)
    first.controller.create_topic("alone", 1)
    first.leader("alone", 0).append(batch(b"a", b"b", b"c"))
    first.close()
    OffsetCheckpointFile(tmp_path / "node-0" / file_names.REPLICATION_OFFSET_CHECKPOINT).write({("alone", 0): 1})
    second = InProcessBroker(tmp_path, nodes=1, properties=PROPERTIES)
    try:
        leader = second.leader("alone", 0)
        assert leader.offsets() == (0, 3, 3) and not leader.log.replicated
        assert values(bytes(leader.fetch(0, 1 << 20).records)) == [b"a", b"b", b"c"]
    finally:
        second.close()


@pytest.mark.parametrize("seed", range(2))
def test_random_node_losses_and_returns_never_lose_an_acknowledged_record(tmp_path: Path, seed: int) -> None:
    """A seeded run of `acks=all` appends while nodes are lost and come back (never more than two down): after every
    step the partition's leader, when it has one, holds every acknowledged record in the order it was acknowledged
    (Kafka's guarantee with clean elections and `min.insync.replicas` 2), and appends without enough in-sync
    replicas are refused rather than acknowledged."""
    rng = random.Random(seed)
    broker = InProcessBroker(tmp_path, nodes=3, properties=PROPERTIES)
    try:
        broker.controller.create_topic("t", 1, replication_factor=3)
        acknowledged: list[bytes | None] = []
        down: set[str] = set()
        for step in range(12):
            action = rng.choice(["append", "append", "lose", "return"])
            if action == "lose" and len(down) < 2:
                node = rng.choice(sorted(set(broker.nodes) - down))
                broker.lose_node(node)
                down.add(node)
            elif action == "return" and down:
                node = rng.choice(sorted(down))
                broker.restart_node(node)
                down.discard(node)
            else:
                value = f"{seed}-{step}".encode()
                try:
                    leader = broker.leader("t", 0)
                    leader.await_replicated(leader.append(batch(value), acks=-1), timeout_ms=2_000)
                except REFUSED:
                    continue
                acknowledged.append(value)
            try:
                leader = broker.leader("t", 0)
            except NotLeaderOrFollowerError:
                continue
            held = values(bytes(leader.log.read(0, 1 << 20, isolation="log_end").records))
            assert [value for value in held if value in acknowledged] == acknowledged, f"step {step}: {action}"
    finally:
        broker.close()


def test_the_new_leader_answers_a_retry_of_the_producers_last_batches_with_their_original_offsets(
    broker: InProcessBroker,
) -> None:
    """A follower's producer state carries the batch metadata it copied: after the leader's loss, a retry of each
    of the producer's last 5 batches gets the answer the old leader gave (Kafka's `ProducerStateEntry`)."""
    broker.controller.create_topic("t", 1, replication_factor=3)
    sent = []
    sequence = 0
    for index in range(NUM_BATCHES_TO_RETAIN + 2):
        builder = RecordBatchBuilder(producer_id=9, producer_epoch=0, base_sequence=sequence)
        for offset in range(1 + index % 2):
            builder.append(None, f"v{sequence + offset}".encode(), timestamp=1_700_000_000_000 + sequence + offset)
        sequence += 1 + index % 2
        leader = broker.leader("t", 0)
        records = builder.build()
        sent.append((records, leader.await_replicated(leader.append(records, acks=-1))))
    state = broker.controller.partition_state("t", 0)
    broker.lose_node(state.leader)
    leader = broker.leader("t", 0)
    end = leader.log.log_end_offset
    for records, original in sent[-NUM_BATCHES_TO_RETAIN:]:
        retried = leader.await_replicated(leader.append(records, acks=-1))
        assert retried.duplicate
        assert (retried.first_offset, retried.last_offset, retried.log_append_time) == (
            original.first_offset,
            original.last_offset,
            original.max_timestamp,
        )
    assert leader.log.log_end_offset == end


def test_appends_and_isr_changes_are_recorded_as_the_partition_state_moves(tmp_path: Path) -> None:
    """The broker's recorder against the oracle of the partition's states: a follower lost shrinks the ISR once, its
    return expands it once; every acknowledged record and batch byte counts once under its topic."""
    metrics = MetricsRecorder()
    broker = InProcessBroker(tmp_path, nodes=3, properties=PROPERTIES, metrics=metrics)
    try:
        broker.controller.create_topic("t", 1, replication_factor=3)
        sent = [batch(b"a", b"b"), batch(b"c")]
        leader = broker.leader("t", 0)
        for data in sent:
            leader.await_replicated(leader.append(data, acks=-1))
        assert (metrics.value(ISR_SHRINKS), metrics.value(ISR_EXPANDS)) == (0, 0)

        state = broker.controller.partition_state("t", 0)
        follower = state.replicas[1] if state.replicas[0] == state.leader else state.replicas[0]
        broker.lose_node(follower)
        assert len(broker.controller.partition_state("t", 0).isr) == 2
        assert (metrics.value(ISR_SHRINKS), metrics.value(ISR_EXPANDS)) == (1, 0)
        broker.restart_node(follower)
        wait_until(lambda: len(broker.controller.partition_state("t", 0).isr) == 3, "the follower back in the ISR")
        assert (metrics.value(ISR_SHRINKS), metrics.value(ISR_EXPANDS)) == (1, 1)

        assert metrics.value(MESSAGES_IN, "t") == metrics.value(MESSAGES_IN, "") == 3
        assert metrics.value(BYTES_IN, "t") == sum(len(data) for data in sent)
    finally:
        broker.close()
