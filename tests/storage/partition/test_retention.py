"""Retention and DeleteRecords (storage/partition/retention.py, the retention methods of storage/partition/log.py),
after Kafka's
UnifiedLogTest / LogLoaderTest scenarios (spec §4 items 13-20, 31, 35; §3.7, §3.8; the future-timestamp cap of §6.5).

Every log uses single-record batches of one fixed size and `segment.bytes` = 5 batches, so offsets
0-4, 5-9, 10-14 ... land in segments 0, 5, 10 ... . Time comes from a MockClock; rules that read a
segment's `.log` mtime get it set explicitly (real mtimes are "now" in real time, unrelated to the
MockClock). Each test ends by decoding the `.log` files left on disk with kafka-python and comparing
the offsets they hold with an oracle.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from storage import file_names
from storage.clock import MockClock
from storage.config.log_config import LogConfig
from storage.errors import OffsetOutOfRangeError, PolicyViolationError
from storage.partition import log_read, retention
from storage.partition.log import Log
from storage.records.layout import NO_TIMESTAMP
from storage.segment.log_segment import LogSegment

START_MS = 1_700_000_000_000
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
TEN_YEARS_MS = 3653 * DAY_MS
RECORDS_PER_SEGMENT = 5


def _batch(offset: int, timestamp_ms: int, *, base_offset: int = 0) -> bytes:
    """One record keyed `k`, value `v<offset>` (5 digits, so every batch has the same size)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    builder.append(0, timestamp=timestamp_ms, key=b"k", value=b"v%05d" % offset, headers=[])
    data = bytearray(builder.build())
    data[0:8] = base_offset.to_bytes(8, "big")
    if base_offset:
        # baseOffset is outside the CRC (it covers bytes 21..end), so the follower batch stays valid.
        assert MemoryRecords(bytes(data)).next_batch().validate_crc()
    return bytes(data)


BATCH_BYTES = len(_batch(0, START_MS))


def _open(directory: Path, clock: MockClock, **overrides: object) -> Log:
    settings: dict[str, object] = {
        "segment_bytes": RECORDS_PER_SEGMENT * BATCH_BYTES,
        "retention_ms": -1,
        "index_interval_bytes": 1,
        # 128 offset / 85 time entries, far more than a 5-batch segment needs; the 10 MiB default made
        # every test pay for page faults in freshly preallocated index files.
        "segment_index_bytes": 1024,
    }
    settings.update(overrides)
    return Log.open(directory, LogConfig(**settings), clock=clock)  # type: ignore[arg-type]


def _fill(log: Log, count: int, timestamp_ms: int | None = None) -> None:
    """Appends `count` single-record batches stamped `timestamp_ms` (default: the clock's now)."""
    for _ in range(count):
        offset = log.log_end_offset
        log.append(_batch(offset, log.clock.milliseconds() if timestamp_ms is None else timestamp_ms))


def _bases(log: Log) -> list[int]:
    return [segment.base_offset for segment in log.log_segments()]


def _set_mtime(log: Log, base_offset: int, mtime_ms: int) -> None:
    path = file_names.log_file(log.directory, base_offset)
    os.utime(path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))


def _files_with_suffix(directory: Path, suffix: str) -> list[str]:
    return sorted(path.name for path in directory.iterdir() if path.name.endswith(suffix))


def _read_offset(log: Log, offset: int) -> int:
    """The first offset of the batch a fetch at `offset` returns (as Kafka's client would decode it)."""
    batch = MemoryRecords(log.read(offset, BATCH_BYTES).records).next_batch()
    assert batch is not None
    return batch.base_offset


def _assert_on_disk(directory: Path, expected_offsets: list[int]) -> None:
    """Decodes every live `.log` in `directory` with kafka-python: CRCs hold, offsets lie at or above the
    file's base offset and increase across files, values are `v<offset>`, and together they are `expected`."""
    seen: list[int] = []
    for name in _files_with_suffix(directory, file_names.LOG_SUFFIX):
        parsed = file_names.parse_segment_name(name)
        assert parsed is not None and parsed[2] == ""
        records = MemoryRecords((directory / name).read_bytes())
        while records.has_next():
            batch = records.next_batch()
            assert batch is not None and batch.validate_crc(), name
            for record in batch:
                assert record.offset >= parsed[0], name
                assert record.value == b"v%05d" % record.offset, name
                seen.append(record.offset)
    assert seen == sorted(set(seen))
    assert seen == expected_offsets


# --- size, time and log-start rules ------------------------------------------------------------


