"""What a Python member of a group of Kafka 4's heartbeat protocols (the consumer protocol, KIP-848, and share groups,
KIP-932) keeps between heartbeats to the group coordinator actor: its id, epoch, subscription and heartbeat clock.

The member names itself (a random UUID, as Kafka 4's clients do) and joins with epoch 0 and its subscribed topics;
after each answer it heartbeats again once the interval the coordinator answered has passed. A fenced or forgotten
member (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID: its session ended, or the coordinator restarted) starts over with
epoch 0, as Kafka's clients do; other refusals raise `RaybrokerError` with the coordinator's message. Assignments
come by topic id and are answered by topic name.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from actors.core.groups.consumer_group_api import JOIN_EPOCH
from actors.core.groups.group_membership import GroupError
from storage.errors import RaybrokerError
from storage.topic_partition import TopicPartition

# Answers after which the member starts over with epoch 0.
REJOIN_ERRORS = (GroupError.FENCED_MEMBER_EPOCH, GroupError.UNKNOWN_MEMBER_ID)


class HeartbeatMember:
    """A member's state between heartbeats (see the module docstring). Not thread-safe (as its consumer)."""

    def __init__(
        self, group_id: str, coordinator: Callable[[], Any], topic_id: Callable[[str], uuid.UUID], client_id: str
    ) -> None:
        """`coordinator()` is the group coordinator actor's handle; `topic_id(name)` a topic's id."""
        self.group_id = group_id
        self.member_id = str(uuid.uuid4())
        self.epoch = JOIN_EPOCH
        self._coordinator = coordinator
        self._topic_id = topic_id
        self._client_id = client_id
        self._topics: tuple[str, ...] = ()
        self._names: dict[uuid.UUID, str] = {}
        self._next_heartbeat = 0.0

    def subscribe(self, topics: Iterable[str]) -> None:
        """Joins (again) with `topics`; the next heartbeat sends the full request."""
        self._topics = tuple(topics)
        self._names = {self._topic_id(name): name for name in self._topics}
        self._rejoin()

    @property
    def due(self) -> bool:
        """Whether the heartbeat interval has passed since the last answer."""
        return time.monotonic() >= self._next_heartbeat

    @property
    def seconds_until_due(self) -> float:
        """How long until the next heartbeat is due (0 when it is)."""
        return max(0.0, self._next_heartbeat - time.monotonic())

    @property
    def joining(self) -> bool:
        """Whether the next heartbeat joins (epoch 0): it then sends the subscription."""
        return self.epoch == JOIN_EPOCH

    def _rejoin(self) -> None:
        self.epoch = JOIN_EPOCH
        self._next_heartbeat = 0.0

    def _answered(self, error: GroupError, message: str | None, kind: str) -> bool:
        """Whether the heartbeat was accepted; False when the member must join again (it does at the next
        heartbeat); raises for any other refusal, `kind` naming the group ("group", "share group")."""
        if error in REJOIN_ERRORS:
            self._rejoin()
            return False
        if error != GroupError.NONE:
            raise RaybrokerError(f"{kind} {self.group_id!r} refused the heartbeat: {message or error.name}")
        return True

    def _accepted(self, member_epoch: int, heartbeat_interval_ms: int) -> None:
        """Takes an accepted answer's epoch and next heartbeat time."""
        self.epoch = member_epoch
        self._next_heartbeat = time.monotonic() + heartbeat_interval_ms / 1000

    def _named(self, assignment: Mapping[uuid.UUID, Iterable[int]]) -> list[TopicPartition]:
        """An assignment by topic id as sorted (topic name, partition) pairs of the subscribed topics."""
        return sorted(
            (self._names[topic_id], partition)
            for topic_id, partitions in assignment.items()
            if topic_id in self._names
            for partition in partitions
        )
