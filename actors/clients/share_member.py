"""A `ShareConsumer`'s membership of a share group (KIP-932), spoken straight to the group coordinator actor with the
same ShareGroupHeartbeat requests Kafka 4.2's `KafkaShareConsumer` sends over the wire, so Python members and Kafka
clients can share one group.

The member names itself (a random UUID, as Kafka 4.2's clients do), joins with epoch 0 and its subscribed topics,
then heartbeats every interval the coordinator answers. Share groups need no revocation (a partition may be shared),
so an assignment the coordinator sends is taken at once. A fenced or forgotten member (FENCED_MEMBER_EPOCH,
UNKNOWN_MEMBER_ID: its session ended, or the coordinator restarted) joins again with epoch 0; other refusals raise
`RaybrokerError` with the coordinator's message.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from actors.calls import call
from actors.core.groups.consumer_group_api import JOIN_EPOCH, LEAVE_EPOCH
from actors.core.groups.group_membership import GroupError
from actors.core.shares.group_share_config import ResolvedShareConfig
from actors.core.shares.share_group import ShareHeartbeatAnswer, ShareHeartbeatRequest
from storage.errors import RaybrokerError
from storage.topic_partition import TopicPartition

# Answers after which the member starts over with epoch 0, as Kafka's share consumer does.
REJOIN_ERRORS = (GroupError.FENCED_MEMBER_EPOCH, GroupError.UNKNOWN_MEMBER_ID)


class ShareMember:
    """One member of a share group (see the module docstring). Not thread-safe (as its consumer)."""

    def __init__(
        self,
        group_id: str,
        coordinator: Callable[[], Any],
        topic_id: Callable[[str], uuid.UUID],
        client_id: str,
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
        self.assignment: list[TopicPartition] = []

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

    def heartbeat(self) -> None:
        """One heartbeat; `assignment` becomes the coordinator's new one if it sent one (empty when fenced)."""
        joining = self.epoch == JOIN_EPOCH
        request = ShareHeartbeatRequest(
            self.group_id,
            self.member_id,
            self.epoch,
            subscribed_topic_names=self._topics if joining else None,
            client_id=self._client_id,
        )
        answer: ShareHeartbeatAnswer = call(self._coordinator().share_group_heartbeat.remote(request))
        if answer.error in REJOIN_ERRORS:
            self.epoch = JOIN_EPOCH
            self._next_heartbeat = 0.0
            self.assignment = []
            return
        if answer.result is None:
            raise RaybrokerError(
                f"share group {self.group_id!r} refused the heartbeat: {answer.message or answer.error.name}"
            )
        result = answer.result
        self.epoch = result.member_epoch
        self._next_heartbeat = time.monotonic() + result.heartbeat_interval_ms / 1000
        if result.assignment is not None:
            self.assignment = sorted(
                (self._names[topic_id], partition)
                for topic_id, partitions in result.assignment.items()
                if topic_id in self._names
                for partition in partitions
            )

    def settings(self) -> ResolvedShareConfig:
        """What the group runs with (its lock duration, delivery limit, offset reset), which its share-partitions'
        leaders apply to this member's fetches and acknowledgements."""
        settings: ResolvedShareConfig = call(self._coordinator().share_group_settings.remote(self.group_id))
        return settings

    def leave(self) -> None:
        """Leaves the group (epoch -1): its partitions go to the other members at once."""
        if self.epoch == JOIN_EPOCH:
            return
        call(
            self._coordinator().share_group_heartbeat.remote(
                ShareHeartbeatRequest(self.group_id, self.member_id, LEAVE_EPOCH)
            )
        )
        self.epoch = JOIN_EPOCH
        self.assignment = []
