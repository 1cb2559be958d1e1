"""The plain group coordinator without Ray, on the in-process broker: commits land on the group's
`__consumer_offsets` partition as Kafka's records, a coordinator made again over the same broker (a restart) and a
broker opened again over the same dirs both find the committed offsets, a deleted `__consumer_offsets` is created
again by the next call, Empty groups are deleted with tombstones, and a deleted topic's offsets go with it (groups
left Empty with no offsets die), and groups' own configs apply from their next heartbeat. The oracle is a dict of the
offsets committed, and Kafka's record format (`storage.records.consumer_offsets`) read back from the log."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.core.controller.group_config_store import GroupConfigVersion
from actors.core.controller.topic_metadata import CONSUMER_OFFSETS_TOPIC
from actors.core.coordinator_claims import COORDINATOR_PRODUCER_ID
from actors.core.groups.consumer_group_api import HeartbeatRequest
from actors.core.groups.group_coordinator import FENCING_KEY, GroupCoordinator
from actors.core.groups.group_membership import GroupError, GroupMembership, MembershipConfig, PendingJoin
from actors.core.in_process_broker import InProcessBroker
from actors.core.shares.share_group import ShareHeartbeatRequest
from actors.core.transactions.markers import TransactionMarker
from storage.clock import MockClock
from storage.errors import InvalidGroupIdError, InvalidRequestError
from storage.records.consumer_offsets import (
    OffsetAndMetadata,
    decode_offset_commit_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_offset_commit_key,
    partition_for_group,
)
from storage.records.layout import ControlRecordType
from storage.records.record import Record
from storage.records.record_batch import iter_batches

PARTITIONS = 3
PROPERTIES = {"offsets.topic.num.partitions": str(PARTITIONS)}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    running = InProcessBroker(tmp_path, properties=PROPERTIES, clock=MockClock())
    try:
        yield running
    finally:
        running.close()


def records_of(broker: InProcessBroker, partition: int) -> list[Record]:
    """The partition's data records but the coordinators' claims (the tombstone of `FENCING_KEY`, no group's)."""
    served = broker.internal_partition(CONSUMER_OFFSETS_TOPIC, partition)
    return [
        record
        for batch in iter_batches(served.read(0, 1 << 20))
        if not batch.is_control
        for record in batch.records()
        if record.key != FENCING_KEY
    ]


def restarted(broker: InProcessBroker) -> GroupCoordinator:
    return GroupCoordinator(
        PARTITIONS,
        clock=broker.clock,
        controller=broker.controller,
        find_partition=lambda partition: broker.internal_partition(CONSUMER_OFFSETS_TOPIC, partition),
        allocate_coordinator_epoch=broker.controller.allocate_coordinator_epoch,
    )


def join(coordinator: GroupCoordinator, group: str, session_timeout_ms: int = 10_000) -> str:
    """A member joins `group` alone (no initial delay); its member id."""
    joined = coordinator.join_group(
        group,
        "",
        group_instance_id=None,
        client_id="c",
        client_host="h",
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=session_timeout_ms,
        protocol_type="consumer",
        protocols=[("range", b"")],
        require_known_member_id=False,
    )
    assert not isinstance(joined, PendingJoin) and joined.error == GroupError.NONE
    return joined.member_id


def test_the_first_use_creates_the_offsets_topic_with_the_configured_partitions(broker: InProcessBroker) -> None:
    assert CONSUMER_OFFSETS_TOPIC not in broker.controller.list_topics(include_internal=True)
    assert broker.group_coordinator.ready() == PARTITIONS
    topic = broker.controller.describe_topic(CONSUMER_OFFSETS_TOPIC)
    assert len(topic.partitions) == PARTITIONS and topic.internal
    assert topic.config == {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)}


