"""One share-partition's records, transition by transition, against Kafka's `SharePartition` (the class and method
each rule mirrors is named in the test's docstring): acquisition within the record lock limit and the fetch's soft
limit, each acknowledge type, every error with Kafka's code, lock expiry on a mock clock, archiving at the delivery
count limit, SPSO moving over done prefixes, the auto offset reset, and a restart from the written state."""

from __future__ import annotations

import pytest

from actors.core.shares.acknowledgements import AcknowledgementBatch, AcknowledgeType
from actors.core.shares.group_share_config import EARLIEST, LATEST, ResolvedShareConfig
from actors.core.shares.share_partition import (
    AcquiredRecords,
    DeliveryTally,
    RecordState,
    SharePartition,
    StateSummary,
)
from storage.clock import MockClock
from storage.errors import InvalidRecordStateError, InvalidRequestError
from storage.records.share_group_state import ShareGroupState, ShareSnapshot, StateBatch

ACCEPT, RELEASE, REJECT, GAP, RENEW = (
    int(AcknowledgeType.ACCEPT),
    int(AcknowledgeType.RELEASE),
    int(AcknowledgeType.REJECT),
    int(AcknowledgeType.GAP),
    int(AcknowledgeType.RENEW),
)


def _partition(
    clock: MockClock | None = None,
    *,
    delivery_count_limit: int = 5,
    max_record_locks: int = 2000,
    record_lock_duration_ms: int = 30000,
) -> SharePartition:
    config = ResolvedShareConfig(
        delivery_count_limit=delivery_count_limit,
        max_record_locks=max_record_locks,
        record_lock_duration_ms=record_lock_duration_ms,
    )
    return SharePartition(clock or MockClock(), config)


def _ack(first: int, last: int, *types: int) -> AcknowledgementBatch:
    return AcknowledgementBatch(first, last, types)


def _states(sp: SharePartition) -> list[tuple[int, int, RecordState, int, str | None]]:
    return [(r.first_offset, r.last_offset, r.state, r.delivery_count, r.member_id) for r in sp.in_flight()]


# --- acquire -------------------------------------------------------------------------------------------------


def test_acquire_takes_new_records_with_delivery_count_one_and_moves_the_end_offset() -> None:
    """Kafka's `acquireNewBatchRecords`: a new in-flight batch from the read's first offset, Acquired by the member,
    delivery count 1; SPEO follows it and SPSO stays."""
    sp = _partition()
    assert sp.acquire("m1", [(0, 4), (5, 9)], 500) == [AcquiredRecords(0, 9, 1)]
    assert (sp.start_offset, sp.end_offset) == (0, 10)
    assert _states(sp) == [(0, 9, RecordState.ACQUIRED, 1, "m1")]
    assert sp.next_fetch_offset() == 10


def test_aborted_batches_just_acquired_are_archived_and_left_out_of_the_answer() -> None:
    """Kafka's `filterRecordBatchesFromAcquiredRecords` and its archive of the aborted batches: the acquired ranges
    split around each aborted batch; another member's acquired records in an aborted batch stay as they were (this
    call did not acquire them); SPSO moves over an archived prefix."""
    sp = _partition()
    sp.acquire("m2", [(0, 1)], 500)
    acquired = sp.acquire("m1", [(0, 1), (2, 3), (4, 4), (5, 7), (8, 9)], 500)
    assert acquired == [AcquiredRecords(2, 9, 1)]
    assert sp.archive_aborted(acquired, [(0, 1), (4, 4), (8, 9)]) == [
        AcquiredRecords(2, 3, 1),
        AcquiredRecords(5, 7, 1),
    ]
    assert sp.start_offset == 0
    assert _states(sp) == [
        (0, 1, RecordState.ACQUIRED, 1, "m2"),
        (2, 3, RecordState.ACQUIRED, 1, "m1"),
        (4, 4, RecordState.ARCHIVED, 1, None),
        (5, 7, RecordState.ACQUIRED, 1, "m1"),
        (8, 9, RecordState.ARCHIVED, 1, None),
    ]
    prefix = _partition()
    kept = prefix.archive_aborted(prefix.acquire("m1", [(0, 1), (2, 2)], 500), [(0, 1)])
    assert kept == [AcquiredRecords(2, 2, 1)]
    assert prefix.start_offset == 2


