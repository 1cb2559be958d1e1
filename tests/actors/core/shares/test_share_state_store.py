"""The share-partitions' durable states in `__share_group_state`, on the in-process broker's real replicas: a state
written reads back, the latest wins, a store made again (a restart) and a broker opened again on the same log dirs
load what was written, in Kafka's record format; an older leader is fenced; and a partition leader's share-partitions
written through the store come back after a restart or a leader change with every accepted record done and every
other one delivered again, with its delivery count, while an acknowledgement whose write is refused counts for
nothing."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.core.controller.elections import ElectionType
from actors.core.controller.topic_metadata import SHARE_GROUP_STATE_TOPIC
from actors.core.in_process_broker import InProcessBroker
from actors.core.replication.partition_server import PartitionServer
from actors.core.shares.acknowledgements import AcknowledgementBatch, AcknowledgeType
from actors.core.shares.group_share_config import EARLIEST, ResolvedShareConfig
from actors.core.shares.share_partition import AcquiredRecords
from actors.core.shares.share_state_store import ShareStateStore
from storage.clock import MockClock
from storage.errors import FencedLeaderEpochError, InvalidRecordStateError, NotEnoughReplicasError
from storage.records.record_batch import RecordBatchBuilder, iter_batches
from storage.records.share_group_state import ShareGroupState, SharePartitionKey, ShareSnapshot, StateBatch

PROPERTIES = {"share.coordinator.state.topic.num.partitions": "3", "offsets.topic.num.partitions": "1"}
KEY = SharePartitionKey("g", uuid.UUID(int=7), 0)
OTHER = SharePartitionKey("h", uuid.UUID(int=7), 1)
FIRST = ShareGroupState(0, 10, (StateBatch(10, 14, 0, 1),))
SECOND = ShareGroupState(0, 12, (StateBatch(13, 13, 2, 1), StateBatch(14, 14, 0, 2)))
EARLIEST_CONFIG = ResolvedShareConfig(auto_offset_reset=EARLIEST)


def _open(root: Path, clock: MockClock, properties: dict[str, str] | None = None) -> InProcessBroker:
    return InProcessBroker(root, properties={**PROPERTIES, **(properties or {})}, clock=clock)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    broker = _open(tmp_path, MockClock())
    try:
        yield broker
    finally:
        broker.close()


def _store(broker: InProcessBroker) -> ShareStateStore:
    """A store made afresh over the broker's `__share_group_state`: what a restarted broker loads."""
    return ShareStateStore(
        broker.config.share_group_config,
        clock=broker.clock,
        controller=broker.controller,
        find_partition=lambda p: broker.internal_partition(SHARE_GROUP_STATE_TOPIC, p),
    )


def test_a_state_never_written_is_uninitialized(broker: InProcessBroker) -> None:
    assert broker.share_state_store.read_state(KEY, 0) == ShareGroupState()
    assert SHARE_GROUP_STATE_TOPIC in broker.controller.list_topics(include_internal=True)
    assert len(broker.controller.describe_topic(SHARE_GROUP_STATE_TOPIC).partitions) == 3


def test_the_latest_state_wins_and_a_new_store_loads_it(broker: InProcessBroker) -> None:
    store = broker.share_state_store
    store.write_state(KEY, FIRST, 0)
    store.write_state(OTHER, FIRST, 0)
    store.write_state(KEY, SECOND, 0)
    assert store.read_state(KEY, 0) == SECOND
    restarted = _store(broker)
    assert (restarted.read_state(KEY, 0), restarted.read_state(OTHER, 0)) == (SECOND, FIRST)


def test_the_records_are_kafkas_share_snapshots_on_the_keys_partition(broker: InProcessBroker) -> None:
    now_ms = broker.clock.milliseconds()
    broker.share_state_store.write_state(KEY, FIRST, 3)
    partition = broker.leader(SHARE_GROUP_STATE_TOPIC, KEY.state_partition(3))
    records = [r for b in iter_batches(bytes(partition.fetch(0, 1 << 20).records)) for r in b.records()]
    assert [SharePartitionKey.from_bytes(r.key or b"") for r in records] == [KEY]
    snapshot = ShareSnapshot.from_bytes(records[0].value or b"")
    assert (snapshot.state, snapshot.leader_epoch, snapshot.write_timestamp_ms) == (FIRST, 3, now_ms)


def test_a_broker_opened_again_on_its_log_dirs_loads_the_states(tmp_path: Path) -> None:
    clock = MockClock()
    broker = _open(tmp_path, clock)
    try:
        broker.share_state_store.write_state(KEY, FIRST, 0)
        broker.share_state_store.write_state(KEY, SECOND, 0)
    finally:
        broker.close()
    reopened = _open(tmp_path, clock)
    try:
        assert reopened.share_state_store.read_state(KEY, 0) == SECOND
    finally:
        reopened.close()