def test_a_commit_appends_kafka_records_to_the_groups_partition(broker: InProcessBroker) -> None:
    broker.group_coordinator.commit("readers", {("orders", 0): 7, ("orders", 1): 3})
    partition = partition_for_group("readers", PARTITIONS)
    records = records_of(broker, partition)
    assert {(r.key, decode_offset_commit_value(r.value)) for r in records if r.value is not None} == {
        (encode_offset_commit_key("readers", "orders", 0), OffsetAndMetadata(7)),
        (encode_offset_commit_key("readers", "orders", 1), OffsetAndMetadata(3)),
    }
    for other in set(range(PARTITIONS)) - {partition}:
        assert records_of(broker, other) == []
    assert broker.group_coordinator.fetch_committed("readers", [("orders", 0), ("orders", 2)]) == {
        ("orders", 0): OffsetAndMetadata(7),
        ("orders", 2): None,
    }


def test_a_members_commit_keeps_its_leader_epoch_and_metadata_across_a_restart_and_a_reopened_broker(
    tmp_path: Path,
) -> None:
    """A wire client's commit (Kafka Streams keeps its stream time in the metadata, KIP-320 clients the leader epoch
    of the last record read): the record on the group's partition carries both, the coordinator answers them, and so
    do a coordinator loading the log again and a broker opened again over the same dirs. A later commit of one
    partition replaces all three; a partition committed without them reads -1 and ""."""
    committed = {
        ("orders", 0): OffsetAndMetadata(7, 3, '{"streamTime":1700000000000}'),
        ("orders", 1): OffsetAndMetadata(2, 0, "é" * 10 + "\U0001f600"),
        ("orders", 2): OffsetAndMetadata(5),
    }
    first = InProcessBroker(tmp_path, properties=PROPERTIES, clock=MockClock())
    try:
        coordinator = first.group_coordinator
        assert coordinator.commit_member("streams", "", -1, committed, api_version=9) == GroupError.NONE
        partition = partition_for_group("streams", PARTITIONS)
        assert {
            decode_offset_commit_key(r.key): decode_offset_commit_value(r.value)
            for r in records_of(first, partition)
            if r.key is not None and r.value is not None
        } == {("streams", *tp): found for tp, found in committed.items()}
        assert coordinator.fetch_committed("streams", list(committed)) == committed
        moved = OffsetAndMetadata(9, 4, "later")
        assert coordinator.commit_member("streams", "", -1, {("orders", 0): moved}, api_version=9) == GroupError.NONE
        committed[("orders", 0)] = moved
        assert restarted(first).fetch_committed("streams", list(committed)) == committed
        assert restarted(first).group_offsets("streams") == committed
    finally:
        first.close()
    reopened = InProcessBroker(tmp_path, properties=PROPERTIES, clock=MockClock())
    try:
        assert reopened.group_coordinator.group_offsets("streams") == committed
    finally:
        reopened.close()


def test_a_restarted_coordinator_and_a_reopened_broker_find_the_committed_offsets(tmp_path: Path) -> None:
    committed: dict[tuple[str, int], int] = {}
    first = InProcessBroker(tmp_path, properties=PROPERTIES, clock=MockClock())
    try:
        for group, partition, offset in [("a", 0, 5), ("b", 1, 9), ("a", 0, 6), ("a", 2, 1)]:
            first.group_coordinator.commit(group, {("t", partition): offset})
            committed[(group, partition)] = offset
        again = restarted(first)
        assert again.group_offsets("a") == {
            ("t", p): OffsetAndMetadata(o) for (g, p), o in committed.items() if g == "a"
        }
    finally:
        first.close()
    reopened = InProcessBroker(tmp_path, properties=PROPERTIES, clock=MockClock())
    try:
        assert reopened.group_coordinator.group_offsets("b") == {("t", 1): OffsetAndMetadata(9)}
        assert reopened.group_coordinator.group_offsets("a") == {
            ("t", 0): OffsetAndMetadata(6),
            ("t", 2): OffsetAndMetadata(1),
        }
    finally:
        reopened.close()


def test_bad_commits_raise_typed_errors(broker: InProcessBroker) -> None:
    with pytest.raises(InvalidGroupIdError):
        broker.group_coordinator.commit("", {("t", 0): 1})
    with pytest.raises(InvalidRequestError):
        broker.group_coordinator.commit("g", {("t", 0): -1})
    with pytest.raises(InvalidRequestError):
        broker.group_coordinator.commit("g", {("t", "0"): 1})  # type: ignore[dict-item]