def test_acquire_never_hands_an_acquired_record_to_another_member() -> None:
    """Kafka's `acquire`: in-flight records that are not Available are skipped, the rest of the read is new."""
    sp = _partition()
    sp.acquire("m1", [(0, 4)], 500)
    assert sp.acquire("m2", [(0, 4), (5, 7)], 500) == [AcquiredRecords(5, 7, 1)]
    assert _states(sp) == [(0, 4, RecordState.ACQUIRED, 1, "m1"), (5, 7, RecordState.ACQUIRED, 1, "m2")]


def test_max_fetch_records_is_a_soft_limit_rounded_up_to_the_log_batch() -> None:
    """Kafka's `lastOffsetFromBatchWithRequestOffset`: the last acquired offset is the end of the log batch holding
    the `max_fetch_records`-th record."""
    sp = _partition()
    assert sp.acquire("m1", [(0, 4), (5, 9), (10, 14)], 7) == [AcquiredRecords(0, 9, 1)]
    assert sp.end_offset == 10


def test_the_record_limit_mode_acquires_exactly_max_fetch_records_and_leaves_the_batchs_rest_available() -> None:
    """Kafka 4.2's `record_limit` acquire mode: of new records, the first `max_fetch_records`; the log batch holding
    the last one goes into flight whole (SPEO at its end), the rest Available, never delivered; the next fetch starts
    there, and an Available run is acquired only up to the limit too."""
    sp = _partition()
    assert sp.acquire("m1", [(0, 9), (10, 14)], 3, record_limit=True) == [AcquiredRecords(0, 2, 1)]
    assert sp.end_offset == 10
    assert _states(sp) == [(0, 2, RecordState.ACQUIRED, 1, "m1"), (3, 9, RecordState.AVAILABLE, 0, None)]
    assert sp.next_fetch_offset() == 3
    assert sp.acquire("m2", [(0, 9), (10, 14)], 4, record_limit=True) == [AcquiredRecords(3, 6, 1)]
    assert sp.acquire("m2", [(0, 9), (10, 14)], 5, record_limit=True) == [AcquiredRecords(7, 11, 1)]
    assert sp.end_offset == 15
    assert sp.state().state_batches == ()


def test_new_records_stop_at_the_record_lock_limit() -> None:
    """Kafka 4.2's `lastOffsetAndMaxRecordsToAcquire`: at most `group.share.partition.max.record.locks` in flight;
    at the limit nothing new is acquired and `canAcquireRecords` is false."""
    sp = _partition(max_record_locks=100)
    assert sp.acquire("m1", [(i, i) for i in range(150)], 500) == [AcquiredRecords(0, 99, 1)]
    assert sp.acquire("m2", [(i, i) for i in range(100, 150)], 500) == []
    assert not sp.can_acquire_records()
    sp.acknowledge("m1", [_ack(0, 9, ACCEPT)])
    assert sp.can_acquire_records()
    assert sp.acquire("m2", [(i, i) for i in range(100, 150)], 500) == [AcquiredRecords(100, 109, 1)]


def test_released_records_are_acquired_again_with_a_higher_delivery_count_even_at_the_lock_limit() -> None:
    """Kafka's `canAcquireRecords`: Available in-flight records can always be re-acquired; `nextFetchOffset` points
    at the first of them."""
    sp = _partition(max_record_locks=100)
    sp.acquire("m1", [(0, 99)], 500)
    sp.acknowledge("m1", [_ack(10, 19, RELEASE)])
    assert sp.can_acquire_records()
    assert sp.next_fetch_offset() == 10
    assert sp.acquire("m2", [(0, 99)], 500) == [AcquiredRecords(10, 19, 2)]
    assert sp.next_fetch_offset() == 100


def test_a_read_below_the_start_offset_is_taken_from_the_start_offset() -> None:
    """Kafka 4.2's `acquire` ("Adjusting base offset for the fetch as it's prior to start offset")."""
    sp = _partition()
    sp.acquire("m1", [(0, 9)], 500)
    sp.acknowledge("m1", [_ack(0, 4, ACCEPT)])
    sp.acknowledge("m1", [_ack(5, 9, ACCEPT)])
    assert sp.start_offset == 10
    assert sp.acquire("m1", [(0, 14)], 500) == [AcquiredRecords(10, 14, 1)]


