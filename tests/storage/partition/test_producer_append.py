"""Tests for `storage.partition.producer_append` and the transaction side of `producer_state`, after Kafka's
ProducerStateManagerTest (the test names say which case each ports)."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from storage.partition.producer_append import AppendOrigin, PendingAppend
from storage.partition.producer_state import (
    NO_SEQUENCE,
    PRODUCER_ID_EXPIRATION_MS,
    BatchMetadata,
    CompletedTxn,
    ProducerStateManager,
)
from storage.records.layout import ControlRecordType, EndTransactionMarker
from storage.records.record_batch import RecordBatch, RecordBatchBuilder, build_control_batch
from storage.segment.transaction_index import AbortedTxn, TransactionIndex

PID = 1
EPOCH = 0
NOW_MS = 1_700_000_000_000


@pytest.fixture
def state(tmp_path: Path) -> ProducerStateManager:
    return ProducerStateManager(tmp_path)


def data(
    state: ProducerStateManager,
    pid: int,
    epoch: int,
    seq: int,
    offset: int,
    transactional: bool,
    *,
    last_offset: int | None = None,
    origin: AppendOrigin = AppendOrigin.CLIENT,
    timestamp: int = NOW_MS,
) -> BatchMetadata | None:
    """Kafka's `appendClientEntry`: one data batch [offset, last_offset] applied on its own."""
    last = offset if last_offset is None else last_offset
    pending = PendingAppend(state, origin)
    duplicate = pending.append_data(
        pid, epoch, BatchMetadata(seq, seq + last - offset, offset, last, timestamp), transactional
    )
    pending.commit(None)
    return duplicate


def marker(
    state: ProducerStateManager,
    pid: int,
    epoch: int,
    control_type: ControlRecordType,
    offset: int,
    coordinator_epoch: int = 0,
    *,
    timestamp: int = NOW_MS,
    index: TransactionIndex | None = None,
) -> CompletedTxn | None:
    """Kafka's `appendEndTxnMarker`, from the coordinator."""
    pending = PendingAppend(state, AppendOrigin.COORDINATOR)
    completed = pending.append_marker(
        pid, epoch, EndTransactionMarker(control_type, coordinator_epoch), offset, timestamp
    )
    pending.commit(index)
    return completed


def test_append_txn_marker_with_no_producer_state(state: ProducerStateManager) -> None:
    marker(state, PID, 2, ControlRecordType.COMMIT, 27)
    entry = state.producers[PID]
    assert (entry.epoch, entry.producer_id, entry.last_sequence) == (2, PID, NO_SEQUENCE)
    assert state.first_unstable_offset() is None
    # Fencing still works when the marker is all that is left; a non-zero sequence must restart at 0.
    with pytest.raises(InvalidProducerEpochError):
        data(state, PID, 0, 0, 4, False)
    with pytest.raises(OutOfOrderSequenceError):
        data(state, PID, 2, 17, 4, False)
    data(state, PID, 2, 0, 39, False)
    assert state.producers[PID].last_sequence == 0


def test_control_record_bumps_producer_epoch(state: ProducerStateManager) -> None:
    data(state, PID, EPOCH, 0, 0, False)
    marker(state, PID, 1, ControlRecordType.ABORT, 1)
    entry = state.producers[PID]
    assert (entry.epoch, entry.current_txn_first_offset, entry.last_sequence) == (1, -1, NO_SEQUENCE)
    data(state, PID, 1, 0, 2, False)
    assert state.producers[PID].batches[0].first_sequence == 0


def test_out_of_sequence_after_control_record_epoch_bump(state: ProducerStateManager) -> None:
    data(state, PID, EPOCH, 0, 0, True)
    data(state, PID, EPOCH, 1, 1, True)
    marker(state, PID, 1, ControlRecordType.ABORT, 1)
    with pytest.raises(OutOfOrderSequenceError):
        data(state, PID, 1, 2, 2, True)
    with pytest.raises(OutOfOrderSequenceError):
        data(state, PID, 2, 2, 2, True)
    data(state, PID, 1, 0, 2, True)
    assert (state.producers[PID].epoch, state.producers[PID].last_sequence) == (1, 0)


def test_non_transactional_append_with_ongoing_transaction(state: ProducerStateManager) -> None:
    data(state, PID, EPOCH, 0, 0, True)
    with pytest.raises(InvalidTxnStateError):
        data(state, PID, EPOCH, 1, 1, False)
    assert state.ongoing_transactions == {0: PID}


def test_a_replica_accepts_what_a_leader_refuses(state: ProducerStateManager) -> None:
    data(state, PID, 5, 0, 0, True)
    data(state, PID, 5, 7, 1, False, origin=AppendOrigin.REPLICATION)
    data(state, PID, 3, 0, 2, True, origin=AppendOrigin.REPLICATION)
    assert state.producers[PID].epoch == 3


def test_coordinator_writes_carry_no_sequence(state: ProducerStateManager) -> None:
    data(state, PID, EPOCH, 0, 0, True, origin=AppendOrigin.COORDINATOR)
    data(state, PID, EPOCH, 0, 1, True, origin=AppendOrigin.COORDINATOR)
    assert state.ongoing_transactions == {0: PID}


