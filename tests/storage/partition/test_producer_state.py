"""Tests for `storage.partition.producer_state` and its use by `Log` (Kafka's ProducerStateManagerTest and the
idempotence
cases of UnifiedLogTest): duplicate and out-of-order detection checked against a dict-and-list oracle, state
that survives clean and crashed restarts, rolls and truncation, and the `.snapshot` format pinned against
files a real Kafka broker wrote."""

from __future__ import annotations

import copy
import random
import shutil
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import crc32c
import pytest
from kafka.record.memory_records import MemoryRecords

from storage import file_names
from storage.clock import MockClock
from storage.config.log_config import LogConfig
from storage.errors import (
    CorruptCheckpointError,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    StorageError,
)
from storage.partition.log import Log, LogAppendInfo
from storage.partition.producer_append import AppendOrigin, PendingAppend
from storage.partition.producer_state import (
    NUM_BATCHES_TO_RETAIN,
    PRODUCER_ID_EXPIRATION_MS,
    BatchMetadata,
    ProducerEntry,
    ProducerStateManager,
    read_snapshot,
)
from storage.records.record_batch import RecordBatchBuilder
from tests.conftest import KAFKA_SAMPLES_DIR, skip_or_fail
from tests.storage.builders import START_MS, crash, segment_bases

MAX_SEQUENCE = 2**31 - 1


def replay(manager: ProducerStateManager, producer_id: int, epoch: int, batch: BatchMetadata) -> None:
    """Records a non-transactional batch read from a log, as loading does."""
    pending = PendingAppend(manager, AppendOrigin.REPLICATION)
    pending.append_data(producer_id, epoch, batch, is_transactional=False)
    pending.commit(None)


# Three ~90-byte single-record batches fill a segment, so a few dozen appends roll several times.
SEGMENT_BYTES = 300
NIKHIL_DEMO = Path("NikhilDighe9975__kafka_setup@8639fa41/kafka-logs/nikhilDemo-0")


# --- batches and the oracle ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """One client batch: producer id, epoch, base sequence and the values of its records (pid -1: no producer)."""

    pid: int
    epoch: int
    seq: int
    values: tuple[bytes, ...]

    @property
    def last_seq(self) -> int:
        return (self.seq + len(self.values) - 1) % 2**31

    def encode(self) -> bytes:
        builder = RecordBatchBuilder(producer_id=self.pid, producer_epoch=self.epoch, base_sequence=self.seq)
        for delta, value in enumerate(self.values):
            builder.append(b"k", value, timestamp=START_MS + delta)
        return builder.build()


def spec(pid: int, epoch: int, seq: int, count: int = 1, tag: str = "") -> Spec:
    return Spec(pid, epoch, seq, tuple(f"{pid}/{epoch}/{seq + i}{tag}".encode() for i in range(count)))


def plain(tag: str, count: int = 1) -> Spec:
    """A batch without a producer id (idempotence off)."""
    return Spec(-1, -1, -1, tuple(f"plain/{tag}/{i}".encode() for i in range(count)))


def encode(specs: Sequence[Spec]) -> bytes:
    return b"".join(one.encode() for one in specs)


@dataclass
class OracleProducer:
    epoch: int
    batches: list[tuple[int, int, int, int]] = field(default_factory=list)  # first/last sequence, first/last offset


class Oracle:
    """An idempotent partition as a dict of producers and a list of values; batches of one append are judged one
    after the other, and an append that fails anywhere changes nothing."""

    def __init__(self) -> None:
        self.producers: dict[int, OracleProducer] = {}
        self.values: list[bytes] = []

    def append(self, specs: Sequence[Spec]) -> list[tuple[int, int]] | type[StorageError]:
        producers = copy.deepcopy(self.producers)
        values = list(self.values)
        offsets = []
        for one in specs:
            entry = producers.get(one.pid)
            if entry is not None:
                if entry.epoch == one.epoch:
                    repeated = [b for b in entry.batches if (b[0], b[1]) == (one.seq, one.last_seq)]
                    if repeated:
                        offsets.append(repeated[0][2:])
                        continue
                    if one.seq != (entry.batches[-1][1] + 1) % 2**31:
                        return OutOfOrderSequenceError
                elif one.epoch < entry.epoch:
                    return InvalidProducerEpochError
                elif one.seq != 0:
                    return OutOfOrderSequenceError
            first = len(values)
            values.extend(one.values)
            if one.pid >= 0:
                if entry is None or entry.epoch != one.epoch:
                    entry = producers[one.pid] = OracleProducer(one.epoch)
                # Kafka keeps the last 5 batches of a producer (the most an idempotent producer has in flight).
                entry.batches = [*entry.batches, (one.seq, one.last_seq, first, len(values) - 1)][-5:]
            offsets.append((first, len(values) - 1))
        self.producers, self.values = producers, values
        return offsets


def disk(directory: Path) -> dict[str, bytes]:
    """Bytes of every `.log` and `.snapshot` file (the indexes are preallocated, so their length says nothing)."""
    return {
        path.name: path.read_bytes()
        for path in sorted(directory.iterdir())
        if path.suffix in (file_names.LOG_SUFFIX, file_names.PRODUCER_SNAPSHOT_SUFFIX)
    }