def test_size_retention_deletes_oldest_segments_over_the_limit(tmp_path: Path) -> None:
    clock = MockClock(START_MS)
    log = _open(tmp_path / "t-0", clock, retention_bytes=10 * BATCH_BYTES)
    _fill(log, 15)
    assert _bases(log) == [0, 5, 10]

    assert log.delete_old_segments() == 1
    assert _bases(log) == [5, 10]
    assert log.log_start_offset == 5
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4)
    assert _read_offset(log, 5) == 5
    assert log.delete_old_segments() == 0
    log.close()
    _assert_on_disk(tmp_path / "t-0", list(range(5, 15)))


@pytest.mark.parametrize("retention_batches", [11, 15, 16])
def test_size_retention_keeps_segments_whose_removal_would_go_below_the_limit(
    tmp_path: Path, retention_batches: int
) -> None:
    clock = MockClock(START_MS)
    log = _open(tmp_path / "t-0", clock, retention_bytes=retention_batches * BATCH_BYTES)
    _fill(log, 15)

    assert log.delete_old_segments() == 0
    assert _bases(log) == [0, 5, 10]
    assert log.log_start_offset == 0
    log.close()
    _assert_on_disk(tmp_path / "t-0", list(range(15)))


def test_size_retention_of_zero_bytes_keeps_only_a_fresh_active_segment(tmp_path: Path) -> None:
    clock = MockClock(START_MS)
    log = _open(tmp_path / "t-0", clock, retention_bytes=0)
    _fill(log, 12)

    assert log.delete_old_segments() == 3
    assert _bases(log) == [12]
    assert (log.log_start_offset, log.log_end_offset, log.active_segment.size) == (12, 12, 0)
    log.close()
    _assert_on_disk(tmp_path / "t-0", [])


def test_time_retention_deletes_only_segments_older_than_retention_ms(tmp_path: Path) -> None:
    clock = MockClock(START_MS)
    log = _open(tmp_path / "t-0", clock, retention_ms=DAY_MS)
    _fill(log, 5, START_MS)
    _fill(log, 5, START_MS + 2 * DAY_MS)
    _fill(log, 3, START_MS + 2 * DAY_MS)
    for base in _bases(log):
        _set_mtime(log, base, START_MS + 2 * DAY_MS)
    clock.sleep(2 * DAY_MS + HOUR_MS)

    assert log.delete_old_segments() == 1
    assert _bases(log) == [5, 10]
    assert log.log_start_offset == 5
    log.close()
    _assert_on_disk(tmp_path / "t-0", list(range(5, 13)))


def test_time_retention_is_strictly_older_than_retention_ms(tmp_path: Path) -> None:
    clock = MockClock(START_MS)
    log = _open(tmp_path / "t-0", clock, retention_ms=DAY_MS)
    _fill(log, 5, START_MS)
    _fill(log, 2, START_MS + 2 * DAY_MS)
    _set_mtime(log, 0, START_MS)
    _set_mtime(log, 5, START_MS + 2 * DAY_MS)
    clock.sleep(DAY_MS)

    assert log.delete_old_segments() == 0
    clock.sleep(1)
    assert log.delete_old_segments() == 1
    assert _bases(log) == [5]
    log.close()
    _assert_on_disk(tmp_path / "t-0", [5, 6])


def test_time_retention_stops_at_the_first_segment_that_is_not_expired(tmp_path: Path) -> None:
    clock = MockClock(START_MS + 10 * DAY_MS)
    log = _open(tmp_path / "t-0", clock, retention_ms=DAY_MS)
    _fill(log, 5, START_MS)
    _fill(log, 5, START_MS + 10 * DAY_MS)
    _fill(log, 5, START_MS)
    _fill(log, 2, START_MS + 10 * DAY_MS)
    for base in _bases(log):
        _set_mtime(log, base, START_MS + 10 * DAY_MS)
    clock.sleep(HOUR_MS)

    assert log.delete_old_segments() == 1
    assert _bases(log) == [5, 10, 15]
    # Segment 10 is expired but stays behind the newer segment 5, pass after pass.
    assert log.delete_old_segments() == 0
    log.close()
    _assert_on_disk(tmp_path / "t-0", list(range(5, 17)))


def test_time_retention_uses_the_file_mtime_when_records_have_no_timestamp(tmp_path: Path) -> None:
    clock = MockClock(START_MS)
    log = _open(tmp_path / "t-0", clock, retention_ms=DAY_MS)
    _fill(log, 12, NO_TIMESTAMP)
    assert [segment.max_timestamp_so_far for segment in log.log_segments()] == [NO_TIMESTAMP] * 3
    _set_mtime(log, 0, START_MS - 3 * DAY_MS)
    _set_mtime(log, 5, START_MS - 2 * DAY_MS)
    _set_mtime(log, 10, START_MS)

    assert log.delete_old_segments() == 2
    assert _bases(log) == [10]
    assert log.log_start_offset == 10
    log.close()
    _assert_on_disk(tmp_path / "t-0", [10, 11])