def test_a_call_after_the_offsets_topic_was_deleted_creates_it_again_without_the_old_offsets(
    broker: InProcessBroker,
) -> None:
    broker.group_coordinator.commit("g", {("t", 0): 4})
    broker.controller.delete_topic(CONSUMER_OFFSETS_TOPIC)
    # The commit finds its partition's replica closed, the topic gone: it is created again, empty.
    broker.group_coordinator.commit("g", {("t", 1): 8})
    assert len(broker.controller.describe_topic(CONSUMER_OFFSETS_TOPIC).partitions) == PARTITIONS
    assert broker.group_coordinator.group_offsets("g") == {("t", 1): OffsetAndMetadata(8)}


def test_deleting_an_empty_group_writes_tombstones_and_a_group_with_members_is_kept(tmp_path: Path) -> None:
    clock = MockClock()
    broker = InProcessBroker(tmp_path, properties=PROPERTIES, clock=clock, membership=MembershipConfig(0, 60_000, 0))
    try:
        coordinator = broker.group_coordinator
        coordinator.commit("idle", {("t", 0): 3})
        assert coordinator.delete_group("idle") == GroupError.NONE
        assert coordinator.group_offsets("idle") == {}
        tombstones = [r for r in records_of(broker, partition_for_group("idle", PARTITIONS)) if r.value is None]
        assert [r.key for r in tombstones] == [encode_offset_commit_key("idle", "t", 0)]
        assert coordinator.delete_group("idle") == GroupError.GROUP_ID_NOT_FOUND

        join(coordinator, "busy")
        coordinator.commit("busy", {("t", 0): 1})
        assert coordinator.delete_group("busy") == GroupError.NON_EMPTY_GROUP
        assert coordinator.reset_offsets("busy", {("t", 0): 0}) == GroupError.NON_EMPTY_GROUP
        assert coordinator.group_offsets("busy") == {("t", 0): OffsetAndMetadata(1)}
        assert [group.group_id for group in coordinator.list_groups()] == ["busy"]
    finally:
        broker.close()


@pytest.mark.parametrize("seed", range(4))
def test_deleting_a_topic_deletes_its_offsets_in_every_group_as_a_model_says(tmp_path: Path, seed: int) -> None:
    """Random commits of 5 groups on 3 topics, then each topic deleted in turn: every group's offsets, ListGroups
    (a group dies when it has neither members nor offsets; `active` keeps a member) and a coordinator that loads the
    log again agree with a dict after each deletion; a topic created again under the same name has no offsets."""
    rng = random.Random(seed)
    broker = InProcessBroker(
        tmp_path, properties=PROPERTIES, clock=MockClock(), membership=MembershipConfig(0, 60_000, 0)
    )
    try:
        coordinator = broker.group_coordinator
        topics = ["t0", "t1", "t2"]
        for topic in topics:
            broker.controller.create_topic(topic, 2)
        groups = ["active", "g1", "g2", "g3", "g4"]
        model: dict[tuple[str, str, int], int] = {}
        for _ in range(30):
            group, topic, partition = rng.choice(groups), rng.choice(topics), rng.randrange(2)
            model[(group, topic, partition)] = rng.randrange(1000)
            coordinator.commit(group, {(topic, partition): model[(group, topic, partition)]})
        member = join(coordinator, "active")
        # A group that joined, committed and left: Empty, known to the membership.
        coordinator.leave_group("g4", [(join(coordinator, "g4"), None)])
        for topic in rng.sample(topics, len(topics)):
            broker.controller.delete_topic(topic)
            model = {key: offset for key, offset in model.items() if key[1] != topic}
            for each in (coordinator, restarted(broker)):
                for group in groups:
                    expected = {(t, p): OffsetAndMetadata(o) for (g, t, p), o in model.items() if g == group}
                    assert each.group_offsets(group) == expected
            alive = sorted({group for group, _, _ in model} | {"active"})
            assert [group.group_id for group in coordinator.list_groups()] == alive
            assert coordinator.heartbeat("active", member, 1) == GroupError.NONE
            broker.controller.create_topic(topic, 2)
            assert restarted(broker).fetch_committed("g1", [(topic, 0), (topic, 1)]) == {
                (topic, 0): None,
                (topic, 1): None,
            }
        described = coordinator.describe_group("g1")
        assert described is None
    finally:
        broker.close()


