"""The records of the internal topic `__consumer_offsets`: Kafka's OffsetCommit key and value, and which
partition holds a group's commits.

Record format (Kafka's `OffsetCommitKey` v1 / `OffsetCommitValue` v3; big-endian; a string is an int16 length
followed by that many UTF-8 bytes)::

    key:   version int16 (1) | group string | topic string | partition int32
    value: version int16 (3) | offset int64 | leaderEpoch int32 (-1: unknown) | metadata string
           | commitTimestamp int64 (ms)

Key versions 0 and 1 share this layout; 2 is group metadata (`version int16 (2) | group string`), which raybroker
does not keep: it only writes its tombstone when a group dies, as Kafka does, so that a log Kafka wrote forgets the
group's metadata once compacted. Value versions 0..4
all begin with the offset, which is all a reader needs, so logs written by a Kafka broker read back too. A null
value (a tombstone) deletes the key's commit. A group's commits all go to partition
`abs(java_string_hashcode(group)) % partitions` (Kafka's `Utils.abs(groupId.hashCode())`, where
`abs(Integer.MIN_VALUE)` is 0), so one group's commits stay ordered.

Bytes that break this format raise `CorruptRecordError`, as any malformed record read from a log does.
"""

from __future__ import annotations

import struct

from storage.errors import CorruptRecordError

OFFSET_COMMIT_KEY_VERSION = 1
OFFSET_COMMIT_VALUE_VERSION = 3
# Key versions 0 and 1 are offset commits; 2 is group metadata.
OFFSET_COMMIT_KEY_VERSIONS = frozenset({0, 1})
GROUP_METADATA_KEY_VERSION = 2
# Value versions Kafka has written so far; all of them start with the offset right after the version.
OFFSET_COMMIT_VALUE_VERSIONS = frozenset(range(5))
NO_LEADER_EPOCH = -1

_INT16 = struct.Struct(">h")  # a version, or a string's length
_INT32 = struct.Struct(">i")  # the key's partition
_INT64 = struct.Struct(">q")  # the value's commitTimestamp
_VALUE_HEAD = struct.Struct(
    ">"
    "h"  # version
    "q"  # offset
    "i"  # leaderEpoch (from value version 3)
)
_VALUE_VERSION_AND_OFFSET = struct.Struct(
    ">"
    "h"  # version
    "q"  # offset
)
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
    except (struct.error, UnicodeDecodeError) as exc:
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
    return int(offset)


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
