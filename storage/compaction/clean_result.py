"""What a compaction pass produced: the `.cleaned` segments it wrote (`CleanedLog`, handed from the cleaner's
first phase to the log's owner) and its counts (`CleanResult`, Kafka's `CleanerStats`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from storage.compaction.log_snapshot import LogSnapshot, SegmentSnapshot


@dataclass
class PassCounts:
    """What a pass counts as it reads and writes (`CleanResult`'s fields of the same names)."""

    bytes_read: int = 0
    bytes_written: int = 0
    messages_read: int = 0
    messages_written: int = 0
    invalid_messages: int = 0
    map_bytes_read: int = 0
    map_messages_read: int = 0
    segments_read: int = 0


@dataclass(frozen=True, slots=True)
class CleanResult:
    """What one pass did. `end_offset` is the next pass's first dirty offset (unchanged when aborted)."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    end_offset: int
    bytes_read: int
    bytes_written: int
    messages_read: int
    messages_written: int
    invalid_messages: int
    map_bytes_read: int
    map_messages_read: int
    map_entries: int
    segments_read: int
    segments_written: int
    aborted: bool
    duration_ms: float


def aborted_pass(snapshot: LogSnapshot) -> CleanResult:
    """The result of a pass that ended before writing anything because the log changed under it."""
    first_dirty = snapshot.first_dirty_offset
    return CleanResult(
        first_dirty,
        first_dirty,
        first_dirty,
        map_entries=0,
        segments_written=0,
        aborted=True,
        duration_ms=0.0,
        **asdict(PassCounts()),
    )


@dataclass(frozen=True, slots=True)
class CleanedGroup:
    """One `.cleaned` segment a pass wrote, named after `base_offset`, `size_bytes` long, and the segments it
    replaces (as the snapshot saw them)."""

    base_offset: int
    size_bytes: int
    replaces: tuple[SegmentSnapshot, ...]


@dataclass(frozen=True, slots=True)
class CleanedLog:
    """What the first phase hands the log's owner: the groups to swap in, oldest first, and the pass's result
    once they are."""

    snapshot: LogSnapshot
    groups: tuple[CleanedGroup, ...]
    result: CleanResult
