"""Where a fetch's bytes lie on disk: the `.log` file, byte position and length a `Log.read` would return.

A reader on the partition's own machine can then `pread` the bytes from the page cache itself instead of
having them copied through the process that owns the log (Kafka's `sendfile` zero-copy path, in spirit).

`locate_file_slices(log, offset, max_bytes, isolation=...)` follows `Log.read(offset, max_bytes, isolation=...)`
step for step: the same `OffsetOutOfRangeError` / `InvalidRequestError` for the same arguments, the
batch holding `offset` first and always whole (even above `max_bytes`), nothing at or past the isolation's bound
(the high watermark; for `txn_committed`, a read_committed consumer's, the last stable offset), and never more than
one segment (a Kafka fetch stops at a segment's end). Reading `length` bytes at `position` of the first slice's
file gives exactly the bytes `Log.read` returns for the same log state.

`located_aborted_transactions(log, offset, slices)` is what a read_committed fetch answers beside located bytes:
the aborted transactions from `offset` up to the last stable offset (the bound the slices were located below, or
a later one: the LSO only moves forward). That range covers every batch located, so a consumer drops the same
records as with Kafka's narrower list (which ends at the first batch after the returned bytes); entries starting
past the returned batches are never applied to them (a consumer applies an entry to batches from its first offset).

With `max_slices` > 1 (bulk readers: one call to the log's owner for many segments), a first slice that reaches
its segment's end is followed by the next segments' bytes from their start, still within `max_bytes` in all and
below the high watermark: slice k is what a fetch from the offset after slice k-1 returns (without the
first-batch-whole rule, so it may end inside a batch, as any fetch cut by `max_bytes` does).

The slice names its file by identity as well as by path: `device` and `inode` are those of the `.log` file the positions
were computed from. Segment files are append-only below their size, so while the same inode sits at `path` the located
bytes cannot change; a segment deleted by retention, or swapped for its compacted copy (same name, new inode: the
`.swap` file renamed over it), shows as a missing file or another inode, and the reader must fall back to `Log.read`.
Identity is taken by `stat(path)` *before* checking that the segment is still in the log: segments leave the log's
segment list before their files are renamed or deleted, so a segment still listed after the `stat` was at `path` when
the `stat` ran. Retention and compaction change the list and rename files under the log's writer lock, so the last
attempt takes that lock (waiting behind at most one append) and cannot miss.

`read_located(file_slice, offset)` is the reader's side: it opens the path, checks the inode and that the file
still holds `position + length` bytes, reads them (`pread`, or with `zero_copy` a read-only `mmap` of the page
cache, prefaulted with MAP_POPULATE), and checks they walk as batches whose first one holds `offset`; an opened
or mapped file stays readable if it is unlinked afterwards. A mapped page that a later truncation cuts off
faults (SIGBUS) when touched; segment files only shrink in `Log.truncate_to` (replica divergence, which
raybroker's single replica never does) and in recovery from disk corruption, so views are for parsing and
dropping, not for keeping. `open_located(file_slice)` is its first half, for a reader that hands the located
bytes on without reading them (the Kafka listener's `sendfile`); `open_identified(path, device, inode)` its check
of the inode, which `local_log_view` makes too when it walks a segment to locate a fetch.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from dataclasses import dataclass

from storage.arguments import is_int
from storage.errors import CorruptRecordError, InvalidRequestError, KafkaStorageError, OffsetOutOfRangeError
from storage.partition.log import Log
from storage.records.file_records import iter_any_batches
from storage.segment.log_segment import LogSegment
from storage.segment.log_segments import LogSegments
from storage.segment.transaction_index import AbortedTxn

# Lock-free attempts before the locked one: a segment swapped or deleted between choosing it and checking it
# is still listed costs one retry on a fresh snapshot; two in a row within microseconds do not happen in practice.
LOCK_FREE_ATTEMPTS = 2
# Linux's MADV_POPULATE_READ (5.14): prefault a mapping's pages from the page cache, as MAP_POPULATE does at mmap
# time. Python 3.11's `mmap` module does not name it.
MADV_POPULATE_READ = 22
# The isolations a consumer's fetch reads at (`storage.partition.log_read.ISOLATIONS` less a follower's `log_end`).
CONSUMER_ISOLATIONS = ("high_watermark", "txn_committed")


@dataclass(frozen=True, slots=True)
class FileSlice:
    """`length` bytes at `position` of the `.log` file at `path`, valid while that file has (`device`, `inode`)."""

    path: str
    position: int
    length: int
    device: int
    inode: int


class _SegmentMovedError(Exception):
    """The located segment left the log (retention, compaction) while it was being located; never escapes."""


def locate_file_slices(
    log: Log, offset: int, max_bytes: int, max_slices: int = 1, *, isolation: str = "high_watermark"
) -> tuple[FileSlice, ...]:
    """Where `log.read(offset, max_bytes, isolation=isolation).records` lies (and, with `max_slices` > 1, the bytes
    of the following segments); empty when that read is empty."""
    if not is_int(offset):
        raise OffsetOutOfRangeError(f"offset must be an int, not {type(offset).__name__}")
    if not is_int(max_bytes) or max_bytes < 0:
        raise InvalidRequestError(f"max_bytes must be an int >= 0, got {max_bytes!r}")
    if not is_int(max_slices) or max_slices < 1:
        raise InvalidRequestError(f"max_slices must be an int >= 1, got {max_slices!r}")
    if isolation not in CONSUMER_ISOLATIONS:
        raise InvalidRequestError(f"unknown isolation {isolation!r}; expected one of {', '.join(CONSUMER_ISOLATIONS)}")
    committed = isolation == "txn_committed"
    for _ in range(LOCK_FREE_ATTEMPTS):
        try:
            return _locate_once(log, offset, max_bytes, max_slices, committed)
        except (_SegmentMovedError, KafkaStorageError):
            # A segment deleted while being read fails on its closed file (with `file.delete.delay.ms` 0);
            # under the lock below that cannot happen, so an I/O error there is the disk's.
            continue
    with log.lock:
        try:
            return _locate_once(log, offset, max_bytes, max_slices, committed)
        except _SegmentMovedError as exc:
            # Nothing in the log removes a listed segment's file while the lock is held: someone else did.
            raise KafkaStorageError("a listed segment's file is missing from disk", path=str(exc)) from exc


def located_aborted_transactions(log: Log, offset: int, slices: tuple[FileSlice, ...]) -> tuple[AbortedTxn, ...]:
    """The aborted transactions a read_committed fetch of `slices` from `offset` answers (see the module
    docstring); none when nothing was located."""
    if not slices:
        return ()
    return tuple(log.collect_aborted_transactions(offset, log.last_stable_offset))


def _locate_once(log: Log, offset: int, max_bytes: int, max_slices: int, committed: bool) -> tuple[FileSlice, ...]:
    if log.closed:
        raise KafkaStorageError("log is closed", path=log.directory)
    # The bounds are read before the segment list, so the upper bound's segment is in the snapshot.
    log_end_offset = log.log_end_offset
    upper_offset = min(log.last_stable_offset if committed else log.high_watermark, log_end_offset)
    log_start = log.log_start_offset
    segments = log.log_segments()
    if offset > log_end_offset or offset < log_start:
        raise OffsetOutOfRangeError(
            f"offset {offset} is outside the log's range [{log_start}, {log_end_offset}]",
            path=log.directory,
            offset=offset,
        )
    if offset >= upper_offset:
        return ()
    view = LogSegments.of(segments)
    upper_segment = view.floor(upper_offset)
    upper_base = segments[0].base_offset if upper_segment is None else upper_segment.base_offset
    upper_position = 0 if upper_segment is None else _position_of(upper_segment, upper_offset)
    located: list[tuple[LogSegment, int, int]] = []  # (segment, position, length)
    remaining = max_bytes
    segment = view.floor(offset)
    # A slice cut short of its segment's end used up `remaining` (the first one by at least its first batch),
    # so the loop stops there: later slices always start at their segment's first batch.
    while segment is not None and len(located) < max_slices:
        end = segment.size if segment.base_offset != upper_base else min(upper_position, segment.size)
        if not located:
            start = segment.translate_offset(offset)
            if start is not None:
                length = max(0, min(end - start.position, max(remaining, start.size)))
                located.append((segment, start.position, length))
                remaining -= length
        elif end > 0:
            located.append((segment, 0, min(end, remaining)))
            remaining -= min(end, remaining)
        if segment.base_offset == upper_base or remaining <= 0:
            break
        segment = view.higher(segment.base_offset)
    return _identified(log, located, offset)


def _position_of(segment: LogSegment, offset: int) -> int:
    """The byte position of the batch holding `offset`, or the segment's end when no batch holds it yet."""
    mapping = segment.translate_offset(offset)
    return segment.size if mapping is None else mapping.position