def test_a_read_starting_after_the_end_skips_the_offsets_between() -> None:
    """Kafka's `acquireNewBatchRecords` starts the batch at the read's first offset: the offsets before it held no
    record and count as done for SPSO (its start-offset walk skips what its cache lacks)."""
    sp = _partition()
    assert sp.acquire("m1", [(20, 24)], 500) == [AcquiredRecords(20, 24, 1)]
    assert (sp.start_offset, sp.end_offset) == (20, 25)
    sp.acquire("m1", [(30, 34)], 500)
    sp.acknowledge("m1", [_ack(20, 24, ACCEPT)])
    assert sp.start_offset == 30


def test_nothing_is_acquired_for_no_records_or_no_room() -> None:
    """Kafka's `acquire`: an empty read or `maxFetchRecords <= 0` acquires nothing."""
    sp = _partition()
    assert sp.acquire("m1", [], 500) == []
    assert sp.acquire("m1", [(0, 4)], 0) == []
    assert sp.in_flight() == ()


# --- acknowledge ---------------------------------------------------------------------------------------------


def test_accept_acknowledges_and_moves_the_start_offset() -> None:
    """Kafka's `acknowledgeCompleteBatch` and `maybeUpdateCachedStateAndOffsets`: ACCEPT makes records Acknowledged;
    a done prefix moves SPSO, and when everything is done SPSO = SPEO and nothing is in flight."""
    sp = _partition()
    sp.acquire("m1", [(0, 9)], 500)
    sp.acknowledge("m1", [_ack(0, 3, ACCEPT)])
    assert sp.start_offset == 4
    sp.acknowledge("m1", [_ack(6, 9, ACCEPT)])
    assert sp.start_offset == 4
    sp.acknowledge("m1", [_ack(4, 5, ACCEPT)])
    assert (sp.start_offset, sp.end_offset, sp.in_flight()) == (10, 10, ())


def test_reject_and_gap_archive() -> None:
    """Kafka's `ACK_TYPE_TO_RECORD_STATE`: REJECT (3) and GAP (0) make records Archived, never delivered again."""
    sp = _partition()
    sp.acquire("m1", [(0, 9)], 500)
    sp.acknowledge("m1", [_ack(2, 3, REJECT), _ack(4, 4, GAP)])
    assert _states(sp)[1] == (2, 4, RecordState.ARCHIVED, 1, None)
    sp.acknowledge("m1", [_ack(0, 1, ACCEPT)])
    assert sp.start_offset == 5
    assert sp.acquire("m2", [(0, 9)], 500) == []


def test_per_offset_types_apply_offset_by_offset() -> None:
    """Kafka's `acknowledgePerOffsetBatchRecords`: a batch with one type per offset sets each offset's state."""
    sp = _partition()
    sp.acquire("m1", [(0, 3)], 500)
    sp.acknowledge("m1", [_ack(0, 3, ACCEPT, RELEASE, REJECT, ACCEPT)])
    assert _states(sp) == [
        (1, 1, RecordState.AVAILABLE, 1, None),
        (2, 2, RecordState.ARCHIVED, 1, None),
        (3, 3, RecordState.ACKNOWLEDGED, 1, None),
    ]
    assert sp.start_offset == 1


def test_release_makes_records_available_until_the_delivery_count_limit_archives_them() -> None:
    """Kafka's `InFlightState.tryUpdateState`: a release at `deliveryCount >= maxDeliveryCount` archives instead of
    making the record Available; the count never passes the limit."""
    sp = _partition(delivery_count_limit=3)
    counts = []
    for member in ("m1", "m2", "m3"):
        acquired = sp.acquire(member, [(0, 0)], 500)
        counts.append(acquired[0].delivery_count)
        sp.acknowledge(member, [_ack(0, 0, RELEASE)])
    assert counts == [1, 2, 3]
    assert sp.in_flight() == ()
    assert sp.start_offset == 1
    assert sp.acquire("m4", [(0, 0)], 500) == []