def test_recover_from_snapshot_unfinished_transaction(state: ProducerStateManager, tmp_path: Path) -> None:
    data(state, PID, EPOCH, 0, 0, True)
    data(state, PID, EPOCH, 1, 1, True)
    state.write_snapshot(2)
    recovered = ProducerStateManager(tmp_path)
    assert recovered.load_latest_snapshot(3, NOW_MS) == 2
    entry = recovered.producers[PID]
    only = entry.batches[-1]
    assert (only.first_offset, only.first_sequence, only.last_offset, only.last_sequence) == (1, 1, 1, 1)
    assert entry.current_txn_first_offset == 0
    assert recovered.first_unstable_offset() == 0
    data(recovered, PID, EPOCH, 2, 2, True)
    completed = marker(recovered, PID, EPOCH, ControlRecordType.COMMIT, 3)
    assert completed == CompletedTxn(PID, 0, 3, is_aborted=False)


def test_recover_from_snapshot_finished_transaction(state: ProducerStateManager, tmp_path: Path) -> None:
    data(state, PID, EPOCH, 0, 0, True)
    data(state, PID, EPOCH, 1, 1, True)
    marker(state, PID, EPOCH, ControlRecordType.ABORT, 2)
    state.write_snapshot(3)
    recovered = ProducerStateManager(tmp_path)
    recovered.load_latest_snapshot(3, NOW_MS)
    entry = recovered.producers[PID]
    assert (entry.batches[-1].first_offset, entry.last_sequence, entry.current_txn_first_offset) == (1, 1, -1)
    assert recovered.first_unstable_offset() is None


def test_recover_from_snapshot_empty_transaction(state: ProducerStateManager, tmp_path: Path) -> None:
    marker(state, PID, EPOCH, ControlRecordType.ABORT, 0, timestamp=NOW_MS + 5)
    state.write_snapshot(1)
    recovered = ProducerStateManager(tmp_path)
    recovered.load_latest_snapshot(1, NOW_MS)
    entry = recovered.producers[PID]
    assert (entry.last_timestamp, entry.current_txn_first_offset, list(entry.batches)) == (NOW_MS + 5, -1, [])


def test_producer_state_after_fencing_abort_marker(state: ProducerStateManager) -> None:
    data(state, PID, EPOCH, 0, 0, True)
    marker(state, PID, EPOCH + 1, ControlRecordType.ABORT, 1)
    entry = state.producers[PID]
    assert (entry.current_txn_first_offset, entry.last_data_offset) == (-1, -1)
    state.remove_expired_producers(NOW_MS)
    assert PID in state.producers


def test_first_unstable_offset(state: ProducerStateManager) -> None:
    epoch = 5
    assert state.first_undecided_offset() is None
    data(state, PID, epoch, 0, 99, True)
    assert (state.first_undecided_offset(), state.first_unstable_offset()) == (99, 99)
    other = 2
    data(state, other, epoch, 0, 105, True)
    assert (state.first_undecided_offset(), state.first_unstable_offset()) == (99, 99)
    marker(state, PID, epoch, ControlRecordType.COMMIT, 109)
    assert (state.first_undecided_offset(), state.first_unstable_offset()) == (105, 99)
    state.on_high_watermark_updated(100)
    assert state.first_unstable_offset() == 99
    state.on_high_watermark_updated(110)
    assert state.first_unstable_offset() == 105
    marker(state, other, epoch, ControlRecordType.ABORT, 112)
    assert (state.first_undecided_offset(), state.first_unstable_offset()) == (None, 105)
    state.on_high_watermark_updated(113)
    assert state.first_unstable_offset() is None


def test_producers_with_ongoing_transactions_dont_expire(state: ProducerStateManager) -> None:
    data(state, PID, 5, 0, 99, True)
    assert state.remove_expired_producers(NOW_MS + PRODUCER_ID_EXPIRATION_MS + 1) == 0
    assert state.first_undecided_offset() == 99


def test_old_epoch_for_control_record(state: ProducerStateManager) -> None:
    data(state, PID, 5, 0, 99, True)
    with pytest.raises(InvalidProducerEpochError):
        marker(state, PID, 3, ControlRecordType.COMMIT, 100)
    assert state.ongoing_transactions == {99: PID}


def test_coordinator_fencing(state: ProducerStateManager, tmp_path: Path) -> None:
    data(state, PID, 5, 0, 99, True)
    marker(state, PID, 5, ControlRecordType.COMMIT, 100, coordinator_epoch=1)
    assert state.producers[PID].coordinator_epoch == 1
    marker(state, PID, 5, ControlRecordType.COMMIT, 101, coordinator_epoch=1)
    marker(state, PID, 5, ControlRecordType.COMMIT, 102, coordinator_epoch=2)
    with pytest.raises(TransactionCoordinatorFencedError):
        marker(state, PID, 5, ControlRecordType.COMMIT, 103, coordinator_epoch=1)
    state.write_snapshot(103)
    reloaded = ProducerStateManager(tmp_path)
    reloaded.load_latest_snapshot(103, NOW_MS)
    with pytest.raises(TransactionCoordinatorFencedError):
        marker(reloaded, PID, 5, ControlRecordType.COMMIT, 104, coordinator_epoch=1)


