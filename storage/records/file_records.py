"""A segment's `.log` file: record batches back to back, nothing else (Kafka's `FileRecords`).

The file holds consecutive log entries; every entry, whatever its magic, starts with int64 offset and
int32 length (bytes that follow), and byte 16 holds the magic (2 for v2 batches, 0/1 for legacy
messages), so 17 bytes identify any entry. With `preallocate` the file is created at `segment.bytes`
and its logical size (`size`) is tracked apart from its length on disk; a zero-filled tail reads as a
length below the minimum and is cut off by recovery.

Appends go to the end with `os.pwrite`; reads are `os.pread` slices of whole bytes, never decoded
records. Iteration reads the file in 1 MiB chunks and stops silently at a trailing partial entry,
exactly like Kafka's `FileLogInputStream`. Every I/O error is raised as `KafkaStorageError`.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from storage.errors import CorruptRecordError, KafkaStorageError
from storage.records.layout import (
    BASE_OFFSET_OFFSET,
    CURRENT_MAGIC,
    HEADER_SIZE_UP_TO_MAGIC,
    LAST_OFFSET_DELTA_OFFSET,
    MAGIC_OFFSET,
    NO_PARTITION_LEADER_EPOCH,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
)
from storage.records.legacy_records import LegacyBatch
from storage.records.record_batch import RecordBatch, batch_size_at, iter_batches

AnyBatch = RecordBatch | LegacyBatch

# Iteration reads in chunks that start small and double: a lookup from an index entry usually finds
# its batch within index.interval.bytes (4 KiB), so the first read is 16 KiB; a recovery scan soon reads
# 1 MiB at a time, where per-read overhead vanishes (a 1 GiB segment is ~1024 reads) and data stays in cache.
FIRST_READ_CHUNK_BYTES = 16 * 1024
READ_CHUNK_BYTES = 1024 * 1024
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
# Buffers one pwritev call takes (Linux's UIO_MAXIOV is 1024).
IOV_MAX = 1024


@dataclass(frozen=True, slots=True)
class BatchPosition:
    """Where a batch lies in a file: its last offset, start position and size in bytes."""

    offset: int
    position: int
    size: int


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    """A ListOffsets answer: the record's timestamp and offset, and its batch's leader epoch."""

    timestamp: int
    offset: int
    leader_epoch: int | None = None


def batch_at(buffer: bytes | memoryview, start: int, *, path: str | None, position: int) -> AnyBatch:
    """The batch (any magic) starting at `start` in `buffer`, which must hold all of it."""
    magic = buffer[start + MAGIC_OFFSET]
    if magic == CURRENT_MAGIC:
        return RecordBatch(buffer, start, path=path, position=position)
    if magic in (0, 1):
        return LegacyBatch(buffer, start, path=path, file_position=position)
    raise CorruptRecordError(f"unknown record batch magic {magic}", path=path, position=position)


def iter_any_batches(
    buffer: bytes | memoryview, *, path: str | None = None, base_position: int = 0
) -> Iterator[AnyBatch]:
    """Walks the batches of any magic in an in-memory buffer (a fetch response, a whole small file)."""
    return iter_batches(buffer, path=path, base_position=base_position, open_batch=batch_at)


class FileRecords:
    """One `.log` file. Not thread-safe for writers: the owning Log serialises appends and truncation."""

    def __init__(
        self, path: Path, *, preallocate_bytes: int = 0, read_only: bool = False, size_bytes: int | None = None
    ) -> None:
        """`size_bytes` bounds a read-only file to its first bytes: a snapshot of a file another process appends to
        (the batches it held then; a preallocated file is longer than its batches)."""
        if size_bytes is not None and not read_only:
            raise ValueError("only a read-only file can be bounded to a size")
        self.path = Path(path)
        self.read_only = read_only
        try:
            if read_only:
                self._fd = os.open(self.path, os.O_RDONLY)
            else:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            length = os.fstat(self._fd).st_size
            if preallocate_bytes and length == 0 and not read_only:
                os.ftruncate(self._fd, preallocate_bytes)
                length = 0
        except OSError as exc:
            raise KafkaStorageError(f"cannot open log file: {exc}", path=path) from exc
        self._size = length if size_bytes is None else min(length, size_bytes)
        self._preallocated = bool(preallocate_bytes)

    @property
    def size(self) -> int:
        """Logical size in bytes (the end of the last appended batch)."""
        return self._size

    def append(self, data: bytes | memoryview | Sequence[bytes | bytearray | memoryview]) -> int:
        """Writes `data` (one buffer, or pieces back to back with one `pwritev`) at the end; returns the number
        of bytes written."""
        pieces = [data] if isinstance(data, bytes | bytearray | memoryview) else list(data)
        total = sum(len(piece) for piece in pieces)
        try:
            written = 0
            for first in range(0, len(pieces), IOV_MAX):
                chunk = pieces[first : first + IOV_MAX]
                done = os.pwritev(self._fd, chunk, self._size + written)
                written += done
                if done < sum(len(piece) for piece in chunk):
                    break
            if written < total:
                rest = memoryview(b"".join(pieces))
                while written < total:
                    written += os.pwrite(self._fd, rest[written:], self._size + written)
        except OSError as exc:
            raise KafkaStorageError(f"cannot append to log file: {exc}", path=self.path, position=self._size) from exc
        self._size += written
        return written

    def read(self, position: int, size: int) -> bytes:
        """`size` bytes from `position` (fewer at the end of the file)."""
        size = max(0, min(size, self._size - position))
        if size == 0:
            return b""
        try:
            return os.pread(self._fd, size, position)
        except OSError as exc:
            raise KafkaStorageError(f"cannot read log file: {exc}", path=self.path, position=position) from exc

    def batches(self, start: int = 0, end: int | None = None) -> Iterator[AnyBatch]:
        """Batches from `start` (a batch boundary) up to `end`, read in chunks; stops at a partial tail.

        A length field below the minimum (garbage or a zero-filled tail) raises `CorruptRecordError`
        with the position; recovery catches it and truncates there.
        """
        end = self._size if end is None else min(end, self._size)
        position = start
        chunk = b""
        chunk_start = start
        chunk_bytes = FIRST_READ_CHUNK_BYTES
        path = str(self.path)
        while end - position >= HEADER_SIZE_UP_TO_MAGIC:
            if position + HEADER_SIZE_UP_TO_MAGIC > chunk_start + len(chunk):
                chunk_start, chunk = position, self.read(position, min(chunk_bytes, end - position))
                chunk_bytes = min(chunk_bytes * 2, READ_CHUNK_BYTES)
            total = batch_size_at(chunk, position - chunk_start, path=path, position=position)
            if position + total > end:
                return
            if position + total > chunk_start + len(chunk):
                chunk_start, chunk = position, self.read(position, max(total, min(chunk_bytes, end - position)))
                chunk_bytes = min(chunk_bytes * 2, READ_CHUNK_BYTES)
            yield batch_at(chunk, position - chunk_start, path=path, position=position)
            position += total

    def search_for_offset_with_size(self, target_offset: int, start_position: int) -> BatchPosition | None:
        """The first batch from `start_position` whose last offset is >= `target_offset`.

        Reads only the 61-byte header of each v2 batch it passes: a lookup starts at an index entry, at most
        `index.interval.bytes` before its batch, so one small read usually answers it (reading 16 KiB chunks
        cost two reads of a 16 KiB batch). Anything but a whole v2 header goes to the general walk.
        """
        position = start_position
        end = self._size
        while end - position >= RECORD_BATCH_OVERHEAD:
            header = self.read(position, RECORD_BATCH_OVERHEAD)
            if header[MAGIC_OFFSET] != CURRENT_MAGIC:
                break
            size = batch_size_at(header, 0, path=str(self.path), position=position)
            if size < RECORD_BATCH_OVERHEAD or position + size > end:
                break
            (base_offset,) = _INT64.unpack_from(header, BASE_OFFSET_OFFSET)
            (last_offset_delta,) = _INT32.unpack_from(header, LAST_OFFSET_DELTA_OFFSET)
            last_offset = base_offset + last_offset_delta
            if last_offset >= target_offset:
                return BatchPosition(last_offset, position, size)
            position += size
        for batch in self.batches(position):
            if batch.last_offset >= target_offset:
                return BatchPosition(batch.last_offset, batch.position, batch.size_in_bytes)
        return None

    def search_for_timestamp(
        self, target_timestamp: int, start_position: int, starting_offset: int
    ) -> TimestampAndOffset | None:
        """The first record with timestamp >= target and offset >= `starting_offset`, from a batch boundary."""
        for batch in self.batches(start_position):
            if batch.max_timestamp >= target_timestamp:
                for record in batch.records():
                    if record.timestamp >= target_timestamp and record.offset >= starting_offset:
                        return TimestampAndOffset(record.timestamp, record.offset, _leader_epoch(batch))
        return None

    def largest_timestamp_after(self, start_position: int) -> TimestampAndOffset:
        """The largest batch max-timestamp from `start_position` on, with that batch's last offset."""
        best = TimestampAndOffset(NO_TIMESTAMP, -1)
        for batch in self.batches(start_position):
            if batch.max_timestamp > best.timestamp:
                best = TimestampAndOffset(batch.max_timestamp, batch.last_offset)
        return best

    def truncate_to(self, size: int) -> int:
        """Cuts the file to `size` bytes if that shrinks it; returns the bytes removed."""
        if size < 0 or size > self._size:
            raise KafkaStorageError(f"cannot truncate {self._size}-byte log to {size} bytes", path=self.path)
        removed = self._size - size
        if removed or self._preallocated:
            try:
                os.ftruncate(self._fd, size)
            except OSError as exc:
                raise KafkaStorageError(f"cannot truncate log file: {exc}", path=self.path) from exc
        self._size = size
        self._preallocated = False
        return removed

    def trim(self) -> None:
        """Drops a preallocated tail so the file ends at its logical size (on roll and close)."""
        if self._preallocated and not self.read_only:
            self.truncate_to(self._size)

    def flush(self) -> None:
        """fsync the file."""
        if self.read_only:
            return
        try:
            os.fsync(self._fd)
        except OSError as exc:
            raise KafkaStorageError(f"cannot fsync log file: {exc}", path=self.path) from exc

    def close(self) -> None:
        """Trims a preallocated tail, fsyncs and closes the file."""
        if self._fd < 0:
            return
        self.trim()
        self.flush()
        os.close(self._fd)
        self._fd = -1

    def close_handlers(self) -> None:
        """Closes the file without flushing (the file is being deleted)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def rename_to(self, path: Path) -> None:
        """Renames the file; the open descriptor keeps working."""
        try:
            os.replace(self.path, path)
        except OSError as exc:
            raise KafkaStorageError(f"cannot rename log file to {path}: {exc}", path=self.path) from exc
        self.path = Path(path)

    def last_modified_ms(self) -> int:
        try:
            return os.stat(self.path).st_mtime_ns // 1_000_000
        except OSError as exc:
            raise KafkaStorageError(f"cannot stat log file: {exc}", path=self.path) from exc

    def set_last_modified_ms(self, timestamp_ms: int) -> None:
        os.utime(self.path, ns=(timestamp_ms * 1_000_000, timestamp_ms * 1_000_000))


def _leader_epoch(batch: AnyBatch) -> int | None:
    epoch = batch.partition_leader_epoch if isinstance(batch, RecordBatch) else NO_PARTITION_LEADER_EPOCH
    return None if epoch < 0 else epoch