@pytest.mark.parametrize(
    ("holder", "asker", "first", "last"),
    [("m1", "m2", 0, 4), ("m1", "m2", 3, 3)],
)
def test_acknowledging_another_members_records_is_invalid_record_state(
    holder: str, asker: str, first: int, last: int
) -> None:
    """Kafka's `validateAcknowledgementBatchMemberId` / `acknowledgePerOffsetBatchRecords`: "Member is not the owner",
    INVALID_RECORD_STATE (121), and nothing changes."""
    sp = _partition()
    sp.acquire(holder, [(0, 4)], 500)
    before = sp.in_flight()
    with pytest.raises(InvalidRecordStateError):
        sp.acknowledge(asker, [_ack(first, last, ACCEPT)])
    assert sp.in_flight() == before


def test_acknowledging_twice_or_after_a_release_is_invalid_record_state() -> None:
    """Kafka's `acknowledgeCompleteBatch`: "The batch is not in the acquired state" for records already acknowledged
    (above SPSO) and for records released back to Available."""
    sp = _partition()
    sp.acquire("m1", [(0, 9)], 500)
    sp.acknowledge("m1", [_ack(5, 6, ACCEPT), _ack(8, 8, RELEASE)])
    with pytest.raises(InvalidRecordStateError):
        sp.acknowledge("m1", [_ack(5, 5, ACCEPT)])
    with pytest.raises(InvalidRecordStateError):
        sp.acknowledge("m1", [_ack(8, 8, ACCEPT)])


def test_acknowledging_below_the_start_offset_is_ignored() -> None:
    """Kafka's `acknowledge`: "All offsets in the acknowledgement batch are already archived" - skipped, no error;
    a batch straddling SPSO acknowledges from SPSO."""
    sp = _partition()
    sp.acquire("m1", [(0, 9)], 500)
    sp.acknowledge("m1", [_ack(0, 4, ACCEPT)])
    sp.acknowledge("m1", [_ack(0, 4, ACCEPT)])
    sp.acknowledge("m1", [_ack(2, 6, ACCEPT)])
    assert sp.start_offset == 7


def test_acknowledging_past_the_acquired_records_is_invalid_request() -> None:
    """Kafka's `fetchSubMapForAcknowledgementBatch`: "The first/last offset in request is past acquired records",
    INVALID_REQUEST (42); with nothing in flight, "not found in the cache", INVALID_RECORD_STATE."""
    sp = _partition()
    with pytest.raises(InvalidRecordStateError):
        sp.acknowledge("m1", [_ack(0, 0, ACCEPT)])
    sp.acquire("m1", [(0, 9)], 500)
    with pytest.raises(InvalidRequestError, match="first offset"):
        sp.acknowledge("m1", [_ack(10, 12, ACCEPT)])
    with pytest.raises(InvalidRequestError, match="last offset"):
        sp.acknowledge("m1", [_ack(8, 12, ACCEPT)])


def test_a_bad_batch_fails_the_whole_acknowledgement() -> None:
    """Kafka's `rollbackOrProcessStateUpdates`: an error in any batch rolls back every batch of the request."""
    sp = _partition()
    sp.acquire("m1", [(0, 4)], 500)
    sp.acquire("m2", [(5, 9)], 500)
    with pytest.raises(InvalidRecordStateError):
        sp.acknowledge("m1", [_ack(0, 4, ACCEPT), _ack(5, 5, ACCEPT)])
    assert _states(sp) == [(0, 4, RecordState.ACQUIRED, 1, "m1"), (5, 9, RecordState.ACQUIRED, 1, "m2")]
    assert sp.start_offset == 0


@pytest.mark.parametrize(
    "batches",
    [
        [_ack(5, 4, ACCEPT)],
        [_ack(0, 4, ACCEPT), _ack(3, 6, ACCEPT)],
        [_ack(5, 6, ACCEPT), _ack(0, 1, ACCEPT)],
        [_ack(0, 4)],
        [_ack(0, 4, ACCEPT, ACCEPT)],
        [_ack(0, 0, 4)],
        [_ack(0, 0, -1)],
    ],
    ids=["reversed", "overlapping", "out-of-order", "no-type", "types-not-per-offset", "renew", "negative"],
)
def test_malformed_acknowledgements_are_invalid_request(batches: list[AcknowledgementBatch]) -> None:
    """Kafka's `KafkaApis.validateAcknowledgementBatches`: INVALID_REQUEST before any record changes."""
    sp = _partition()
    sp.acquire("m1", [(0, 9)], 500)
    with pytest.raises(InvalidRequestError):
        sp.acknowledge("m1", batches)
    assert _states(sp) == [(0, 9, RecordState.ACQUIRED, 1, "m1")]