def check(log: Log, oracle: Oracle, specs: Sequence[Spec]) -> LogAppendInfo | None:
    """Appends `specs` and compares the answer, the log end and the files with the oracle's."""
    expected = oracle.append(specs)
    before = disk(log.directory)
    end = log.log_end_offset
    if isinstance(expected, type):
        with pytest.raises(expected):
            log.append(encode(specs))
        assert log.log_end_offset == end
        assert disk(log.directory) == before, "a refused append wrote something"
        return None
    info = log.append(encode(specs))
    assert list(info.batch_offsets) == expected
    assert log.log_end_offset == len(oracle.values)
    written = len(oracle.values) > end
    assert info.duplicate == (not written)
    if not written:
        assert disk(log.directory) == before, "a duplicate was written"
    return info


def values(log: Log) -> list[bytes | None]:
    return [record.value for record in log.records()]


class OpenLog(Protocol):
    def __call__(self, *, segment_bytes: int = SEGMENT_BYTES) -> Log: ...


@pytest.fixture
def open_log(logs: list[Log], log_dir: Path, clock: MockClock) -> OpenLog:
    """Opens (again) the log in `log_dir` on the test's clock; every log is closed at teardown."""

    def opener(*, segment_bytes: int = SEGMENT_BYTES) -> Log:
        log = Log.open(log_dir, LogConfig(segment_bytes=segment_bytes, segment_index_bytes=1024), clock=clock)
        logs.append(log)
        return log

    return opener


# --- sequences ---------------------------------------------------------------------------------------------


def test_in_order_batches_of_interleaved_producers_get_consecutive_offsets(open_log: OpenLog) -> None:
    log, oracle = open_log(), Oracle()
    sequences = {1: 0, 2: 0, 3: 0}
    for round_ in range(6):
        for pid in (1, 2, 3):
            count = 1 + (round_ + pid) % 3
            check(log, oracle, [spec(pid, 0, sequences[pid], count)])
            sequences[pid] += count
        check(log, oracle, [plain(str(round_))])
    assert values(log) == oracle.values
    assert log.num_segments > 3


@pytest.mark.parametrize("back", range(1, NUM_BATCHES_TO_RETAIN + 1))
def test_retry_of_one_of_the_last_five_batches_returns_its_offsets_and_writes_nothing(
    open_log: OpenLog, back: int
) -> None:
    log, oracle = open_log(), Oracle()
    sent = []
    seq = 0
    for i in range(8):
        sent.append(spec(7, 0, seq, 1 + i % 3))
        seq += len(sent[-1].values)
        check(log, oracle, [sent[-1], plain(str(i))])
    info = check(log, oracle, [sent[-back]])
    assert info is not None and info.duplicate and info.record_count == 0
    assert values(log) == oracle.values
    check(log, oracle, [spec(7, 0, seq)])


@pytest.mark.parametrize("timestamp_type", ["CreateTime", "LogAppendTime"])
def test_a_followers_producer_state_answers_a_retry_as_the_leader_did(
    tmp_path: Path, clock: MockClock, logs: list[Log], timestamp_type: str
) -> None:
    """A follower that copied the leader's batches (`append_as_follower`) and then leads answers a retry of each of
    the producer's last 5 batches as Kafka does: the original first and last offsets, and the original batch's max
    timestamp as log append time (its stamped append time on a LogAppendTime topic), with nothing written."""
    config = LogConfig(segment_bytes=SEGMENT_BYTES, segment_index_bytes=1024, message_timestamp_type=timestamp_type)
    leader = Log.open(tmp_path / "leader" / "t-0", config, clock=clock)
    follower = Log.open(tmp_path / "follower" / "t-0", config, clock=clock)
    logs.extend([leader, follower])
    sent: list[tuple[Spec, LogAppendInfo]] = []
    seq = 0
    for index in range(8):
        clock.sleep(10)
        batch = spec(7, 0, seq, 1 + index % 3)
        seq += len(batch.values)
        sent.append((batch, leader.append(batch.encode())))
    while follower.log_end_offset < leader.log_end_offset:
        # One segment per read: the follower fetches as a replica does.
        follower.append_as_follower(bytes(leader.read(follower.log_end_offset, 1 << 20, isolation="log_end").records))
    follower.become_leader()
    end = follower.log_end_offset
    for batch, original in sent[-NUM_BATCHES_TO_RETAIN:]:
        expected_time = original.max_timestamp if timestamp_type == "CreateTime" else original.log_append_time
        for log in (leader, follower):
            retried = log.append(batch.encode())
            assert retried.duplicate and retried.record_count == 0
            assert (retried.first_offset, retried.last_offset, retried.log_append_time) == (
                original.first_offset,
                original.last_offset,
                expected_time,
            )
    assert follower.log_end_offset == end
    with pytest.raises(OutOfOrderSequenceError):
        follower.append(sent[-NUM_BATCHES_TO_RETAIN - 1][0].encode())


def test_retry_of_the_sixth_last_batch_is_out_of_order(open_log: OpenLog) -> None:
    log, oracle = open_log(), Oracle()
    for seq in range(NUM_BATCHES_TO_RETAIN + 1):
        check(log, oracle, [spec(7, 0, seq)])
    with pytest.raises(OutOfOrderSequenceError):
        log.append(spec(7, 0, 0).encode())
    check(log, oracle, [spec(7, 0, 0)])


@pytest.mark.parametrize("seq", [5, 7, 2, MAX_SEQUENCE])
def test_sequence_gap_or_step_back_raises_and_writes_nothing(open_log: OpenLog, seq: int) -> None:
    log, oracle = open_log(), Oracle()
    check(log, oracle, [spec(7, 0, 0, 4)])
    check(log, oracle, [spec(7, 0, seq)])
    assert log.log_end_offset == 4
    check(log, oracle, [spec(7, 0, 4)])


