"""Tests for `storage.segment.log_segment`, after Kafka's LogSegmentTest (spec §4 items 8, 12, 22, 23, 26, 28, 36)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage import file_names
from storage.clock import MockClock
from storage.errors import IndexOffsetOverflowError
from storage.partition.producer_append import replay_batches
from storage.partition.producer_state import ProducerEntry, ProducerStateManager
from storage.records.file_records import TimestampAndOffset
from storage.records.record_batch import (
    NO_TIMESTAMP,
    ControlRecordType,
    RecordBatch,
    RecordBatchBuilder,
    build_control_batch,
)
from storage.segment.log_segment import MAX_RELATIVE_OFFSET, LogSegment, RollParams
from storage.segment.offset_index import OffsetPosition
from storage.segment.time_index import TimestampOffset
from storage.segment.transaction_index import AbortedTxn
from tests.storage.builders import START_MS, Rec, batch_bytes, batches_in, sparse_index_oracle

INDEX_BYTES = 1200  # 150 offset entries, 100 time entries


def make_segment(
    directory: Path, clock: MockClock, base_offset: int = 0, *, interval: int = 1, index_bytes: int = INDEX_BYTES
) -> LogSegment:
    return LogSegment(
        directory,
        base_offset,
        index_interval_bytes=interval,
        max_index_size=index_bytes,
        rolling_jitter_ms=0,
        clock=clock,
    )


@pytest.fixture
def segment(tmp_path: Path, clock: MockClock) -> Iterator[LogSegment]:
    seg = make_segment(tmp_path, clock, 40)
    yield seg
    seg.close()


def append(segment: LogSegment, base_offset: int, timestamps: list[int], value: bytes = b"hello") -> bytes:
    """Appends one batch at `base_offset` with one record per timestamp, after the roll check the log makes
    before every append (which opens both indexes); returns the batch's bytes."""
    data = batch_bytes([Rec(b"k", value, ts) for ts in timestamps], base_offset=base_offset)
    batch = RecordBatch(data)
    segment.should_roll(RollParams(10**9, 10**9, batch.max_timestamp, batch.last_offset, len(data), START_MS))
    segment.append(batch.last_offset, batch.max_timestamp, batch.last_offset, data)
    return data


def read_offsets(data: bytes) -> list[int]:
    return [record.offset for batch in batches_in(data) for record in batch.records()]


def test_read_on_empty_segment_returns_none(segment: LogSegment) -> None:
    assert segment.read(40, 300) is None


def test_read_before_first_offset_returns_the_first_batch(segment: LogSegment) -> None:
    first = append(segment, 50, [START_MS, START_MS])
    fetch = segment.read(41, 300)
    assert fetch is not None
    assert fetch.records == first
    assert fetch.fetch_offset_metadata.relative_position == 0


def test_read_after_last_offset_returns_none(segment: LogSegment) -> None:
    append(segment, 50, [START_MS, START_MS])
    assert segment.read(52, 300) is None


def test_read_from_gap_returns_the_next_batch(segment: LogSegment) -> None:
    append(segment, 50, [START_MS, START_MS])
    second = append(segment, 60, [START_MS, START_MS])
    fetch = segment.read(55, 200)
    assert fetch is not None and fetch.records == second


def test_read_from_the_middle_of_a_batch_returns_the_whole_batch(segment: LogSegment) -> None:
    append(segment, 40, [START_MS] * 3)
    second = append(segment, 43, [START_MS] * 4)
    fetch = segment.read(45, 10_000)
    assert fetch is not None and fetch.records == second
    assert read_offsets(fetch.records) == [43, 44, 45, 46]


def test_read_max_size_min_one_message_and_incomplete_first_entry(segment: LogSegment) -> None:
    first = append(segment, 40, [START_MS] * 2)
    second = append(segment, 42, [START_MS] * 2)
    both = first + second
    assert segment.read(40, len(both)).records == both
    assert segment.read(40, len(first) + 5).records == both[: len(first) + 5]
    small = segment.read(40, 10)
    assert small.records == first[:10] and small.first_entry_incomplete
    assert segment.read(40, 10, min_one_message=True).records == first
    assert not segment.read(40, 10, min_one_message=True).first_entry_incomplete
    empty = segment.read(40, 0)
    assert empty.records == b"" and not empty.first_entry_incomplete
    assert segment.read(40, 10_000, max_position=len(first)).records == first
    assert segment.read(42, 10_000, max_position=len(first)).records == b""


