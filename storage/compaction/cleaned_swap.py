"""The owner's side of a compaction pass: swapping the `.cleaned` segments in (Kafka's `replaceSegments`).

The owner swaps all the groups of a pass in under its lock (`swap_cleaned`), after checking that every segment the
pass read is still in the log with the size it had, that the active segment was not truncated back below the
first uncleanable offset, that the log is open and that each `.cleaned` segment has the size the cleaner wrote;
otherwise every `.cleaned` file of the pass is deleted and the pass ends with `aborted=True` (nothing to
checkpoint): a segment deleted by retention, a truncation, a topic deleted, a restarted owner or a move of the log to
another log dir (its `.cleaned` files were written in the old folder, so none is found in the new one) in between do
no harm. A first phase that fails while the log changed (a segment file renamed or cut under it) is aborted the same
way (`changed_since`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from storage import file_names
from storage.compaction.clean_result import CleanedGroup, CleanedLog, CleanResult
from storage.compaction.log_snapshot import LogSnapshot, SegmentSnapshot
from storage.errors import KafkaStorageError
from storage.partition.log_loader import new_segment
from storage.segment.log_segment import LogSegment

if TYPE_CHECKING:
    from storage.partition.log import Log

logger = logging.getLogger(__name__)


def swap_cleaned(log: Log, cleaned: CleanedLog) -> CleanResult:
    """The second phase of a pass, by the log's owner: swaps every group of `cleaned` in under the log lock, or,
    if the log changed since its snapshot (see the module docstring), deletes the `.cleaned` files and returns
    the result with `aborted=True` and the first dirty offset unchanged."""
    result = cleaned.result
    with log.lock:
        sources = _unchanged_sources(
            log, [segment for group in cleaned.groups for segment in group.replaces], result.first_uncleanable_offset
        )
        opened = None if sources is None else _open_cleaned(log, cleaned.groups)
        if sources is not None and opened is not None:
            for group, segment in zip(cleaned.groups, opened, strict=True):
                log.replace_segments([segment], [sources[source.base_offset] for source in group.replaces])
    aborted = opened is None
    if aborted:
        delete_cleaned_files(log.directory)
        result = replace(result, end_offset=result.first_dirty_offset, segments_written=0, aborted=True)
    logger.info(
        "%s: cleaned [%d, %d): %d -> %d bytes, %d -> %d messages%s",
        log.directory,
        result.first_dirty_offset,
        result.end_offset,
        result.bytes_read,
        result.bytes_written,
        result.messages_read,
        result.messages_written,
        " (aborted: the log changed)" if aborted else "",
    )
    return result


def changed_since(log: Log, snapshot: LogSnapshot) -> bool:
    """Whether `log` is closed, moved to another log dir, or lost or resized a sealed segment of `snapshot`, or its
    active segment moved back below the snapshot's: a first phase that failed then failed because of the change."""
    *sealed, active = snapshot.segments
    with log.lock:
        moved = Path(snapshot.directory) != log.directory
        return moved or _unchanged_sources(log, sealed, active.base_offset) is None


def _unchanged_sources(
    log: Log, expected: Sequence[SegmentSnapshot], active_floor: int
) -> dict[int, LogSegment] | None:
    """Under the log lock: the log's segments by base offset if it is open, holds every `expected` segment with
    its size, and its active segment starts at or above `active_floor`; None otherwise."""
    if log.closed:
        return None
    current = log.log_segments()
    by_base = {segment.base_offset: segment for segment in current[:-1]}
    if current[-1].base_offset < active_floor:
        return None
    for segment in expected:
        found = by_base.get(segment.base_offset)
        if found is None or found.size != segment.size_bytes:
            return None
    return by_base


def _open_cleaned(log: Log, groups: Sequence[CleanedGroup]) -> list[LogSegment] | None:
    """The groups' `.cleaned` segments, opened; None (and nothing left open) if one is missing or not the size its
    cleaner wrote (a restarted owner's loader deleted it, or a cleaner that died left a part)."""
    opened: list[LogSegment] = []
    for group in groups:
        if not file_names.log_file(log.directory, group.base_offset, file_names.CLEANED_SUFFIX).exists():
            break
        segment = new_segment(
            log.directory, group.base_offset, log.config, log.clock, suffix=file_names.CLEANED_SUFFIX, new_file=False
        )
        opened.append(segment)
        if segment.size != group.size_bytes:
            break
    else:
        return opened
    for segment in opened:
        segment.close_handlers()
    return None


def delete_cleaned_files(directory: Path) -> None:
    """Unlinks every `.cleaned` file of a partition folder (a folder deleted meanwhile has none left)."""
    try:
        entries = list(directory.iterdir())
    except FileNotFoundError:
        return
    except OSError as exc:
        raise KafkaStorageError(f"cannot list the cleaned files: {exc}", path=directory) from exc
    for entry in entries:
        parsed = file_names.parse_segment_name(entry.name)
        if parsed is not None and parsed[2] == file_names.CLEANED_SUFFIX:
            try:
                entry.unlink(missing_ok=True)
            except OSError as exc:
                raise KafkaStorageError(f"cannot delete a cleaned file: {exc}", path=entry) from exc