def test_sequence_wraps_from_int32_max_to_zero(open_log: OpenLog) -> None:
    log, oracle = open_log(), Oracle()
    check(log, oracle, [spec(7, 0, MAX_SEQUENCE - 2, 2)])
    wrapping = spec(7, 0, MAX_SEQUENCE, 3)
    assert wrapping.last_seq == 1
    check(log, oracle, [wrapping])
    info = check(log, oracle, [wrapping])
    assert info is not None and info.duplicate
    check(log, oracle, [spec(7, 0, 0)])
    check(log, oracle, [spec(7, 0, 2)])
    assert log.log_end_offset == 6


def test_single_record_at_int32_max_is_followed_by_zero(open_log: OpenLog) -> None:
    log, oracle = open_log(), Oracle()
    check(log, oracle, [spec(7, 0, MAX_SEQUENCE)])
    with pytest.raises(OutOfOrderSequenceError):
        log.append(spec(7, 0, 1).encode())
    check(log, oracle, [spec(7, 0, 0)])


def test_new_epoch_must_start_at_zero_and_old_epoch_is_fenced(open_log: OpenLog) -> None:
    log, oracle = open_log(), Oracle()
    first = spec(7, 0, 0, 2)
    check(log, oracle, [first])
    check(log, oracle, [spec(7, 1, 2)])
    with pytest.raises(OutOfOrderSequenceError):
        log.append(spec(7, 1, 2).encode())
    check(log, oracle, [spec(7, 1, 0)])
    with pytest.raises(InvalidProducerEpochError):
        log.append(spec(7, 0, 2).encode())
    with pytest.raises(InvalidProducerEpochError):
        log.append(first.encode())
    check(log, oracle, [spec(7, 0, 2)])
    check(log, oracle, [spec(7, 1, 1)])
    check(log, oracle, [spec(7, 5, 0)])
    assert values(log) == oracle.values


def test_unknown_producer_may_start_at_any_sequence(open_log: OpenLog) -> None:
    log, oracle = open_log(), Oracle()
    check(log, oracle, [spec(7, 3, 1000)])
    check(log, oracle, [spec(8, 0, 0)])
    check(log, oracle, [spec(7, 3, 1001)])
    assert log.log_end_offset == 3


def test_batches_without_producer_are_never_deduplicated(open_log: OpenLog) -> None:
    log, oracle = open_log(), Oracle()
    same = plain("x", 2)
    for _ in range(3):
        info = check(log, oracle, [same])
        assert info is not None and not info.duplicate
    assert values(log) == list(same.values) * 3


def test_multi_batch_append_skips_duplicates_and_reports_offsets_per_batch(open_log: OpenLog) -> None:
    log, oracle = open_log(segment_bytes=10_000), Oracle()
    check(log, oracle, [spec(1, 0, 0, 2), spec(2, 0, 0), spec(1, 0, 2, 3)])
    info = check(log, oracle, [spec(1, 0, 0, 2), spec(1, 0, 5), plain("a"), spec(2, 0, 0), spec(2, 0, 1, 2)])
    assert info is not None
    assert info.batch_offsets == ((0, 1), (6, 6), (7, 7), (2, 2), (8, 9))
    assert not info.duplicate
    assert (info.first_offset, info.last_offset, info.batch_count, info.record_count) == (6, 9, 3, 4)
    assert values(log) == oracle.values
    info = check(log, oracle, [spec(2, 0, 1, 2), spec(1, 0, 2, 3)])
    assert info is not None and info.duplicate and info.batch_offsets == ((8, 9), (3, 5))


@pytest.mark.parametrize(
    ("second", "error"),
    [
        (spec(1, 0, 5), OutOfOrderSequenceError),
        (spec(1, 0, 2), OutOfOrderSequenceError),
        (spec(2, 5, 9), OutOfOrderSequenceError),
        (spec(1, 1, 4), OutOfOrderSequenceError),
        (spec(2, 4, 8), InvalidProducerEpochError),
    ],
    ids=["gap", "inside-an-earlier-batch", "other-producer-gap", "new-epoch-not-at-zero", "other-producer-old-epoch"],
)
def test_append_whose_second_batch_is_out_of_order_writes_nothing(
    open_log: OpenLog, second: Spec, error: type[StorageError]
) -> None:
    log, oracle = open_log(segment_bytes=10_000), Oracle()
    check(log, oracle, [spec(1, 0, 0, 3), spec(2, 5, 7)])
    assert oracle.append([spec(1, 0, 3), second]) is error
    check(log, oracle, [spec(1, 0, 3), second])
    assert log.log_end_offset == 4
    check(log, oracle, [spec(1, 0, 3)])


def test_epoch_change_inside_one_append_is_checked(open_log: OpenLog) -> None:
    log, oracle = open_log(segment_bytes=10_000), Oracle()
    check(log, oracle, [spec(1, 0, 0)])
    check(log, oracle, [spec(1, 0, 1), spec(1, 1, 2)])
    check(log, oracle, [spec(1, 1, 0), spec(1, 0, 1)])
    check(log, oracle, [spec(1, 1, 0), spec(1, 1, 1)])
    assert oracle.producers[1].epoch == 1
    assert values(log) == oracle.values


def test_batch_repeated_inside_one_append_is_a_duplicate_of_its_first_copy(open_log: OpenLog) -> None:
    log, oracle = open_log(segment_bytes=10_000), Oracle()
    info = check(log, oracle, [spec(1, 0, 0, 2), plain("a"), spec(1, 0, 0, 2)])
    assert info is not None and info.batch_offsets == ((0, 1), (2, 2), (0, 1))
    assert log.log_end_offset == 3
    check(log, oracle, [spec(1, 0, 2), spec(1, 0, 3), spec(1, 0, 2)])
    assert values(log) == oracle.values


