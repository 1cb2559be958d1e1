"""The share-partitions' durable state in `__share_group_state` (Kafka's share coordinator, for its
ReadShareGroupState and WriteShareGroupState): the latest ShareSnapshot record per share-partition
(`storage.records.share_group_state`), in Kafka's record format, on the partition its key hashes to.

Guarantees:
- **Written before it counts.** `write_state` returns once every in-sync replica of the state partition has the
  record (an `acks=all` append, as Kafka's coordinators append): a partition leader answers an acknowledgement only
  after that, so an accepted record survives a restart or the loss of the state partition's leader.
- **Latest wins.** A share-partition's state is its last record on the partition; loading replays the partition from
  its log start to its log end (`actors.core.internal_topics.internal_batches`) and keeps each key's last snapshot.
  A tombstone (a null value: Kafka's DeleteShareGroupState) forgets the key. Other record types (Kafka's
  ShareUpdate) and undecodable records are skipped, with a warning for the latter.
- **Leader fencing** (Kafka's share coordinator checks the same): each snapshot carries the leader epoch of the
  partition leader that wrote it. A read by a leader of a newer epoch first writes the state (uninitialized if there
  was none) again under its epoch,
  so a deposed leader's later write, in an older epoch, is refused (`FencedLeaderEpochError`) rather than undo what
  the new leader may already have handed out; a read or write in an epoch older than the stored one is refused too.
- **One writer.** The store caches what it loaded and what it wrote; it is the only writer of the topic (one per
  broker in process). A failed append (not enough replicas, a timeout: it may still land) drops the partition's
  cache, so the next call loads it again.

The topic is created on first use with Kafka's settings (`ensure_share_state_topic`) and kept small as Kafka's share
coordinator keeps it (`schedule`): every `share.coordinator.cold.partition.snapshot.interval.ms` a state not written
for that long is written again (a new snapshot of the same state), and every
`share.coordinator.state.topic.prune.interval.ms` the records of each loaded state partition below its oldest
latest snapshot are deleted (DeleteRecords): none of them is any key's latest, so loading reads the same states.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from typing import Protocol

from actors.core.controller.topic_metadata import SHARE_GROUP_STATE_TOPIC, TopicMetadata
from actors.core.internal_topics import InternalPartition, TopicAdmin, ensure_internal_topic, internal_batches
from storage.clock import Clock
from storage.config.share_group_config import ShareGroupConfig
from storage.errors import CorruptRecordError, FencedLeaderEpochError, RaybrokerError
from storage.logdir.scheduler import Scheduler
from storage.partition.log import LogAppendInfo
from storage.records.record_batch import RecordBatchBuilder
from storage.records.share_group_state import ShareGroupState, SharePartitionKey, ShareSnapshot

logger = logging.getLogger(__name__)

# Bytes read at a time when a state partition is loaded (Kafka's `share.coordinator.load.buffer.size` default, 5 MiB).
LOAD_CHUNK_BYTES = 5 * 1024 * 1024


class StatePartition(InternalPartition, Protocol):
    """The leader replica of a `__share_group_state` partition, as the store reads, appends to and prunes it."""

    def append_replicated(self, batch: bytes) -> LogAppendInfo:
        """Appends `batch`, answered once every in-sync replica has it."""
        ...

    def delete_records(self, offset: int) -> int:
        """Moves the log start offset up to `offset` (DeleteRecords); the log start offset it has now."""
        ...


def ensure_share_state_topic(controller: TopicAdmin, config: ShareGroupConfig) -> TopicMetadata:
    """`__share_group_state` as Kafka 4.2's share coordinator creates it: `share.coordinator.state.topic.*`
    partitions, replicas (capped at the brokers running) and segment bytes, `min.insync.replicas` =
    `share.coordinator.state.topic.min.isr` (capped at the replicas, so a one-broker cluster can append), and
    `cleanup.policy=delete` with no retention (Kafka prunes it itself, by DeleteRecords)."""
    replicas = max(min(config.share_coordinator_state_topic_replication_factor, len(controller.brokers())), 1)
    return ensure_internal_topic(
        controller,
        SHARE_GROUP_STATE_TOPIC,
        config.share_coordinator_state_topic_num_partitions,
        config.share_coordinator_state_topic_replication_factor,
        {
            "cleanup.policy": "delete",
            "retention.ms": "-1",
            "compression.type": "uncompressed",
            "min.insync.replicas": str(min(config.share_coordinator_state_topic_min_isr, replicas)),
            "segment.bytes": str(config.share_coordinator_state_topic_segment_bytes),
            "unclean.leader.election.enable": "false",
        },
        "share.coordinator.state.topic.replication.factor",
    )


class ShareStateStore:
    """The share-partitions' states in `__share_group_state` (see the module docstring); thread-safe.

    `find_partition(p)` is the leader replica of partition p of the topic as it is now; `controller` creates the
    topic at first use."""

    def __init__(
        self,
        config: ShareGroupConfig,
        *,
        clock: Clock,
        controller: TopicAdmin,
        find_partition: Callable[[int], StatePartition],
    ) -> None:
        self._config = config
        self._clock = clock
        self._controller = controller
        self._find_partition = find_partition
        self._partition_count = config.share_coordinator_state_topic_num_partitions
        # One lock per state partition (Kafka's share coordinator runs a shard per partition): writes to different
        # partitions wait for their own appends only.
        self._partition_locks = [threading.Lock() for _ in range(self._partition_count)]
        self._topic_lock = threading.Lock()
        self._topic_ready = False
        self._loaded: dict[int, dict[SharePartitionKey, ShareSnapshot]] = {}
        # The offset of each loaded key's latest snapshot, by state partition.
        self._offsets: dict[int, dict[SharePartitionKey, int]] = {}

    def read_state(self, key: SharePartitionKey, leader_epoch: int) -> ShareGroupState:
        """The share-partition's latest state (uninitialized if none was written), read by the leader of
        `leader_epoch`, which fences older leaders' writes from now on (see the module docstring)."""
        partition = key.state_partition(self._partition_count)
        with self._partition_locks[partition]:
            snapshot = self._snapshots(partition).get(key)
            if snapshot is not None:
                _check_epoch(key, snapshot, leader_epoch)
            if snapshot is None or snapshot.leader_epoch < leader_epoch:
                state = ShareGroupState() if snapshot is None else snapshot.state
                self._append(key, state, leader_epoch, snapshot)
                return state
            return snapshot.state

    def write_state(self, key: SharePartitionKey, state: ShareGroupState, leader_epoch: int) -> None:
        """Writes the share-partition's state, durable on return; `FencedLeaderEpochError` for a leader older than
        the last one that read or wrote it."""
        partition = key.state_partition(self._partition_count)
        with self._partition_locks[partition]:
            snapshot = self._snapshots(partition).get(key)
            if snapshot is not None:
                _check_epoch(key, snapshot, leader_epoch)
            self._append(key, state, leader_epoch, snapshot)

    def _append(
        self, key: SharePartitionKey, state: ShareGroupState, leader_epoch: int, previous: ShareSnapshot | None
    ) -> None:
        """Appends the key's new snapshot and caches it. Called with its partition's lock held."""
        now_ms = self._clock.milliseconds()
        snapshot = ShareSnapshot(
            state,
            snapshot_epoch=0 if previous is None else previous.snapshot_epoch + 1,
            leader_epoch=leader_epoch,
            create_timestamp_ms=now_ms if previous is None else previous.create_timestamp_ms,
            write_timestamp_ms=now_ms,
        )
        builder = RecordBatchBuilder()
        builder.append(key.to_bytes(), snapshot.to_bytes(), timestamp=now_ms)
        partition = key.state_partition(self._partition_count)
        try:
            appended = self._find_partition(partition).append_replicated(builder.build())
        except RaybrokerError:
            self._loaded.pop(partition, None)
            self._offsets.pop(partition, None)
            raise
        self._loaded[partition][key] = snapshot
        self._offsets[partition][key] = appended.last_offset

    def schedule(self, scheduler: Scheduler) -> None:
        """Registers the store's periodic work on `scheduler` (see the module docstring)."""
        cold_ms = self._config.share_coordinator_cold_partition_snapshot_interval_ms
        prune_ms = self._config.share_coordinator_state_topic_prune_interval_ms
        scheduler.schedule("share-state-cold-snapshots", self.snapshot_cold_states, cold_ms, cold_ms)
        scheduler.schedule("share-state-prune", self.prune, prune_ms, prune_ms)

    def snapshot_cold_states(self) -> int:
        """Writes again every loaded state not written for `share.coordinator.cold.partition.snapshot.interval.ms`,
        so that no idle share-partition holds the prune back; the number written. A partition whose append fails is
        left for the next pass."""
        written = 0
        cold_before = self._clock.milliseconds() - self._config.share_coordinator_cold_partition_snapshot_interval_ms
        for partition in list(self._loaded):
            with self._partition_locks[partition]:
                snapshots = self._loaded.get(partition, {})
                try:
                    for key, snapshot in list(snapshots.items()):
                        if snapshot.write_timestamp_ms <= cold_before:
                            self._append(key, snapshot.state, snapshot.leader_epoch, snapshot)
                            written += 1
                except RaybrokerError as exc:
                    logger.warning("%s-%d: cold snapshots not written: %s", SHARE_GROUP_STATE_TOPIC, partition, exc)
        return written

    def prune(self) -> dict[int, int]:
        """Deletes the records of each loaded state partition below its oldest latest snapshot (all of them when it
        holds no key); each pruned partition's log start offset now. A partition whose DeleteRecords fails is left
        for the next pass."""
        pruned: dict[int, int] = {}
        for partition in list(self._loaded):
            with self._partition_locks[partition]:
                offsets = self._offsets.get(partition)
                if offsets is None:
                    continue
                try:
                    state_partition = self._find_partition(partition)
                    log_start, high_watermark, _ = state_partition.offsets()
                    redundant_below = min(offsets.values(), default=high_watermark)
                    if redundant_below > log_start:
                        pruned[partition] = state_partition.delete_records(redundant_below)
                except RaybrokerError as exc:
                    logger.warning("%s-%d: not pruned: %s", SHARE_GROUP_STATE_TOPIC, partition, exc)
        return pruned

    def _snapshots(self, partition: int) -> dict[SharePartitionKey, ShareSnapshot]:
        """The latest snapshot of each key on `partition`, loaded at its first use. Called with the partition's lock
        held."""
        loaded = self._loaded.get(partition)
        if loaded is not None:
            return loaded
        with self._topic_lock:
            if not self._topic_ready:
                ensure_share_state_topic(self._controller, self._config)
                self._topic_ready = True
        name = f"{SHARE_GROUP_STATE_TOPIC}-{partition}"
        loaded = {}
        offsets: dict[SharePartitionKey, int] = {}
        for batch in internal_batches(self._find_partition(partition), name, LOAD_CHUNK_BYTES):
            if batch.is_control:
                continue
            for record in batch.records():
                if record.key is None:
                    continue
                try:
                    key = SharePartitionKey.from_bytes(record.key)
                    if key is None:
                        continue
                    if record.value is None:
                        loaded.pop(key, None)
                        offsets.pop(key, None)
                    else:
                        loaded[key] = ShareSnapshot.from_bytes(record.value)
                        offsets[key] = record.offset
                except CorruptRecordError as exc:
                    logger.warning("%s offset %d skipped: %s", name, record.offset, exc)
        self._loaded[partition] = loaded
        self._offsets[partition] = offsets
        return loaded


