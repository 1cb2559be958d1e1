"""A partition leader's share-partitions as the share-group offset admin APIs see them (Kafka 4.2's
DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets): the offsets described with their
lag, a group's share-partition altered and deleted, each group apart. The oracle is Kafka's formula
(`latest offset - startOffset - deliveryCompleteCount`) over the records settled, and what a fetch acquires next."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from actors.core.shares.acknowledgements import AcknowledgementBatch, AcknowledgeType
from actors.core.shares.group_share_config import EARLIEST, ResolvedShareConfig
from actors.core.shares.leader_shares import (
    UNKNOWN_SHARE_OFFSETS,
    LeaderShares,
    LogPosition,
    LogRead,
    ShareFetched,
    ShareOffsets,
    SharePartitionStatistics,
)
from actors.core.shares.share_partition import DeliveryTally, RecordState
from storage.clock import MockClock
from storage.config.group_config import READ_COMMITTED
from storage.errors import BrokerNotAvailableError, FencedLeaderEpochError, InvalidRecordStateError
from storage.records.layout import ControlRecordType
from storage.records.record_batch import RecordBatchBuilder, build_control_batch, iter_batches
from storage.records.share_group_state import ShareGroupState
from storage.segment.transaction_index import AbortedTxn

ACCEPT, REJECT, RELEASE = AcknowledgeType.ACCEPT, AcknowledgeType.REJECT, AcknowledgeType.RELEASE
CONFIG = ResolvedShareConfig(auto_offset_reset=EARLIEST)


LEADER_EPOCH = 3
WAIT_S = 10.0


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


class _HeldPersister:
    """Durable states by group, each write held at `gate` while `hold` is set (a slow state write: a Ray call and an
    acks=all append on Ray), failing with `fail_next` if set; keeps every state written, in order."""

    def __init__(self) -> None:
        self.states: dict[str, ShareGroupState] = {}
        self.written: list[ShareGroupState] = []
        self.hold = threading.Event()
        self.gate = threading.Event()
        self.writing = threading.Event()
        self.fail_next: BaseException | None = None

    def read_state(self, group_id: str) -> ShareGroupState:
        return self.states.get(group_id, ShareGroupState())

    def write_state(self, group_id: str, state: ShareGroupState) -> None:
        self.writing.set()
        if self.hold.is_set():
            assert self.gate.wait(WAIT_S)
        failure, self.fail_next = self.fail_next, None
        if failure is not None:
            raise failure
        self.states[group_id] = state
        self.written.append(state)


def _accept(shares: LeaderShares, member: str, first: int, last: int, kind: AcknowledgeType = ACCEPT) -> None:
    shares.acknowledge("g", member, CONFIG, _log(10), [AcknowledgementBatch(first, last, (int(kind),))])


def _holding_a_write(shares: LeaderShares, persister: _HeldPersister, pool: ThreadPoolExecutor) -> Future[None]:
    """m1 holds 0-4 and m2 5-9; m1's acceptance of 0-4 is left writing (held), its call not answered."""
    shares.acquire("g", "m1", CONFIG, _log(10), 1 << 20, 5)
    shares.acquire("g", "m2", CONFIG, _log(10), 1 << 20, 5)
    assert [state.start_offset for state in persister.written] == [0]  # the share-partition's first state
    persister.written.clear()
    persister.hold.set()
    first = pool.submit(_accept, shares, "m1", 0, 4)
    assert persister.writing.wait(WAIT_S)
    return first


def test_members_go_on_while_a_state_is_written_and_one_write_covers_the_changes_staged_meanwhile() -> None:
    """The lock is free while a state is written: another member acknowledges (its call waits for a write covering
    it) and acquires again at once; the states staged meanwhile are written as one, the latest, and each call answers
    only once its change is durable."""
    persister = _HeldPersister()
    shares = LeaderShares(MockClock(), persister)
    with ThreadPoolExecutor(4) as pool:
        first = _holding_a_write(shares, persister, pool)
        second = pool.submit(_accept, shares, "m2", 5, 6)
        third = pool.submit(_accept, shares, "m2", 7, 7, RELEASE)
        fetched = pool.submit(shares.acquire, "g", "m3", CONFIG, _log(10), 1 << 20, 5).result(WAIT_S)
        assert [(r.first_offset, r.last_offset) for r in fetched.acquired] == [(7, 7)]
        assert not (first.done() or second.done() or third.done())
        assert persister.written == []
        persister.gate.set()
        for call in (first, second, third):
            call.result(WAIT_S)
    # m1's state, then one write for m2's two calls: 0-6 accepted, 7 acquired again (written as Available after
    # one delivery), 8-9 acquired (left out: never delivered before).
    assert len(persister.written) == 2
    assert persister.written[0].start_offset == 5
    last = persister.written[1]
    assert last.start_offset == 7
    assert [(b.first_offset, b.last_offset, b.delivery_count) for b in last.state_batches] == [(7, 7, 1)]


