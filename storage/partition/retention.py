"""Deleting whole old segments (Kafka's `UnifiedLog.deleteOldSegments`) and DeleteRecords.

Three rules run in Kafka's order; each walks the segments oldest first and stops at the first one that
does not qualify:

1. log-start-offset breach (every policy): a segment goes when the NEXT segment's base offset is <=
   `log_start_offset`, i.e. DeleteRecords or an earlier pass moved the start past it;
2. size (`delete` policy, `retention.bytes` >= 0): while the log is larger than the limit, the oldest
   segments go as long as removing a whole segment keeps the log at or above the limit;
3. time (`delete` policy, `retention.ms` >= 0): a segment goes when its retention timestamp is older
   than now - `retention.ms`.

Common rules: a segment goes only if all of it is below the high watermark (its upper bound, the next
segment's base or the log end offset, is <= HW); an empty last segment never goes; when every segment
would go, the log first rolls a fresh empty active segment, so it stays appendable at the same offset.
`log_start_offset` moves to the first remaining segment's base and never backwards. Deleted segments
are renamed `.deleted` at once (no longer readable) and unlinked after `file.delete.delay.ms`.

Future timestamps (KAFKA-6482): Kafka judges a segment by its largest record timestamp, so
one record stamped years ahead pins its segment for years. Here a segment's retention timestamp is
its largest record timestamp capped at the time the segment was last written (the `.log` file's
mtime) plus the allowed producer clock skew, `min(message.timestamp.after.max.ms, 1 hour)` (1 hour is
Kafka 4.0's default for that setting). Honest timestamps are never later than their write time plus
skew, so they are unaffected; a record from the far future expires `retention.ms` after it was written.
Segments without timestamps use the mtime, as in Kafka.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from storage.arguments import is_int
from storage.clock import Clock
from storage.config.log_config import LogConfig
from storage.errors import OffsetOutOfRangeError, PolicyViolationError
from storage.segment.log_segment import LogSegment

# Kafka 4.0's default for message.timestamp.after.max.ms: the largest producer clock skew tolerated.
MAX_FUTURE_SKEW_MS = 3_600_000
HIGH_WATERMARK_OFFSET = -1


class RetainedLog(Protocol):
    """What retention reads and calls on a partition log (`storage.partition.log.Log` is the one that runs)."""

    directory: Path

    @property
    def config(self) -> LogConfig: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def size_in_bytes(self) -> int: ...

    def log_segments(self) -> tuple[LogSegment, ...]: ...

    def remove_and_delete_segments(self, segments: list[LogSegment]) -> int: ...

    def maybe_increment_log_start_offset(self, offset: int) -> int: ...


def retention_timestamp(segment: LogSegment, after_max_ms: int) -> int:
    """The timestamp time-based retention judges `segment` by (see the module docstring)."""
    written_ms = segment.last_modified_ms()
    if segment.max_timestamp_so_far < 0:
        return written_ms
    return min(segment.max_timestamp_so_far, written_ms + min(after_max_ms, MAX_FUTURE_SKEW_MS))


def deletable_segments(
    log: RetainedLog, predicate: Callable[[LogSegment, LogSegment | None], bool]
) -> list[LogSegment]:
    """Oldest-first prefix of segments that satisfy `predicate`, are below the HW and not an empty last one."""
    segments = log.log_segments()
    deletable: list[LogSegment] = []
    high_watermark = log.high_watermark
    for index, segment in enumerate(segments):
        following = segments[index + 1] if index + 1 < len(segments) else None
        upper_bound = following.base_offset if following is not None else log.log_end_offset
        last_and_empty = following is None and segment.size == 0
        if last_and_empty or upper_bound > high_watermark or not predicate(segment, following):
            break
        deletable.append(segment)
    return deletable


def delete_log_start_offset_breached_segments(log: RetainedLog) -> int:
    start = log.log_start_offset
    return log.remove_and_delete_segments(
        deletable_segments(log, lambda _, following: following is not None and following.base_offset <= start)
    )


def delete_retention_size_breached_segments(log: RetainedLog) -> int:
    limit = log.config.retention_bytes
    size = log.size_in_bytes
    if limit < 0 or size < limit:
        return 0
    excess = size - limit

    def over_limit(segment: LogSegment, _: LogSegment | None) -> bool:
        nonlocal excess
        if excess - segment.size >= 0:
            excess -= segment.size
            return True
        return False

    return log.remove_and_delete_segments(deletable_segments(log, over_limit))


def delete_retention_ms_breached_segments(log: RetainedLog) -> int:
    retention_ms = log.config.retention_ms
    if retention_ms < 0:
        return 0
    now_ms = log.clock.milliseconds()
    after_max_ms = log.config.timestamp_after_max_ms
    return log.remove_and_delete_segments(
        deletable_segments(log, lambda segment, _: now_ms - retention_timestamp(segment, after_max_ms) > retention_ms)
    )


def delete_old_segments(log: RetainedLog) -> int:
    """One retention pass; returns the number of segments deleted."""
    deleted = delete_log_start_offset_breached_segments(log)
    if log.config.delete:
        deleted += delete_retention_size_breached_segments(log)
        deleted += delete_retention_ms_breached_segments(log)
    return deleted


def delete_records(log: RetainedLog, offset: int) -> int:
    """Kafka's DeleteRecords: moves the log start offset to `offset` (-1 = the high watermark).

    Reads below it fail at once; whole segments below it go on the next retention pass. Returns the
    new log start offset.
    """
    if not log.config.delete:
        raise PolicyViolationError(
            f"records cannot be deleted from a topic with cleanup.policy={log.config.cleanup_policy}",
            path=log.directory,
        )
    target = log.high_watermark if offset == HIGH_WATERMARK_OFFSET else offset
    if not is_int(target) or target < 0:
        raise OffsetOutOfRangeError(f"cannot delete records before offset {offset!r}", path=log.directory)
    return log.maybe_increment_log_start_offset(target)
