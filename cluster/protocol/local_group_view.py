"""`GroupView` over the in-process broker's group coordinator (`actors.core.groups.coordinator.GroupCoordinator`),
without Ray: what `RayGroupView` does over the coordinator actor, for tests and development.

A JoinGroup or SyncGroup that must wait for other members is awaited on a worker thread, in bounded waits of
`AWAIT_MS` each, until the answer comes (the membership state machine guarantees one, as `RayGroupView` explains).
The waits are short because the coordinator's timed events (session expiry, the rebalance timeout) run on its
clock, which a test may move by hand: a moved `MockClock` takes effect within one wait. Commits and offset reads,
which append to and read `__consumer_offsets`, run on a worker thread too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping

from actors.core.broker import InProcessBroker
from actors.core.groups.coordinator import GroupCoordinator
from actors.core.groups.group_membership import GroupDescription, GroupError, JoinResult, PendingJoin, SyncResult
from cluster.protocol.group_view import TopicPartition

# One bounded wait for a pending JoinGroup or SyncGroup (see the module docstring).
AWAIT_MS = 20


class LocalGroupView:
    """The in-process broker's group coordinator as the group handlers see it (see the module docstring)."""

    def __init__(self, broker: InProcessBroker) -> None:
        self.broker = broker

    @property
    def _coordinator(self) -> GroupCoordinator:
        return self.broker.group_coordinator

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
        outcome = await asyncio.to_thread(
            self._coordinator.join_group,
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
            outcome = await asyncio.to_thread(self._coordinator.await_join, group, outcome.member_id, AWAIT_MS)
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
        outcome = await asyncio.to_thread(
            self._coordinator.sync_group,
            group,
            member_id,
            generation_id,
            dict(assignments),
            protocol_type=protocol_type,
            protocol_name=protocol_name,
        )
        while outcome is None:
            outcome = await asyncio.to_thread(self._coordinator.await_sync, group, member_id, generation_id, AWAIT_MS)
        return outcome

    async def heartbeat(self, group: str, member_id: str, generation_id: int) -> GroupError:
        return self._coordinator.heartbeat(group, member_id, generation_id)

    async def leave_group(self, group: str, member_ids: list[str]) -> dict[str, GroupError]:
        return self._coordinator.leave_group(group, member_ids)

    async def commit_offsets(
        self, group: str, member_id: str, generation_id: int, offsets: Mapping[TopicPartition, tuple[int, str]]
    ) -> GroupError:
        return await asyncio.to_thread(self._coordinator.commit_member, group, member_id, generation_id, dict(offsets))

    async def committed_offsets(
        self, group: str, partitions: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, int | None]:
        if partitions is None:
            return dict(await asyncio.to_thread(self._coordinator.group_offsets, group))
        return await asyncio.to_thread(self._coordinator.fetch_committed, group, list(partitions))

    async def offsets_partition_for(self, group: str) -> int:
        return await asyncio.to_thread(self._coordinator.partition_for, group)

    async def commit_transactional_offsets(
        self,
        group: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        generation_id: int,
        offsets: Mapping[TopicPartition, tuple[int, str]],
    ) -> GroupError:
        return await asyncio.to_thread(
            self._coordinator.commit_transactional,
            group,
            producer_id,
            producer_epoch,
            member_id,
            generation_id,
            dict(offsets),
        )

    async def unstable_offsets(self, group: str, partitions: Iterable[TopicPartition] | None) -> set[TopicPartition]:
        wanted = None if partitions is None else list(partitions)
        return await asyncio.to_thread(self._coordinator.unstable_offsets, group, wanted)

    async def list_groups(self) -> list[GroupDescription]:
        return await asyncio.to_thread(self._coordinator.list_groups)

    async def describe_group(self, group: str) -> GroupDescription | None:
        return await asyncio.to_thread(self._coordinator.describe_group, group)

    async def delete_group(self, group: str) -> GroupError:
        return await asyncio.to_thread(self._coordinator.delete_group, group)
