"""`LocalLogView` against its oracle, the owner's `Log.read` (and, at read_committed, the owner's located aborted
transactions): a consumer that learned one position reads every later fetch from the view, each answer's bytes and
offsets the log's, across segment rolls, with `max_bytes` below, at and above the batch sizes; and wherever the view
cannot vouch for an answer it answers None (the caller asks the owner) rather than stale or wrong bytes: offsets
outside the log after DeleteRecords and retention, a segment swapped for a compacted copy, a follower, a truncation
and a new leader epoch, a closed log, a high watermark whose position is unpublished, damaged bytes."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage import file_names
from storage.clock import MockClock
from storage.config.log_config import LogConfig
from storage.partition.file_slices import FileSlice, locate_file_slices, located_aborted_transactions
from storage.partition.high_watermark_file import HighWatermarkFile
from storage.partition.local_log_view import MAX_POSITIONS, LocalLogView, LocalRead
from storage.partition.log import Log
from storage.partition.log_read import LATEST_TIMESTAMP
from storage.records.record_batch import ControlRecordType, RecordBatchBuilder
from tests.storage.builders import START_MS, open_log, simple_batch

SIZES = (1, 100, 300, 1000, 10**6)


class Published:
    """A log, its high-watermark file as its owner keeps it, and a view of it as a reader on its machine opens it."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.hw_file = HighWatermarkFile.create(log.directory)
        self.epoch = log.leader_epoch
        self.leading = True
        self.publish()
        view = LocalLogView.open(str(self.hw_file.path))
        assert view is not None
        self.view = view

    def publish(self) -> None:
        self.hw_file.publish(self.log, self.epoch, leading=self.leading)

    def learn(self, offset: int, max_bytes: int = 1000, isolation: str = "high_watermark") -> None:
        """What the listener does after asking the owner: the epoch first, then the owner's located answer."""
        epoch = self.view.leader_epoch()
        assert epoch is not None
        located = locate_file_slices(self.log, offset, max_bytes, isolation=isolation)
        assert located
        self.view.learn(offset, located[0], epoch)

    def close(self) -> None:
        self.view.close()
        self.hw_file.close()
        self.log.close()


@pytest.fixture
def published(log_dir: Path, clock: MockClock) -> Iterator[Published]:
    log = open_log(log_dir, clock, segment_bytes=600, file_delete_delay_ms=0)
    fill(log, 30)
    assert log.num_segments > 4
    state = Published(log)
    yield state
    state.close()


def fill(log: Log, batches: int, tag: int = 0) -> None:
    for index in range(batches):
        log.append(simple_batch(1 + index % 3, value_size=20 + 3 * (index % 10), tag=tag + index))


def slice_bytes(found: FileSlice | None) -> bytes:
    if found is None:
        return b""
    with open(found.path, "rb") as file:
        status = os.fstat(file.fileno())
        assert (status.st_dev, status.st_ino) == (found.device, found.inode)
        return os.pread(file.fileno(), found.length, found.position)


def assert_is_the_owners_answer(
    log: Log, answer: LocalRead | None, offset: int, max_bytes: int, isolation: str = "high_watermark"
) -> None:
    assert answer is not None, (offset, max_bytes)
    read = log.read(offset, max_bytes, isolation=isolation)
    assert slice_bytes(answer.file_slice) == read.records, (offset, max_bytes)
    offsets = (answer.high_watermark, answer.log_start_offset, answer.log_end_offset, answer.last_stable_offset)
    assert offsets == (log.high_watermark, log.log_start_offset, log.log_end_offset, log.last_stable_offset)
    if isolation == "txn_committed":
        located = locate_file_slices(log, offset, max_bytes, isolation=isolation)
        assert answer.aborted_transactions == located_aborted_transactions(log, offset, located)
    else:
        assert answer.aborted_transactions is None


def consume(state: Published, offset: int, max_bytes: int, isolation: str = "high_watermark") -> int:
    """Reads from `offset` as a consumer does (each fetch from the offset after the last whole batch of the one
    before) until an empty answer, checking each against the owner's; returns where it stopped."""
    while True:
        answer = state.view.read(offset, max_bytes, isolation)
        assert_is_the_owners_answer(state.log, answer, offset, max_bytes, isolation)
        assert answer is not None
        if answer.file_slice is None:
            return offset
        assert answer.next_offset > offset
        offset = answer.next_offset


