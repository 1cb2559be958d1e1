"""The group coordinator: consumer groups' committed offsets, kept as Kafka keeps them.

State it owns, and where it is persisted: the committed offset of every (group, topic, partition), as
records of the internal compacted topic `__consumer_offsets` (created by `start_broker` with
`offsets.topic.num.partitions` partitions). A group's commits all go to partition
`partition_for_group(group, partitions)`, so one group's commits stay ordered. The actor holds a cache of the
latest offset per key. Before a partition is first used (after a start, also after Ray restarts the actor)
it is read from its log start to its high watermark into the cache: the latest value per key wins, a null
value (tombstone) removes the key, and records of other kinds (group metadata, key version 2) are
skipped. A commit is acknowledged only once its record is appended, so a commit that returned survives a
broker restart. Calls are idempotent: committing the same offsets again writes a record that changes nothing.

The records are Kafka's OffsetCommit key and value (`storage.records.consumer_offsets`), so logs written by a
Kafka broker read back too.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from actors.calls import call, check_topic_partition, controller, partition_actor
from actors.server.internal_topics import CONSUMER_OFFSETS_TOPIC
from storage.clock import SYSTEM_CLOCK
from storage.errors import (
    BrokerNotAvailableError,
    CorruptRecordError,
    InvalidGroupIdError,
    InvalidRequestError,
    UnknownTopicOrPartitionError,
)
from storage.records.consumer_offsets import (
    GroupTopicPartition,
    apply_offset_commit,
    encode_offset_commit_key,
    encode_offset_commit_value,
    partition_for_group,
)
from storage.records.record import Record
from storage.records.record_batch import RecordBatchBuilder, iter_batches

logger = logging.getLogger(__name__)

# Bytes read per call while rebuilding the cache: Kafka's default fetch size for one partition.
LOAD_CHUNK_BYTES = 1024 * 1024


class GroupCoordinatorActor:
    """Committed offsets of consumer groups; see the module docstring. Thread-safe (one lock).

    Each `__consumer_offsets` partition is loaded into the cache before its first use (Kafka loads a
    partition when it becomes its leader): `ready()` loads every partition it can reach, and one hosted by a
    broker that is not up yet (a cluster starting node by node) is loaded by the first call that needs it,
    which fails with the retriable `BrokerNotAvailableError` until then.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        metadata = call(controller().describe_topic.remote(CONSUMER_OFFSETS_TOPIC))
        self._partition_count = len(metadata.partitions)
        self._handles: dict[int, Any] = {}
        self._offsets: dict[GroupTopicPartition, int] = {}

    def ready(self) -> int:
        """Loads every partition it can reach now; returns how many are loaded (the others load on first use)."""
        with self._lock:
            for partition in range(self._partition_count):
                try:
                    self._loaded_partition(partition)
                except BrokerNotAvailableError as exc:
                    logger.warning("%s-%d not loaded yet: %s", CONSUMER_OFFSETS_TOPIC, partition, exc)
            return len(self._handles)

    def _loaded_partition(self, partition: int) -> Any:
        """The partition's actor handle, once its records are in the cache. Called with the lock held."""
        handle = self._handles.get(partition)
        if handle is None:
            try:
                handle = partition_actor(CONSUMER_OFFSETS_TOPIC, partition)
            except UnknownTopicOrPartitionError as exc:
                raise BrokerNotAvailableError(f"the group coordinator cannot load its partition yet: {exc}") from exc
            self._load(partition, handle)
            self._handles[partition] = handle
        return handle

    def _load(self, partition: int, handle: Any) -> None:
        log_start_offset, high_watermark, _ = call(handle.offsets.remote())
        offset = log_start_offset
        while offset < high_watermark:
            next_offset = offset
            for batch in iter_batches(call(handle.read.remote(offset, LOAD_CHUNK_BYTES))):
                if not batch.is_control:
                    for record in batch.records():
                        self._apply(partition, record)
                next_offset = batch.next_offset
            if next_offset <= offset:
                raise CorruptRecordError(
                    f"{CONSUMER_OFFSETS_TOPIC}-{partition}: a read at offset {offset} below the high watermark "
                    f"{high_watermark} returned no batch",
                    offset=offset,
                )
            offset = next_offset

    def _apply(self, partition: int, record: Record) -> None:
        try:
            apply_offset_commit(self._offsets, record.key, record.value)
        except CorruptRecordError as exc:
            logger.warning("%s-%d offset %d skipped: %s", CONSUMER_OFFSETS_TOPIC, partition, record.offset, exc)

    def partition_for(self, group: str) -> int:
        _check_group(group)
        return partition_for_group(group, self._partition_count)

    def commit(self, group: str, offsets: Mapping[tuple[str, int], int], metadata: str = "") -> None:
        """Durably records `group`'s offsets (one batch on the group's partition), then caches them."""
        _check_group(group)
        checked = {
            check_topic_partition(tp, InvalidRequestError): _check_offset(tp, offset) for tp, offset in offsets.items()
        }
        if not isinstance(metadata, str):
            raise InvalidRequestError(f"commit metadata must be a str, not {type(metadata).__name__}")
        if not checked:
            return
        now_ms = SYSTEM_CLOCK.milliseconds()
        builder = RecordBatchBuilder()
        for (topic, partition), offset in checked.items():
            builder.append(
                encode_offset_commit_key(group, topic, partition),
                encode_offset_commit_value(offset, metadata, now_ms),
                timestamp=now_ms,
            )
        # Held across the append so two commits of one group reach the log and the cache in the same order.
        with self._lock:
            handle = self._loaded_partition(partition_for_group(group, self._partition_count))
            call(handle.append.remote(builder.build()))
            for (topic, partition), offset in checked.items():
                self._offsets[(group, topic, partition)] = offset

    def fetch_committed(
        self, group: str, topic_partitions: Iterable[tuple[str, int]]
    ) -> dict[tuple[str, int], int | None]:
        """The committed offset of each (topic, partition) for `group`, None where it has none."""
        _check_group(group)
        wanted = [check_topic_partition(tp, InvalidRequestError) for tp in topic_partitions]
        with self._lock:
            self._loaded_partition(partition_for_group(group, self._partition_count))
            return {(topic, partition): self._offsets.get((group, topic, partition)) for topic, partition in wanted}


def _check_group(group: object) -> None:
    if not isinstance(group, str) or not group:
        raise InvalidGroupIdError(f"a group id must be a non-empty str, not {group!r}")


def _check_offset(tp: tuple[str, int], offset: object) -> int:
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise InvalidRequestError(f"committed offset of {tp[0]}-{tp[1]} must be an int >= 0, got {offset!r}")
    return offset