def test_a_failed_write_fails_every_call_it_carried_and_the_share_partition_is_read_again() -> None:
    persister = _HeldPersister()
    shares = LeaderShares(MockClock(), persister)
    with ThreadPoolExecutor(4) as pool:
        first = _holding_a_write(shares, persister, pool)
        second = pool.submit(_accept, shares, "m2", 5, 9)
        persister.fail_next = BrokerNotAvailableError("state partition has no leader")
        persister.gate.set()
        for call in (first, second):
            with pytest.raises(BrokerNotAvailableError):
                call.result(WAIT_S)
    assert persister.written == []
    fetched = shares.acquire("g", "m3", CONFIG, _log(10), 1 << 20, 500)
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in fetched.acquired] == [(0, 9, 1)]


def test_a_share_partition_altered_while_a_write_is_held_is_never_overwritten_by_a_state_staged_before() -> None:
    """The alter waits for the write in progress; a call staged before it either had its state written first (it
    took the lock first when the write ended) or fails FENCED_LEADER_EPOCH (INVALID_RECORD_STATE if its thread came
    only after the alter), and its state is never written after the altered one (which wakes first varies, so the
    scenario runs several times)."""
    for _ in range(10):
        persister = _HeldPersister()
        shares = LeaderShares(MockClock(), persister)
        with ThreadPoolExecutor(4) as pool:
            first = _holding_a_write(shares, persister, pool)
            second = pool.submit(_accept, shares, "m2", 5, 9)
            altered = pool.submit(shares.alter, "g", 8, LEADER_EPOCH)
            assert not altered.done()
            persister.gate.set()
            first.result(WAIT_S)
            altered.result(WAIT_S)
            try:
                second.result(WAIT_S)
            except (FencedLeaderEpochError, InvalidRecordStateError):
                assert [state.start_offset for state in persister.written] == [5, 8]
            else:
                assert [state.start_offset for state in persister.written] == [5, 10, 8]
        assert persister.states["g"].start_offset == 8
        assert shares.in_flight("g") == (8, ())


def test_statistics_count_what_is_in_flight_and_the_backlog_the_offsets_report() -> None:
    """The metrics' view: records and runs of equal state between SPSO and SPEO, the backlog, which is the lag
    DescribeShareGroupOffsets reports once a state was written, everything from SPSO before, and the delivery
    tally."""
    shares = LeaderShares(MockClock())
    log = _log(10)
    assert shares.statistics(10) == []
    shares.acquire("g", "m1", CONFIG, log, 1 << 20, 500)
    assert shares.statistics(10) == [SharePartitionStatistics("g", 10, 1, 10)]
    shares.acknowledge("g", "m1", CONFIG, log, [AcknowledgementBatch(0, 1, (int(ACCEPT),))])
    shares.acknowledge("g", "m1", CONFIG, log, [AcknowledgementBatch(5, 5, (int(REJECT),))])
    # SPSO 2: offsets 2-4 and 6-9 acquired, 5 archived: three runs, eight records, the backlog 12 - 2 - 1.
    (found,) = shares.statistics(12)
    assert found == SharePartitionStatistics("g", 8, 3, 9, DeliveryTally(rejected=1))
    assert found.backlog == shares.offsets("g", 12, LEADER_EPOCH).lag  # type: ignore[union-attr]


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


def test_a_fetch_answers_only_the_batches_from_the_first_to_the_last_acquired() -> None:
    """A read of `max_bytes` runs past what the member may take; the answer is sliced to the acquired batches (Kafka's
    `ShareFetchUtils.maybeSliceFetchRecords`), and a second member's answer starts where its ranges do."""
    shares = LeaderShares(MockClock())
    first = shares.acquire("g", "m1", CONFIG, _log(10), 1 << 20, 3)
    assert _ranges(first) == [(0, 2)]
    assert [batch.base_offset for batch in iter_batches(first.records)] == [0, 1, 2]
    second = shares.acquire("g", "m2", CONFIG, _log(10), 1 << 20, 4)
    assert _ranges(second) == [(3, 6)]
    assert [batch.base_offset for batch in iter_batches(second.records)] == [3, 4, 5, 6]
