"""Shared helpers for the log-layer tests: client batches, logs on a `MockClock`, oracles and file snapshots.

Batches are built two ways: with our `RecordBatchBuilder` (what most tests feed) and with kafka-python's
`DefaultRecordBatchBuilder` (an independent producer); `kafka_decode` reads bytes back with kafka-python's
`MemoryRecords`, so what the log stores is checked by a reader that shares no code with it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from storage import file_names
from storage.clock import MockClock
from storage.config.log_config import LogConfig
from storage.partition.log import Log
from storage.records.compression import CompressionType
from storage.records.file_records import iter_any_batches
from storage.records.record_batch import NO_TIMESTAMP, RecordBatch, RecordBatchBuilder

START_MS = 1_700_000_000_000
ALL_CODECS = tuple(CompressionType)
Header = tuple[str, bytes | None]


@dataclass(frozen=True)
class Rec:
    """One record as a producer hands it over: the oracle the tests compare against."""

    key: bytes | None
    value: bytes | None
    timestamp: int = START_MS
    headers: tuple[Header, ...] = ()


def batch_bytes(
    records: Sequence[Rec],
    *,
    compression: CompressionType = CompressionType.NONE,
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """One v2 client batch holding `records`, built by our `RecordBatchBuilder`."""
    builder = RecordBatchBuilder(
        compression=compression,
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )
    for record in records:
        builder.append(record.key, record.value, timestamp=record.timestamp, headers=record.headers)
    return builder.build()


def simple_batch(
    count: int = 1,
    *,
    timestamp: int = START_MS,
    value_size: int = 10,
    tag: int = 0,
    compression: CompressionType = CompressionType.NONE,
) -> bytes:
    """`count` keyed records `k<tag>-<i>` -> `value_size` bytes, timestamps `timestamp + i`."""
    return batch_bytes(
        simple_records(count, timestamp=timestamp, value_size=value_size, tag=tag), compression=compression
    )


def simple_records(count: int, *, timestamp: int = START_MS, value_size: int = 10, tag: int = 0) -> list[Rec]:
    """The records `simple_batch` holds (a NO_TIMESTAMP `timestamp` gives every record NO_TIMESTAMP)."""
    return [
        Rec(
            f"k{tag}-{i}".encode(),
            (f"v{tag}-{i}-".encode() * value_size)[:value_size],
            timestamp if timestamp == NO_TIMESTAMP else timestamp + i,
        )
        for i in range(count)
    ]


def kafka_batch(
    records: Sequence[Rec],
    compression: CompressionType = CompressionType.NONE,
    offset_deltas: Sequence[int] | None = None,
) -> bytes:
    """One v2 batch built by kafka-python's producer-side builder (falls back to no codec when it does not shrink);
    its records carry `offset_deltas` when given (a producer's are 0, 1, 2, ...)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(compression),
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 24,
    )
    deltas = range(len(records)) if offset_deltas is None else offset_deltas
    for delta, record in zip(deltas, records, strict=True):
        metadata = builder.append(delta, record.timestamp, record.key, record.value, list(record.headers))
        assert metadata is not None, "record did not fit the kafka-python batch"
    return bytes(builder.build())


@dataclass(frozen=True)
class KafkaRecord:
    """A record as kafka-python decodes it, with its batch's codec and timestamp type."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    codec: int
    timestamp_type: int


def kafka_decode(data: bytes) -> list[KafkaRecord]:
    """Every record in `data` as kafka-python reads it; every batch's CRC must check out."""
    out: list[KafkaRecord] = []
    records = MemoryRecords(bytes(data))
    while records.has_next():
        batch = records.next_batch()
        if batch is None:
            break
        assert batch.validate_crc(), f"kafka-python rejects the CRC of batch {batch.base_offset}"
        for record in batch:
            out.append(
                KafkaRecord(
                    record.offset,
                    record.timestamp,
                    None if record.key is None else bytes(record.key),
                    None if record.value is None else bytes(record.value),
                    tuple((key, None if value is None else bytes(value)) for key, value in record.headers),
                    batch.compression_type,
                    batch.timestamp_type,
                )
            )
    return out


