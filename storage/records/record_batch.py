"""Kafka record batches, format v2 (`magic` 2): the unit of every append, fetch and file.

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

Record (inside the records section; varints are zig-zag, base-128, little-endian groups, at most 5 bytes,
varlongs at most 10)::

    length varint (bytes of the body that follows) | attributes int8 (0) | timestampDelta varlong
    | offsetDelta varint | keyLength varint (-1 = null) | key | valueLength varint (-1 = null) | value
    | headerCount varint | per header: keyLength varint (>= 0) | UTF-8 key | valueLength varint (-1 = null) | value

Because baseOffset and partitionLeaderEpoch lie outside the CRC, the broker assigns offsets without
recomputing it. Decoding is strict: after `recordsCount` records the section must be consumed exactly.
Header problems and CRC mismatches raise `CorruptRecordError`; malformed records raise
`InvalidRecordError` (Kafka's INVALID_RECORD); nothing else escapes.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, overload

import crc32c

from storage.errors import CorruptRecordError, InvalidConfigError, InvalidRecordError, StorageError
from storage.records.compression import CompressionType, compress, decompress

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
MAGIC_OFFSET = struct.calcsize(">qii")  # 16
HEADER_SIZE_UP_TO_MAGIC = MAGIC_OFFSET + 1  # 17
CRC_OFFSET = HEADER_SIZE_UP_TO_MAGIC
ATTRIBUTES_OFFSET = struct.calcsize(">qiibI")  # 21: the CRC covers [21, end)
LAST_OFFSET_DELTA_OFFSET = ATTRIBUTES_OFFSET + 2
BASE_TIMESTAMP_OFFSET = LAST_OFFSET_DELTA_OFFSET + 4
MAX_TIMESTAMP_OFFSET = BASE_TIMESTAMP_OFFSET + 8
RECORDS_COUNT_OFFSET = RECORD_BATCH_OVERHEAD - 4
# The smallest legal value of the length field over all magics (a v0 message with no key and value).
MIN_BATCH_LENGTH_FIELD = 14
# Below this many records a batch is decoded record by record: numpy's fixed cost (~60 calls of ~1.5 us) is
# more than the ~4 us a record of the Python decoder.
COLUMNS_MIN_RECORDS = 32

CURRENT_MAGIC = 2
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")
_CONTROL_KEY = struct.Struct(">hh")  # version, type
_END_TXN_VALUE = struct.Struct(">hi")  # version, coordinatorEpoch


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


Header = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record: absolute offset and timestamp, key/value (None = null), headers."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


# --- zig-zag varints ---------------------------------------------------------------------------------


def encode_varint(value: int) -> bytes:
    """Zig-zag + base-128 encoding of a signed 64-bit value; `InvalidRecordError` outside int64."""
    if not -(2**63) <= value < 2**63:
        raise InvalidRecordError(f"{value} does not fit in a varlong (int64)")
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag > 0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def decode_varint(buffer: bytes | memoryview, position: int, max_bytes: int = 10) -> tuple[int, int]:
    """Decodes a zig-zag varint at `position`; returns (value, next position).

    `max_bytes` is 5 for a varint (int32) and 10 for a varlong. Raises `InvalidRecordError` on a
    truncated or over-long encoding, or one whose value does not fit in int32 / int64 (Java's reader
    silently drops those high bits; no Kafka writer sets them).
    """
    # 5 groups of 7 bits carry 35 bits for a 32-bit zig-zag value, 10 groups carry 70 for a 64-bit one.
    value_bits = 32 if max_bytes <= 5 else 64
    result = 0
    shift = 0
    end = len(buffer)
    for _ in range(max_bytes):
        if position >= end:
            raise InvalidRecordError("varint runs past the end of the record data", position=position)
        byte = buffer[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            if result >> value_bits:
                raise InvalidRecordError(f"varint does not fit in {value_bits} bits", position=position)
            return (result >> 1) ^ -(result & 1), position
        shift += 7
    raise InvalidRecordError(f"varint longer than {max_bytes} bytes", position=position)


def varint_size(value: int) -> int:
    """Number of bytes `encode_varint(value)` takes."""
    zigzag = (value << 1) ^ (value >> 63)
    size = 1
    while zigzag > 0x7F:
        zigzag >>= 7
        size += 1
    return size


# --- decoding ----------------------------------------------------------------------------------------


def decode_records(
    data: bytes | memoryview, count: int, base_offset: int, base_timestamp: int, log_append_time: int | None
) -> list[Record]:
    """Decodes `count` records from an (uncompressed) records section, strictly.

    `log_append_time` replaces every record's timestamp when the batch uses LogAppendTime.
    """
    if count < 0:
        raise InvalidRecordError(f"negative record count {count}")
    records: list[Record] = []
    position = 0
    end = len(data)
    for _ in range(count):
        length, position = decode_varint(data, position, 5)
        body_start = position
        if length < 0 or body_start + length > end:
            raise InvalidRecordError(f"record length {length} overruns the batch", position=body_start)
        body_end = body_start + length
        position += 1  # attributes, unused
        timestamp_delta, position = decode_varint(data, position, 10)
        offset_delta, position = decode_varint(data, position, 5)
        key, position = _decode_nullable_bytes(data, position, body_end, "record key")
        value, position = _decode_nullable_bytes(data, position, body_end, "record value")
        header_count, position = decode_varint(data, position, 5)
        if header_count < 0 or header_count > body_end - position:
            raise InvalidRecordError(f"invalid header count {header_count}", position=position)
        headers: list[Header] = []
        for _ in range(header_count):
            header_key_length, position = decode_varint(data, position, 5)
            if header_key_length < 0 or position + header_key_length > body_end:
                raise InvalidRecordError(f"invalid header key length {header_key_length}", position=position)
            try:
                header_key = bytes(data[position : position + header_key_length]).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InvalidRecordError("header key is not UTF-8", position=position) from exc
            position += header_key_length
            header_value, position = _decode_nullable_bytes(data, position, body_end, "header value")
            headers.append((header_key, header_value))
        if position != body_end:
            raise InvalidRecordError(
                f"record body is {position - body_start} bytes but its length field says {length}", position=position
            )
        timestamp = log_append_time if log_append_time is not None else base_timestamp + timestamp_delta
        if not -(2**63) <= timestamp < 2**63:
            raise InvalidRecordError(f"record timestamp {timestamp} does not fit in int64", position=body_start)
        records.append(Record(base_offset + offset_delta, timestamp, key, value, tuple(headers)))
    if position != end:
        raise InvalidRecordError(f"incorrect declared batch size: {end - position} bytes left after {count} records")
    return records


def _decode_nullable_bytes(
    data: bytes | memoryview, position: int, body_end: int, what: str
) -> tuple[bytes | None, int]:
    """A varint length (-1 = null) and that many bytes, which must end by `body_end`; and the next position."""
    length, position = decode_varint(data, position, 5)
    if length == -1:
        return None, position
    if length < 0:
        raise InvalidRecordError(f"invalid {what} length {length}", position=position)
    if position + length > body_end:
        raise InvalidRecordError(f"{what} overruns the record", position=position)
    return bytes(data[position : position + length]), position + length


class RecordBatch:
    """A read-only view of one v2 batch inside a buffer (a fetched slice, a file chunk, client bytes).

    Header fields are decoded at construction; records are decoded only when `records()` is called.
    `position` is where the batch starts in its file (for error reports and dump-log).
    """

    __slots__ = (
        "_buffer",
        "_start",
        "attributes",
        "base_offset",
        "base_sequence",
        "base_timestamp",
        "crc",
        "last_offset_delta",
        "length",
        "magic",
        "max_timestamp",
        "partition_leader_epoch",
        "path",
        "position",
        "producer_epoch",
        "producer_id",
        "records_count",
    )

    def __init__(
        self, buffer: bytes | memoryview, start: int = 0, *, path: str | None = None, position: int | None = None
    ) -> None:
        self._buffer = buffer
        self._start = start
        self.path = path
        self.position = start if position is None else position
        if len(buffer) - start < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"record batch is {len(buffer) - start} bytes, shorter than the {RECORD_BATCH_OVERHEAD}-byte header",
                path=path,
                position=self.position,
            )
        (
            self.base_offset,
            self.length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.records_count,
        ) = HEADER.unpack_from(buffer, start)
        if self.magic != CURRENT_MAGIC:
            raise CorruptRecordError(f"expected magic 2, found {self.magic}", path=path, position=self.position)
        if self.length + LOG_OVERHEAD < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"record batch length field {self.length} is smaller than the header", path=path, position=self.position
            )
        if start + self.length + LOG_OVERHEAD > len(buffer):
            raise CorruptRecordError(
                f"record batch declares {self.length + LOG_OVERHEAD} bytes but only {len(buffer) - start} remain",
                path=path,
                position=self.position,
            )

    @property
    def size_in_bytes(self) -> int:
        """Total bytes of the batch, header included."""
        return self.length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> CompressionType:
        return CompressionType.from_id(self.attributes & COMPRESSION_CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType.LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_FLAG_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """The tombstone/marker expiry set by the cleaner (attribute bit 6), else None."""
        return self.base_timestamp if self.has_delete_horizon else None

    @property
    def first_timestamp(self) -> int:
        """The first record's timestamp; unknown (-1) when baseTimestamp holds a delete horizon."""
        return NO_TIMESTAMP if self.has_delete_horizon else self.base_timestamp

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (2**31)

    def raw(self) -> memoryview:
        """The batch's bytes (a view, no copy)."""
        return memoryview(self._buffer)[self._start : self._start + self.size_in_bytes]

    def compute_crc(self) -> int:
        return crc32c.crc32c(
            memoryview(self._buffer)[self._start + ATTRIBUTES_OFFSET : self._start + self.size_in_bytes]
        )

    def is_valid(self) -> bool:
        return self.compute_crc() == self.crc

    def ensure_valid(self) -> None:
        """Raises `CorruptRecordError` if the stored CRC does not match the bytes."""
        computed = self.compute_crc()
        if computed != self.crc:
            raise CorruptRecordError(
                f"record batch CRC mismatch: stored {self.crc}, computed {computed}",
                path=self.path,
                position=self.position,
                offset=self.base_offset,
            )

    def records_section(self) -> bytes:
        """The uncompressed records section."""
        raw = memoryview(self._buffer)[self._start + RECORD_BATCH_OVERHEAD : self._start + self.size_in_bytes]
        try:
            return decompress(self.compression, raw)
        except StorageError as exc:
            raise CorruptRecordError(
                exc.message, path=self.path, position=self.position, offset=self.base_offset
            ) from exc

    def records_view(self) -> bytes | memoryview:
        """The uncompressed records section: a view into the buffer (no copy) when the batch is uncompressed."""
        if self.attributes & COMPRESSION_CODEC_MASK == CompressionType.NONE:
            return memoryview(self._buffer)[self._start + RECORD_BATCH_OVERHEAD : self._start + self.size_in_bytes]
        return self.records_section()

    def records(self) -> list[Record]:
        """Decodes every record (absolute offsets; LogAppendTime applied).

        From `COLUMNS_MIN_RECORDS` records on, the fields of all records are decoded at once with numpy
        (`record_columns`, imported here because it builds on this module): ~0.5 us a record against ~4 us.
        """
        log_append_time = self.max_timestamp if self.timestamp_type == TimestampType.LOG_APPEND_TIME else None
        try:
            if self.records_count >= COLUMNS_MIN_RECORDS:
                from storage.records.record_columns import decode_records_fast

                return decode_records_fast(
                    self.records_view(), self.records_count, self.base_offset, self.base_timestamp, log_append_time
                )
            return decode_records(
                self.records_section(), self.records_count, self.base_offset, self.base_timestamp, log_append_time
            )
        except InvalidRecordError as exc:
            raise InvalidRecordError(
                exc.message, path=self.path, position=self.position, offset=self.base_offset
            ) from exc

    def control_type(self) -> ControlRecordType:
        """For a control batch: the type in its single record's key (unknown types read as UNKNOWN)."""
        if not self.is_control:
            raise InvalidRecordError("not a control batch", path=self.path, position=self.position)
        records = self.records()
        if len(records) != 1 or records[0].key is None or len(records[0].key) < _CONTROL_KEY.size:
            raise InvalidRecordError("control batch must hold one record with a 4-byte key", position=self.position)
        _, control_type = _CONTROL_KEY.unpack_from(records[0].key)
        try:
            return ControlRecordType(control_type)
        except ValueError:
            return ControlRecordType.UNKNOWN

    def __repr__(self) -> str:
        return (
            f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
            f"count={self.records_count}, size={self.size_in_bytes}, codec={self.compression.kafka_name})"
        )


