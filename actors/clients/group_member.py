"""A Python `Consumer`'s membership of a group of Kafka 4's consumer protocol (KIP-848), spoken straight to the group
coordinator actor: the same group, member epochs and server-side assignment as Kafka clients with
`group.protocol=consumer` get over the wire, so Python consumers and Kafka clients can share one group.

Joining, heartbeats and refusals are `HeartbeatMember`'s; each heartbeat tells the partitions the member owns:
that is how a revocation is acknowledged. `heartbeat` answers the partitions the member must own from now on
whenever the coordinator sends an assignment; the consumer then gives up the others (committing them first when it
commits automatically, as Kafka's consumer does before a revocation) and heartbeats again at once, so the
coordinator can hand them on. A fenced or
forgotten member loses every partition without committing and joins again with epoch 0. A coordinator that cannot
be reached raises its retriable error, and the next heartbeat tries again.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from actors.calls import call
from actors.clients.heartbeat_member import HeartbeatMember
from actors.core.groups.consumer_group_api import LEAVE_EPOCH, HeartbeatRequest, HeartbeatResult
from storage.topic_partition import TopicPartition

# Kafka's consumer `max.poll.interval.ms` default: the rebalance timeout a member joins with.
DEFAULT_REBALANCE_TIMEOUT_MS = 300_000


@dataclass(frozen=True, slots=True)
class NewAssignment:
    """What a heartbeat changed: the partitions to own from now on; `fenced` when they were lost (nothing of the
    old ones may be committed)."""

    partitions: list[TopicPartition]
    fenced: bool = False


class GroupMember(HeartbeatMember):
    """One member of a consumer-protocol group (see the module docstring and `HeartbeatMember`). Not thread-safe (as
    its consumer)."""

    def __init__(
        self,
        group_id: str,
        coordinator: Callable[[], Any],
        topic_id: Callable[[str], uuid.UUID],
        *,
        client_id: str = "raybroker-python",
        rebalance_timeout_ms: int = DEFAULT_REBALANCE_TIMEOUT_MS,
    ) -> None:
        """`coordinator()` is the group coordinator actor's handle; `topic_id(name)` a topic's id."""
        super().__init__(group_id, coordinator, topic_id, client_id)
        self._rebalance_timeout_ms = rebalance_timeout_ms

    def heartbeat(self, owned: Iterable[TopicPartition]) -> NewAssignment | None:
        """One heartbeat telling the partitions owned now; the new assignment if the coordinator sent one."""
        joining = self.joining
        request = HeartbeatRequest(
            self.group_id,
            self.member_id,
            self.epoch,
            rebalance_timeout_ms=self._rebalance_timeout_ms if joining else -1,
            subscribed_topic_names=self._topics if joining else None,
            owned={} if joining else self._by_id(owned),
            client_id=self._client_id,
        )
        result: HeartbeatResult = call(self._coordinator().consumer_group_heartbeat.remote(request))
        if not self._answered(result.error, result.message, "group"):
            return NewAssignment([], fenced=True)
        self._accepted(result.member_epoch, result.heartbeat_interval_ms)
        return None if result.assignment is None else NewAssignment(self._named(result.assignment))

    def leave(self) -> None:
        """Leaves the group (epoch -1): its partitions go to the other members at once."""
        if self.joining:
            return
        request = HeartbeatRequest(self.group_id, self.member_id, LEAVE_EPOCH)
        call(self._coordinator().consumer_group_heartbeat.remote(request))
        self._rejoin()

    def _by_id(self, owned: Iterable[TopicPartition]) -> dict[uuid.UUID, frozenset[int]]:
        ids = {name: topic_id for topic_id, name in self._names.items()}
        grouped: dict[uuid.UUID, set[int]] = {}
        for topic, partition in owned:
            grouped.setdefault(ids[topic], set()).add(partition)
        return {topic_id: frozenset(partitions) for topic_id, partitions in grouped.items()}