def test_a_deleted_topics_offsets_and_its_dead_groups_leave_tombstones(broker: InProcessBroker) -> None:
    coordinator = broker.group_coordinator
    broker.controller.create_topic("gone", 2)
    broker.controller.create_topic("kept", 1)
    coordinator.commit("only-gone", {("gone", 0): 1, ("gone", 1): 2})
    coordinator.commit("both", {("gone", 1): 3, ("kept", 0): 4})
    broker.controller.delete_topic("gone")
    tombstones = {
        record.key
        for partition in range(PARTITIONS)
        for record in records_of(broker, partition)
        if record.value is None
    }
    assert tombstones == {
        encode_offset_commit_key("only-gone", "gone", 0),
        encode_offset_commit_key("only-gone", "gone", 1),
        encode_group_metadata_key("only-gone"),
        encode_offset_commit_key("both", "gone", 1),
    }
    assert [group.group_id for group in coordinator.list_groups()] == ["both"]


def test_the_membership_runs_on_the_injected_clock(tmp_path: Path) -> None:
    clock = MockClock()
    membership = GroupMembership(clock, MembershipConfig(group_initial_rebalance_delay_ms=0))
    broker = InProcessBroker(tmp_path, properties=PROPERTIES, clock=clock)
    try:
        coordinator = GroupCoordinator(
            PARTITIONS,
            clock=clock,
            controller=broker.controller,
            find_partition=lambda partition: broker.internal_partition(CONSUMER_OFFSETS_TOPIC, partition),
            allocate_coordinator_epoch=broker.controller.allocate_coordinator_epoch,
            membership=membership,
        )
        member = join(coordinator, "g", session_timeout_ms=6_000)
        assert coordinator.heartbeat("g", member, 1) == GroupError.NONE
        clock.sleep(6_001)
        # The session expired by the mock clock: the member is gone.
        assert coordinator.heartbeat("g", member, 1) == GroupError.UNKNOWN_MEMBER_ID
    finally:
        broker.close()


def test_transactional_offsets_are_pending_until_their_marker_also_after_a_restart(broker: InProcessBroker) -> None:
    """TxnOffsetCommit's offsets, with their leader epoch and metadata, are invisible until the COMMIT marker (and
    dropped by an ABORT), for a coordinator told of the marker and one loading the log alike."""
    coordinator = broker.group_coordinator
    partition = coordinator.partition_for("g")
    committed = OffsetAndMetadata(5, 2, "txn metadata")
    assert coordinator.commit_transactional("g", 700, 0, "", -1, {("t", 0): committed}) == GroupError.NONE
    assert coordinator.commit_transactional("h", 701, 0, "", -1, {("t", 0): OffsetAndMetadata(6)}) == GroupError.NONE
    assert coordinator.fetch_committed("g", [("t", 0)]) == {("t", 0): None}
    assert coordinator.unstable_offsets("g", [("t", 0), ("t", 1)]) == {("t", 0)}
    assert coordinator.unstable_offsets("g", None) == {("t", 0)} and coordinator.unstable_offsets("i", None) == set()
    # A restart replays the transactional batch as pending: no marker yet.
    again = restarted(broker)
    assert again.fetch_committed("g", [("t", 0)]) == {("t", 0): None}
    assert again.unstable_offsets("g", [("t", 0)]) == {("t", 0)}
    offsets_partition = broker.leader(CONSUMER_OFFSETS_TOPIC, partition)
    offsets_partition.append_transaction_marker(700, 0, 0, ControlRecordType.COMMIT)
    h_partition = coordinator.partition_for("h")
    broker.leader(CONSUMER_OFFSETS_TOPIC, h_partition).append_transaction_marker(701, 0, 0, ControlRecordType.ABORT)
    # The markers replayed by a coordinator loading the log: committed, dropped.
    loaded = restarted(broker)
    assert loaded.fetch_committed("g", [("t", 0)]) == {("t", 0): committed}
    assert loaded.fetch_committed("h", [("t", 0)]) == {("t", 0): None}
    assert loaded.unstable_offsets("g", [("t", 0)]) == set()
    # A live coordinator told of the markers does the same.
    coordinator.complete_transaction(partition, 700, commit=True)
    coordinator.complete_transaction(h_partition, 701, commit=False)
    assert coordinator.fetch_committed("g", [("t", 0)]) == {("t", 0): committed}
    assert coordinator.fetch_committed("h", [("t", 0)]) == {("t", 0): None}