@pytest.mark.parametrize("max_bytes", SIZES)
def test_a_consumer_that_learned_one_position_reads_the_whole_log_from_the_view_across_rolls(
    published: Published, max_bytes: int
) -> None:
    log = published.log
    assert published.view.read(0, max_bytes) is None, "no position is known before the owner is asked"
    published.learn(0, max_bytes)
    end = consume(published, 0, max_bytes)
    assert end == log.high_watermark
    fill(log, 12, tag=100)
    published.publish()
    assert consume(published, end, max_bytes) == log.high_watermark


@pytest.mark.parametrize("max_bytes", (100, 5000, 10**6))
def test_reads_of_many_small_batches_and_of_a_few_large_ones_are_the_owners(
    log_dir: Path, clock: MockClock, max_bytes: int
) -> None:
    """Whatever the batches per read: a few large ones are walked by their headers, many small ones through a
    mapping of the bytes."""
    log = open_log(log_dir, clock, segment_bytes=200_000)
    fill(log, 400)
    for index in range(6):
        log.append(simple_batch(40, value_size=900, tag=1000 + index))
    fill(log, 50, tag=2000)
    state = Published(log)
    state.learn(0, max_bytes)
    assert consume(state, 0, max_bytes) == log.high_watermark
    state.close()


def test_appends_and_rolls_after_a_read_at_the_high_watermark_are_read_from_the_view(published: Published) -> None:
    log = published.log
    published.learn(0)
    end = consume(published, 0, 1000)
    for round_ in range(5):
        fill(log, 7, tag=1000 * round_)
        published.publish()
        end = consume(published, end, 1000)
        assert end == log.high_watermark
    assert log.num_segments > 10


def test_a_reader_at_the_end_of_the_log_reads_the_next_appends_from_where_the_high_watermark_lay(
    published: Published,
) -> None:
    log = published.log
    end = log.high_watermark
    empty = published.view.read(end, 1000)
    assert empty is not None and empty.file_slice is None and empty.next_offset == end
    fill(log, 25, tag=300)  # rolls the active segment too
    published.publish()
    assert consume(published, end, 1000) == log.high_watermark


def test_the_high_watermark_bounds_every_answer_and_an_unpublished_position_is_the_owners(
    log_dir: Path, clock: MockClock
) -> None:
    log = open_log(log_dir, clock, segment_bytes=600)
    fill(log, 20)
    log.set_replicated(True)
    log.update_high_watermark(log.log_end_offset)
    state = Published(log)
    state.learn(0)
    fill(log, 5, tag=50)
    state.publish()
    assert state.view.read(consume_until(state, 0), 1000) is None, "no position is published below the log end"
    log.update_high_watermark(log.log_end_offset)
    state.publish()
    assert consume(state, consume_until(state, 0), 1000) == log.log_end_offset
    state.close()


def consume_until(state: Published, offset: int) -> int:
    """The offset a consumer reading from `offset` reaches before the view first cannot answer."""
    while (answer := state.view.read(offset, 1000)) is not None and answer.file_slice is not None:
        offset = answer.next_offset
    return offset


def test_a_high_watermark_published_ahead_of_its_position_never_lets_bytes_past_it_out(
    log_dir: Path, clock: MockClock
) -> None:
    """A publish racing an append names a position past the high watermark: batches at or past it are not sent."""
    log = open_log(log_dir, clock, segment_bytes=10**6)
    fill(log, 10)
    state = Published(log)
    state.learn(0)
    log.set_replicated(True)
    high_watermark = log.high_watermark
    fill(log, 3, tag=20)
    state.hw_file.publish(log)  # no position: the high watermark is below the log end
    log.set_replicated(False)
    raced = log.log_end_offset
    log.set_replicated(True)
    log.update_high_watermark(high_watermark)
    # The position of the log end, with the high watermark of before the appends.
    state.hw_file._write(
        1,
        high_watermark,
        log.log_start_offset,
        raced,
        log.active_segment.base_offset,
        log.active_segment.size,
        *os_identity(file_names.log_file(log_dir, log.active_segment.base_offset)),
        high_watermark,
        state.epoch,
        state.epoch,
    )
    answer = state.view.read(0, 10**6)
    assert_is_the_owners_answer(log, answer, 0, 10**6)
    state.close()


