"""Tests for `storage.segment.offset_index` (and the shared `storage.segment.index_base`), after Kafka's
OffsetIndexTest."""

from __future__ import annotations

import bisect
import itertools
import os
import random
import stat
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage.errors import (
    CorruptIndexError,
    IndexOffsetOverflowError,
    InvalidOffsetError,
    KafkaStorageError,
    StorageError,
)
from storage.file_names import index_file, parse_segment_name
from storage.segment.index_base import WARM_SECTION_BYTES
from storage.segment.offset_index import OffsetIndex, OffsetPosition
from tests.conftest import KAFKA_SAMPLES_DIR

BASE_OFFSET = 45
SAMPLES = KAFKA_SAMPLES_DIR
CONSUMER_OFFSETS_28 = SAMPLES / "William0423__kafka@499e39fa" / "kafka-logs" / "__consumer_offsets-28"


@pytest.fixture
def index(tmp_path: Path) -> Iterator[OffsetIndex]:
    idx = OffsetIndex(index_file(tmp_path, BASE_OFFSET), BASE_OFFSET, max_index_size=30 * 8)
    yield idx
    idx.close()


def oracle_lookup(entries: list[OffsetPosition], target: int, base_offset: int = BASE_OFFSET) -> OffsetPosition:
    offsets = [entry.offset for entry in entries]
    slot = bisect.bisect_right(offsets, target) - 1
    return entries[slot] if slot >= 0 else OffsetPosition(base_offset, 0)


def fill(idx: OffsetIndex, count: int, seed: int) -> list[OffsetPosition]:
    rng = random.Random(seed)
    offsets = sorted(rng.sample(range(BASE_OFFSET, BASE_OFFSET + count * 10), count))
    positions = sorted(rng.sample(range(count * 100), count))
    entries = [OffsetPosition(offset, position) for offset, position in zip(offsets, positions, strict=True)]
    for entry in entries:
        idx.append(entry.offset, entry.position)
    return entries


def test_new_file_is_preallocated_to_max_index_size_rounded_down(tmp_path: Path) -> None:
    default = OffsetIndex(tmp_path / "a.index", 0)
    odd = OffsetIndex(tmp_path / "b.index", 0, max_index_size=8 * 30 + 7)
    assert (tmp_path / "a.index").stat().st_size == 10_485_760
    assert (default.entries, default.max_entries) == (0, 1_310_720)
    assert (tmp_path / "b.index").stat().st_size == 240
    assert (odd.max_index_size, odd.max_entries) == (240, 30)
    default.close()
    odd.close()


def test_random_lookups_match_sorted_list_oracle(tmp_path: Path) -> None:
    count = 3000  # spans the 1024-entry warm section and the cold part before it
    idx = OffsetIndex(tmp_path / "x.index", BASE_OFFSET, max_index_size=count * 8)
    entries = fill(idx, count, seed=1)
    rng = random.Random(2)
    for target in [rng.randrange(BASE_OFFSET - 50, entries[-1].offset + 50) for _ in range(2000)]:
        assert idx.lookup(target) == oracle_lookup(entries, target)
    for entry in entries:
        assert idx.lookup(entry.offset) == entry
    idx.close()


def test_lookup_extremes(index: OffsetIndex) -> None:
    assert index.lookup(BASE_OFFSET) == OffsetPosition(BASE_OFFSET, 0)
    assert index.lookup(10**12) == OffsetPosition(BASE_OFFSET, 0)
    index.append(BASE_OFFSET + 10, 100)
    index.append(BASE_OFFSET + 20, 200)
    assert index.lookup(BASE_OFFSET + 9) == OffsetPosition(BASE_OFFSET, 0)
    assert index.lookup(-1) == OffsetPosition(BASE_OFFSET, 0)
    assert index.lookup(BASE_OFFSET + 10) == OffsetPosition(BASE_OFFSET + 10, 100)
    assert index.lookup(BASE_OFFSET + 19) == OffsetPosition(BASE_OFFSET + 10, 100)
    assert index.lookup(10**12) == OffsetPosition(BASE_OFFSET + 20, 200)


