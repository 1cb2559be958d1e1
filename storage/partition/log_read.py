"""Reading a partition log: a fetch's bytes up to an isolation bound, and ListOffsets' lookups by timestamp.

Both work on an immutable snapshot of the segment list (`LogSegments.snapshot()`), taken without the log's lock,
so a reader never waits behind an append. A segment of the snapshot may be deleted while it is read (retention
with `file.delete.delay.ms` 0): the segment then raises `SegmentDeletedError`, and the log retries on its current
segments (see `Log.read`).

Fetch (Kafka's `LocalLog.read`): whole batches from the one holding the fetch offset, at most `max_bytes` (at
least one batch with `min_one_message`), never past the bound: the log end offset, the high watermark or the last
stable offset, given as a `LogOffsetMetadata` so the bound's segment and byte position are known. The bytes may end
mid-batch, as Kafka's do.

ListOffsets (Kafka's `fetchOffsetByTimestamp`): the first record whose timestamp is >= the one asked, found
through each segment's time index; or, for MAX_TIMESTAMP (-3), the record holding the largest timestamp.
"""

from __future__ import annotations

import bisect

from storage.records.file_records import TimestampAndOffset
from storage.segment.log_segment import FetchDataInfo, LogOffsetMetadata, LogSegment

# ListOffsets' special timestamps (Kafka's ListOffsetsRequest).
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3


def floor_index(segments: tuple[LogSegment, ...], offset: int) -> int:
    """Index of the segment with the greatest base offset <= `offset` in a snapshot; -1 if none. A binary search
    on the snapshot itself: building a `LogSegments` over it costs O(segments), ~40 us a read at 1,000."""
    return bisect.bisect_right(segments, offset, key=_base_offset) - 1


def _base_offset(segment: LogSegment) -> int:
    return segment.base_offset


def offset_metadata(
    segments: tuple[LogSegment, ...], offset: int, end_metadata: LogOffsetMetadata
) -> LogOffsetMetadata:
    """Where `offset` lies: its segment's base and the byte position of the batch holding it (the segment's size
    when no batch does); `end_metadata` itself for the log end offset."""
    if offset == end_metadata.message_offset:
        return end_metadata
    index = floor_index(segments, offset)
    if index < 0:
        return LogOffsetMetadata(offset, segments[0].base_offset, 0)
    segment = segments[index]
    mapping = segment.translate_offset(offset)
    return LogOffsetMetadata(offset, segment.base_offset, mapping.position if mapping else segment.size)


def read_segments(
    segments: tuple[LogSegment, ...],
    offset: int,
    max_bytes: int,
    min_one_message: bool,
    upper: LogOffsetMetadata,
    end_metadata: LogOffsetMetadata,
) -> FetchDataInfo:
    """A fetch's bytes from `offset` (already checked to lie in the log), never at or past `upper`."""
    if offset >= upper.message_offset:
        return FetchDataInfo(LogOffsetMetadata(offset, upper.segment_base_offset, upper.relative_position), b"")
    floor = floor_index(segments, offset)
    for segment in segments[floor:] if floor >= 0 else ():
        max_position = upper.relative_position if segment.base_offset == upper.segment_base_offset else None
        fetch = segment.read(offset, max_bytes, max_position, min_one_message)
        if fetch is not None:
            return fetch
        if segment.base_offset == upper.segment_base_offset:
            break
    return FetchDataInfo(end_metadata, b"")


def offset_by_timestamp(
    segments: tuple[LogSegment, ...], timestamp_ms: int, log_start_offset: int
) -> TimestampAndOffset | None:
    """The first record at or after `log_start_offset` with a timestamp >= `timestamp_ms`, or the record holding
    the largest timestamp for MAX_TIMESTAMP; None when there is none."""
    if timestamp_ms == MAX_TIMESTAMP:
        return _max_timestamp_offset(segments)
    for segment in segments:
        if segment.size == 0 or segment.largest_timestamp < timestamp_ms:
            continue
        found = segment.find_offset_by_timestamp(timestamp_ms, log_start_offset)
        if found is not None:
            return found
    return None


def _max_timestamp_offset(segments: tuple[LogSegment, ...]) -> TimestampAndOffset | None:
    candidates = [segment for segment in segments if segment.size > 0]
    if not candidates:
        return None
    best = max(candidates, key=lambda segment: segment.max_timestamp_so_far)
    target = best.max_timestamp_so_far
    position = best.offset_index.lookup(best.max_timestamp_and_offset.offset).position
    for batch in best.log.batches(0 if target < 0 else position):
        if batch.max_timestamp == target:
            for record in batch.records():
                if record.timestamp == target:
                    return TimestampAndOffset(target, record.offset, getattr(batch, "partition_leader_epoch", None))
    return TimestampAndOffset(target, best.max_timestamp_and_offset.offset)
