"""Kafka fetch bytes -> one Arrow record batch in Spark's Kafka-source schema, decoded column-wise.

Output schema (the Arrow types Spark 3.5 maps to the Kafka source's columns; `headers` only when asked)::

    column         Arrow type                                   from
    key            binary                                       record key (null key -> null)
    value          binary                                       record value (null value, a tombstone -> null)
    topic          string                                       the caller (one topic per fetch)
    partition      int32                                        the caller
    offset         int64                                        batch baseOffset + record offsetDelta
    timestamp      timestamp[us, tz=UTC]                        baseTimestamp + timestampDelta, in ms * 1000;
                                                                maxTimestamp for LogAppendTime batches; -1 ms
                                                                for magic 0 (no timestamp), as Spark shows it
    timestampType  int32                                        0 CreateTime, 1 LogAppendTime, -1 magic 0
    headers        list<struct<key: string, value: binary>>     record headers; null when a record has none,
                                                                as Spark's Kafka source gives

Only records with `start_offset <= offset < end_offset` are kept: a fetch starts at the batch holding
`start_offset` and may run past `end_offset`. Control batches (transaction markers) carry no data and are
skipped; offsets missing because compaction removed them are simply absent. Every batch's CRC is checked, as
Kafka consumers do (`check.crcs`).

The records of a fetch's v2 batches are decoded together by storage's one record walker
(`storage.records.record_columns.decode_sections`: bodies found by walking every batch in lockstep, then every
field of every record decoded at once with numpy), which also raises for malformed bytes; this module only turns
its columns into Arrow arrays. Keys and values are cut out of the joined records sections without a per-record
copy: the sections become one Arrow binary array whose elements alternate between a value and the bytes up to the
next value, and Arrow's `take` keeps every other element. Measured on 100k records of 50 bytes: 48 ms with a
Python walk, against 1.3 s for decoding them into `Record` objects (`RecordBatch.records()`). Legacy (magic 0/1)
entries, which only logs written by old Kafka versions hold, take the per-record path.

Malformed bytes raise `CorruptRecordError` (CRC mismatch, a record that overruns its batch, an over-long varint,
a records section not consumed exactly), with the batch's base offset.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from storage.records.file_records import iter_any_batches
from storage.records.layout import TimestampType
from storage.records.legacy_records import LegacyBatch
from storage.records.record_batch import RecordBatch
from storage.records.record_columns import Section, decode_sections

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(HEADER_TYPE)
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
KAFKA_FIELDS = (
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", TIMESTAMP_TYPE),
    pa.field("timestampType", pa.int32()),
)
HEADERS_FIELD = pa.field("headers", HEADERS_TYPE)
NO_TIMESTAMP_TYPE = int(TimestampType.NO_TIMESTAMP_TYPE)
MICROS_PER_MILLI = 1000


def kafka_arrow_schema(include_headers: bool = False) -> pa.Schema:
    """The Arrow schema of the module docstring."""
    return pa.schema([*KAFKA_FIELDS, HEADERS_FIELD] if include_headers else list(KAFKA_FIELDS))


@dataclass(frozen=True, slots=True)
class DecodedFetch:
    """The records of one fetch within the asked range, and where the next fetch starts (past every batch read,
    including control batches and batches emptied by compaction)."""

    batch: pa.RecordBatch
    next_offset: int


def decode_fetch(
    records: bytes,
    topic: str,
    partition: int,
    start_offset: int,
    end_offset: int,
    *,
    include_headers: bool = False,
) -> DecodedFetch:
    """Decodes fetched batch bytes (see the module docstring); `next_offset` is `start_offset` if none was whole."""
    sections: list[Section] = []
    timestamp_types: list[int] = []
    legacy: list[pa.RecordBatch] = []
    next_offset = start_offset
    for batch in iter_any_batches(records):
        batch.ensure_valid()
        next_offset = max(next_offset, batch.last_offset + 1)
        if isinstance(batch, RecordBatch):
            if not batch.is_control and batch.records_count > 0:
                sections.append(batch.section())
                timestamp_types.append(int(batch.timestamp_type))
        else:
            legacy.append(_legacy_columns(batch, topic, partition, include_headers))
    parts = [_v2_columns(sections, timestamp_types, topic, partition, include_headers)] if sections else []
    parts.extend(legacy)
    if not parts:
        return DecodedFetch(empty_batch(kafka_arrow_schema(include_headers)), next_offset)
    batch = parts[0] if len(parts) == 1 else pa.concat_batches(parts)
    offsets = batch.column("offset").to_numpy()
    keep = (offsets >= start_offset) & (offsets < end_offset)
    if not keep.all():
        batch = batch.filter(pa.array(keep))
    return DecodedFetch(batch, next_offset)


def empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], type=field.type) for field in schema], schema=schema)


def _binary_column(data: pa.Buffer, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """The byte strings `data[start:start+length]` (null where length is -1), copied out by Arrow's `take`."""
    count = len(starts)
    ends = starts + np.maximum(lengths, 0)
    bounds = np.empty(2 * count + 1, dtype=np.int64)
    bounds[0 : 2 * count : 2] = starts
    bounds[1 : 2 * count : 2] = ends
    bounds[2 * count] = ends[-1]
    interleaved = pa.LargeBinaryArray.from_buffers(pa.large_binary(), 2 * count, [None, pa.py_buffer(bounds), data])
    picks = pa.array(np.arange(0, 2 * count, 2, dtype=np.int64), mask=lengths < 0)
    return interleaved.take(picks).cast(pa.binary())


