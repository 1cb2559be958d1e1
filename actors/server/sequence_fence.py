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
