"""OffsetCommit and OffsetFetch without sockets: commits read back at every served version with their metadata (and
their leader epoch, sent from OffsetCommit v6 and answered from OffsetFetch v5), per-partition errors (unknown
partition, oversized metadata measured in UTF-16 code units as Kafka's, negative offset), member commits checked
against the generation (and generation -1 refused in a group with members), a refused member's commit answered with
the group's error on every partition, oversized metadata included, as Kafka 4.2 answers it, and OffsetFetch of every
committed offset (null topics) and of several groups (v8+). v10 names topics by id: an unknown, zero or deleted
topic's id answers UNKNOWN_TOPIC_ID, the answers come in the order Kafka 4.2 gives them (recorded over the wire:
refused commits first, refused fetches last), and a fetch of every offset answers topic ids, leaving out a topic
without one."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from actors.core.in_process_broker import InProcessBroker
from cluster.protocol.handlers.group_offsets import (
    FIRST_TOPIC_ID_VERSION,
    OFFSET_COMMIT_KEY,
    OFFSET_FETCH_KEY,
    OFFSET_METADATA_MAX_BYTES,
    OffsetCommitHandler,
    OffsetFetchHandler,
)
from cluster.protocol.handlers.groups import JOIN_GROUP_KEY, SYNC_GROUP_KEY, JoinGroupHandler, SyncGroupHandler
from cluster.protocol.router import SERVED
from cluster.protocol.views.group_view import GroupView
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from tests.cluster.protocol.helpers import answer_async, commit_offsets, run

GROUP = "ledger"
TOPIC = "payments"


@pytest.fixture
def groups(groups_each_way: GroupView) -> GroupView:
    """This module's tests run over both ways to the group coordinator (`groups_each_way`)."""
    return groups_each_way


def versions(key: int) -> range:
    return range(SERVED[key].min_version, SERVED[key].max_version + 1)


def named(view: InProcessBrokerView, version: int, topic: str) -> dict[str, Any]:
    """How a request of `version` names `topic`: by topic id from v10 (a new random id for a topic that does not
    exist), by name before."""
    if version < FIRST_TOPIC_ID_VERSION:
        return {"name": topic}
    ids = {name: topic_id for topic_id, name in run(view.topic_names(refresh=True)).items()}
    return {"topic_id": ids.get(topic, uuid.uuid4())}


def commit(
    view: InProcessBrokerView,
    groups: GroupView,
    version: int,
    offsets: dict[tuple[str, int], tuple[int, str] | tuple[int, str, int]],
    member_id: str = "",
    generation: int = -1,
) -> dict[tuple[str, int], ErrorCode]:
    """An OffsetCommit of (offset, metadata[, leader epoch, -1 if left out]) per partition; each one's code."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), (offset, metadata, *epoch) in offsets.items():
        by_topic.setdefault(topic, []).append(
            {
                "partition_index": partition,
                "committed_offset": offset,
                "committed_leader_epoch": epoch[0] if epoch else -1,
                "committed_metadata": metadata,
            }
        )
    values = {
        "group_id": GROUP,
        "generation_id_or_member_epoch": generation,
        "member_id": member_id,
        "group_instance_id": None,
        "retention_time": -1,
        "topics": [{**named(view, version, topic), "partitions": partitions} for topic, partitions in by_topic.items()],
    }
    answer = run(answer_async(OffsetCommitHandler(view, groups), OFFSET_COMMIT_KEY, version, values))
    return {(name_of(view, t), p.partition_index): p.error_code for t in answer.topics for p in t.partitions}


def fetch(
    view: InProcessBrokerView, groups: GroupView, version: int, partitions: list[int] | None, group: str = GROUP
) -> Any:
    topics = None if partitions is None else [{**named(view, version, TOPIC), "partition_indexes": partitions}]
    values = {
        "group_id": group,
        "topics": topics,
        "groups": [{"group_id": group, "member_id": None, "member_epoch": -1, "topics": topics}],
        "require_stable": True,
    }
    answer = run(answer_async(OffsetFetchHandler(view, groups), OFFSET_FETCH_KEY, version, values))
    return answer.groups[0] if version >= 8 else answer


def name_of(view: InProcessBrokerView, topic: Any) -> str:
    """The name of an answer's topic: its own before v10, its topic id's from v10."""
    if hasattr(topic, "name"):
        name: str = topic.name
        return name
    return run(view.topic_names(refresh=True))[topic.topic_id]


def offsets_of(view: InProcessBrokerView, answer: Any) -> dict[tuple[str, int], tuple[int, ErrorCode]]:
    return {
        (name_of(view, t), p.partition_index): (p.committed_offset, p.error_code)
        for t in answer.topics
        for p in t.partitions
    }


def commits_of(view: InProcessBrokerView, answer: Any) -> dict[tuple[str, int], tuple[int, int | None, str]]:
    """Each answered partition's (offset, leader epoch, metadata); the epoch None before OffsetFetch v5."""
    return {
        (name_of(view, t), p.partition_index): (
            p.committed_offset,
            getattr(p, "committed_leader_epoch", None),
            p.metadata,
        )
        for t in answer.topics
        for p in t.partitions
    }


