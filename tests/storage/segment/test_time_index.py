"""Tests for `storage.segment.time_index`, after Kafka's TimeIndexTest."""

from __future__ import annotations

import bisect
import itertools
import random
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage.errors import (
    CorruptIndexError,
    IndexOffsetOverflowError,
    InvalidOffsetError,
    InvalidTimestampError,
    StorageError,
)
from storage.file_names import parse_segment_name, time_index_file
from storage.segment.index_base import WARM_SECTION_BYTES
from storage.segment.time_index import NO_TIMESTAMP, TimeIndex, TimestampOffset
from tests.conftest import KAFKA_SAMPLES_DIR

BASE_OFFSET = 45
SAMPLES = KAFKA_SAMPLES_DIR
CONSUMER_OFFSETS_28 = SAMPLES / "William0423__kafka@499e39fa" / "kafka-logs" / "__consumer_offsets-28"


@pytest.fixture
def index(tmp_path: Path) -> Iterator[TimeIndex]:
    idx = TimeIndex(time_index_file(tmp_path, BASE_OFFSET), BASE_OFFSET, max_index_size=30 * 12)
    yield idx
    idx.close()


def oracle_lookup(entries: list[TimestampOffset], target: int, base_offset: int = BASE_OFFSET) -> TimestampOffset:
    timestamps = [entry.timestamp for entry in entries]
    slot = bisect.bisect_right(timestamps, target) - 1
    return entries[slot] if slot >= 0 else TimestampOffset(NO_TIMESTAMP, base_offset)


def test_new_file_is_preallocated_to_max_index_size_rounded_down(tmp_path: Path) -> None:
    idx = TimeIndex(tmp_path / "x.timeindex", 0)
    assert (tmp_path / "x.timeindex").stat().st_size == 10_485_756
    assert (idx.entries, idx.max_entries, idx.max_index_size) == (0, 873_813, 10_485_756)
    idx.close()
    assert (tmp_path / "x.timeindex").stat().st_size == 0


def test_is_full_leaves_the_last_slot_for_the_final_entry(tmp_path: Path) -> None:
    idx = TimeIndex(tmp_path / "x.timeindex", BASE_OFFSET, max_index_size=5 * 12)
    for n in range(4):
        assert not idx.is_full()
        idx.maybe_append(1000 + n, BASE_OFFSET + n)
    assert idx.is_full()
    with pytest.raises(InvalidOffsetError, match="full"):
        idx.maybe_append(2000, BASE_OFFSET + 10)
    idx.maybe_append(2000, BASE_OFFSET + 10, skip_full_check=True)
    assert idx.entries == idx.max_entries == 5
    idx.maybe_append(2000, BASE_OFFSET + 10, skip_full_check=True)
    with pytest.raises(InvalidOffsetError, match="full"):
        idx.maybe_append(3000, BASE_OFFSET + 11, skip_full_check=True)
    assert idx.last_entry == TimestampOffset(2000, BASE_OFFSET + 10)
    idx.close()


def test_appends_only_strictly_greater_timestamps(index: TimeIndex) -> None:
    index.maybe_append(100, BASE_OFFSET + 1)
    index.maybe_append(100, BASE_OFFSET + 1)
    index.maybe_append(100, BASE_OFFSET + 5)
    assert index.entries_list() == [TimestampOffset(100, BASE_OFFSET + 1)]
    index.maybe_append(101, BASE_OFFSET + 5)
    assert index.entries_list() == [TimestampOffset(100, BASE_OFFSET + 1), TimestampOffset(101, BASE_OFFSET + 5)]


def test_smaller_offset_or_smaller_timestamp_raises(index: TimeIndex) -> None:
    index.maybe_append(100, BASE_OFFSET + 5)
    with pytest.raises(InvalidOffsetError) as excinfo:
        index.maybe_append(200, BASE_OFFSET + 4)
    assert excinfo.value.offset == BASE_OFFSET + 4
    with pytest.raises(InvalidOffsetError, match="timestamp"):
        index.maybe_append(99, BASE_OFFSET + 6)
    assert index.entries_list() == [TimestampOffset(100, BASE_OFFSET + 5)]


def test_empty_index_ignores_records_without_timestamps(index: TimeIndex) -> None:
    index.maybe_append(NO_TIMESTAMP, BASE_OFFSET)
    assert index.entries == 0
    index.maybe_append(0, BASE_OFFSET)
    assert index.entries_list() == [TimestampOffset(0, BASE_OFFSET)]


def test_append_offset_that_does_not_fit_int32_raises(index: TimeIndex) -> None:
    with pytest.raises(IndexOffsetOverflowError):
        index.maybe_append(10, BASE_OFFSET - 1)
    with pytest.raises(IndexOffsetOverflowError):
        index.maybe_append(10, BASE_OFFSET + 2**31)
    with pytest.raises(InvalidTimestampError):
        index.maybe_append(2**63, BASE_OFFSET)
    assert index.entries == 0


