"""The consumer-group admin facade: Kafka's Admin group calls over the group coordinator actor.

List, describe and delete groups, read a group's committed offsets, move them and delete some of them, for groups
of Kafka clients over the wire and of raybroker's Python `Consumer` alike: both keep their offsets in the one group
coordinator (`actors.server.group_coordinator_actor`). Every method blocks until the coordinator answered and raises
the broker's typed errors (`BrokerNotAvailableError` when no broker runs, `InvalidGroupIdError`), never Ray's; a
refusal of the coordinator (a group with members cannot be deleted or reset) raises `RaybrokerError` naming Kafka's
error.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from actors.calls import call, get_actor
from actors.core.groups.consumer_group_api import ConsumerGroupDescription
from actors.core.groups.group_membership import GroupDescription, GroupError
from actors.options import group_coordinator_name
from storage.errors import RaybrokerError
from storage.records.consumer_offsets import OffsetAndMetadata


class ConsumerGroups:
    """The consumer groups of the running broker (see the module docstring)."""

    def __init__(self) -> None:
        self._coordinator: Any = get_actor(group_coordinator_name())

    def list_groups(self) -> list[GroupDescription]:
        """Every group: with members, or with committed offsets only (Empty, no protocol type)."""
        groups: list[GroupDescription] = call(self._coordinator.list_groups.remote())
        return groups

    def describe_group(self, group: str) -> GroupDescription | None:
        """The group's state and members; None if it has neither members nor committed offsets."""
        described: GroupDescription | None = call(self._coordinator.describe_group.remote(group))
        return described

    def describe_consumer_group(self, group: str) -> ConsumerGroupDescription | None:
        """A group of Kafka 4's consumer protocol (KIP-848): its epochs, assignor and members with their
        assignments; None if `group` is no such group."""
        described: ConsumerGroupDescription | None = call(self._coordinator.describe_consumer_group.remote(group))
        return described

    def committed_offsets(self, group: str) -> dict[tuple[str, int], int]:
        """Every committed offset of the group, per (topic, partition)."""
        committed: dict[tuple[str, int], OffsetAndMetadata] = call(self._coordinator.group_offsets.remote(group))
        return {tp: found.offset for tp, found in committed.items()}

    def delete_group(self, group: str) -> None:
        """Deletes a group without members and its committed offsets (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND)."""
        verdict: GroupError = call(self._coordinator.delete_group.remote(group))
        if verdict != GroupError.NONE:
            raise RaybrokerError(f"group {group!r} could not be deleted: {verdict.value.upper()}")

    def delete_offsets(self, group: str, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], GroupError]:
        """Deletes the group's committed offsets of `partitions` (OffsetDelete); each partition's outcome: NONE, or
        GROUP_SUBSCRIBED_TO_TOPIC for a topic the members of an active consumer group subscribe to. An unknown
        group (GROUP_ID_NOT_FOUND) or an active group of another protocol (NON_EMPTY_GROUP) raises, deleting
        nothing."""
        verdict, outcomes = call(self._coordinator.delete_offsets.remote(group, list(partitions)))
        if verdict == GroupError.GROUP_ID_NOT_FOUND:
            raise RaybrokerError(f"consumer group {group!r} does not exist")
        if verdict != GroupError.NONE:
            raise RaybrokerError(f"the offsets of group {group!r} could not be deleted: {verdict.value.upper()}")
        deleted: dict[tuple[str, int], GroupError] = outcomes
        return deleted

    def reset_offsets(self, group: str, offsets: Mapping[tuple[str, int], int]) -> None:
        """Commits `offsets` for a group without members; a group with members is refused (NON_EMPTY_GROUP) and
        nothing is written, as Kafka's tool only resets inactive groups."""
        verdict: GroupError = call(self._coordinator.reset_offsets.remote(group, dict(offsets)))
        if verdict != GroupError.NONE:
            described = self.describe_group(group)
            state = "unknown" if described is None else described.state.value
            raise RaybrokerError(
                f"assignments can only be reset if the group {group!r} is inactive, but its state is {state} "
                f"({verdict.value.upper()})"
            )
