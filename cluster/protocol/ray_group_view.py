"""`GroupView` over the cluster's group coordinator actor.

The coordinator answers a JoinGroup or SyncGroup that must wait for other members as pending; this view then
awaits `await_join` / `await_sync` calls, each bounded by the actor (`MAX_WAIT_MS`), until the answer comes. The
membership state machine guarantees one comes: the rebalance timeout completes every join, and an expired
leader's session ends every sync. Awaiting holds no thread of the listener, and a connection that closes cancels
its wait with its task. The actor's handle is looked up once (on a worker thread: the lookup blocks) and
forgotten when a call finds the actor gone, so the next request reaches a restarted coordinator.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from actors.calls import answer, get_actor
from actors.core.groups.coordinator import MAX_WAIT_MS
from actors.core.groups.group_membership import GroupDescription, GroupError, JoinResult, PendingJoin, SyncResult
from actors.options import group_coordinator_name
from cluster.protocol.group_view import TopicPartition
from storage.errors import RaybrokerError


class RayGroupView:
    """The group coordinator of the Ray cluster this process is connected to (see the module docstring)."""

    def __init__(self) -> None:
        self._handle: Any = None

    async def join_group(
        self,
        group: str,
        member_id: str,
        *,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
    ) -> JoinResult:
        outcome = await self._call(
            "join_group",
            group,
            member_id,
            group_instance_id=group_instance_id,
            client_id=client_id,
            client_host=client_host,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            protocol_type=protocol_type,
            protocols=protocols,
            require_known_member_id=require_known_member_id,
        )
        while isinstance(outcome, PendingJoin):
            outcome = await self._call("await_join", group, outcome.member_id, MAX_WAIT_MS)
        result: JoinResult = outcome
        return result

    async def sync_group(
        self,
        group: str,
        member_id: str,
        generation_id: int,
        assignments: Mapping[str, bytes],
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> SyncResult:
        outcome = await self._call(
            "sync_group",
            group,
            member_id,
            generation_id,
            dict(assignments),
            protocol_type=protocol_type,
            protocol_name=protocol_name,
        )
        while outcome is None:
            outcome = await self._call("await_sync", group, member_id, generation_id, MAX_WAIT_MS)
        result: SyncResult = outcome
        return result

    async def heartbeat(self, group: str, member_id: str, generation_id: int) -> GroupError:
        verdict: GroupError = await self._call("heartbeat", group, member_id, generation_id)
        return verdict

    async def leave_group(self, group: str, member_ids: list[str]) -> dict[str, GroupError]:
        outcome: dict[str, GroupError] = await self._call("leave_group", group, member_ids)
        return outcome

    async def commit_offsets(
        self, group: str, member_id: str, generation_id: int, offsets: Mapping[TopicPartition, tuple[int, str]]
    ) -> GroupError:
        verdict: GroupError = await self._call("commit_member", group, member_id, generation_id, dict(offsets))
        return verdict

    async def committed_offsets(
        self, group: str, partitions: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, int | None]:
        if partitions is None:
            every: dict[TopicPartition, int | None] = await self._call("group_offsets", group)
            return every
        found: dict[TopicPartition, int | None] = await self._call("fetch_committed", group, list(partitions))
        return found

    async def offsets_partition_for(self, group: str) -> int:
        partition: int = await self._call("partition_for", group)
        return partition

    async def commit_transactional_offsets(
        self,
        group: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        generation_id: int,
        offsets: Mapping[TopicPartition, tuple[int, str]],
    ) -> GroupError:
        verdict: GroupError = await self._call(
            "commit_transactional", group, producer_id, producer_epoch, member_id, generation_id, dict(offsets)
        )
        return verdict

    async def unstable_offsets(self, group: str, partitions: Iterable[TopicPartition] | None) -> set[TopicPartition]:
        wanted = None if partitions is None else list(partitions)
        unstable: set[TopicPartition] = await self._call("unstable_offsets", group, wanted)
        return unstable

    async def list_groups(self) -> list[GroupDescription]:
        groups: list[GroupDescription] = await self._call("list_groups")
        return groups

    async def describe_group(self, group: str) -> GroupDescription | None:
        described: GroupDescription | None = await self._call("describe_group", group)
        return described

    async def delete_group(self, group: str) -> GroupError:
        verdict: GroupError = await self._call("delete_group", group)
        return verdict

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self._handle is None:
            self._handle = await asyncio.to_thread(get_actor, group_coordinator_name())
        try:
            return await answer(getattr(self._handle, method).remote(*args, **kwargs))
        except RaybrokerError as exc:
            if exc.retriable:
                self._handle = None
            raise
