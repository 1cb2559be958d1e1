"""The records of the internal topic `__consumer_offsets`: Kafka's OffsetCommit key and value, and which
partition holds a group's commits.

Record format (Kafka's `OffsetCommitKey` v1 / `OffsetCommitValue` v4; big-endian; a string is an int16 length
followed by that many UTF-8 bytes, a compact string an unsigned varint length + 1 followed by them)::

    key:      version int16 (1) | group string | topic string | partition int32
    value v4: version int16 (4) | offset int64 | leaderEpoch int32 (-1: unknown) | metadata compact string
              | commitTimestamp int64 (ms) | tagged fields (unsigned varint count, then per field: tag, size, bytes)

Kafka 4.2 writes value v4 (`GroupCoordinatorRecordHelpers.offsetCommitValueVersion`; v1 only for a commit that
asked for a retention time, OffsetCommit v2-4's `retention_time_ms`, which raybroker does not keep), and so does
raybroker, with no tagged field. Kafka adds tag 0, the topic id (16 bytes), to a commit of OffsetCommit v10, which
names its topics by id; raybroker does not keep topic ids with commits, and reading skips every tag. Kafka 3.5+ reads
v4 (its first flexible version, KIP-915). The older values, all read back so that logs a Kafka broker wrote load too::

    v0, v2:   version int16 | offset int64 | metadata string | commitTimestamp int64
    v1:       version int16 (1) | offset int64 | metadata string | commitTimestamp int64 | expireTimestamp int64
    v3:       version int16 (3) | offset int64 | leaderEpoch int32 | metadata string | commitTimestamp int64

A value before v3 has no leader epoch: it reads as -1, as Kafka's default. Reading stops after the metadata, the
last field the cache keeps (`OffsetAndMetadata`). A null value (a tombstone) deletes the key's commit.

Key versions 0 and 1 share the key layout; 2 is group metadata (`version int16 (2) | group string`), which raybroker
does not keep: it only writes its tombstone when a group dies, as Kafka does, so that a log Kafka wrote forgets the
group's metadata once compacted. A group's commits all go to partition `abs(java_string_hashcode(group)) %
partitions` (Kafka's `Utils.abs(groupId.hashCode())`, where `abs(Integer.MIN_VALUE)` is 0), so one group's commits
stay ordered.

Bytes that break this format raise `CorruptRecordError`, as any malformed record read from a log does.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from storage.errors import CorruptRecordError
from storage.records.varint import encode_unsigned_varint

OFFSET_COMMIT_KEY_VERSION = 1
OFFSET_COMMIT_VALUE_VERSION = 4
# Key versions 0 and 1 are offset commits; 2 is group metadata.
OFFSET_COMMIT_KEY_VERSIONS = frozenset({0, 1})
GROUP_METADATA_KEY_VERSION = 2
# The first value version with a leader epoch, and the first in Kafka's flexible encoding (compact metadata string,
# tagged fields at the end).
FIRST_LEADER_EPOCH_VALUE_VERSION = 3
FIRST_FLEXIBLE_VALUE_VERSION = 4
# Value versions Kafka has written so far.
OFFSET_COMMIT_VALUE_VERSIONS = frozenset(range(5))
NO_LEADER_EPOCH = -1
# An unsigned varint of an int32 (a compact string's length + 1) takes at most 5 bytes of 7 bits.
_UVARINT32_MAX_BYTES = 5

_INT16 = struct.Struct(">h")  # a version, or a string's length
_INT32 = struct.Struct(">i")  # the key's partition, the value's leaderEpoch
_INT64 = struct.Struct(">q")  # the value's commitTimestamp
_VALUE_HEAD = struct.Struct(
    ">"
    "h"  # version
    "q"  # offset
)
_NO_TAGGED_FIELDS = b"\x00"
_INT32_MIN = -(2**31)

GroupTopicPartition = tuple[str, str, int]


@dataclass(frozen=True)
class OffsetAndMetadata:
    """One committed offset as Kafka keeps it: the position to resume from, the leader epoch of the last record
    consumed (KIP-320; `NO_LEADER_EPOCH` when the client sent none) and the client's metadata string (Kafka
    Streams keeps each partition's stream time there)."""

    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""


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
        raise CorruptRecordError(
            f"malformed offset commit key: string length {length} at byte {position} runs past its {len(data)} bytes"
        )
    return data[start : start + length].decode("utf-8"), start + length


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return (
        _INT16.pack(OFFSET_COMMIT_KEY_VERSION) + _encode_string(group) + _encode_string(topic) + _INT32.pack(partition)
    )