def test_start_offset_breach_deletes_segments_wholly_below_the_log_start(tmp_path: Path) -> None:
    clock = MockClock(START_MS)
    log = _open(tmp_path / "t-0", clock)
    _fill(log, 15)
    log.maybe_increment_log_start_offset(11)

    assert log.delete_old_segments() == 2
    assert _bases(log) == [10]
    assert log.log_start_offset == 11
    with pytest.raises(OffsetOutOfRangeError):
        log.read(10)
    assert _read_offset(log, 11) == 11
    log.close()
    _assert_on_disk(tmp_path / "t-0", list(range(10, 15)))


def test_start_offset_breach_at_a_segment_base_deletes_the_segment_before_it(tmp_path: Path) -> None:
    clock = MockClock(START_MS)
    log = _open(tmp_path / "t-0", clock)
    _fill(log, 15)
    log.maybe_increment_log_start_offset(5)

    assert log.delete_old_segments() == 1
    assert _bases(log) == [5, 10]
    log.close()
    _assert_on_disk(tmp_path / "t-0", list(range(5, 15)))


def test_all_three_rules_run_in_one_pass_in_kafka_order(tmp_path: Path) -> None:
    clock = MockClock(START_MS + 10 * DAY_MS)
    log = _open(tmp_path / "t-0", clock, retention_bytes=10 * BATCH_BYTES, retention_ms=DAY_MS)
    _fill(log, 15, START_MS)
    _fill(log, 5, START_MS + 10 * DAY_MS)
    for base in _bases(log):
        _set_mtime(log, base, START_MS + 10 * DAY_MS)
    log.maybe_increment_log_start_offset(5)

    # Breach removes 0, leaving 15 batches against a 10-batch limit: size removes 5; time removes 10.
    assert log.delete_old_segments() == 3
    assert _bases(log) == [15]
    assert log.log_start_offset == 15
    log.close()
    _assert_on_disk(tmp_path / "t-0", list(range(15, 20)))


@pytest.mark.parametrize(
    ("policy", "expected_bases"),
    [("delete", [10]), ("compact,delete", [10]), ("delete,compact", [10]), ("compact", [0, 5, 10])],
)
def test_size_and_time_rules_need_the_delete_policy(tmp_path: Path, policy: str, expected_bases: list[int]) -> None:
    clock = MockClock(START_MS + 10 * DAY_MS)
    log = _open(tmp_path / "t-0", clock, cleanup_policy=policy, retention_bytes=5 * BATCH_BYTES, retention_ms=DAY_MS)
    _fill(log, 10, START_MS)
    _fill(log, 2, START_MS + 10 * DAY_MS)
    for base in _bases(log):
        _set_mtime(log, base, START_MS + 10 * DAY_MS)

    # Size alone would delete segment 0 only; time deletes segment 5 as well.
    log.delete_old_segments()
    assert _bases(log) == expected_bases
    log.close()
    _assert_on_disk(tmp_path / "t-0", list(range(expected_bases[0], 12)))


@pytest.mark.parametrize("policy", ["delete", "compact", "compact,delete"])
def test_start_offset_breach_applies_to_every_policy(tmp_path: Path, policy: str) -> None:
    clock = MockClock(START_MS)
    log = _open(tmp_path / "t-0", clock, cleanup_policy=policy)
    _fill(log, 15)
    log.maybe_increment_log_start_offset(7)

    assert log.delete_old_segments() == 1
    assert _bases(log) == [5, 10]
    assert log.log_start_offset == 7
    log.close()
    _assert_on_disk(tmp_path / "t-0", list(range(5, 15)))


# --- high watermark --------------------------------------------------------------------------------


def test_nothing_is_deleted_until_the_high_watermark_covers_the_whole_segment(tmp_path: Path) -> None:
    clock = MockClock(START_MS + 10 * DAY_MS)
    log = _open(tmp_path / "t-0", clock, retention_ms=DAY_MS)
    _fill(log, 15, START_MS)
    for base in _bases(log):
        _set_mtime(log, base, START_MS)

    assert log.update_high_watermark(0) == 0
    assert log.delete_old_segments() == 0
    assert log.update_high_watermark(4) == 4
    assert log.delete_old_segments() == 0
    assert _bases(log) == [0, 5, 10]

    log.update_high_watermark(7)
    assert log.delete_old_segments() == 1
    assert _bases(log) == [5, 10]
    assert log.log_start_offset == 5 <= log.high_watermark

    log.update_high_watermark(14)
    assert log.delete_old_segments() == 1
    assert _bases(log) == [10]
    assert log.log_start_offset == 10 <= log.high_watermark

    log.update_high_watermark(15)
    assert log.delete_old_segments() == 1
    assert _bases(log) == [15]
    assert log.log_start_offset == log.high_watermark == log.log_end_offset == 15
    log.close()
    _assert_on_disk(tmp_path / "t-0", [])


