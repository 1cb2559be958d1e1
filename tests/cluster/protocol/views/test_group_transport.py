"""A `GroupView` over the real group coordinator actor (`RayGroupTransport`) on a one-node Ray broker: its calls go
over the coordinator's group channel (its node is the listener's) and answer as the actor's Ray calls do; when the
coordinator's process dies and Ray restarts it, the call that finds the channel broken fails as retriable, the
transport looks the coordinator up again, and the next calls reach the new process over its new channel with the
committed offsets intact."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import ray

from actors.calls import call, get_actor
from actors.core.groups.group_membership import GroupError, JoinResult
from actors.options import group_coordinator_name
from cluster.protocol.views.group_transport import RayGroupTransport
from cluster.protocol.views.group_view import GroupView
from storage.records.consumer_offsets import OffsetAndMetadata
from tests.cluster.protocol.views.test_transaction_transport import (
    DEADLINE_S,
    process_id,
    until_answered,
    wait_for_new_process,
)

pytestmark = pytest.mark.ray

TOPIC = "view-clicks"
GROUP = "view-readers"


async def lone_member(view: GroupView) -> JoinResult:
    """A member's JoinGroup and SyncGroup, each retried as a client retries it."""
    joined = await until_answered(
        lambda: view.join_group(
            GROUP,
            "",
            group_instance_id=None,
            client_id="reader",
            client_host="/127.0.0.1",
            session_timeout_ms=30_000,
            rebalance_timeout_ms=30_000,
            protocol_type="consumer",
            protocols=[("range", b"subscription")],
            require_known_member_id=False,
        )
    )
    assert joined.error == GroupError.NONE
    synced = await until_answered(
        lambda: view.sync_group(
            GROUP, joined.member_id, joined.generation_id, {joined.member_id: b"all"}, "consumer", "range"
        )
    )
    assert (synced.error, synced.assignment) == (GroupError.NONE, b"all")
    return joined


def test_calls_go_over_the_channel_and_survive_a_coordinator_restart(
    start_test_broker: Callable[..., tuple[Any, Any]],
) -> None:
    broker, _ = start_test_broker()
    call(broker.controller.create_topic.remote(TOPIC, 2))
    transport = RayGroupTransport()
    view = GroupView(transport)
    committed = {(TOPIC, 0): OffsetAndMetadata(11, 0, "first"), (TOPIC, 1): OffsetAndMetadata(4)}

    async def scenario() -> None:
        member = await lone_member(view)
        assert transport.channel_address is not None
        verdict = await until_answered(
            lambda: view.commit_offsets(GROUP, member.member_id, member.generation_id, committed, api_version=8)
        )
        assert verdict == GroupError.NONE
        over_channel = await view.committed_offsets(GROUP, list(committed))
        over_ray = call(get_actor(group_coordinator_name()).fetch_committed.remote(GROUP, list(committed)))
        assert over_channel == over_ray == committed
        assert await view.describe_group(GROUP) == call(
            get_actor(group_coordinator_name()).describe_group.remote(GROUP)
        )
        old_address = transport.channel_address

        old_pid = process_id(get_actor(group_coordinator_name()))
        ray.kill(get_actor(group_coordinator_name()), no_restart=False)
        await asyncio.to_thread(wait_for_new_process, group_coordinator_name(), old_pid)

        assert await until_answered(lambda: view.committed_offsets(GROUP, list(committed))) == committed
        assert transport.channel_address not in (None, old_address)
        await lone_member(view)

    asyncio.run(asyncio.wait_for(scenario(), DEADLINE_S * 4))