def test_truncate_removes_the_batch_holding_the_offset_and_all_after(tmp_path: Path, clock: MockClock) -> None:
    for target in range(40, 52):
        directory = tmp_path / str(target)
        directory.mkdir()
        seg = make_segment(directory, clock, 40)
        batches = [append(seg, base, [START_MS + base] * 3) for base in (40, 43, 46, 49)]
        removed = seg.truncate_to(target)
        kept = [batch for batch in batches if RecordBatch(batch).last_offset < target]
        assert removed == sum(map(len, batches)) - sum(map(len, kept))
        assert seg.log.read(0, seg.size) == b"".join(kept)
        expected_next = RecordBatch(kept[-1]).next_offset if kept else 40
        assert seg.read_next_offset() == expected_next
        assert all(entry.offset < target for entry in seg.offset_index.entries_list())
        assert all(entry.offset < target for entry in seg.time_index.entries_list())
        seg.close()


def test_truncate_beyond_the_last_offset_removes_nothing(segment: LogSegment) -> None:
    append(segment, 40, [START_MS])
    size = segment.size
    assert segment.truncate_to(45) == 0
    assert segment.size == size


def test_truncate_full_resets_created_time_and_rolling_timestamp(segment: LogSegment, clock: MockClock) -> None:
    append(segment, 40, [START_MS - 10_000])
    created = segment.created_ms
    clock.sleep(5000)
    segment.truncate_to(0)
    assert segment.size == 0
    assert segment.created_ms == created + 5000
    assert segment.max_timestamp_so_far == NO_TIMESTAMP
    # no roll right away: the old record time no longer counts
    assert segment.time_waited_for_roll(clock.milliseconds(), START_MS) == 0
    append(segment, 40, [START_MS + 7])
    assert segment.rolling_based_timestamp == START_MS + 7


def test_truncating_an_empty_segment_restarts_its_roll_clock(segment: LogSegment, clock: MockClock) -> None:
    clock.sleep(10_000)
    assert segment.truncate_to(40) == 0
    assert segment.created_ms == clock.milliseconds(), "Kafka resets `created` whenever the segment ends up empty"
    append(segment, 40, [NO_TIMESTAMP])
    clock.sleep(1_000)
    # Records without timestamps roll on wall time since creation: 1 s, not the 11 s since the segment was made.
    assert not segment.should_roll(RollParams(5_000, 10**6, NO_TIMESTAMP, 41, 10, clock.milliseconds()))


def test_reload_largest_timestamp_and_next_offset_after_truncation(segment: LogSegment) -> None:
    timestamps = [START_MS + t for t in (5, 90, 20, 60, 70, 10)]
    for i, ts in enumerate(timestamps):
        append(segment, 40 + i, [ts])
    segment.truncate_to(43)
    assert segment.max_timestamp_and_offset == TimestampAndOffset(START_MS + 90, 41)
    assert segment.read_next_offset() == 43
    segment.truncate_to(41)
    assert segment.max_timestamp_and_offset == TimestampAndOffset(START_MS + 5, 40)


def test_sparse_index_follows_the_per_append_rule(tmp_path: Path, clock: MockClock) -> None:
    rng = random.Random(7)
    for interval in (0, 1, 100, 333, 1000):
        directory = tmp_path / str(interval)
        directory.mkdir()
        seg = make_segment(directory, clock, 0, interval=interval, index_bytes=8000)
        appends, offset = [], 0
        for _ in range(60):
            count = rng.randint(1, 4)
            data = append(seg, offset, [START_MS] * count, value=b"x" * rng.randint(1, 90))
            offset += count
            appends.append((len(data), offset - 1))
        expected = sparse_index_oracle(appends, interval)
        assert [(e.offset, e.position) for e in seg.offset_index.entries_list()] == expected
        seg.close()


def test_index_entries_use_last_offset_of_the_append_and_its_start_position(segment: LogSegment) -> None:
    first = append(segment, 40, [START_MS] * 3)
    append(segment, 43, [START_MS + 5] * 2)
    assert segment.offset_index.entries_list() == [OffsetPosition(44, len(first))]
    assert segment.time_index.entries_list() == [TimestampOffset(START_MS + 5, 44)]


def test_time_index_keeps_the_running_max_with_the_offset_of_its_batch(segment: LogSegment) -> None:
    for i, ts in enumerate([100, 300, 200, 400, 400, 350]):
        append(segment, 40 + 2 * i, [START_MS + ts - 1, START_MS + ts])
    assert segment.time_index.entries_list() == [
        TimestampOffset(START_MS + 300, 43),
        TimestampOffset(START_MS + 400, 47),
    ]
    assert segment.max_timestamp_and_offset == TimestampAndOffset(START_MS + 400, 47)


