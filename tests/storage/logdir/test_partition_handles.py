"""Where a replica's reopened log starts its high watermark (`reopen_as_replica`, Kafka's `Partition.createLog`), on
real logs and a `MockClock`. Oracle: Kafka's rule, the replication-offset-checkpoint's entry clamped to [log start,
log end], and the records below it."""

from __future__ import annotations

from pathlib import Path

from storage.clock import MockClock
from storage.logdir.partition_handles import reopen_as_replica
from storage.partition.log import Log
from storage.partition.log_read import LATEST_TIMESTAMP
from storage.records.file_records import TimestampAndOffset
from storage.records.record_batch import NO_TIMESTAMP
from tests.storage.builders import START_MS, batches_in, config, open_log, simple_batch


def test_a_reopened_replica_shows_nothing_past_its_checkpointed_high_watermark_until_its_replica_moves_it(
    tmp_path: Path,
) -> None:
    """A log of 10 records from log start 2, reopened as a replica at checkpointed high watermarks 6, 0 (no entry) and
    99: its high watermark is the entry clamped to [2, 10], not its log end, and reads, ListOffsets latest and the
    last stable offset stop there; an append leaves it there (replication moves it); learning it is the only replica
    moves it to the log end. A tail past the checkpoint may be on no other replica."""
    clock = MockClock(START_MS)
    folder = tmp_path / "t-0"
    log = open_log(folder, clock)
    for index in range(10):
        log.append(simple_batch(1, tag=index))
    log.close()
    for checkpointed, expected in ((6, 6), (0, 2), (99, 10)):
        reopened = Log.open(folder, config(), clock=clock, log_start_offset=2)
        try:
            assert reopened.high_watermark == reopened.log_end_offset == 10
            reopen_as_replica(reopened, checkpointed)
            assert (reopened.log_start_offset, reopened.high_watermark, reopened.log_end_offset) == (2, expected, 10)
            assert reopened.replicated and reopened.last_stable_offset == expected
            assert reopened.list_offset(LATEST_TIMESTAMP) == TimestampAndOffset(NO_TIMESTAMP, expected, 0)
            fetched = reopened.read(2, 100_000, isolation="high_watermark").records
            assert [record.offset for batch in batches_in(fetched) for record in batch.records()] == list(
                range(2, expected)
            )
        finally:
            reopened.close()
    reopened = Log.open(folder, config(), clock=clock)
    try:
        reopen_as_replica(reopened, 4)
        reopened.append(simple_batch(1, tag=10))
        assert (reopened.high_watermark, reopened.log_end_offset) == (4, 11)
        reopened.set_replicated(False)
        assert reopened.high_watermark == 11
    finally:
        reopened.close()
