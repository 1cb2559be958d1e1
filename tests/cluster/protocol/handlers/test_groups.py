"""JoinGroup, SyncGroup, Heartbeat and LeaveGroup over the real membership state machine, without sockets: two
members joining together (the leader sees both subscriptions, each gets the leader's assignment), a leave that
rebalances the other, Kafka's errors, and one member's whole lifecycle at every served version."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from cluster.protocol.handlers.groups import (
    HEARTBEAT_KEY,
    JOIN_GROUP_KEY,
    LEAVE_GROUP_KEY,
    SYNC_GROUP_KEY,
    HeartbeatHandler,
    JoinGroupHandler,
    LeaveGroupHandler,
    SyncGroupHandler,
)
from cluster.protocol.router import SERVED
from cluster.protocol.views.group_view import GroupView
from storage.clock import MockClock
from tests.cluster.protocol.helpers import answer_async, run, start_broker

GROUP = "billing"


@pytest.fixture
def groups(groups_each_way: GroupView) -> GroupView:
    """This module's tests run over both ways to the group coordinator (`groups_each_way`)."""
    return groups_each_way


def versions(key: int) -> range:
    return range(SERVED[key].min_version, SERVED[key].max_version + 1)


def join_values(member_id: str, metadata: bytes, session_timeout_ms: int = 10_000) -> dict[str, Any]:
    return {
        "group_id": GROUP,
        "session_timeout": session_timeout_ms,
        "rebalance_timeout": 30_000,
        "member_id": member_id,
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": metadata}],
        "reason": None,
    }


async def join(groups: GroupView, version: int, metadata: bytes, member_id: str = "") -> Any:
    """A client's join: with v4+, the MEMBER_ID_REQUIRED round trip first."""
    answer = await answer_async(JoinGroupHandler(groups), JOIN_GROUP_KEY, version, join_values(member_id, metadata))
    if answer.error_code == ErrorCode.member_id_required:
        assert version >= 4 and answer.member_id
        answer = await answer_async(
            JoinGroupHandler(groups), JOIN_GROUP_KEY, version, join_values(answer.member_id, metadata)
        )
    return answer


async def until_members(groups: GroupView, count: int, timeout_s: float = 60.0) -> None:
    """Waits (in real time) until the group has `count` members, a rebalance under way included."""
    deadline = time.monotonic() + timeout_s
    while True:
        described = await groups.describe_group(GROUP)
        if described is not None and len(described.members) >= count:
            return
        assert time.monotonic() < deadline, f"the group did not reach {count} members in {timeout_s} s: {described}"
        await asyncio.sleep(0.01)


async def sync(groups: GroupView, version: int, member_id: str, generation: int, plan: dict[str, bytes]) -> Any:
    values = {
        "group_id": GROUP,
        "generation_id": generation,
        "member_id": member_id,
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "assignments": [{"member_id": member, "assignment": data} for member, data in plan.items()],
    }
    return await answer_async(SyncGroupHandler(groups), SYNC_GROUP_KEY, version, values)


async def heartbeat(groups: GroupView, version: int, member_id: str, generation: int) -> ErrorCode:
    values = {"group_id": GROUP, "generation_id": generation, "member_id": member_id, "group_instance_id": None}
    return (await answer_async(HeartbeatHandler(groups), HEARTBEAT_KEY, version, values)).error_code


async def leave(groups: GroupView, version: int, member_id: str) -> Any:
    values = {
        "group_id": GROUP,
        "member_id": member_id,
        "members": [{"member_id": member_id, "group_instance_id": None, "reason": None}],
    }
    return await answer_async(LeaveGroupHandler(groups), LEAVE_GROUP_KEY, version, values)


