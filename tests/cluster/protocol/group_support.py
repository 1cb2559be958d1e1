"""What the group handler tests share: a `GroupView` over the real `GroupMembership` state machine, in-process.

`MembershipGroupView` runs the membership logic the group coordinator actor runs, on a `MockClock`, and keeps
committed offsets in a dict (the actor's durable `__consumer_offsets` path is tested against the real broker).
A JoinGroup or SyncGroup that must wait polls, yielding to the event loop between polls, so two members' requests
run concurrently in one `asyncio.gather`. Also: `exchange`, which builds a request of a given version from plain
values, runs a handler on it and decodes the encoded answer, as a client would read it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from kio.index import load_request_schema, load_response_schema

from actors.core.groups.group_membership import (
    GroupDescription,
    GroupError,
    GroupMembership,
    GroupState,
    JoinResult,
    MembershipConfig,
    PendingJoin,
    SyncResult,
)
from cluster.protocol.framing import decode_response, encode_response
from cluster.protocol.group_view import TopicPartition
from cluster.protocol.messages import build
from storage.clock import MockClock
from tests.cluster.protocol.support import request


class MembershipGroupView:
    """A `GroupView` over `GroupMembership` and a dict of offsets (see the module docstring)."""

    def __init__(self, clock: MockClock | None = None, initial_rebalance_delay_ms: int = 0) -> None:
        self.clock = clock or MockClock()
        self.membership = GroupMembership(
            self.clock, MembershipConfig(group_initial_rebalance_delay_ms=initial_rebalance_delay_ms)
        )
        self.offsets: dict[tuple[str, str, int], int] = {}

    async def join_group(self, group: str, member_id: str, **request: Any) -> JoinResult:
        outcome = self.membership.join(group, member_id, **request)
        while isinstance(outcome, PendingJoin):
            await asyncio.sleep(0.001)
            outcome = self.membership.poll_join(group, outcome.member_id)
        return outcome

    async def sync_group(
        self,
        group: str,
        member_id: str,
        generation_id: int,
        assignments: Mapping[str, bytes],
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> SyncResult:
        outcome = self.membership.sync(group, member_id, generation_id, assignments, protocol_type, protocol_name)
        while outcome is None:
            await asyncio.sleep(0.001)
            outcome = self.membership.poll_sync(group, member_id, generation_id)
        return outcome

    async def heartbeat(self, group: str, member_id: str, generation_id: int) -> GroupError:
        return self.membership.heartbeat(group, member_id, generation_id)

    async def leave_group(self, group: str, member_ids: list[str]) -> dict[str, GroupError]:
        return self.membership.leave(group, member_ids)

    async def commit_offsets(
        self, group: str, member_id: str, generation_id: int, offsets: Mapping[TopicPartition, tuple[int, str]]
    ) -> GroupError:
        verdict = self.membership.check_commit(group, member_id, generation_id)
        if verdict == GroupError.NONE:
            self.offsets.update(
                {(group, topic, partition): offset for (topic, partition), (offset, _) in offsets.items()}
            )
        return verdict

    async def committed_offsets(
        self, group: str, partitions: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, int | None]:
        if partitions is None:
            return {
                (topic, partition): offset for (name, topic, partition), offset in self.offsets.items() if name == group
            }
        return {(topic, partition): self.offsets.get((group, topic, partition)) for topic, partition in partitions}

    async def list_groups(self) -> list[GroupDescription]:
        names = set(self.membership.group_ids()) | {group for group, _, _ in self.offsets}
        described = [await self.describe_group(name) for name in sorted(names)]
        return [group for group in described if group is not None]

    async def describe_group(self, group: str) -> GroupDescription | None:
        described = self.membership.describe(group)
        if described is None and any(name == group for name, _, _ in self.offsets):
            return GroupDescription(group, GroupState.EMPTY, "", "", 0, ())
        return described

    async def delete_group(self, group: str) -> GroupError:
        verdict = self.membership.delete(group)
        committed = [key for key in self.offsets if key[0] == group]
        if verdict == GroupError.NON_EMPTY_GROUP or (verdict == GroupError.GROUP_ID_NOT_FOUND and not committed):
            return verdict
        for key in committed:
            del self.offsets[key]
        return GroupError.NONE


async def exchange(handler: Any, api_key: int, version: int, values: Mapping[str, Any], client_id: str = "test") -> Any:
    """The decoded answer of `handler` to a request of `api_key`/`version` built from `values`."""
    body = build(load_request_schema(api_key, version), values)
    response = await handler(request(body, client_id=client_id))
    return decode_response(encode_response(1, response)[4:], load_response_schema(api_key, version))[1]
