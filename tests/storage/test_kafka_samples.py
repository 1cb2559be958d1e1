"""Golden tests: `Log` opens partition folders that real Kafka brokers wrote, and reads them like Kafka does.

The samples are every partition folder (a folder holding a `.log`) under `tests/fixtures/kafka/`: whole log
dirs committed to public Apache-2.0 / MIT repositories, copied byte for byte (that folder's PROVENANCE.md).

Each folder is copied to `tmp_path` (with its log dir's `.kafka_cleanshutdown`, if any) and opened there, never
in place. The oracle is kafka-python 3.0.12's independent decoder (`MemoryRecords` over each `.log` file's
bytes) and the index files' own bytes, unpacked here with `struct`.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import os
import re
import shutil
import stat
import struct
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from storage import file_names
from storage.clock import MockClock
from storage.partition.log import Log
from storage.records.file_records import iter_any_batches
from storage.records.record_batch import ControlRecordType, Record, RecordBatch
from tests.conftest import KAFKA_SAMPLES_DIR

FIXTURES_DIR = KAFKA_SAMPLES_DIR
FIXTURES_PROVENANCE = FIXTURES_DIR / "PROVENANCE.md"
# `sha256sum` output for every sample file, taken when they were copied from their repositories.
FIXTURES_CHECKSUMS = FIXTURES_DIR / "SHA256SUMS"

INDEX_INTERVAL_BYTES = 4096  # Kafka's default `index.interval.bytes`, used by every sampled broker
OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
# `<20-digit end offset>-<10-digit epoch>.checkpoint`: a KRaft metadata snapshot.
KRAFT_SNAPSHOT_NAME = re.compile(r"^\d{20}-\d{10}\.checkpoint$")
BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"

RecordTuple = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


# --- the oracle: kafka-python over the raw files -----------------------------------------------------------


@dataclass(frozen=True)
class OracleBatch:
    """One batch as kafka-python decodes it, with where it lies in its `.log`."""

    position: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    is_control: bool
    records: tuple[RecordTuple, ...]


@dataclass(frozen=True)
class OracleSegment:
    """One `.log` file of a partition: its base offset (file name), bytes and batches."""

    base_offset: int
    data: bytes
    batches: tuple[OracleBatch, ...]

    @property
    def records(self) -> list[RecordTuple]:
        return [record for batch in self.batches for record in batch.records]

    def batch_holding(self, offset: int) -> OracleBatch:
        return next(batch for batch in self.batches if batch.base_offset <= offset <= batch.last_offset)


def kafka_python_batches(data: bytes) -> tuple[OracleBatch, ...]:
    """Every batch of a buffer of v2 batches, decoded by kafka-python; the buffer must hold whole batches only."""
    records = MemoryRecords(data)
    batches = []
    position = 0
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc(), f"kafka-python: CRC mismatch in the batch at position {position}"
        decoded = tuple(
            (record.offset, record.timestamp, record.key, record.value, tuple(record.headers)) for record in batch
        )
        batches.append(
            OracleBatch(
                position,
                batch.size_in_bytes,
                batch.base_offset,
                batch.last_offset,
                batch.max_timestamp,
                batch.is_control_batch,
                decoded,
            )
        )
        position += batch.size_in_bytes
    assert position == len(data), f"kafka-python left {len(data) - position} undecoded bytes"
    return tuple(batches)


@functools.cache
def oracle(partition: Path) -> tuple[OracleSegment, ...]:
    """The partition's segments, oldest first, decoded by kafka-python (cached: the sources are read-only)."""
    segments = []
    for log_file in sorted(partition.glob(f"*{file_names.LOG_SUFFIX}")):
        data = log_file.read_bytes()
        segments.append(OracleSegment(int(log_file.stem), data, kafka_python_batches(data)))
    return tuple(segments)


def all_batches(partition: Path) -> list[OracleBatch]:
    return [batch for segment in oracle(partition) for batch in segment.batches]


def all_records(partition: Path) -> list[RecordTuple]:
    return [record for segment in oracle(partition) for record in segment.records]


def as_tuple(record: Record) -> RecordTuple:
    return (record.offset, record.timestamp, record.key, record.value, tuple(record.headers))


