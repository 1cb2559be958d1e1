"""OffsetDelete without sockets, on the in-process broker: what Kafka's classic group coordinator deletes (an
Empty group's offsets, an active consumer group's offsets of topics it does not subscribe to) and what it refuses
(subscribed topics, active groups of another protocol, unknown groups and topics, principals without DELETE on the
group or READ on the topic). The oracle is Kafka's rules (`GroupCoordinator.handleDeleteOffsets`, `KafkaApis`) and
the offsets left committed; `tests/cluster/protocol/test_differential.py` runs Kafka's own tool against both
brokers."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from actors.core.in_process_broker import InProcessBroker
from actors.core.security.acl_bindings import AclOperation
from cluster.protocol.handlers.groups import JOIN_GROUP_KEY, SYNC_GROUP_KEY, JoinGroupHandler, SyncGroupHandler
from cluster.protocol.handlers.offset_delete import OFFSET_DELETE_KEY, OffsetDeleteHandler
from cluster.protocol.views.group_view import GroupView
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from cluster.protocol.views.security_view import SecurityView
from tests.cluster.protocol.handlers.test_authorization import access_with, ask, on_group, on_topic
from tests.cluster.protocol.helpers import answer_async, commit_offsets, committed_offsets, run

Codes = tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]


@pytest.fixture
def groups(groups_each_way: GroupView) -> GroupView:
    """This module's tests run over both ways to the group coordinator (`groups_each_way`)."""
    return groups_each_way


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0 (the JoinGroup metadata of a consumer subscribed to `topics`)."""
    body = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        body += struct.pack(">h", len(topic)) + topic.encode()
    return body + struct.pack(">i", -1)  # no user data


def active_group(groups: GroupView, group: str, protocol_type: str, metadata: bytes) -> None:
    """A group with one member, Stable."""
    values = {
        "group_id": group,
        "session_timeout": 10_000,
        "rebalance_timeout": 10_000,
        "member_id": "",
        "protocol_type": protocol_type,
        "protocols": [{"name": "range", "metadata": metadata}],
    }
    member = run(answer_async(JoinGroupHandler(groups), JOIN_GROUP_KEY, 3, values)).member_id
    sync = {"group_id": group, "generation_id": 1, "member_id": member, "assignments": []}
    assert run(answer_async(SyncGroupHandler(groups), SYNC_GROUP_KEY, 2, sync)).error_code == ErrorCode.none


def delete(handler: OffsetDeleteHandler, group: str, partitions: dict[str, list[int]]) -> Codes:
    """The group's code and each partition's, in request order."""
    values: dict[str, Any] = {
        "group_id": group,
        "topics": [
            {"name": name, "partitions": [{"partition_index": p} for p in ps]} for name, ps in partitions.items()
        ],
    }
    answer = run(answer_async(handler, OFFSET_DELETE_KEY, 0, values))
    codes = {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions}
    return answer.error_code, codes


def topics(view: InProcessBrokerView, *names: str) -> None:
    for name in names:
        run(view.create_topic(name, 3))


def test_an_empty_group_loses_the_offsets_named(
    broker: InProcessBroker, view: InProcessBrokerView, groups: GroupView
) -> None:
    topics(view, "t", "u")
    commit_offsets(broker, {("g", "t", 0): 5, ("g", "t", 1): 6, ("g", "u", 0): 7, ("other", "t", 0): 8})
    answer = delete(OffsetDeleteHandler(view, groups), "g", {"t": [0, 1, 2]})
    # Partition 2 had no committed offset: no error, as Kafka answers.
    assert answer == (ErrorCode.none, {("t", 0): ErrorCode.none, ("t", 1): ErrorCode.none, ("t", 2): ErrorCode.none})
    assert committed_offsets(broker) == {("g", "u", 0): 7, ("other", "t", 0): 8}


def test_an_active_consumer_group_keeps_the_offsets_of_topics_it_subscribes_to(
    broker: InProcessBroker, view: InProcessBrokerView, groups: GroupView
) -> None:
    topics(view, "t", "u")
    active_group(groups, "g", "consumer", subscription("t"))
    commit_offsets(broker, {("g", "t", 0): 5, ("g", "u", 0): 7})
    answer = delete(OffsetDeleteHandler(view, groups), "g", {"t": [0], "u": [0]})
    assert answer == (ErrorCode.none, {("t", 0): ErrorCode.group_subscribed_to_topic, ("u", 0): ErrorCode.none})
    assert committed_offsets(broker) == {("g", "t", 0): 5}


def test_an_active_group_of_another_protocol_and_an_unknown_group_are_refused_whole(
    broker: InProcessBroker, view: InProcessBrokerView, groups: GroupView
) -> None:
    topics(view, "t")
    active_group(groups, "workers", "connect", b"connect-metadata")
    commit_offsets(broker, {("workers", "t", 0): 5})
    handler = OffsetDeleteHandler(view, groups)
    assert delete(handler, "workers", {"t": [0]}) == (ErrorCode.non_empty_group, {})
    assert delete(handler, "never-seen", {"t": [0]}) == (ErrorCode.group_id_not_found, {})
    assert committed_offsets(broker) == {("workers", "t", 0): 5}


def test_a_subscription_that_does_not_decode_holds_no_topic(
    broker: InProcessBroker, view: InProcessBrokerView, groups: GroupView
) -> None:
    """Kafka's coordinator knows no subscribed topic when a member's metadata does not decode: all are deletable."""
    topics(view, "t")
    active_group(groups, "g", "consumer", b"\x00")
    commit_offsets(broker, {("g", "t", 0): 5})
    assert delete(OffsetDeleteHandler(view, groups), "g", {"t": [0]}) == (ErrorCode.none, {("t", 0): ErrorCode.none})
    assert committed_offsets(broker) == {}


def test_unknown_topics_answer_per_partition_and_the_rest_is_deleted(
    broker: InProcessBroker, view: InProcessBrokerView, groups: GroupView
) -> None:
    topics(view, "t")
    commit_offsets(broker, {("g", "t", 0): 5})
    answer = delete(OffsetDeleteHandler(view, groups), "g", {"gone": [0], "t": [0]})
    assert answer == (ErrorCode.none, {("gone", 0): ErrorCode.unknown_topic_or_partition, ("t", 0): ErrorCode.none})
    assert committed_offsets(broker) == {}


def test_delete_on_the_group_and_read_on_each_topic_are_required(
    broker: InProcessBroker, view: InProcessBrokerView, groups: GroupView, security: SecurityView
) -> None:
    topics(view, "t", "private")
    commit_offsets(broker, {("mine", "t", 0): 1, ("mine", "private", 0): 2, ("theirs", "t", 0): 3})
    access = access_with(
        security,
        on_group("mine", AclOperation.DELETE),
        on_group("theirs", AclOperation.READ),
        on_topic("t", AclOperation.READ),
    )
    handler = OffsetDeleteHandler(view, groups, access)
    request = {"topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]}
    denied = ask(handler, OFFSET_DELETE_KEY, {"group_id": "theirs", **request})
    assert (denied.error_code, denied.topics) == (ErrorCode.group_authorization_failed, ())
    request["topics"].append({"name": "private", "partitions": [{"partition_index": 0}]})
    answer = ask(handler, OFFSET_DELETE_KEY, {"group_id": "mine", **request})
    assert answer.error_code == ErrorCode.none
    assert {(t.name, p.error_code) for t in answer.topics for p in t.partitions} == {
        ("t", ErrorCode.none),
        ("private", ErrorCode.topic_authorization_failed),
    }
    assert committed_offsets(broker) == {("mine", "private", 0): 2, ("theirs", "t", 0): 3}
