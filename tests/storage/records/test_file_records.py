"""Tests for `storage.records.file_records`, after Kafka's FileRecordsTest."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from storage.errors import CorruptRecordError, KafkaStorageError
from storage.records import file_records
from storage.records.compression import CompressionType
from storage.records.file_records import BatchPosition, FileRecords, TimestampAndOffset, iter_any_batches
from storage.records.legacy_records import LegacyBatch
from storage.records.record_batch import RecordBatch
from tests.storage.builders import START_MS, Rec, batch_bytes, simple_batch


def batch_at_offset(base_offset: int, count: int, *, timestamp: int = START_MS, value_size: int = 10) -> bytes:
    records = [Rec(f"k{base_offset + i}".encode(), b"v" * value_size, timestamp + i) for i in range(count)]
    return batch_bytes(records, base_offset=base_offset)


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    return tmp_path / "00000000000000000000.log"


def write_batches(path: Path, batches: list[bytes]) -> FileRecords:
    records = FileRecords(path)
    for batch in batches:
        records.append(batch)
    return records


def test_append_returns_bytes_written_and_grows_size(log_path: Path) -> None:
    records = FileRecords(log_path)
    first, second = batch_at_offset(0, 3), batch_at_offset(3, 2)
    assert records.append(first) == len(first)
    assert records.append(memoryview(second)) == len(second)
    assert records.size == len(first) + len(second) == log_path.stat().st_size
    assert records.read(0, records.size) == first + second
    assert records.read(len(first), 10_000) == second
    assert records.read(records.size, 10) == b""
    records.close()


def test_reopen_takes_the_file_length_as_size(log_path: Path) -> None:
    write_batches(log_path, [batch_at_offset(0, 2), batch_at_offset(2, 2)]).close()
    reopened = FileRecords(log_path)
    assert reopened.size == log_path.stat().st_size
    assert [batch.base_offset for batch in reopened.batches()] == [0, 2]
    reopened.close()


def test_iteration_does_not_return_a_partial_trailing_batch(log_path: Path) -> None:
    whole = [batch_at_offset(0, 2), batch_at_offset(2, 3)]
    partial = batch_at_offset(5, 4)
    records = write_batches(log_path, [*whole, partial[: len(partial) // 2]])
    assert [(batch.base_offset, batch.last_offset) for batch in records.batches()] == [(0, 1), (2, 4)]
    for cut in range(1, len(partial)):
        assert len(list(iter_any_batches(whole[0] + partial[:cut]))) == 1
    records.close()


def test_iteration_stops_at_end_even_mid_file(log_path: Path) -> None:
    batches = [batch_at_offset(0, 1), batch_at_offset(1, 1), batch_at_offset(2, 1)]
    records = write_batches(log_path, batches)
    assert [batch.base_offset for batch in records.batches(0, len(batches[0]) + len(batches[1]))] == [0, 1]
    assert [batch.base_offset for batch in records.batches(len(batches[0]))] == [1, 2]
    records.close()


@pytest.mark.parametrize("length_field", [0, 13, -1])
def test_length_field_below_minimum_is_corrupt_with_its_position(log_path: Path, length_field: int) -> None:
    good = batch_at_offset(0, 2)
    bad = bytearray(batch_at_offset(2, 2))
    bad[8:12] = length_field.to_bytes(4, "big", signed=True)
    records = write_batches(log_path, [good, bytes(bad)])
    iterator = records.batches()
    assert next(iterator).base_offset == 0
    with pytest.raises(CorruptRecordError) as info:
        next(iterator)
    assert info.value.position == len(good)
    assert info.value.path == str(log_path)
    records.close()


def test_zero_filled_tail_is_corrupt_at_the_end_of_the_data(log_path: Path) -> None:
    good = batch_at_offset(0, 3)
    records = write_batches(log_path, [good, bytes(100)])
    with pytest.raises(CorruptRecordError) as info:
        list(records.batches())
    assert info.value.position == len(good)
    records.close()


def test_truncate_only_when_size_shrinks(log_path: Path) -> None:
    batches = [batch_at_offset(0, 2), batch_at_offset(2, 2)]
    records = write_batches(log_path, batches)
    size = records.size
    assert records.truncate_to(size) == 0
    assert log_path.stat().st_size == size
    with pytest.raises(KafkaStorageError):
        records.truncate_to(size + 1)
    with pytest.raises(KafkaStorageError):
        records.truncate_to(-1)
    assert records.truncate_to(len(batches[0])) == len(batches[1])
    assert records.size == log_path.stat().st_size == len(batches[0])
    assert [batch.base_offset for batch in records.batches()] == [0]
    records.append(batches[1])
    assert log_path.read_bytes() == b"".join(batches)
    records.close()


def test_search_for_offset_with_size_finds_the_batch_holding_each_offset(log_path: Path) -> None:
    counts = [3, 1, 5, 2]
    batches, base = [], 10
    for count in counts:
        batches.append(batch_at_offset(base, count))
        base += count + 2  # leave a 2-offset gap after every batch, as compaction does
    records = write_batches(log_path, batches)
    positions = [sum(len(batch) for batch in batches[:i]) for i in range(len(batches))]
    parsed = [RecordBatch(batch) for batch in batches]
    for target in range(0, base + 3):
        expected = next(
            (
                BatchPosition(batch.last_offset, position, batch.size_in_bytes)
                for batch, position in zip(parsed, positions, strict=True)
                if batch.last_offset >= target
            ),
            None,
        )
        assert records.search_for_offset_with_size(target, 0) == expected
        if expected is not None:
            assert records.search_for_offset_with_size(target, expected.position) == expected
    records.close()


def test_search_for_timestamp_returns_first_record_at_or_after(log_path: Path) -> None:
    timestamps = [[50, 10, 30], [20, 20], [70, 60], [65]]
    batches, base = [], 0
    for group in timestamps:
        batches.append(batch_bytes([Rec(b"k", b"v", START_MS + ts) for ts in group], base_offset=base))
        base += len(group)
    records = write_batches(log_path, batches)
    for target in range(START_MS, START_MS + 80, 5):
        for starting_offset in (0, 2, 5):
            expected = _first_at_or_after(timestamps, target, starting_offset)
            found = records.search_for_timestamp(target, 0, starting_offset)
            assert (None if found is None else (found.timestamp, found.offset)) == expected
    records.close()


def _first_at_or_after(groups: list[list[int]], target: int, starting_offset: int) -> tuple[int, int] | None:
    """Kafka's scan: batches in order, skip those whose max < target, then the first record with ts >= target."""
    offset = 0
    for group in groups:
        stamps = [START_MS + ts for ts in group]
        if max(stamps) >= target:
            for delta, ts in enumerate(stamps):
                if ts >= target and offset + delta >= starting_offset:
                    return ts, offset + delta
        offset += len(group)
    return None