def test_lookups_touch_logarithmic_entries_and_tail_lookups_stay_warm(tmp_path: Path) -> None:
    count = 20_000
    idx = OffsetIndex(tmp_path / "x.index", 0, max_index_size=count * 8)
    for offset in range(count):
        idx.append(offset * 3, offset * 50)
    touched: list[int] = []
    read_slot = idx._relative_offset_at
    idx._relative_offset_at = lambda slot: touched.append(slot) or read_slot(slot)  # type: ignore[method-assign]
    for target in (0, 7, count, count * 3 - 1, 12_345):
        touched.clear()
        idx.lookup(target)
        assert len(touched) <= 2 + count.bit_length()
    warm_entries = WARM_SECTION_BYTES // 8
    touched.clear()
    assert idx.lookup((count - 10) * 3 + 1) == OffsetPosition((count - 10) * 3, (count - 10) * 50)
    assert min(touched) >= count - warm_entries
    idx.close()


def test_append_out_of_order_raises(index: OffsetIndex) -> None:
    index.append(BASE_OFFSET + 5, 0)
    with pytest.raises(InvalidOffsetError) as excinfo:
        index.append(BASE_OFFSET + 5, 10)
    assert excinfo.value.offset == BASE_OFFSET + 5
    with pytest.raises(InvalidOffsetError):
        index.append(BASE_OFFSET + 4, 10)
    assert index.entries_list() == [OffsetPosition(BASE_OFFSET + 5, 0)]


def test_append_beyond_capacity_raises(index: OffsetIndex) -> None:
    for n in range(index.max_entries):
        index.append(BASE_OFFSET + n, n * 10)
    assert index.is_full()
    with pytest.raises(InvalidOffsetError, match="index is full"):
        index.append(BASE_OFFSET + 1000, 100_000)
    assert index.entries == 30


def test_append_offset_that_does_not_fit_int32_raises(index: OffsetIndex) -> None:
    with pytest.raises(IndexOffsetOverflowError):
        index.append(BASE_OFFSET - 1, 0)
    with pytest.raises(IndexOffsetOverflowError):
        index.append(BASE_OFFSET + 2**31, 0)
    assert not index.can_append_offset(BASE_OFFSET + 2**31)
    index.append(BASE_OFFSET + 2**31 - 1, 0)
    assert index.last_offset == BASE_OFFSET + 2**31 - 1


def test_append_position_that_does_not_fit_int32_raises(index: OffsetIndex) -> None:
    with pytest.raises(InvalidOffsetError):
        index.append(BASE_OFFSET, 2**31)
    with pytest.raises(InvalidOffsetError):
        index.append(BASE_OFFSET, -1)
    assert index.entries == 0