@pytest.mark.parametrize("seed", range(3))
def test_random_appends_match_the_oracle(open_log: OpenLog, seed: int) -> None:
    rng = random.Random(seed)
    log, oracle = open_log(segment_bytes=2 * SEGMENT_BYTES), Oracle()
    sent: dict[int, list[Spec]] = {pid: [] for pid in (1, 2, 3)}
    epochs = dict.fromkeys(sent, 0)
    for step in range(160):
        specs = []
        for _ in range(1 if rng.random() < 0.7 else rng.randint(2, 3)):
            pid = rng.choice([1, 2, 3, -1])
            if pid < 0:
                specs.append(plain(f"{step}"))
                continue
            history, choice = sent[pid], rng.random()
            entry = oracle.producers.get(pid)
            next_seq = 0 if entry is None or entry.epoch != epochs[pid] else (entry.batches[-1][1] + 1) % 2**31
            if choice < 0.5 or not history:
                one = spec(pid, epochs[pid], next_seq, rng.randint(1, 3), tag=f"@{step}")
            elif choice < 0.75:
                one = history[-rng.randint(1, min(len(history), NUM_BATCHES_TO_RETAIN + 2))]
            elif choice < 0.85:
                one = spec(pid, epochs[pid], (next_seq + rng.randint(1, 3)) % 2**31)
            elif choice < 0.93:
                epochs[pid] += 1
                one = spec(pid, epochs[pid], rng.choice([0, 0, 1]))
            else:
                one = spec(pid, max(epochs[pid] - 1, 0), next_seq)
            specs.append(one)
        if check(log, oracle, specs) is not None:
            for one in specs:
                if one.pid >= 0 and one not in sent[one.pid]:
                    sent[one.pid].append(one)
    assert values(log) == oracle.values


# --- durability ---------------------------------------------------------------------------------------------


def fill(log: Log, oracle: Oracle, rounds: int, pids: Sequence[int] = (1, 2)) -> dict[int, Spec]:
    """`rounds` batches per producer plus a plain batch per round; returns each producer's last batch."""
    last: dict[int, Spec] = {}
    for _ in range(rounds):
        for pid in pids:
            entry = oracle.producers.get(pid)
            seq = 0 if entry is None else entry.batches[-1][1] + 1
            last[pid] = spec(pid, 0, seq, 1 + seq % 2)
            check(log, oracle, [last[pid]])
        check(log, oracle, [plain(str(len(oracle.values)))])
    return last


def expect_known(log: Log, oracle: Oracle, last: dict[int, Spec]) -> dict[int, Spec]:
    """Each producer's last batch is a duplicate with its original offsets, and its next batch is accepted;
    returns those next batches."""
    for one in last.values():
        info = check(log, oracle, [one])
        assert info is not None and info.duplicate
    following = {pid: spec(pid, one.epoch, one.last_seq + 1) for pid, one in last.items()}
    for one in following.values():
        info = check(log, oracle, [one])
        assert info is not None and not info.duplicate
    assert values(log) == oracle.values
    return following


def snapshot_offsets(directory: Path) -> list[int]:
    return ProducerStateManager(directory).snapshot_offsets()


@pytest.mark.parametrize("rounds", [2, 12])
def test_last_batch_is_a_duplicate_after_clean_reopen(open_log: OpenLog, log_dir: Path, rounds: int) -> None:
    log, oracle = open_log(), Oracle()
    last = fill(log, oracle, rounds)
    assert (log.num_segments > 2) == (rounds > 2)
    log.close()
    assert snapshot_offsets(log_dir)[-1] == len(oracle.values), "close snapshots the state at the log end"
    expect_known(open_log(), oracle, last)


@pytest.mark.parametrize("rounds", [2, 12])
def test_last_batch_is_a_duplicate_after_crash(open_log: OpenLog, log_dir: Path, rounds: int) -> None:
    log, oracle = open_log(), Oracle()
    last = fill(log, oracle, rounds)
    assert (log.num_segments > 2) == (rounds > 2)
    assert log.active_segment.size > 0, "the crash must happen mid-segment"
    crash(log)
    reopened = open_log()
    assert reopened.log_end_offset == len(oracle.values)
    expect_known(reopened, oracle, last)


def test_state_rebuilt_after_crash_survives_a_clean_close(open_log: OpenLog, log_dir: Path) -> None:
    log, oracle = open_log(segment_bytes=10_000), Oracle()
    last = fill(log, oracle, 3)
    crash(log)
    assert snapshot_offsets(log_dir) == []
    open_log(segment_bytes=10_000).close()
    expect_known(open_log(segment_bytes=10_000), oracle, last)


def test_older_batches_are_forgotten_after_reopen_as_kafka_keeps_only_the_last(open_log: OpenLog) -> None:
    log, oracle = open_log(), Oracle()
    check(log, oracle, [spec(1, 0, 0)])
    check(log, oracle, [spec(1, 0, 1)])
    log.close()
    reopened = open_log()
    with pytest.raises(OutOfOrderSequenceError):
        reopened.append(spec(1, 0, 0).encode())
    assert check(reopened, oracle, [spec(1, 0, 1)]) is not None


