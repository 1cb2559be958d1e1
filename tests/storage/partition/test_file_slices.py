"""`locate_file_slices` against its oracle, `Log.read(..., isolation="high_watermark")`: for every offset and
many sizes the located file bytes are the read's bytes (several slices: the reads that follow it, segment after
segment), across segment rolls, below a lowered high watermark, after retention, with the same errors for the
same bad arguments; a racing retention pass makes it locate again."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storage.clock import MockClock
from storage.errors import InvalidRequestError, KafkaStorageError, OffsetOutOfRangeError
from storage.partition.file_slices import FileSlice, locate_file_slices, populate_pages, read_located
from storage.partition.log import Log
from storage.records.file_records import iter_any_batches
from tests.storage.builders import open_log, simple_batch


def slice_bytes(found: FileSlice) -> bytes:
    """The located bytes, read the way a local reader does (by path, checking the inode)."""
    with open(found.path, "rb") as file:
        status = os.fstat(file.fileno())
        assert (status.st_dev, status.st_ino) == (found.device, found.inode)
        return os.pread(file.fileno(), found.length, found.position)


def reads_oracle(log: Log, offset: int, max_bytes: int, max_slices: int) -> list[bytes]:
    """The first read, then while each read ended at its segment's end, a read of the next segment from the
    offset after it, with what is left of `max_bytes` (no first-batch-whole rule after the first)."""
    first = log.read(offset, max_bytes, isolation="high_watermark")
    if not first.records:
        return []
    parts = [first.records]
    segment_base = first.fetch_offset_metadata.segment_base_offset
    remaining = max_bytes - len(first.records)
    while len(parts) < max_slices and remaining > 0:
        batches = list(iter_any_batches(parts[-1]))
        next_offset = batches[-1].last_offset + 1
        if next_offset >= log.high_watermark or sum(b.size_in_bytes for b in batches) != len(parts[-1]):
            break
        following = log.read(next_offset, remaining, min_one_message=False, isolation="high_watermark")
        metadata = following.fetch_offset_metadata
        if metadata.segment_base_offset == segment_base or metadata.relative_position != 0 or not following.records:
            break
        parts.append(following.records)
        segment_base = metadata.segment_base_offset
        remaining -= len(following.records)
    return parts


def assert_matches_read(log: Log, offsets: range, sizes: tuple[int, ...]) -> None:
    for offset in offsets:
        for max_bytes in sizes:
            for max_slices in (1, 3):
                located = [slice_bytes(found) for found in locate_file_slices(log, offset, max_bytes, max_slices)]
                assert [part for part in located if part] == reads_oracle(log, offset, max_bytes, max_slices), (
                    offset,
                    max_bytes,
                    max_slices,
                )


def fill(log: Log, batches: int) -> None:
    for index in range(batches):
        log.append(simple_batch(1 + index % 3, value_size=20 + 3 * (index % 10), tag=index))


SIZES = (0, 1, 100, 300, 1000, 10**6)


def test_every_offset_and_size_locates_the_bytes_read_returns_across_segment_rolls(
    log_dir: Path, clock: MockClock
) -> None:
    log = open_log(log_dir, clock, segment_bytes=600)
    fill(log, 30)
    assert log.num_segments > 4
    assert_matches_read(log, range(log.log_start_offset, log.log_end_offset + 1), SIZES)
    log.close()


def test_a_fetch_never_spans_segments_and_the_first_batch_is_whole_above_max_bytes(
    log_dir: Path, clock: MockClock
) -> None:
    log = open_log(log_dir, clock, segment_bytes=600)
    fill(log, 20)
    (found,) = locate_file_slices(log, 0, 1)
    assert found.length > 1
    (whole,) = locate_file_slices(log, 0, 10**6)
    assert found.path == whole.path and whole.length == os.path.getsize(whole.path)
    several = locate_file_slices(log, 0, 10**6, 3)
    assert len(several) == 3 and [s.position for s in several] == [0, 0, 0]
    assert [s.length for s in several] == [os.path.getsize(s.path) for s in several]
    log.close()


def test_nothing_at_or_past_the_high_watermark_is_located(log_dir: Path, clock: MockClock) -> None:
    log = open_log(log_dir, clock, segment_bytes=600)
    fill(log, 20)
    log.update_high_watermark(log.log_end_offset - 5)
    assert_matches_read(log, range(log.log_start_offset, log.log_end_offset + 1), SIZES)
    assert locate_file_slices(log, log.high_watermark, 10**6, 5) == ()
    log.close()


def test_retention_and_delete_records_give_the_reads_answers_and_errors(log_dir: Path, clock: MockClock) -> None:
    log = open_log(log_dir, clock, segment_bytes=600, retention_bytes=1500)
    fill(log, 30)
    log.delete_old_segments()
    log.delete_records(log.log_start_offset + 2)
    assert_matches_read(log, range(log.log_start_offset, log.log_end_offset + 1), SIZES)
    for offset in (log.log_start_offset - 1, log.log_end_offset + 1):
        with pytest.raises(OffsetOutOfRangeError) as located:
            locate_file_slices(log, offset, 100)
        with pytest.raises(OffsetOutOfRangeError) as read:
            log.read(offset, 100, isolation="high_watermark")
        assert str(located.value) == str(read.value)
    log.close()


def test_bad_arguments_and_a_closed_log_raise_the_reads_errors(log_dir: Path, clock: MockClock) -> None:
    log = open_log(log_dir, clock)
    fill(log, 3)
    with pytest.raises(InvalidRequestError):
        locate_file_slices(log, 0, -1)
    with pytest.raises(InvalidRequestError):
        locate_file_slices(log, 0, 100, 0)
    with pytest.raises(OffsetOutOfRangeError):
        locate_file_slices(log, True, 100)  # type: ignore[arg-type]
    log.close()
    with pytest.raises(KafkaStorageError):
        locate_file_slices(log, 0, 100)


def test_a_segment_swapped_after_locating_has_another_inode(log_dir: Path, clock: MockClock) -> None:
    """What a compaction swap does to a located file: same name, new file; the reader must notice."""
    log = open_log(log_dir, clock, segment_bytes=600)
    fill(log, 10)
    (found,) = locate_file_slices(log, 0, 10**6)
    replacement = Path(found.path).with_suffix(".swap")
    replacement.write_bytes(Path(found.path).read_bytes())
    os.replace(replacement, found.path)
    status = os.stat(found.path)
    assert (status.st_dev, status.st_ino) != (found.device, found.inode)
    log.close_without_marker()


def test_a_segment_removed_from_the_log_while_locating_is_located_again(
    log_dir: Path, clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retention between choosing a segment and checking it: the next attempt uses the new segment list."""
    log = open_log(log_dir, clock, segment_bytes=600)
    fill(log, 30)
    first_segment = log.log_segments()[0]
    real_snapshot = log.log_segments
    calls = {"count": 0}

    def racing_snapshot() -> tuple:
        calls["count"] += 1
        if calls["count"] == 2:
            # The second call is the "still listed" check of the first attempt: retention got there first.
            log.delete_records(log.log_segments()[1].base_offset)
            log.delete_old_segments()
        return real_snapshot()

    monkeypatch.setattr(log, "log_segments", racing_snapshot)
    with pytest.raises(OffsetOutOfRangeError):
        locate_file_slices(log, first_segment.base_offset, 10**6)
    monkeypatch.undo()
    assert_matches_read(log, range(log.log_start_offset, log.log_start_offset + 3), SIZES)
    log.close()


