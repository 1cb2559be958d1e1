"""Kafka record batches, format v2 (`magic` 2): the unit of every append, fetch and file.

`RecordBatch` is a read-only view of one batch in a buffer, `iter_batches` walks consecutive batches,
`RecordBatchBuilder` writes one as a producer does, and the in-place setters stamp what the broker assigns. The
header layout, attribute bits and sentinels are declared in `layout.py`, the records section's grammar and its
decoder in `record_columns.py`, varints in `varint.py`; this module is the format's public surface and
re-exports them (`__all__`).

Decoding is strict: after `recordsCount` records the section must be consumed exactly. Bytes that do not form a
valid batch or record (header, CRC, codec stream, record framing) raise `CorruptRecordError` with the batch's
file, position and base offset; nothing else escapes. A builder given values it cannot write raises
`InvalidRecordError`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar, overload

import crc32c

from storage.errors import CorruptRecordError, InvalidRecordError, StorageError
from storage.records.compression import CompressionType, compress, decompress
from storage.records.layout import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    CONTROL_KEY,
    CRC_OFFSET,
    CURRENT_MAGIC,
    DELETE_HORIZON_FLAG_MASK,
    END_TXN_MARKER_VALUE,
    HEADER,
    HEADER_SIZE_UP_TO_MAGIC,
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    MIN_BATCH_LENGTH_FIELD,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    PARTITION_LEADER_EPOCH_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORDS_COUNT_OFFSET,
    SEQUENCE_MODULUS,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    ControlRecordType,
    EndTransactionMarker,
    TimestampType,
    encode_attributes,
    encode_batch,
)
from storage.records.record import Header, Record
from storage.records.record_columns import Section, decode_records, decode_records_fast
from storage.records.varint import decode_varint, encode_varint, varint_size

__all__ = [
    "ATTRIBUTES_OFFSET",
    "COLUMNS_MIN_RECORDS",
    "CRC_OFFSET",
    "CURRENT_MAGIC",
    "HEADER_SIZE_UP_TO_MAGIC",
    "LAST_OFFSET_DELTA_OFFSET",
    "LENGTH_OFFSET",
    "LOG_OVERHEAD",
    "MAGIC_OFFSET",
    "MAX_TIMESTAMP_OFFSET",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "PARTITION_LEADER_EPOCH_OFFSET",
    "RECORDS_COUNT_OFFSET",
    "RECORD_BATCH_OVERHEAD",
    "SEQUENCE_MODULUS",
    "ControlRecordType",
    "EndTransactionMarker",
    "Header",
    "Record",
    "RecordBatch",
    "RecordBatchBuilder",
    "TimestampType",
    "batch_size_at",
    "build_control_batch",
    "decode_records",
    "decode_varint",
    "encode_attributes",
    "encode_batch",
    "encode_varint",
    "iter_batches",
    "set_base_offset_and_epoch",
    "set_log_append_time",
    "varint_size",
]

# Below this many records a batch is decoded record by record: numpy's fixed cost (~60 calls of ~1.5 us) is
# more than the ~4 us a record of the Python decoder.
COLUMNS_MIN_RECORDS = 32

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")


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
    base_offset: int
    length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

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
        return TimestampType.from_attributes(self.attributes)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    def producer_fields(self) -> dict[str, Any]:
        """The producer id, epoch and base sequence, the transactional flag and the partition leader epoch, as
        `RecordBatchBuilder` takes them: what a batch written again from this one (recompressed, compacted) keeps."""
        return {
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "base_sequence": self.base_sequence,
            "is_transactional": self.is_transactional,
            "partition_leader_epoch": self.partition_leader_epoch,
        }

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
        return (self.base_sequence + self.last_offset_delta) % SEQUENCE_MODULUS

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

    @property
    def log_append_time(self) -> int | None:
        """Every record's timestamp in a LogAppendTime batch (its maxTimestamp); None for CreateTime."""
        return self.max_timestamp if self.attributes & TIMESTAMP_TYPE_MASK else None

    def section(self) -> Section:
        """The uncompressed records section (a view into the buffer when the batch is uncompressed, as
        `records_view`) with the header fields its records derive from, for `record_columns.decode_sections`
        (which decodes the batches of a fetch together, copying their sections into one buffer)."""
        return Section(
            self.records_view(), self.records_count, self.base_offset, self.base_timestamp, self.log_append_time
        )

    def records(self) -> list[Record]:
        """Decodes every record (absolute offsets; LogAppendTime applied).

        From `COLUMNS_MIN_RECORDS` records on, the fields of all records are decoded at once with numpy
        (`record_columns.decode_records_fast`): ~0.5 us a record against ~4 us.
        """
        try:
            if self.records_count >= COLUMNS_MIN_RECORDS:
                return decode_records_fast(
                    self.records_view(), self.records_count, self.base_offset, self.base_timestamp, self.log_append_time
                )
            return decode_records(
                self.records_section(), self.records_count, self.base_offset, self.base_timestamp, self.log_append_time
            )
        except CorruptRecordError as exc:
            raise CorruptRecordError(
                exc.message, path=self.path, position=self.position, offset=self.base_offset
            ) from exc

    def control_type(self) -> ControlRecordType:
        """For a control batch: the type in its single record's key (unknown types read as UNKNOWN)."""
        if not self.is_control:
            raise InvalidRecordError("not a control batch", path=self.path, position=self.position)
        records = self.records()
        if len(records) != 1 or records[0].key is None or len(records[0].key) < CONTROL_KEY.size:
            raise CorruptRecordError(
                f"control batch must hold one record with a {CONTROL_KEY.size}-byte key",
                path=self.path,
                position=self.position,
                offset=self.base_offset,
            )
        return ControlRecordType.from_key(records[0].key)

    def end_transaction_marker(self) -> EndTransactionMarker | None:
        """For a control batch: the COMMIT/ABORT marker it holds; None when it holds no record (the cleaner emptied
        it) or a control record of another type. `CorruptRecordError` for a marker that does not parse."""
        if not self.is_control:
            raise InvalidRecordError("not a control batch", path=self.path, position=self.position)
        records = self.records()
        if not records:
            return None
        try:
            return EndTransactionMarker.parse(records[0].key, records[0].value)
        except CorruptRecordError as exc:
            raise CorruptRecordError(
                exc.message, path=self.path, position=self.position, offset=self.base_offset
            ) from exc

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
    length: int = _INT32.unpack_from(buffer, start + LENGTH_OFFSET)[0]
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
        CONTROL_KEY.pack(0, int(control_type)), END_TXN_MARKER_VALUE.pack(0, coordinator_epoch), timestamp=timestamp
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
