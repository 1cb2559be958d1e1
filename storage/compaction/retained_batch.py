"""The batch the cleaner writes when it keeps only some records of a v2 batch (Kafka's
`MemoryRecords.buildRetainedRecordsInto`): the bytes `RecordBatchBuilder` writes for the kept records.

What changes and what does not:

- header: base offset, last offset delta (even when the last record goes: the producer's last sequence must
  survive), producer id/epoch, base sequence, leader epoch, flags and codec are the source batch's; the record
  count is the kept one; baseTimestamp is the delete horizon when one is set (attribute bit 6), else the first
  kept record's timestamp; maxTimestamp the largest kept timestamp;
- records: offset deltas, keys, values and headers are unchanged; each timestamp delta is taken again from the
  new baseTimestamp (a LogAppendTime batch gives every record its maxTimestamp, so every delta becomes 0 or
  maxTimestamp - horizon); the record attributes byte is written as 0.

Two ways to the same bytes. The builder path decodes `Record` objects and encodes them again. The copy
path keeps each record's bytes after its timestamp delta as they are and writes only its length, attributes and
new timestamp delta; it is taken when every kept record is header-less, has attributes 0 and minimal varints (the
producer's encoding is then the builder's, byte for byte: a record whose body length is the sum of its minimal
field sizes has no over-long varint). When no timestamp delta changes, runs of kept records are copied whole.
Measured on a 1 MB batch of 8,320 records (half or most of them kept): 3.8 us a kept record by the builder,
0.4-0.6 by the copy path.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Sequence

import crc32c
import numpy as np

from storage.records.compression import compress
from storage.records.layout import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    LAST_OFFSET_DELTA_OFFSET,
    NO_TIMESTAMP,
    encode_batch,
)
from storage.records.record import Record
from storage.records.record_batch import RecordBatch, RecordBatchBuilder, encode_attributes
from storage.records.record_columns import RecordColumns, decode_records_columns
from storage.records.varint import VARINT64_MAX_BYTES, encode_varint

# Zig-zag values below 2**(7k) take k bytes.
_WIDTH_LIMITS = np.array([1 << (7 * width) for width in range(1, VARINT64_MAX_BYTES)], dtype=np.uint64)
# Encoded varints of -8192..8191 (two bytes at most): record lengths and timestamp deltas of ordinary batches.
_SMALL_LIMIT = 8192
_SMALL_VARINTS = tuple(encode_varint(value) for value in range(-_SMALL_LIMIT, _SMALL_LIMIT))
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")


def build_retained_batch(batch: RecordBatch, keep: np.ndarray, delete_horizon_ms: int | None) -> bytes:
    """`batch` with only the records where `keep` (bool, one per record, at least one set) is set, and the
    delete horizon `delete_horizon_ms` (None: none)."""
    section = batch.records_section()
    columns = decode_records_columns(section, batch.records_count)
    kept = np.flatnonzero(keep)
    if batch.log_append_time is None:
        timestamps = columns.timestamp_deltas[kept] + np.int64(batch.base_timestamp)
    else:
        timestamps = np.full(len(kept), batch.log_append_time, dtype=np.int64)
    base_timestamp = int(timestamps[0]) if delete_horizon_ms is None else delete_horizon_ms
    deltas = timestamps - np.int64(base_timestamp)
    if not _copyable(section, columns, kept):
        retained = list(itertools.compress(batch.records(), keep.tolist()))
        return _build(batch, retained, delete_horizon_ms)
    if bool((deltas == columns.timestamp_deltas[kept]).all()):
        # Unchanged records: each run of consecutive kept records is one slice.
        edges = np.flatnonzero(np.diff(np.concatenate(([0], keep.view(np.int8), [0]))))
        first_records, stop_records = edges[0::2], edges[1::2]
        starts = np.concatenate(([0], columns.body_ends))[first_records].tolist()
        ends = columns.body_ends[stop_records - 1].tolist()
        records = b"".join([section[start:end] for start, end in zip(starts, ends, strict=True)])
    else:
        records = _with_timestamp_deltas(section, columns, kept, deltas)
    attributes = encode_attributes(
        batch.compression,
        batch.timestamp_type,
        is_transactional=batch.is_transactional,
        is_control=batch.is_control,
        has_delete_horizon=delete_horizon_ms is not None,
    )
    return encode_batch(
        base_offset=batch.base_offset,
        partition_leader_epoch=batch.partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=batch.last_offset_delta,
        base_timestamp=base_timestamp,
        # The builder starts its maximum at -1 (no timestamp), as Kafka's does.
        max_timestamp=max(NO_TIMESTAMP, int(timestamps.max())),
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        records_count=len(kept),
        payload=compress(batch.compression, records),
    )


def _widths(values: np.ndarray) -> np.ndarray:
    """Bytes of the minimal zig-zag varint of each int64 value."""
    zigzag = ((values << np.int64(1)) ^ (values >> np.int64(63))).view(np.uint64)
    return np.searchsorted(_WIDTH_LIMITS, zigzag, side="right") + 1


def _copyable(section: bytes, columns: RecordColumns, kept: np.ndarray) -> bool:
    """Whether every kept record is encoded as the builder would encode it (see the module docstring)."""
    body_starts = columns.body_starts[kept]
    body_lengths = columns.body_ends[kept] - body_starts
    key_lengths = columns.key_lengths[kept]
    value_lengths = columns.value_lengths[kept]
    minimal = (
        1
        + _widths(columns.timestamp_deltas[kept])
        + _widths(columns.offset_deltas[kept])
        + _widths(key_lengths)
        + np.maximum(key_lengths, 0)
        + _widths(value_lengths)
        + np.maximum(value_lengths, 0)
        + 1
    )
    record_starts = np.concatenate(([0], columns.body_ends[:-1]))[kept]
    attributes = np.frombuffer(section, dtype=np.uint8)[body_starts]
    return bool(
        (columns.header_counts[kept] == 0).all()
        and (attributes == 0).all()
        and (body_lengths == minimal).all()
        and (body_starts - record_starts == _widths(body_lengths)).all()
    )


def _with_timestamp_deltas(section: bytes, columns: RecordColumns, kept: np.ndarray, deltas: np.ndarray) -> bytes:
    """The kept records with their timestamp deltas replaced by `deltas`."""
    tails = columns.body_starts[kept] + 1 + _widths(columns.timestamp_deltas[kept])
    out = bytearray()
    small = _SMALL_VARINTS
    for delta, tail, end in zip(deltas.tolist(), tails.tolist(), columns.body_ends[kept].tolist(), strict=True):
        head = small[delta + _SMALL_LIMIT] if -_SMALL_LIMIT <= delta < _SMALL_LIMIT else encode_varint(delta)
        length = 1 + len(head) + end - tail
        out += small[length + _SMALL_LIMIT] if length < _SMALL_LIMIT else encode_varint(length)
        out += b"\x00"
        out += head
        out += section[tail:end]
    return bytes(out)


def _build(batch: RecordBatch, retained: Sequence[Record], delete_horizon_ms: int | None) -> bytes:
    """The builder path: every kept record decoded and encoded again."""
    builder = RecordBatchBuilder(
        compression=batch.compression,
        timestamp_type=batch.timestamp_type,
        base_offset=batch.base_offset,
        is_control=batch.is_control,
        delete_horizon_ms=delete_horizon_ms,
        **batch.producer_fields(),
    )
    for record in retained:
        builder.append(
            record.key,
            record.value,
            timestamp=record.timestamp,
            headers=record.headers,
            offset_delta=record.offset - batch.base_offset,
        )
    data = builder.build()
    if retained[-1].offset == batch.last_offset:
        return data
    out = bytearray(data)
    _INT32.pack_into(out, LAST_OFFSET_DELTA_OFFSET, batch.last_offset_delta)
    _UINT32.pack_into(out, CRC_OFFSET, crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


__all__ = ["build_retained_batch"]
