"""Segments on their way out: renamed `.deleted` at once, unlinked `file.delete.delay.ms` later (Kafka's
`LocalLog.deleteSegmentFiles` with its scheduled `deleteSegmentFiles` task).

The rename takes the segment out of every later listing and load at once (the loader unlinks `.deleted` files on
open, so a crash before the delay ends loses nothing that is still needed); the delay leaves readers that chose
the segment before it went time to finish. The owner serialises calls (the log's lock).
"""

from __future__ import annotations

from storage import file_names
from storage.segment.log_segment import LogSegment


class DelayedDeletes:
    """The segments of one log waiting for their files to be unlinked, each with the time it is due."""

    def __init__(self) -> None:
        self._pending: list[tuple[int, LogSegment]] = []

    def schedule(self, segment: LogSegment, now_ms: int, delay_ms: int) -> None:
        """Renames the segment's files to `.deleted`; they are unlinked once `delay_ms` has passed (now, for 0)."""
        segment.change_file_suffixes(segment.suffix, file_names.DELETED_SUFFIX)
        self._pending.append((now_ms + delay_ms, segment))
        if delay_ms == 0:
            self.delete_due(now_ms)

    def delete_due(self, now_ms: int) -> int:
        """Unlinks the files whose delay has passed; returns how many segments are still waiting."""
        remaining = []
        for due, segment in self._pending:
            if due <= now_ms:
                segment.delete_files()
            else:
                remaining.append((due, segment))
        self._pending = remaining
        return len(remaining)

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        """The segments still waiting, in the order they were scheduled."""
        return tuple(segment for _, segment in self._pending)
