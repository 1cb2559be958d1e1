"""The share-group admin facade (KIP-932): Kafka's Admin share-group calls over the group coordinator actor and the
partitions' leaders, what `raybroker share-groups` runs.

A share group's members live in the group coordinator (`actors.core.shares.share_group`), its offsets with its
share-partitions at each partition's leader (`actors.core.shares.leader_shares`), so `offsets` asks the leaders, as
DescribeShareGroupOffsets does (`cluster.protocol.handlers.share_group_offsets`): for "every topic" each partition of
every topic, keeping those where the group has state. `alter_offsets` and `delete_offsets` first ask the coordinator
whether the group may change (`GroupCoordinator.admit_share_offsets_change`: a share group without members; the
id of a classic or consumer group is GROUP_ID_NOT_FOUND), then change the share-partitions at their leaders.
`delete_group` drops the group's share-partitions at their leaders, then the group (Kafka's DeleteShareGroups
deletes its share-group state too). Every method blocks until answered and raises the broker's typed errors, a
refusal as `RaybrokerError` naming Kafka's error, never Ray's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from actors.calls import call, controller, get_actor
from actors.core.controller.topic_metadata import AdvertisedListener
from actors.core.groups.group_membership import GroupDescription, GroupError
from actors.core.shares.leader_shares import ShareOffsets
from actors.core.shares.share_group import SHARE_GROUP_TYPE, ShareGroupDescription
from actors.options import group_coordinator_name
from actors.server.partition_lookup import partition_actor
from storage.errors import RaybrokerError


class ShareGroups:
    """The share groups of the running broker (see the module docstring)."""

    def __init__(self) -> None:
        self._coordinator: Any = get_actor(group_coordinator_name())

    def list_groups(self) -> list[GroupDescription]:
        """Every share group (ListGroups with the share type), by id."""
        groups: list[GroupDescription] = call(self._coordinator.list_groups.remote())
        return [group for group in groups if group.group_type == SHARE_GROUP_TYPE]

    def describe_group(self, group: str) -> ShareGroupDescription | None:
        """The share group as ShareGroupDescribe shows it; None if `group` is no share group."""
        described: ShareGroupDescription | None = call(self._coordinator.describe_share_group.remote(group))
        return described

    def coordinator(self) -> AdvertisedListener | None:
        """Where Kafka clients find the group's coordinator: the Kafka listener of the lowest `node.id` (every
        listener reaches the one coordinator, `cluster.protocol.handlers.find_coordinator`); None without one."""
        listeners: dict[str, AdvertisedListener] = call(controller().listeners.remote())
        return min(listeners.values(), key=lambda listener: listener.broker_id, default=None)

    def offsets(self, group: str, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], ShareOffsets | None]:
        """Each partition's share-partition of the group as DescribeShareGroupOffsets reports it, None where the
        group has none; the leaders are asked all at once."""
        wanted = list(dict.fromkeys(partitions))
        refs = [partition_actor(topic, partition).share_offsets.remote(group) for topic, partition in wanted]
        return {key: call(ref) for key, ref in zip(wanted, refs, strict=True)}

    def alter_offsets(self, group: str, offsets: Mapping[tuple[str, int], int]) -> None:
        """Sets the group's start offsets (AlterShareGroupOffsets): a group without members only."""
        self._admit(group, create=True)
        refs = [
            partition_actor(topic, partition).alter_share_offset.remote(group, offset)
            for (topic, partition), offset in sorted(offsets.items())
        ]
        for ref in refs:
            call(ref)

    def delete_offsets(self, group: str, partitions: Iterable[tuple[str, int]]) -> set[tuple[str, int]]:
        """Drops the group's share-partitions of `partitions` (DeleteShareGroupOffsets): a group without members
        only; returns those that had state."""
        self._admit(group, create=False)
        return self._delete_states(group, partitions)

    def delete_group(self, group: str, partitions: Iterable[tuple[str, int]]) -> None:
        """Deletes a share group without members and its share-partitions of `partitions` (DeleteShareGroups)."""
        described = self.describe_group(group)
        if described is None:
            raise RaybrokerError(f"Group '{group}' is not a share group. (GROUP_ID_NOT_FOUND)")
        if described.members:
            raise RaybrokerError(f"Share group '{group}' is not EMPTY. (NON_EMPTY_GROUP)")
        self._admit(group, create=False)
        self._delete_states(group, partitions)
        verdict: GroupError = call(self._coordinator.delete_group.remote(group))
        if verdict != GroupError.NONE:
            raise RaybrokerError(f"share group {group!r} could not be deleted: {verdict.value.upper()}")

    def _delete_states(self, group: str, partitions: Iterable[tuple[str, int]]) -> set[tuple[str, int]]:
        wanted = list(dict.fromkeys(partitions))
        refs = [partition_actor(topic, partition).delete_share_state.remote(group) for topic, partition in wanted]
        return {key for key, ref in zip(wanted, refs, strict=True) if call(ref)}

    def _admit(self, group: str, create: bool) -> None:
        verdict: GroupError = call(self._coordinator.admit_share_offsets_change.remote(group, create))
        if verdict == GroupError.GROUP_ID_NOT_FOUND:
            raise RaybrokerError(f"Group {group} is not a share group. (GROUP_ID_NOT_FOUND)")
        if verdict == GroupError.NON_EMPTY_GROUP:
            raise RaybrokerError(f"Share group '{group}' is not empty. (NON_EMPTY_GROUP)")
        if verdict != GroupError.NONE:
            raise RaybrokerError(f"the offsets of share group {group!r} cannot change: {verdict.value.upper()}")