def test_two_members_join_together_and_each_gets_the_leaders_assignment(tmp_path: Path) -> None:
    clock = MockClock()
    broker = start_broker(tmp_path, clock=clock, initial_rebalance_delay_ms=3000)
    groups = GroupView.in_process(broker)

    async def scenario() -> None:
        joining = asyncio.gather(join(groups, 9, b"sub-a"), join(groups, 5, b"sub-b"))
        # The initial rebalance delay counts on the mock clock from the first join: move it only once both members
        # joined, however long the threads took to get there on a loaded machine.
        await until_members(groups, 2)
        clock.sleep(3000)
        first, second = await joining
        assert first.error_code == second.error_code == ErrorCode.none
        assert first.generation_id == second.generation_id == 1
        assert first.leader == second.leader == first.member_id
        assert (first.protocol_type, first.protocol_name) == ("consumer", "range")
        assert sorted((m.member_id, m.metadata) for m in first.members) == sorted(
            [(first.member_id, b"sub-a"), (second.member_id, b"sub-b")]
        )
        assert second.members == ()
        plan = {first.member_id: b"partitions-0-1", second.member_id: b"partitions-2-3"}
        follower_sync, leader_sync = await asyncio.gather(
            sync(groups, 3, second.member_id, 1, {}), sync(groups, 5, first.member_id, 1, plan)
        )
        assert (leader_sync.error_code, leader_sync.assignment) == (ErrorCode.none, b"partitions-0-1")
        assert (follower_sync.error_code, follower_sync.assignment) == (ErrorCode.none, b"partitions-2-3")
        assert (leader_sync.protocol_type, leader_sync.protocol_name) == ("consumer", "range")

        left = await leave(groups, 5, first.member_id)
        assert left.error_code == ErrorCode.none
        assert [(m.member_id, m.error_code) for m in left.members] == [(first.member_id, ErrorCode.none)]
        assert await heartbeat(groups, 4, second.member_id, 1) == ErrorCode.rebalance_in_progress
        again = await join(groups, 9, b"sub-b", second.member_id)
        assert (again.generation_id, again.leader, len(again.members)) == (2, second.member_id, 1)

    try:
        run(scenario())
    finally:
        broker.close()


@pytest.mark.parametrize("version", versions(JOIN_GROUP_KEY))
def test_a_lone_member_joins_syncs_heartbeats_and_leaves_at_every_version(version: int, groups: GroupView) -> None:
    sync_version = min(version, SERVED[SYNC_GROUP_KEY].max_version)
    heartbeat_version = min(version, SERVED[HEARTBEAT_KEY].max_version)
    leave_version = min(version, SERVED[LEAVE_GROUP_KEY].max_version)

    async def scenario() -> None:
        joined = await join(groups, version, b"sub")
        assert (joined.error_code, joined.generation_id, joined.leader) == (ErrorCode.none, 1, joined.member_id)
        synced = await sync(groups, sync_version, joined.member_id, 1, {joined.member_id: b"everything"})
        assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"everything")
        assert await heartbeat(groups, heartbeat_version, joined.member_id, 1) == ErrorCode.none
        left = await leave(groups, leave_version, joined.member_id)
        assert left.error_code == ErrorCode.none
        assert await heartbeat(groups, heartbeat_version, joined.member_id, 1) == ErrorCode.unknown_member_id

    run(scenario())


def test_a_v4_join_without_a_member_id_is_answered_member_id_required(groups: GroupView) -> None:
    answer = run(answer_async(JoinGroupHandler(groups), JOIN_GROUP_KEY, 4, join_values("", b"sub")))
    assert (answer.error_code, answer.generation_id) == (ErrorCode.member_id_required, -1)
    assert answer.member_id.startswith("test-")


@pytest.mark.parametrize(("session_timeout_ms", "code"), [(5999, ErrorCode.invalid_session_timeout)])
def test_bad_joins_and_strangers_get_kafkas_codes(session_timeout_ms: int, code: ErrorCode, groups: GroupView) -> None:

    async def scenario() -> None:
        bad = await answer_async(
            JoinGroupHandler(groups), JOIN_GROUP_KEY, 7, join_values("", b"sub", session_timeout_ms)
        )
        assert (bad.error_code, bad.protocol_name) == (code, None)
        stranger = await answer_async(JoinGroupHandler(groups), JOIN_GROUP_KEY, 6, join_values("made-up", b"sub"))
        assert (stranger.error_code, stranger.protocol_name) == (ErrorCode.unknown_member_id, "")
        joined = await join(groups, 9, b"sub")
        assert await heartbeat(groups, 4, joined.member_id, 7) == ErrorCode.illegal_generation
        assert await heartbeat(groups, 4, "made-up", 1) == ErrorCode.unknown_member_id
        assert (await sync(groups, 5, joined.member_id, 2, {})).error_code == ErrorCode.illegal_generation
        assert (await leave(groups, 0, "made-up")).error_code == ErrorCode.unknown_member_id

    run(scenario())