def test_log_start_offset_cannot_pass_the_high_watermark(tmp_path: Path) -> None:
    clock = MockClock(START_MS)
    log = _open(tmp_path / "t-0", clock)
    _fill(log, 15)
    log.update_high_watermark(7)

    with pytest.raises(OffsetOutOfRangeError):
        log.maybe_increment_log_start_offset(8)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(8)
    assert log.log_start_offset == 0
    assert log.maybe_increment_log_start_offset(7) == 7
    assert log.update_high_watermark(3) == 7
    log.close()
    _assert_on_disk(tmp_path / "t-0", list(range(15)))


# --- keeping the log appendable ----------------------------------------------------------------------


@pytest.mark.parametrize("preallocate", [False, True])
def test_deleting_every_expired_segment_keeps_the_log_end_offset(tmp_path: Path, preallocate: bool) -> None:
    clock = MockClock(START_MS + 10 * DAY_MS)
    log = _open(tmp_path / "t-0", clock, retention_ms=DAY_MS, preallocate=preallocate)
    _fill(log, 13, START_MS)
    for base in _bases(log):
        _set_mtime(log, base, START_MS)

    assert log.delete_old_segments() == 3
    assert _bases(log) == [13]
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (13, 13, 13)
    assert log.active_segment.size == 0
    assert _files_with_suffix(log.directory, file_names.LOG_SUFFIX) == [file_names.log_file(log.directory, 13).name]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(12)
    assert log.read(13).records == b""

    _fill(log, 2)
    assert log.log_end_offset == 15
    assert [record.offset for record in log.records()] == [13, 14]
    log.close()
    _assert_on_disk(tmp_path / "t-0", [13, 14])


def test_an_empty_last_segment_is_never_deleted(tmp_path: Path) -> None:
    clock = MockClock(START_MS + 10 * DAY_MS)
    log = _open(tmp_path / "t-0", clock, retention_ms=DAY_MS, retention_bytes=0)
    _fill(log, 10, START_MS)
    log.roll()
    assert _bases(log) == [0, 5, 10]
    for base in _bases(log):
        _set_mtime(log, base, START_MS)
    empty = log.active_segment

    assert log.delete_old_segments() == 2
    assert log.log_segments() == (empty,)
    clock.sleep(30 * DAY_MS)
    assert log.delete_old_segments() == 0
    assert log.log_segments() == (empty,)
    assert (log.log_start_offset, log.log_end_offset) == (10, 10)
    log.close()
    _assert_on_disk(tmp_path / "t-0", [])


# --- DeleteRecords --------------------------------------------------------------------------------


def test_delete_records_moves_the_log_start_and_segments_follow_on_the_next_pass(tmp_path: Path) -> None:
    clock = MockClock(START_MS)
    log = _open(tmp_path / "t-0", clock)
    _fill(log, 15)
    assert log.num_segments == 3

    assert log.delete_records(1) == 1
    assert log.delete_old_segments() == 0
    assert log.num_segments == 3
    assert log.log_start_offset == 1

    assert log.delete_records(6) == 6
    assert log.num_segments == 3
    assert log.delete_old_segments() == 1
    assert log.num_segments == 2
    assert log.log_start_offset == 6

    assert log.delete_records(15) == 15
    assert log.delete_old_segments() == 1
    assert log.num_segments == 1
    assert log.log_start_offset == 15
    assert log.read(15).records == b""
    log.close()
    _assert_on_disk(tmp_path / "t-0", list(range(10, 15)))


def test_reads_below_the_log_start_fail_before_any_segment_is_deleted(tmp_path: Path) -> None:
    clock = MockClock(START_MS)
    log = _open(tmp_path / "t-0", clock)
    _fill(log, 15)
    log.delete_records(6)

    assert log.num_segments == 3
    for offset in (0, 4, 5):
        with pytest.raises(OffsetOutOfRangeError):
            log.read(offset)
    # The batch of offset 6 is returned; the records below it stay on disk until retention runs.
    assert _read_offset(log, 6) == 6
    assert [record.offset for record in log.records()] == list(range(6, 15))
    log.close()
    _assert_on_disk(tmp_path / "t-0", list(range(15)))