def test_an_older_leader_is_fenced_once_a_newer_one_read_the_state(broker: InProcessBroker) -> None:
    """Kafka's share coordinator fences by leader epoch: the new leader's read is written, so the deposed leader's
    acknowledgement cannot undo what the new one hands out."""
    store = broker.share_state_store
    store.write_state(KEY, FIRST, 1)
    assert store.read_state(KEY, 2) == FIRST
    with pytest.raises(FencedLeaderEpochError):
        store.write_state(KEY, SECOND, 1)
    with pytest.raises(FencedLeaderEpochError):
        _store(broker).read_state(KEY, 1)
    assert _store(broker).read_state(KEY, 2) == FIRST


def _state_partition_offsets(broker: InProcessBroker, key: SharePartitionKey) -> tuple[int, int, int]:
    return broker.leader(SHARE_GROUP_STATE_TOPIC, key.state_partition(3)).offsets()


def test_the_prune_deletes_every_record_below_the_oldest_latest_snapshot_and_loading_reads_the_same(
    tmp_path: Path,
) -> None:
    """KEY and `same` share a state partition; records no key's latest are deleted (DeleteRecords), up to the oldest
    latest snapshot, and a store made again loads the same states."""
    same = SharePartitionKey("g4", uuid.UUID(int=7), 0)
    assert same.state_partition(3) == KEY.state_partition(3)
    broker = _open(tmp_path, MockClock())
    try:
        store = broker.share_state_store
        store.write_state(KEY, FIRST, 0)  # offset 0
        store.write_state(same, FIRST, 0)  # 1: same's latest
        store.write_state(KEY, SECOND, 0)  # 2: KEY's latest
        assert store.prune() == {KEY.state_partition(3): 1}
        assert _state_partition_offsets(broker, KEY)[:2] == (1, 3)
        store.write_state(same, SECOND, 0)  # 3: same's latest; KEY's at 2 is now the oldest latest
        assert store.prune() == {KEY.state_partition(3): 2}
        assert store.prune() == {}, "nothing more is redundant"
        restarted = _store(broker)
        assert (restarted.read_state(KEY, 0), restarted.read_state(same, 0)) == (SECOND, SECOND)
    finally:
        broker.close()


def test_a_cold_state_is_written_again_so_the_prune_passes_it_and_both_run_on_the_brokers_schedule(
    tmp_path: Path,
) -> None:
    clock = MockClock()
    broker = _open(
        tmp_path,
        clock,
        {
            "share.coordinator.cold.partition.snapshot.interval.ms": "60000",
            "share.coordinator.state.topic.prune.interval.ms": "60000",
        },
    )
    busy = SharePartitionKey("busy", uuid.UUID(int=7), 0)
    try:
        store = broker.share_state_store
        store.write_state(KEY, FIRST, 4)  # offset 0: KEY goes cold
        for _ in range(3):
            clock.sleep(30_000)
            store.write_state(busy, SECOND, 0)  # 1, 2, 3
        # At 60 s the cold pass writes KEY again (offset 4, epoch kept), then the prune deletes all below busy's 3.
        ran = broker.run_scheduled()
        assert {"share-state-cold-snapshots", "share-state-prune"} <= set(ran)
        assert _state_partition_offsets(broker, KEY)[:2] == (3, 5)
        restarted = _store(broker)
        assert restarted.read_state(KEY, 4) == FIRST
        with pytest.raises(FencedLeaderEpochError):
            restarted.write_state(KEY, SECOND, 3)
    finally:
        broker.close()


def _produce(broker: InProcessBroker, topic: str, count: int) -> None:
    leader = broker.leader(topic, 0)
    for index in range(count):
        builder = RecordBatchBuilder()
        builder.append(None, f"v{index}".encode(), timestamp=1_700_000_000_000)
        leader.append(builder.build())


def _acquire(broker: InProcessBroker, topic: str, member: str) -> list[AcquiredRecords]:
    fetched = broker.leader(topic, 0).share_fetch("g", member, EARLIEST_CONFIG, 1 << 20, 500)
    return list(fetched.acquired)


def _wait_for_high_watermark(leader: PartitionServer, offset: int) -> None:
    """Until the follower's fetch (a thread of the in-process broker) moved the leader's high watermark to `offset`."""
    deadline = time.monotonic() + 10
    while leader.offsets()[1] < offset and time.monotonic() < deadline:
        time.sleep(0.01)
    assert leader.offsets()[1] == offset


def _ack(first: int, last: int, ack_type: AcknowledgeType) -> AcknowledgementBatch:
    return AcknowledgementBatch(first, last, (int(ack_type),))


