"""The records of the internal topic `__transaction_state`: Kafka's TransactionLogKey and TransactionLogValue, and
which partition holds a transactional id.

Record format (big-endian; a string is an int16 length then UTF-8 bytes; an array an int32 count, -1 = null)::

    key:      version int16 (0) | transactional_id string
    value v0: version int16 (0) | producer_id int64 | producer_epoch int16 | transaction_timeout_ms int32
              | transaction_status int8 | transaction_partitions [topic string | partition_ids [int32]]
              | transaction_last_update_timestamp_ms int64 | transaction_start_timestamp_ms int64

Value v1 has the same fields in the same order in Kafka's flexible encoding: the partitions array, each topic and
each partition-id array carry an unsigned varint length + 1 (0 = null), every partition entry and the value end
with a tagged-field section. Kafka 4 defines three tags on the value: 0 the previous producer id (int64), 1 the next
producer id (int64: the id a transactions-v2 producer was given when its epoch ran out, before the markers of its
last transaction were all written), 2 the client's transaction version (int16); each is written only when it is not
its default (-1, -1, 0), and unknown tags are skipped. A value with every tag at its default is written as v0, which
Kafka 3.9 and 4 both read; one with a tag set as v1.

Status byte: 0 Empty, 1 Ongoing, 2 PrepareCommit, 3 PrepareAbort, 4 CompleteCommit, 5 CompleteAbort (6 Dead and
7 PrepareEpochFence are never written: an expired id is a tombstone, a null value). The partitions are written as
null for Empty and as an empty array for the Complete states, as Kafka writes them.

A transactional id's records all go to partition `abs(java_string_hashcode(id)) % partitions`, the formula of the
group coordinator (`storage.records.consumer_offsets.partition_for_group`). Bytes that break this format raise
`CorruptRecordError`, as any malformed record read from a log does.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from storage.errors import CorruptRecordError
from storage.records.consumer_offsets import partition_for_group
from storage.records.varint import encode_unsigned_varint

TRANSACTION_LOG_KEY_VERSION = 0
TRANSACTION_LOG_VALUE_VERSION = 0
FLEXIBLE_VALUE_VERSION = 1
STATUS_EMPTY = 0
STATUS_COMPLETE_COMMIT = 4
STATUS_COMPLETE_ABORT = 5
# The statuses a value may carry; 6 (Dead) and 7 (PrepareEpochFence) are never written.
WRITTEN_STATUSES = frozenset(range(6))

_INT16 = struct.Struct(">h")  # a version, or a string's length
_INT32 = struct.Struct(">i")  # an array's count, or a partition id
_INT64 = struct.Struct(">q")  # a tagged producer id
# Kafka 4's tags on the value (see the module docstring).
PREVIOUS_PRODUCER_ID_TAG = 0
NEXT_PRODUCER_ID_TAG = 1
CLIENT_TRANSACTION_VERSION_TAG = 2
_VALUE_HEAD = struct.Struct(
    ">"
    "h"  # version
    "q"  # producer_id
    "h"  # producer_epoch
    "i"  # transaction_timeout_ms
    "b"  # transaction_status
)
_VALUE_TAIL = struct.Struct(
    ">"
    "q"  # transaction_last_update_timestamp_ms
    "q"  # transaction_start_timestamp_ms
)
# An unsigned varint of the flexible encoding is at most 5 bytes for an int32 length.
_UVARINT_MAX_BYTES = 5


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    """One transactional id's state as `__transaction_state` stores it; `partitions` is sorted by (topic,
    partition) when written."""

    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_status: int
    partitions: tuple[tuple[str, int], ...]
    last_update_timestamp_ms: int
    start_timestamp_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0

    @property
    def flexible(self) -> bool:
        """Whether the value needs v1 (a tagged field away from its default)."""
        return (self.previous_producer_id, self.next_producer_id, self.client_transaction_version) != (-1, -1, 0)


def partition_for_transactional_id(transactional_id: str, partitions: int) -> int:
    """The `__transaction_state` partition holding `transactional_id` (Kafka's `partitionFor`)."""
    return partition_for_group(transactional_id, partitions)


def _encode_string(text: str) -> bytes:
    data = text.encode("utf-8")
    return _INT16.pack(len(data)) + data


def encode_transaction_log_key(transactional_id: str) -> bytes:
    return _INT16.pack(TRANSACTION_LOG_KEY_VERSION) + _encode_string(transactional_id)


def encode_transaction_log_value(value: TransactionLogValue) -> bytes:
    """Value v0, or v1 when a tagged field is set (see the module docstring); partitions null when Empty (Kafka's
    writer does that), grouped by topic otherwise."""
    if value.transaction_status not in WRITTEN_STATUSES:
        raise CorruptRecordError(f"transaction status {value.transaction_status} is never written")
    flexible = value.flexible
    head = _VALUE_HEAD.pack(
        FLEXIBLE_VALUE_VERSION if flexible else TRANSACTION_LOG_VALUE_VERSION,
        value.producer_id,
        value.producer_epoch,
        value.transaction_timeout_ms,
        value.transaction_status,
    )
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(value.partitions):
        by_topic.setdefault(topic, []).append(partition)
    if not flexible:
        if value.transaction_status == STATUS_EMPTY:
            partitions = _INT32.pack(-1)
        else:
            partitions = _INT32.pack(len(by_topic)) + b"".join(
                _encode_string(topic) + _INT32.pack(len(ids)) + b"".join(_INT32.pack(p) for p in ids)
                for topic, ids in by_topic.items()
            )
        return head + partitions + _VALUE_TAIL.pack(value.last_update_timestamp_ms, value.start_timestamp_ms)
    if value.transaction_status == STATUS_EMPTY:
        partitions = encode_unsigned_varint(0)
    else:
        partitions = encode_unsigned_varint(len(by_topic) + 1) + b"".join(
            _compact_string(topic)
            + encode_unsigned_varint(len(ids) + 1)
            + b"".join(_INT32.pack(p) for p in ids)
            + encode_unsigned_varint(0)
            for topic, ids in by_topic.items()
        )
    tags = [
        (tag, data)
        for tag, data, default in (
            (PREVIOUS_PRODUCER_ID_TAG, _INT64.pack(value.previous_producer_id), value.previous_producer_id == -1),
            (NEXT_PRODUCER_ID_TAG, _INT64.pack(value.next_producer_id), value.next_producer_id == -1),
            (
                CLIENT_TRANSACTION_VERSION_TAG,
                _INT16.pack(value.client_transaction_version),
                value.client_transaction_version == 0,
            ),
        )
        if not default
    ]
    tagged = encode_unsigned_varint(len(tags)) + b"".join(
        encode_unsigned_varint(tag) + encode_unsigned_varint(len(data)) + data for tag, data in tags
    )
    return head + partitions + _VALUE_TAIL.pack(value.last_update_timestamp_ms, value.start_timestamp_ms) + tagged


def _compact_string(text: str) -> bytes:
    data = text.encode("utf-8")
    return encode_unsigned_varint(len(data) + 1) + data


class _Reader:
    """A cursor over one record's key or value that raises only `struct.error` / `ValueError` on bad bytes (the
    public decoders turn them into `CorruptRecordError`)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0

    def unpack(self, layout: struct.Struct) -> tuple[int, ...]:
        values = layout.unpack_from(self.data, self.position)
        self.position += layout.size
        return values

    def int32(self) -> int:
        return self.unpack(_INT32)[0]

    def uvarint(self) -> int:
        value = 0
        for index in range(_UVARINT_MAX_BYTES):
            byte = self.data[self.position]
            self.position += 1
            value |= (byte & 0x7F) << (7 * index)
            if not byte & 0x80:
                return value
        raise ValueError("unsigned varint longer than 5 bytes")

    def raw(self, length: int) -> bytes:
        if length < 0 or self.position + length > len(self.data):
            raise ValueError(f"{length} bytes at {self.position} run past the end ({len(self.data)} bytes)")
        chunk = self.data[self.position : self.position + length]
        self.position += length
        return chunk

    def string(self, flexible: bool) -> str:
        length = self.uvarint() - 1 if flexible else self.unpack(_INT16)[0]
        return self.raw(length).decode("utf-8")

    def count(self, flexible: bool) -> int:
        """An array's length; -1 for null."""
        return self.uvarint() - 1 if flexible else self.int32()

    def skip_tagged_fields(self) -> None:
        self.tagged_fields()

    def tagged_fields(self) -> dict[int, bytes]:
        """A tagged-field section: each tag's bytes."""
        fields = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            fields[tag] = self.raw(self.uvarint())
        return fields


def decode_transaction_log_key(key: bytes) -> str | None:
    """The transactional id of a key; None for a key version Kafka may add later (loading skips it)."""
    try:
        reader = _Reader(key)
        (version,) = reader.unpack(_INT16)
        if version != TRANSACTION_LOG_KEY_VERSION:
            return None
        return reader.string(flexible=False)
    except (struct.error, ValueError, IndexError) as exc:
        raise CorruptRecordError(f"malformed transaction log key of {len(key)} bytes: {exc}") from exc


def decode_transaction_log_value(value: bytes) -> TransactionLogValue:
    """A value of version 0 or 1 (see the module docstring)."""
    try:
        reader = _Reader(value)
        version, producer_id, producer_epoch, timeout_ms, status = reader.unpack(_VALUE_HEAD)
        if version not in (TRANSACTION_LOG_VALUE_VERSION, FLEXIBLE_VALUE_VERSION):
            raise ValueError(f"unknown value version {version}")
        if status not in WRITTEN_STATUSES:
            raise ValueError(f"unknown transaction status {status}")
        flexible = version == FLEXIBLE_VALUE_VERSION
        partitions: list[tuple[str, int]] = []
        for _ in range(max(reader.count(flexible), 0)):
            topic = reader.string(flexible)
            partitions.extend((topic, reader.int32()) for _ in range(max(reader.count(flexible), 0)))
            if flexible:
                reader.skip_tagged_fields()
        last_update_ms, start_ms = reader.unpack(_VALUE_TAIL)
        tags = reader.tagged_fields() if flexible else {}
        previous = _INT64.unpack(tags[PREVIOUS_PRODUCER_ID_TAG])[0] if PREVIOUS_PRODUCER_ID_TAG in tags else -1
        following = _INT64.unpack(tags[NEXT_PRODUCER_ID_TAG])[0] if NEXT_PRODUCER_ID_TAG in tags else -1
        client_version = (
            _INT16.unpack(tags[CLIENT_TRANSACTION_VERSION_TAG])[0] if CLIENT_TRANSACTION_VERSION_TAG in tags else 0
        )
    except (struct.error, ValueError, IndexError) as exc:
        raise CorruptRecordError(f"malformed transaction log value of {len(value)} bytes: {exc}") from exc
    return TransactionLogValue(
        producer_id,
        producer_epoch,
        timeout_ms,
        status,
        tuple(partitions),
        last_update_ms,
        start_ms,
        previous,
        following,
        client_version,
    )