def os_identity(path: Path) -> tuple[int, int]:
    status = os.stat(path)
    return status.st_dev, status.st_ino


def test_offsets_outside_the_log_after_delete_records_and_retention_are_the_owners(published: Published) -> None:
    log = published.log
    published.learn(0)
    consume(published, 0, 100)
    known = sorted(published.view.known_offsets())
    log.delete_records(known[2])
    published.publish()
    assert published.view.read(known[0], 100) is None, "below the log start: OFFSET_OUT_OF_RANGE from the owner"
    assert_is_the_owners_answer(log, published.view.read(known[2], 100), known[2], 100)
    log.delete_old_segments()
    published.publish()
    assert published.view.read(known[1], 100) is None
    answered = 0
    for offset in [offset for offset in known if offset >= log.log_start_offset]:
        answer = published.view.read(offset, 100)
        if answer is not None:  # None: a position at the end of a deleted segment
            assert_is_the_owners_answer(log, answer, offset, 100)
            answered += 1
    assert answered > 3
    assert published.view.read(log.high_watermark + 1, 100) is None


def test_a_deleted_segment_is_never_read_even_when_its_file_stays_open_elsewhere(published: Published) -> None:
    log = published.log
    published.learn(0)
    first_segment = file_names.log_file(log.directory, 0)
    kept = open(first_segment, "rb")  # noqa: SIM115  (a reader holding the old file open)
    try:
        second_base = log.log_segments()[1].base_offset
        log.delete_records(second_base)
        log.delete_old_segments()
        published.publish()
        assert not first_segment.exists()
        assert published.view.read(0, 1000) is None
    finally:
        kept.close()


def test_a_segment_swapped_for_another_file_is_the_owners(published: Published) -> None:
    """The cleaner's swap puts a new inode at the segment's name: positions in the old file are not vouched for."""
    log = published.log
    published.learn(0)
    path = file_names.log_file(log.directory, 0)
    shutil.copyfile(path, f"{path}.copy")
    os.replace(f"{path}.copy", path)
    assert published.view.read(0, 1000) is None


def test_a_follower_a_truncation_and_a_new_epoch_are_the_owners_until_learned_again(published: Published) -> None:
    log = published.log
    published.learn(0)
    consume(published, 0, 1000)
    middle = sorted(published.view.known_offsets())[-3]
    published.leading = False
    published.publish()
    assert published.view.read(middle, 1000) is None, "a follower's reads go to the leader"
    assert published.view.leader_epoch() is None
    # The follower truncates and takes other batches at the same positions, then leads in a newer epoch.
    log.truncate_to(middle)
    fill(log, 9, tag=500)
    published.leading, published.epoch = True, published.epoch + 1
    published.publish()
    assert published.view.read(middle, 1000) is None, "a position learned in the old epoch"
    published.learn(middle)
    assert consume(published, middle, 1000) == log.high_watermark


def test_a_closed_log_and_a_damaged_position_are_the_owners(published: Published) -> None:
    log = published.log
    published.learn(0)
    answer = published.view.read(0, 1000)
    assert answer is not None
    with open(file_names.log_file(log.directory, 0), "r+b") as file:
        file.seek(8)
        file.write(b"\xff\xff\xff\xff")  # the first batch's length
    assert published.view.read(0, 1000) is None
    published.hw_file.publish_closed()
    assert published.view.read(answer.next_offset, 1000) is None


def test_positions_are_bounded_the_oldest_forgotten_first(published: Published) -> None:
    log = published.log
    for offset in range(MAX_POSITIONS + 4):
        published.learn(offset)
    assert published.view.read(0, 100) is None
    assert_is_the_owners_answer(log, published.view.read(MAX_POSITIONS + 3, 100), MAX_POSITIONS + 3, 100)


# --- read_committed ------------------------------------------------------------------------------------------


def transactional(log: Log, producer_id: int, sequence: int, count: int) -> None:
    builder = RecordBatchBuilder(
        producer_id=producer_id, producer_epoch=0, base_sequence=sequence, is_transactional=True
    )
    for index in range(count):
        builder.append(b"%d" % producer_id, b"%d-%d" % (sequence, index), timestamp=START_MS)
    log.append(builder.build())


