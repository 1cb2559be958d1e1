"""DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets without sockets, on the in-process
broker, over both ways to the group coordinator: offsets set, described and dropped at the partitions' leaders, an
unknown group made by Alter, and the principals refused as Kafka's `KafkaApis` refuses them (DESCRIBE on the group and
topic to describe, READ on both to alter, DELETE on the group and READ on the topic to delete). The answers to the
same requests from Apache Kafka 4.2 are compared in `tests/cluster/protocol/test_share_group_offsets.py`."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from actors.core.in_process_broker import InProcessBroker
from actors.core.security.acl_bindings import AclOperation
from actors.core.shares.share_group import ShareGroupState
from cluster.protocol.handlers.share_group_offsets import (
    ALTER_SHARE_GROUP_OFFSETS_KEY,
    DELETE_SHARE_GROUP_OFFSETS_KEY,
    DESCRIBE_SHARE_GROUP_OFFSETS_KEY,
    AlterShareGroupOffsetsHandler,
    DeleteShareGroupOffsetsHandler,
    DescribeShareGroupOffsetsHandler,
)
from cluster.protocol.security.access import AccessControl
from cluster.protocol.views.group_view import GroupView
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from cluster.protocol.views.security_view import SecurityView
from tests.cluster.protocol.handlers.test_authorization import access_with, ask, on_group, on_topic
from tests.cluster.protocol.helpers import commit_offsets, run


@pytest.fixture
def groups(groups_each_way: GroupView) -> GroupView:
    """This module's tests run over both ways to the group coordinator (`groups_each_way`)."""
    return groups_each_way


class Admin:
    """The three handlers under one access control, asked as alice."""

    def __init__(self, view: InProcessBrokerView, groups: GroupView, access: AccessControl | None = None) -> None:
        self.describe_handler = DescribeShareGroupOffsetsHandler(view, access)
        self.alter_handler = AlterShareGroupOffsetsHandler(view, groups, access)
        self.delete_handler = DeleteShareGroupOffsetsHandler(view, groups, access)

    def describe(self, group: str, topics: dict[str, list[int]] | None) -> list[tuple[Any, ...]]:
        asked = None if topics is None else [{"topic_name": n, "partitions": p} for n, p in topics.items()]
        values = {"groups": [{"group_id": group, "topics": asked}]}
        (described,) = ask(self.describe_handler, DESCRIBE_SHARE_GROUP_OFFSETS_KEY, values).groups
        if described.error_code != ErrorCode.none:
            return [(described.error_code,)]
        return [
            (t.topic_name, p.partition_index, p.start_offset, p.lag, p.error_code)
            for t in described.topics
            for p in t.partitions
        ]

    def alter(self, group: str, offsets: dict[str, list[tuple[int, int]]]) -> Any:
        topics = [
            {"topic_name": n, "partitions": [{"partition_index": p, "start_offset": o} for p, o in parts]}
            for n, parts in offsets.items()
        ]
        answer = ask(self.alter_handler, ALTER_SHARE_GROUP_OFFSETS_KEY, {"group_id": group, "topics": topics})
        rows = [(t.topic_name, p.partition_index, p.error_code) for t in answer.responses for p in t.partitions]
        return answer.error_code, rows

    def delete(self, group: str, names: list[str]) -> Any:
        values = {"group_id": group, "topics": [{"topic_name": n} for n in names]}
        answer = ask(self.delete_handler, DELETE_SHARE_GROUP_OFFSETS_KEY, values)
        return answer.error_code, [(t.topic_name, t.error_code) for t in answer.responses]


def test_offsets_altered_are_described_and_deleted(view: InProcessBrokerView, groups: GroupView) -> None:
    run(view.create_topic("t", 2))
    admin = Admin(view, groups)
    assert admin.alter("g", {"t": [(0, 5), (1, 0), (2, 0)]}) == (
        ErrorCode.none,
        [("t", 0, ErrorCode.none), ("t", 1, ErrorCode.none), ("t", 2, ErrorCode.unknown_topic_or_partition)],
    )
    # Alter made the group, Empty.
    described = run(groups.describe_share_group("g"))
    assert described is not None and described.state == ShareGroupState.EMPTY
    none = ErrorCode.none
    # An empty log: the lag is 0 - 5 at partition 0, as Kafka's formula gives it.
    assert admin.describe("g", None) == [("t", 0, 5, -5, none), ("t", 1, 0, 0, none)]
    assert admin.describe("g", {"t": [1, 7]}) == [("t", 1, 0, 0, none), ("t", 7, -1, -1, none)]
    assert admin.delete("g", ["t", "t"]) == (
        ErrorCode.none,
        [("t", ErrorCode.none), ("t", ErrorCode.unknown_topic_or_partition)],
    )
    assert admin.describe("g", None) == []


