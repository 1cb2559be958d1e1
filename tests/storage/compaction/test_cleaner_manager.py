"""CleanerManager: choosing the filthiest log, the cleaner checkpoint, failures confined to one log.

Partitions are `LocalPartition`s, the in-process handles the log manager registers; the broker on Ray registers
its partition actors behind the same protocol."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from storage import file_names
from storage.clock import SYSTEM_CLOCK, MockClock
from storage.compaction.clean_result import CleanedLog
from storage.compaction.cleaner_manager import CleanerManager
from storage.compaction.cleaner_threads import CleanerThread, LocalCleanerThread
from storage.compaction.log_snapshot import LogSnapshot
from storage.config.cleaner_config import CleanerConfig
from storage.errors import KafkaStorageError
from storage.files.checkpoint_file import OffsetCheckpointFile
from storage.logdir.partition_handles import LocalPartition
from storage.partition.log import Log
from storage.pending import Pending
from storage.records.record_batch import ControlRecordType
from tests.storage.compaction.test_cleaner import (
    Writer,
    assert_logs_decode_with_kafka,
    expected_records,
    open_log,
    records_of,
    small_cleaner,
)

BACKOFF_MS = 1000


@pytest.fixture(autouse=True)
def _logs_stay_valid_kafka_bytes(tmp_path: Path) -> Iterator[None]:
    yield
    assert_logs_decode_with_kafka(tmp_path)


def small_threads(clock: MockClock, config: CleanerConfig) -> list[CleanerThread]:
    """`log.cleaner.threads` in-process threads, each with a small cleaner."""
    return [LocalCleanerThread(small_cleaner(clock)) for _ in range(config.log_cleaner_threads)]


def make_manager(tmp_path: Path, clock: MockClock, **overrides: object) -> CleanerManager:
    properties = {"log.cleaner.backoff.ms": BACKOFF_MS}
    properties.update({key.replace("_", "."): value for key, value in overrides.items()})
    config = CleanerConfig.from_properties(properties)
    return CleanerManager([tmp_path], clock, config, threads=small_threads(clock, config))


def register(manager: CleanerManager, topic: str, log: Log) -> None:
    """Registers `log` as partition 0 of `topic`, in process."""
    manager.register(topic, 0, LocalPartition(log), log.directory.parent)


def fill(log: Log, clock: MockClock, *, keys: int, rounds: int) -> Writer:
    """`rounds` values for each of `keys` keys, one record per batch, then a roll."""
    writer = Writer(log, clock)
    for round_number in range(rounds):
        for key in range(keys):
            writer.append([(b"key-%d" % key, b"value-%d" % round_number)])
    log.roll()
    return writer


def checkpoint_at(tmp_path: Path, offsets: dict[tuple[str, int], int]) -> None:
    OffsetCheckpointFile(tmp_path / file_names.CLEANER_OFFSET_CHECKPOINT).write(offsets)


def test_grab_filthiest_log_picks_the_highest_dirty_ratio(tmp_path: Path, clock: MockClock) -> None:
    logs = {name: open_log(tmp_path, clock, name=f"{name}-0", min_cleanable_dirty_ratio=0.1) for name in "abc"}
    for log in logs.values():
        fill(log, clock, keys=10, rounds=8)
    sealed = {name: log.log_segments()[:-1] for name, log in logs.items()}
    assert len(sealed["a"]) >= 5
    first_dirty_segment = {"a": 4, "b": 1, "c": 3}
    checkpoint_at(tmp_path, {(name, 0): sealed[name][index].base_offset for name, index in first_dirty_segment.items()})
    manager = make_manager(tmp_path, clock)
    for name, log in logs.items():
        register(manager, name, log)

    candidates = manager.cleanable_logs()

    assert [ltc.topic for ltc in candidates] == ["b", "c", "a"]
    for ltc in candidates:
        sizes = [segment.size for segment in sealed[ltc.topic]]
        index = first_dirty_segment[ltc.topic]
        assert (ltc.clean_bytes, ltc.cleanable_bytes) == (sum(sizes[:index]), sum(sizes[index:]))
        assert ltc.dirty_ratio == pytest.approx(sum(sizes[index:]) / sum(sizes))
        assert ltc.first_uncleanable_offset == logs[ltc.topic].active_segment.base_offset
    grabbed = manager.grab_filthiest_log()
    assert grabbed is not None and grabbed.topic == "b"
    assert [ltc.topic for ltc in manager.cleanable_logs()] == ["c", "a"]
    manager.done_cleaning(("b", 0), grabbed.first_uncleanable_offset)
    assert [ltc.topic for ltc in manager.cleanable_logs()] == ["c", "a"]


def test_run_once_cleans_records_progress_and_then_has_nothing_to_do(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock)
    writer = fill(log, clock, keys=5, rounds=6)
    manager = make_manager(tmp_path, clock)
    register(manager, "topic", log)

    (result,) = manager.run_once()

    assert result is not None and result.end_offset == log.active_segment.base_offset
    assert records_of(log) == expected_records(writer.history, result.end_offset)
    assert OffsetCheckpointFile(tmp_path / file_names.CLEANER_OFFSET_CHECKPOINT).read() == {
        ("topic", 0): result.end_offset
    }
    assert (tmp_path / file_names.CLEANER_OFFSET_CHECKPOINT).read_text() == f"0\n1\ntopic 0 {result.end_offset}\n"
    assert manager.run_once() == []


def test_no_pass_starts_on_a_paused_partition(tmp_path: Path, clock: MockClock) -> None:
    """A partition its owner pauses (moving to another log dir, as Kafka's `abortAndPauseCleaning` pauses it) is
    neither chosen nor cleaned, however dirty, while the others are; once resumed it is cleaned."""
    paused = {("a", 0)}
    logs = {name: open_log(tmp_path, clock, name=f"{name}-0") for name in "ab"}
    for log in logs.values():
        fill(log, clock, keys=5, rounds=6)
    config = CleanerConfig.from_properties({"log.cleaner.backoff.ms": BACKOFF_MS})
    threads = small_threads(clock, config)
    manager = CleanerManager([tmp_path], clock, config, threads=threads, paused=paused.__contains__)
    for name, log in logs.items():
        register(manager, name, log)
    assert [ltc.topic for ltc in manager.cleanable_logs()] == ["b"]
    assert len(manager.run_once()) == 1 and set(manager.cleaner_offsets()) == {("b", 0)}
    assert manager.cleanable_logs() == [] and manager.run_once() == []
    paused.clear()
    assert len(manager.run_once()) == 1 and set(manager.cleaner_offsets()) == {("a", 0), ("b", 0)}


def test_progress_survives_a_restart_of_the_manager(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock)
    fill(log, clock, keys=5, rounds=6)
    first = make_manager(tmp_path, clock)
    register(first, "topic", log)
    (result,) = first.run_once()
    assert result is not None

    second = make_manager(tmp_path, clock)
    register(second, "topic", log)
    assert second.cleaner_offsets() == {("topic", 0): result.end_offset}
    assert second.cleanable_logs() == []


def test_logs_at_or_below_the_min_ratio_wait(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock, min_cleanable_dirty_ratio=0.9)
    fill(log, clock, keys=5, rounds=6)
    checkpoint_at(tmp_path, {("topic", 0): log.log_segments()[2].base_offset})
    manager = make_manager(tmp_path, clock)
    register(manager, "topic", log)
    assert manager.cleanable_logs() == []
    assert manager.run_once() == []


def test_max_compaction_lag_forces_cleaning_below_the_ratio(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock, min_cleanable_dirty_ratio=0.9, max_compaction_lag_ms=10_000)
    fill(log, clock, keys=5, rounds=6)
    first_dirty = log.log_segments()[-3].base_offset
    checkpoint_at(tmp_path, {("topic", 0): first_dirty})
    manager = make_manager(tmp_path, clock)
    register(manager, "topic", log)
    assert manager.cleanable_logs() == []

    clock.sleep(10_001)
    (ltc,) = manager.cleanable_logs()
    assert ltc.needs_compaction_now and ltc.max_compaction_delay_ms == 1
    assert ltc.dirty_ratio < 0.9
    (result,) = manager.run_once()
    assert result is not None and result.first_dirty_offset == first_dirty


def test_min_compaction_lag_keeps_the_log_out_until_old_enough(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock, min_compaction_lag_ms=5000)
    fill(log, clock, keys=5, rounds=6)
    manager = make_manager(tmp_path, clock)
    register(manager, "topic", log)
    assert manager.cleanable_logs() == []
    clock.sleep(5001)
    assert [ltc.topic for ltc in manager.cleanable_logs()] == ["topic"]


@pytest.mark.parametrize("where", ["beyond_log_end", "below_log_start"])
def test_checkpoint_out_of_range_is_reset_to_the_log_start(tmp_path: Path, clock: MockClock, where: str) -> None:
    log = open_log(tmp_path, clock, cleanup_policy="compact,delete", retention_ms=-1)
    fill(log, clock, keys=5, rounds=6)
    if where == "beyond_log_end":
        checkpoint_at(tmp_path, {("topic", 0): log.log_end_offset + 100})
    else:
        checkpoint_at(tmp_path, {("topic", 0): 2})
        log.delete_records(7)
    manager = make_manager(tmp_path, clock)
    register(manager, "topic", log)

    grabbed = manager.grab_filthiest_log()

    assert grabbed is not None and grabbed.checkpoint_reset
    assert grabbed.first_dirty_offset == log.log_start_offset
    assert manager.cleaner_offsets() == {("topic", 0): log.log_start_offset}


def test_every_out_of_range_checkpoint_is_rewritten_not_only_the_chosen_logs(
    tmp_path: Path, clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    dirty = open_log(tmp_path, clock, name="dirty-0")
    fill(dirty, clock, keys=5, rounds=6)
    # Data only in the active segment: nothing cleanable, so this log is never the one chosen.
    stale = open_log(tmp_path, clock, name="stale-0")
    Writer(stale, clock).append([(b"key", b"value")])
    checkpoint_at(tmp_path, {("stale", 0): stale.log_end_offset + 100})
    manager = make_manager(tmp_path, clock)
    register(manager, "dirty", dirty)
    register(manager, "stale", stale)

    (result,) = manager.run_once()

    assert result.end_offset == dirty.active_segment.base_offset
    assert OffsetCheckpointFile(tmp_path / file_names.CLEANER_OFFSET_CHECKPOINT).read() == {
        ("dirty", 0): result.end_offset,
        ("stale", 0): stale.log_start_offset,
    }
    caplog.clear()
    assert manager.run_once() == []
    assert "outside" not in caplog.text, "a corrected checkpoint is not warned about again"


def test_an_out_of_range_checkpoint_is_rewritten_even_when_no_log_is_cleaned(tmp_path: Path, clock: MockClock) -> None:
    stale = open_log(tmp_path, clock, name="stale-0")
    Writer(stale, clock).append([(b"key", b"value")])
    checkpoint_at(tmp_path, {("stale", 0): stale.log_end_offset + 100})
    manager = make_manager(tmp_path, clock)
    register(manager, "stale", stale)

    assert manager.run_once() == []

    assert OffsetCheckpointFile(tmp_path / file_names.CLEANER_OFFSET_CHECKPOINT).read() == {("stale", 0): 0}
    assert manager.cleaner_offsets() == {("stale", 0): 0}


def test_failing_log_is_marked_uncleanable_alone_and_retried_after_backoff(tmp_path: Path, clock: MockClock) -> None:
    broken = open_log(tmp_path, clock, name="broken-0")
    fill(broken, clock, keys=3, rounds=12)
    healthy = open_log(tmp_path, clock, name="healthy-0")
    healthy_writer = fill(healthy, clock, keys=5, rounds=4)
    segment = broken.log_segments()[1]
    with open(segment.log.path, "r+b") as stream:
        stream.seek(70)
        original = stream.read(1)
        stream.seek(70)
        stream.write(bytes([original[0] ^ 0xFF]))
    manager = make_manager(tmp_path, clock)
    register(manager, "broken", broken)
    register(manager, "healthy", healthy)

    assert manager.run_once() == []
    failure = manager.uncleanable()[("broken", 0)]
    assert "CorruptRecordError" in failure.reason and "CRC" in failure.reason
    assert (failure.failures, failure.retry_at_ms - failure.failed_at_ms) == (1, BACKOFF_MS)

    (result,) = manager.run_once()
    assert result is not None
    assert records_of(healthy) == expected_records(healthy_writer.history, result.end_offset)
    assert list(manager.uncleanable()) == [("broken", 0)]

    clock.sleep(BACKOFF_MS)
    assert manager.run_once() == []
    again = manager.uncleanable()[("broken", 0)]
    assert (again.failures, again.retry_at_ms - again.failed_at_ms) == (2, 2 * BACKOFF_MS)

    with open(segment.log.path, "r+b") as stream:
        stream.seek(70)
        stream.write(original)
    clock.sleep(2 * BACKOFF_MS)
    (result,) = manager.run_once()
    assert result is not None and result.end_offset == broken.active_segment.base_offset
    assert manager.uncleanable() == {}


class RetentionFirst:
    """A cleaner thread that the owner's retention beats: it deletes the log's first segment before the pass
    opens it, as a partition may while a cleaner actor picks its snapshot up."""

    def __init__(self, thread: CleanerThread, log: Log) -> None:
        self.thread, self.log = thread, log

    def clean(self, snapshot: LogSnapshot) -> Pending[CleanedLog]:
        self.log.delete_records(self.log.log_segments()[1].base_offset)
        self.log.delete_old_segments()
        return self.thread.clean(snapshot)


def test_a_pass_whose_log_changed_under_it_is_aborted_not_failed(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock, cleanup_policy="compact,delete", retention_ms=-1)
    writer = fill(log, clock, keys=5, rounds=6)
    config = CleanerConfig(log_cleaner_backoff_ms=BACKOFF_MS)
    manager = CleanerManager([tmp_path], clock, config, threads=[RetentionFirst(*small_threads(clock, config), log)])
    register(manager, "topic", log)

    (result,) = manager.run_once()

    assert result.aborted and manager.uncleanable() == {}
    manager = make_manager(tmp_path, clock)
    register(manager, "topic", log)
    (result,) = manager.run_once()
    assert not result.aborted
    survivors = [written for written in writer.history if written.offset >= log.log_start_offset]
    assert records_of(log) == expected_records(survivors, result.end_offset)


def test_backoff_doubling_is_capped(tmp_path: Path, clock: MockClock) -> None:
    manager = make_manager(tmp_path, clock)
    for _ in range(10):
        record = manager.mark_failed(("t", 0), "boom")
    assert record.failures == 10
    assert record.retry_at_ms - record.failed_at_ms == 64 * BACKOFF_MS


def test_open_transaction_keeps_the_log_out(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=4096)
    writer = Writer(log, clock)
    writer.append([(b"k", b"1")], producer_id=4, producer_epoch=0, base_sequence=0, transactional=True)
    for index in range(20):
        writer.append([(b"k", b"v%d" % index)])
    log.roll()
    manager = make_manager(tmp_path, clock)
    register(manager, "topic", log)
    assert manager.cleanable_logs() == []

    writer.marker(ControlRecordType.COMMIT, producer_id=4)
    log.roll()
    assert [ltc.topic for ltc in manager.cleanable_logs()] == ["topic"]


def test_retention_runs_for_compacted_logs_after_a_pass(tmp_path: Path) -> None:
    # Emptied segments are judged by their file's mtime, which is wall-clock time: start the clock there.
    wall_clock = MockClock(SYSTEM_CLOCK.milliseconds())
    log = open_log(tmp_path, wall_clock, cleanup_policy="compact,delete", retention_ms=60_000)
    fill(log, wall_clock, keys=5, rounds=6)
    manager = make_manager(tmp_path, wall_clock)
    register(manager, "topic", log)
    assert manager.run_once() != []
    assert log.log_start_offset == 0

    wall_clock.sleep(70_000)
    manager.run_once()

    assert log.num_segments == 1
    assert log.log_start_offset == log.log_end_offset


def test_disabled_cleaner_does_nothing(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock)
    fill(log, clock, keys=5, rounds=6)
    manager = make_manager(tmp_path, clock, log_cleaner_enable=False)
    register(manager, "topic", log)
    assert manager.run_once() == []
    assert len(records_of(log)) == 30


def test_unregister_forgets_the_partition(tmp_path: Path, clock: MockClock) -> None:
    log = open_log(tmp_path, clock)
    fill(log, clock, keys=5, rounds=6)
    manager = make_manager(tmp_path, clock)
    register(manager, "topic", log)
    assert manager.run_once() != []
    manager.unregister("topic", 0)
    manager.checkpoint()
    assert OffsetCheckpointFile(tmp_path / file_names.CLEANER_OFFSET_CHECKPOINT).read() == {}
    assert manager.cleanable_logs() == []


def test_unknown_partitions_in_the_checkpoint_are_kept(tmp_path: Path, clock: MockClock) -> None:
    checkpoint_at(tmp_path, {("later", 3): 42})
    manager = make_manager(tmp_path, clock)
    manager.checkpoint()
    assert OffsetCheckpointFile(tmp_path / file_names.CLEANER_OFFSET_CHECKPOINT).read() == {("later", 3): 42}


def test_corrupt_checkpoint_means_clean_from_the_start(tmp_path: Path, clock: MockClock) -> None:
    (tmp_path / file_names.CLEANER_OFFSET_CHECKPOINT).write_text("7\n1\nx 0 5\n")
    manager = make_manager(tmp_path, clock)
    assert manager.cleaner_offsets() == {}


def test_each_log_dir_keeps_its_own_checkpoint(tmp_path: Path, clock: MockClock) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    for directory in dirs:
        directory.mkdir()
    OffsetCheckpointFile(dirs[1] / file_names.CLEANER_OFFSET_CHECKPOINT).write({("later", 3): 42})
    config = CleanerConfig(log_cleaner_backoff_ms=BACKOFF_MS)
    manager = CleanerManager(dirs, clock, config, threads=small_threads(clock, config))
    log = open_log(dirs[0], clock)
    fill(log, clock, keys=5, rounds=6)
    register(manager, "topic", log)
    (result,) = manager.run_once()
    assert OffsetCheckpointFile(dirs[0] / file_names.CLEANER_OFFSET_CHECKPOINT).read() == {
        ("topic", 0): result.end_offset
    }
    assert OffsetCheckpointFile(dirs[1] / file_names.CLEANER_OFFSET_CHECKPOINT).read() == {("later", 3): 42}
    manager.handle_log_dir_failure(dirs[0])
    assert manager.cleaner_offsets() == {("later", 3): 42}
    assert manager.cleanable_logs() == []


def test_a_checkpoint_that_cannot_be_written_goes_to_the_failure_callback(tmp_path: Path, clock: MockClock) -> None:
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir()
    bad.write_bytes(b"a file where the log dir should be")
    failed: list[Path] = []
    manager = CleanerManager([good, bad], clock, on_checkpoint_failure=lambda directory, _: failed.append(directory))
    manager.checkpoint()
    assert failed == [bad]
    assert OffsetCheckpointFile(good / file_names.CLEANER_OFFSET_CHECKPOINT).read() == {}
    with pytest.raises(KafkaStorageError):
        CleanerManager([bad], clock).checkpoint()
