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
    LogRead,
    ShareFetched,
    ShareOffsets,
)
from actors.core.shares.share_partition import RecordState
from storage.clock import MockClock
from storage.config.group_config import READ_COMMITTED
from storage.records.layout import ControlRecordType
from storage.records.record_batch import RecordBatchBuilder, build_control_batch
from storage.segment.transaction_index import AbortedTxn

ACCEPT = AcknowledgeType.ACCEPT
CONFIG = ResolvedShareConfig(auto_offset_reset=EARLIEST)


LEADER_EPOCH = 3


def _log(high_watermark: int, log_start_offset: int = 0) -> LogPosition:
    """A log of one-record batches up to `high_watermark`, led in `LEADER_EPOCH`."""

    def read(offset: int, max_bytes: int, read_committed: bool) -> LogRead:
        return LogRead(b"".join(_batch(o) for o in range(offset, high_watermark)))

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


# A log of transactions, two producers interleaved (Kafka's SharePartitionTest shape): producer 7 writes 0-1 and
# aborts (marker at 4), producer 8 writes 2-3 and commits (marker at 5), producer 7 writes 6-7 and commits (marker at
# 8), a plain batch at 9, then producer 9 writes 10 and leaves its transaction open: the last stable offset is 10.
_ABORTED = (AbortedTxn(producer_id=7, first_offset=0, last_offset=4, last_stable_offset=2),)
_TXN_LOG = (
    (0, 2, 7),
    (2, 2, 8),
    (4, ControlRecordType.ABORT, 7),
    (5, ControlRecordType.COMMIT, 8),
    (6, 2, 7),
    (8, ControlRecordType.COMMIT, 7),
    (9, 1, None),
    (10, 1, 9),
)


def _txn_log() -> LogPosition:
    """The log above, read as Kafka reads it for each isolation: read_committed up to the last stable offset 10, with
    the aborted transaction that overlaps the read."""
    batches: list[tuple[int, int, bytes]] = []
    for base, shape, producer in _TXN_LOG:
        if isinstance(shape, ControlRecordType):
            built = build_control_batch(shape, timestamp=0, producer_id=producer or 0, base_offset=base)
            batches.append((base, base, built))
            continue
        builder = RecordBatchBuilder(
            base_offset=base,
            producer_id=-1 if producer is None else producer,
            producer_epoch=-1 if producer is None else 0,
            base_sequence=-1 if producer is None else 0,
            is_transactional=producer is not None,
        )
        for _ in range(shape):
            builder.append(None, b"v", timestamp=0)
        batches.append((base, base + shape - 1, builder.build()))

    def read(offset: int, max_bytes: int, read_committed: bool) -> LogRead:
        end = 10 if read_committed else 11
        records = b"".join(data for base, last, data in batches if last >= offset and base < end)
        return LogRead(records, _ABORTED if read_committed else ())

    return LogPosition(0, 11, read, LEADER_EPOCH, last_stable_offset=10)


def _ranges(fetched: ShareFetched) -> list[tuple[int, int]]:
    return [(r.first_offset, r.last_offset) for r in fetched.acquired]


def test_a_read_committed_group_acquires_below_the_last_stable_offset_and_archives_aborted_batches() -> None:
    """Kafka's `SharePartition.acquire` with `FetchIsolation.TXN_COMMITTED`: the read stops at the LSO, the aborted
    transaction's data batch (0-1) is archived and left out; its markers and the committed batches stay acquired."""
    shares = LeaderShares(MockClock())
    committed = ResolvedShareConfig(auto_offset_reset=EARLIEST, isolation_level=READ_COMMITTED)
    fetched = shares.acquire("g", "m1", committed, _txn_log(), 1 << 20, 500)
    assert _ranges(fetched) == [(2, 9)]
    start, in_flight = shares.in_flight("g") or (None, ())
    assert start == 2  # 0-1 archived: done
    assert [(r.first_offset, r.last_offset, r.state) for r in in_flight] == [(2, 9, RecordState.ACQUIRED)]
    # Nothing more below the LSO: the open transaction's record at 10 is not acquired.
    assert shares.acquire("g", "m2", committed, _txn_log(), 1 << 20, 500).acquired == ()


def test_a_read_uncommitted_group_acquires_every_record_up_to_the_high_watermark() -> None:
    shares = LeaderShares(MockClock())
    fetched = shares.acquire("g", "m1", CONFIG, _txn_log(), 1 << 20, 500)
    assert _ranges(fetched) == [(0, 10)]


def test_released_aborted_records_are_never_redelivered_to_a_read_committed_group() -> None:
    """A record released under read_uncommitted and acquired again after the group turned read_committed is filtered
    on that later acquisition too (Kafka filters both the in-flight and the new records it acquires)."""
    shares = LeaderShares(MockClock())
    log = _txn_log()
    shares.acquire("g", "m1", CONFIG, log, 1 << 20, 500)
    release = int(AcknowledgeType.RELEASE)
    shares.acknowledge("g", "m1", CONFIG, log, [AcknowledgementBatch(0, 10, (release,))])
    committed = ResolvedShareConfig(auto_offset_reset=EARLIEST, isolation_level=READ_COMMITTED)
    fetched = shares.acquire("g", "m1", committed, log, 1 << 20, 500)
    assert _ranges(fetched) == [(2, 9)]
    assert [r.delivery_count for r in fetched.acquired] == [2]