def test_find_offset_by_timestamp_returns_first_record_at_or_after(tmp_path: Path, clock: MockClock) -> None:
    rng = random.Random(11)
    seg = make_segment(tmp_path, clock, 100, interval=50)
    records: list[tuple[int, int]] = []
    offset = 100
    for _ in range(40):
        stamps = [START_MS + rng.randint(0, 500) for _ in range(rng.randint(1, 3))]
        append(seg, offset, stamps)
        records += [(offset + i, ts) for i, ts in enumerate(stamps)]
        offset += len(stamps)
    for target in range(START_MS - 5, START_MS + 510, 7):
        for starting in (100, 130):
            found = seg.find_offset_by_timestamp(target, starting)
            expected = _first_record_with_ts_at_least(records, target, starting)
            assert (None if found is None else (found.offset, found.timestamp)) == expected, (target, starting)
    seg.close()


def _first_record_with_ts_at_least(
    records: list[tuple[int, int]], target: int, starting: int
) -> tuple[int, int] | None:
    """The first record, in offset order, with ts >= target and offset >= starting."""
    candidates = [(offset, ts) for offset, ts in records if ts >= target and offset >= starting]
    return min(candidates) if candidates else None


def test_recovery_rebuilds_the_same_indexes_as_the_appends(tmp_path: Path, clock: MockClock) -> None:
    seg = make_segment(tmp_path, clock, 0, interval=200)
    rng = random.Random(3)
    offset = 0
    for _ in range(50):
        count = rng.randint(1, 3)
        append(seg, offset, [START_MS + rng.randint(0, 1000)] * count, value=b"y" * rng.randint(1, 60))
        offset += count
    offsets, times = seg.offset_index.entries_list(), seg.time_index.entries_list()
    seg.offset_index.truncate()
    seg.time_index.truncate()
    assert seg.recover() == 0
    assert seg.offset_index.entries_list() == offsets
    # recovery also writes the final (max timestamp, offset) entry, as a roll or close would
    final = seg.max_timestamp_and_offset
    expected_times = times if times and times[-1].timestamp == final.timestamp else [*times, TimestampOffset(*final)]
    assert seg.time_index.entries_list() == expected_times
    seg.close()


@pytest.mark.parametrize("index", ["offset", "time"])
def test_recovery_fixes_a_corrupt_index(tmp_path: Path, clock: MockClock, index: str) -> None:
    seg = make_segment(tmp_path, clock, 0)
    for i in range(30):
        append(seg, i, [START_MS + i])
    expected_offsets = seg.offset_index.entries_list()
    target = seg.offset_index if index == "offset" else seg.time_index
    rng = random.Random(5)
    for slot in range(target.entries):
        if index == "offset":
            seg.offset_index._buffer_for_read()[slot * 8 : slot * 8 + 8] = rng.randbytes(8)
        else:
            seg.time_index._buffer_for_read()[slot * 12 : slot * 12 + 12] = rng.randbytes(12)
    seg.recover()
    assert seg.offset_index.entries_list() == expected_offsets
    for i in range(30):
        assert seg.find_offset_by_timestamp(START_MS + i, 0) == TimestampAndOffset(START_MS + i, i, None)
    seg.close()


def test_recovery_with_a_corrupt_message_truncates_from_that_batch(tmp_path: Path, clock: MockClock) -> None:
    seg = make_segment(tmp_path, clock, 0)
    batches = [append(seg, i, [START_MS + i]) for i in range(20)]
    corrupt_at = 11
    position = sum(map(len, batches[:corrupt_at]))
    with open(seg.log.path, "r+b") as handle:
        handle.seek(position + len(batches[corrupt_at]) - 1)
        handle.write(b"\xff" if batches[corrupt_at][-1] != 0xFF else b"\x00")
    truncated = seg.recover()
    assert truncated == sum(map(len, batches[corrupt_at:]))
    assert seg.size == position
    assert seg.read_next_offset() == corrupt_at
    assert all(entry.offset < corrupt_at for entry in seg.offset_index.entries_list())
    assert seg.max_timestamp_and_offset == TimestampAndOffset(START_MS + corrupt_at - 1, corrupt_at - 1)
    seg.close()


