"""The records of a chunk of consecutive batches as the columns the cleaner decides on: per record its offset,
key and whether its key and value are null, and per batch where its records lie.

The cleaner reads a segment ~1 MiB of batches at a time (`CHUNK_BYTES`) and decides on every record of the
chunk at once: the keys are digested together and go through the offset map in one `put_many` or `get_many`,
the retention rule is a few numpy expressions. Decoding goes through the one v2 codec
(`storage.records.record_columns`), by batch size:

- a batch of `COLUMNS_MIN_RECORDS` (32) records or more is decoded alone (`decode_records_columns`: runs of
  records of one layout are cut at a fixed stride, ~0.03 us a record);
- smaller v2 batches next to each other are decoded together (`decode_sections`), so a log of one-record
  batches pays numpy's fixed cost (~60 us) once per run of them instead of once per batch;
- a legacy (magic 0/1) entry goes through its own decoder, record by record (raybroker never writes them).

Decoding is as strict as `RecordBatch.records()` (framing, headers, timestamps that fit int64), and a corrupt
batch raises the same `CorruptRecordError`, naming the batch's file, position and base offset.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from storage.compaction.offset_map import SkimpyOffsetMap
from storage.errors import CorruptRecordError
from storage.records.file_records import AnyBatch
from storage.records.record_batch import COLUMNS_MIN_RECORDS, RecordBatch
from storage.records.record_columns import RecordColumns, check_timestamps, decode_records_columns, decode_sections

# A chunk ends after the batch that brings it to 1 MiB: the size the file is read in, and enough records
# (~8,000 of 130 bytes) that numpy's per-call costs are small beside the per-record work.
CHUNK_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class _Piece:
    """Decoded records of one batch, or of several small ones: keys are `data[key_starts[i]:key_ends[i]]`."""

    offsets: np.ndarray
    data: bytes | memoryview
    key_starts: np.ndarray
    key_ends: np.ndarray
    null_keys: np.ndarray
    null_values: np.ndarray


@dataclass(frozen=True, slots=True)
class ChunkRecords:
    """The decoded records of a chunk, in offset order. Batch i's records are `[bounds[i], bounds[i + 1])`
    (none for a batch that was not asked for)."""

    offsets: np.ndarray
    null_keys: np.ndarray
    null_values: np.ndarray
    bounds: np.ndarray
    pieces: list[_Piece]

    def __len__(self) -> int:
        return len(self.offsets)

    def key_digests(self, chosen: np.ndarray, offset_map: SkimpyOffsetMap) -> np.ndarray:
        """The offset map's digests of the keys of the records where `chosen` (bool, one per record) is set, in
        order; none of them may be null."""
        digests = []
        first = 0
        for piece in self.pieces:
            stop = first + len(piece.offsets)
            rows = np.flatnonzero(chosen[first:stop])
            starts = piece.key_starts[rows]
            digests.append(offset_map.digests_at(piece.data, starts, piece.key_ends[rows] - starts))
            first = stop
        return np.concatenate(digests) if digests else np.zeros((0, 2), dtype=np.int64)


def chunks(batches: Iterable[AnyBatch]) -> Iterator[list[AnyBatch]]:
    """`batches` cut into lists of consecutive batches of about `CHUNK_BYTES` (at least one batch each)."""
    chunk: list[AnyBatch] = []
    size = 0
    for batch in batches:
        chunk.append(batch)
        size += batch.size_in_bytes
        if size >= CHUNK_BYTES:
            yield chunk
            chunk = []
            size = 0
    if chunk:
        yield chunk


def decode_chunk(batches: Sequence[AnyBatch], wanted: Sequence[bool]) -> ChunkRecords:
    """The records of the batches whose `wanted` flag is set (see the module docstring)."""
    pieces: list[_Piece] = []
    counts: list[int] = []
    small: list[RecordBatch] = []
    for batch, want in zip(batches, wanted, strict=True):
        if not want:
            counts.append(0)
            continue
        if isinstance(batch, RecordBatch) and batch.records_count < COLUMNS_MIN_RECORDS:
            small.append(batch)
            counts.append(max(batch.records_count, 0))
            continue
        if small:
            pieces.append(_decode_small(small))
            small = []
        piece = _decode_batch(batch) if isinstance(batch, RecordBatch) else _decode_legacy(batch)
        pieces.append(piece)
        counts.append(len(piece.offsets))
    if small:
        pieces.append(_decode_small(small))
    bounds = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=bounds[1:])
    if not pieces:
        empty = np.zeros(0, dtype=np.int64)
        return ChunkRecords(empty, empty.astype(bool), empty.astype(bool), bounds, [])
    return ChunkRecords(
        np.concatenate([piece.offsets for piece in pieces]),
        np.concatenate([piece.null_keys for piece in pieces]),
        np.concatenate([piece.null_values for piece in pieces]),
        bounds,
        pieces,
    )


def _decode_batch(batch: RecordBatch) -> _Piece:
    try:
        columns = decode_records_columns(batch.records_view(), batch.records_count)
        if batch.log_append_time is None:
            check_timestamps(batch.base_timestamp, columns.timestamp_deltas)
    except CorruptRecordError as exc:
        raise CorruptRecordError(
            exc.message, path=batch.path, position=batch.position, offset=batch.base_offset
        ) from exc
    return _columns_piece(columns.offset_deltas + np.int64(batch.base_offset), columns)


def _decode_small(batches: list[RecordBatch]) -> _Piece:
    try:
        decoded = decode_sections([batch.section() for batch in batches])
    except CorruptRecordError:
        # Decoded together, the error names only the batch's offset: decoding each alone raises it with the
        # batch's file and position too.
        for batch in batches:
            batch.records()
        raise
    return _columns_piece(decoded.offsets, decoded.columns)


def _columns_piece(offsets: np.ndarray, columns: RecordColumns) -> _Piece:
    return _Piece(
        offsets,
        columns.section,
        columns.key_starts,
        columns.key_starts + np.maximum(columns.key_lengths, 0),
        columns.key_lengths < 0,
        columns.value_lengths < 0,
    )


def _decode_legacy(entry: AnyBatch) -> _Piece:
    records = entry.records()
    key_lengths = np.array([len(record.key or b"") for record in records], dtype=np.int64)
    key_ends = np.cumsum(key_lengths)
    return _Piece(
        np.array([record.offset for record in records], dtype=np.int64),
        b"".join(record.key or b"" for record in records),
        key_ends - key_lengths,
        key_ends,
        np.array([record.key is None for record in records], dtype=bool),
        np.array([record.value is None for record in records], dtype=bool),
    )


__all__ = ["CHUNK_BYTES", "ChunkRecords", "chunks", "decode_chunk"]
