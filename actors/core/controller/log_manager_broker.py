"""A node's broker as the controller calls it (`NodeBroker`), in process: the plain `storage.logdir.log_manager.
LogManager` of that node, each call run at once. What the Ray log-manager actor does for the controller over Ray,
this does over the manager itself: topic configs arrive as Kafka's override properties and apply over the broker's
`log.*` defaults (the manager's `default_config`)."""

from __future__ import annotations

import uuid
from concurrent.futures import Future

from storage.config.log_config import LogConfig
from storage.logdir.log_manager import LogManager, PartitionPlacement
from storage.logdir.metadata_mirror import MirrorState
from storage.pending import completed


class LogManagerBroker:
    """`NodeBroker` over one node's `LogManager` (already started)."""

    def __init__(self, manager: LogManager) -> None:
        self.manager = manager

    def _topic_config(self, overrides: dict[str, str]) -> LogConfig:
        return LogConfig.from_properties(overrides, base=self.manager.default_config)

    def create_partition(
        self, topic: str, partition: int, config: dict[str, str], topic_id: uuid.UUID
    ) -> Future[PartitionPlacement]:
        return completed(
            lambda: self.manager.get_or_create_partition(topic, partition, self._topic_config(config), topic_id)
        )

    def delete_partitions(self, topic: str, partitions: list[int]) -> Future[list[int]]:
        return completed(lambda: self.manager.delete_logs(topic, partitions))

    def set_topic_config(self, topic: str, config: dict[str, str]) -> Future[int]:
        return completed(lambda: self.manager.set_topic_config(topic, self._topic_config(config)))

    def partitions(self) -> Future[list[PartitionPlacement]]:
        return completed(self.manager.placements)

    def metadata_state(self) -> Future[MirrorState]:
        return completed(lambda: self.manager.metadata_mirror().state())

    def metadata_append(self, controller_epoch: int, offset: int, batches: bytes) -> Future[MirrorState]:
        return completed(lambda: self.manager.metadata_mirror().append(controller_epoch, offset, batches))

    def metadata_truncate(self, controller_epoch: int, offset: int) -> Future[MirrorState]:
        return completed(lambda: self.manager.metadata_mirror().truncate_to(controller_epoch, offset))

    def metadata_offset_for_epoch(self, epoch: int) -> Future[tuple[int, int]]:
        return completed(lambda: self.manager.metadata_mirror().end_offset_for_epoch(epoch))

    def metadata_read(self, offset: int, max_bytes: int) -> Future[bytes]:
        return completed(lambda: self.manager.metadata_mirror().read(offset, max_bytes))