def test_should_roll_on_size(segment: LogSegment, clock: MockClock) -> None:
    data = append(segment, 40, [START_MS])
    params = RollParams(10**9, 3 * len(data), START_MS, 41, len(data), clock.milliseconds())
    assert not segment.should_roll(params)
    append(segment, 41, [START_MS])
    assert not segment.should_roll(params)
    append(segment, 42, [START_MS])
    assert segment.should_roll(params)


def test_should_roll_on_record_time_when_records_have_timestamps(segment: LogSegment, clock: MockClock) -> None:
    append(segment, 40, [START_MS + 100])
    clock.sleep(10_000)  # wall time is ignored while records carry timestamps
    assert not segment.should_roll(RollParams(1000, 10**6, START_MS + 1100, 41, 10, clock.milliseconds()))
    assert segment.should_roll(RollParams(1000, 10**6, START_MS + 1101, 41, 10, clock.milliseconds()))


def test_should_roll_on_wall_time_when_records_have_no_timestamp(segment: LogSegment, clock: MockClock) -> None:
    append(segment, 40, [NO_TIMESTAMP])
    clock.sleep(1000)
    assert not segment.should_roll(RollParams(1000, 10**6, NO_TIMESTAMP, 41, 10, clock.milliseconds()))
    clock.sleep(1)
    assert segment.should_roll(RollParams(1000, 10**6, NO_TIMESTAMP, 41, 10, clock.milliseconds()))


def test_empty_segment_never_rolls_on_time(segment: LogSegment, clock: MockClock) -> None:
    clock.sleep(10**7)
    assert not segment.should_roll(RollParams(1, 10**6, START_MS + 10**7, 41, 10, clock.milliseconds()))


def test_should_roll_when_an_index_is_full_or_offsets_overflow(tmp_path: Path, clock: MockClock) -> None:
    seg = make_segment(tmp_path, clock, 0, interval=0, index_bytes=48)  # 6 offset slots, 4 time slots (3 usable)
    params = RollParams(10**9, 10**9, START_MS, 1, 10, clock.milliseconds())
    for offset in range(10):
        if seg.should_roll(params):
            break
        append(seg, offset, [START_MS + offset])
    assert offset == 4, "one append without an index entry, then three entries fill the time index"
    assert seg.time_index.is_full()
    assert seg.time_index.entries == 3
    overflow = RollParams(10**9, 10**9, START_MS, MAX_RELATIVE_OFFSET + 1, 10, clock.milliseconds())
    (tmp_path / "fresh").mkdir()
    fresh = make_segment(tmp_path / "fresh", clock, 0)
    assert fresh.should_roll(overflow)
    assert not fresh.should_roll(RollParams(10**9, 10**9, START_MS, MAX_RELATIVE_OFFSET, 10, clock.milliseconds()))
    fresh.close()
    seg.close()


def test_append_beyond_the_relative_offset_range_raises(segment: LogSegment) -> None:
    data = batch_bytes([Rec(b"k", b"v")], base_offset=40 + MAX_RELATIVE_OFFSET + 1)
    with pytest.raises(IndexOffsetOverflowError):
        segment.append(40 + MAX_RELATIVE_OFFSET + 1, START_MS, 40 + MAX_RELATIVE_OFFSET + 1, data)
    assert segment.size == 0


def test_indexes_preallocated_while_active_and_trimmed_on_roll(segment: LogSegment) -> None:
    for i in range(5):
        append(segment, 40 + i, [START_MS + i])
    assert segment.offset_index_path.stat().st_size == INDEX_BYTES
    assert segment.time_index_path.stat().st_size == INDEX_BYTES
    segment.on_become_inactive_segment()
    assert segment.offset_index_path.stat().st_size == segment.offset_index.entries * 8 == 4 * 8
    # one time entry per offset entry (the max rose every time); the final entry repeats the last one
    assert segment.time_index_path.stat().st_size == segment.time_index.entries * 12 == 4 * 12
    assert segment.time_index.last_entry == TimestampOffset(START_MS + 4, 44)


def test_close_trims_indexes_and_writes_the_final_time_entry(tmp_path: Path, clock: MockClock) -> None:
    seg = make_segment(tmp_path, clock, 0, interval=10_000)
    append(seg, 0, [START_MS + 9, START_MS + 3])
    append(seg, 2, [START_MS + 5])
    seg.close()
    assert file_names.index_file(tmp_path, 0).stat().st_size == 0
    assert file_names.time_index_file(tmp_path, 0).read_bytes() == (START_MS + 9).to_bytes(8, "big") + (1).to_bytes(
        4, "big"
    )
    reopened = make_segment(tmp_path, clock, 0, interval=10_000)
    assert reopened.max_timestamp_and_offset == TimestampAndOffset(START_MS + 9, 1)
    assert reopened.read_next_offset() == 3
    reopened.close()


