"""Building a v2 records section, or a whole batch, from columns (key, value, timestamp lists); the grammar of
the bytes is in `record_columns`.

Encoding (`encode_records_section`, `build_batch_from_columns`) writes exactly the bytes `RecordBatchBuilder`
(and kafka-python's builder) writes for the same records without headers, by one of two paths:

- fixed layout, for batches of at least `FIXED_LAYOUT_MIN_RECORDS` (128) records whose values all have one
  length (or are all null), whose keys likewise, and whose timestamp-delta varints change width fewer than
  `MAX_TIMESTAMP_SPANS` times (the producer's case: one value size, null or fixed-size keys, timestamps
  growing by a few ms). Every record between two width changes of the offset delta (at 64 and 8192) or of the
  timestamp delta (at 64 ms, 8.192 s, ...) has the same stride, so the block is a 2-D uint8 array: a template
  row of the constant bytes (length, attributes, key and value lengths, headerCount) broadcast once, then the
  delta varint columns, keys and values (joined once, viewed as rows) copied in. ~15 numpy calls a block.
- per record, for everything else: one loop of table lookups per record.

Measured with every core busy (us a record, build_batch_from_columns, 100-byte values, null keys, against
kafka-python's builder on the same records): 140 records with timestamps growing 1 ms every 50 records 0.73
fixed / 0.84 per record / 2.6 kafka-python; 140 records with one timestamp 0.43 / 0.84 / 2.5; 10,000 records
(a 1 MB batch) 0.17-0.23 / 0.8-0.9 / 2.6. The fixed layout's ~50-70 us of numpy calls per batch only pay off
from ~50 records (one timestamp) to ~110 (per-record timestamps), hence 128. (Computing every varint of
arbitrary records with numpy and gathering the section was 2x slower than the loop at 140 records: unlike the
fixed layout, it had to cut every record's prefix out again.)
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from typing import cast

import numpy as np

from storage.errors import InvalidRecordError
from storage.records.compression import CompressionType, compress
from storage.records.layout import (
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    TimestampType,
    encode_attributes,
    encode_batch,
)
from storage.records.record_columns import INT64_MAX, INT64_MIN, Column, Timestamps
from storage.records.varint import (
    VARINT32_MAX_BYTES,
    VARINT64_MAX_BYTES,
    encode_varint,
)

# Every varint of one or two bytes, indexed by its zig-zag value (16,384 entries, ~1 MB, built at import in
# ~3 ms): lengths under 8 KiB, offset deltas under 8192 and timestamp deltas within +-8 s are one lookup each.
_SMALL_VARINTS = tuple(encode_varint((zigzag >> 1) ^ -(zigzag & 1)) for zigzag in range(1 << 14))
_SMALL_LIMIT = len(_SMALL_VARINTS)
_NULL = b"\x01"  # the varint -1: a null key or value
_ZERO = b"\x00"  # attributes, and headerCount 0


def encode_records_section(
    values: Column, keys: Column | None = None, timestamp_deltas: Sequence[int] | np.ndarray | None = None
) -> bytes:
    """The records section of header-less records with offset deltas 0, 1, 2, ...: byte for byte what
    `RecordBatchBuilder.append(key, value, timestamp=base + delta)` writes for each.

    `keys` None means every key is null; `timestamp_deltas` None means every delta is 0. An item of `values` or
    `keys` may be None (null) or any bytes-like object. Columns of different lengths, a delta outside int64 or an
    item that is not bytes raise `InvalidRecordError`.
    """
    deltas = [0] * len(values) if timestamp_deltas is None else timestamp_deltas
    return _encode_section(values, keys, deltas, 0)


def _is_one_timestamp(timestamps: Timestamps) -> bool:
    """Whether `timestamps` is one value for every record. Lists and tuples are answered without `np.ndim`,
    which converts a list to an array first (~4 us for 140 ints, twice per batch)."""
    return not isinstance(timestamps, list | tuple) and np.ndim(timestamps) == 0


def _encode_section(values: Column, keys: Column | None, timestamps: Timestamps, base_timestamp: int) -> bytes:
    """The records section of `values`/`keys` whose timestamp deltas are `timestamps - base_timestamp`."""
    count = len(values)
    stamps: Sequence[int]
    if _is_one_timestamp(timestamps):
        stamps = [cast(int, timestamps)] * count
    elif isinstance(timestamps, np.ndarray):
        stamps = timestamps.tolist()
    else:
        stamps = cast(Sequence[int], timestamps)
    for name, column in (("keys", keys), ("timestamps", stamps)):
        if column is not None and len(column) != count:
            raise InvalidRecordError(f"{len(column)} {name} for {count} values")
    if count >= FIXED_LAYOUT_MIN_RECORDS:
        section = _encode_fixed_layout(values, keys, timestamps, base_timestamp)
        if section is not None:
            return section
    pieces: list[bytes | bytearray | memoryview] = []
    append = pieces.append
    small = _SMALL_VARINTS
    limit = _SMALL_LIMIT
    # One loop of table lookups per record, no per-field calls: ~0.8 us a record (see the module docstring).
    try:
        for offset_delta, value, key, stamp in zip(
            range(count), values, keys if keys is not None else itertools.repeat(None, count), stamps, strict=True
        ):
            delta = stamp - base_timestamp
            zigzag = (delta << 1) ^ (delta >> 63)
            timestamp_bytes = small[zigzag] if 0 <= zigzag < limit else encode_varint(delta)
            offset_bytes = small[offset_delta << 1] if offset_delta < 8192 else encode_varint(offset_delta)
            if key is None:
                key_length, key_bytes = 0, _NULL
            else:
                key_length = len(key)
                key_bytes = small[key_length << 1] if key_length < 8192 else encode_varint(key_length)
            if value is None:
                value_length, value_bytes = 0, _NULL
            else:
                value_length = len(value)
                value_bytes = small[value_length << 1] if value_length < 8192 else encode_varint(value_length)
            body = 2 + len(timestamp_bytes) + len(offset_bytes) + len(key_bytes) + key_length
            body += len(value_bytes) + value_length
            append((small[body << 1] if body < 8192 else encode_varint(body)) + _ZERO)
            append(timestamp_bytes + offset_bytes + key_bytes)
            if key_length:
                append(key)  # type: ignore[arg-type]
            append(value_bytes)
            if value_length:
                append(value)  # type: ignore[arg-type]
            append(_ZERO)
        return b"".join(pieces)
    except TypeError as exc:
        raise InvalidRecordError(f"record keys and values must be bytes or None, timestamps ints: {exc}") from exc


# From this many records on, a batch whose keys, values and timestamp deltas have one layout is written as
# fixed-stride rows (see the module docstring): its ~50-70 us of numpy calls per batch beat the ~0.8 us a record
# of the per-record loop from ~50 records with one timestamp and ~110 with one timestamp per record.
FIXED_LAYOUT_MIN_RECORDS = 128
# The offsetDelta varint grows a byte at these deltas (its zig-zag value 2 * delta reaches 2**7, 2**14, ...);
# offset deltas are int32, so five widths cover them all.
_OFFSET_WIDTH_LIMITS = tuple(1 << (7 * width - 1) for width in range(1, VARINT32_MAX_BYTES + 1))
# A varint of zig-zag value z takes 1 + (number of these limits <= z) bytes.
_VARINT_WIDTH_LIMITS = np.array([1 << (7 * width) for width in range(1, VARINT64_MAX_BYTES)], dtype=np.uint64)
# Timestamps that grow through a batch change width once or twice (at 64 ms and 8.192 s from the first); deltas
# that jump back and forth across those limits would make tiny blocks of a few numpy calls each.
MAX_TIMESTAMP_SPANS = 8


def _varint_rows(zigzag: np.ndarray, width: int) -> np.ndarray:
    """The `width`-byte varints of uint64 zig-zag values, one row each (every value must need `width` bytes)."""
    rows = np.empty((len(zigzag), width), dtype=np.uint8)
    for index in range(width):
        rows[:, index] = (zigzag >> np.uint64(7 * index)) & np.uint64(0x7F)
    rows[:, :-1] |= 0x80
    return rows


# The offsetDelta varints of the first two widths (deltas 0-63 and 64-8191, 16 KiB) are cut from these tables
# rather than computed per batch (~6 numpy calls of 1-2 us each saved per width).
_OFFSET_ROWS = tuple(
    _varint_rows(np.arange(first, limit, dtype=np.uint64) << np.uint64(1), width)
    for width, first, limit in ((1, 0, _OFFSET_WIDTH_LIMITS[0]), (2, _OFFSET_WIDTH_LIMITS[0], _OFFSET_WIDTH_LIMITS[1]))
)


def _offset_rows(first: int, stop: int, width: int) -> np.ndarray:
    """The offsetDelta varints of deltas first..stop-1, all `width` bytes long, one row each."""
    if width <= len(_OFFSET_ROWS):
        table_first = 0 if width == 1 else _OFFSET_WIDTH_LIMITS[width - 2]
        return _OFFSET_ROWS[width - 1][first - table_first : stop - table_first]
    return _varint_rows(np.arange(first, stop, dtype=np.uint64) << np.uint64(1), width)


def _encode_fixed_layout(
    values: Column, keys: Column | None, timestamps: Timestamps, base_timestamp: int
) -> bytes | None:
    """The records section as blocks of fixed-stride rows, a new block wherever the offset-delta or the
    timestamp-delta varint changes width; or None when the records do not fit that (values not of one length
    nor all null, keys likewise, timestamp deltas changing width `MAX_TIMESTAMP_SPANS` times or more): the
    per-record loop then writes them, and raises for bad items."""
    count = len(values)
    value_column = _uniform_column(values, count)
    key_column = (-1, None) if keys is None else _uniform_column(keys, count)
    stamp_spans = _timestamp_spans(timestamps, base_timestamp, count)
    if value_column is None or key_column is None or stamp_spans is None:
        return None
    (value_length, value_rows), (key_length, key_rows) = value_column, key_column
    key_prefix, value_prefix = encode_varint(key_length), encode_varint(value_length)
    # attributes, keyLength, key, valueLength, value, headerCount: all but the two deltas.
    fixed_body = 1 + len(key_prefix) + max(key_length, 0) + len(value_prefix) + max(value_length, 0) + 1
    cuts = sorted({*(limit for limit in _OFFSET_WIDTH_LIMITS if limit < count), *(span[0] for span in stamp_spans)})
    blocks: list[tuple[int, int, int, bytes | np.ndarray, bytes, int, int]] = []
    size = span = 0
    for first, stop in itertools.pairwise([*cuts, count]):
        while span + 1 < len(stamp_spans) and stamp_spans[span + 1][0] <= first:
            span += 1
        span_first, span_field = stamp_spans[span]
        if isinstance(span_field, bytes):
            stamp_piece: bytes | np.ndarray = span_field
            stamp_width = len(span_field)
        else:
            stamp_piece = span_field[first - span_first : stop - span_first]
            stamp_width = span_field.shape[1]
        offset_width = next(width for width, limit in enumerate(_OFFSET_WIDTH_LIMITS, start=1) if first < limit)
        body = fixed_body + offset_width + stamp_width
        length_prefix = encode_varint(body)
        end = size + (stop - first) * (len(length_prefix) + body)
        blocks.append((first, stop, offset_width, stamp_piece, length_prefix, size, end))
        size = end
    section = np.empty(size, dtype=np.uint8)
    for first, stop, offset_width, stamp_piece, length_prefix, position, end in blocks:
        fields = [
            length_prefix + _ZERO,
            stamp_piece,
            _offset_rows(first, stop, offset_width),
            key_prefix,
            None if key_rows is None else key_rows[first:stop],
            value_prefix,
            None if value_rows is None else value_rows[first:stop],
            _ZERO,
        ]
        _write_rows(section[position:end].reshape(stop - first, -1), fields)
    return section.tobytes()


def _write_rows(rows: np.ndarray, fields: list[bytes | np.ndarray | None]) -> None:
    """Fills each row of `rows` with `fields` in order: bytes are the same in every row, a 2-D array gives each
    row its own bytes, None is nothing. Every row first gets one template (the constant bytes, zeros in place
    of the rest): one broadcast copy instead of one per constant field."""
    template = bytearray()
    varying: list[tuple[int, np.ndarray]] = []
    for field in fields:
        if isinstance(field, bytes):
            template += field
        elif field is not None and field.shape[1]:
            varying.append((len(template), field))
            template += bytes(field.shape[1])
    rows[:] = np.frombuffer(template, dtype=np.uint8)
    for column, field in varying:
        rows[:, column : column + field.shape[1]] = field


def _uniform_column(column: Column, count: int) -> tuple[int, np.ndarray | None] | None:
    """(length, one row of bytes per item) when every item is bytes-like of one length, (-1, None) when every
    item is None, else None."""
    try:
        lengths = set(map(len, column))  # type: ignore[arg-type]
        joined = b"".join(column)  # type: ignore[arg-type]
    except TypeError:
        return (-1, None) if all(item is None for item in column) else None
    if len(lengths) != 1:
        return None
    (length,) = lengths
    # A memoryview of wider items has a len() in items, not bytes: the per-record loop decides about it.
    if len(joined) != length * count:
        return None
    return length, np.frombuffer(joined, dtype=np.uint8).reshape(count, length)


def _timestamp_spans(
    timestamps: Timestamps, base_timestamp: int, count: int
) -> list[tuple[int, bytes | np.ndarray]] | None:
    """The timestampDelta varints as (first record, field) spans of one varint width each: a field is bytes when
    every record has one delta, else one row per record. None for anything but int64-range integer deltas, or
    for deltas that change width `MAX_TIMESTAMP_SPANS` times or more."""
    if _is_one_timestamp(timestamps):
        try:
            delta = operator.index(timestamps) - base_timestamp  # type: ignore[arg-type]
        except TypeError:
            return None
        return [(0, encode_varint(delta))] if INT64_MIN <= delta <= INT64_MAX else None
    stamps = np.asarray(timestamps)
    if stamps.dtype.kind != "i" or stamps.shape != (count,):
        return None
    low, high = int(stamps.min()) - base_timestamp, int(stamps.max()) - base_timestamp
    if low < INT64_MIN or high > INT64_MAX:
        return None
    if low == high:
        return [(0, encode_varint(low))]
    deltas = stamps.astype(np.int64, copy=False) - np.int64(base_timestamp)
    if low >= 0 and high <= 63:
        # Timestamps that only grow, by at most 63 ms from the first (a producer batch of a few hundred records),
        # are their zig-zag byte 2 * delta: 3 numpy calls rather than ~10 for the general case.
        return [(0, (deltas << np.int64(1)).astype(np.uint8)[:, None])]
    zigzag = ((deltas << np.int64(1)) ^ (deltas >> np.int64(63))).view(np.uint64)
    widths = np.searchsorted(_VARINT_WIDTH_LIMITS, zigzag, side="right") + 1
    changes = ((widths[1:] != widths[:-1]).nonzero()[0] + 1).tolist()
    if len(changes) >= MAX_TIMESTAMP_SPANS:
        return None
    firsts = [0, *changes]
    return [
        (first, _varint_rows(zigzag[first:stop], int(widths[first])))
        for first, stop in itertools.pairwise([*firsts, count])
    ]


def build_batch_from_columns(
    values: Column,
    keys: Column | None = None,
    timestamps: Timestamps = NO_TIMESTAMP,
    *,
    compression: CompressionType = CompressionType.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    base_offset: int = 0,
) -> bytes:
    """One v2 CreateTime batch of header-less records, byte for byte what `RecordBatchBuilder` builds with the
    same arguments after `append(keys[i], values[i], timestamp=timestamps[i])` for every i.

    `timestamps` is one int for every record or one per record (a sequence or a numpy array); `keys` None means
    null keys. baseTimestamp is the first record's timestamp, maxTimestamp the largest (at least -1, as the
    builder keeps it). Bad columns or header fields out of range raise `InvalidRecordError`.
    """
    count = len(values)
    try:
        if _is_one_timestamp(timestamps):
            base_timestamp = max_timestamp = operator.index(timestamps)  # type: ignore[arg-type]
        elif count:
            first, largest = timestamps[0], max(timestamps)  # type: ignore[index, arg-type]
            base_timestamp, max_timestamp = operator.index(first), operator.index(largest)
        else:
            base_timestamp = max_timestamp = NO_TIMESTAMP
    except (TypeError, ValueError) as exc:
        raise InvalidRecordError(f"timestamps must be ints: {exc}") from exc
    section = _encode_section(values, keys, timestamps, base_timestamp)
    attributes = encode_attributes(
        CompressionType(compression),
        TimestampType.CREATE_TIME,
        is_transactional=is_transactional,
        is_control=False,
        has_delete_horizon=False,
    )
    return encode_batch(
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=max(count - 1, 0),
        base_timestamp=base_timestamp if count else NO_TIMESTAMP,
        max_timestamp=max(NO_TIMESTAMP, max_timestamp) if count else NO_TIMESTAMP,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records_count=count,
        payload=compress(CompressionType(compression), section),
    )
