"""What the group handlers need of the group coordinator, as one small asynchronous interface.

The consumer-group APIs (FindCoordinator's answer aside) all reach one place: the cluster's group coordinator
(`actors.server.group_coordinator`), which holds the membership of every group and its committed offsets in
`__consumer_offsets`. `GroupView` is the seam between the handlers and it, beside `BrokerView` for topics and
partitions; `RayGroupView` (`cluster.protocol.ray_group_view`) implements it over the actor, and the handlers'
tests run over an in-process view of the same `GroupMembership` class.

`join_group` and `sync_group` return only with the answer, which may take until every member joined or the
rebalance timeout passed; the handlers simply await them. Methods raise the broker's typed errors
(`storage.errors`, e.g. `BrokerNotAvailableError` while the coordinator restarts), never Ray's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from actors.core.groups.group_membership import GroupDescription, GroupError, JoinResult, SyncResult

TopicPartition = tuple[str, int]


class GroupView(Protocol):
    """The group coordinator as the protocol handlers see it (see the module docstring)."""

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
        """A JoinGroup, answered once the join phase completes (`GroupMembership.join`)."""
        ...

    async def sync_group(
        self,
        group: str,
        member_id: str,
        generation_id: int,
        assignments: Mapping[str, bytes],
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> SyncResult:
        """A SyncGroup, answered once the leader's assignment is there (`GroupMembership.sync`)."""
        ...

    async def heartbeat(self, group: str, member_id: str, generation_id: int) -> GroupError: ...

    async def leave_group(self, group: str, member_ids: list[str]) -> dict[str, GroupError]: ...

    async def commit_offsets(
        self, group: str, member_id: str, generation_id: int, offsets: Mapping[TopicPartition, tuple[int, str]]
    ) -> GroupError:
        """Writes (offset, metadata) per partition if the group's state allows this member's commit."""
        ...

    async def committed_offsets(
        self, group: str, partitions: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, int | None]:
        """The group's committed offset per partition (None: none committed); every committed one for None."""
        ...

    async def offsets_partition_for(self, group: str) -> int:
        """The `__consumer_offsets` partition holding the group's offsets (AddOffsetsToTxn adds it)."""
        ...

    async def commit_transactional_offsets(
        self,
        group: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        generation_id: int,
        offsets: Mapping[TopicPartition, tuple[int, str]],
    ) -> GroupError:
        """A TxnOffsetCommit: the offsets stay pending until the transaction's marker (`commit_transactional`)."""
        ...

    async def unstable_offsets(self, group: str, partitions: Iterable[TopicPartition] | None) -> set[TopicPartition]:
        """The partitions (None: any) with transactional offsets of the group still pending (OffsetFetch
        `require_stable`)."""
        ...

    async def list_groups(self) -> list[GroupDescription]: ...

    async def describe_group(self, group: str) -> GroupDescription | None:
        """The group, or None if it has neither members nor committed offsets."""
        ...

    async def delete_group(self, group: str) -> GroupError:
        """Deletes an Empty group's offsets: NON_EMPTY_GROUP with members, GROUP_ID_NOT_FOUND if unknown."""
        ...
