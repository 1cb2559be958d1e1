"""What the controller calls on one node's broker (its log manager): partitions' creation, deletion and configs, and
the node's copy of the metadata log (`MirrorLink`). The Ray host's is `actors.server.controller_actor.RayNodeBroker`,
the plain tests' `actors.core.controller.log_manager_broker.LogManagerBroker`."""

from __future__ import annotations

import uuid
from typing import Protocol

from actors.core.controller.metadata_replication import MirrorLink
from storage.logdir.log_manager import PartitionPlacement
from storage.pending import Pending


class NodeBroker(MirrorLink, Protocol):
    """One node's broker (its log manager) as the controller calls it; topic configs are Kafka's override
    properties, applied over the broker's `log.*` defaults."""

    def create_partition(
        self, topic: str, partition: int, config: dict[str, str], topic_id: uuid.UUID
    ) -> Pending[PartitionPlacement]:
        """The partition's placement, creating its log (and folder) if missing, with `config` as its topic's and
        `topic_id` in its folder's `partition.metadata`."""
        ...

    def delete_partitions(self, topic: str, partitions: list[int]) -> Pending[list[int]]:
        """Kafka-style async delete of the node's replicas of `partitions` of `topic`, all in one call (their dirs'
        checkpoints rewritten once); answers those it had."""
        ...

    def set_topic_config(self, topic: str, config: dict[str, str]) -> Pending[int]:
        """New overrides for the node's partitions of `topic`; how many were updated."""
        ...

    def partitions(self) -> Pending[list[PartitionPlacement]]:
        """Every partition the node's log dirs hold."""
        ...