def test_log_start_offset_only_moves_forward(tmp_path: Path) -> None:
    clock = MockClock(START_MS)
    log = _open(tmp_path / "t-0", clock)
    _fill(log, 15)

    assert log.delete_records(6) == 6
    assert log.delete_records(3) == 6
    assert log.maybe_increment_log_start_offset(0) == 6
    assert log.delete_records(6) == 6
    assert log.log_start_offset == 6
    log.close()
    _assert_on_disk(tmp_path / "t-0", list(range(15)))


def test_delete_records_minus_one_means_the_high_watermark(tmp_path: Path) -> None:
    clock = MockClock(START_MS)
    log = _open(tmp_path / "t-0", clock)
    _fill(log, 15)
    log.update_high_watermark(12)

    assert log.delete_records(-1) == 12
    assert log.delete_old_segments() == 2
    assert _bases(log) == [10]
    log.close()
    _assert_on_disk(tmp_path / "t-0", list(range(10, 15)))


@pytest.mark.parametrize("offset", [-2, -100, 13, 15, 16])
def test_delete_records_out_of_range_is_rejected(tmp_path: Path, offset: int) -> None:
    clock = MockClock(START_MS)
    log = _open(tmp_path / "t-0", clock)
    _fill(log, 15)
    log.update_high_watermark(12)

    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(offset)
    assert log.log_start_offset == 0
    log.close()
    _assert_on_disk(tmp_path / "t-0", list(range(15)))


@pytest.mark.parametrize("offset", [1.5, "5", True, None])
def test_delete_records_rejects_offsets_that_are_not_ints(tmp_path: Path, offset: object) -> None:
    clock = MockClock(START_MS)
    log = _open(tmp_path / "t-0", clock)
    _fill(log, 15)

    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(offset)  # type: ignore[arg-type]
    assert log.log_start_offset == 0
    log.close()
    _assert_on_disk(tmp_path / "t-0", list(range(15)))


def test_delete_records_on_a_compact_only_topic_is_a_policy_violation(tmp_path: Path) -> None:
    clock = MockClock(START_MS)
    log = _open(tmp_path / "t-0", clock, cleanup_policy="compact")
    _fill(log, 15)

    for offset in (-1, 6, 100):
        with pytest.raises(PolicyViolationError):
            log.delete_records(offset)
    assert log.log_start_offset == 0
    log.update_config(LogConfig(**{**log.config.__dict__, "cleanup_policy": "compact,delete"}))
    assert log.delete_records(6) == 6
    log.close()
    _assert_on_disk(tmp_path / "t-0", list(range(15)))


# --- two-phase deletion ----------------------------------------------------------------------------


def test_deleted_segments_are_renamed_at_once_and_unlinked_after_the_delay(tmp_path: Path) -> None:
    clock = MockClock(START_MS)
    log = _open(tmp_path / "t-0", clock, file_delete_delay_ms=60_000)
    _fill(log, 15)
    log.delete_records(10)

    assert log.delete_old_segments() == 2
    deleted = _files_with_suffix(log.directory, file_names.DELETED_SUFFIX)
    kinds = (file_names.LOG_SUFFIX, file_names.INDEX_SUFFIX, file_names.TIME_INDEX_SUFFIX)
    assert deleted == sorted(
        file_names.offset_name(base) + kind + file_names.DELETED_SUFFIX for base in (0, 5) for kind in kinds
    )
    assert not file_names.log_file(log.directory, 0).exists()
    for offset in (0, 9):
        with pytest.raises(OffsetOutOfRangeError):
            log.read(offset)

    clock.sleep(59_999)
    assert log.delete_due_files() == 2
    assert _files_with_suffix(log.directory, file_names.DELETED_SUFFIX) == deleted
    clock.sleep(1)
    assert log.delete_due_files() == 0
    assert _files_with_suffix(log.directory, file_names.DELETED_SUFFIX) == []
    log.close()
    _assert_on_disk(tmp_path / "t-0", list(range(10, 15)))


def test_an_append_unlinks_files_whose_delay_has_passed(tmp_path: Path) -> None:
    clock = MockClock(START_MS)
    log = _open(tmp_path / "t-0", clock, file_delete_delay_ms=1_000)
    _fill(log, 12)
    log.delete_records(5)
    assert log.delete_old_segments() == 1
    assert _files_with_suffix(log.directory, file_names.DELETED_SUFFIX) != []

    clock.sleep(1_000)
    _fill(log, 1)
    assert _files_with_suffix(log.directory, file_names.DELETED_SUFFIX) == []
    log.close()
    _assert_on_disk(tmp_path / "t-0", list(range(5, 13)))


def test_zero_delete_delay_unlinks_at_once(tmp_path: Path) -> None:
    clock = MockClock(START_MS)
    log = _open(tmp_path / "t-0", clock, file_delete_delay_ms=0)
    _fill(log, 12)
    log.delete_records(5)

    assert log.delete_old_segments() == 1
    assert _files_with_suffix(log.directory, file_names.DELETED_SUFFIX) == []
    assert log.delete_due_files() == 0
    log.close()
    _assert_on_disk(tmp_path / "t-0", list(range(5, 12)))


