"""A `ShareConsumer`'s membership of a share group (KIP-932), spoken straight to the group coordinator actor with the
same ShareGroupHeartbeat requests Kafka 4.2's `KafkaShareConsumer` sends over the wire, so Python members and Kafka
clients can share one group.

Joining, heartbeats and refusals are `HeartbeatMember`'s. Share groups need no revocation (a partition may be
shared), so an assignment the coordinator sends is taken at once; a fenced or forgotten member has none until it
joins again.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from actors.calls import call
from actors.clients.heartbeat_member import HeartbeatMember
from actors.core.groups.consumer_group_api import LEAVE_EPOCH
from actors.core.shares.group_share_config import ResolvedShareConfig
from actors.core.shares.share_group import ShareHeartbeatAnswer, ShareHeartbeatRequest
from storage.errors import RaybrokerError
from storage.topic_partition import TopicPartition


class ShareMember(HeartbeatMember):
    """One member of a share group (see the module docstring and `HeartbeatMember`). Not thread-safe (as its
    consumer)."""

    def __init__(
        self, group_id: str, coordinator: Callable[[], Any], topic_id: Callable[[str], uuid.UUID], client_id: str
    ) -> None:
        """`coordinator()` is the group coordinator actor's handle; `topic_id(name)` a topic's id."""
        super().__init__(group_id, coordinator, topic_id, client_id)
        self.assignment: list[TopicPartition] = []

    def heartbeat(self) -> None:
        """One heartbeat; `assignment` becomes the coordinator's new one if it sent one (empty when fenced)."""
        request = ShareHeartbeatRequest(
            self.group_id,
            self.member_id,
            self.epoch,
            subscribed_topic_names=self._topics if self.joining else None,
            client_id=self._client_id,
        )
        answer: ShareHeartbeatAnswer = call(self._coordinator().share_group_heartbeat.remote(request))
        if not self._answered(answer.error, answer.message, "share group"):
            self.assignment = []
            return
        if answer.result is None:
            raise RaybrokerError(f"share group {self.group_id!r} answered the heartbeat without a result")
        self._accepted(answer.result.member_epoch, answer.result.heartbeat_interval_ms)
        if answer.result.assignment is not None:
            self.assignment = self._named(answer.result.assignment)

    def settings(self) -> ResolvedShareConfig:
        """What the group runs with (its lock duration, delivery limit, offset reset), which its share-partitions'
        leaders apply to this member's fetches and acknowledgements."""
        settings: ResolvedShareConfig = call(self._coordinator().share_group_settings.remote(self.group_id))
        return settings

    def leave(self) -> None:
        """Leaves the group (epoch -1): its partitions go to the other members at once."""
        if self.joining:
            return
        call(
            self._coordinator().share_group_heartbeat.remote(
                ShareHeartbeatRequest(self.group_id, self.member_id, LEAVE_EPOCH)
            )
        )
        self._rejoin()
        self.assignment = []