def test_a_batch_starting_at_the_last_offset_of_the_one_before_is_invalid_record_state() -> None:
    """Kafka's `validateAcknowledgementBatches` lets a batch start at the previous batch's last offset; that offset is
    then settled when the second batch reaches it, so Kafka's share-partition answers INVALID_RECORD_STATE and rolls
    the whole request back. A RENEW leaves its offset Acquired, so a batch after it may settle that offset."""
    sp = _partition()
    sp.acquire("m1", [(0, 9)], 500)
    with pytest.raises(InvalidRecordStateError) as refused:
        sp.acknowledge("m1", [_ack(0, 4, ACCEPT), _ack(4, 6, ACCEPT)])
    assert refused.value.offset == 4
    assert _states(sp) == [(0, 9, RecordState.ACQUIRED, 1, "m1")]
    sp.acknowledge("m1", [_ack(0, 4, RENEW), _ack(4, 6, ACCEPT)], renew=True)
    assert _states(sp) == [
        (0, 3, RecordState.ACQUIRED, 1, "m1"),
        (4, 6, RecordState.ACKNOWLEDGED, 1, None),
        (7, 9, RecordState.ACQUIRED, 1, "m1"),
    ]


def test_acknowledging_over_skipped_offsets_leaves_them_alone() -> None:
    """Kafka's `acknowledgeBatchRecords` walks only its cached batches: offsets that held no record are no error."""
    sp = _partition()
    sp.acquire("m1", [(0, 4)], 500)
    sp.acquire("m1", [(10, 14)], 500)
    sp.acknowledge("m1", [_ack(0, 14, ACCEPT)])
    assert (sp.start_offset, sp.in_flight()) == (15, ())


# --- release and lock expiry ---------------------------------------------------------------------------------


def test_renew_extends_the_members_lock_and_writes_nothing() -> None:
    """Kafka 4.2's RENEW (KIP-1222): the member's records stay Acquired, locked for the group's lock duration from the
    renewal; nothing durable changes, so nothing is written; records the member does not hold are
    INVALID_RECORD_STATE and RENEW in a request that does not renew is INVALID_REQUEST, both changing nothing."""
    clock = MockClock()
    sp = _partition(clock, record_lock_duration_ms=30_000)
    sp.acquire("m1", [(0, 9)], 500)
    sp.acquire("m2", [(10, 14)], 500)
    written = sp.summary()
    clock.sleep(20_000)
    sp.acknowledge("m1", [_ack(0, 4, RENEW)], renew=True)
    assert sp.summary() == written
    sp.acknowledge("m1", [_ack(5, 6, RENEW, ACCEPT)], renew=True)
    with pytest.raises(InvalidRequestError):
        sp.acknowledge("m1", [_ack(7, 7, RENEW)])
    with pytest.raises(InvalidRecordStateError):
        sp.acknowledge("m1", [_ack(10, 10, RENEW)], renew=True)
    clock.sleep(15_000)
    sp.maybe_expire_locks()
    assert _states(sp) == [
        (0, 5, RecordState.ACQUIRED, 1, "m1"),
        (6, 6, RecordState.ACKNOWLEDGED, 1, None),
        (7, 14, RecordState.AVAILABLE, 1, None),
    ]
    clock.sleep(15_000)
    sp.maybe_expire_locks()
    assert _states(sp)[0] == (0, 5, RecordState.AVAILABLE, 1, None)


def test_release_acquired_records_releases_only_that_members() -> None:
    """Kafka's `releaseAcquiredRecords`: the leaving member's records become Available, others' stay; the delivery
    count is unchanged (DeliveryCountOps.NO_OP)."""
    sp = _partition()
    sp.acquire("m1", [(0, 4)], 500)
    sp.acquire("m2", [(5, 9)], 500)
    sp.release_acquired_records("m1")
    assert _states(sp) == [(0, 4, RecordState.AVAILABLE, 1, None), (5, 9, RecordState.ACQUIRED, 1, "m2")]