def test_largest_timestamp_after_reports_the_batch_last_offset(log_path: Path) -> None:
    batches = [
        batch_bytes([Rec(b"a", b"1", 100), Rec(b"b", b"2", 300)], base_offset=0),
        batch_bytes([Rec(b"c", b"3", 200)], base_offset=2),
        batch_bytes([Rec(b"d", b"4", 250), Rec(b"e", b"5", 150)], base_offset=3),
    ]
    records = write_batches(log_path, batches)
    assert records.largest_timestamp_after(0) == TimestampAndOffset(300, 1)
    assert records.largest_timestamp_after(len(batches[0])) == TimestampAndOffset(250, 4)
    assert records.largest_timestamp_after(records.size) == TimestampAndOffset(-1, -1)
    records.close()


def test_preallocate_creates_full_length_file_with_logical_size_zero(log_path: Path) -> None:
    records = FileRecords(log_path, preallocate_bytes=4096)
    assert log_path.stat().st_size == 4096
    assert records.size == 0
    batch = batch_at_offset(0, 2)
    records.append(batch)
    assert records.size == len(batch)
    assert log_path.stat().st_size == 4096
    assert [b.base_offset for b in records.batches()] == [0]
    records.close()
    assert log_path.stat().st_size == len(batch)
    assert log_path.read_bytes() == batch


def test_preallocate_false_creates_an_empty_file(log_path: Path) -> None:
    records = FileRecords(log_path)
    assert log_path.stat().st_size == 0 and records.size == 0
    records.close()


def test_preallocated_file_trims_on_truncate_and_trim(log_path: Path) -> None:
    records = FileRecords(log_path, preallocate_bytes=4096)
    batch = batch_at_offset(0, 2)
    records.append(batch)
    records.trim()
    assert log_path.stat().st_size == len(batch)
    records.append(batch_at_offset(2, 1))
    assert records.truncate_to(len(batch)) > 0
    assert log_path.stat().st_size == len(batch)
    records.close()