def as_recs(records: Iterable[Any]) -> list[Rec]:
    """Decoded records (ours or kafka-python's) projected onto the oracle's fields."""
    return [Rec(record.key, record.value, record.timestamp, tuple(record.headers)) for record in records]


def config(**overrides: Any) -> LogConfig:
    """A `LogConfig` with Kafka's defaults except `overrides` (field names, e.g. `segment_bytes=300`)."""
    return LogConfig(**overrides)


def open_log(directory: Path, clock: MockClock, **overrides: Any) -> Log:
    """Opens the log in `directory` with `config(**overrides)` on `clock`."""
    return Log.open(directory, config(**overrides), clock=clock)


def all_records(log: Log) -> list[Any]:
    """Every record of the log, decoded by our reader."""
    return list(log.records())


def batches_in(data: bytes) -> list[RecordBatch]:
    """The whole v2 batches in `data` (a trailing partial batch is dropped, as a consumer does)."""
    return [batch for batch in iter_any_batches(data) if isinstance(batch, RecordBatch)]


# A record as a follower copies it: offset, key, value and its batch's leader epoch.
LogRow = tuple[int, bytes | None, bytes | None, int]


def log_rows(log: Log, end: int | None = None) -> list[LogRow]:
    """Every record of `log` from its log start offset below `end` (default: its log end) with its batch's leader
    epoch, read as a follower fetches (isolation log_end)."""
    end = log.log_end_offset if end is None else end
    out: list[LogRow] = []
    position = log.log_start_offset
    while position < end:
        batches = batches_in(log.read(position, 1 << 20, isolation="log_end").records)
        assert batches, f"{log.directory}: nothing to read at {position} below {end}"
        for batch in batches:
            out.extend(
                (record.offset, record.key, record.value, batch.partition_leader_epoch)
                for record in batch.records()
                if position <= record.offset < end
            )
            position = max(position, batch.last_offset + 1)
    return out


def segment_bases(directory: Path, suffix: str = file_names.LOG_SUFFIX) -> list[int]:
    """Base offsets of the plain `<base><suffix>` files in `directory`, sorted."""
    bases = []
    for entry in directory.iterdir():
        parsed = file_names.parse_segment_name(entry.name)
        if parsed is not None and parsed[1] == suffix and not parsed[2]:
            bases.append(parsed[0])
    return sorted(bases)


def file_states(directory: Path) -> dict[str, tuple[bytes, int]]:
    """name -> (content, mtime in ns) of every file in `directory`."""
    return {
        entry.name: (entry.read_bytes(), entry.stat().st_mtime_ns)
        for entry in sorted(directory.iterdir())
        if entry.is_file()
    }


def crash(log: Log) -> None:
    """Leaves the files as a power cut would: no flush, no marker, and the active segment's indexes still at
    their preallocated length (zero slots after the used entries), as Kafka's mmapped files are."""
    active = log.active_segment
    preallocated = log.config.segment_index_bytes
    index_paths = (active.offset_index_path, active.time_index_path)
    log.close_without_marker()
    for path, entry_size in zip(index_paths, (8, 12), strict=True):
        if path.exists():
            os.truncate(path, preallocated - preallocated % entry_size)


def sparse_index_oracle(appends: Sequence[tuple[int, int]], interval_bytes: int) -> list[tuple[int, int]]:
    """Offset-index entries of one segment from its appends [(size, last offset)], by Kafka's rule: an entry
    (last offset of the append, position where it starts) when more than `interval_bytes` were appended since
    the last entry, checked before this append's bytes count."""
    entries = []
    position = 0
    since_last_entry = 0
    for size, last_offset in appends:
        if since_last_entry > interval_bytes:
            entries.append((last_offset, position))
            since_last_entry = 0
        since_last_entry += size
        position += size
    return entries