BatchT = TypeVar("BatchT")


def batch_size_at(buffer: bytes | memoryview, start: int, *, path: str | None = None, position: int = 0) -> int:
    """The whole size (batchLength + 12) of the entry of any magic at `start`, which needs 12 bytes of `buffer`.

    A length field below the minimum (garbage, or a zero-filled preallocated tail) raises `CorruptRecordError`
    at `position`, the entry's place in its file.
    """
    (length,) = _INT32.unpack_from(buffer, start + LENGTH_OFFSET)
    if length < MIN_BATCH_LENGTH_FIELD:
        raise CorruptRecordError(
            f"record batch size {length} is smaller than the minimum {MIN_BATCH_LENGTH_FIELD}",
            path=path,
            position=position,
        )
    return length + LOG_OVERHEAD


@overload
def iter_batches(
    buffer: bytes | memoryview, *, path: str | None = None, base_position: int = 0
) -> Iterator[RecordBatch]: ...


@overload
def iter_batches(
    buffer: bytes | memoryview, *, path: str | None = None, base_position: int = 0, open_batch: Callable[..., BatchT]
) -> Iterator[BatchT]: ...


def iter_batches(
    buffer: bytes | memoryview,
    *,
    path: str | None = None,
    base_position: int = 0,
    open_batch: Callable[..., Any] = RecordBatch,
) -> Iterator[Any]:
    """Walks consecutive batches in `buffer`, shallowly (records are not decoded, CRCs not checked).

    `open_batch(buffer, start, path=, position=)` makes each batch: `RecordBatch` (v2 only: another magic
    raises `CorruptRecordError`) unless told otherwise. Stops silently at a trailing partial batch, as Kafka's
    log input stream does (a fetch may end mid-batch). A length field below the minimum raises
    `CorruptRecordError`.
    """
    position = 0
    end = len(buffer)
    while end - position >= HEADER_SIZE_UP_TO_MAGIC:
        size = batch_size_at(buffer, position, path=path, position=base_position + position)
        if position + size > end:
            return
        yield open_batch(buffer, position, path=path, position=base_position + position)
        position += size


