"""The high-watermark file: a partition's offsets and where its high watermark lies on disk, rewritten in place by
the log's owner after every change, for readers on the same machine to look at without asking the owner.

A reader that has read a partition up to its high watermark learns from this file that more is there and which
bytes of which segment file hold it, and reads them from the segment itself
(`storage.partition.file_slices.read_located`): following a partition's tail costs a `pread` of this file per look
instead of a call to the process that owns the log.

`<topic>-<partition>/high-watermark.state` (`file_names.high_watermark_file`), `FILE_BYTES` long, big-endian:

| bytes | field                 | type | meaning                                                                |
|-------|-----------------------|------|------------------------------------------------------------------------|
| 0     | magic                 | 4s   | `b"RBHW"`                                                              |
| 4     | version               | u16  | 3                                                                      |
| 6     | state                 | u16  | 1 open and leading; 2 open, following; 0 closed (or unknown)           |
| 8     | sequence              | u64  | even, +2 per publish (also while the owner restarts: see below)        |
| 16    | high_watermark        | i64  | Kafka's high watermark                                                 |
| 24    | log_start_offset      | i64  |                                                                        |
| 32    | log_end_offset        | i64  |                                                                        |
| 40    | segment_base_offset   | i64  | the segment holding the high watermark's byte position, -1 if unknown  |
| 48    | position              | i64  | that byte position (the end of the batch before the high watermark)   |
| 56    | device                | u64  | `st_dev` of that segment's `.log` file                                 |
| 64    | inode                 | u64  | `st_ino` of that segment's `.log` file                                 |
| 72    | last_stable_offset    | i64  | the LSO: read_committed readers read below it                          |
| 80    | leader_epoch          | i64  | the epoch the replica leads (or follows) in                            |
| 88    | latest_epoch          | i64  | the newest epoch of the log's leader-epoch cache, -1 if none           |
| 96    | crc                   | u32  | CRC-32 (zlib) of bytes 0..96                                           |
| 100   | sequence again        | u64  | equal to bytes 8..16 once the publish is complete                      |

Readers act only on state 1. A leader publishes it only while it answers ListOffsets for the latest offset (its high
watermark at or past the start offset of its leader epoch: a leader elected a moment ago answers
OFFSET_NOT_AVAILABLE until then, and readers ask it meanwhile), so a reader answers that latest offset from the file
as the leader would: the high watermark (or the last stable offset) with `latest_epoch`. A follower's reads go to the
leader (Kafka's NOT_LEADER_OR_FOLLOWER, which the owner
answers), and a closed log's to the owner. The leader epoch tells a reader that a position it learned may no longer
hold: a replica truncates its log (rewriting segment bytes in place) only while it follows, and it leads again only
in a newer epoch, so bytes learned in one epoch are vouched for only while the file still names that epoch
(`storage.partition.local_log_view`).

Publishing writes bytes 0..108 over the old ones in one `pwrite` (no shared mapping: the page is the page cache's,
not the owner's), which another process may see half done: a reader takes a snapshot only if both sequences are
equal and the CRC matches, and reads again otherwise (`READ_ATTEMPTS`). The file keeps its inode for the life of
the partition folder, so a reader that opened it keeps seeing the current owner's state after the owner restarts; a
new owner continues the sequence of the old one, so a change is never missed by a reader comparing sequences. The
position is published only while the high watermark equals the log end offset (always, with one replica), as the
active segment's size; otherwise the segment fields are -1 and readers ask the owner.

The bytes are untrusted (any process may write the file): `read` checks magic, version, CRC and that the offsets
make sense (0 <= log start <= last stable offset <= high watermark <= log end), and answers None for anything else,
never raising.
Crash behaviour: an owner killed in the middle of a publish leaves a record whose CRC fails; readers ask the owner
until its successor publishes. The file holds nothing that recovery needs and is not fsynced.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from storage import file_names
from storage.partition.log import Log
from storage.segment.log_segment import LogSegment

MAGIC = b"RBHW"
VERSION = 3
STATE_CLOSED = 0
STATE_OPEN = 1
STATE_FOLLOWING = 2
_HEAD = struct.Struct(
    ">"
    "4s"  # magic
    "H"  # version
    "H"  # state
    "Q"  # sequence
    "q"  # high_watermark
    "q"  # log_start_offset
    "q"  # log_end_offset
    "q"  # segment_base_offset
    "q"  # position
    "Q"  # device
    "Q"  # inode
    "q"  # last_stable_offset
    "q"  # leader_epoch
    "q"  # latest_epoch
)
_CRC = struct.Struct(">I")
_SEQUENCE = struct.Struct(">Q")
SEQUENCE_OFFSET = struct.calcsize(">4sHH")
CRC_OFFSET = _HEAD.size
TRAILER_OFFSET = CRC_OFFSET + _CRC.size
RECORD_BYTES = TRAILER_OFFSET + _SEQUENCE.size
_SEQUENCE_MODULUS = 1 << 64
# One page: the file's length (the record is its first `RECORD_BYTES`).
FILE_BYTES = 4096
# A publish takes a few microseconds; a reader that finds one half done twice in a row asks the owner instead.
READ_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class PublishedWatermark:
    """One consistent snapshot of the file; `segment_base_offset`, `position`, `device` and `inode` are -1/0 when
    the high watermark's position is not published."""

    sequence: int
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    segment_base_offset: int
    position: int
    device: int
    inode: int
    last_stable_offset: int
    leader_epoch: int
    latest_epoch: int

    @property
    def has_position(self) -> bool:
        return self.segment_base_offset >= 0 and self.position >= 0


