"""ShareGroupHeartbeat, ShareFetch and ShareAcknowledge handlers over the in-process broker on a mock clock: records
acquired with delivery counts, acknowledgements piggybacked and alone, the lock expiring, a final fetch releasing,
and wrong input answered with Kafka's codes and changing nothing (Kafka 4.2's rules as its `SharePartitionManager`,
`SharePartition` and `KafkaApis` apply them: session epochs, records not held, malformed batches, unknown members)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from actors.core.in_process_broker import InProcessBroker
from actors.core.shares.share_sessions import ShareSessions
from cluster.protocol.handlers.share_fetch import (
    SHARE_ACKNOWLEDGE_KEY,
    SHARE_FETCH_KEY,
    ShareAcknowledgeHandler,
    ShareFetchHandler,
)
from cluster.protocol.handlers.share_group_apis import (
    SHARE_GROUP_DESCRIBE_KEY,
    SHARE_GROUP_HEARTBEAT_KEY,
    ShareGroupDescribeHandler,
    ShareGroupHeartbeatHandler,
)
from cluster.protocol.views.group_view import GroupView
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from storage.clock import MockClock
from tests.cluster.protocol.helpers import answer, batch, records_of, run

ACCEPT, RELEASE, REJECT = 1, 2, 3
LOCK_MS = 30_000  # group.share.record.lock.duration.ms's default


class Member:
    """One share consumer speaking to the handlers: its session epoch follows the answers."""

    def __init__(self, shares: Shares, member_id: str) -> None:
        self.shares = shares
        self.member_id = member_id
        self.epoch = 0

    def heartbeat(self, epoch: int = 0) -> Any:
        values = {"group_id": "g", "member_id": self.member_id, "member_epoch": epoch, "subscribed_topic_names": ["t"]}
        return answer(self.shares.heartbeat, SHARE_GROUP_HEARTBEAT_KEY, 1, values)

    def fetch(self, acks: list[tuple[int, int, list[int]]] | None = None, epoch: int | None = None) -> Any:
        """A ShareFetch of partition 0 in the member's session (or in `epoch`, leaving the member's as it is)."""
        sent = self.epoch if epoch is None else epoch
        partition = {"partition_index": 0, "acknowledgement_batches": [_batch(*a) for a in acks or []]}
        values = {
            "group_id": "g",
            "member_id": self.member_id,
            "share_session_epoch": sent,
            "max_wait": 0,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "max_records": 500,
            "batch_size": 500,
            "topics": [{"topic_id": self.shares.topic_id, "partitions": [partition]}],
            "forgotten_topics_data": [],
        }
        if sent == -1 and not acks:
            values["topics"] = []  # a final fetch names no partition to fetch
        response = answer(self.shares.fetch, SHARE_FETCH_KEY, 2, values)
        if response.error_code == ErrorCode.none and epoch is None:
            self.epoch = self.epoch + 1 if sent >= 0 else 0
        return response

    def acknowledge(self, acks: list[tuple[int, int, list[int]]], epoch: int | None = None) -> Any:
        sent = self.epoch if epoch is None else epoch
        values = {
            "group_id": "g",
            "member_id": self.member_id,
            "share_session_epoch": sent,
            "topics": [
                {
                    "topic_id": self.shares.topic_id,
                    "partitions": [{"partition_index": 0, "acknowledgement_batches": [_batch(*a) for a in acks]}],
                }
            ],
        }
        response = answer(self.shares.acknowledge, SHARE_ACKNOWLEDGE_KEY, 2, values)
        if response.error_code == ErrorCode.none and epoch is None:
            self.epoch = self.epoch + 1 if sent >= 0 else 0
        return response


class Shares:
    """The share handlers of one listener over `view`, and the topic `t` (one partition) they serve."""

    def __init__(self, view: InProcessBrokerView, groups: GroupView) -> None:
        sessions = ShareSessions()
        self.view = view
        self.fetch = ShareFetchHandler(view, groups, sessions)
        self.acknowledge = ShareAcknowledgeHandler(view, groups, sessions)
        self.heartbeat = ShareGroupHeartbeatHandler(groups)
        self.describe = ShareGroupDescribeHandler(groups, view)
        self.topic_id: uuid.UUID = run(view.create_topic("t", 1)).topic_id

    def produce(self, count: int) -> None:
        run(self.view.append("t", 0, batch([(None, f"v{i}".encode(), 0) for i in range(count)])))


@pytest.fixture
def shares(view: InProcessBrokerView, groups_each_way: GroupView) -> Shares:
    """The handlers, reaching the group coordinator directly and through its group channel (as on Ray)."""
    return Shares(view, groups_each_way)


def _batch(first: int, last: int, types: list[int]) -> dict[str, Any]:
    return {"first_offset": first, "last_offset": last, "acknowledge_types": types}


def acquired(response: Any) -> list[tuple[int, int, int]]:
    return [
        (r.first_offset, r.last_offset, r.delivery_count)
        for topic in response.responses
        for partition in topic.partitions
        for r in partition.acquired_records
    ]


def partition_of(response: Any) -> Any:
    (topic,) = response.responses
    (partition,) = topic.partitions
    return partition


def test_records_are_acquired_acknowledged_and_released_with_delivery_counts(shares: Shares) -> None:
    member = Member(shares, "m1")
    joined = member.heartbeat()
    assert (joined.error_code, joined.member_epoch) == (ErrorCode.none, 1)
    assert [(t.topic_id, list(t.partitions)) for t in joined.assignment.topic_partitions] == [(shares.topic_id, [0])]
    opened = member.fetch()  # the share-partition starts at the high watermark (share.auto.offset.reset=latest)
    assert (opened.error_code, acquired(opened), opened.acquisition_lock_timeout.total_seconds()) == (
        ErrorCode.none,
        [],
        LOCK_MS / 1000,
    )
    assert partition_of(opened).partition_index == 0  # the opening answer names every partition of the session
    shares.produce(5)
    got = member.fetch()
    assert acquired(got) == [(0, 4, 1)]
    assert [value for _, _, value, _ in records_of(partition_of(got).records)] == [f"v{i}".encode() for i in range(5)]

    # ACCEPT 0-1 and RELEASE 2-4, piggybacked: 2-4 come back in the same answer, delivered a second time.
    again = member.fetch([(0, 1, [ACCEPT]), (2, 4, [RELEASE])])
    assert (partition_of(again).acknowledge_error_code, acquired(again)) == (0, [(2, 4, 2)])
    assert member.acknowledge([(2, 2, [REJECT]), (3, 4, [ACCEPT])]).responses[0].partitions[0].error_code == (
        ErrorCode.none
    )
    assert acquired(member.fetch()) == []  # all done: nothing more to deliver


def test_wrong_acknowledgements_answer_kafkas_codes_and_change_nothing(shares: Shares) -> None:
    first, second = Member(shares, "m1"), Member(shares, "m2")
    first.heartbeat()
    second.heartbeat()
    first.fetch()
    second.fetch()
    shares.produce(4)
    assert acquired(first.fetch()) == [(0, 3, 1)]

    def acknowledged(member: Member, acks: list[tuple[int, int, list[int]]]) -> ErrorCode:
        return member.acknowledge(acks).responses[0].partitions[0].error_code

    # Records another member holds, an unknown acknowledge type, overlapping batches (by more than the last offset of
    # the one before, or by it), offsets never fetched.
    assert acknowledged(second, [(0, 0, [ACCEPT])]) == ErrorCode.invalid_record_state
    assert acknowledged(first, [(0, 0, [7])]) == ErrorCode.invalid_request
    assert acknowledged(first, [(0, 1, [ACCEPT]), (0, 2, [ACCEPT])]) == ErrorCode.invalid_request
    assert acknowledged(first, [(0, 1, [ACCEPT]), (1, 2, [ACCEPT])]) == ErrorCode.invalid_record_state
    assert acknowledged(first, [(2, 9, [ACCEPT])]) == ErrorCode.invalid_request
    # All or nothing: 0 is fine but 5 was never acquired, so 0 stays acquired and can be accepted after.
    assert acknowledged(first, [(0, 0, [ACCEPT]), (5, 5, [ACCEPT])]) == ErrorCode.invalid_request
    assert acknowledged(first, [(1, 1, [ACCEPT])]) == ErrorCode.none
    assert acknowledged(first, [(1, 1, [REJECT])]) == ErrorCode.invalid_record_state  # already acknowledged
    assert acknowledged(first, [(0, 0, [ACCEPT]), (2, 3, [ACCEPT])]) == ErrorCode.none
    assert acknowledged(first, [(0, 0, [ACCEPT])]) == ErrorCode.none  # below the start offset now: done, skipped


def test_share_session_epochs_are_checked(shares: Shares) -> None:
    member = Member(shares, "m1")
    member.heartbeat()
    assert member.fetch(epoch=1).error_code == ErrorCode.share_session_not_found
    assert member.acknowledge([], epoch=-1).error_code == ErrorCode.share_session_not_found
    member.fetch()
    assert member.fetch(epoch=5).error_code == ErrorCode.invalid_share_session_epoch
    assert member.acknowledge([], epoch=0).error_code == ErrorCode.invalid_share_session_epoch
    assert member.fetch([(0, 0, [ACCEPT])], epoch=0).error_code == ErrorCode.invalid_request
    assert member.fetch().error_code == ErrorCode.none  # the refusals moved no epoch: 1 is still expected


def test_a_lock_expires_and_a_final_fetch_releases(broker: InProcessBroker, shares: Shares) -> None:
    clock = broker.clock
    assert isinstance(clock, MockClock)
    first, second = Member(shares, "m1"), Member(shares, "m2")
    first.heartbeat()
    second.heartbeat()
    first.fetch()
    second.fetch()
    shares.produce(3)
    assert acquired(first.fetch()) == [(0, 2, 1)]
    assert acquired(second.fetch()) == []
    clock.sleep(LOCK_MS)
    assert acquired(second.fetch()) == [(0, 2, 2)]  # the first member's lock expired
    assert partition_of(second.fetch([(0, 0, [ACCEPT])])).acknowledge_error_code == 0
    final = second.fetch(epoch=-1)
    assert (final.error_code, acquired(final)) == (ErrorCode.none, [])
    assert acquired(first.fetch()) == [(1, 2, 3)]  # released by the final fetch, delivered a third time


def test_heartbeats_of_unknown_members_and_describe(shares: Shares) -> None:
    member = Member(shares, "m1")
    assert member.heartbeat(epoch=1).error_code == ErrorCode.group_id_not_found
    member.heartbeat()
    assert Member(shares, "m9").heartbeat(epoch=1).error_code == ErrorCode.unknown_member_id
    values = {"group_ids": ["g", "nope"], "include_authorized_operations": False}
    group, unknown = answer(shares.describe, SHARE_GROUP_DESCRIBE_KEY, 1, values).groups
    assert (group.error_code, group.group_state, group.assignor_name, [m.member_id for m in group.members]) == (
        ErrorCode.none,
        "Stable",
        "simple",
        ["m1"],
    )
    assert group.members[0].assignment.topic_partitions[0].topic_name == "t"
    assert (unknown.error_code, unknown.error_message) == (ErrorCode.group_id_not_found, "Group nope not found.")
