"""`AbortedBatches`, Kafka's read_committed rule, over logs holding the transaction scenario
(`tests.transaction_scenario`): read_committed fetches of every size from every offset, filtered batch by batch,
give exactly the model's committed records; the records a fetch drops are the model's aborted ones."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from storage.clock import MockClock
from storage.config.log_config import LogConfig
from storage.partition.aborted_batches import AbortedBatches
from storage.partition.log import Log, LogAppendInfo
from storage.records.record_batch import ControlRecordType, iter_batches
from tests.storage.builders import START_MS
from tests.transaction_scenario import PARTITIONS, Scenario, write_scenario


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[tuple[list[Log], Scenario]]:
    opened = [
        Log.open(
            tmp_path / f"t-{partition}", LogConfig.from_properties({"segment.bytes": 400}), clock=MockClock(START_MS)
        )
        for partition in range(PARTITIONS)
    ]

    def append(partition: int, batch: bytes) -> LogAppendInfo:
        return opened[partition].append(batch)

    def mark(partition: int, producer_id: int, epoch: int, commit: bool) -> LogAppendInfo:
        result = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        return opened[partition].append_transaction_marker(producer_id, epoch, 0, result)

    scenario = write_scenario(append, mark)
    yield opened, scenario
    for log in opened:
        log.close()


def read_committed(log: Log, start: int, max_bytes: int) -> list[tuple[int, bytes]]:
    """(offset, value) a read_committed consumer reads from `start`, fetching `max_bytes` at a time."""
    position, read = start, []
    while position < log.last_stable_offset:
        fetched = log.read(position, max_bytes, isolation="txn_committed")
        assert fetched.aborted_transactions is not None
        aborted = AbortedBatches(fetched.aborted_transactions)
        for batch in iter_batches(fetched.records):
            if not aborted.drops(batch) and not batch.is_control:
                read.extend((r.offset, r.value) for r in batch.records() if r.offset >= position)
            position = max(position, batch.next_offset)
    return read


@pytest.mark.parametrize("max_bytes", [1, 150, 1 << 20])
def test_read_committed_fetches_filtered_batch_by_batch_read_the_committed_records(
    logs: tuple[list[Log], Scenario], max_bytes: int
) -> None:
    opened, scenario = logs
    for partition, log in enumerate(opened):
        assert log.last_stable_offset == scenario.last_stable_offset(partition)
        expected = [(offset, value) for p, offset, value in scenario.read_committed() if p == partition]
        for start in range(scenario.last_stable_offset(partition)):
            assert read_committed(log, start, max_bytes) == [r for r in expected if r[0] >= start]


def test_a_filter_without_aborted_transactions_keeps_every_data_batch(logs: tuple[list[Log], Scenario]) -> None:
    opened, _ = logs
    keep = AbortedBatches(())
    batches, position = [], 0
    while position < opened[0].log_end_offset:
        read = list(iter_batches(opened[0].read(position, 1 << 20).records))
        batches += read
        position = read[-1].next_offset
    assert not any(keep.drops(batch) for batch in batches)
    # Partition 0's markers: B's ABORT, A's COMMIT.
    assert [batch.control_type() for batch in batches if batch.is_control] == [
        ControlRecordType.ABORT,
        ControlRecordType.COMMIT,
    ]