def _check_epoch(key: SharePartitionKey, snapshot: ShareSnapshot, leader_epoch: int) -> None:
    if leader_epoch < snapshot.leader_epoch:
        raise FencedLeaderEpochError(
            f"share-partition {key.group_id} {key.partition}: leader epoch {leader_epoch} is older than "
            f"{snapshot.leader_epoch}, which last read or wrote its state"
        )


class PartitionStates:
    """One partition's share-partition states in the `ShareStateStore` `store()` answers (made at first use): the
    `ShareStatePersister` its leader's `LeaderShares` writes through, keyed by the topic id as the controller has it
    now (a topic deleted and created again starts afresh) and fenced by the leader epoch the replica leads in."""

    def __init__(
        self,
        store: Callable[[], ShareStateStore],
        partition: int,
        topic_id: Callable[[], uuid.UUID],
        leader_epoch: Callable[[], int],
    ) -> None:
        self._store = store
        self._partition = partition
        self._topic_id = topic_id
        self._leader_epoch = leader_epoch

    def read_state(self, group_id: str) -> ShareGroupState:
        return self._store().read_state(self._key(group_id), self._leader_epoch())

    def write_state(self, group_id: str, state: ShareGroupState) -> None:
        self._store().write_state(self._key(group_id), state, self._leader_epoch())

    def _key(self, group_id: str) -> SharePartitionKey:
        return SharePartitionKey(group_id, self._topic_id(), self._partition)