def test_a_restarted_broker_redelivers_no_accepted_record_and_every_other_one(tmp_path: Path) -> None:
    """ACCEPT 0-3, REJECT 4, RELEASE 5, 6-9 held when the broker stops: after it opens again, the group gets 5 (its
    second delivery) and 6-9 (their lock did not survive; still a first delivery counted once), then 10-11 produced
    meanwhile, and never 0-4."""
    clock = MockClock()
    broker = _open(tmp_path, clock)
    try:
        broker.controller.create_topic("t", 1)
        _produce(broker, "t", 10)
        assert _acquire(broker, "t", "m1") == [AcquiredRecords(0, 9, 1)]
        broker.leader("t", 0).share_acknowledge(
            "g",
            "m1",
            EARLIEST_CONFIG,
            [
                _ack(0, 3, AcknowledgeType.ACCEPT),
                _ack(4, 4, AcknowledgeType.REJECT),
                _ack(5, 5, AcknowledgeType.RELEASE),
            ],
        )
        _produce(broker, "t", 2)
    finally:
        broker.close()
    reopened = _open(tmp_path, clock)
    try:
        assert _acquire(reopened, "t", "m2") == [AcquiredRecords(5, 5, 2), AcquiredRecords(6, 11, 1)]
    finally:
        reopened.close()


def test_a_refused_acknowledgement_changes_no_durable_state(broker: InProcessBroker) -> None:
    """Bad input gets its error and changes nothing: the other member keeps its records, and a restart of the
    store finds the state the last good call wrote."""
    broker.controller.create_topic("t", 1)
    _produce(broker, "t", 4)
    assert _acquire(broker, "t", "m1") == [AcquiredRecords(0, 3, 1)]
    leader = broker.leader("t", 0)
    leader.share_acknowledge("g", "m1", EARLIEST_CONFIG, [_ack(0, 0, AcknowledgeType.ACCEPT)])
    written = _store(broker).read_state(SharePartitionKey("g", broker.controller.describe_topic("t").topic_id, 0), 0)
    with pytest.raises(InvalidRecordStateError):
        leader.share_acknowledge("g", "m2", EARLIEST_CONFIG, [_ack(1, 1, AcknowledgeType.ACCEPT)])
    leader.share_acknowledge("g", "m1", EARLIEST_CONFIG, [_ack(1, 3, AcknowledgeType.ACCEPT)])
    assert written == ShareGroupState(0, 1, ())
    key = SharePartitionKey("g", broker.controller.describe_topic("t").topic_id, 0)
    assert _store(broker).read_state(key, 0) == ShareGroupState(0, 4, ())


def test_an_acknowledgement_not_made_durable_fails_and_its_records_come_back(tmp_path: Path) -> None:
    """`__share_group_state` with 2 replicas, 2 in sync: once a node is lost its appends are refused, so the ACCEPT
    answers NOT_ENOUGH_REPLICAS and counts for nothing: the share-partition is read again from its durable state, the
    records go to the next member, and the state a restart would read is the one before the ACCEPT."""
    properties = {
        **PROPERTIES,
        "share.coordinator.state.topic.replication.factor": "2",
        "share.coordinator.state.topic.min.isr": "2",
    }
    broker = InProcessBroker(tmp_path, nodes=2, properties=properties, clock=MockClock())
    try:
        broker.controller.create_topic("t", 1, replication_factor=1)
        leader_node = broker.controller.partition_state("t", 0).leader
        _produce(broker, "t", 4)
        assert _acquire(broker, "t", "m1") == [AcquiredRecords(0, 3, 1)]
        other = next(node for node in broker.nodes if node != leader_node)
        broker.lose_node(other)
        with pytest.raises(NotEnoughReplicasError):
            broker.leader("t", 0).share_acknowledge("g", "m1", EARLIEST_CONFIG, [_ack(0, 3, AcknowledgeType.ACCEPT)])
        assert _acquire(broker, "t", "m2") == [AcquiredRecords(0, 3, 1)]
        leader = broker.leader("t", 0)
        key = SharePartitionKey("g", broker.controller.describe_topic("t").topic_id, 0)
        assert _store(broker).read_state(key, leader.replica.leader_epoch) == ShareGroupState(0, 0, ())
    finally:
        broker.close()