@pytest.mark.parametrize("version", versions(OFFSET_COMMIT_KEY))
def test_commits_read_back_at_every_version(view: InProcessBrokerView, version: int, groups: GroupView) -> None:
    run(view.create_topic(TOPIC, 3))
    streams_time = '{"streamTime":1700000000000}'
    assert commit(view, groups, version, {(TOPIC, 0): (42, streams_time, 3), (TOPIC, 2): (7, "", 0)}) == {
        (TOPIC, 0): ErrorCode.none,
        (TOPIC, 2): ErrorCode.none,
    }
    # OffsetCommit carries the leader epoch from v6; an older commit keeps none (-1).
    sent = (lambda epoch: epoch) if version >= 6 else (lambda epoch: -1)
    for fetch_version in versions(OFFSET_FETCH_KEY):
        answer = fetch(view, groups, fetch_version, [0, 1, 2])
        # v1 has no group-level error code.
        assert getattr(answer, "error_code", ErrorCode.none) == ErrorCode.none
        assert offsets_of(view, answer) == {
            (TOPIC, 0): (42, ErrorCode.none),
            (TOPIC, 1): (-1, ErrorCode.none),
            (TOPIC, 2): (7, ErrorCode.none),
        }
        answered = (lambda epoch: epoch) if fetch_version >= 5 else (lambda epoch: None)
        assert commits_of(view, answer) == {
            (TOPIC, 0): (42, answered(sent(3)), streams_time),
            (TOPIC, 1): (-1, answered(-1), ""),
            (TOPIC, 2): (7, answered(sent(0)), ""),
        }


def test_bad_partitions_get_their_own_codes_and_the_rest_is_written(
    view: InProcessBrokerView, groups: GroupView
) -> None:
    run(view.create_topic(TOPIC, 1))
    codes = commit(
        view,
        groups,
        9,
        {
            (TOPIC, 0): (6, "x" * (OFFSET_METADATA_MAX_BYTES + 1)),
            (TOPIC, 1): (5, ""),
            ("no-such-topic", 0): (5, ""),
        },
    )
    assert codes == {
        (TOPIC, 0): ErrorCode.offset_metadata_too_large,
        (TOPIC, 1): ErrorCode.unknown_topic_or_partition,
        ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition,
    }
    assert commit(view, groups, 9, {(TOPIC, 0): (-5, "")}) == {(TOPIC, 0): ErrorCode.invalid_request}
    assert offsets_of(view, fetch(view, groups, 9, [0])) == {(TOPIC, 0): (-1, ErrorCode.none)}


def test_metadata_is_measured_in_utf16_code_units_as_kafka_measures_it(
    view: InProcessBrokerView, groups: GroupView
) -> None:
    """Kafka's `isMetadataInvalid` compares Java's `String.length()` with `offset.metadata.max.bytes`: 4096 "é"
    (8192 UTF-8 bytes) fit, 2049 characters outside the BMP (4098 UTF-16 code units, 8196 UTF-8 bytes) do not."""
    run(view.create_topic(TOPIC, 2))
    wide = "é" * OFFSET_METADATA_MAX_BYTES
    astral = "\U0001f600" * (OFFSET_METADATA_MAX_BYTES // 2 + 1)
    assert commit(view, groups, 9, {(TOPIC, 0): (1, wide, 2), (TOPIC, 1): (1, astral, 2)}) == {
        (TOPIC, 0): ErrorCode.none,
        (TOPIC, 1): ErrorCode.offset_metadata_too_large,
    }
    assert commits_of(view, fetch(view, groups, 9, [0, 1])) == {(TOPIC, 0): (1, 2, wide), (TOPIC, 1): (-1, -1, "")}


def test_a_members_commit_must_be_of_the_current_generation(view: InProcessBrokerView, groups: GroupView) -> None:
    run(view.create_topic(TOPIC, 1))
    values = {
        "group_id": GROUP,
        "session_timeout": 10_000,
        "rebalance_timeout": 10_000,
        "member_id": "",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}],
    }
    member = run(answer_async(JoinGroupHandler(groups), JOIN_GROUP_KEY, 3, values)).member_id
    one = {(TOPIC, 0): (1, "")}
    # Joined, not synced yet: the sync phase refuses commits.
    assert commit(view, groups, 8, one, member, 1) == {(TOPIC, 0): ErrorCode.rebalance_in_progress}
    sync = {"group_id": GROUP, "generation_id": 1, "member_id": member, "assignments": []}
    assert run(answer_async(SyncGroupHandler(groups), SYNC_GROUP_KEY, 3, sync)).error_code == ErrorCode.none
    assert commit(view, groups, 8, one, member, 2) == {(TOPIC, 0): ErrorCode.illegal_generation}
    assert commit(view, groups, 8, one, "stranger", 1) == {(TOPIC, 0): ErrorCode.unknown_member_id}
    # Generation -1 and no member id (a consumer that assigns its partitions, AlterConsumerGroupOffsets): only
    # into a group without members, as Kafka's.
    assert commit(view, groups, 8, one) == {(TOPIC, 0): ErrorCode.unknown_member_id}
    assert offsets_of(view, fetch(view, groups, 8, [0])) == {(TOPIC, 0): (-1, ErrorCode.none)}
    assert commit(view, groups, 8, one, member, 1) == {(TOPIC, 0): ErrorCode.none}
    assert offsets_of(view, fetch(view, groups, 8, [0])) == {(TOPIC, 0): (1, ErrorCode.none)}


