"""OffsetCommit and OffsetFetch without sockets: commits read back at every served version, per-partition errors
(unknown partition, oversized metadata, negative offset), member commits checked against the generation (and
generation -1 refused in a group with members), and OffsetFetch of every committed offset (null topics) and of
several groups (v8+)."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from cluster.protocol.handlers.group_offsets import (
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
from tests.cluster.protocol.helpers import answer_async, run

GROUP = "ledger"
TOPIC = "payments"


def versions(key: int) -> range:
    return range(SERVED[key].min_version, SERVED[key].max_version + 1)


def commit(
    view: InProcessBrokerView,
    groups: GroupView,
    version: int,
    offsets: dict[tuple[str, int], tuple[int, str]],
    member_id: str = "",
    generation: int = -1,
) -> dict[tuple[str, int], ErrorCode]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), (offset, metadata) in offsets.items():
        by_topic.setdefault(topic, []).append(
            {"partition_index": partition, "committed_offset": offset, "committed_metadata": metadata}
        )
    values = {
        "group_id": GROUP,
        "generation_id_or_member_epoch": generation,
        "member_id": member_id,
        "group_instance_id": None,
        "retention_time": -1,
        "topics": [{"name": topic, "partitions": partitions} for topic, partitions in by_topic.items()],
    }
    answer = run(answer_async(OffsetCommitHandler(view, groups), OFFSET_COMMIT_KEY, version, values))
    return {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions}


def fetch(groups: GroupView, version: int, partitions: list[int] | None, group: str = GROUP) -> Any:
    topics = None if partitions is None else [{"name": TOPIC, "partition_indexes": partitions}]
    values = {
        "group_id": group,
        "topics": topics,
        "groups": [{"group_id": group, "member_id": None, "member_epoch": -1, "topics": topics}],
        "require_stable": True,
    }
    answer = run(answer_async(OffsetFetchHandler(groups), OFFSET_FETCH_KEY, version, values))
    return answer.groups[0] if version >= 8 else answer


def offsets_of(answer: Any) -> dict[tuple[str, int], tuple[int, ErrorCode]]:
    return {
        (t.name, p.partition_index): (p.committed_offset, p.error_code) for t in answer.topics for p in t.partitions
    }


@pytest.mark.parametrize("version", versions(OFFSET_COMMIT_KEY))
def test_commits_read_back_at_every_version(view: InProcessBrokerView, version: int, groups: GroupView) -> None:
    run(view.create_topic(TOPIC, 3))
    assert commit(view, groups, version, {(TOPIC, 0): (42, "m"), (TOPIC, 2): (7, "")}) == {
        (TOPIC, 0): ErrorCode.none,
        (TOPIC, 2): ErrorCode.none,
    }
    for fetch_version in versions(OFFSET_FETCH_KEY):
        answer = fetch(groups, fetch_version, [0, 1, 2])
        # v1 has no group-level error code.
        assert getattr(answer, "error_code", ErrorCode.none) == ErrorCode.none
        assert offsets_of(answer) == {
            (TOPIC, 0): (42, ErrorCode.none),
            (TOPIC, 1): (-1, ErrorCode.none),
            (TOPIC, 2): (7, ErrorCode.none),
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
    assert offsets_of(fetch(groups, 9, [0])) == {(TOPIC, 0): (-1, ErrorCode.none)}


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
    assert offsets_of(fetch(groups, 8, [0])) == {(TOPIC, 0): (-1, ErrorCode.none)}
    assert commit(view, groups, 8, one, member, 1) == {(TOPIC, 0): ErrorCode.none}
    assert offsets_of(fetch(groups, 8, [0])) == {(TOPIC, 0): (1, ErrorCode.none)}


@pytest.mark.parametrize("version", [v for v in versions(OFFSET_FETCH_KEY) if v >= 2])
def test_a_fetch_without_topics_answers_every_committed_offset_of_the_group(
    view: InProcessBrokerView, version: int, groups: GroupView
) -> None:
    run(view.create_topic(TOPIC, 2))
    run(view.create_topic("other", 1))
    commit(view, groups, 9, {(TOPIC, 1): (11, ""), ("other", 0): (3, "")})
    assert offsets_of(fetch(groups, version, None)) == {
        (TOPIC, 1): (11, ErrorCode.none),
        ("other", 0): (3, ErrorCode.none),
    }
    assert offsets_of(fetch(groups, version, None, group="someone-else")) == {}
    assert fetch(groups, version, None, group="").error_code == ErrorCode.invalid_group_id