def test_lookup_below_first_entry_returns_no_timestamp_and_base_offset(index: TimeIndex) -> None:
    assert index.lookup(10**15) == TimestampOffset(NO_TIMESTAMP, BASE_OFFSET)
    assert index.last_entry == TimestampOffset(NO_TIMESTAMP, BASE_OFFSET)
    index.maybe_append(1000, BASE_OFFSET + 3)
    index.maybe_append(2000, BASE_OFFSET + 9)
    assert index.lookup(999) == TimestampOffset(NO_TIMESTAMP, BASE_OFFSET)
    assert index.lookup(1000) == TimestampOffset(1000, BASE_OFFSET + 3)
    assert index.lookup(1999) == TimestampOffset(1000, BASE_OFFSET + 3)
    assert index.lookup(10**15) == TimestampOffset(2000, BASE_OFFSET + 9)


def test_random_lookups_match_sorted_list_oracle(tmp_path: Path) -> None:
    count = 2000  # beyond the 682-entry warm section
    idx = TimeIndex(tmp_path / "x.timeindex", BASE_OFFSET, max_index_size=(count + 1) * 12)
    rng = random.Random(1)
    timestamps = sorted(rng.sample(range(1_500_000_000_000, 1_500_000_000_000 + count * 50), count))
    offsets = sorted(rng.choices(range(BASE_OFFSET, BASE_OFFSET + count * 3), k=count))
    entries = [TimestampOffset(ts, offset) for ts, offset in zip(timestamps, offsets, strict=True)]
    for entry in entries:
        idx.maybe_append(entry.timestamp, entry.offset)
    assert idx.entries_list() == entries
    for target in [rng.randrange(timestamps[0] - 100, timestamps[-1] + 100) for _ in range(2000)]:
        assert idx.lookup(target) == oracle_lookup(entries, target)
    idx.close()


def test_tail_lookup_touches_only_the_warm_section(tmp_path: Path) -> None:
    count = 5000
    idx = TimeIndex(tmp_path / "x.timeindex", 0, max_index_size=(count + 1) * 12)
    for n in range(count):
        idx.maybe_append(10 * n, n)
    touched: list[int] = []
    read_slot = idx._timestamp_at
    idx._timestamp_at = lambda slot: touched.append(slot) or read_slot(slot)  # type: ignore[method-assign]
    assert idx.lookup(10 * (count - 3) + 5) == TimestampOffset(10 * (count - 3), count - 3)
    assert min(touched) >= count - WARM_SECTION_BYTES // 12
    assert len(touched) <= 2 + count.bit_length()
    idx.close()


def test_truncate_to_drops_entries_at_and_after_offset(index: TimeIndex) -> None:
    for n in range(10):
        index.maybe_append(100 * (n + 1), BASE_OFFSET + 2 * n)
    oracle = index.entries_list()
    index.truncate_to(BASE_OFFSET + 100)
    assert index.entries_list() == oracle
    index.truncate_to(BASE_OFFSET + 8)
    assert index.entries_list() == oracle[:4]
    assert index.last_entry == TimestampOffset(400, BASE_OFFSET + 6)
    index.truncate_to(BASE_OFFSET + 5)
    assert index.entries_list() == oracle[:3]
    index.maybe_append(350, BASE_OFFSET + 5)
    assert index.last_entry == TimestampOffset(350, BASE_OFFSET + 5)
    index.truncate_to(BASE_OFFSET)
    assert index.entries == 0
    assert index.last_entry == TimestampOffset(NO_TIMESTAMP, BASE_OFFSET)


def test_truncate_to_drops_every_entry_sharing_the_offset(index: TimeIndex) -> None:
    index.maybe_append(100, BASE_OFFSET + 1)
    index.maybe_append(200, BASE_OFFSET + 4)
    index.maybe_append(300, BASE_OFFSET + 4)
    index.maybe_append(400, BASE_OFFSET + 4)
    index.truncate_to(BASE_OFFSET + 4)
    assert index.entries_list() == [TimestampOffset(100, BASE_OFFSET + 1)]


def test_trim_reopen_and_resize(tmp_path: Path) -> None:
    path = tmp_path / "x.timeindex"
    idx = TimeIndex(path, BASE_OFFSET, max_index_size=30 * 12)
    for n in range(6):
        idx.maybe_append(1000 + n, BASE_OFFSET + n)
    idx.close()
    assert path.stat().st_size == 6 * 12
    reopened = TimeIndex(path, BASE_OFFSET, max_index_size=30 * 12)
    assert reopened.entries == 6
    assert reopened.last_entry == TimestampOffset(1005, BASE_OFFSET + 5)
    assert reopened.is_full()
    reopened.maybe_append(1005, BASE_OFFSET + 5, skip_full_check=True)  # closing a trimmed segment stays possible
    assert reopened.resize(reopened.max_index_size)
    assert (reopened.max_entries, reopened.is_full()) == (30, False)
    reopened.maybe_append(1006, BASE_OFFSET + 6)
    assert reopened.resize(4 * 12 + 11)
    assert (reopened.entries, reopened.last_entry) == (4, TimestampOffset(1003, BASE_OFFSET + 3))
    reopened.reset()
    assert (reopened.entries, reopened.length_bytes) == (0, 30 * 12)
    reopened.close()