def test_a_new_leader_redelivers_no_accepted_record_and_every_other_one(tmp_path: Path) -> None:
    """A leader change: the topic and `__share_group_state` on both nodes, the leader's node lost after ACCEPT 0-3,
    RELEASE 4 and 5-7 held; the new leader, in a newer epoch, reads the state (fencing the old one's writes) and
    gives the next member 4 (second delivery) and 5-7 (first delivery again), never 0-3."""
    properties = {
        **PROPERTIES,
        "share.coordinator.state.topic.replication.factor": "2",
        "share.coordinator.state.topic.min.isr": "1",
    }
    broker = InProcessBroker(tmp_path, nodes=2, properties=properties, clock=MockClock())
    try:
        broker.controller.create_topic("t", 1, replication_factor=2)
        _produce(broker, "t", 8)
        old = broker.leader("t", 0)
        _wait_for_high_watermark(old, 8)
        assert _acquire(broker, "t", "m1") == [AcquiredRecords(0, 7, 1)]
        old.share_acknowledge(
            "g", "m1", EARLIEST_CONFIG, [_ack(0, 3, AcknowledgeType.ACCEPT), _ack(4, 4, AcknowledgeType.RELEASE)]
        )
        old_epoch = old.replica.leader_epoch
        broker.lose_node(broker.controller.partition_state("t", 0).leader)
        new = broker.leader("t", 0)
        assert new is not old and new.replica.leader_epoch > old_epoch
        _wait_for_high_watermark(new, 8)
        assert _acquire(broker, "t", "m2") == [AcquiredRecords(4, 4, 2), AcquiredRecords(5, 7, 1)]
        key = SharePartitionKey("g", broker.controller.describe_topic("t").topic_id, 0)
        with pytest.raises(FencedLeaderEpochError):
            broker.share_state_store.write_state(key, ShareGroupState(0, 8, ()), old_epoch)
    finally:
        broker.close()


def _wait_for_isr(broker: InProcessBroker, topic: str, size: int) -> None:
    deadline = time.monotonic() + 15
    while len(broker.controller.partition_state(topic, 0).isr) < size and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(broker.controller.partition_state(topic, 0).isr) == size


# Seconds: a restarted follower rejoins the ISR before the preferred election.
@pytest.mark.slow
def test_a_replica_leading_again_reads_what_the_leader_between_wrote(tmp_path: Path) -> None:
    """Leadership leaves a replica whose process keeps running and comes back to it: the share-partition it held
    in the first epoch is stale (the leader between accepted more), so it is read again, not served from memory."""
    properties = {
        **PROPERTIES,
        "share.coordinator.state.topic.replication.factor": "2",
        "share.coordinator.state.topic.min.isr": "1",
        "replica.fetch.wait.max.ms": "50",
    }
    broker = InProcessBroker(tmp_path, nodes=2, properties=properties, clock=MockClock())
    try:
        broker.controller.create_topic("t", 1, replication_factor=2)
        preferred = broker.controller.partition_state("t", 0).leader
        _produce(broker, "t", 8)
        _wait_for_high_watermark(broker.leader("t", 0), 8)
        broker.lose_node(preferred)
        first = broker.leader("t", 0)
        assert _acquire(broker, "t", "m1") == [AcquiredRecords(0, 7, 1)]
        first.share_acknowledge("g", "m1", EARLIEST_CONFIG, [_ack(0, 1, AcknowledgeType.ACCEPT)])
        broker.restart_node(preferred)
        _wait_for_isr(broker, "t", 2)
        broker.controller.elect_leaders(ElectionType.PREFERRED, [("t", 0)])
        between = broker.leader("t", 0)
        assert between is not first
        _wait_for_high_watermark(between, 8)
        assert _acquire(broker, "t", "m2") == [AcquiredRecords(2, 7, 1)]
        between.share_acknowledge("g", "m2", EARLIEST_CONFIG, [_ack(2, 5, AcknowledgeType.ACCEPT)])
        broker.lose_node(preferred)
        assert broker.leader("t", 0) is first
        _wait_for_high_watermark(first, 8)
        assert _acquire(broker, "t", "m3") == [AcquiredRecords(6, 7, 1)]
    finally:
        broker.close()


def test_altered_and_deleted_offsets_are_durable(tmp_path: Path) -> None:
    """AlterShareGroupOffsets' start offset and DeleteShareGroupOffsets' drop are written like any change: a broker
    opened again describes the altered start (lag from there) and, once deleted, no share-partition of the group."""
    clock = MockClock()
    broker = _open(tmp_path, clock)
    try:
        broker.controller.create_topic("t", 1)
        _produce(broker, "t", 10)
        broker.leader("t", 0).alter_share_offset("g", 4)
        broker.leader("t", 0).alter_share_offset("h", 2)
        assert broker.leader("t", 0).delete_share_state("h") is True
    finally:
        broker.close()
    reopened = _open(tmp_path, clock)
    try:
        leader = reopened.leader("t", 0)
        offsets = leader.share_offsets("g")
        assert offsets is not None and (offsets.start_offset, offsets.lag) == (4, 6)
        assert leader.share_offsets("h") is None
        assert leader.delete_share_state("h") is False
        assert _acquire(reopened, "t", "m1") == [AcquiredRecords(4, 9, 1)]
    finally:
        reopened.close()
