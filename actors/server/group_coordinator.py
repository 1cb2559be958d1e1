"""The group coordinator: consumer groups' committed offsets, kept as Kafka keeps them.

State it owns, and where it is persisted: the committed offset of every (group, topic, partition), as
records of the internal compacted topic `__consumer_offsets` (created by `start_broker` with
`offsets.topic.num.partitions` partitions). A group's commits all go to partition
`abs(java_string_hashcode(group)) % partitions` (Kafka's `Utils.abs(groupId.hashCode())`, where
`abs(Integer.MIN_VALUE)` is 0), so one group's commits stay ordered. The actor holds a cache of the
latest offset per key. Before a partition is first used (after a start, also after Ray restarts the actor)
it is read from its log start to its high watermark into the cache: the latest value per key wins, a null
value (tombstone) removes the key, and records of other kinds (group metadata, key version 2) are
skipped. A commit is acknowledged only once its record is appended, so a commit that returned survives a
broker restart. Calls are idempotent: committing the same offsets again writes a record that changes nothing.

Record format (Kafka's `OffsetCommitKey` v1 / `OffsetCommitValue` v3; big-endian; a string is an
int16 length followed by that many UTF-8 bytes)::

    key:   version int16 (1) | group string | topic string | partition int32
    value: version int16 (3) | offset int64 | leaderEpoch int32 (-1: unknown) | metadata string
           | commitTimestamp int64 (ms)

Key versions 0 and 1 share this layout; value versions 0..4 all begin with the offset, which is all the
cache needs, so logs written by a Kafka broker read back too.
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from actors.calls import call, check_topic_partition, controller, partition_actor
from actors.clients.broker import CONSUMER_OFFSETS_TOPIC
from storage.clock import SYSTEM_CLOCK
from storage.errors import (
    BrokerNotAvailableError,
    CorruptRecordError,
    InvalidGroupIdError,
    InvalidRequestError,
    UnknownTopicOrPartitionError,
)
from storage.records.record_batch import Record, RecordBatchBuilder, iter_batches

logger = logging.getLogger(__name__)

OFFSET_COMMIT_KEY_VERSION = 1
OFFSET_COMMIT_VALUE_VERSION = 3
# Key versions 0 and 1 are offset commits; 2 is group metadata, which this coordinator does not keep.
OFFSET_COMMIT_KEY_VERSIONS = frozenset({0, 1})
# Value versions Kafka has written so far; all of them start with the offset right after the version.
OFFSET_COMMIT_VALUE_VERSIONS = frozenset(range(5))
NO_LEADER_EPOCH = -1
# Bytes read per call while rebuilding the cache: Kafka's default fetch size for one partition.
LOAD_CHUNK_BYTES = 1024 * 1024

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_VALUE_HEAD = struct.Struct(
    ">"
    "h"  # version
    "q"  # offset
    "i"  # leaderEpoch (from value version 3)
)
_VALUE_VERSION_AND_OFFSET = struct.Struct(">hq")
_INT32_MIN = -(2**31)

GroupTopicPartition = tuple[str, str, int]


def java_string_hashcode(text: str) -> int:
    """Java's `String.hashCode()`: `s[0]*31^(n-1) + ... + s[n-1]` over UTF-16 code units, as a signed int32."""
    value = 0
    for (unit,) in struct.iter_unpack(">H", text.encode("utf-16-be")):
        value = (31 * value + unit) & 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def partition_for_group(group: str, partitions: int) -> int:
    """The `__consumer_offsets` partition holding `group`'s commits."""
    code = java_string_hashcode(group)
    return (0 if code == _INT32_MIN else abs(code)) % partitions


def _encode_string(text: str) -> bytes:
    data = text.encode("utf-8")
    return _INT16.pack(len(data)) + data


def _decode_string(data: bytes, position: int) -> tuple[str, int]:
    (length,) = _INT16.unpack_from(data, position)
    start = position + _INT16.size
    if length < 0 or start + length > len(data):
        raise ValueError(f"string length {length} at byte {position} runs past the {len(data)}-byte record")
    return data[start : start + length].decode("utf-8"), start + length


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return (
        _INT16.pack(OFFSET_COMMIT_KEY_VERSION) + _encode_string(group) + _encode_string(topic) + _INT32.pack(partition)
    )


def encode_offset_commit_value(offset: int, metadata: str, commit_timestamp_ms: int) -> bytes:
    return (
        _VALUE_HEAD.pack(OFFSET_COMMIT_VALUE_VERSION, offset, NO_LEADER_EPOCH)
        + _encode_string(metadata)
        + _INT64.pack(commit_timestamp_ms)
    )


def decode_offset_commit_key(key: bytes) -> GroupTopicPartition | None:
    """(group, topic, partition) of an offset-commit key; None for other key versions (group metadata)."""
    try:
        (version,) = _INT16.unpack_from(key, 0)
        if version not in OFFSET_COMMIT_KEY_VERSIONS:
            return None
        group, position = _decode_string(key, _INT16.size)
        topic, position = _decode_string(key, position)
        (partition,) = _INT32.unpack_from(key, position)
    except (struct.error, ValueError) as exc:
        raise CorruptRecordError(f"malformed offset commit key of {len(key)} bytes: {exc}") from exc
    return group, topic, partition


def decode_offset_commit_offset(value: bytes) -> int:
    """The committed offset of an offset-commit value (any version 0..4)."""
    try:
        version, offset = _VALUE_VERSION_AND_OFFSET.unpack_from(value, 0)
    except struct.error as exc:
        raise CorruptRecordError(f"malformed offset commit value of {len(value)} bytes: {exc}") from exc
    if version not in OFFSET_COMMIT_VALUE_VERSIONS:
        raise CorruptRecordError(f"unknown offset commit value version {version}")
    return offset


def apply_offset_commit(offsets: dict[GroupTopicPartition, int], key: bytes | None, value: bytes | None) -> None:
    """Replays one `__consumer_offsets` record into `offsets`: a commit sets the key's offset, a tombstone
    removes it, other records (group metadata, no key) change nothing. Malformed bytes raise `CorruptRecordError`."""
    if key is None:
        return
    decoded = decode_offset_commit_key(key)
    if decoded is None:
        return
    if value is None:
        offsets.pop(decoded, None)
    else:
        offsets[decoded] = decode_offset_commit_offset(value)


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