def test_an_expired_lock_makes_records_available_to_another_member() -> None:
    """Kafka's `AcquisitionLockTimerTask` / `releaseAcquisitionLockOnTimeout`: at `share.record.lock.duration.ms`
    after acquisition the records become Available; the late holder's acknowledgement is INVALID_RECORD_STATE."""
    clock = MockClock()
    sp = _partition(clock, record_lock_duration_ms=15000)
    sp.acquire("m1", [(0, 4)], 500)
    assert sp.next_deadline_ms() == clock.milliseconds() + 15000
    clock.sleep(14999)
    sp.maybe_expire_locks()
    assert _states(sp) == [(0, 4, RecordState.ACQUIRED, 1, "m1")]
    clock.sleep(1)
    assert sp.acquire("m2", [(0, 4)], 500) == [AcquiredRecords(0, 4, 2)]
    with pytest.raises(InvalidRecordStateError):
        sp.acknowledge("m1", [_ack(0, 4, ACCEPT)])
    sp.acknowledge("m2", [_ack(0, 4, ACCEPT)])
    assert sp.start_offset == 5


def test_an_expired_lock_at_the_delivery_count_limit_archives() -> None:
    """Kafka's `releaseAcquisitionLockOnTimeoutForCompleteBatch`: the same rule as a release, so a record whose
    consumer never answers is archived after `group.share.delivery.count.limit` deliveries."""
    clock = MockClock()
    sp = _partition(clock, delivery_count_limit=2, record_lock_duration_ms=15000)
    sp.acquire("m1", [(0, 0)], 500)
    clock.sleep(15000)
    assert sp.acquire("m2", [(0, 0)], 500) == [AcquiredRecords(0, 0, 2)]
    clock.sleep(15000)
    sp.maybe_expire_locks()
    assert (sp.start_offset, sp.in_flight(), sp.next_deadline_ms()) == (1, (), None)


def test_the_delivery_tally_counts_redeliveries_lock_timeouts_and_archivings_by_reason() -> None:
    """The metrics' tally of records as their deliveries end: a lock expiry (Kafka's AcquisitionLockTimeoutPerSec
    marks its records), every acquisition after the first (redelivered), a REJECT and the delivery count limit (each
    an archiving of its own reason). Accepts, first deliveries and GAPs count in none; a tally handed to a new
    share-partition of the group keeps counting from its totals."""
    clock = MockClock()
    sp = _partition(clock, delivery_count_limit=2, record_lock_duration_ms=15000)
    sp.acquire("m1", [(0, 9)], 500)
    assert sp.tally == DeliveryTally()
    clock.sleep(15000)
    sp.maybe_expire_locks()
    assert sp.tally == DeliveryTally(lock_timeouts=10)
    assert sp.acquire("m2", [(0, 9)], 500) == [AcquiredRecords(0, 9, 2)]
    assert sp.tally == DeliveryTally(redelivered=10, lock_timeouts=10)
    sp.acknowledge("m2", [_ack(0, 1, ACCEPT), _ack(2, 4, REJECT), _ack(5, 5, GAP), _ack(6, 9, RELEASE)])
    assert sp.tally == DeliveryTally(redelivered=10, rejected=3, delivery_limit=4, lock_timeouts=10)
    again = SharePartition(clock, state=sp.state(), tally=sp.tally)
    again.acquire("m3", [(10, 11)], 500)
    again.acknowledge("m3", [_ack(10, 11, REJECT)])
    assert again.tally == DeliveryTally(redelivered=10, rejected=5, delivery_limit=4, lock_timeouts=10)


def test_the_group_lock_duration_applies_to_the_next_acquisition() -> None:
    """Kafka's `scheduleAcquisitionLockTimeout` reads the group's `share.record.lock.duration.ms` at each
    acquisition."""
    clock = MockClock()
    sp = _partition(clock, record_lock_duration_ms=30000)
    sp.acquire("m1", [(0, 0)], 500)
    sp.config = ResolvedShareConfig(record_lock_duration_ms=60000)
    sp.acquire("m1", [(1, 1)], 500)
    deadlines = [r.deadline_ms for r in sp.in_flight()]
    assert deadlines == [clock.milliseconds() + 30000, clock.milliseconds() + 60000]