def test_a_transactional_commit_of_a_member_is_checked_against_its_generation(tmp_path: Path) -> None:
    broker = InProcessBroker(
        tmp_path, properties=PROPERTIES, clock=MockClock(), membership=MembershipConfig(0, 60_000, 0)
    )
    try:
        check_transactional_commits(broker.group_coordinator)
    finally:
        broker.close()


def check_transactional_commits(coordinator: GroupCoordinator) -> None:
    offsets = {("t", 0): OffsetAndMetadata(1)}
    # Kafka's validateOffsetCommit for a transactional commit: without member information it is accepted; with
    # some, the member must be the group's and its generation current, whatever the group's state.
    assert coordinator.commit_transactional("g", 1, 0, "", -1, offsets) == GroupError.NONE
    assert coordinator.commit_transactional("g", 1, 0, "ghost", 3, offsets) == GroupError.UNKNOWN_MEMBER_ID
    member = join(coordinator, "g")
    assert coordinator.commit_transactional("g", 1, 0, "ghost", 1, offsets) == GroupError.UNKNOWN_MEMBER_ID
    assert coordinator.commit_transactional("g", 1, 0, member, 3, offsets) == GroupError.ILLEGAL_GENERATION
    # The group waits for its SyncGroup (CompletingRebalance): a plain commit is REBALANCE_IN_PROGRESS, not this one.
    assert coordinator.commit_member("g", member, 1, offsets, api_version=9) == GroupError.REBALANCE_IN_PROGRESS
    assert coordinator.commit_transactional("g", 1, 0, member, 1, offsets) == GroupError.NONE
    assert coordinator.commit_transactional("g", 1, 0, "", -1, offsets) == GroupError.NONE


def test_a_commit_is_answered_once_every_in_sync_replica_has_it_and_survives_its_leaders_loss(tmp_path: Path) -> None:
    """Kafka's group coordinator appends with acks=-1 (`offsets.commit.required.acks`): when `commit` returns, the
    follower of the group's partition holds the record too, so the new leader after the old one's loss has every
    commit that was answered."""
    properties = {**PROPERTIES, "offsets.topic.replication.factor": "2"}
    broker = InProcessBroker(tmp_path, nodes=2, properties=properties)
    try:
        coordinator = broker.group_coordinator
        partition = coordinator.partition_for("g")
        state = broker.controller.partition_state(CONSUMER_OFFSETS_TOPIC, partition)
        (follower_node,) = [node for node in state.replicas if node != state.leader]
        follower = broker.replica_on(follower_node, CONSUMER_OFFSETS_TOPIC, partition)
        for offset in range(1, 21):
            coordinator.commit("g", {("t", 0): offset})
            assert follower.log.log_end_offset == broker.leader(CONSUMER_OFFSETS_TOPIC, partition).log.log_end_offset
        broker.lose_node(state.leader)
        assert broker.controller.partition_state(CONSUMER_OFFSETS_TOPIC, partition).leader == follower_node
        assert restarted(broker).fetch_committed("g", [("t", 0)]) == {("t", 0): OffsetAndMetadata(20)}
    finally:
        broker.close()