class HighWatermarkFile:
    """The owner's side: `create(partition_dir)`, then `publish(log)` after every change and `publish_closed()`
    when the log stops serving. One writer at a time (the caller serialises publishes)."""

    def __init__(self, path: Path, fd: int, sequence: int) -> None:
        self.path = path
        self._fd = fd
        self._sequence = sequence
        # The (segment, (device, inode)) last published: a segment's identity is stat'ed once, not per append.
        self._identity: tuple[LogSegment, tuple[int, int]] | None = None

    @classmethod
    def create(cls, partition_dir: Path) -> HighWatermarkFile:
        """Opens (creating it if needed) the folder's file, keeping its inode and continuing its sequence; raises
        `OSError` when it cannot (the caller then serves without it)."""
        path = file_names.high_watermark_file(partition_dir)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            if os.fstat(fd).st_size < FILE_BYTES:
                os.ftruncate(fd, FILE_BYTES)
            (old,) = _SEQUENCE.unpack_from(os.pread(fd, _SEQUENCE.size, SEQUENCE_OFFSET))
        except BaseException:
            os.close(fd)
            raise
        hw_file = cls(path, fd, old + old % 2)
        hw_file.publish_closed()
        return hw_file

    def publish(self, log: Log, leader_epoch: int | None = None, *, leading: bool = True) -> None:
        """Publishes the log's offsets (the last stable offset first, so that it is never found above the high
        watermark read after it), the replica's `leader_epoch` (default: the log's), the newest epoch of the log's
        leader-epoch cache, whether it leads and answers the latest offset (`leading`; readers ask the owner
        otherwise) and, when the high watermark is the log end, where it lies: the end of the active segment. The
        offsets are read before the segment, and an append writes its bytes before it moves them, so a publish
        racing an append (one from a thread other than the writer's) can only name a position past the published
        high watermark, never before it: readers check that the bytes they read end at the high watermark and
        start with the batch they asked for."""
        last_stable_offset = log.last_stable_offset
        high_watermark = log.high_watermark
        log_end_offset = log.log_end_offset
        log_start_offset = log.log_start_offset
        segment = log.active_segment
        base, position, device, inode = -1, -1, 0, 0
        if high_watermark == log_end_offset:
            identity = self._segment_identity(segment)
            if identity is not None:
                base, position = segment.base_offset, segment.size
                device, inode = identity
        self._write(
            STATE_OPEN if leading else STATE_FOLLOWING,
            high_watermark,
            log_start_offset,
            log_end_offset,
            base,
            position,
            device,
            inode,
            last_stable_offset,
            log.leader_epoch if leader_epoch is None else leader_epoch,
            -1 if log.latest_epoch is None else log.latest_epoch,
        )

    def publish_closed(self) -> None:
        """Readers ask the owner from now on (the log is closed, offline, or not open yet)."""
        self._write(STATE_CLOSED, 0, 0, 0, -1, -1, 0, 0, 0, -1, -1)

    def close(self) -> None:
        os.close(self._fd)

    def _segment_identity(self, segment: LogSegment) -> tuple[int, int] | None:
        cached = self._identity
        if cached is not None and cached[0] is segment:
            return cached[1]
        try:
            status = os.stat(segment.log.path)
        except OSError:
            return None
        self._identity = (segment, (status.st_dev, status.st_ino))
        return self._identity[1]

    def _write(self, state: int, *fields: int) -> None:
        self._sequence = (self._sequence + 2) % _SEQUENCE_MODULUS
        record = bytearray(RECORD_BYTES)
        _HEAD.pack_into(record, 0, MAGIC, VERSION, state, self._sequence, *fields)
        _CRC.pack_into(record, CRC_OFFSET, zlib.crc32(memoryview(record)[:CRC_OFFSET]))
        _SEQUENCE.pack_into(record, TRAILER_OFFSET, self._sequence)
        os.pwrite(self._fd, record, 0)


class HighWatermarkReader:
    """A reader's side: `open(path)`, then `read()` as often as wanted (a `pread` of `RECORD_BYTES` each)."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self.directory = Path(path).parent
        self._fd = fd

    @classmethod
    def open(cls, path: str) -> HighWatermarkReader | None:
        """The reader of the file at `path`, or None when it cannot be opened."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        return cls(path, fd)

    def read(self) -> PublishedWatermark | None:
        """The published state if it is open and leading, whole and sensible; None otherwise (ask the owner)."""
        for _ in range(READ_ATTEMPTS):
            try:
                data = os.pread(self._fd, RECORD_BYTES, 0)
            except OSError:
                return None
            if len(data) < RECORD_BYTES:
                return None
            magic, version, state, sequence, *fields = _HEAD.unpack_from(data)
            (crc,) = _CRC.unpack_from(data, CRC_OFFSET)
            (trailer,) = _SEQUENCE.unpack_from(data, TRAILER_OFFSET)
            if trailer != sequence or crc != zlib.crc32(data[:CRC_OFFSET]):
                continue
            if magic != MAGIC or version != VERSION or state != STATE_OPEN:
                return None
            published = PublishedWatermark(sequence, *fields)
            if not (
                0
                <= published.log_start_offset
                <= published.last_stable_offset
                <= published.high_watermark
                <= published.log_end_offset
            ):
                return None
            return published
        return None

    def segment_path(self, published: PublishedWatermark) -> str:
        """The `.log` file holding the published position."""
        return str(file_names.log_file(self.directory, published.segment_base_offset))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


__all__ = ["FILE_BYTES", "HighWatermarkFile", "HighWatermarkReader", "PublishedWatermark"]
