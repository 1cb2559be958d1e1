"""The byte layout of a v2 record batch header (magic 2), its attribute bits, sentinels and control records.

Batch header (61 bytes, all integers big-endian)::

    offset  size  field                 notes
    0       8     baseOffset            assigned by the broker in place; clients send 0
    8       4     batchLength           bytes after this field (total size - 12)
    12      4     partitionLeaderEpoch  stamped by the broker in place; -1 unknown
    16      1     magic                 2 (bytes 0..16 are common to all magics: 17 bytes identify any batch)
    17      4     crc                   CRC-32C (Castagnoli) over bytes [21, end of batch)
    21      2     attributes            bits 0-2 codec, 3 timestamp type, 4 transactional, 5 control,
                                        6 delete horizon set (baseTimestamp holds it); others 0
    23      4     lastOffsetDelta       lastOffset = baseOffset + lastOffsetDelta
    27      8     baseTimestamp         first record's timestamp (or the delete horizon, bit 6)
    35      8     maxTimestamp          max record timestamp (broker time for LogAppendTime)
    43      8     producerId            -1 none
    51      2     producerEpoch         -1 none
    53      4     baseSequence          -1 none; sequences wrap at 2**31-1 back to 0
    57      4     recordsCount          uncompressed record count
    61      ...   records               plain, or one compressed stream of all records (see compression.py)

Because baseOffset and partitionLeaderEpoch lie outside the CRC, the broker assigns offsets without
recomputing it. Offsets below are derived from the struct, never typed in.

A control batch (attribute bit 5) holds one record whose key is `CONTROL_KEY` (version, type); a transaction
marker's value is `END_TXN_MARKER_VALUE` (version, coordinatorEpoch).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

import crc32c

from storage.errors import CorruptRecordError, InvalidConfigError, InvalidRecordError
from storage.records.compression import CompressionType

HEADER = struct.Struct(
    ">"
    "q"  # baseOffset
    "i"  # batchLength
    "i"  # partitionLeaderEpoch
    "b"  # magic
    "I"  # crc
    "h"  # attributes
    "i"  # lastOffsetDelta
    "q"  # baseTimestamp
    "q"  # maxTimestamp
    "q"  # producerId
    "h"  # producerEpoch
    "i"  # baseSequence
    "i"  # recordsCount
)
RECORD_BATCH_OVERHEAD = HEADER.size  # 61
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = struct.calcsize(">q")
LOG_OVERHEAD = struct.calcsize(">qi")  # 12: offset + length, common to every magic
PARTITION_LEADER_EPOCH_OFFSET = LOG_OVERHEAD
MAGIC_OFFSET = struct.calcsize(">qii")  # 16, for every magic
HEADER_SIZE_UP_TO_MAGIC = MAGIC_OFFSET + 1  # 17
CRC_OFFSET = HEADER_SIZE_UP_TO_MAGIC
ATTRIBUTES_OFFSET = struct.calcsize(">qiibI")  # 21: the CRC covers [21, end)
LAST_OFFSET_DELTA_OFFSET = struct.calcsize(">qiibIh")
BASE_TIMESTAMP_OFFSET = struct.calcsize(">qiibIhi")
MAX_TIMESTAMP_OFFSET = struct.calcsize(">qiibIhiq")
RECORDS_COUNT_OFFSET = RECORD_BATCH_OVERHEAD - struct.calcsize(">i")
# The smallest legal value of the length field over all magics: a magic 0 message with null key and value
# (crc 4, magic 1, attributes 1, key length 4, value length 4).
MIN_BATCH_LENGTH_FIELD = struct.calcsize(">Ibbii")

CURRENT_MAGIC = 2
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
# Sequences are int32 and wrap from 2**31-1 back to 0 (Kafka's `DefaultRecordBatch.incrementSequence`).
SEQUENCE_MODULUS = 2**31
NO_PARTITION_LEADER_EPOCH = -1
# A record or batch without a timestamp (magic 0 messages, an empty index, an empty batch's maxTimestamp).
NO_TIMESTAMP = -1

# Attribute bits; magic 0 and 1 messages use the same codec and timestamp-type bits in their int8 attributes.
COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

CONTROL_KEY = struct.Struct(
    ">"
    "h"  # version (0)
    "h"  # control type (`ControlRecordType`)
)
END_TXN_MARKER_VALUE = struct.Struct(
    ">"
    "h"  # version (0)
    "i"  # coordinatorEpoch
)

_UINT32 = struct.Struct(">I")


class TimestampType(enum.IntEnum):
    """Attribute bit 3 (magic >= 1); magic 0 has no timestamps."""

    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1

    @property
    def kafka_name(self) -> str:
        """`CreateTime`, `LogAppendTime` or `NoTimestampType`, as Kafka's tools print them."""
        return {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime"}[int(self)]

    @classmethod
    def from_name(cls, name: str) -> TimestampType:
        """Parses Kafka's `message.timestamp.type` values."""
        for member in cls:
            if member.kafka_name == name:
                return member
        raise InvalidConfigError(f"unknown timestamp type {name!r}; expected CreateTime or LogAppendTime")

    @classmethod
    def from_attributes(cls, attributes: int) -> TimestampType:
        """The type attribute bit 3 sets (magic 1 and 2)."""
        return cls.LOG_APPEND_TIME if attributes & TIMESTAMP_TYPE_MASK else cls.CREATE_TIME


class ControlRecordType(enum.IntEnum):
    """The `type` field of a control record's key (transaction markers and KRaft records)."""

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6

    @classmethod
    def from_key(cls, key: bytes | None) -> ControlRecordType:
        """The type in a control record's key; UNKNOWN for a key shorter than `CONTROL_KEY` or an unknown type."""
        if key is None or len(key) < CONTROL_KEY.size:
            return cls.UNKNOWN
        _, type_id = CONTROL_KEY.unpack_from(key)
        return cls(type_id) if type_id in cls._value2member_map_ else cls.UNKNOWN


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    """A transaction marker's meaning (Kafka's `EndTransactionMarker`): COMMIT or ABORT, and the epoch of the
    transaction coordinator that wrote it."""

    control_type: ControlRecordType
    coordinator_epoch: int

    @classmethod
    def parse(cls, key: bytes | None, value: bytes | None) -> EndTransactionMarker | None:
        """The marker a control record holds; None for a control record of another type (KRaft's). Raises
        `CorruptRecordError` for a key or value shorter than its layout or with a negative version; a version
        above 0 is read as version 0, as Kafka does."""
        if key is None or len(key) < CONTROL_KEY.size:
            raise CorruptRecordError(f"control record key must be at least {CONTROL_KEY.size} bytes")
        key_version, _ = CONTROL_KEY.unpack_from(key)
        if key_version < 0:
            raise CorruptRecordError(f"control record key version {key_version} is invalid")
        control_type = ControlRecordType.from_key(key)
        if control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            return None
        if value is None or len(value) < END_TXN_MARKER_VALUE.size:
            raise CorruptRecordError(f"transaction marker value must be at least {END_TXN_MARKER_VALUE.size} bytes")
        value_version, coordinator_epoch = END_TXN_MARKER_VALUE.unpack_from(value)
        if value_version < 0:
            raise CorruptRecordError(f"transaction marker value version {value_version} is invalid")
        return cls(control_type, coordinator_epoch)


def encode_attributes(
    compression: CompressionType,
    timestamp_type: TimestampType,
    *,
    is_transactional: bool,
    is_control: bool,
    has_delete_horizon: bool,
) -> int:
    """The int16 attributes field: codec in bits 0-2, then the flag bits (see the module docstring)."""
    attributes = int(compression)
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG_MASK
    if is_control:
        attributes |= CONTROL_FLAG_MASK
    if has_delete_horizon:
        attributes |= DELETE_HORIZON_FLAG_MASK
    return attributes


def encode_batch(
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    records_count: int,
    payload: bytes,
) -> bytes:
    """Frames an already encoded (and compressed) records section as a v2 batch and computes its CRC.

    A field outside its header type's range raises `InvalidRecordError`.
    """
    out = bytearray(RECORD_BATCH_OVERHEAD + len(payload))
    try:
        HEADER.pack_into(
            out,
            0,
            base_offset,
            len(out) - LOG_OVERHEAD,
            partition_leader_epoch,
            CURRENT_MAGIC,
            0,
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            records_count,
        )
    except struct.error as exc:
        raise InvalidRecordError(f"record batch header field out of range: {exc}") from exc
    out[RECORD_BATCH_OVERHEAD:] = payload
    _UINT32.pack_into(out, CRC_OFFSET, crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)