def test_a_log_start_offset_past_spso_moves_it_and_drops_what_lies_below() -> None:
    """Kafka's `updateCacheAndOffsets`: records below a new log start offset are never delivered again (Available
    ones archived, Acquired ones archived when released), and the holder's acknowledgement of them is skipped."""
    sp = _partition()
    sp.acquire("m1", [(0, 4)], 500)
    sp.acquire("m2", [(5, 9)], 500)
    sp.acknowledge("m1", [_ack(0, 4, RELEASE)])
    sp.update_log_start_offset(7)
    assert (sp.start_offset, sp.end_offset) == (7, 10)
    assert _states(sp) == [(7, 9, RecordState.ACQUIRED, 1, "m2")]
    sp.acknowledge("m2", [_ack(5, 9, ACCEPT)])
    assert (sp.start_offset, sp.in_flight()) == (10, ())
    sp.update_log_start_offset(3)
    assert sp.start_offset == 10
    sp.update_log_start_offset(20)
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (20, 20, 20)


# --- initialization and the durable state --------------------------------------------------------------------


@pytest.mark.parametrize(("reset", "start"), [(LATEST, 120), (EARLIEST, 100)])
def test_an_uninitialized_share_partition_starts_where_share_auto_offset_reset_says(reset: str, start: int) -> None:
    """Kafka's `startOffsetDuringInitialization`: no persisted start offset (-1), so `latest` (the default) starts
    at the log end and `earliest` at the log start."""
    sp = SharePartition(
        MockClock(), ResolvedShareConfig(auto_offset_reset=reset), log_start_offset=100, log_end_offset=120
    )
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (start, start, start)


def test_the_written_state_holds_acquired_records_as_available() -> None:
    """Kafka's `ShareSnapshotValue` batches: Available (0), Acknowledged (2), Archived (4) with delivery counts, SPSO
    as the start offset; an Acquired record is written Available with its count before the acquisition, since
    Kafka writes no state when it acquires (no lock survives a restart), and the last ones never delivered before
    (6-9) are left out, as if never read, so acquiring new records changes no durable state."""
    sp = _partition()
    sp.acquire("m1", [(0, 9)], 500)
    sp.acknowledge("m1", [_ack(0, 1, ACCEPT), _ack(3, 3, ACCEPT), _ack(4, 4, REJECT), _ack(5, 5, RELEASE)])
    state = sp.state()
    assert state.start_offset == 2
    assert state.state_batches == (
        StateBatch(2, 2, 0, 0),
        StateBatch(3, 3, 2, 1),
        StateBatch(4, 4, 4, 1),
        StateBatch(5, 5, 0, 1),
    )
    sp.acquire("m1", [(10, 19)], 500)
    assert sp.state() == state


def test_a_restart_from_the_written_state_redelivers_no_accepted_record_and_loses_no_other() -> None:
    """KIP-932's durability: the share-partition rebuilt from its state (Kafka's `maybeInitialize`) delivers every
    record not accepted again, with the delivery counts written, and no accepted or archived one."""
    sp = _partition()
    sp.acquire("m1", [(0, 9)], 500)
    sp.acknowledge("m1", [_ack(0, 1, ACCEPT), _ack(3, 3, ACCEPT), _ack(4, 4, REJECT), _ack(5, 5, RELEASE)])
    written = ShareSnapshot.from_bytes(ShareSnapshot(sp.state()).to_bytes()).state
    restarted = SharePartition(MockClock(), ResolvedShareConfig(), state=written, log_start_offset=0, log_end_offset=50)
    assert (restarted.start_offset, restarted.end_offset) == (2, 6)
    acquired = restarted.acquire("m2", [(0, 14)], 500)
    assert acquired == [AcquiredRecords(2, 2, 1), AcquiredRecords(5, 5, 2), AcquiredRecords(6, 14, 1)]
    delivered = {o for r in acquired for o in range(r.first_offset, r.last_offset + 1)}
    assert delivered.isdisjoint({0, 1, 3, 4})


def test_a_restart_keeps_the_state_epoch_and_a_fully_done_start_offset() -> None:
    """Kafka's `maybeInitialize` sets `stateEpoch` and the start offset read back, and moves SPSO over a done
    prefix at once (`maybeUpdateCachedStateAndOffsets`)."""
    state = ShareGroupState(7, 5, (StateBatch(5, 9, 2, 1), StateBatch(10, 11, 0, 3)))
    sp = SharePartition(MockClock(), ResolvedShareConfig(), state=state)
    assert (sp.state_epoch, sp.start_offset, sp.end_offset) == (7, 10, 12)
    assert sp.state() == ShareGroupState(7, 10, (StateBatch(10, 11, 0, 3),))


