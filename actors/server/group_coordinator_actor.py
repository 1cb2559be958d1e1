"""The group coordinator actor: consumer groups' committed offsets and membership, one per cluster.

All its logic is the plain `actors.core.groups.group_coordinator.GroupCoordinator` (committed offsets in
`__consumer_offsets`, loading them, creating the topic again after a client deleted it, JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, the bounded waits of `await_join` / `await_sync`), tested without Ray; see that module for
what it owns and guarantees. This actor gives it its Ray seams and its remote API: the controller actor (to create
and describe `__consumer_offsets`), each `__consumer_offsets` partition's leader actor
(`actors.server.internal_partition_leaders`, its appends through the actor's `AppendRoute`), and the wall clock.
Ray restarts it if it dies; the new one loads the committed offsets again and members rejoin.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from actors.calls import call, controller
from actors.core.controller.topic_metadata import CONSUMER_OFFSETS_TOPIC
from actors.core.groups.group_coordinator import GroupCoordinator
from actors.core.groups.group_membership import (
    GroupDescription,
    GroupError,
    GroupMembership,
    JoinResult,
    MembershipConfig,
    PendingJoin,
    SyncResult,
)
from actors.server.append_route import AppendRoute
from actors.server.internal_partition_leaders import RayInternalPartition, RayTopicAdmin
from storage.clock import SYSTEM_CLOCK
from storage.config.broker_config import BrokerConfig


class GroupCoordinatorActor:
    """The plain `GroupCoordinator` over Ray's seams; see the module docstring."""

    def __init__(self, properties: Mapping[str, str]) -> None:
        """`properties`: the broker's `server.properties` (`offsets.topic.*` and `group.*` keys are read)."""
        config = BrokerConfig.from_properties(properties)
        ctrl = controller()
        self._route = AppendRoute()
        self._coordinator = GroupCoordinator(
            config.offsets_topic_num_partitions,
            config.offsets_topic_replication_factor,
            clock=SYSTEM_CLOCK,
            controller=RayTopicAdmin(ctrl),
            find_partition=lambda partition: RayInternalPartition.leader_of(
                CONSUMER_OFFSETS_TOPIC, partition, self._route
            ),
            allocate_coordinator_epoch=lambda at_least: int(call(ctrl.allocate_coordinator_epoch.remote(at_least))),
            membership=GroupMembership(SYSTEM_CLOCK, MembershipConfig.of(config)),
        )

    def ready(self) -> int:
        return self._coordinator.ready()

    def partition_for(self, group: str) -> int:
        return self._coordinator.partition_for(group)

    def commit(self, group: str, offsets: Mapping[tuple[str, int], int], metadata: str = "") -> None:
        self._coordinator.commit(group, offsets, metadata)

    def commit_member(
        self, group: str, member_id: str, generation_id: int, offsets: Mapping[tuple[str, int], tuple[int, str]]
    ) -> GroupError:
        return self._coordinator.commit_member(group, member_id, generation_id, offsets)

    def fetch_committed(
        self, group: str, topic_partitions: Iterable[tuple[str, int]]
    ) -> dict[tuple[str, int], int | None]:
        return self._coordinator.fetch_committed(group, topic_partitions)

    def commit_transactional(
        self,
        group: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        generation_id: int,
        offsets: Mapping[tuple[str, int], tuple[int, str]],
    ) -> GroupError:
        return self._coordinator.commit_transactional(
            group, producer_id, producer_epoch, member_id, generation_id, offsets
        )

    def complete_transaction(self, partition: int, producer_id: int, commit: bool) -> None:
        self._coordinator.complete_transaction(partition, producer_id, commit)

    def unstable_offsets(self, group: str, topic_partitions: Iterable[tuple[str, int]] | None) -> set[tuple[str, int]]:
        return self._coordinator.unstable_offsets(group, topic_partitions)

    def group_offsets(self, group: str) -> dict[tuple[str, int], int]:
        return self._coordinator.group_offsets(group)

    def join_group(self, group: str, member_id: str, **request: Any) -> JoinResult | PendingJoin:
        return self._coordinator.join_group(group, member_id, **request)

    def await_join(self, group: str, member_id: str, max_wait_ms: int) -> JoinResult | PendingJoin:
        return self._coordinator.await_join(group, member_id, max_wait_ms)

    def sync_group(
        self, group: str, member_id: str, generation_id: int, assignments: Mapping[str, bytes], **protocol: Any
    ) -> SyncResult | None:
        return self._coordinator.sync_group(group, member_id, generation_id, assignments, **protocol)

    def await_sync(self, group: str, member_id: str, generation_id: int, max_wait_ms: int) -> SyncResult | None:
        return self._coordinator.await_sync(group, member_id, generation_id, max_wait_ms)

    def heartbeat(self, group: str, member_id: str, generation_id: int) -> GroupError:
        return self._coordinator.heartbeat(group, member_id, generation_id)

    def leave_group(self, group: str, member_ids: list[str]) -> dict[str, GroupError]:
        return self._coordinator.leave_group(group, member_ids)

    def list_groups(self) -> list[GroupDescription]:
        return self._coordinator.list_groups()

    def describe_group(self, group: str) -> GroupDescription | None:
        return self._coordinator.describe_group(group)

    def delete_group(self, group: str) -> GroupError:
        return self._coordinator.delete_group(group)

    def on_topic_deleted(self, topic: str) -> list[str]:
        return self._coordinator.on_topic_deleted(topic)

    def reset_offsets(self, group: str, offsets: Mapping[tuple[str, int], int]) -> GroupError:
        return self._coordinator.reset_offsets(group, offsets)