def test_entry_reads_by_slot_and_rejects_unused_slots(index: TimeIndex) -> None:
    index.maybe_append(10, BASE_OFFSET)
    assert index.entry(0) == TimestampOffset(10, BASE_OFFSET)
    with pytest.raises(StorageError):
        index.entry(1)


def test_sanity_check_rejects_length_not_a_multiple_of_entry_size(tmp_path: Path) -> None:
    path = tmp_path / "x.timeindex"
    path.write_bytes(struct.pack(">qi", 5, 0) + b"\x01" * 8)
    idx = TimeIndex(path, BASE_OFFSET)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check()
    idx.close()


def test_sanity_check_rejects_last_timestamp_below_first(tmp_path: Path) -> None:
    path = tmp_path / "x.timeindex"
    path.write_bytes(struct.pack(">qiqi", 500, 1, 400, 2))
    idx = TimeIndex(path, BASE_OFFSET, writable=False)
    with pytest.raises(CorruptIndexError, match="timestamp"):
        idx.sanity_check()
    idx.close()


def test_sanity_check_rejects_last_offset_below_base(tmp_path: Path) -> None:
    path = tmp_path / "x.timeindex"
    path.write_bytes(struct.pack(">qiqi", 500, 1, 600, -2))
    idx = TimeIndex(path, BASE_OFFSET, writable=False)
    with pytest.raises(CorruptIndexError, match="base offset") as excinfo:
        idx.sanity_check()
    assert excinfo.value.offset == BASE_OFFSET - 2
    idx.close()


def test_garbage_file_decodes_without_struct_or_index_errors(tmp_path: Path) -> None:
    path = tmp_path / "x.timeindex"
    path.write_bytes(random.Random(7).randbytes(12 * 50 + 7))
    idx = TimeIndex(path, BASE_OFFSET, writable=False)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check()
    assert len(idx.entries_list()) == 50
    for target in (-(2**63), 0, 2**63 - 1):
        assert isinstance(idx.lookup(target), TimestampOffset)
    idx.close()


def test_read_only_open_in_read_only_dir_never_changes_the_file(tmp_path: Path) -> None:
    directory = tmp_path / "ro"
    directory.mkdir()
    path = directory / "x.timeindex"
    entries = [TimestampOffset(1000 + n, BASE_OFFSET + n) for n in range(5)]
    # Untrimmed (3 zero slots): a writable close would cut them.
    path.write_bytes(b"".join(struct.pack(">qi", e.timestamp, e.offset - BASE_OFFSET) for e in entries) + bytes(36))
    before = path.read_bytes()
    mtime_ns = path.stat().st_mtime_ns
    path.chmod(0o444)
    directory.chmod(0o555)
    try:
        reader = TimeIndex(path, BASE_OFFSET, writable=False)
        assert reader.entries_list()[:5] == entries
        with pytest.raises(StorageError):
            reader.maybe_append(5000, BASE_OFFSET + 100)
        with pytest.raises(StorageError):
            reader.trim_to_valid_size()
        reader.close()
        assert path.read_bytes() == before
        assert path.stat().st_mtime_ns == mtime_ns
    finally:
        directory.chmod(0o755)
        path.chmod(0o644)


def test_written_bytes_are_kafkas_big_endian_layout(tmp_path: Path) -> None:
    path = tmp_path / "x.timeindex"
    idx = TimeIndex(path, 1000, max_index_size=4096)
    idx.maybe_append(1534299420753, 1031)
    idx.close()
    # The first entry of __consumer_offsets-28/00000000000000000000.timeindex as Kafka wrote it (base 0).
    assert path.read_bytes() == bytes.fromhex("000001653b5f3851 0000001f")


def test_real_kafka_time_index_has_258_increasing_entries() -> None:
    idx = TimeIndex(CONSUMER_OFFSETS_28 / "00000000000000000000.timeindex", 0, writable=False)
    idx.sanity_check()
    entries = idx.entries_list()
    assert len(entries) == idx.entries == 258
    assert entries[0] == TimestampOffset(1534299420753, 31)
    assert idx.last_entry == TimestampOffset(1534312623113, 8201)
    assert all(a.timestamp < b.timestamp and a.offset < b.offset for a, b in itertools.pairwise(entries))
    for target in range(entries[0].timestamp - 1000, entries[-1].timestamp + 1000, 9973):
        assert idx.lookup(target) == oracle_lookup(entries, target, 0)
    idx.close()


def test_every_real_kafka_time_index_passes_sanity_check_and_is_sorted() -> None:
    paths = sorted(SAMPLES.rglob("*.timeindex"))
    assert paths
    for path in paths:
        parsed = parse_segment_name(path.name)
        assert parsed is not None
        idx = TimeIndex(path, parsed[0], writable=False)
        idx.sanity_check()
        entries = idx.entries_list()
        assert all(a.timestamp < b.timestamp and a.offset <= b.offset for a, b in itertools.pairwise(entries)), path
        assert all(entry.offset >= parsed[0] for entry in entries), path
        idx.close()