def test_a_read_racing_a_zero_delay_deletion_returns_the_bytes_it_started_reading(tmp_path: Path) -> None:
    clock = MockClock(START_MS)
    log = _open(tmp_path / "t-0", clock, file_delete_delay_ms=0)
    _fill(log, 12)
    expected = log.read(0, BATCH_BYTES).records
    first = log.log_segments()[0]
    inside, deleted = threading.Event(), threading.Event()
    pread = first.log.read

    def paused_read(position: int, size: int) -> bytes:
        inside.set()
        assert deleted.wait(10)
        return pread(position, size)

    first.log.read = paused_read  # type: ignore[method-assign]
    answers: list[bytes | BaseException] = []

    def fetch() -> None:
        try:
            answers.append(log.read(0, BATCH_BYTES).records)
        except BaseException as exc:
            answers.append(exc)

    reader = threading.Thread(target=fetch)
    reader.start()
    assert inside.wait(10)
    log.delete_records(5)
    assert log.delete_old_segments() == 1
    assert not file_names.log_file(log.directory, 0, file_names.DELETED_SUFFIX).exists(), "unlinked at once"
    assert _open_descriptors_of(log.directory, 0) > 0, "the segment's files stay open for the reader"
    deleted.set()
    reader.join(10)
    assert answers == [expected], "the segment stays readable until the read that started on it ends"
    assert _open_descriptors_of(log.directory, 0) == 0, "and is closed when that read ends"
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, BATCH_BYTES)
    log.close()


def test_a_read_that_chose_a_segment_deleted_before_it_began_answers_from_the_current_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = MockClock(START_MS)
    log = _open(tmp_path / "t-0", clock, file_delete_delay_ms=0)
    _fill(log, 12)
    floor_index = log_read.floor_index
    deletions = []

    def delete_then_floor(segments: tuple[LogSegment, ...], offset: int) -> int:
        # The reader has passed the range check and is choosing its segment when retention deletes it.
        if not deletions:
            log.delete_records(5)
            deletions.append(log.delete_old_segments())
        return floor_index(segments, offset)

    monkeypatch.setattr(log_read, "floor_index", delete_then_floor)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, BATCH_BYTES)
    assert deletions == [1]
    assert _open_descriptors_of(log.directory, 0) == 0
    assert sorted(path.name for path in log.directory.iterdir() if path.name.startswith("0" * 20)) == [], (
        "no file of the deleted segment reopened"
    )
    assert log.read(5, BATCH_BYTES).records == log.read(5, BATCH_BYTES).records != b""
    log.close()


def _open_descriptors_of(directory: Path, base_offset: int) -> int:
    """This process's open descriptors on the files of segment `base_offset` in `directory`, deleted or not."""
    prefix = str(directory / file_names.log_file(directory, base_offset).name)[: -len(file_names.LOG_SUFFIX)]
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        count += target.startswith(prefix)
    return count


def test_deleted_files_left_by_a_crash_are_removed_on_open(tmp_path: Path) -> None:
    clock = MockClock(START_MS)
    log = _open(tmp_path / "t-0", clock, file_delete_delay_ms=60_000)
    _fill(log, 15)
    log.delete_records(10)
    assert log.delete_old_segments() == 2
    assert len(_files_with_suffix(log.directory, file_names.DELETED_SUFFIX)) == 6
    log.close_without_marker()

    reopened = _open(tmp_path / "t-0", clock, file_delete_delay_ms=60_000)
    assert _files_with_suffix(reopened.directory, file_names.DELETED_SUFFIX) == []
    assert _bases(reopened) == [10]
    assert (reopened.log_start_offset, reopened.log_end_offset) == (10, 15)
    assert [record.offset for record in reopened.records()] == list(range(10, 15))
    reopened.close()
    _assert_on_disk(tmp_path / "t-0", list(range(10, 15)))


def test_a_crash_halfway_through_renaming_a_segment_is_completed_on_open(tmp_path: Path) -> None:
    clock = MockClock(START_MS)
    log = _open(tmp_path / "t-0", clock)
    _fill(log, 15)
    log.close_without_marker()
    # The .log is renamed first, so a crash mid-rename leaves `.log.deleted` beside a live `.index`.
    log_path = file_names.log_file(tmp_path / "t-0", 0)
    os.replace(log_path, file_names.log_file(tmp_path / "t-0", 0, file_names.DELETED_SUFFIX))

    reopened = _open(tmp_path / "t-0", clock)
    assert _bases(reopened) == [5, 10]
    assert reopened.log_start_offset == 5
    assert not any(name.startswith(file_names.offset_name(0)) for name in os.listdir(tmp_path / "t-0"))
    reopened.close()
    _assert_on_disk(tmp_path / "t-0", list(range(5, 15)))