def _constant_string(text: str, count: int) -> pa.Array:
    encoded = text.encode("utf-8")
    offsets = np.arange(count + 1, dtype=np.int32) * len(encoded)
    return pa.StringArray.from_buffers(count, pa.py_buffer(offsets), pa.py_buffer(encoded * count))


def _v2_columns(
    sections: list[Section], timestamp_types: list[int], topic: str, partition: int, include_headers: bool
) -> pa.RecordBatch:
    decoded = decode_sections(sections)
    columns = decoded.columns
    count = len(columns)
    arrow_buffer = pa.py_buffer(columns.section)
    arrays = [
        _binary_column(arrow_buffer, columns.key_starts, columns.key_lengths),
        _binary_column(arrow_buffer, columns.value_starts, columns.value_lengths),
        _constant_string(topic, count),
        pa.array(np.full(count, partition, dtype=np.int32)),
        pa.array(decoded.offsets),
        pa.array(decoded.timestamps * MICROS_PER_MILLI, type=TIMESTAMP_TYPE),
        pa.array(np.repeat(np.array(timestamp_types, dtype=np.int32), [section.count for section in sections])),
    ]
    if include_headers:
        # Spark's Kafka source gives null, not an empty list, for a record without headers.
        headers: list[tuple[tuple[str, bytes | None], ...] | None] = [None] * count
        for index, record_headers in columns.headers_by_record.items():
            headers[index] = record_headers
        arrays.append(pa.array(headers, type=HEADERS_TYPE))
    return pa.RecordBatch.from_arrays(arrays, schema=kafka_arrow_schema(include_headers))


def _legacy_columns(batch: LegacyBatch, topic: str, partition: int, include_headers: bool) -> pa.RecordBatch:
    """A magic 0/1 entry (plain or a compressed wrapper), record by record; such entries have no headers."""
    records = batch.records()
    timestamp_type = NO_TIMESTAMP_TYPE if batch.magic == 0 else batch.timestamp_type
    count = len(records)
    columns = [
        pa.array([record.key for record in records], type=pa.binary()),
        pa.array([record.value for record in records], type=pa.binary()),
        _constant_string(topic, count),
        pa.array(np.full(count, partition, dtype=np.int32)),
        pa.array([record.offset for record in records], type=pa.int64()),
        pa.array([record.timestamp * MICROS_PER_MILLI for record in records], type=TIMESTAMP_TYPE),
        pa.array(np.full(count, timestamp_type, dtype=np.int32)),
    ]
    if include_headers:
        columns.append(pa.nulls(count, type=HEADERS_TYPE))
    return pa.RecordBatch.from_arrays(columns, schema=kafka_arrow_schema(include_headers))