def _identified(log: Log, located: list[tuple[LogSegment, int, int]], offset: int) -> tuple[FileSlice, ...]:
    """The slices with their files' identity, stat'ed before checking the segments are still in the log."""
    slices = []
    for segment, position, length in located:
        path = segment.log.path
        try:
            status = os.stat(path)
        except FileNotFoundError as exc:
            raise _SegmentMovedError(path) from exc
        except OSError as exc:
            raise KafkaStorageError(f"cannot stat log file: {exc}", path=path, offset=offset) from exc
        slices.append(FileSlice(str(path), position, length, status.st_dev, status.st_ino))
    listed = log.log_segments()
    for segment, _, _ in located:
        if not any(candidate is segment for candidate in listed):
            raise _SegmentMovedError(segment.log.path)
    return tuple(slices)


def read_located(
    file_slice: FileSlice, offset: int, *, zero_copy: bool = False, populate: bool = True
) -> tuple[bytes | memoryview, int] | None:
    """The slice's bytes (a read-only view of the file's pages with `zero_copy`) and the offset after their last
    whole batch, if the file is still the located one and the bytes walk as batches from the one holding
    `offset`; None otherwise (file gone or replaced, shorter than located, torn bytes): read through the log.
    A view's pages are prefaulted before it is returned; with `populate=False` only those the walk touched are,
    and the caller prefaults the rest with `populate_pages` when it chooses."""
    if file_slice.length == 0:
        return b"", offset
    fd = open_located(file_slice)
    if fd is None:
        return None
    try:
        data = (
            map_pages(fd, file_slice.position, file_slice.length, populate=populate)
            if zero_copy
            else os.pread(fd, file_slice.length, file_slice.position)
        )
    except OSError:
        return None
    finally:
        os.close(fd)
    next_offset = offset_after(data, offset) if len(data) == file_slice.length else None
    return None if next_offset is None else (data, next_offset)