def test_deleted_files_pending_at_a_clean_close_are_removed_on_open(tmp_path: Path) -> None:
    clock = MockClock(START_MS)
    log = _open(tmp_path / "t-0", clock, file_delete_delay_ms=60_000)
    _fill(log, 15)
    log.delete_records(5)
    assert log.delete_old_segments() == 1
    log.close()
    assert len(_files_with_suffix(tmp_path / "t-0", file_names.DELETED_SUFFIX)) == 3

    reopened = _open(tmp_path / "t-0", clock)
    assert _files_with_suffix(reopened.directory, file_names.DELETED_SUFFIX) == []
    assert _bases(reopened) == [5, 10]
    reopened.close()
    _assert_on_disk(tmp_path / "t-0", list(range(5, 15)))


# --- future timestamps (spec §6.5) ---------------------------------------------------------------------


@pytest.mark.parametrize("future_ms", [START_MS + TEN_YEARS_MS, START_MS * 1000], ids=["ten-years-ahead", "micros"])
def test_a_record_from_the_far_future_expires_retention_ms_after_its_write_time(tmp_path: Path, future_ms: int) -> None:
    clock = MockClock(START_MS)
    log = _open(tmp_path / "t-0", clock, retention_ms=DAY_MS)
    _fill(log, 4)
    # Rolls: the record is more than segment.ms (7 days) after the segment's first timestamp.
    _fill(log, 1, future_ms)
    _fill(log, 1)
    log.roll()
    _fill(log, 2, START_MS + 2 * DAY_MS)
    assert _bases(log) == [0, 4, 6]
    future = log.log_segments()[1]
    assert future.max_timestamp_so_far == future_ms
    _set_mtime(log, 0, START_MS)
    _set_mtime(log, 4, START_MS)
    _set_mtime(log, 6, START_MS + 2 * DAY_MS)

    # Cap = write time + min(message.timestamp.after.max.ms, 1 h); the segment expires retention.ms after it.
    clock.sleep(DAY_MS + HOUR_MS)
    assert log.delete_old_segments() == 1
    assert _bases(log) == [4, 6]
    clock.sleep(1)
    kafka_would_delete = clock.milliseconds() - future.max_timestamp_so_far > DAY_MS
    assert not kafka_would_delete
    assert log.delete_old_segments() == 1
    assert _bases(log) == [6]
    log.close()
    _assert_on_disk(tmp_path / "t-0", [6, 7])


def test_the_future_cap_uses_a_smaller_message_timestamp_after_max_ms(tmp_path: Path) -> None:
    clock = MockClock(START_MS)
    ten_minutes_ms = 600_000
    log = _open(tmp_path / "t-0", clock, retention_ms=DAY_MS, message_timestamp_after_max_ms=ten_minutes_ms)
    # The follower path does not check timestamps, so a far-future record gets in despite the 10 min window.
    for offset in range(5):
        log.append_as_follower(_batch(offset, START_MS + TEN_YEARS_MS, base_offset=offset))
    log.roll()
    for offset in range(5, 7):
        log.append_as_follower(_batch(offset, START_MS + 2 * DAY_MS, base_offset=offset))
    assert _bases(log) == [0, 5]
    _set_mtime(log, 0, START_MS)
    _set_mtime(log, 5, START_MS + 2 * DAY_MS)

    clock.sleep(DAY_MS + ten_minutes_ms)
    assert log.delete_old_segments() == 0
    clock.sleep(1)
    assert log.delete_old_segments() == 1
    assert _bases(log) == [5]
    log.close()
    _assert_on_disk(tmp_path / "t-0", [5, 6])


@pytest.mark.parametrize("skew_ms", [-HOUR_MS, 0, 30 * 60_000, HOUR_MS])
def test_honest_timestamps_expire_by_their_record_time(tmp_path: Path, skew_ms: int) -> None:
    clock = MockClock(START_MS)
    record_ms = START_MS + skew_ms
    log = _open(tmp_path / "t-0", clock, retention_ms=DAY_MS)
    _fill(log, 5, record_ms)
    _fill(log, 1, START_MS + 2 * DAY_MS)
    _set_mtime(log, 0, START_MS)
    _set_mtime(log, 5, START_MS + 2 * DAY_MS)

    clock.sleep(record_ms + DAY_MS - clock.milliseconds())
    assert log.delete_old_segments() == 0
    clock.sleep(1)
    assert log.delete_old_segments() == 1
    assert _bases(log) == [5]
    log.close()
    _assert_on_disk(tmp_path / "t-0", [5])