def offset_entries_in_file(path: Path, base_offset: int) -> list[tuple[int, int]]:
    data = path.read_bytes()
    return [(base_offset + relative, position) for relative, position in OFFSET_ENTRY.iter_unpack(data)]


def time_entries_in_file(path: Path, base_offset: int) -> list[tuple[int, int]]:
    data = path.read_bytes()
    return [(timestamp, base_offset + relative) for timestamp, relative in TIME_ENTRY.iter_unpack(data)]


def recovery_rule_indexes(segment: OracleSegment) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The entries Kafka's `LogSegment.recover` writes, batch by batch: the oracle for rebuilt indexes.

    An offset entry (batch last offset, position) once more than `index.interval.bytes` were read since the
    last entry; with it a time entry for the max timestamp so far (with its batch's last offset) if that grew;
    and a final time entry for the segment's max timestamp.
    """
    offset_entries: list[tuple[int, int]] = []
    time_entries: list[tuple[int, int]] = []
    max_timestamp, offset_of_max = -1, -1
    last_entry_position = 0

    def maybe_append_time(timestamp: int, offset: int) -> None:
        if timestamp >= 0 and (not time_entries or timestamp > time_entries[-1][0]):
            time_entries.append((timestamp, offset))

    for batch in segment.batches:
        if batch.max_timestamp > max_timestamp:
            max_timestamp, offset_of_max = batch.max_timestamp, batch.last_offset
        if batch.position - last_entry_position > INDEX_INTERVAL_BYTES:
            offset_entries.append((batch.last_offset, batch.position))
            maybe_append_time(max_timestamp, offset_of_max)
            last_entry_position = batch.position
    maybe_append_time(max_timestamp, offset_of_max)
    return offset_entries, time_entries


# --- the samples -------------------------------------------------------------------------------------------


def partition_folders(root: Path) -> list[Path]:
    """Every folder under `root` holding at least one `.log` file (folders without a segment are skipped)."""
    return sorted({log_file.parent for log_file in root.rglob(f"*{file_names.LOG_SUFFIX}")})


def sample_params() -> list[object]:
    return [
        pytest.param(folder, id=f"fixtures/{folder.relative_to(FIXTURES_DIR)}")
        for folder in partition_folders(FIXTURES_DIR)
    ]


SAMPLES = sample_params()


def representative(params: list[object]) -> list[object]:
    """Every non-empty sample, and one empty partition per log dir.

    Most partitions are empty (354 of the 385 samples: 0-byte `.log`, `.index`, `.timeindex`) and alike within a
    log dir; the tests that write to a copy run on one of each log dir to keep the module's runtime small.
    """
    kept: list[object] = []
    log_dirs_with_an_empty_one: set[Path] = set()
    for param in params:
        partition = param.values[0]  # type: ignore[attr-defined]
        if any(log.stat().st_size for log in partition.glob(f"*{file_names.LOG_SUFFIX}")):
            kept.append(param)
        elif partition.parent not in log_dirs_with_an_empty_one:
            log_dirs_with_an_empty_one.add(partition.parent)
            kept.append(param)
    return kept


WRITE_SAMPLES = representative(SAMPLES)


def is_clean(partition: Path) -> bool:
    """The broker shut the log dir down cleanly (its `.kafka_cleanshutdown` is present)."""
    return (partition.parent / file_names.CLEAN_SHUTDOWN_FILE).exists()


def with_index_files(partition: Path) -> bool:
    """Whether the broker's `.index` files were stored (only for logs it shut down cleanly, see PROVENANCE.md)."""
    return any(partition.glob(f"*{file_names.INDEX_SUFFIX}"))


def copy_partition(partition: Path, tmp_path: Path) -> Path:
    """Copies the partition folder (mtimes kept) and its log dir's clean-shutdown marker into `tmp_path`.

    The sources are git checkouts, whose mtimes follow checkout order (in a checkout of the samples the marker may be a
    few milliseconds OLDER than most partition files). A broker writes the marker after closing every segment,
    so the copied marker is dated after the newest copied file, as it was on the broker's disk.
    """
    log_dir = tmp_path / partition.parent.name
    target = log_dir / partition.name
    shutil.copytree(partition, target)
    for path in (target, *target.iterdir()):
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    marker = partition.parent / file_names.CLEAN_SHUTDOWN_FILE
    if marker.exists():
        copied = log_dir / file_names.CLEAN_SHUTDOWN_FILE
        shutil.copy2(marker, copied)
        copied.chmod(copied.stat().st_mode | stat.S_IWUSR)
        after_newest_ns = max(path.stat().st_mtime_ns for path in target.iterdir()) + 1_000_000_000
        os.utime(copied, ns=(after_newest_ns, after_newest_ns))
    return target


def oracle_log_end(partition: Path) -> int:
    """The offset after the partition's last record as kafka-python reads it (the first segment's base if none)."""
    batches = all_batches(partition)
    return batches[-1].last_offset + 1 if batches else oracle(partition)[0].base_offset


def loaded_epoch_checkpoint(original: bytes, log_end_offset: int) -> bytes:
    """The leader-epoch-checkpoint Kafka's `LogLoader` leaves after loading the folder: entries starting at or after
    the log end are dropped (a leader records its epoch at the log end when it is elected, before it writes). An
    empty file (a broker that died while writing it) reads as no entries and is left as it is."""
    if not original:
        return original
    version, _count, *lines = original.decode().splitlines()
    kept = [line for line in lines if int(line.split()[1]) < log_end_offset]
    if len(kept) == len(lines):
        return original
    return f"{version}\n{len(kept)}\n".encode() + b"".join(f"{line}\n".encode() for line in kept)


def file_bytes(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in folder.iterdir() if path.is_file()}


class FirstOffsetByTime:
    """The oracle for ListOffsets: the first record (in offset order) whose timestamp is >= t.

    Timestamps need not increase, so it bisects the running maximum, which first reaches t at that record.
    """

    def __init__(self, records: list[RecordTuple]) -> None:
        self._offsets = [record[0] for record in records]
        self._running_max = list(itertools.accumulate((record[1] for record in records), max))

    def __call__(self, timestamp: int) -> int | None:
        slot = bisect_left(self._running_max, timestamp)
        return self._offsets[slot] if slot < len(self._offsets) else None


def kafka_python_batch(offset: int, timestamp_ms: int, count: int, compression_type: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression_type,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for delta in range(count):
        key = f"appended-key-{offset + delta}".encode()
        builder.append(delta, timestamp_ms + delta, key, b"appended value " * (delta + 1), [("h", b"v")])
    return bytes(builder.build())


@pytest.fixture(autouse=True)
def _fsync_checks_the_descriptor_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests check formats, not durability: an fsync costs ~5 ms on ext4 and the module opens ~1,500 logs.

    `os.fstat` still fails on a closed or invalid descriptor, as `os.fsync` would.
    """
    monkeypatch.setattr(os, "fsync", os.fstat)


# --- checks on an open log ---------------------------------------------------------------------------------


def check_records(log: Log, partition: Path) -> None:
    """Same segments, same records (offsets, timestamps, keys, values, headers) in order; start and end offsets."""
    segments = oracle(partition)
    batches = all_batches(partition)
    assert [segment.base_offset for segment in log.log_segments()] == [segment.base_offset for segment in segments]
    assert log.dropped_on_open == ()
    assert [as_tuple(record) for record in log.records()] == all_records(partition)
    assert log.log_start_offset == segments[0].base_offset
    if batches:
        assert batches[0].base_offset == segments[0].base_offset
        assert log.log_end_offset == batches[-1].last_offset + 1
    else:
        assert log.log_end_offset == segments[-1].base_offset
    # The clean path trusts the broker's files; after an unclean shutdown nothing is known flushed.
    assert log.recovery_point == (log.log_end_offset if is_clean(partition) else 0)


def check_reads(log: Log, partition: Path) -> None:
    """A fetch starts at the batch holding the offset, returns whole batches, and stays inside one segment."""
    for segment in oracle(partition):
        data = segment.data
        for index, batch in enumerate(segment.batches):
            raw = data[batch.position : batch.position + batch.size]
            for offset in {batch.base_offset, batch.last_offset, *(record[0] for record in batch.records)}:
                fetched = log.read(offset, max_bytes=1)
                assert fetched.records == raw, f"offset {offset}"
                assert fetched.fetch_offset_metadata.segment_base_offset == segment.base_offset
                assert fetched.fetch_offset_metadata.relative_position == batch.position
            following = segment.batches[index + 1].size if index + 1 < len(segment.batches) else 0
            two = log.read(batch.base_offset, max_bytes=batch.size + following)
            assert two.records == data[batch.position : batch.position + batch.size + following]
        for batch in segment.batches[:1] + segment.batches[-1:]:
            # A default-sized fetch (1 MiB) ends at the segment's end or at max_bytes, possibly mid-batch.
            fetched = log.read(batch.base_offset)
            assert fetched.records == data[batch.position : batch.position + 1024 * 1024]
    assert log.read(log.log_end_offset).records == b""


def check_offsets_by_time(log: Log, partition: Path, timestamps: set[int] | None = None) -> None:
    """ListOffsets for t and t + 1 agrees with the oracle, for t = 0 and every record timestamp (or `timestamps`)."""
    records = all_records(partition)
    expected = FirstOffsetByTime(records)
    if timestamps is None:
        timestamps = {record[1] for record in records}
    for timestamp in sorted({0, *timestamps, *(timestamp + 1 for timestamp in timestamps)}):
        assert log.offset_for_timestamp(timestamp) == expected(timestamp), f"timestamp {timestamp}"


def check_broker_indexes(log: Log, partition: Path) -> None:
    """The broker's `.index`/`.timeindex` are read entry for entry, agree with the `.log`, and answer lookups."""
    for segment, ours in zip(oracle(partition), log.log_segments(), strict=True):
        name = file_names.offset_name(segment.base_offset)
        offset_entries = offset_entries_in_file(partition / f"{name}{file_names.INDEX_SUFFIX}", segment.base_offset)
        time_entries = time_entries_in_file(partition / f"{name}{file_names.TIME_INDEX_SUFFIX}", segment.base_offset)
        assert [(entry.offset, entry.position) for entry in ours.offset_index.entries_list()] == offset_entries
        assert [(entry.timestamp, entry.offset) for entry in ours.time_index.entries_list()] == time_entries
        starts = {batch.position: batch for batch in segment.batches}
        for offset, position in offset_entries:
            assert starts[position].last_offset == offset
        for timestamp, offset in time_entries:
            assert segment.batch_holding(offset).max_timestamp == timestamp
        if segment.batches:
            assert time_entries[-1][0] == max(batch.max_timestamp for batch in segment.batches)
        else:
            assert offset_entries == time_entries == []
        entry_offsets = [offset for offset, _ in offset_entries]
        for batch in segment.batches:
            for offset in (batch.base_offset, batch.last_offset):
                slot = bisect_right(entry_offsets, offset) - 1
                found = ours.offset_index.lookup(offset)
                assert (found.offset, found.position) == (offset_entries[slot] if slot >= 0 else (ours.base_offset, 0))
        for slot, (timestamp, _) in enumerate(time_entries):
            found_time = ours.time_index.lookup(timestamp)
            assert (found_time.timestamp, found_time.offset) == time_entries[slot]
            before = ours.time_index.lookup(timestamp - 1)
            assert (before.timestamp, before.offset) == (time_entries[slot - 1] if slot else (-1, ours.base_offset))


def check_rebuilt_indexes(log: Log, partition: Path) -> None:
    """Indexes rebuilt on open hold what Kafka's recovery writes, and map every batch to its position."""
    for segment, ours in zip(oracle(partition), log.log_segments(), strict=True):
        assert ours.offset_index_path.exists() and ours.time_index_path.exists()
        offset_entries, time_entries = recovery_rule_indexes(segment)
        assert [(entry.offset, entry.position) for entry in ours.offset_index.entries_list()] == offset_entries
        assert [(entry.timestamp, entry.offset) for entry in ours.time_index.entries_list()] == time_entries
        for batch in segment.batches:
            mapping = ours.translate_offset(batch.last_offset)
            assert mapping is not None
            assert (mapping.position, mapping.size) == (batch.position, batch.size)


# --- one open: decode, read, search, close -----------------------------------------------------------------


@pytest.mark.parametrize("partition", SAMPLES)
def test_opened_sample_matches_kafka_python_and_close_changes_no_broker_file(partition: Path, tmp_path: Path) -> None:
    """Opening a broker's partition folder shows exactly what kafka-python decodes, and `close()` then leaves
    a cleanly shut down folder byte for byte as the broker left it (our own marker is the one file it may add);
    an unclean one keeps its `.log` files and gains only its rebuilt index files."""
    original = file_bytes(partition)
    copy = copy_partition(partition, tmp_path)
    with Log.open(copy) as log:
        check_records(log, partition)
        check_reads(log, partition)
        check_offsets_by_time(log, partition)
        if with_index_files(partition):
            check_broker_indexes(log, partition)
        else:
            check_rebuilt_indexes(log, partition)
    after = file_bytes(copy)
    if file_names.LEADER_EPOCH_CHECKPOINT in original:
        expected = loaded_epoch_checkpoint(original[file_names.LEADER_EPOCH_CHECKPOINT], oracle_log_end(partition))
        assert after.get(file_names.LEADER_EPOCH_CHECKPOINT) == expected
        original[file_names.LEADER_EPOCH_CHECKPOINT] = expected
    assert [name for name, data in original.items() if after.get(name) != data] == []
    added = set(after) - set(original)
    if is_clean(partition):
        assert added <= {file_names.CLEAN_SHUTDOWN_FILE}
    else:
        rebuilt = {
            f"{file_names.offset_name(segment.base_offset)}{suffix}"
            for segment in oracle(partition)
            for suffix in (file_names.INDEX_SUFFIX, file_names.TIME_INDEX_SUFFIX)
        }
        # Kafka too takes a producer-state snapshot at the log end once an unclean load has replayed producers.
        snapshot = f"{file_names.offset_name(log.log_end_offset)}{file_names.PRODUCER_SNAPSHOT_SUFFIX}"
        assert added <= rebuilt | {file_names.CLEAN_SHUTDOWN_FILE, snapshot}


@pytest.mark.parametrize("partition", SAMPLES)
def test_our_batch_headers_match_kafka_python(partition: Path) -> None:
    for segment in oracle(partition):
        ours = list(iter_any_batches(segment.data))
        assert [
            (batch.position, batch.size_in_bytes, batch.base_offset, batch.last_offset, batch.max_timestamp)
            for batch in ours
        ] == [(b.position, b.size, b.base_offset, b.last_offset, b.max_timestamp) for b in segment.batches]
        for batch in ours:
            assert isinstance(batch, RecordBatch)
            batch.ensure_valid()


def test_samples_without_index_files_are_the_unclean_ones() -> None:
    """The rebuilt-index branch above runs on real samples, and only on logs a broker did not close cleanly."""
    unindexed = [folder for folder in partition_folders(FIXTURES_DIR) if not with_index_files(folder)]
    assert {str(folder.parent.relative_to(FIXTURES_DIR)) for folder in unindexed} == {
        "BiggerBrain__kafka@0af19244/data",
        "seanorth__kafka-server@9626fa1e/kafka-logs",
    }
    assert {"lsx1-0", "some-topic-0"} <= {folder.name for folder in unindexed}
    for folder in unindexed:
        assert not is_clean(folder), folder


# --- indexes rebuilt from the .log -------------------------------------------------------------------------


@pytest.mark.parametrize("partition", WRITE_SAMPLES)
def test_rebuilt_indexes_follow_kafkas_recovery_rule(partition: Path, tmp_path: Path) -> None:
    copy = copy_partition(partition, tmp_path)
    for index_file in [*copy.glob(f"*{file_names.INDEX_SUFFIX}"), *copy.glob(f"*{file_names.TIME_INDEX_SUFFIX}")]:
        index_file.unlink()
    with Log.open(copy) as log:
        assert log.dropped_on_open == ()
        check_rebuilt_indexes(log, partition)
        # Every record timestamp is searched once through the broker's indexes already; here the time-index
        # boundaries (t - 1, t, t + 1 for each rebuilt entry) exercise the rebuilt ones.
        boundaries = {
            entry.timestamp + delta
            for segment in log.log_segments()
            for entry in segment.time_index.entries_list()
            for delta in (-1, 0)
        }
        check_offsets_by_time(log, partition, boundaries)
    for segment in oracle(partition):
        name = file_names.offset_name(segment.base_offset)
        offset_entries, time_entries = recovery_rule_indexes(segment)
        assert (copy / f"{name}{file_names.LOG_SUFFIX}").read_bytes() == segment.data
        assert offset_entries_in_file(copy / f"{name}{file_names.INDEX_SUFFIX}", segment.base_offset) == offset_entries
        assert time_entries_in_file(copy / f"{name}{file_names.TIME_INDEX_SUFFIX}", segment.base_offset) == time_entries


# --- appending after open ----------------------------------------------------------------------------------


@pytest.mark.parametrize("partition", WRITE_SAMPLES)
def test_append_after_open_continues_at_the_log_end_offset(partition: Path, tmp_path: Path) -> None:
    records = all_records(partition)
    copy = copy_partition(partition, tmp_path)
    original_logs = {name: data for name, data in file_bytes(copy).items() if name.endswith(file_names.LOG_SUFFIX)}
    newest = max((record[1] for record in records), default=1_700_000_000_000)
    with Log.open(copy, clock=MockClock(newest + 1000)) as log:
        end = log.log_end_offset
        first = log.append(kafka_python_batch(end, newest + 1, 3))
        second = log.append(kafka_python_batch(end + 3, newest + 10, 2, compression_type=1))
        assert (first.first_offset, first.last_offset) == (end, end + 2)
        assert (second.first_offset, second.last_offset) == (end + 3, end + 4)
        assert log.log_end_offset == end + 5
        assert log.offset_for_timestamp(newest + 1) == end
    after = file_bytes(copy)
    for name, data in original_logs.items():
        assert after[name].startswith(data), name
    decoded = [
        record
        for name in sorted(after)
        if name.endswith(file_names.LOG_SUFFIX)
        for batch in kafka_python_batches(after[name])
        for record in batch.records
    ]
    assert decoded[: len(records)] == records
    appended = decoded[len(records) :]
    assert [record[0] for record in appended] == list(range(end, end + 5))
    assert [record[2] for record in appended] == [f"appended-key-{offset}".encode() for offset in range(end, end + 5)]
    with Log.open(copy) as reopened:
        assert reopened.log_end_offset == end + 5
        assert [as_tuple(record) for record in reopened.records()] == decoded


# --- the counts PROVENANCE.md states -----------------------------------------------------------------------


@dataclass(frozen=True)
class SegmentCounts:
    """One row of a PROVENANCE.md table: a segment and what it holds."""

    path: str
    batches: int
    records: int
    first_offset: int
    last_offset: int
    index_entries: int | None  # None: no index file (not a clean shutdown)
    time_index_entries: int | None


_COUNTS_ROW = re.compile(r"^\| `([^`]+\.log)` \| (\d+) \| (\d+) \| (\d+)\.\.(\d+) \| (\d+|-) \| (\d+|-) \|")


def fixture_counts() -> list[SegmentCounts]:
    """The per-segment table of tests/fixtures/kafka/PROVENANCE.md (one row per copied segment)."""
    rows = []
    for line in FIXTURES_PROVENANCE.read_text().splitlines():
        if match := _COUNTS_ROW.match(line):
            path, *numbers = match.groups()
            rows.append(SegmentCounts(path, *(None if number == "-" else int(number) for number in numbers)))
    return rows


def count_params() -> list[object]:
    return [pytest.param(FIXTURES_DIR, row, id=f"fixtures/{row.path}") for row in fixture_counts()]


@pytest.mark.parametrize(("root", "row"), count_params())
def test_segment_holds_what_provenance_states(root: Path, row: SegmentCounts) -> None:
    log_file = root / row.path
    data = log_file.read_bytes()
    batches = list(iter_any_batches(data))
    records = [record for batch in batches for record in batch.records()]
    assert len(batches) == row.batches
    assert len(records) == row.records
    assert (batches[0].base_offset, batches[-1].last_offset) == (row.first_offset, row.last_offset)
    index = log_file.with_suffix(file_names.INDEX_SUFFIX)
    time_index = log_file.with_suffix(file_names.TIME_INDEX_SUFFIX)
    for path, entry_size, entries in (
        (index, OFFSET_ENTRY.size, row.index_entries),
        (time_index, TIME_ENTRY.size, row.time_index_entries),
    ):
        if entries is None:
            assert not path.exists()
        else:
            assert path.stat().st_size == entries * entry_size


def test_fixtures_are_the_bytes_copied_from_their_repositories() -> None:
    """Nothing (an editor, a line-ending filter, a test writing in place) has changed a sample since its copy."""
    listed = {}
    for line in FIXTURES_CHECKSUMS.read_text().splitlines():
        digest, name = line.split("  ", 1)
        listed[name] = digest
    own_files = {FIXTURES_PROVENANCE, FIXTURES_CHECKSUMS, FIXTURES_DIR / ".gitattributes"}
    copied = {str(path.relative_to(FIXTURES_DIR)): path for path in FIXTURES_DIR.rglob("*") if path.is_file()}
    assert set(listed) == {name for name, path in copied.items() if path not in own_files}
    assert len(listed) > 1700
    for name, digest in listed.items():
        assert hashlib.sha256(copied[name].read_bytes()).hexdigest() == digest, name


def test_every_fixture_folder_has_provenance() -> None:
    text = FIXTURES_PROVENANCE.read_text()
    folders = {folder.relative_to(FIXTURES_DIR).parts[0] for folder in partition_folders(FIXTURES_DIR)}
    assert folders
    for folder in folders:
        assert f"`{folder}/" in text, folder
    described = {row.path for row in fixture_counts()}
    logs = {str(path.relative_to(FIXTURES_DIR)): path for path in FIXTURES_DIR.rglob(f"*{file_names.LOG_SUFFIX}")}
    assert described == {name for name, path in logs.items() if path.stat().st_size}


# --- KRaft snapshots ---------------------------------------------------------------------------------------


def kraft_files(root: Path) -> list[Path]:
    return sorted(
        path
        for path in root.rglob("*.checkpoint")
        if KRAFT_SNAPSHOT_NAME.match(path.name) or path.name == BOOTSTRAP_CHECKPOINT
    )


def kraft_params() -> list[object]:
    return [pytest.param(path, id=f"fixtures/{path.relative_to(FIXTURES_DIR)}") for path in kraft_files(FIXTURES_DIR)]


# Records per KRaft snapshot (header and footer included), from PROVENANCE.md.
KRAFT_SNAPSHOT_RECORDS = {
    "00000000000000007364-0000000001.checkpoint": 165,
    "00000000000000021265-0000000006.checkpoint": 165,
    "00000000000000060500-0000000025.checkpoint": 171,
}


@pytest.mark.parametrize("path", kraft_params())
def test_kraft_snapshot_is_header_batches_footer(path: Path) -> None:
    data = path.read_bytes()
    batches = list(iter_any_batches(data))
    assert sum(batch.size_in_bytes for batch in batches) == len(data)
    for batch in batches:
        assert isinstance(batch, RecordBatch)
        batch.ensure_valid()
    assert len(batches) == 3
    header, *middle, footer = batches
    assert header.is_control and header.control_type() == ControlRecordType.SNAPSHOT_HEADER
    assert footer.is_control and footer.control_type() == ControlRecordType.SNAPSHOT_FOOTER
    assert not any(batch.is_control for batch in middle)
    ours = [as_tuple(record) for batch in batches for record in batch.records()]
    assert ours == [record for batch in kafka_python_batches(data) for record in batch.records]
    offsets = [record[0] for record in ours]
    assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
    if path.name in KRAFT_SNAPSHOT_RECORDS:
        assert len(ours) == KRAFT_SNAPSHOT_RECORDS[path.name]


def test_transactional_batch_and_commit_marker_of_ksqldb(tmp_path: Path) -> None:
    partition = (
        FIXTURES_DIR
        / "ItumelengMogase__Real-Time-Data-Pipeline-for-Patient-Admissions@2f57540f"
        / "kafka-data"
        / "_confluent-ksql-default__command_topic-0"
    )
    data = (partition / "00000000000000000000.log").read_bytes()
    data_batch, marker = iter_any_batches(data)
    assert isinstance(data_batch, RecordBatch) and isinstance(marker, RecordBatch)
    assert (data_batch.attributes, marker.attributes) == (0x10, 0x30)
    assert data_batch.is_transactional and not data_batch.is_control
    assert marker.is_transactional and marker.control_type() == ControlRecordType.COMMIT
    assert data_batch.producer_id == marker.producer_id >= 0
    with Log.open(copy_partition(partition, tmp_path)) as log:
        assert [record.offset for record in log.records()] == [0, 1]
        assert log.log_end_offset == 2
