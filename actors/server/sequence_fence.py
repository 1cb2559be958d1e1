"""Keeps an idempotent producer's pipelined appends to a partition from reaching a leader out of sequence when the
route to the leader changes under them.

A Kafka client pipelines its Produce requests (librdkafka up to `max.in.flight`, 5 with idempotence) over one
connection to the partition's leader. When that broker fails request k with a retriable error, it fails the later
ones too (it is still not the leader, or it is gone), so the client's retry starts again at k. A listener proxies
every partition over one connection, and its route to a partition is looked up again after a retriable failure: a
request k+2 submitted after k failed would reach the new leader before k's retry, which answers it
OUT_OF_ORDER_SEQUENCE_NUMBER. librdkafka reads that as sequence numbers lost by the failed requests and restarts
every unacknowledged message in a new producer epoch, from sequence 0 (`rd_kafka_idemp_drain_epoch_bump`), so
one the old leader had written and replicated before it failed (answered with an error the listener could not
tell from a refusal) is written again.

`SequenceFences` restores the broker's behaviour. Once an append of producer p (epoch e) starting at sequence s fails
with a retriable error, a later append of p in e to the same partition starting after s is refused with
`NotLeaderOrFollowerError` without being sent, until p's append starting at or before s comes (the retry),
p moves to another epoch, or `FENCE_EXPIRY_S` passed (a client that gave up on s is then answered by the leader
itself). Batches of no idempotent producer (no producer id or no sequence) are never fenced.

The route forgets a failed leader as the failed append's answer arrives, possibly on another thread, and the fence
is set only when that answer reaches the append's caller. So an append of the same producer may find the leader
looked up again while earlier appends of its producer still wait for answers from the old one, which will fail
(seen through a listener: librdkafka's retries 102-104 answered NOT_LEADER_OR_FOLLOWER by the old leader, 105
OUT_OF_ORDER_SEQUENCE_NUMBER by the new one, then a new producer epoch). The route therefore checks the fence right
before sending, after any lookup, and records each append while it waits for its answer (`sending`, `answered`): one
whose leader is not the one every unanswered append of its producer went to is refused the same way, unsent, as
Kafka's old leader refuses every request pipelined behind the failed one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from storage.errors import CorruptRecordError, NotLeaderOrFollowerError, RaybrokerError
from storage.records.layout import SEQUENCE_MODULUS
from storage.records.record_batch import RecordBatch

# Kafka's `request.timeout.ms` default: a retry comes well within it, as the client's own request timeout does.
FENCE_EXPIRY_S = 30.0

PartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class BatchProducer:
    """The idempotent producer of an append and the sequence its first batch starts at."""

    producer_id: int
    producer_epoch: int
    first_sequence: int


def batch_producer(batches: bytes | bytearray | memoryview) -> BatchProducer | None:
    """The producer of the first v2 batch in `batches`, or None when it has no producer id or no sequence (or
    the bytes are no v2 batch: the leader's validation answers for those)."""
    try:
        batch = RecordBatch(memoryview(batches))
    except CorruptRecordError:
        return None
    if batch.producer_id < 0 or batch.base_sequence < 0:
        return None
    return BatchProducer(batch.producer_id, batch.producer_epoch, batch.base_sequence)


def _after(sequence: int, other: int) -> bool:
    """Whether `sequence` comes after `other`, sequences wrapping at 2**31 - 1 to 0 as Kafka's do."""
    return 0 < (sequence - other) % SEQUENCE_MODULUS < SEQUENCE_MODULUS // 2


@dataclass(frozen=True, slots=True)
class _Fence:
    epoch: int
    sequence: int
    since_s: float


class SequenceFences:
    """The fences of one listener's appends (see the module docstring); used from one event loop."""

    def __init__(self, expiry_s: float = FENCE_EXPIRY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._expiry_s = expiry_s
        self._clock = clock
        self._fences: dict[tuple[str, int, int], _Fence] = {}
        # Per partition and producer: the leader its unanswered appends went to, and how many there are.
        self._unanswered: dict[tuple[str, int, int], tuple[object, int]] = {}

    def check(self, key: PartitionKey, producer: BatchProducer) -> None:
        """Raises `NotLeaderOrFollowerError` if `producer`'s append to `key` must wait for the retry of an earlier
        one that failed; lifts the fence when this append is that retry (or the fence no longer holds)."""
        fence_key = (*key, producer.producer_id)
        fence = self._fences.get(fence_key)
        if fence is None:
            return
        if (
            fence.epoch != producer.producer_epoch
            or not _after(producer.first_sequence, fence.sequence)
            or self._clock() - fence.since_s >= self._expiry_s
        ):
            del self._fences[fence_key]
            return
        raise NotLeaderOrFollowerError(
            f"producer {producer.producer_id}'s append to {key[0]}-{key[1]} from sequence {fence.sequence} failed; "
            f"the one from sequence {producer.first_sequence} waits for its retry"
        )

    def failed(self, key: PartitionKey, producer: BatchProducer, error: RaybrokerError) -> None:
        """Records the failure of `producer`'s append to `key`: a retriable one fences the later appends. Expired
        fences are dropped first: a producer that retried through another listener never lifts its fence here."""
        if not error.retriable:
            return
        now_s = self._clock()
        for stale in [name for name, fence in self._fences.items() if now_s - fence.since_s >= self._expiry_s]:
            del self._fences[stale]
        fence_key = (*key, producer.producer_id)
        fence = self._fences.get(fence_key)
        if (
            fence is not None
            and fence.epoch == producer.producer_epoch
            and not _after(fence.sequence, producer.first_sequence)
        ):
            return
        self._fences[fence_key] = _Fence(producer.producer_epoch, producer.first_sequence, now_s)

    def sending(self, key: PartitionKey, producer: BatchProducer, leader: object) -> None:
        """Records `producer`'s append to `key` as sent to `leader` (compared by identity: each lookup makes a new
        one) until `answered`; raises `NotLeaderOrFollowerError` instead if an earlier append of the producer to
        `key` still waits for its answer from another leader (see the module docstring)."""
        name = (*key, producer.producer_id)
        unanswered = self._unanswered.get(name)
        if unanswered is None:
            self._unanswered[name] = (leader, 1)
            return
        sent_to, count = unanswered
        if sent_to is not leader:
            raise NotLeaderOrFollowerError(
                f"producer {producer.producer_id}'s append to {key[0]}-{key[1]} from sequence "
                f"{producer.first_sequence} waits for the answers of its earlier appends from the previous leader"
            )
        self._unanswered[name] = (leader, count + 1)

    def answered(self, key: PartitionKey, producer: BatchProducer) -> None:
        """An append `sending` recorded has its answer (after `failed`, when it failed)."""
        name = (*key, producer.producer_id)
        leader, count = self._unanswered[name]
        if count == 1:
            del self._unanswered[name]
        else:
            self._unanswered[name] = (leader, count - 1)
