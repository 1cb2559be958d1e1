"""Which segments a pass rewrites together (Kafka's `groupSegmentsBySize`): consecutive segments whose `.log`
bytes, index bytes and offsets fit one segment, so each group becomes one cleaned segment."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from storage.segment.log_segment import MAX_RELATIVE_OFFSET, LogSegment


@dataclass(frozen=True, slots=True)
class SegmentSizes:
    """What grouping needs to know about a segment."""

    base_offset: int
    log_bytes: int
    offset_index_bytes: int
    time_index_bytes: int


def group_segments_by_size(
    segments: Sequence[SegmentSizes], max_log_bytes: int, max_index_bytes: int, first_uncleanable_offset: int
) -> list[list[SegmentSizes]]:
    """Consecutive segments grouped so each group fits one segment (Kafka's `groupSegmentsBySize`).

    A group grows while its total `.log` bytes stay <= `max_log_bytes`, its offset-index and time-index
    totals each stay <= `max_index_bytes`, and its offsets still fit 32 bits relative to its first base:
    the last offset of a candidate is estimated by the next segment's base - 1, or
    `first_uncleanable_offset - 1` for the last one. A segment alone always forms a group.
    """
    groups: list[list[SegmentSizes]] = []
    index = 0
    while index < len(segments):
        group = [segments[index]]
        log_bytes = segments[index].log_bytes
        offset_index_bytes = segments[index].offset_index_bytes
        time_index_bytes = segments[index].time_index_bytes
        index += 1
        while index < len(segments):
            candidate = segments[index]
            last_offset = (
                segments[index + 1].base_offset - 1 if index + 1 < len(segments) else first_uncleanable_offset - 1
            )
            if (
                log_bytes + candidate.log_bytes > max_log_bytes
                or offset_index_bytes + candidate.offset_index_bytes > max_index_bytes
                or time_index_bytes + candidate.time_index_bytes > max_index_bytes
                or last_offset - group[0].base_offset > MAX_RELATIVE_OFFSET
            ):
                break
            group.append(candidate)
            log_bytes += candidate.log_bytes
            offset_index_bytes += candidate.offset_index_bytes
            time_index_bytes += candidate.time_index_bytes
            index += 1
        groups.append(group)
    return groups


def segment_sizes(segment: LogSegment) -> SegmentSizes:
    return SegmentSizes(
        segment.base_offset, segment.size, segment.offset_index.size_in_bytes, segment.time_index.size_in_bytes
    )