def test_append_empty_control_batch(state: ProducerStateManager) -> None:
    emptied = RecordBatch(
        RecordBatchBuilder(producer_id=23423, producer_epoch=0, is_control=True, base_offset=15).build()
    )
    pending = PendingAppend(state, AppendOrigin.REPLICATION)
    pending.append_batch(emptied)
    pending.commit(None)
    entry = state.producers[23423]
    assert (entry.current_txn_first_offset, entry.epoch) == (-1, -1)
    assert state.ongoing_transactions == {}


def test_last_stable_offset_of_completed_transactions(state: ProducerStateManager) -> None:
    start1, start2, start3 = 992342, 992342 + 25, 992342 + 57
    for pid, start in ((1, start1), (2, start2), (3, start3)):
        data(state, pid, EPOCH, 0, start, True)
    last1 = start3 + 15
    txn1 = CompletedTxn(1, start1, last1, False)
    assert state.last_stable_offset(txn1) == start2
    state.complete_txn(txn1)
    state.on_high_watermark_updated(last1 + 1)
    assert state.first_unstable_offset() == start2
    last3 = last1 + 20
    txn3 = CompletedTxn(3, start3, last3, False)
    assert state.last_stable_offset(txn3) == start2
    state.complete_txn(txn3)
    state.on_high_watermark_updated(last3 + 1)
    assert state.first_unstable_offset() == start2
    last2 = last3 + 78
    txn2 = CompletedTxn(2, start2, last2, False)
    assert state.last_stable_offset(txn2) == last2 + 1
    state.complete_txn(txn2)
    state.on_high_watermark_updated(last2 + 1)
    assert state.first_unstable_offset() is None


def test_skip_empty_transactions(state: ProducerStateManager, tmp_path: Path) -> None:
    sequence = iter(range(100))

    def append_data(pending: PendingAppend, first: int, last: int) -> None:
        for offset in range(first, last + 1):
            seq = next(sequence)
            pending.append_data(PID, EPOCH, BatchMetadata(seq, seq, offset, offset, NOW_MS), True)

    def end(pending: PendingAppend, control_type: ControlRecordType, offset: int) -> CompletedTxn | None:
        return pending.append_marker(PID, EPOCH, EndTransactionMarker(control_type, 0), offset, NOW_MS)

    first = PendingAppend(state)
    append_data(first, 16, 20)
    first.commit(None)
    state.on_high_watermark_updated(21)
    assert state.first_unstable_offset() == 16

    second = PendingAppend(state)
    assert end(second, ControlRecordType.COMMIT, 21) == CompletedTxn(PID, 16, 21, False)
    assert end(second, ControlRecordType.COMMIT, 22) is None
    assert end(second, ControlRecordType.ABORT, 23) is None
    append_data(second, 24, 27)
    assert end(second, ControlRecordType.ABORT, 28) == CompletedTxn(PID, 24, 28, True)
    assert end(second, ControlRecordType.ABORT, 29) is None
    append_data(second, 30, 31)
    index = TransactionIndex(tmp_path / "0.txnindex", 0)
    second.commit(index)
    state.on_high_watermark_updated(32)
    assert state.first_unstable_offset() == 30
    # The aborted one is indexed: no other producer had a transaction open, so its last stable offset is 29.
    assert index.entries == (AbortedTxn(PID, 24, 28, 29),)
    index.close()


def test_a_refused_marker_changes_nothing(state: ProducerStateManager) -> None:
    data(state, PID, EPOCH, 0, 0, True)
    marker(state, PID, EPOCH, ControlRecordType.COMMIT, 1, coordinator_epoch=4)
    data(state, PID, EPOCH, 1, 2, True)
    before = state.producers[PID].copy()
    with pytest.raises(TransactionCoordinatorFencedError):
        marker(state, PID, EPOCH, ControlRecordType.ABORT, 3, coordinator_epoch=3)
    assert state.producers[PID] == before
    assert state.ongoing_transactions == {2: PID}


def test_marker_batch_read_from_a_log_completes_the_transaction(state: ProducerStateManager, tmp_path: Path) -> None:
    data(state, 9, EPOCH, 0, 0, True, origin=AppendOrigin.REPLICATION)
    data(state, 8, EPOCH, 0, 1, True, origin=AppendOrigin.REPLICATION)
    abort = build_control_batch(ControlRecordType.ABORT, timestamp=NOW_MS, producer_id=9, base_offset=2)
    pending = PendingAppend(state, AppendOrigin.REPLICATION)
    pending.append_batch(RecordBatch(abort))
    index = TransactionIndex(tmp_path / "0.txnindex", 0)
    pending.commit(index)
    assert index.entries == (AbortedTxn(9, 0, 2, 1),)
    assert state.ongoing_transactions == {1: 8}
    index.close()