# --- encoding ----------------------------------------------------------------------------------------


def _encode_bytes(value: bytes | None) -> bytes:
    if value is None:
        return b"\x01"  # zig-zag of -1
    return encode_varint(len(value)) + value


class RecordBatchBuilder:
    """Builds one v2 batch, as a Kafka producer does (baseOffset 0 unless told otherwise).

    >>> builder = RecordBatchBuilder(compression=CompressionType.LZ4)
    >>> builder.append(b"key", b"value", timestamp=1_700_000_000_000, headers=[("trace", b"1")])
    >>> batch_bytes = builder.build()
    """

    def __init__(
        self,
        *,
        compression: CompressionType = CompressionType.NONE,
        timestamp_type: TimestampType = TimestampType.CREATE_TIME,
        base_offset: int = 0,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        is_transactional: bool = False,
        is_control: bool = False,
        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
        delete_horizon_ms: int | None = None,
    ) -> None:
        if timestamp_type == TimestampType.NO_TIMESTAMP_TYPE:
            raise InvalidRecordError("magic 2 batches need CreateTime or LogAppendTime")
        self.compression = CompressionType(compression)
        self.timestamp_type = timestamp_type
        self.base_offset = base_offset
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional
        self.is_control = is_control
        self.partition_leader_epoch = partition_leader_epoch
        self.delete_horizon_ms = delete_horizon_ms
        self._records: list[bytes] = []
        # With a delete horizon (attribute bit 6) baseTimestamp holds the horizon and every record's
        # timestamp delta is taken from it.
        self._base_timestamp: int | None = delete_horizon_ms
        self._max_timestamp = NO_TIMESTAMP
        self._last_offset_delta = -1

    def __len__(self) -> int:
        return len(self._records)

    @property
    def estimated_size_in_bytes(self) -> int:
        """Size of the batch if it were built now, uncompressed."""
        return RECORD_BATCH_OVERHEAD + sum(len(record) for record in self._records)

    def append(
        self,
        key: bytes | None,
        value: bytes | None,
        *,
        timestamp: int,
        headers: Sequence[Header] = (),
        offset_delta: int | None = None,
    ) -> None:
        """Adds one record; `offset_delta` defaults to the next consecutive delta (the cleaner passes gaps)."""
        if offset_delta is None:
            offset_delta = self._last_offset_delta + 1
        elif offset_delta <= self._last_offset_delta:
            raise InvalidRecordError(f"offset delta {offset_delta} is not above {self._last_offset_delta}")
        if self._base_timestamp is None:
            self._base_timestamp = timestamp
        body = bytearray(b"\x00")
        body += encode_varint(timestamp - self._base_timestamp)
        body += encode_varint(offset_delta)
        body += _encode_bytes(key)
        body += _encode_bytes(value)
        body += encode_varint(len(headers))
        for header_key, header_value in headers:
            encoded_key = header_key.encode("utf-8")
            body += encode_varint(len(encoded_key)) + encoded_key
            body += _encode_bytes(header_value)
        self._records.append(encode_varint(len(body)) + bytes(body))
        self._max_timestamp = max(self._max_timestamp, timestamp)
        self._last_offset_delta = offset_delta

    def build(self) -> bytes:
        """The batch's bytes with a valid CRC."""
        records = b"".join(self._records)
        payload = compress(self.compression, records)
        attributes = encode_attributes(
            self.compression,
            self.timestamp_type,
            is_transactional=self.is_transactional,
            is_control=self.is_control,
            has_delete_horizon=self.delete_horizon_ms is not None,
        )
        base_timestamp = NO_TIMESTAMP if self._base_timestamp is None else self._base_timestamp
        return encode_batch(
            base_offset=self.base_offset,
            partition_leader_epoch=self.partition_leader_epoch,
            attributes=attributes,
            last_offset_delta=max(self._last_offset_delta, 0),
            base_timestamp=base_timestamp,
            max_timestamp=self._max_timestamp,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=self.base_sequence,
            records_count=len(self._records),
            payload=payload,
        )


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


