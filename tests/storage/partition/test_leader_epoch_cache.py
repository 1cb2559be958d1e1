"""The leader-epoch cache and the log's use of it, against Kafka's `LeaderEpochFileCache` rules and the bytes of
`leader-epoch-checkpoint` files Kafka brokers wrote (`tests/fixtures/kafka`)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from storage import file_names
from storage.errors import InvalidRequestError
from storage.files.checkpoint_file import EpochEntry, LeaderEpochCheckpointFile
from storage.partition.leader_epoch_cache import LeaderEpochCache
from storage.partition.log import Log
from storage.partition.log_read import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from storage.records.file_records import TimestampAndOffset
from storage.records.layout import NO_TIMESTAMP, PARTITION_LEADER_EPOCH_OFFSET
from tests.storage.builders import START_MS, Rec, batch_bytes, batches_in, crash, open_log
from tests.storage.conftest import MockClock

KAFKA_SAMPLES = Path(__file__).resolve().parents[2] / "fixtures" / "kafka"
# A checkpoint Kafka wrote for a partition whose leader changed eight times (entries (0, 0) ... (20, 15)).
KAFKA_EPOCHS = (
    KAFKA_SAMPLES
    / "ItumelengMogase__Real-Time-Data-Pipeline-for-Patient-Admissions@2f57540f"
    / "kafka-data"
    / "__consumer_offsets-29"
    / file_names.LEADER_EPOCH_CHECKPOINT
)


def cache_of(tmp_path: Path, *entries: tuple[int, int]) -> LeaderEpochCache:
    cache, _ = LeaderEpochCache.load(tmp_path)
    for epoch, start in entries:
        cache.assign(epoch, start)
    return cache


def on_disk(tmp_path: Path) -> list[tuple[int, int]]:
    return [tuple(entry) for entry in LeaderEpochCheckpointFile(tmp_path / file_names.LEADER_EPOCH_CHECKPOINT).read()]


def kafka_text(entries: list[tuple[int, int]]) -> bytes:
    """Kafka's checkpoint format: version 0, the count, one `epoch startOffset` line each."""
    return f"0\n{len(entries)}\n".encode() + b"".join(f"{epoch} {start}\n".encode() for epoch, start in entries)


# --- the cache's rules -------------------------------------------------------------------------------------


def test_assign_keeps_the_first_offset_of_an_epoch_and_writes_kafkas_format(tmp_path: Path) -> None:
    cache = cache_of(tmp_path, (0, 0), (0, 5), (2, 7), (2, 9))
    assert [tuple(entry) for entry in cache.entries] == [(0, 0), (2, 7)]
    assert (tmp_path / file_names.LEADER_EPOCH_CHECKPOINT).read_bytes() == kafka_text([(0, 0), (2, 7)])
    assert cache.latest_epoch == 2


def test_assign_of_an_older_epoch_or_an_earlier_start_removes_the_entries_it_contradicts(tmp_path: Path) -> None:
    cache = cache_of(tmp_path, (0, 0), (2, 7), (4, 10))
    cache.assign(3, 8)
    assert [tuple(entry) for entry in cache.entries] == [(0, 0), (2, 7), (3, 8)]
    cache.assign(3, 5)
    assert [tuple(entry) for entry in cache.entries] == [(0, 0), (3, 5)]
    assert on_disk(tmp_path) == [(0, 0), (3, 5)]


@pytest.mark.parametrize(
    ("requested", "answer"),
    [
        (-1, (-1, -1)),  # undefined
        (6, (6, 42)),  # the latest epoch ends at the log end
        (4, (4, 30)),  # an older one where the next starts
        (5, (4, 30)),  # an epoch this log never saw: the largest below it, ending where the next starts
        (1, (0, 10)),
        (7, (-1, -1)),  # newer than every epoch
    ],
)
def test_end_offset_for_follows_kafkas_end_offset_for(tmp_path: Path, requested: int, answer: tuple[int, int]) -> None:
    cache = cache_of(tmp_path, (0, 0), (2, 10), (4, 20), (6, 30))
    assert cache.end_offset_for(requested, 42) == answer


def test_end_offset_for_an_epoch_older_than_every_entry_is_the_first_start(tmp_path: Path) -> None:
    cache = cache_of(tmp_path, (3, 15), (5, 40))
    assert cache.end_offset_for(1, 50) == (1, 15)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert LeaderEpochCache.load(empty)[0].end_offset_for(0, 50) == (-1, -1)


