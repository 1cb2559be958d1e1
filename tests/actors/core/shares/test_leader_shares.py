"""A partition leader's share-partitions as the share-group offset admin APIs see them (Kafka 4.2's
DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets): the offsets described with their
lag, a group's share-partition altered and deleted, each group apart. The oracle is Kafka's formula
(`latest offset - startOffset - deliveryCompleteCount`) over the records settled, and what a fetch acquires next."""

from __future__ import annotations

from actors.core.shares.acknowledgements import AcknowledgementBatch, AcknowledgeType
from actors.core.shares.group_share_config import EARLIEST, ResolvedShareConfig
from actors.core.shares.leader_shares import (
    UNKNOWN_SHARE_OFFSETS,
    LeaderShares,
    LogPosition,
    ShareOffsets,
    SharePartitionStatistics,
)
from storage.clock import MockClock
from storage.records.record_batch import RecordBatchBuilder

ACCEPT, REJECT = AcknowledgeType.ACCEPT, AcknowledgeType.REJECT
CONFIG = ResolvedShareConfig(auto_offset_reset=EARLIEST)


LEADER_EPOCH = 3


def _log(high_watermark: int, log_start_offset: int = 0) -> LogPosition:
    """A log of one-record batches up to `high_watermark`, led in `LEADER_EPOCH`."""

    def read(offset: int, max_bytes: int) -> bytes:
        return b"".join(_batch(o) for o in range(offset, high_watermark))

    return LogPosition(log_start_offset, high_watermark, read, LEADER_EPOCH)


def _batch(offset: int) -> bytes:
    builder = RecordBatchBuilder(base_offset=offset)
    builder.append(None, b"v", timestamp=0)
    return builder.build()


def test_a_group_without_a_share_partition_here_has_no_offsets() -> None:
    shares = LeaderShares(MockClock())
    assert shares.offsets("g", 10, 3) is None


def test_offsets_before_any_write_are_unknown_and_after_one_carry_the_lag() -> None:
    shares = LeaderShares(MockClock())
    log = _log(10)
    fetched = shares.acquire("g", "m1", CONFIG, log, 1 << 20, 500)
    assert [(r.first_offset, r.last_offset) for r in fetched.acquired] == [(0, 9)]
    assert shares.offsets("g", 10, 3) == UNKNOWN_SHARE_OFFSETS == ShareOffsets(-1, 0, -1)
    shares.acknowledge("g", "m1", CONFIG, log, [AcknowledgementBatch(0, 1, (int(ACCEPT),))])
    # Written before SPSO moved: start 0, two records done; lag 10 - 0 - 2.
    assert shares.offsets("g", 10, 3) == ShareOffsets(0, 3, 8)
    shares.acknowledge("g", "m1", CONFIG, log, [AcknowledgementBatch(5, 5, (int(ACCEPT),))])
    assert shares.offsets("g", 12, 3) == ShareOffsets(2, 3, 9)
    assert shares.offsets("other", 12, 3) is None


def test_an_altered_share_partition_starts_there_with_nothing_in_flight() -> None:
    """AlterShareGroupOffsets replaces what was in flight (acquired records too); its state is written with leader
    epoch 0 until the share-partition writes; a start past the high watermark has a negative lag, as Kafka's."""
    shares = LeaderShares(MockClock())
    log = _log(10)
    shares.acquire("g", "m1", CONFIG, log, 1 << 20, 500)
    shares.alter("g", 4, LEADER_EPOCH)
    assert shares.in_flight("g") == (4, ())
    assert shares.offsets("g", 10, 3) == ShareOffsets(4, 0, 6)
    fetched = shares.acquire("g", "m2", CONFIG, log, 1 << 20, 500)
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in fetched.acquired] == [(4, 9, 1)]
    shares.acknowledge("g", "m2", CONFIG, log, [AcknowledgementBatch(4, 4, (int(ACCEPT),))])
    assert shares.offsets("g", 10, 3) == ShareOffsets(4, 3, 5)
    shares.alter("g", 1000, LEADER_EPOCH)
    assert shares.offsets("g", 10, 3) == ShareOffsets(1000, 0, -990)


def test_a_deleted_share_partition_starts_again_from_the_auto_offset_reset() -> None:
    shares = LeaderShares(MockClock())
    log = _log(10)
    shares.acquire("g", "m1", CONFIG, log, 1 << 20, 500)
    shares.acknowledge("g", "m1", CONFIG, log, [AcknowledgementBatch(0, 9, (int(ACCEPT),))])
    shares.acquire("h", "m2", CONFIG, log, 1 << 20, 500)
    assert shares.delete("g", LEADER_EPOCH) is True
    assert shares.delete("g", LEADER_EPOCH) is False
    assert shares.offsets("g", 10, LEADER_EPOCH) is None
    assert shares.in_flight("h") is not None
    fetched = shares.acquire("g", "m1", CONFIG, log, 1 << 20, 500)
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in fetched.acquired] == [(0, 9, 1)]


def test_statistics_count_what_is_in_flight_and_the_backlog_the_offsets_report() -> None:
    """The metrics' view: records and runs of equal state between SPSO and SPEO, and the backlog, which is the lag
    DescribeShareGroupOffsets reports once a state was written, everything from SPSO before."""
    shares = LeaderShares(MockClock())
    log = _log(10)
    assert shares.statistics(10) == []
    shares.acquire("g", "m1", CONFIG, log, 1 << 20, 500)
    assert shares.statistics(10) == [SharePartitionStatistics("g", 10, 1, 10)]
    shares.acknowledge("g", "m1", CONFIG, log, [AcknowledgementBatch(0, 1, (int(ACCEPT),))])
    shares.acknowledge("g", "m1", CONFIG, log, [AcknowledgementBatch(5, 5, (int(REJECT),))])
    # SPSO 2: offsets 2-4 and 6-9 acquired, 5 archived: three runs, eight records, the backlog 12 - 2 - 1.
    (found,) = shares.statistics(12)
    assert found == SharePartitionStatistics("g", 8, 3, 9)
    assert found.backlog == shares.offsets("g", 12, LEADER_EPOCH).lag  # type: ignore[union-attr]