def test_preallocated_file_reopened_after_crash_keeps_its_zero_tail(log_path: Path) -> None:
    """A crash leaves the full preallocated length; iteration finds the zero tail as corrupt at the data's end."""
    records = FileRecords(log_path, preallocate_bytes=2048)
    batch = batch_at_offset(0, 2)
    records.append(batch)
    records.close_handlers()
    reopened = FileRecords(log_path)
    assert reopened.size == 2048
    with pytest.raises(CorruptRecordError) as info:
        list(reopened.batches())
    assert info.value.position == len(batch)
    reopened.close()


def test_batches_larger_than_the_read_chunk(log_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(file_records, "READ_CHUNK_BYTES", 100)
    batches = [
        batch_at_offset(0, 1),
        batch_at_offset(1, 5, value_size=80),
        batch_at_offset(6, 2),
        batch_at_offset(8, 1),
    ]
    records = write_batches(log_path, batches)
    read = list(records.batches())
    assert [bytes(batch.raw()) for batch in read] == batches
    assert [batch.position for batch in read] == [sum(len(b) for b in batches[:i]) for i in range(len(batches))]
    assert all(batch.is_valid() for batch in read)
    records.close()


def test_legacy_message_sets_are_iterated_as_legacy_batches(log_path: Path) -> None:
    builder = LegacyRecordBatchBuilder(1, 0, 1 << 20)
    builder.append(0, START_MS, b"k0", b"v0")
    builder.append(1, START_MS + 1, b"k1", b"v1")
    legacy = bytes(builder.build())
    records = write_batches(log_path, [legacy, batch_at_offset(2, 2)])
    read = list(records.batches())
    assert [type(batch) for batch in read] == [LegacyBatch, LegacyBatch, RecordBatch]
    assert [batch.last_offset for batch in read] == [0, 1, 3]
    records.close()


def test_unknown_magic_is_corrupt(log_path: Path) -> None:
    bad = bytearray(batch_at_offset(0, 1))
    bad[16] = 7
    records = write_batches(log_path, [bytes(bad)])
    with pytest.raises(CorruptRecordError):
        list(records.batches())
    records.close()


def test_rename_keeps_the_open_file_usable(log_path: Path) -> None:
    records = write_batches(log_path, [batch_at_offset(0, 1)])
    target = log_path.with_name(log_path.name + ".deleted")
    records.rename_to(target)
    assert not log_path.exists() and target.exists()
    records.append(batch_at_offset(1, 1))
    assert [batch.base_offset for batch in records.batches()] == [0, 1]
    assert records.path == target
    records.close()


def test_read_only_file_reads_but_does_not_create(tmp_path: Path, log_path: Path) -> None:
    write_batches(log_path, [batch_at_offset(0, 2)]).close()
    mtime = log_path.stat().st_mtime_ns
    records = FileRecords(log_path, read_only=True)
    assert [batch.base_offset for batch in records.batches()] == [0]
    records.close()
    assert log_path.stat().st_mtime_ns == mtime
    with pytest.raises(KafkaStorageError):
        FileRecords(tmp_path / "missing.log", read_only=True)


def test_last_modified_round_trip(log_path: Path) -> None:
    records = write_batches(log_path, [batch_at_offset(0, 1)])
    records.set_last_modified_ms(START_MS)
    assert records.last_modified_ms() == START_MS
    assert os.stat(log_path).st_mtime_ns == START_MS * 1_000_000
    records.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    counts=st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=12),
    cut=st.integers(min_value=0, max_value=60),
    chunk=st.sampled_from([64, 200, 1 << 20]),
)
def test_iteration_matches_the_written_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counts: list[int], cut: int, chunk: int
) -> None:
    monkeypatch.setattr(file_records, "READ_CHUNK_BYTES", chunk)
    path = tmp_path / f"{len(counts)}-{cut}-{chunk}.log"
    path.unlink(missing_ok=True)
    batches, base = [], 0
    for count in counts:
        batches.append(simple_batch(count, compression=CompressionType.LZ4 if count > 3 else CompressionType.NONE))
        batches[-1] = bytes(base.to_bytes(8, "big")) + batches[-1][8:]
        base += count
    tail = batches[-1][: min(cut, len(batches[-1]) - 1)] if cut else b""
    records = write_batches(path, [*batches, tail] if tail else batches)
    read = list(records.batches())
    assert [bytes(batch.raw()) for batch in read] == batches
    assert all(batch.is_valid() for batch in read)
    records.close()