def test_truncate_from_end_drops_the_entries_at_or_after_the_new_end(tmp_path: Path) -> None:
    cache = cache_of(tmp_path, (0, 0), (2, 10), (4, 20))
    cache.truncate_from_end(20)
    assert on_disk(tmp_path) == [(0, 0), (2, 10)]
    cache.truncate_from_end(11)
    assert on_disk(tmp_path) == [(0, 0), (2, 10)]


def test_truncate_from_start_moves_the_last_entry_before_it_to_the_new_start(tmp_path: Path) -> None:
    cache = cache_of(tmp_path, (0, 0), (2, 10), (4, 20))
    cache.truncate_from_start(15)
    assert on_disk(tmp_path) == [(2, 15), (4, 20)]
    cache.truncate_from_start(20)
    assert on_disk(tmp_path) == [(4, 20)]
    cache.clear()
    assert (tmp_path / file_names.LEADER_EPOCH_CHECKPOINT).read_bytes() == kafka_text([])


def test_negative_entries_are_refused(tmp_path: Path) -> None:
    cache = cache_of(tmp_path, (0, 0))
    with pytest.raises(InvalidRequestError):
        cache.assign(-1, 5)
    with pytest.raises(InvalidRequestError):
        cache.assign(1, -5)
    assert on_disk(tmp_path) == [(0, 0)]


def test_kafkas_checkpoint_loads_and_is_written_back_byte_for_byte(tmp_path: Path) -> None:
    original = KAFKA_EPOCHS.read_bytes()
    (tmp_path / file_names.LEADER_EPOCH_CHECKPOINT).write_bytes(original)
    cache, _ = LeaderEpochCache.load(tmp_path)
    lines = original.decode().splitlines()[2:]
    assert [tuple(entry) for entry in cache.entries] == [tuple(map(int, line.split())) for line in lines]
    last = cache.entries[-1]
    cache.truncate_from_end(last.start_offset)
    cache.assign(last.epoch, last.start_offset)
    assert (tmp_path / file_names.LEADER_EPOCH_CHECKPOINT).read_bytes() == original


# --- the log -----------------------------------------------------------------------------------------------


def records(tag: str, count: int = 3) -> list[Rec]:
    return [Rec(f"k{index}".encode(), f"{tag}-{index}".encode()) for index in range(count)]


def stored_epochs(log: Log) -> list[tuple[int, int]]:
    """(base offset, partition leader epoch) of every batch in the log, read back from its files."""
    data = b"".join(segment.log.path.read_bytes() for segment in log.log_segments())
    return [(batch.base_offset, batch.partition_leader_epoch) for batch in batches_in(data)]


def with_epoch(batch: bytes, epoch: int) -> bytes:
    """A follower's batch as its leader stamped it (the epoch field is outside the CRC)."""
    out = bytearray(batch)
    struct.pack_into(">i", out, PARTITION_LEADER_EPOCH_OFFSET, epoch)
    return bytes(out)


def test_a_new_log_starts_epoch_0_at_its_first_append_as_kafka_writes_it(tmp_path: Path, clock: MockClock) -> None:
    with open_log(tmp_path / "t-0", clock) as log:
        assert log.epoch_entries() == ()
        log.append(batch_bytes(records("a")))
        log.append(batch_bytes(records("b")))
        assert stored_epochs(log) == [(0, 0), (3, 0)]
    # The file a Kafka broker leaves for a partition led by its first leader only.
    assert (tmp_path / "t-0" / file_names.LEADER_EPOCH_CHECKPOINT).read_bytes() == b"0\n1\n0 0\n"


def test_appends_carry_the_epoch_the_checkpoint_names(tmp_path: Path, clock: MockClock) -> None:
    folder = tmp_path / "t-0"
    with open_log(folder, clock) as log:
        log.append_as_follower(with_epoch(batch_bytes(records("a"), base_offset=0), 5))
        log.append(batch_bytes(records("b")))
        assert log.leader_epoch == 5
        assert stored_epochs(log) == [(0, 5), (3, 5)]
    with open_log(folder, clock) as log:
        log.append(batch_bytes(records("c")))
        assert stored_epochs(log)[-1] == (6, 5)
        assert log.epoch_entries() == (EpochEntry(5, 0),)