def build_control_batch(
    control_type: ControlRecordType,
    *,
    timestamp: int,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    coordinator_epoch: int = 0,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A transaction marker (COMMIT/ABORT): control + transactional flags, one record whose key is
    (version 0, type) and whose value is (version 0, coordinatorEpoch)."""
    builder = RecordBatchBuilder(
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )
    builder.append(
        _CONTROL_KEY.pack(0, int(control_type)), _END_TXN_VALUE.pack(0, coordinator_epoch), timestamp=timestamp
    )
    return builder.build()


def set_base_offset_and_epoch(buffer: bytearray | memoryview, start: int, base_offset: int, leader_epoch: int) -> None:
    """Assigns offsets in place: both fields lie outside the CRC, so it stays valid."""
    _INT64.pack_into(buffer, start + BASE_OFFSET_OFFSET, base_offset)
    _INT32.pack_into(buffer, start + PARTITION_LEADER_EPOCH_OFFSET, leader_epoch)


def set_log_append_time(buffer: bytearray | memoryview, start: int, size: int, timestamp: int) -> None:
    """Stamps LogAppendTime: sets attribute bit 3 and maxTimestamp, then recomputes the CRC."""
    (attributes,) = _INT16.unpack_from(buffer, start + ATTRIBUTES_OFFSET)
    _INT16.pack_into(buffer, start + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
    _INT64.pack_into(buffer, start + MAX_TIMESTAMP_OFFSET, timestamp)
    crc = crc32c.crc32c(memoryview(buffer)[start + ATTRIBUTES_OFFSET : start + size])
    _UINT32.pack_into(buffer, start + CRC_OFFSET, crc)
