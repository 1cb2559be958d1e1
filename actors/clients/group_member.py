"""A Python `Consumer`'s membership of a group of Kafka 4's consumer protocol (KIP-848), spoken straight to the group
coordinator actor: the same group, member epochs and server-side assignment as Kafka clients with
`group.protocol=consumer` get over the wire, so Python consumers and Kafka clients can share one group.

The member names itself (a random UUID, as Kafka 4 clients do), joins with epoch 0 and its subscribed topics, then
heartbeats every interval the coordinator answers, always telling the partitions it owns: that is how a revocation is
acknowledged. `heartbeat` answers the partitions the member must own from now on whenever the coordinator sends an
assignment; the consumer then gives up the others (committing them first when it commits automatically, as Kafka's
consumer does before a revocation) and heartbeats again at once, so the coordinator can hand them on. A fenced or
forgotten member (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID: its session ended, or the coordinator restarted) loses
every partition without committing and joins again with epoch 0. Other refusals raise; a coordinator that cannot be
reached raises its retriable error, and the next heartbeat tries again.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from actors.calls import call
from actors.core.groups.consumer_group_api import JOIN_EPOCH, LEAVE_EPOCH, HeartbeatRequest, HeartbeatResult
from actors.core.groups.group_membership import GroupError
from storage.errors import RaybrokerError
from storage.topic_partition import TopicPartition

# Kafka's consumer `max.poll.interval.ms` default: the rebalance timeout a member joins with.
DEFAULT_REBALANCE_TIMEOUT_MS = 300_000
# Answers after which the member starts over (Kafka's clients rejoin with epoch 0 after either).
REJOIN_ERRORS = (GroupError.FENCED_MEMBER_EPOCH, GroupError.UNKNOWN_MEMBER_ID)


@dataclass(frozen=True, slots=True)
class NewAssignment:
    """What a heartbeat changed: the partitions to own from now on; `fenced` when they were lost (nothing of the
    old ones may be committed)."""

    partitions: list[TopicPartition]
    fenced: bool = False


class GroupMember:
    """One member of a consumer-protocol group (see the module docstring). Not thread-safe (as its consumer)."""

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
        self.group_id = group_id
        self.member_id = str(uuid.uuid4())
        self.epoch = JOIN_EPOCH
        self._coordinator = coordinator
        self._topic_id = topic_id
        self._client_id = client_id
        self._rebalance_timeout_ms = rebalance_timeout_ms
        self._topics: tuple[str, ...] = ()
        self._names: dict[uuid.UUID, str] = {}
        self._next_heartbeat = 0.0

    def subscribe(self, topics: Iterable[str]) -> None:
        """Joins (again) with `topics`; the next `heartbeat` sends the full request."""
        self._topics = tuple(topics)
        self._names = {self._topic_id(name): name for name in self._topics}
        self.epoch = JOIN_EPOCH
        self._next_heartbeat = 0.0

    @property
    def due(self) -> bool:
        """Whether the heartbeat interval has passed since the last answer."""
        return time.monotonic() >= self._next_heartbeat

    def heartbeat(self, owned: Iterable[TopicPartition]) -> NewAssignment | None:
        """One heartbeat telling the partitions owned now; the new assignment if the coordinator sent one."""
        joining = self.epoch == JOIN_EPOCH
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
        if result.error in REJOIN_ERRORS:
            self.epoch = JOIN_EPOCH
            self._next_heartbeat = 0.0
            return NewAssignment([], fenced=True)
        if result.error != GroupError.NONE:
            raise RaybrokerError(
                f"group {self.group_id!r} refused the heartbeat: {result.message or result.error.name}"
            )
        self.epoch = result.member_epoch
        self._next_heartbeat = time.monotonic() + result.heartbeat_interval_ms / 1000
        if result.assignment is None:
            return None
        return NewAssignment(
            sorted(
                (self._names[topic_id], partition)
                for topic_id, partitions in result.assignment.items()
                if topic_id in self._names
                for partition in partitions
            )
        )

    def leave(self) -> None:
        """Leaves the group (epoch -1): its partitions go to the other members at once."""
        if self.epoch == JOIN_EPOCH:
            return
        request = HeartbeatRequest(self.group_id, self.member_id, LEAVE_EPOCH)
        call(self._coordinator().consumer_group_heartbeat.remote(request))
        self.epoch = JOIN_EPOCH

    def _by_id(self, owned: Iterable[TopicPartition]) -> dict[uuid.UUID, frozenset[int]]:
        ids = {name: topic_id for topic_id, name in self._names.items()}
        grouped: dict[uuid.UUID, set[int]] = {}
        for topic, partition in owned:
            grouped.setdefault(ids[topic], set()).add(partition)
        return {topic_id: frozenset(partitions) for topic_id, partitions in grouped.items()}