def test_a_refused_members_commit_answers_the_groups_error_on_every_partition_even_oversized_metadata(
    view: InProcessBrokerView, groups: GroupView
) -> None:
    """Kafka 4.2's `OffsetMetadataManager.commitOffset` validates the group before any partition: a commit the group
    refuses answers its error on every partition, one whose metadata is too large too, and writes nothing; once
    the group takes it, the oversized partition alone answers OFFSET_METADATA_TOO_LARGE."""
    run(view.create_topic(TOPIC, 2))
    values = {
        "group_id": GROUP,
        "session_timeout": 10_000,
        "rebalance_timeout": 10_000,
        "member_id": "",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}],
    }
    member = run(answer_async(JoinGroupHandler(groups), JOIN_GROUP_KEY, 3, values)).member_id
    sync = {"group_id": GROUP, "generation_id": 1, "member_id": member, "assignments": []}
    assert run(answer_async(SyncGroupHandler(groups), SYNC_GROUP_KEY, 3, sync)).error_code == ErrorCode.none
    oversized = "x" * (OFFSET_METADATA_MAX_BYTES + 1)
    both = {(TOPIC, 0): (3, oversized, 1), (TOPIC, 1): (4, "fits", 1)}
    assert commit(view, groups, 9, both, "stranger", 1) == dict.fromkeys(both, ErrorCode.unknown_member_id)
    only_oversized = {(TOPIC, 0): (3, oversized, 1)}
    assert commit(view, groups, 9, only_oversized, member, 2) == {(TOPIC, 0): ErrorCode.illegal_generation}
    assert commits_of(view, fetch(view, groups, 9, [0, 1])) == {(TOPIC, 0): (-1, -1, ""), (TOPIC, 1): (-1, -1, "")}
    assert commit(view, groups, 9, both, member, 1) == {
        (TOPIC, 0): ErrorCode.offset_metadata_too_large,
        (TOPIC, 1): ErrorCode.none,
    }
    assert commits_of(view, fetch(view, groups, 9, [0, 1])) == {(TOPIC, 0): (-1, -1, ""), (TOPIC, 1): (4, 1, "fits")}


@pytest.mark.parametrize("version", [v for v in versions(OFFSET_FETCH_KEY) if v >= 2])
def test_a_fetch_without_topics_answers_every_committed_offset_of_the_group(
    view: InProcessBrokerView, version: int, groups: GroupView
) -> None:
    run(view.create_topic(TOPIC, 2))
    run(view.create_topic("other", 1))
    commit(view, groups, 9, {(TOPIC, 1): (11, ""), ("other", 0): (3, "")})
    assert offsets_of(view, fetch(view, groups, version, None)) == {
        (TOPIC, 1): (11, ErrorCode.none),
        ("other", 0): (3, ErrorCode.none),
    }
    assert offsets_of(view, fetch(view, groups, version, None, group="someone-else")) == {}
    assert fetch(view, groups, version, None, group="").error_code == ErrorCode.invalid_group_id


def commit_v10(view: InProcessBrokerView, groups: GroupView, topics: list[tuple[uuid.UUID | None, list[int]]]) -> Any:
    """The answer to an OffsetCommit v10 of offset 5 to each (topic id, partitions), in that order."""
    values = {
        "group_id": GROUP,
        "member_id": "",
        "topics": [
            {
                "topic_id": topic_id,
                "partitions": [
                    {"partition_index": p, "committed_offset": 5, "committed_metadata": ""} for p in partitions
                ],
            }
            for topic_id, partitions in topics
        ],
    }
    return run(answer_async(OffsetCommitHandler(view, groups), OFFSET_COMMIT_KEY, 10, values))


