"""Where a compaction pass may work: from the first dirty offset up to the first uncleanable offset (Kafka's
`LogCleanerManager.cleanableOffsets`), never into the active segment, records younger than
`min.compaction.lag.ms`, offsets above the high watermark, or an open transaction."""

from __future__ import annotations

from collections.abc import Sequence

from storage.compaction.log_snapshot import ReadableLog
from storage.segment.log_segment import LogSegment


def floor_base_offset(segments: Sequence[LogSegment], offset: int) -> int:
    """Base offset of the segment holding `offset` (the first segment's base when `offset` precedes it)."""
    base = segments[0].base_offset
    for segment in segments:
        if segment.base_offset > offset:
            break
        base = segment.base_offset
    return base


def dirty_segments(segments: Sequence[LogSegment], first_dirty_offset: int, end_offset: int) -> list[LogSegment]:
    """Segments holding offsets in [first_dirty_offset, end_offset)."""
    chosen = []
    for index, segment in enumerate(segments):
        next_base = segments[index + 1].base_offset if index + 1 < len(segments) else None
        if segment.base_offset >= end_offset:
            break
        if next_base is None or next_base > first_dirty_offset:
            chosen.append(segment)
    return chosen


def first_uncleanable_offset(
    log: ReadableLog, first_dirty_offset: int, now_ms: int, segments: Sequence[LogSegment] | None = None
) -> int:
    """min(last stable offset, active segment base, first dirty segment younger than min.compaction.lag.ms),
    rounded down to a segment base (Kafka's `firstUncleanableDirtyOffset`). The last stable offset is at most the
    high watermark, and below every transaction still open or whose marker the high watermark has not passed."""
    segments = log.log_segments() if segments is None else segments
    active = segments[-1]
    candidates = [active.base_offset, log.last_stable_offset]
    lag_ms = log.config.min_compaction_lag_ms
    if lag_ms > 0:
        for segment in dirty_segments(segments[:-1], first_dirty_offset, active.base_offset):
            if segment.largest_timestamp > now_ms - lag_ms:
                candidates.append(segment.base_offset)
                break
    return floor_base_offset(segments, min(candidates))