def test_describing_needs_describe_on_the_group_and_each_topic(
    view: InProcessBrokerView, groups: GroupView, security: SecurityView
) -> None:
    for name in ("t", "private"):
        run(view.create_topic(name, 1))
        run(view.alter_share_offset(name, 0, "mine", 3))
    access = access_with(
        security,
        on_group("mine", AclOperation.DESCRIBE),
        on_group("theirs", AclOperation.DESCRIBE_CONFIGS),
        on_topic("t", AclOperation.DESCRIBE),
    )
    admin = Admin(view, groups, access)
    assert admin.describe("theirs", None) == [(ErrorCode.group_authorization_failed,)]
    # The "every topic" form leaves the topic out; asked by name, it is refused.
    assert admin.describe("mine", None) == [("t", 0, 3, -3, ErrorCode.none)]
    assert admin.describe("mine", {"private": [0], "t": [0]}) == [
        ("t", 0, 3, -3, ErrorCode.none),
        ("private", 0, -1, -1, ErrorCode.topic_authorization_failed),
    ]


def test_altering_needs_read_and_deleting_delete_on_the_group_and_read_on_each_topic(
    view: InProcessBrokerView, groups: GroupView, security: SecurityView
) -> None:
    for name in ("t", "private"):
        run(view.create_topic(name, 1))
        run(view.alter_share_offset(name, 0, "mine", 3))
    access = access_with(
        security,
        on_group("mine", AclOperation.READ),
        on_group("mine", AclOperation.DESCRIBE),
        on_topic("t", AclOperation.READ),
        on_topic("t", AclOperation.DESCRIBE),
    )
    admin = Admin(view, groups, access)
    offsets = {"t": [(0, 1)], "private": [(0, 1)]}
    assert admin.alter("mine", offsets) == (
        ErrorCode.none,
        [("private", 0, ErrorCode.topic_authorization_failed), ("t", 0, ErrorCode.none)],
    )
    assert run(view.share_offsets("private", 0, "mine")).start_offset == 3
    assert admin.delete("mine", ["t"]) == (ErrorCode.group_authorization_failed, [])
    assert admin.describe("mine", None) == [("t", 0, 1, -1, ErrorCode.none)]
    access = access_with(
        security,
        on_group("mine", AclOperation.DELETE),
        on_group("mine", AclOperation.DESCRIBE),
        on_topic("t", AclOperation.READ),
    )
    admin = Admin(view, groups, access)
    assert admin.alter("mine", offsets) == (ErrorCode.group_authorization_failed, [])
    assert admin.delete("mine", ["t", "private"]) == (
        ErrorCode.none,
        [("t", ErrorCode.none), ("private", ErrorCode.topic_authorization_failed)],
    )
    assert run(view.share_offsets("t", 0, "mine")) is None
    assert run(view.share_offsets("private", 0, "mine")) is not None


def test_a_group_with_committed_offsets_is_not_a_share_group(
    broker: InProcessBroker, view: InProcessBrokerView, groups: GroupView
) -> None:
    """Kafka keeps a group whose consumers only commit as an Empty classic group: Alter and Delete answer
    GROUP_ID_NOT_FOUND ("Group g is not a share group.") and make no share group of it."""
    run(view.create_topic("t", 1))
    commit_offsets(broker, {("committed", "t", 0): 4})
    admin = Admin(view, groups)
    assert admin.alter("committed", {"t": [(0, 1)]}) == (ErrorCode.group_id_not_found, [])
    assert admin.delete("committed", ["t"]) == (ErrorCode.group_id_not_found, [])
    assert run(groups.describe_share_group("committed")) is None
    assert run(view.share_offsets("t", 0, "committed")) is None