def resident_file_kib() -> int:
    """This process's resident pages mapped from files (`RssFile`), in KiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssFile:"):
                return int(line.split()[1])
    raise AssertionError("no RssFile in /proc/self/status")


def test_a_view_mapped_without_populating_reads_the_same_bytes_and_populate_pages_faults_it_in(
    log_dir: Path, clock: MockClock
) -> None:
    log = open_log(log_dir, clock, segment_bytes=10**7)
    for index in range(8):
        log.append(simple_batch(64, value_size=8000, tag=index))
    (found,) = locate_file_slices(log, 0, 10**7)
    assert found.length > 1024 * 1024
    populated = read_located(found, 0, zero_copy=True)
    lazy = read_located(found, 0, zero_copy=True, populate=False)
    assert populated is not None and lazy is not None
    assert lazy[1] == populated[1] == log.high_watermark
    before = resident_file_kib()
    populate_pages(lazy[0])
    # The batch walk touched the pages around each ~512 KiB batch's header (the kernel faults 64 KiB around a
    # touched page); populating faults in the rest.
    assert resident_file_kib() - before >= found.length // 1024 // 2
    assert bytes(lazy[0]) == bytes(populated[0]) == slice_bytes(found)
    populate_pages(b"bytes are left alone")
    populate_pages(memoryview(b"and so are views of them"))
    log.close()