def test_change_file_suffixes_and_delete_files(tmp_path: Path, clock: MockClock) -> None:
    seg = make_segment(tmp_path, clock, 7)
    append(seg, 7, [START_MS])
    seg.change_file_suffixes("", file_names.DELETED_SUFFIX)
    names = sorted(entry.name for entry in tmp_path.iterdir())
    assert names == [
        "00000000000000000007.index.deleted",
        "00000000000000000007.log.deleted",
        "00000000000000000007.timeindex.deleted",
    ]
    assert seg.read(7, 1000) is not None
    seg.delete_files()
    assert list(tmp_path.iterdir()) == []


# --- the transaction index ----------------------------------------------------------------------------


def transactional(base_offset: int, producer_id: int, count: int = 2) -> bytes:
    builder = RecordBatchBuilder(
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=100,
        is_transactional=True,
        partition_leader_epoch=15,
    )
    for value in range(count):
        builder.append(None, b"%d" % value, timestamp=START_MS)
    return builder.build()


def end_txn(control_type: ControlRecordType, producer_id: int, offset: int) -> bytes:
    return build_control_batch(control_type, timestamp=START_MS, producer_id=producer_id, base_offset=offset)


def test_recover_rebuilds_the_transaction_index(segment: LogSegment, tmp_path: Path) -> None:
    """Kafka's LogSegmentTest.testRecoverTransactionIndex: the entry names the aborted transaction's first offset,
    its marker, and the first offset of the other producer's transaction still open (100)."""
    pid1, pid2 = 5, 10
    segment.append(101, NO_TIMESTAMP, 100, transactional(100, pid1))
    segment.append(103, NO_TIMESTAMP, 102, transactional(102, pid2))
    segment.append(105, NO_TIMESTAMP, 104, batch_bytes([Rec(None, b"a"), Rec(None, b"b")], base_offset=104))
    segment.append(106, NO_TIMESTAMP, 106, end_txn(ControlRecordType.ABORT, pid2, 106))
    segment.append(107, NO_TIMESTAMP, 107, end_txn(ControlRecordType.COMMIT, pid1, 107))

    state = ProducerStateManager(tmp_path)
    segment.recover(on_batch=replay_batches(state, segment.txn_index))
    assert segment.txn_index.entries == (AbortedTxn(pid2, 102, 106, 100),)
    assert state.ongoing_transactions == {}

    # Again, as if pid2's transaction had begun in an earlier segment, at offset 75.
    state = ProducerStateManager(tmp_path)
    state.put_entries({pid2: ProducerEntry(pid2, 0, current_txn_first_offset=75)}, [(75, pid2)])
    segment.recover(on_batch=replay_batches(state, segment.txn_index))
    assert segment.txn_index.entries == (AbortedTxn(pid2, 75, 106, 100),)


def test_recover_without_a_replayer_leaves_the_transaction_index(segment: LogSegment, tmp_path: Path) -> None:
    segment.append(101, NO_TIMESTAMP, 100, transactional(100, 5))
    segment.txn_index.append(AbortedTxn(5, 100, 102, 103))
    segment.recover()
    assert segment.txn_index.entries == (AbortedTxn(5, 100, 102, 103),)


def test_truncate_and_delete_take_the_transaction_index_along(tmp_path: Path, clock: MockClock) -> None:
    segment = make_segment(tmp_path, clock, 100)
    segment.append(101, NO_TIMESTAMP, 100, transactional(100, 5))
    segment.append(102, NO_TIMESTAMP, 102, end_txn(ControlRecordType.ABORT, 5, 102))
    segment.append(104, NO_TIMESTAMP, 103, transactional(103, 6))
    segment.append(105, NO_TIMESTAMP, 105, end_txn(ControlRecordType.ABORT, 6, 105))
    segment.txn_index.append(AbortedTxn(5, 100, 102, 103))
    segment.txn_index.append(AbortedTxn(6, 103, 105, 106))
    segment.truncate_to(103)
    assert segment.txn_index.entries == (AbortedTxn(5, 100, 102, 103),)
    segment.change_file_suffixes("", file_names.DELETED_SUFFIX)
    assert segment.txn_index.path.name.endswith(file_names.TXN_INDEX_SUFFIX + file_names.DELETED_SUFFIX)
    assert segment.txn_index.path.exists()
    segment.delete_files()
    assert not any(segment.directory.iterdir())