def test_snapshots_are_written_at_roll_offsets_with_the_state_as_of_there(open_log: OpenLog, log_dir: Path) -> None:
    log, oracle = open_log(), Oracle()
    history = []
    for i in range(8):
        for pid in (1, 2):
            entry = oracle.producers.get(pid)
            one = spec(pid, 0, 0 if entry is None else entry.batches[-1][1] + 1, 1 + i % 2)
            offsets = check(log, oracle, [one])
            assert offsets is not None
            history.append((pid, one.last_seq, offsets.batch_offsets[0]))
    log.roll()
    bases = segment_bases(log_dir)
    assert len(bases) > 3
    assert snapshot_offsets(log_dir) == bases[1:]
    for offset in bases[1:]:
        expected = {}
        for pid, last_seq, (first, last) in history:
            if last < offset:
                expected[pid] = (0, last_seq, first, last)
        state = read_snapshot(file_names.producer_snapshot_file(log_dir, offset))
        got = {
            pid: (e.epoch, e.batches[-1].last_sequence, e.batches[-1].first_offset, e.batches[-1].last_offset)
            for pid, e in state.items()
        }
        assert got == expected


def test_truncation_removes_later_snapshots_and_a_truncated_batch_is_new_again(
    open_log: OpenLog, log_dir: Path
) -> None:
    log, oracle = open_log(), Oracle()
    sent = []
    for seq in range(20):
        sent.append(spec(1, 0, seq))
        check(log, oracle, [sent[-1]])
    target = 9
    assert max(snapshot_offsets(log_dir)) > target
    log.truncate_to(target)
    assert all(offset <= target for offset in snapshot_offsets(log_dir))
    assert snapshot_offsets(log_dir), "snapshots at or below the target are kept"
    truncated = Oracle()
    for one in sent[:target]:
        truncated.append([one])
    info = check(log, truncated, [sent[target - 1]])
    assert info is not None and info.duplicate
    with pytest.raises(OutOfOrderSequenceError):
        log.append(sent[target + 1].encode())
    info = check(log, truncated, [sent[target]])
    assert info is not None and info.batch_offsets == ((target, target),) and not info.duplicate
    crash(log)
    reopened = open_log()
    check(reopened, truncated, [sent[target]])
    check(reopened, truncated, [sent[target + 1]])
    assert values(reopened) == truncated.values


def test_truncate_fully_forgets_every_producer(open_log: OpenLog, log_dir: Path) -> None:
    log, oracle = open_log(), Oracle()
    fill(log, oracle, 6)
    log.truncate_fully_and_start_at(100)
    assert snapshot_offsets(log_dir) == []
    assert log.append(spec(1, 0, 77).encode()).batch_offsets == ((100, 100),)
    log.close()
    reopened = open_log()
    assert reopened.append(spec(1, 0, 77).encode()).duplicate


def test_torn_tail_drops_the_snapshot_above_the_recovered_end(open_log: OpenLog, log_dir: Path) -> None:
    log, oracle = open_log(segment_bytes=10_000), Oracle()
    for seq in range(3):
        check(log, oracle, [spec(1, 0, seq)])
    log.close()
    active = file_names.log_file(log_dir, segment_bases(log_dir)[-1])
    data = active.read_bytes()
    active.write_bytes(data[: len(data) - 5])
    (log_dir / file_names.CLEAN_SHUTDOWN_FILE).unlink()
    reopened = open_log(segment_bytes=10_000)
    assert reopened.log_end_offset == 2
    assert snapshot_offsets(log_dir) == []
    assert reopened.append(spec(1, 0, 1).encode()).duplicate
    assert reopened.append(spec(1, 0, 2).encode()).batch_offsets == ((2, 2),)


# --- snapshot format -------------------------------------------------------------------------------------


def kafka_snapshot(entries: Sequence[tuple[int, ...]], version: int = 1) -> bytes:
    """A snapshot built field by field from Kafka's schema (not by the module under test)."""
    body = struct.pack(">i", len(entries)) + b"".join(struct.pack(">qhiqiqiq", *entry) for entry in entries)
    return struct.pack(">hI", version, crc32c.crc32c(body)) + body


def test_snapshot_round_trip(tmp_path: Path) -> None:
    manager = ProducerStateManager(tmp_path)
    replay(manager, 5, 3, BatchMetadata(10, 14, 100, 104, 1_000))
    replay(manager, 5, 3, BatchMetadata(15, 15, 110, 110, 2_000))
    replay(manager, 2**40, 0, BatchMetadata(MAX_SEQUENCE - 1, 2, 7, 11, -1))
    replay(manager, 9, 32767, BatchMetadata(0, 0, 200, 200, 3_000))
    path = manager.write_snapshot(300)
    assert path == file_names.producer_snapshot_file(tmp_path, 300)
    # Kafka's HashMap order: 2**40 hashes to bucket 0 (its high and low words XOR to 256), 5 and 9 to their own.
    assert path.read_bytes() == kafka_snapshot(
        [
            (2**40, 0, 2, 11, 4, -1, -1, -1),
            (5, 3, 15, 110, 0, 2_000, -1, -1),
            (9, 32767, 0, 200, 0, 3_000, -1, -1),
        ]
    )
    loaded = read_snapshot(path)
    assert list(loaded) == [2**40, 5, 9]
    assert {pid: (e.epoch, list(e.batches)) for pid, e in loaded.items()} == {
        5: (3, [BatchMetadata(15, 15, 110, 110, 2_000)]),
        2**40: (0, [BatchMetadata(MAX_SEQUENCE - 1, 2, 7, 11, -1)]),
        9: (32767, [BatchMetadata(0, 0, 200, 200, 3_000)]),
    }


