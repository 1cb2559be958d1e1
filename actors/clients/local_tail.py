"""Following a partition's tail on the reader's own node without a Ray call per fetch.

A consumer that read a same-node partition up to its high watermark (`actors.clients.local_fetch`) keeps a
`LocalTail` of it: the partition's high-watermark file (`storage.partition.high_watermark_file`, rewritten by the
partition actor after every append; `locate` answers name it) and a cursor, the segment file (device, inode) and
byte position where the reader's last read ended, with the offset there. `fetch(offset, max_bytes, min_bytes)`
reads the file (one `pread`) and, when the published high watermark moved past the cursor within the same segment
file, reads the new batches from the segment itself with `storage.partition.file_slices.read_located` (inode
checked, bytes walked as whole batches, starting with the one at `offset` and ending exactly at the high
watermark): the bytes a `fetch` call to the actor would have answered, without the call. The actor's round trip
was most of the produce-to-poll latency: ~7 ms p50 from an append to the poll returning it, with ~200 fetch
calls a second per consumer at most.

`fetch` answers:
- a `FetchResult` holding every batch between the cursor and the published high watermark (never past it);
- an empty `FetchResult` when nothing new is there, or fewer than `min_bytes` (the caller waits and looks again);
- None when the file cannot tell, and the caller fetches through the actor, whose answers and typed errors
  (`OffsetOutOfRangeError`, a closed partition) apply as before: no cursor at `offset` (the first fetch, a seek, a
  reset), the high watermark in another segment file (a roll), `offset` outside [log start, high watermark]
  (DeleteRecords, retention), more than `max_bytes` to read, a closed or offline log, a file unreadable, not
  sensible or half written, bytes that do not walk as batches. `follow` then takes the actor's located answer:
  one that ended at the high watermark puts the cursor where it ended.

Nothing read here is unpickled or evaluated: the file's fields are fixed-size integers checked on every read, and
the segment bytes are walked as Kafka batches, as every located read is.
"""

from __future__ import annotations

from dataclasses import dataclass

from actors.clients.read_counts import ReadCounts
from actors.server.partition_log import FetchResult, FileSlices
from storage.partition.file_slices import FileSlice, read_located
from storage.partition.high_watermark_file import HighWatermarkReader, PublishedWatermark
from storage.records.file_records import iter_any_batches


@dataclass(frozen=True, slots=True)
class LocalTailStatistics:
    """Fetches answered from the high-watermark file in this process: with records, and handed to the actor."""

    reads: int
    fallbacks: int


_counts = ReadCounts(LocalTailStatistics)


def statistics() -> LocalTailStatistics:
    return _counts.statistics()


@dataclass(slots=True)
class _Cursor:
    """Where the last read ended: byte `position` of the `.log` file at `path` (`device`, `inode`), at `offset`."""

    path: str
    device: int
    inode: int
    position: int
    offset: int


class LocalTail:
    """One partition's tail, followed through its high-watermark file; see the module docstring. Not thread-safe."""

    def __init__(self, reader: HighWatermarkReader) -> None:
        self._reader = reader
        self._cursor: _Cursor | None = None

    @classmethod
    def open(cls, located: FileSlices) -> LocalTail | None:
        """The tail of the partition a located answer came from, or None when it names no readable file."""
        if not located.high_watermark_file:
            return None
        reader = HighWatermarkReader.open(located.high_watermark_file)
        return None if reader is None else cls(reader)

    @property
    def high_watermark_file(self) -> str:
        """The path of the high-watermark file it reads: a partition moved to another log dir names another one."""
        return self._reader.path

    def follow(self, located: FileSlices, next_offset: int) -> None:
        """After a located read of one slice up to `next_offset`: the cursor goes to its end if that is the high
        watermark (the slice then ends at the end of the batch before it). After an empty answer at the high
        watermark, it goes where the file says the high watermark lies, if the file still says that."""
        if not located.slices and next_offset == located.high_watermark:
            published = self._reader.read()
            if published is not None and published.high_watermark == next_offset:
                self._cursor_at_high_watermark(published)
        elif len(located.slices) == 1 and next_offset == located.high_watermark:
            file_slice = located.slices[0]
            self._cursor = _Cursor(
                file_slice.path,
                file_slice.device,
                file_slice.inode,
                file_slice.position + file_slice.length,
                next_offset,
            )

    def high_watermark(self) -> int | None:
        """The high watermark the leader last published, None when the file cannot tell (ask the actor)."""
        published = self._reader.read()
        return None if published is None else published.high_watermark

    def at(self, offset: int | None) -> bool:
        """Whether the cursor is at `offset` (a fetch from there may be answered here; None: no position yet)."""
        return self._cursor is not None and self._cursor.offset == offset

    def fetch(self, offset: int, max_bytes: int, min_bytes: int = 1) -> FetchResult | None:
        """The batches from `offset` up to the high watermark, empty when there are none (or fewer than
        `min_bytes` bytes) yet, None when the actor must answer (see the module docstring)."""
        published = self._reader.read()
        if published is None or not published.log_start_offset <= offset <= published.high_watermark:
            self._fallback()
            return None
        offsets = (
            published.high_watermark,
            published.log_start_offset,
            published.log_end_offset,
            published.last_stable_offset,
        )
        if offset == published.high_watermark:
            self._cursor_at_high_watermark(published)
            return FetchResult(b"", *offsets)
        cursor = self._cursor
        if (
            cursor is None
            or not published.has_position
            or cursor.offset != offset
            or (cursor.device, cursor.inode) != (published.device, published.inode)
        ):
            self._fallback()
            return None
        length = published.position - cursor.position
        if not 0 < length <= max_bytes:
            self._fallback()
            return None
        if length < min_bytes:
            return FetchResult(b"", *offsets)
        read = read_located(FileSlice(cursor.path, cursor.position, length, cursor.device, cursor.inode), offset)
        # The bytes must start with the batch at `offset` and end at the high watermark: a publish that raced an
        # append may name a position past the high watermark (`storage.partition.high_watermark_file`).
        if read is None or read[1] != published.high_watermark or _first_base_offset(read[0]) != offset:
            self._fallback()
            return None
        cursor.position, cursor.offset = published.position, read[1]
        _counts.count("reads")
        return FetchResult(read[0], *offsets)

    def _cursor_at_high_watermark(self, published: PublishedWatermark) -> None:
        cursor = self._cursor
        if (
            cursor is not None
            and cursor.offset == published.high_watermark
            and (cursor.device, cursor.inode, cursor.position)
            == (published.device, published.inode, published.position)
        ):
            return
        if published.has_position:
            path = self._reader.segment_path(published)
            self._cursor = _Cursor(
                path, published.device, published.inode, published.position, published.high_watermark
            )

    def _fallback(self) -> None:
        """The actor answers this fetch; its located answer may start the cursor again (`follow`)."""
        self._cursor = None
        _counts.count("fallbacks")

    def close(self) -> None:
        self._reader.close()


def _first_base_offset(data: bytes | memoryview) -> int:
    """The base offset of the first batch of bytes `read_located` walked (so they hold one whole at least)."""
    return next(iter(iter_any_batches(data))).base_offset


__all__ = ["LocalTail", "LocalTailStatistics", "statistics"]