# --- checkpointed log start offset on open ---------------------------------------------------------------


def test_log_end_below_the_checkpointed_log_start_deletes_every_segment(tmp_path: Path) -> None:
    clock = MockClock(START_MS)
    log = _open(tmp_path / "t-0", clock)
    _fill(log, 12)
    log.close()

    config = LogConfig(segment_bytes=RECORDS_PER_SEGMENT * BATCH_BYTES, retention_ms=-1)
    reopened = Log.open(tmp_path / "t-0", config, clock=clock, log_start_offset=20)
    assert _bases(reopened) == [20]
    assert (reopened.log_start_offset, reopened.log_end_offset, reopened.high_watermark) == (20, 20, 20)
    assert _files_with_suffix(reopened.directory, file_names.LOG_SUFFIX) == [
        file_names.log_file(reopened.directory, 20).name
    ]
    with pytest.raises(OffsetOutOfRangeError):
        reopened.read(11)
    _fill(reopened, 3)
    assert [record.offset for record in reopened.records()] == [20, 21, 22]
    reopened.close()
    _assert_on_disk(tmp_path / "t-0", [20, 21, 22])


def test_a_checkpointed_log_start_inside_the_log_hides_older_offsets(tmp_path: Path) -> None:
    clock = MockClock(START_MS)
    log = _open(tmp_path / "t-0", clock)
    _fill(log, 12)
    log.close()

    config = LogConfig(segment_bytes=RECORDS_PER_SEGMENT * BATCH_BYTES, retention_ms=-1)
    for checkpoint, expected_start in ((7, 7), (12, 12)):
        reopened = Log.open(tmp_path / "t-0", config, clock=clock, log_start_offset=checkpoint)
        assert reopened.log_start_offset == expected_start
        assert reopened.log_end_offset == 12
        with pytest.raises(OffsetOutOfRangeError):
            reopened.read(expected_start - 1)
        reopened.close()

    reopened = Log.open(tmp_path / "t-0", config, clock=clock, log_start_offset=7)
    assert _bases(reopened) == [0, 5, 10]
    assert reopened.delete_old_segments() == 1
    assert _bases(reopened) == [5, 10]
    reopened.close()
    _assert_on_disk(tmp_path / "t-0", list(range(5, 12)))


# --- concurrency and restarts ----------------------------------------------------------------------------


def test_a_truncation_during_a_retention_pass_waits_for_the_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = MockClock(START_MS + 10 * DAY_MS)
    log = _open(tmp_path / "t-0", clock, retention_ms=DAY_MS)
    _fill(log, 15, START_MS)
    for base in _bases(log):
        _set_mtime(log, base, START_MS)
    truncation = threading.Thread(target=log.truncate_to, args=(3,))
    original = retention.retention_timestamp

    def truncate_mid_pass(segment: LogSegment, after_max_ms: int) -> int:
        if truncation.ident is None:
            truncation.start()
            # Without the writer lock the truncation ends here (well within 0.2 s); the pass then removes
            # the segments it judged, including the truncated active one, and leaves no segment at all.
            truncation.join(timeout=0.2)
        return original(segment, after_max_ms)

    monkeypatch.setattr(retention, "retention_timestamp", truncate_mid_pass)
    assert log.delete_old_segments() == 3
    truncation.join(timeout=5)
    assert not truncation.is_alive()

    # The pass emptied the log at 15 first; the truncation then restarted it at 3.
    assert _bases(log) == [3]
    assert (log.log_start_offset, log.log_end_offset) == (3, 3)
    _fill(log, 2)
    assert [record.offset for record in log.records()] == [3, 4]
    log.close()
    _assert_on_disk(tmp_path / "t-0", [3, 4])


@pytest.mark.parametrize("clean", [True, False])
def test_segment_mtimes_survive_a_restart_so_time_retention_is_unchanged(tmp_path: Path, clean: bool) -> None:
    clock = MockClock(START_MS)
    log = _open(tmp_path / "t-0", clock, retention_ms=DAY_MS)
    _fill(log, 12, NO_TIMESTAMP)
    _set_mtime(log, 0, START_MS - 3 * DAY_MS)
    _set_mtime(log, 5, START_MS - 2 * DAY_MS)
    _set_mtime(log, 10, START_MS)
    if clean:
        log.close()
    else:
        log.close_without_marker()

    reopened = _open(tmp_path / "t-0", clock, retention_ms=DAY_MS)
    assert reopened.delete_old_segments() == 2
    assert _bases(reopened) == [10]
    reopened.close()
    _assert_on_disk(tmp_path / "t-0", [10, 11])