# --- the state as last written (DescribeShareGroupOffsets) ---------------------------------------------------


def test_nothing_is_written_before_records_settle_and_an_acquisition_writes_nothing() -> None:
    """Kafka's share-partition writes its state only when records settle (`rollbackOrProcessStateUpdates`): before
    that the share-group state is uninitialized (start offset -1)."""
    sp = _partition()
    assert sp.summary() == StateSummary(-1, 0, written_by_leader=False)
    sp.acquire("m1", [(0, 4)], 500)
    assert sp.summary() == StateSummary(-1, 0, written_by_leader=False)


def test_an_acknowledgement_writes_the_start_offset_from_before_it_moves() -> None:
    """Kafka writes the state, then moves SPSO over what the write settled: the written start offset lags by one
    write, while the written delivery complete count already counts the records just settled."""
    sp = _partition()
    sp.acquire("m1", [(0, 0)], 500)
    sp.acknowledge("m1", [_ack(0, 0, ACCEPT)])
    assert (sp.start_offset, sp.summary()) == (1, StateSummary(0, 1, written_by_leader=True))
    sp.acquire("m1", [(1, 5)], 500)
    sp.acknowledge("m1", [_ack(1, 2, ACCEPT), _ack(4, 4, REJECT)])
    assert (sp.start_offset, sp.summary()) == (3, StateSummary(1, 3, written_by_leader=True))
    sp.acknowledge("m1", [_ack(3, 3, RELEASE), _ack(5, 5, ACCEPT)])
    assert (sp.start_offset, sp.summary()) == (3, StateSummary(3, 2, written_by_leader=True))


def test_an_acknowledgement_of_settled_records_only_writes_nothing() -> None:
    """Batches wholly below SPSO are skipped, and a request that changes nothing writes nothing (Kafka's empty
    `stateBatches`)."""
    sp = _partition()
    sp.acquire("m1", [(0, 1)], 500)
    sp.acknowledge("m1", [_ack(0, 1, ACCEPT)])
    written = sp.summary()
    sp.acknowledge("m1", [_ack(0, 1, REJECT)])
    assert sp.summary() == written == StateSummary(0, 2, written_by_leader=True)


def test_a_release_and_a_lock_expiry_write_the_state() -> None:
    clock = MockClock()
    sp = _partition(clock, record_lock_duration_ms=1000)
    sp.acquire("m1", [(0, 1)], 500)
    sp.acquire("m2", [(2, 3)], 500)
    sp.acknowledge("m2", [_ack(3, 3, ACCEPT)])
    assert sp.summary() == StateSummary(0, 1, written_by_leader=True)
    sp.release_acquired_records("m1")
    assert sp.summary() == StateSummary(0, 1, written_by_leader=True)
    sp.acquire("m1", [(0, 1)], 500)
    sp.acknowledge("m1", [_ack(0, 1, ACCEPT)])
    assert (sp.start_offset, sp.summary()) == (2, StateSummary(0, 3, written_by_leader=True))
    clock.sleep(1000)
    assert sp.summary() == StateSummary(2, 1, written_by_leader=True)
    assert _states(sp) == [(2, 2, RecordState.AVAILABLE, 1, None), (3, 3, RecordState.ACKNOWLEDGED, 1, None)]


@pytest.mark.parametrize("start", [7, 0, -1, -5])
def test_a_share_partition_starting_at_an_altered_offset_reports_it_as_written(start: int) -> None:
    """AlterShareGroupOffsets: Kafka takes any start offset and reports it as given (-1: uninitialized) until the
    share-partition writes; a negative one starts at the log start offset."""
    sp = SharePartition.starting_at(MockClock(), start)
    assert sp.summary() == StateSummary(start, 0, written_by_leader=False)
    assert (sp.start_offset, sp.end_offset, sp.in_flight()) == (max(start, 0), max(start, 0), ())
    sp.update_log_start_offset(3)
    assert sp.start_offset == max(start, 3)