def test_empty_snapshot_is_ten_bytes(tmp_path: Path) -> None:
    path = ProducerStateManager(tmp_path).write_snapshot(0)
    assert (
        path.read_bytes()
        == kafka_snapshot([])
        == bytes.fromhex("0001") + struct.pack(">I", crc32c.crc32c(b"\0" * 4)) + b"\0" * 4
    )
    assert read_snapshot(path) == {}


# A "now" before any timestamp of the fixtures: nothing they hold is expired at it.
NEVER_EXPIRED_MS = 0


def rewrite(path: Path, tmp_path: Path) -> bytes:
    """Loads a snapshot through the manager and writes it back in a fresh folder."""
    directory = tmp_path / f"copy-{path.parent.name}-{path.name}"
    directory.mkdir()
    shutil.copy(path, directory / path.name)
    manager = ProducerStateManager(directory)
    (offset,) = manager.snapshot_offsets()
    assert manager.load_latest_snapshot(offset, now_ms=NEVER_EXPIRED_MS) == offset
    (directory / path.name).unlink()
    return manager.write_snapshot(offset).read_bytes()


FIXTURE_SNAPSHOTS = sorted(KAFKA_SAMPLES_DIR.rglob("*.snapshot"))


@pytest.mark.parametrize("path", FIXTURE_SNAPSHOTS, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_kafka_snapshot_fixture_is_rewritten_byte_for_byte(path: Path, tmp_path: Path) -> None:
    assert rewrite(path, tmp_path) == path.read_bytes()


def test_every_shared_kafka_snapshot_is_rewritten_byte_for_byte(kafka_samples_dir: Path, tmp_path: Path) -> None:
    paths = sorted(kafka_samples_dir.rglob("*.snapshot"))
    sizes = {path.stat().st_size for path in paths}
    if not paths:
        skip_or_fail("no producer snapshots among the Kafka samples")
    assert {10, 56, 102} <= sizes
    for path in paths:
        assert rewrite(path, tmp_path) == path.read_bytes(), path


def test_real_snapshots_decode_to_the_producers_in_their_logs(fixtures_dir: Path) -> None:
    nikhil = read_snapshot(fixtures_dir / "kafka" / NIKHIL_DEMO / "00000000000000000003.snapshot")
    assert {pid: (e.epoch, list(e.batches)) for pid, e in nikhil.items()} == {
        10000: (0, [BatchMetadata(1, 1, 2, 2, 1722857166514)]),
        7000: (0, [BatchMetadata(0, 0, 0, 0, 1722856846589)]),
    }
    ksql = fixtures_dir / "kafka" / "ItumelengMogase__Real-Time-Data-Pipeline-for-Patient-Admissions@2f57540f"
    command = read_snapshot(
        ksql / "kafka-data" / "_confluent-ksql-default__command_topic-0" / "00000000000000000002.snapshot"
    )
    assert [(pid, e.epoch, e.coordinator_epoch, e.current_txn_first_offset) for pid, e in command.items()] == [
        (0, 0, 0, -1)
    ]


def corruptions() -> Iterator[tuple[str, bytes]]:
    good = kafka_snapshot([(5, 0, 3, 40, 0, 1, -1, -1), (6, 1, 9, 41, 2, 2, -1, -1)])
    flipped = bytearray(good)
    flipped[30] ^= 0x01
    yield "bad-crc", bytes(flipped)
    body = struct.pack(">i", 3) + good[10:]
    yield "count-too-high", struct.pack(">hI", 1, crc32c.crc32c(body)) + body
    body = struct.pack(">i", -1) + good[10:]
    yield "count-negative", struct.pack(">hI", 1, crc32c.crc32c(body)) + body
    body = good[6:] + b"\0"
    yield "trailing-byte", struct.pack(">hI", 1, crc32c.crc32c(body)) + body
    body = good[6:-46]
    yield "truncated-entry-crc-fixed", struct.pack(">hI", 1, crc32c.crc32c(body)) + body
    yield "truncated", good[:-3]
    yield "header-only", good[:7]
    yield "empty", b""
    yield "version-0", b"\0\0" + good[2:]
    yield "version-2", b"\0\2" + good[2:]


@pytest.mark.parametrize(("name", "data"), list(corruptions()), ids=[name for name, _ in corruptions()])
def test_corrupt_snapshot_is_refused(tmp_path: Path, name: str, data: bytes) -> None:
    path = tmp_path / "00000000000000000042.snapshot"
    path.write_bytes(data)
    with pytest.raises(CorruptCheckpointError) as raised:
        read_snapshot(path)
    assert raised.value.path == str(path)


def test_missing_snapshot_is_a_corrupt_checkpoint_error(tmp_path: Path) -> None:
    with pytest.raises(CorruptCheckpointError):
        read_snapshot(tmp_path / "00000000000000000042.snapshot")


@pytest.mark.parametrize(("name", "data"), list(corruptions()), ids=[name for name, _ in corruptions()])
@pytest.mark.parametrize("rolled", [False, True])
def test_open_ignores_a_corrupt_snapshot_and_replays_the_log(
    open_log: OpenLog, log_dir: Path, name: str, data: bytes, rolled: bool
) -> None:
    log, oracle = open_log(segment_bytes=SEGMENT_BYTES if rolled else 10_000), Oracle()
    last = fill(log, oracle, 5)
    log.close()
    newest = snapshot_offsets(log_dir)[-1]
    assert newest == len(oracle.values)
    file_names.producer_snapshot_file(log_dir, newest).write_bytes(data)
    reopened = open_log(segment_bytes=SEGMENT_BYTES if rolled else 10_000)
    assert newest not in snapshot_offsets(log_dir), "the unreadable snapshot is deleted, as Kafka does"
    last = expect_known(reopened, oracle, last)
    reopened.close()
    assert snapshot_offsets(log_dir)[-1] == len(oracle.values)
    expect_known(open_log(segment_bytes=SEGMENT_BYTES if rolled else 10_000), oracle, last)


# --- a real Kafka partition ---------------------------------------------------------------------------------


@pytest.fixture
def nikhil_demo(fixtures_dir: Path, tmp_path: Path) -> Path:
    """nikhilDemo-0 (three idempotent batches, snapshot at its log end 3) in a log dir with Kafka's clean marker."""
    source = fixtures_dir / "kafka" / NIKHIL_DEMO
    target = tmp_path / "kafka-logs" / source.name
    shutil.copytree(source, target)
    shutil.copy(source.parent / file_names.CLEAN_SHUTDOWN_FILE, target.parent / file_names.CLEAN_SHUTDOWN_FILE)
    return target


def kafka_client_batch(pid: int, seq: int) -> bytes:
    builder = RecordBatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=seq)
    builder.append(None, b"retry", timestamp=1722857166514)
    return builder.build()


