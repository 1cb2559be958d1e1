"""`SequenceFences` against Kafka's idempotent-producer rules: after a retriable failure of a producer's append
from sequence s, its later appends to the partition wait for the retry of s; everything else passes."""

from __future__ import annotations

import pytest

from actors.server.sequence_fence import FENCE_EXPIRY_S, BatchProducer, SequenceFences, batch_producer
from storage.errors import (
    BrokerNotAvailableError,
    InvalidRecordError,
    NotLeaderOrFollowerError,
    OutOfOrderSequenceError,
)
from storage.records.layout import MAGIC_OFFSET, SEQUENCE_MODULUS
from storage.records.record_batch import RecordBatchBuilder
from tests.storage.builders import simple_batch

KEY = ("orders", 3)
LAST_SEQUENCE = SEQUENCE_MODULUS - 1


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def producer(sequence: int, producer_id: int = 7, epoch: int = 0) -> BatchProducer:
    return BatchProducer(producer_id, epoch, sequence)


def fenced_at(sequence: int, clock: Clock | None = None) -> SequenceFences:
    fences = SequenceFences(clock=clock or Clock())
    fences.failed(KEY, producer(sequence), BrokerNotAvailableError("the leader's process is gone"))
    return fences


def refused(fences: SequenceFences, who: BatchProducer, key: tuple[str, int] = KEY) -> bool:
    try:
        fences.check(key, who)
    except NotLeaderOrFollowerError as exc:
        assert exc.retriable
        return True
    return False


def test_batch_producer_reads_the_first_batch_header() -> None:
    builder = RecordBatchBuilder(producer_id=123_456_789_012, producer_epoch=4, base_sequence=77)
    builder.append(b"k", b"v", timestamp=1)
    second = simple_batch(2)
    assert batch_producer(builder.build() + second) == BatchProducer(123_456_789_012, 4, 77)
    assert batch_producer(memoryview(builder.build())) == BatchProducer(123_456_789_012, 4, 77)


@pytest.mark.parametrize(
    "batches",
    [
        pytest.param(simple_batch(3), id="no producer id"),
        pytest.param(b"", id="empty"),
        pytest.param(b"\x00" * 20, id="short"),
    ],
)
def test_batch_producer_is_none_without_an_idempotent_v2_batch(batches: bytes) -> None:
    assert batch_producer(batches) is None


def test_batch_producer_is_none_for_a_producer_id_without_sequence_or_another_magic() -> None:
    builder = RecordBatchBuilder(producer_id=5, producer_epoch=0, base_sequence=-1)
    builder.append(b"k", b"v", timestamp=1)
    assert batch_producer(builder.build()) is None
    idempotent = RecordBatchBuilder(producer_id=5, producer_epoch=0, base_sequence=0)
    idempotent.append(b"k", b"v", timestamp=1)
    legacy = bytearray(idempotent.build())
    legacy[MAGIC_OFFSET] = 1
    assert batch_producer(legacy) is None


def test_later_appends_wait_for_the_retry_of_the_failed_one() -> None:
    fences = fenced_at(102)
    assert refused(fences, producer(103))
    assert refused(fences, producer(104))
    assert not refused(fences, producer(102)), "the retry itself passes"
    assert not refused(fences, producer(103)), "the retry lifted the fence"
    assert not refused(fences, producer(104))


def test_a_retry_from_an_earlier_sequence_lifts_the_fence_too() -> None:
    fences = fenced_at(102)
    assert not refused(fences, producer(100))
    assert not refused(fences, producer(103))


def test_the_earliest_failure_holds_the_fence() -> None:
    fences = fenced_at(102)
    fences.failed(KEY, producer(104), BrokerNotAvailableError("later in the same pipeline"))
    assert refused(fences, producer(103))
    fences.failed(KEY, producer(101), NotLeaderOrFollowerError("an earlier one failed last"))
    assert refused(fences, producer(102))
    assert not refused(fences, producer(101))


def test_non_retriable_failures_fence_nothing() -> None:
    fences = SequenceFences(clock=Clock())
    for error in (OutOfOrderSequenceError("gap"), InvalidRecordError("a control batch from a client")):
        fences.failed(KEY, producer(102), error)
    assert not refused(fences, producer(105))


def test_other_producers_partitions_and_epochs_pass() -> None:
    fences = fenced_at(102)
    assert not refused(fences, producer(500, producer_id=8)), "another producer"
    assert not refused(fences, producer(500), key=("orders", 4)), "another partition"
    assert refused(fences, producer(103))
    assert not refused(fences, producer(0, epoch=1)), "a bumped epoch starts over"
    assert not refused(fences, producer(1, epoch=1))


def test_a_fence_expires_when_the_retry_never_comes() -> None:
    clock = Clock()
    fences = fenced_at(102, clock)
    clock.now_s += FENCE_EXPIRY_S - 0.001
    assert refused(fences, producer(103))
    clock.now_s += 0.001
    assert not refused(fences, producer(103))
    assert not refused(fences, producer(104))


def test_sequences_wrap_at_int32_max() -> None:
    fences = fenced_at(LAST_SEQUENCE)
    assert refused(fences, producer(0)), "0 follows 2**31 - 1"
    assert refused(fences, producer(5))
    assert not refused(fences, producer(LAST_SEQUENCE - 3))
    wrapped = fenced_at(2)
    assert not refused(wrapped, producer(LAST_SEQUENCE)), "2**31 - 1 comes before 2"


def test_expired_fences_are_dropped_when_another_append_fails() -> None:
    """A producer whose retry went through another listener never comes back to lift its fence here."""
    clock = Clock()
    fences = SequenceFences(clock=clock)
    for partition in range(100):
        fences.failed(("orders", partition), producer(10), BrokerNotAvailableError("failover"))
    clock.now_s += FENCE_EXPIRY_S
    fences.failed(KEY, producer(102), BrokerNotAvailableError("the next failover"))
    assert list(fences._fences) == [(*KEY, 7)]
    assert refused(fences, producer(103))


def test_an_append_to_another_leader_waits_until_its_producers_earlier_ones_are_answered() -> None:
    fences = SequenceFences(clock=Clock())
    old_leader, new_leader = object(), object()
    fences.sending(KEY, producer(1), old_leader)
    fences.sending(KEY, producer(2), old_leader)
    with pytest.raises(NotLeaderOrFollowerError):
        fences.sending(KEY, producer(3), new_leader)
    fences.sending(KEY, producer(3, producer_id=8), new_leader)
    fences.sending(("orders", 4), producer(3), new_leader)
    fences.answered(KEY, producer(1))
    with pytest.raises(NotLeaderOrFollowerError):
        fences.sending(KEY, producer(3), new_leader)
    fences.answered(KEY, producer(2))
    fences.sending(KEY, producer(3), new_leader)
    fences.sending(KEY, producer(4), new_leader)
