"""What the group handlers need of the group coordinator, written once over a transport.

The consumer-group APIs (FindCoordinator's answer aside) all reach one place: the cluster's group coordinator
(`actors.core.groups.group_coordinator.GroupCoordinator`), which holds the membership of every group and its committed
offsets in `__consumer_offsets`. `GroupView` is the seam between the handlers and it, beside `BrokerView` for topics
and partitions; it reaches the coordinator through a `Transport` (`cluster.protocol.views.transport`): the coordinator
actor (`actors.server.group_coordinator_actor`, `GroupView.on_ray`, over its same-node group channel when it runs
on the listener's node) or the in-process broker's (`GroupView.in_process`),
which the handlers' tests run on.

The coordinator answers a JoinGroup or SyncGroup that must wait for other members as pending; the view then calls
`await_join` / `await_sync`, each bounded by the transport's `max_wait_ms`, until the answer comes. The membership
state machine guarantees one comes: the rebalance timeout completes every join, and an expired leader's session ends
every sync. Awaiting holds no thread of the listener, and a connection that closes cancels its wait with its task.
In process, heartbeats and leaves answer from memory on the event loop; every other call (commits and offset reads
append to and read `__consumer_offsets`) runs on a worker thread.

Methods raise the broker's typed errors (`storage.errors`, e.g. `BrokerNotAvailableError` while the coordinator
restarts), never Ray's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Self

from actors.core.groups.consumer_group_api import ConsumerGroupDescription, HeartbeatRequest, HeartbeatResult
from actors.core.groups.group_membership import GroupDescription, GroupError, JoinResult, PendingJoin, SyncResult
from actors.core.in_process_broker import InProcessBroker
from actors.core.shares.group_share_config import ResolvedShareConfig
from actors.core.shares.share_group import ShareGroupDescription, ShareHeartbeatAnswer, ShareHeartbeatRequest
from cluster.protocol.views.group_transport import RayGroupTransport
from cluster.protocol.views.transport import InProcessTransport, Transport
from storage.records.consumer_offsets import OffsetAndMetadata

TopicPartition = tuple[str, int]


# How many groups' `__consumer_offsets` partitions a view keeps (all forgotten at once beyond that).
KNOWN_GROUP_PARTITIONS = 10_000


class GroupView:
    """The group coordinator as the protocol handlers see it (see the module docstring)."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport
        # Each group's `__consumer_offsets` partition, as the coordinator answered it: a function of the group id and
        # the topic's partition count, which never changes (`offsets_partition_for`).
        self._offsets_partitions: dict[str, int] = {}

    @classmethod
    def in_process(cls, broker: InProcessBroker) -> Self:
        """The in-process broker's group coordinator."""
        return cls(InProcessTransport(lambda: broker.group_coordinator, inline={"heartbeat", "leave_group"}))

    @classmethod
    def on_ray(cls) -> Self:
        """The group coordinator actor of the Ray cluster this process is connected to."""
        return cls(RayGroupTransport())

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
        skip_assignment_supported: bool = False,
    ) -> JoinResult:
        """A JoinGroup, answered once the join phase completes (`GroupMembership.join`)."""
        outcome = await self._transport.call(
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
            skip_assignment_supported=skip_assignment_supported,
        )
        while isinstance(outcome, PendingJoin):
            outcome = await self._transport.call("await_join", group, outcome.member_id, self._transport.max_wait_ms)
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
        group_instance_id: str | None = None,
    ) -> SyncResult:
        """A SyncGroup, answered once the leader's assignment is there (`GroupMembership.sync`)."""
        outcome = await self._transport.call(
            "sync_group",
            group,
            member_id,
            generation_id,
            dict(assignments),
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            group_instance_id=group_instance_id,
        )
        while outcome is None:
            outcome = await self._transport.call(
                "await_sync", group, member_id, generation_id, self._transport.max_wait_ms
            )
        result: SyncResult = outcome
        return result

    async def heartbeat(
        self, group: str, member_id: str, generation_id: int, group_instance_id: str | None = None
    ) -> GroupError:
        return await self._transport.call("heartbeat", group, member_id, generation_id, group_instance_id)

    async def leave_group(self, group: str, members: list[tuple[str, str | None]]) -> list[GroupError]:
        """A LeaveGroup of `members` (member id, instance id): each one's outcome, in order."""
        return await self._transport.call("leave_group", group, members)

    async def commit_offsets(
        self,
        group: str,
        member_id: str,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        *,
        api_version: int,
        group_instance_id: str | None = None,
    ) -> GroupError:
        """Writes (offset, leader epoch, metadata) per partition if the group's state allows this member's commit (an
        OffsetCommit of `api_version`)."""
        return await self._transport.call(
            "commit_member",
            group,
            member_id,
            generation_id,
            dict(offsets),
            api_version=api_version,
            group_instance_id=group_instance_id,
        )

    async def consumer_group_heartbeat(self, request: HeartbeatRequest) -> HeartbeatResult:
        """A ConsumerGroupHeartbeat (`ConsumerGroups.heartbeat`), answered at once."""
        return await self._transport.call("consumer_group_heartbeat", request)

    async def describe_consumer_group(self, group: str) -> ConsumerGroupDescription | None:
        """A consumer-protocol group as ConsumerGroupDescribe shows it; None if it is none."""
        return await self._transport.call("describe_consumer_group", group)

    async def share_group_heartbeat(self, request: ShareHeartbeatRequest) -> ShareHeartbeatAnswer:
        """A ShareGroupHeartbeat (`ShareGroups.heartbeat`), answered at once; a refusal comes as a value."""
        return await self._transport.call("share_group_heartbeat", request)

    async def describe_share_group(self, group: str) -> ShareGroupDescription | None:
        """A share group as ShareGroupDescribe shows it; None if it is none."""
        return await self._transport.call("describe_share_group", group)

    async def admit_share_offsets_change(self, group: str, create: bool) -> GroupError:
        """Whether the share group's offsets may change (`GroupCoordinator.admit_share_offsets_change`); `create`
        makes an unknown group (AlterShareGroupOffsets)."""
        return await self._transport.call("admit_share_offsets_change", group, create)

    async def share_group_settings(self, group: str) -> ResolvedShareConfig:
        """What a share group runs with, which its share-partitions' leaders apply (ShareFetch, ShareAcknowledge)."""
        return await self._transport.call("share_group_settings", group)

    async def check_offset_fetch(self, group: str, member_id: str | None, member_epoch: int) -> GroupError:
        """OffsetFetch v9+'s member check (`GroupCoordinator.check_offset_fetch`)."""
        return await self._transport.call("check_offset_fetch", group, member_id, member_epoch)

    async def committed_offsets(
        self, group: str, partitions: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's commit per partition (None: none committed); every commit for None."""
        if partitions is None:
            return dict(await self._transport.call("group_offsets", group))
        return await self._transport.call("fetch_committed", group, list(partitions))

    async def offsets_partition_for(self, group: str) -> int:
        """The `__consumer_offsets` partition holding the group's offsets (AddOffsetsToTxn adds it, TxnOffsetCommit
        checks it): asked of the coordinator once per group (up to `KNOWN_GROUP_PARTITIONS` groups kept), not on
        each of a transaction's requests."""
        known = self._offsets_partitions.get(group)
        if known is not None:
            return known
        partition: int = await self._transport.call("partition_for", group)
        if len(self._offsets_partitions) >= KNOWN_GROUP_PARTITIONS:
            self._offsets_partitions.clear()
        self._offsets_partitions[group] = partition
        return partition

    async def commit_transactional_offsets(
        self,
        group: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
    ) -> GroupError:
        """A TxnOffsetCommit: the offsets stay pending until the transaction's marker (`commit_transactional`)."""
        return await self._transport.call(
            "commit_transactional", group, producer_id, producer_epoch, member_id, generation_id, dict(offsets)
        )

    async def unstable_offsets(self, group: str, partitions: Iterable[TopicPartition] | None) -> set[TopicPartition]:
        """The partitions (None: any) with transactional offsets of the group still pending (OffsetFetch
        `require_stable`)."""
        wanted = None if partitions is None else list(partitions)
        return await self._transport.call("unstable_offsets", group, wanted)

    async def list_groups(self) -> list[GroupDescription]:
        return await self._transport.call("list_groups")

    async def describe_group(self, group: str) -> GroupDescription | None:
        """The group, or None if it has neither members nor committed offsets."""
        return await self._transport.call("describe_group", group)

    async def delete_group(self, group: str) -> GroupError:
        """Deletes an Empty group's offsets: NON_EMPTY_GROUP with members, GROUP_ID_NOT_FOUND if unknown."""
        return await self._transport.call("delete_group", group)

    async def delete_offsets(
        self, group: str, partitions: Iterable[TopicPartition]
    ) -> tuple[GroupError, dict[TopicPartition, GroupError]]:
        """An OffsetDelete: the group's verdict, and each partition's (`GroupCoordinator.delete_offsets`)."""
        return await self._transport.call("delete_offsets", group, list(partitions))