@pytest.mark.parametrize("clean", [True, False])
def test_kafka_partition_opens_with_its_producers_known(nikhil_demo: Path, logs: list[Log], clean: bool) -> None:
    if not clean:
        (nikhil_demo.parent / file_names.CLEAN_SHUTDOWN_FILE).unlink()
    clock = MockClock(1722857200000)
    log = Log.open(nikhil_demo, LogConfig(segment_index_bytes=1024), clock=clock)
    logs.append(log)
    assert log.log_end_offset == 3
    info = log.append(kafka_client_batch(10000, 1))
    assert info.duplicate and info.batch_offsets == ((2, 2),)
    info = log.append(kafka_client_batch(7000, 0))
    assert info.duplicate and info.batch_offsets == ((0, 0),)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(kafka_client_batch(10000, 3))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(kafka_client_batch(10000, 0))
    assert log.append(kafka_client_batch(7000, 1)).batch_offsets == ((3, 3),)


def test_clean_open_and_close_of_a_kafka_partition_keeps_its_snapshot(nikhil_demo: Path) -> None:
    snapshot = nikhil_demo / "00000000000000000003.snapshot"
    before = snapshot.read_bytes()
    clock = MockClock(1722857200000)
    log = Log.open(nikhil_demo, LogConfig(segment_index_bytes=1024), clock=clock)
    assert log.append(kafka_client_batch(10000, 1)).duplicate
    log.close()
    assert sorted(path.name for path in nikhil_demo.glob("*.snapshot")) == [snapshot.name]
    assert snapshot.read_bytes() == before


def test_producer_entry_keeps_at_most_five_batches() -> None:
    entry = ProducerEntry(1, 0)
    for seq in range(8):
        entry.batches.append(BatchMetadata(seq, seq, seq, seq, 0))
    assert [batch.first_sequence for batch in entry.batches] == [3, 4, 5, 6, 7]
    assert entry.last_sequence == 7


def kafka_python_producers(log_file: Path) -> dict[int, tuple[int, BatchMetadata]]:
    """Each producer's epoch and last batch in a `.log` file, as kafka-python's independent reader sees them."""
    producers = {}
    records = MemoryRecords(log_file.read_bytes())
    while records.has_next():
        batch = records.next_batch()
        if batch is None:
            break
        if batch.producer_id >= 0:
            last_offset = batch.base_offset + batch.last_offset_delta
            last_sequence = (batch.base_sequence + batch.last_offset_delta) % 2**31
            producers[batch.producer_id] = (
                batch.producer_epoch,
                BatchMetadata(batch.base_sequence, last_sequence, batch.base_offset, last_offset, batch.max_timestamp),
            )
    return producers


def test_unclean_kafka_partition_is_replayed_and_snapshotted_at_its_end(fixtures_dir: Path, tmp_path: Path) -> None:
    """lsx1-0 was left without a clean marker or snapshot: its 13 idempotent producers are rebuilt from the log,
    and, as Kafka does after such a replay, a snapshot of them is written at the log end (here on close)."""
    source = fixtures_dir / "kafka" / "BiggerBrain__kafka@0af19244" / "data" / "lsx1-0"
    directory = tmp_path / source.name
    shutil.copytree(source, directory)
    expected = kafka_python_producers(directory / "00000000000000000000.log")
    assert len(expected) == 13
    clock = MockClock(1721035500000)
    log = Log.open(directory, LogConfig(segment_index_bytes=1024), clock=clock)
    info = log.append(kafka_client_batch(12, 0))
    assert info.duplicate and info.batch_offsets == ((13, 13),)
    log.close()
    snapshot = file_names.producer_snapshot_file(directory, 14)
    state = read_snapshot(snapshot)
    assert {pid: (entry.epoch, entry.batches[-1]) for pid, entry in state.items()} == expected
    reopened = Log.open(directory, LogConfig(segment_index_bytes=1024), clock=clock)
    info = reopened.append(kafka_client_batch(3, 0))
    assert info.duplicate and info.batch_offsets == ((4, 4),)
    before = snapshot.read_bytes()
    reopened.close()
    assert snapshot.read_bytes() == before


# --- expiration (producer.id.expiration.ms) ----------------------------------------------------------------