@pytest.mark.parametrize("max_bytes", (1, 200, 10**6))
def test_read_committed_stops_at_the_last_stable_offset_and_lists_aborted_transactions_across_segments(
    log_dir: Path, clock: MockClock, max_bytes: int
) -> None:
    log = Log.open(log_dir, LogConfig.from_properties({"segment.bytes": 400}), clock=clock)
    state = Published(log)
    fill(log, 3)
    transactional(log, 7, 0, 3)
    fill(log, 4, tag=10)
    transactional(log, 7, 3, 3)  # the aborted transaction spans segments
    transactional(log, 8, 0, 2)  # still open: the last stable offset stops here
    log.append_transaction_marker(7, 0, 0, ControlRecordType.ABORT)
    fill(log, 3, tag=20)
    state.publish()
    assert log.last_stable_offset < log.high_watermark
    assert log.num_segments > 3
    state.learn(0, max_bytes, "txn_committed")
    first = state.view.read(0, max_bytes, "txn_committed")
    assert first is not None and first.aborted_transactions, "producer 7's aborted transaction overlaps the read"
    end = consume(state, 0, max_bytes, "txn_committed")
    assert end == log.last_stable_offset
    log.append_transaction_marker(8, 0, 0, ControlRecordType.COMMIT)
    fill(log, 2, tag=30)
    state.publish()
    assert consume(state, end, max_bytes, "txn_committed") == log.high_watermark == log.last_stable_offset
    state.close()


def test_an_abort_indexed_after_a_read_committed_read_is_listed_by_the_next_read(
    log_dir: Path, clock: MockClock
) -> None:
    log = Log.open(log_dir, LogConfig.from_properties({"segment.bytes": 10**6}), clock=clock)
    state = Published(log)
    transactional(log, 7, 0, 3)
    log.append_transaction_marker(7, 0, 0, ControlRecordType.ABORT)
    fill(log, 2)
    state.publish()
    state.learn(0, 10**6, "txn_committed")
    first = state.view.read(0, 10**6, "txn_committed")
    assert_is_the_owners_answer(log, first, 0, 10**6, "txn_committed")
    assert first is not None and first.aborted_transactions is not None
    assert [txn.producer_id for txn in first.aborted_transactions] == [7]
    # The active segment's index grows by an entry; the view read it before.
    transactional(log, 9, 0, 2)
    log.append_transaction_marker(9, 0, 0, ControlRecordType.ABORT)
    state.publish()
    again = state.view.read(0, 10**6, "txn_committed")
    assert_is_the_owners_answer(log, again, 0, 10**6, "txn_committed")
    assert again is not None and again.aborted_transactions is not None
    assert [txn.producer_id for txn in again.aborted_transactions] == [7, 9]
    state.close()


def assert_latest_is_the_owners(state: Published) -> None:
    """The view's latest offset at both isolations is `Log.list_offset`'s, published with the replica's epoch."""
    for isolation in ("high_watermark", "txn_committed"):
        latest = state.view.latest_offset(isolation)
        assert latest is not None
        assert latest == (state.log.list_offset(LATEST_TIMESTAMP, isolation), state.epoch), isolation


def test_the_latest_offset_is_the_owners_at_both_isolations_across_transactions_and_epochs(
    log_dir: Path, clock: MockClock
) -> None:
    log = Log.open(log_dir, LogConfig.from_properties({"segment.bytes": 400}), clock=clock)
    state = Published(log)
    assert log.latest_epoch is None, "a new log's leader-epoch cache is empty"
    assert_latest_is_the_owners(state)
    fill(log, 3)
    transactional(log, 7, 0, 3)
    state.publish()
    assert log.last_stable_offset < log.high_watermark
    assert_latest_is_the_owners(state)
    log.append_transaction_marker(7, 0, 0, ControlRecordType.COMMIT)
    log.become_leader(4)
    state.epoch = 4
    fill(log, 2, tag=10)
    state.publish()
    assert log.latest_epoch == 4
    assert_latest_is_the_owners(state)
    log.set_replicated(True)
    log.update_high_watermark(log.high_watermark - 2)
    state.publish()
    assert_latest_is_the_owners(state)
    assert state.view.latest_offset("read_uncommitted") is None, "an isolation a consumer does not read at"
    state.leading = False
    state.publish()
    assert state.view.latest_offset() is None, "a follower, or a leader not answering it yet: the owner answers"
    state.hw_file.publish_closed()
    assert state.view.latest_offset() is None
    state.close()
