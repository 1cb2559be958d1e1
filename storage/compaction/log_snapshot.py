"""What a compaction pass reads: the log itself, or its snapshot in another process.

A pass starts from a `LogSnapshot` the log's owner takes under its lock (`snapshot_for_cleaning`): the segment
list with each segment's size, the offsets, the config. It is plain values, so the heavy phase can run in another
process on the same node (the node's `log.cleaner.threads` cleaner actors), which opens the snapshot's segments
read-only, each `.log` bounded to its size then (`SnapshotLog`): what the owner appends meanwhile is not seen.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from storage.clock import Clock
from storage.config.log_config import LogConfig
from storage.errors import LogClosedError, OffsetOutOfRangeError
from storage.segment.log_segment import LogSegment

if TYPE_CHECKING:
    from storage.partition.log import Log


class ReadableLog(Protocol):
    """What the algorithm reads of a log: a `Log`, or a `SnapshotLog` opened from its snapshot elsewhere."""

    @property
    def directory(self) -> Path: ...

    @property
    def config(self) -> LogConfig: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...

    def log_segments(self) -> tuple[LogSegment, ...]: ...


@dataclass(frozen=True, slots=True)
class SegmentSnapshot:
    """A segment as the snapshot saw it: its base offset and the size of its `.log` then."""

    base_offset: int
    size_bytes: int


@dataclass(frozen=True, slots=True)
class LogSnapshot:
    """What one pass needs of a log (see the module docstring), taken by its owner under the log lock; plain
    values, so it crosses processes. `segments` are oldest first, the active segment last (read for the
    transaction scan, never cleaned); `first_uncleanable_offset` is the cleaner manager's bound, if any."""

    directory: str
    config: LogConfig
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    last_stable_offset: int
    segments: tuple[SegmentSnapshot, ...]
    first_dirty_offset: int
    first_uncleanable_offset: int | None


def snapshot_for_cleaning(log: Log, first_dirty_offset: int, first_uncleanable: int | None = None) -> LogSnapshot:
    """The owner's side of a pass's start: `log` as it is now. Raises `OffsetOutOfRangeError` for a first dirty
    offset outside [log start, log end], `LogClosedError` for a closed log."""
    with log.lock:
        if log.closed:
            raise LogClosedError("log is closed", path=log.directory)
        if not log.log_start_offset <= first_dirty_offset <= log.log_end_offset:
            raise OffsetOutOfRangeError(
                f"first dirty offset {first_dirty_offset} is outside [{log.log_start_offset}, {log.log_end_offset}]",
                path=log.directory,
                offset=first_dirty_offset,
            )
        return LogSnapshot(
            str(log.directory),
            log.config,
            log.log_start_offset,
            log.log_end_offset,
            log.high_watermark,
            log.last_stable_offset,
            tuple(SegmentSnapshot(segment.base_offset, segment.size) for segment in log.log_segments()),
            first_dirty_offset,
            first_uncleanable,
        )


class SnapshotLog:
    """A `LogSnapshot` opened read-only where the cleaner runs: its segments' files, each `.log` bounded to its
    size in the snapshot, so what the owner appends meanwhile is not seen. `close` closes the files."""

    def __init__(self, snapshot: LogSnapshot, clock: Clock) -> None:
        self.directory = Path(snapshot.directory)
        self.config = snapshot.config
        self.log_start_offset = snapshot.log_start_offset
        self.log_end_offset = snapshot.log_end_offset
        self.high_watermark = snapshot.high_watermark
        self.last_stable_offset = snapshot.last_stable_offset
        self._segments: list[LogSegment] = []
        try:
            for segment in snapshot.segments:
                self._segments.append(
                    LogSegment(
                        self.directory,
                        segment.base_offset,
                        index_interval_bytes=self.config.index_interval_bytes,
                        max_index_size=self.config.segment_index_bytes,
                        rolling_jitter_ms=0,
                        clock=clock,
                        read_only=True,
                        log_size_bytes=segment.size_bytes,
                    )
                )
        except BaseException:
            self.close()
            raise

    def log_segments(self) -> tuple[LogSegment, ...]:
        return tuple(self._segments)

    def close(self) -> None:
        for segment in self._segments:
            segment.close_handlers()