def test_a_coordinator_left_running_beside_its_successor_writes_nothing_it_read_before_the_successor(
    broker: InProcessBroker,
) -> None:
    """Two coordinators over one `__consumer_offsets`: the successor claims the partition in a newer epoch, so the
    predecessor's next write is refused, and its call runs again on what it reads then. A group deleted through the
    predecessor loses the offsets the successor committed too (from the predecessor's stale cache alone, one would
    survive the deletion), and a third coordinator loading the log agrees."""
    predecessor = broker.group_coordinator
    predecessor.commit("g", {("t", 0): 5})
    successor = restarted(broker)
    assert successor.group_offsets("g") == {("t", 0): OffsetAndMetadata(5)}
    successor.commit("g", {("t", 1): 9})
    assert predecessor.delete_group("g") == GroupError.NONE
    assert restarted(broker).group_offsets("g") == {}
    # Each claim is a new epoch of the partition's coordinator producer, all above the first.
    partition = predecessor.partition_for("g")
    (claims,) = [
        producer
        for producer in broker.leader(CONSUMER_OFFSETS_TOPIC, partition).log.active_producers()
        if producer.producer_id == COORDINATOR_PRODUCER_ID
    ]
    assert claims.producer_epoch >= 3


def test_a_marker_written_on_the_offsets_partition_completes_the_offsets_and_one_not_written_does_not(
    broker: InProcessBroker,
) -> None:
    """`OffsetsCompletingMarkers` (the broker's `markers`, which the transaction coordinator and WriteTxnMarkers
    write): a COMMIT marker written on a group's `__consumer_offsets` partition commits the producer's pending
    offsets of that group; a marker refused there (an older producer epoch) leaves them pending and is answered."""
    coordinator = broker.group_coordinator
    partition = coordinator.partition_for("g")
    offsets_partition = (CONSUMER_OFFSETS_TOPIC, partition)
    assert coordinator.commit_transactional("g", 700, 3, "", -1, {("t", 0): OffsetAndMetadata(5)}) == GroupError.NONE
    refused = broker.markers.write_markers([offsets_partition], TransactionMarker(700, 2, 0, ControlRecordType.COMMIT))
    assert list(refused) == [offsets_partition]
    assert coordinator.fetch_committed("g", [("t", 0)]) == {("t", 0): None}
    assert coordinator.unstable_offsets("g", None) == {("t", 0)}
    assert (
        broker.markers.write_markers([offsets_partition], TransactionMarker(700, 3, 0, ControlRecordType.COMMIT)) == {}
    )
    assert coordinator.fetch_committed("g", [("t", 0)]) == {("t", 0): OffsetAndMetadata(5)}
    assert coordinator.unstable_offsets("g", None) == set()


def test_a_groups_own_configs_apply_from_its_next_heartbeat_whether_set_before_or_after_the_coordinator_started(
    broker: InProcessBroker,
) -> None:
    broker.controller.create_topic("orders", 1, {})
    broker.controller.set_group_config("share", {"share.auto.offset.reset": "earliest"})
    coordinator = broker.group_coordinator
    assert coordinator.share_group_settings("share").auto_offset_reset == "earliest"
    assert coordinator.share_group_settings("other").auto_offset_reset == "latest"
    share_join = ShareHeartbeatRequest("share", "m1", 0, subscribed_topic_names=("orders",))
    result = coordinator.share_group_heartbeat(share_join).result
    assert result is not None and result.heartbeat_interval_ms == 5000
    broker.controller.set_group_config(
        "share", {"share.heartbeat.interval.ms": "6000", "share.session.timeout.ms": "50000"}
    )
    beat = coordinator.share_group_heartbeat(ShareHeartbeatRequest("share", "m1", result.member_epoch)).result
    assert beat is not None and beat.heartbeat_interval_ms == 6000
    assert coordinator.share_group_settings("share").auto_offset_reset == "latest"
    broker.controller.set_group_config("consumer", {"consumer.heartbeat.interval.ms": "7000"})
    joined = coordinator.consumer_group_heartbeat(
        HeartbeatRequest("consumer", "c1", 0, rebalance_timeout_ms=30_000, subscribed_topic_names=("orders",), owned={})
    )
    assert joined.error == GroupError.NONE and joined.heartbeat_interval_ms == 7000
    # An older version than the one held, arriving late, is ignored.
    held = broker.controller.group_configs()["consumer"]
    coordinator.update_group_config("consumer", GroupConfigVersion(held.version - 1, {}))
    assert coordinator.group_config("consumer") == {"consumer.heartbeat.interval.ms": "7000"}