def test_a_producer_expires_once_its_last_batch_is_as_old_as_the_expiration(tmp_path: Path) -> None:
    manager = ProducerStateManager(tmp_path, producer_id_expiration_ms=1_000)
    replay(manager, 1, 0, BatchMetadata(0, 0, 0, 0, 5_000))
    replay(manager, 2, 0, BatchMetadata(0, 0, 1, 1, 5_000))
    replay(manager, 2, 0, BatchMetadata(1, 1, 2, 2, 5_500))
    manager.changed_since_snapshot = False
    assert manager.remove_expired_producers(5_999) == 0
    assert not manager.changed_since_snapshot
    assert manager.remove_expired_producers(6_000) == 1, "idle for exactly the expiration: expired (Kafka's >=)"
    assert list(manager.producers) == [2], "judged by its last batch, not its first"
    assert manager.changed_since_snapshot, "the next snapshot must not hold the expired producer"
    assert manager.remove_expired_producers(6_500) == 1
    assert manager.producers == {}


def test_a_producer_with_an_open_transaction_never_expires(tmp_path: Path) -> None:
    manager = ProducerStateManager(tmp_path, producer_id_expiration_ms=1_000)
    replay(manager, 1, 0, BatchMetadata(0, 0, 0, 0, 0))
    manager.producers[1].current_txn_first_offset = 0
    assert manager.remove_expired_producers(10**9) == 0
    assert list(manager.producers) == [1]


def test_producers_expired_at_load_time_are_dropped_from_the_snapshot(tmp_path: Path) -> None:
    (tmp_path / file_names.producer_snapshot_file(tmp_path, 10).name).write_bytes(
        kafka_snapshot([(1, 0, 4, 7, 0, 1_000, -1, -1), (2, 0, 9, 9, 0, 2_000, -1, -1), (3, 0, 0, 8, 0, 0, 5, 8)])
    )
    manager = ProducerStateManager(tmp_path, producer_id_expiration_ms=1_000)
    assert manager.load_latest_snapshot(10, now_ms=2_000) == 10
    assert list(manager.producers) == [2, 3], "1 idle for 1 s is expired; 3 has a transaction open"


def test_the_default_expiration_is_kafkas_one_day(tmp_path: Path) -> None:
    assert PRODUCER_ID_EXPIRATION_MS == 86_400_000
    assert ProducerStateManager(tmp_path).producer_id_expiration_ms == 86_400_000


def test_an_expired_producer_may_start_again_from_any_sequence(
    open_log: OpenLog, clock: MockClock, log_dir: Path
) -> None:
    log, oracle = open_log(), Oracle()
    for seq in range(3):
        check(log, oracle, [spec(7, 0, seq)])
    with pytest.raises(OutOfOrderSequenceError):
        log.append(encode([spec(7, 0, 40)]))
    clock.sleep(PRODUCER_ID_EXPIRATION_MS - 1)
    assert log.remove_expired_producers() == 0, "the batches are stamped START_MS: not yet a day old"
    clock.sleep(1)
    assert log.remove_expired_producers() == 1
    assert log.producer_count == 0
    oracle.producers.clear()
    check(log, oracle, [spec(7, 0, 40)])
    assert values(log) == oracle.values


def test_reopening_a_log_forgets_producers_expired_while_it_was_closed(open_log: OpenLog, clock: MockClock) -> None:
    log, oracle = open_log(), Oracle()
    fill(log, oracle, 4)
    known = log.producer_count
    assert known > 0
    log.close()
    again = open_log()
    assert again.producer_count == known, "reopened at once: every producer is kept"
    again.close()
    clock.sleep(PRODUCER_ID_EXPIRATION_MS + 1_000)
    reopened = open_log()
    assert reopened.producer_count == 0
    reopened.append(encode([spec(1, 0, 1234)]))
    assert reopened.producer_count == 1


# --- snapshots of deleted records ---------------------------------------------------------------------------


def test_retention_deletes_the_snapshots_of_the_segments_it_deletes(open_log: OpenLog, log_dir: Path) -> None:
    log, oracle = open_log(), Oracle()
    fill(log, oracle, 6)
    bases = segment_bases(log_dir)
    assert snapshot_offsets(log_dir) == bases[1:], "one snapshot per roll, at the new segment's base"
    log.delete_records(bases[3])
    log.delete_old_segments()
    assert segment_bases(log_dir) == bases[3:]
    assert snapshot_offsets(log_dir) == bases[3:], "deleted with their segments, before the next roll"


def test_delete_records_deletes_snapshots_below_the_new_log_start(open_log: OpenLog, log_dir: Path) -> None:
    log, oracle = open_log(), Oracle()
    fill(log, oracle, 6)
    bases = segment_bases(log_dir)
    log.delete_records(bases[2] + 1)
    assert snapshot_offsets(log_dir) == bases[3:], "snapshots at or above the log start are kept"


def test_a_clean_close_snapshots_the_state_when_the_log_start_passed_every_snapshot(
    open_log: OpenLog, log_dir: Path
) -> None:
    log, oracle = open_log(), Oracle()
    last = fill(log, oracle, 6)
    for round_ in range(3):
        check(log, oracle, [plain(f"after-{round_}")])
    assert snapshot_offsets(log_dir)[-1] < log.log_end_offset, "plain batches since the last roll's snapshot"
    log.delete_records(log.high_watermark)
    assert snapshot_offsets(log_dir) == []
    log.close()
    reopened = open_log()
    assert reopened.producer_count == len(last), "the producers outlive the records that named them"
    expect_known(reopened, oracle, last)