def fetch_v10(
    view: InProcessBrokerView, groups: GroupView, topics: list[tuple[uuid.UUID | None, list[int]]] | None
) -> Any:
    named = None if topics is None else [{"topic_id": t, "partition_indexes": p} for t, p in topics]
    values = {"groups": [{"group_id": GROUP, "member_id": None, "member_epoch": -1, "topics": named}]}
    return run(answer_async(OffsetFetchHandler(view, groups), OFFSET_FETCH_KEY, 10, values)).groups[0]


def committed_codes(answer: Any) -> list[tuple[uuid.UUID | None, list[tuple[int, ErrorCode]]]]:
    return [(t.topic_id, [(p.partition_index, p.error_code) for p in t.partitions]) for t in answer.topics]


def fetched_offsets(answer: Any) -> list[tuple[uuid.UUID | None, list[tuple[int, int, ErrorCode]]]]:
    return [
        (t.topic_id, [(p.partition_index, p.committed_offset, p.error_code) for p in t.partitions])
        for t in answer.topics
    ]


def test_v10_names_topics_by_id_and_answers_unknown_ids_unknown_topic_id_in_kafkas_order(
    view: InProcessBrokerView, groups: GroupView
) -> None:
    first = run(view.create_topic(TOPIC, 2)).topic_id
    second = run(view.create_topic("refunds", 1)).topic_id
    unknown = uuid.uuid4()
    # The zero id is kio's None. Refused partitions come first, then the coordinator's, merged into their topic.
    answer = commit_v10(view, groups, [(unknown, [0]), (first, [0, 5, 1]), (None, [0]), (second, [0])])
    assert committed_codes(answer) == [
        (unknown, [(0, ErrorCode.unknown_topic_id)]),
        (first, [(5, ErrorCode.unknown_topic_or_partition), (0, ErrorCode.none), (1, ErrorCode.none)]),
        (None, [(0, ErrorCode.unknown_topic_id)]),
        (second, [(0, ErrorCode.none)]),
    ]
    # One answer per topic id, even when the request names it twice.
    answer = commit_v10(view, groups, [(first, [0]), (unknown, [1]), (first, [1])])
    assert committed_codes(answer) == [
        (unknown, [(1, ErrorCode.unknown_topic_id)]),
        (first, [(0, ErrorCode.none), (1, ErrorCode.none)]),
    ]
    # Fetched: the known topics in the request's order, then the refused ones.
    answer = fetch_v10(view, groups, [(unknown, [0]), (first, [1, 0, 7]), (None, [3]), (second, [0])])
    assert answer.error_code == ErrorCode.none
    assert fetched_offsets(answer) == [
        (first, [(1, 5, ErrorCode.none), (0, 5, ErrorCode.none), (7, -1, ErrorCode.none)]),
        (second, [(0, 5, ErrorCode.none)]),
        (unknown, [(0, -1, ErrorCode.unknown_topic_id)]),
        (None, [(3, -1, ErrorCode.unknown_topic_id)]),
    ]


def test_v10_fetch_of_every_offset_answers_topic_ids_and_leaves_out_topics_without_one(
    view: InProcessBrokerView, broker: InProcessBroker, groups: GroupView
) -> None:
    topic_id = run(view.create_topic(TOPIC, 2)).topic_id
    # Offsets of a topic no topic id names (only a deleted topic's could remain, for a moment).
    commit_offsets(broker, {(GROUP, TOPIC, 1): 11, (GROUP, TOPIC, 0): 4, (GROUP, "nameless", 0): 3})
    assert fetched_offsets(fetch_v10(view, groups, None)) == [
        (topic_id, [(0, 4, ErrorCode.none), (1, 11, ErrorCode.none)])
    ]
    assert offsets_of(view, fetch(view, groups, 9, None)) == {
        (TOPIC, 0): (4, ErrorCode.none),
        (TOPIC, 1): (11, ErrorCode.none),
        ("nameless", 0): (3, ErrorCode.none),
    }


def test_a_deleted_topics_id_is_unknown_and_its_offsets_are_gone(view: InProcessBrokerView, groups: GroupView) -> None:
    topic_id = run(view.create_topic(TOPIC, 1)).topic_id
    assert committed_codes(commit_v10(view, groups, [(topic_id, [0])])) == [(topic_id, [(0, ErrorCode.none)])]
    run(view.delete_topic(TOPIC))
    assert committed_codes(commit_v10(view, groups, [(topic_id, [0])])) == [
        (topic_id, [(0, ErrorCode.unknown_topic_id)])
    ]
    assert fetched_offsets(fetch_v10(view, groups, [(topic_id, [0])])) == [
        (topic_id, [(0, -1, ErrorCode.unknown_topic_id)])
    ]
    assert fetched_offsets(fetch_v10(view, groups, None)) == []
    assert offsets_of(view, fetch(view, groups, 9, [0])) == {(TOPIC, 0): (-1, ErrorCode.none)}
