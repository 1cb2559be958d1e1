"""The ordered set of a log's segments, keyed by base offset (Kafka's `LogSegments`).

Segments never overlap: each covers [base_offset, next segment's base_offset). Lookups are binary
searches over the sorted base offsets. Readers take `snapshot()`, an immutable tuple, so a read never
waits for (or sees half of) a roll, truncation or deletion done by the writer.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from storage.segment.log_segment import LogSegment


class LogSegments:
    """Segments by base offset; copy-on-write so readers can iterate a snapshot without a lock."""

    def __init__(self) -> None:
        self._bases: tuple[int, ...] = ()
        self._segments: tuple[LogSegment, ...] = ()

    @classmethod
    def of(cls, snapshot: tuple[LogSegment, ...]) -> LogSegments:
        """A `LogSegments` over a `snapshot()` (already sorted), built in O(n) so that a reader can binary-search
        its own snapshot; adding the segments one by one would copy the tuples n times, O(n**2) per fetch."""
        view = cls()
        view._bases = tuple(segment.base_offset for segment in snapshot)
        view._segments = snapshot
        return view

    def add(self, segment: LogSegment) -> None:
        """Adds or replaces the segment with `segment.base_offset`."""
        index = bisect.bisect_left(self._bases, segment.base_offset)
        segments = list(self._segments)
        bases = list(self._bases)
        if index < len(bases) and bases[index] == segment.base_offset:
            segments[index] = segment
        else:
            bases.insert(index, segment.base_offset)
            segments.insert(index, segment)
        self._bases, self._segments = tuple(bases), tuple(segments)

    def remove(self, base_offset: int) -> None:
        index = bisect.bisect_left(self._bases, base_offset)
        if index < len(self._bases) and self._bases[index] == base_offset:
            self._bases = self._bases[:index] + self._bases[index + 1 :]
            self._segments = self._segments[:index] + self._segments[index + 1 :]

    def clear(self) -> None:
        self._bases, self._segments = (), ()

    def snapshot(self) -> tuple[LogSegment, ...]:
        """All segments, oldest first, as an immutable tuple."""
        return self._segments

    def __len__(self) -> int:
        return len(self._segments)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self._segments)

    def __bool__(self) -> bool:
        return bool(self._segments)

    def get(self, base_offset: int) -> LogSegment | None:
        index = bisect.bisect_left(self._bases, base_offset)
        if index < len(self._bases) and self._bases[index] == base_offset:
            return self._segments[index]
        return None

    @property
    def first(self) -> LogSegment | None:
        return self._segments[0] if self._segments else None

    @property
    def last(self) -> LogSegment | None:
        return self._segments[-1] if self._segments else None

    @property
    def active(self) -> LogSegment:
        """The last segment, the only one that takes appends."""
        return self._segments[-1]

    def floor(self, offset: int) -> LogSegment | None:
        """The segment with the greatest base offset <= `offset`."""
        index = bisect.bisect_right(self._bases, offset) - 1
        return self._segments[index] if index >= 0 else None

    def higher(self, base_offset: int) -> LogSegment | None:
        """The segment after the one based at `base_offset`."""
        index = bisect.bisect_right(self._bases, base_offset)
        return self._segments[index] if index < len(self._segments) else None

    def from_floor(self, offset: int) -> tuple[LogSegment, ...]:
        """The floor segment of `offset` and every later one."""
        index = max(bisect.bisect_right(self._bases, offset) - 1, 0)
        return self._segments[index:]

    def size_in_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)