def encode_group_metadata_key(group: str) -> bytes:
    """The key of `group`'s metadata record (Kafka's `GroupMetadataKey`), whose tombstone marks the group dead."""
    return _INT16.pack(GROUP_METADATA_KEY_VERSION) + _encode_string(group)


def encode_offset_commit_value(committed: OffsetAndMetadata, commit_timestamp_ms: int) -> bytes:
    """A commit's value, as Kafka 4.2 writes it (v4, see the module docstring)."""
    metadata = committed.metadata.encode("utf-8")
    return (
        _VALUE_HEAD.pack(OFFSET_COMMIT_VALUE_VERSION, committed.offset)
        + _INT32.pack(committed.leader_epoch)
        + encode_unsigned_varint(len(metadata) + 1)
        + metadata
        + _INT64.pack(commit_timestamp_ms)
        + _NO_TAGGED_FIELDS
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
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"malformed offset commit key of {len(key)} bytes: {exc}") from exc
    return group, topic, partition


def decode_offset_commit_value(value: bytes) -> OffsetAndMetadata:
    """The offset, leader epoch (-1 before v3) and metadata of an offset-commit value of any version 0..4."""
    try:
        version, offset = _VALUE_HEAD.unpack_from(value, 0)
        if version not in OFFSET_COMMIT_VALUE_VERSIONS:
            raise CorruptRecordError(f"unknown offset commit value version {version}")
        position = _VALUE_HEAD.size
        leader_epoch = NO_LEADER_EPOCH
        if version >= FIRST_LEADER_EPOCH_VALUE_VERSION:
            (leader_epoch,) = _INT32.unpack_from(value, position)
            position += _INT32.size
        if version >= FIRST_FLEXIBLE_VALUE_VERSION:
            length, position = _decode_uvarint(value, position)
            length -= 1
        else:
            (length,) = _INT16.unpack_from(value, position)
            position += _INT16.size
        if length < 0 or position + length > len(value):
            raise CorruptRecordError(
                f"malformed offset commit value: metadata length {length} at byte {position} runs past its "
                f"{len(value)} bytes"
            )
        metadata = value[position : position + length].decode("utf-8")
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"malformed offset commit value of {len(value)} bytes: {exc}") from exc
    return OffsetAndMetadata(int(offset), int(leader_epoch), metadata)


def apply_offset_commit(
    offsets: dict[GroupTopicPartition, OffsetAndMetadata], key: bytes | None, value: bytes | None
) -> None:
    """Replays one `__consumer_offsets` record into `offsets`: a commit sets the key's offset, leader epoch and
    metadata, a tombstone removes it, other records (group metadata, no key) change nothing. Malformed bytes raise
    `CorruptRecordError`."""
    if key is None:
        return
    decoded = decode_offset_commit_key(key)
    if decoded is None:
        return
    if value is None:
        offsets.pop(decoded, None)
    else:
        offsets[decoded] = decode_offset_commit_value(value)


def _decode_uvarint(data: bytes, position: int) -> tuple[int, int]:
    """The unsigned varint at `position` and the position after it."""
    value = 0
    for index in range(_UVARINT32_MAX_BYTES):
        if position >= len(data):
            break
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << (7 * index)
        if not byte & 0x80:
            return value, position
    raise CorruptRecordError(f"malformed offset commit value: unsigned varint at byte {position} is cut or too long")