def test_reopen_sees_trimmed_entries_and_can_keep_appending_after_resize(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    idx = OffsetIndex(path, BASE_OFFSET, max_index_size=30 * 8)
    entries = fill(idx, 12, seed=3)
    idx.close()
    assert path.stat().st_size == 12 * 8
    reopened = OffsetIndex(path, BASE_OFFSET, max_index_size=30 * 8)
    assert reopened.entries == 12
    assert reopened.entries_list() == entries
    assert reopened.is_full()
    assert reopened.resize(reopened.max_index_size)
    reopened.append(entries[-1].offset + 1, entries[-1].position + 1)
    assert reopened.entries == 13
    assert reopened.lookup(10**9) == OffsetPosition(entries[-1].offset + 1, entries[-1].position + 1)
    reopened.close()


def test_existing_empty_file_opens_as_an_empty_full_index(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    path.write_bytes(b"")
    idx = OffsetIndex(path, BASE_OFFSET, max_index_size=30 * 8)
    assert (idx.entries, idx.max_entries, idx.is_full()) == (0, 0, True)
    assert idx.lookup(BASE_OFFSET + 3) == OffsetPosition(BASE_OFFSET, 0)
    idx.sanity_check()
    idx.resize(idx.max_index_size)
    idx.append(BASE_OFFSET + 3, 7)
    idx.close()
    assert path.read_bytes() == struct.pack(">ii", 3, 7)


def test_truncate_to_drops_entries_at_and_after_offset(index: OffsetIndex) -> None:
    for n in range(10):
        index.append(BASE_OFFSET + 2 * n, 100 * n)
    oracle = index.entries_list()
    index.truncate_to(BASE_OFFSET + 100)
    assert index.entries_list() == oracle
    index.truncate_to(BASE_OFFSET + 8)
    assert index.entries_list() == oracle[:4]
    assert index.lookup(BASE_OFFSET + 50) == OffsetPosition(BASE_OFFSET + 6, 300)
    index.truncate_to(BASE_OFFSET + 5)
    assert index.entries_list() == oracle[:3]
    index.append(BASE_OFFSET + 5, 250)
    assert index.last_offset == BASE_OFFSET + 5
    index.truncate_to(BASE_OFFSET)
    assert index.entries == 0
    assert index.last_offset == BASE_OFFSET
    index.append(BASE_OFFSET, 0)
    index.truncate()
    assert index.entries == 0


def test_fetch_upper_bound_offset_is_first_entry_at_or_past_the_fetch_end(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "x.index", BASE_OFFSET, max_index_size=2000 * 8)
    entries = fill(idx, 2000, seed=4)
    positions = [entry.position for entry in entries]
    rng = random.Random(5)
    for _ in range(500):
        start = OffsetPosition(BASE_OFFSET, rng.randrange(0, positions[-1]))
        size = rng.randrange(0, 5000)
        slot = bisect.bisect_left(positions, start.position + size)
        expected = entries[slot] if slot < len(entries) else None
        assert idx.fetch_upper_bound_offset(start, size) == expected
    assert idx.fetch_upper_bound_offset(OffsetPosition(BASE_OFFSET, positions[-1]), 1) is None
    idx.close()


def test_entry_reads_by_slot_and_rejects_unused_slots(index: OffsetIndex) -> None:
    index.append(BASE_OFFSET + 1, 11)
    index.append(BASE_OFFSET + 2, 22)
    assert index.entry(1) == OffsetPosition(BASE_OFFSET + 2, 22)
    with pytest.raises(StorageError):
        index.entry(2)
    with pytest.raises(StorageError):
        index.entry(-1)


def test_resize_rounds_down_and_trim_cuts_to_used_entries(index: OffsetIndex) -> None:
    fill(index, 5, seed=6)
    assert not index.resize(30 * 8 + 7)
    assert index.resize(50 * 8 + 3)
    assert (index.length_bytes, index.max_entries, index.entries) == (400, 50, 5)
    assert index.path.stat().st_size == 400
    assert index.trim_to_valid_size()
    assert (index.path.stat().st_size, index.max_entries, index.is_full()) == (40, 5, True)
    assert index.resize(3 * 8)
    assert index.entries == 3
    index.reset()
    assert (index.entries, index.length_bytes) == (0, 240)


def test_sanity_check_rejects_length_not_a_multiple_of_entry_size(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    path.write_bytes(struct.pack(">ii", 1, 0) + b"\x00\x01\x02")
    idx = OffsetIndex(path, BASE_OFFSET)
    assert idx.entries == 1
    with pytest.raises(CorruptIndexError) as excinfo:
        idx.sanity_check()
    assert excinfo.value.path == str(path)
    idx.close()


def test_sanity_check_rejects_last_offset_below_base(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    path.write_bytes(struct.pack(">iiii", 1, 0, -3, 10))
    idx = OffsetIndex(path, BASE_OFFSET, writable=False)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check()
    idx.close()


def test_garbage_file_decodes_without_struct_or_index_errors(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    path.write_bytes(random.Random(7).randbytes(8 * 100 + 5))
    idx = OffsetIndex(path, BASE_OFFSET, writable=False)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check()
    assert len(idx.entries_list()) == 100
    for target in (-(2**40), 0, BASE_OFFSET, 2**40):
        assert isinstance(idx.lookup(target), OffsetPosition)
    idx.close()


def test_read_only_open_in_read_only_dir_never_changes_the_file(tmp_path: Path) -> None:
    directory = tmp_path / "ro"
    directory.mkdir()
    path = directory / "x.index"
    entries = [OffsetPosition(BASE_OFFSET + 3 * n, 100 * n) for n in range(7)]
    # An untrimmed file, as a crashed broker leaves it: a writable close would cut the zero tail.
    path.write_bytes(b"".join(struct.pack(">ii", e.offset - BASE_OFFSET, e.position) for e in entries) + bytes(13 * 8))
    before = path.read_bytes()
    mtime_ns = path.stat().st_mtime_ns
    path.chmod(0o444)
    directory.chmod(0o555)
    try:
        reader = OffsetIndex(path, BASE_OFFSET, writable=False)
        assert reader.entries == 20
        assert reader.entries_list()[:7] == entries
        assert reader.entries_list()[7:] == [OffsetPosition(BASE_OFFSET, 0)] * 13
        for mutate in (lambda: reader.append(10**6, 0), lambda: reader.truncate_to(0), lambda: reader.resize(8)):
            with pytest.raises(StorageError):
                mutate()
        reader.flush()
        reader.close()
        assert path.read_bytes() == before
        assert path.stat().st_mtime_ns == mtime_ns
        assert stat.S_IMODE(path.stat().st_mode) == 0o444
    finally:
        directory.chmod(0o755)
        path.chmod(0o644)


def test_read_only_open_of_a_missing_file_raises_storage_error(tmp_path: Path) -> None:
    with pytest.raises(KafkaStorageError):
        OffsetIndex(tmp_path / "missing.index", 0, writable=False)
    assert not (tmp_path / "missing.index").exists()


def test_rename_keeps_the_index_usable(index: OffsetIndex, tmp_path: Path) -> None:
    index.append(BASE_OFFSET + 1, 10)
    old = index.path
    new = tmp_path / (old.name + ".deleted")
    index.rename_to(new)
    assert index.path == new and new.exists() and not old.exists()
    index.append(BASE_OFFSET + 2, 20)
    assert index.lookup(BASE_OFFSET + 9) == OffsetPosition(BASE_OFFSET + 2, 20)
    index.close()
    assert new.read_bytes() == struct.pack(">iiii", 1, 10, 2, 20)


def test_delete_if_exists_reports_whether_a_file_was_deleted(index: OffsetIndex) -> None:
    assert index.delete_if_exists()
    assert not index.path.exists()
    assert not index.delete_if_exists()


def test_closed_index_refuses_use(index: OffsetIndex) -> None:
    index.append(BASE_OFFSET, 0)
    index.close()
    index.close()
    with pytest.raises(StorageError, match="closed"):
        index.lookup(BASE_OFFSET)
    with pytest.raises(StorageError, match="closed"):
        index.append(BASE_OFFSET + 1, 1)


def test_written_bytes_are_kafkas_big_endian_layout(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    idx = OffsetIndex(path, 1000, max_index_size=4096)
    idx.append(1031, 4221)
    idx.append(1077, 8500)
    idx.flush()
    # The first entry matches __consumer_offsets-28/00000000000000000000.index as Kafka wrote it (base 0).
    assert path.read_bytes()[:16] == bytes.fromhex("0000001f0000107d 0000004d00002134")
    idx.close()
    assert path.stat().st_size == 16


def test_real_kafka_index_has_254_increasing_entries() -> None:
    path = CONSUMER_OFFSETS_28 / "00000000000000000000.index"
    idx = OffsetIndex(path, 0, writable=False)
    idx.sanity_check()
    entries = idx.entries_list()
    assert len(entries) == idx.entries == 254
    assert entries[0] == OffsetPosition(31, 4221)
    assert entries[-1] == OffsetPosition(8179, 1063461)
    assert all(a.offset < b.offset and a.position < b.position for a, b in itertools.pairwise(entries))
    for target in range(0, 8300, 7):
        assert idx.lookup(target) == oracle_lookup(entries, target, 0)
    idx.close()


def test_every_real_kafka_index_passes_sanity_check_and_is_sorted() -> None:
    paths = sorted(SAMPLES.rglob("*.index"))
    assert paths
    for path in paths:
        parsed = parse_segment_name(path.name)
        assert parsed is not None
        idx = OffsetIndex(path, parsed[0], writable=False)
        idx.sanity_check()
        entries = idx.entries_list()
        assert all(a.offset < b.offset and a.position <= b.position for a, b in itertools.pairwise(entries)), path
        assert all(entry.offset >= parsed[0] for entry in entries), path
        idx.close()
        assert os.path.getsize(path) == len(entries) * 8