def test_list_offsets_answer_the_leader_epoch_of_what_they_find(tmp_path: Path, clock: MockClock) -> None:
    """Kafka's `UnifiedLog.fetchOffsetByTimestamp`: a record found by time (or the largest time) answers its batch's
    epoch, LATEST the newest epoch, EARLIEST the oldest one if it covers the log start, else none (a log written in
    part before leader epochs existed has none for its first records)."""
    with open_log(tmp_path / "t-0", clock) as log:
        for base, epoch in [(0, 0), (3, 2), (6, 5)]:
            timed = [Rec(b"k", f"e{epoch}".encode(), START_MS + base + index) for index in range(3)]
            log.append_as_follower(with_epoch(batch_bytes(timed, base_offset=base), epoch))
        found = [log.fetch_offset_by_timestamp(START_MS + offset) for offset in (1, 4, 8)]
        assert [(answer.offset, answer.leader_epoch) for answer in found if answer is not None] == [
            (1, 0),
            (4, 2),
            (8, 5),
        ]
        largest = log.fetch_offset_by_timestamp(MAX_TIMESTAMP)
        assert largest is not None and (largest.offset, largest.leader_epoch) == (8, 5)
        assert log.fetch_offset_by_timestamp(LATEST_TIMESTAMP) == TimestampAndOffset(NO_TIMESTAMP, 9, 5)
        assert log.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP) == TimestampAndOffset(NO_TIMESTAMP, 0, 0)
        log.delete_records(4)
        assert log.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP) == TimestampAndOffset(NO_TIMESTAMP, 4, 2)
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    assert cache_of(legacy, (3, 10)).earliest_covering(7) is None
    assert cache_of(legacy, (3, 10)).earliest_covering(10) == 3


def test_follower_appends_truncation_and_log_start_keep_the_entries_in_step(tmp_path: Path, clock: MockClock) -> None:
    folder = tmp_path / "t-0"
    with open_log(folder, clock) as log:
        for base, epoch in [(0, 0), (3, 0), (6, 2), (9, 3), (12, 3)]:
            log.append_as_follower(with_epoch(batch_bytes(records(f"e{epoch}"), base_offset=base), epoch))
        assert log.epoch_entries() == (EpochEntry(0, 0), EpochEntry(2, 6), EpochEntry(3, 9))
        assert log.end_offset_for_epoch(0) == (0, 6)
        assert log.end_offset_for_epoch(1) == (0, 6)
        assert log.end_offset_for_epoch(3) == (3, 15)
        log.truncate_to(9)
        assert log.epoch_entries() == (EpochEntry(0, 0), EpochEntry(2, 6))
        assert log.end_offset_for_epoch(2) == (2, 9)
        log.delete_records(7)
        assert log.epoch_entries() == (EpochEntry(2, 7),)
        assert on_disk(folder) == [(2, 7)]
        log.truncate_fully_and_start_at(100)
        assert log.epoch_entries() == ()
        assert on_disk(folder) == []


def test_recovery_learns_the_epochs_a_crash_kept_out_of_the_checkpoint(tmp_path: Path, clock: MockClock) -> None:
    folder = tmp_path / "t-0"
    log = open_log(folder, clock)
    for base, epoch in [(0, 1), (3, 1), (6, 4)]:
        log.append_as_follower(with_epoch(batch_bytes(records(f"e{epoch}"), base_offset=base), epoch))
    crash(log)
    # The checkpoint as it was before epoch 4's first batch.
    LeaderEpochCheckpointFile(folder / file_names.LEADER_EPOCH_CHECKPOINT).write([(1, 0)])
    with open_log(folder, clock) as reopened:
        assert reopened.epoch_entries() == (EpochEntry(1, 0), EpochEntry(4, 6))
        assert on_disk(folder) == [(1, 0), (4, 6)]


@pytest.mark.parametrize("damage", [b"0\n3\n0 0\n", b"\xb0garbage", b"2\n1\n0 0\n", b"0\n1\n  0\n"])
def test_a_damaged_checkpoint_is_rebuilt_from_the_epochs_of_the_batches(
    tmp_path: Path, clock: MockClock, damage: bytes
) -> None:
    folder = tmp_path / "t-0"
    with open_log(folder, clock) as log:
        for base, epoch in [(0, 1), (3, 1), (6, 4)]:
            log.append_as_follower(with_epoch(batch_bytes(records(f"e{epoch}"), base_offset=base), epoch))
    (folder / file_names.LEADER_EPOCH_CHECKPOINT).write_bytes(damage)
    with open_log(folder, clock) as reopened:
        assert reopened.epoch_entries() == (EpochEntry(1, 0), EpochEntry(4, 6))
        assert reopened.log_end_offset == 9
    assert (folder / file_names.LEADER_EPOCH_CHECKPOINT).read_bytes() == kafka_text([(1, 0), (4, 6)])