def open_located(file_slice: FileSlice) -> int | None:
    """A read-only file descriptor of the slice's file, if it is still the located file (same device and inode)
    and holds the slice's bytes; None otherwise. The caller closes it; it stays readable if the file is unlinked
    meanwhile, and the bytes it holds at the slice do not change (segments are append-only below their size)."""
    opened = open_identified(file_slice.path, file_slice.device, file_slice.inode)
    if opened is None:
        return None
    fd, size_bytes = opened
    if size_bytes < file_slice.position + file_slice.length:
        os.close(fd)
        return None
    return fd


def open_identified(path: str, device: int, inode: int) -> tuple[int, int] | None:
    """A read-only file descriptor of `path` and the file's size, if the file there is still the one a reader
    located (`device`, `inode`: a segment deleted and another created at its name is not); None when it is not, or
    cannot be opened. The caller closes it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        status = os.fstat(fd)
    except OSError:
        os.close(fd)
        return None
    if (status.st_dev, status.st_ino) != (device, inode):
        os.close(fd)
        return None
    return fd, status.st_size


def map_pages(fd: int, position: int, length: int, *, populate: bool) -> memoryview:
    """`length` bytes at `position` of the open file `fd`, mapped read-only (with `populate`, prefaulted from the
    page cache in one call); the mapping lives as long as the returned view."""
    start = position - position % mmap.ALLOCATIONGRANULARITY
    flags = mmap.MAP_SHARED | (mmap.MAP_POPULATE if populate else 0)
    mapping = mmap.mmap(fd, position + length - start, flags=flags, prot=mmap.PROT_READ, offset=start)
    skip = position - start
    return memoryview(mapping)[skip : skip + length]


def populate_pages(data: bytes | memoryview) -> None:
    """Prefaults the pages of a view `map_pages` made (`madvise(MADV_POPULATE_READ)`, what MAP_POPULATE does when
    mapping); anything else, and a kernel before Linux 5.14 (which refuses the advice), is left as it is."""
    mapping = data.obj if isinstance(data, memoryview) else None
    if isinstance(mapping, mmap.mmap):
        with contextlib.suppress(OSError):
            mapping.madvise(MADV_POPULATE_READ)


def offset_after(data: bytes | memoryview, offset: int) -> int | None:
    """The offset after the last whole batch of `data`, if it starts with a batch holding `offset` (or a later
    one) and its batches' offsets increase; None when the bytes do not walk that way (or hold no whole batch:
    a fetch holds at least its first batch whole, Kafka's min-one-message rule)."""
    next_offset = None
    try:
        for batch in iter_any_batches(data):
            if batch.last_offset < offset or (next_offset is not None and batch.base_offset < next_offset):
                return None
            next_offset = batch.last_offset + 1
    except CorruptRecordError:
        return None
    return next_offset


__all__ = [
    "CONSUMER_ISOLATIONS",
    "FileSlice",
    "locate_file_slices",
    "located_aborted_transactions",
    "map_pages",
    "offset_after",
    "open_identified",
    "open_located",
    "populate_pages",
    "read_located",
]
