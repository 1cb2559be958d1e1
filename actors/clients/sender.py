"""The producer's sender thread (Kafka's `Sender`): drains closed batches to the partition actors and answers
their futures.

- Requests: the closed batches of one partition travel together in one `append` call, up to
  `max_request_size` bytes; at most `max_in_flight_requests_per_connection` calls per partition are in
  flight (idempotent: at most 5 batches in all, the partition's dedup window). The calls go the way every
  client's appends go (`actors.server.append_route`: the leader's append channel or a Ray call, the wait of
  `acks=all`), in submission order, so batches land in send order.
- Idempotence (`enable_idempotence`): the sender takes a producer id from the controller (epoch 0) and
  numbers each partition's batches with sequences, assigned when a batch is first sent and kept by its
  retries, so a retry of a batch that was written but whose answer was lost is recognised by the partition
  as a duplicate and answered with the original offsets.
- Retries: a call that fails with a retriable error (`storage.errors`: an actor dead or restarting, a leader
  moved, too few replicas in sync) is retried after an exponential backoff (`retry_backoff_ms` doubling up to
  `retry_backoff_max_ms`, Kafka's KIP-580), at most `retries` times and within `delivery_timeout_ms`
  of the batch's creation. When a call of a partition fails, no new call goes to that partition until
  its calls in flight have answered; then the failed batches are sent again, in sequence order. Later
  calls refused with `OutOfOrderSequenceError` only because an earlier one failed are resent too. A call
  refused for any other reason wrote nothing; if it held several batches, each is resent alone to find
  the bad one, and a batch refused alone fails its futures with the typed error (`RecordTooLargeError`,
  `InvalidRecordError`, ...). Once a batch of a partition has failed for good, the partition's sequence
  is no longer known, so its remaining batches continue under a fresh producer id from sequence 0
  (Kafka's idempotent-producer reset; the other partitions keep theirs).
- Answers: a partition's futures are answered in the order its batches were first sent, as Kafka's `send`
  promises for its callbacks. A call can succeed before an earlier one's failure is resolved (the earlier call
  was written on a leader that died before answering, and the new leader the route found took the later call);
  the later batches' answers wait until the earlier ones' resent copies are answered.
- Transactions (a `TransactionManager`): the producer id and epoch are the transaction manager's, and every batch
  carries the transactional flag. Before a partition's first batch of a transaction the manager adds the partition
  to it (AddPartitionsToTxn, one call for every new partition of the pass); if that is refused, or once the
  transaction is in an error state, the partition's batches fail with the manager's error without being sent. A
  batch sent and failed for good is reported to the manager (the transaction becomes abortable, or the producer
  fenced) instead of taking a fresh producer id. When the manager's epoch changes (an abort that bumps it, a
  timed-out transaction resumed), each partition's sequence starts again at 0 once its calls in flight answered.

Only the sender thread touches its per-partition state; Ray's callbacks only flag a call done and set
`wakeup`, which the thread waits on between passes (with the next linger or backoff deadline as timeout).
"""

from __future__ import annotations

import itertools
import logging
import sys
import threading
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from functools import partial

from actors.calls import call
from actors.clients.broker import Broker
from actors.clients.producer_batch import ProducerBatch
from actors.clients.record_accumulator import ReadyCheck, RecordAccumulator
from actors.clients.transaction_manager import TransactionManager
from actors.server.append_route import AppendCall, AppendRoute
from storage.clock import Clock
from storage.errors import (
    InvalidRequestError,
    OutOfOrderSequenceError,
    RaybrokerError,
    RequestTimedOutError,
    is_retriable,
)
from storage.partition.log import LogAppendInfo
from storage.partition.producer_state import NUM_BATCHES_TO_RETAIN
from storage.records.record_batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, SEQUENCE_MODULUS
from storage.topic_partition import TopicPartition

logger = logging.getLogger(__name__)

# A batch's outcome: (first offset, LogAppendTime or -1) once written, else the error that failed it.
Completion = tuple[ProducerBatch, tuple[int, int] | BaseException]


@dataclass(eq=False)
class _InFlight:
    """One `append` call and the batches it carries, in order."""

    call: AppendCall
    batches: list[ProducerBatch]
    done: bool = False


@dataclass(eq=False)
class _PartitionState:
    """The sender's state for one partition: its producer id and next sequence, its calls in flight, the failed
    calls not yet resolved, and when it may be sent to again after a backoff."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    next_sequence: int = 0
    in_flight: deque[_InFlight] = field(default_factory=deque)
    # The batches of each failed call, with its error, in the order the calls were sent.
    failed: list[tuple[list[ProducerBatch], BaseException]] = field(default_factory=list)
    # Batches drained but not sent (the leader's lookup failed), with its error. They were drained after every
    # call in flight, whose failures may come in later: they are resolved after those, so that a batch never
    # gets a sequence below one sent before it (see `Sender._collect`).
    unsent: tuple[list[ProducerBatch], BaseException] | None = None
    retry_at_ns: int = 0
    # The batches drained and not yet answered, by id, in the order they were first drained; and the outcomes
    # that wait for an earlier batch's (see `Sender._in_send_order`).
    unanswered: OrderedDict[int, ProducerBatch] = field(default_factory=OrderedDict)
    held: dict[int, tuple[int, int] | BaseException] = field(default_factory=dict)

    @property
    def failing(self) -> bool:
        """Whether batches of the partition failed and wait to be resolved."""
        return bool(self.failed) or self.unsent is not None


class Sender:
    """Sends the accumulator's batches from a thread of its own; see the module docstring."""

    def __init__(
        self,
        accumulator: RecordAccumulator,
        broker: Broker,
        wakeup: threading.Event,
        *,
        enable_idempotence: bool,
        acks: int,
        retries: int,
        retry_backoff_ms: int,
        retry_backoff_max_ms: int,
        delivery_timeout_ms: int,
        max_in_flight_requests_per_connection: int,
        max_request_size: int,
        clock: Clock,
        transactions: TransactionManager | None = None,
    ) -> None:
        self._accumulator = accumulator
        self._broker = broker
        self._wakeup = wakeup
        self._idempotent = enable_idempotence
        self._acks = acks
        self._retries = retries
        self._retry_backoff_ms = retry_backoff_ms
        self._retry_backoff_max_ms = max(retry_backoff_ms, retry_backoff_max_ms)
        self._delivery_timeout_ns = delivery_timeout_ms * 1_000_000
        self._max_in_flight = max_in_flight_requests_per_connection
        self._max_request_size = max_request_size
        self._clock = clock
        self._transactions = transactions
        self.producer_id = self._new_producer_id() if enable_idempotence and transactions is None else NO_PRODUCER_ID
        self._partitions: dict[TopicPartition, _PartitionState] = {}
        self._route = AppendRoute()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="raybroker-producer-sender", daemon=True)

    @property
    def running(self) -> bool:
        """False once the sender was told to stop, or stopped on an unexpected error."""
        return not self._stopping

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Stops the thread after its current pass and waits for it; batches not answered stay incomplete."""
        self._stopping = True
        self._wakeup.set()
        self._thread.join()
        self._route.close()

    def _new_producer_id(self) -> int:
        return call(self._broker.controller.allocate_producer_id.remote())

    def _run(self) -> None:
        try:
            while True:
                # Cleared before the state is read, so a wake-up arriving while this pass runs (`close`'s
                # included) is not lost.
                self._wakeup.clear()
                if self._stopping:
                    return
                now = self._clock.nanoseconds()
                completions = self._collect(now)
                check = self._accumulator.ready(now)
                completions = self._in_send_order(completions + self._send(check.partitions, now))
                timeout = 0.0 if completions else self._wait_seconds(check, now)
                self._complete(completions)
                if timeout != 0.0:
                    self._wakeup.wait(timeout)
        except BaseException as exc:
            logger.exception("producer sender thread failed")
            self._stopping = True
            self._accumulator.abort_incomplete_batches(exc)
            raise

    def _wait_seconds(self, check: ReadyCheck, now: int) -> float | None:
        """Time until the next linger deadline or retry backoff; None if nothing is waiting on time."""
        deadlines = [] if check.next_linger_deadline_ns is None else [check.next_linger_deadline_ns]
        for state in self._partitions.values():
            if state.failing:
                if not state.in_flight:
                    return 0.0
            elif state.retry_at_ns > now:
                deadlines.append(state.retry_at_ns)
        if not deadlines:
            return None
        return max(0, min(deadlines) - now) / 1e9

    def _state(self, tp: TopicPartition) -> _PartitionState:
        state = self._partitions.get(tp)
        if state is None:
            if self._transactions is not None:
                producer_id, epoch = self._transactions.identity
            else:
                producer_id, epoch = self.producer_id, 0 if self._idempotent else NO_PRODUCER_EPOCH
            state = self._partitions[tp] = _PartitionState(tp[0], tp[1], producer_id, epoch)
        return state

    # --- sending ---------------------------------------------------------------------------------

    def _send(self, partitions: list[TopicPartition], now: int) -> list[Completion]:
        """One `append` call after another for each partition with closed batches, as its room allows; the
        batches a transaction refuses fail at once (returned)."""
        refused: list[Completion] = []
        if self._transactions is not None:
            partitions, refused = self._transaction_partitions(partitions)
        for tp in partitions:
            state = self._state(tp)
            if state.failing or now < state.retry_at_ns:
                continue
            while (room := self._batch_room(state)) > 0:
                batches = self._drain(state, room, self._max_request_size)
                if not batches:
                    break
                try:
                    leader = self._route.leader(state.topic, state.partition)
                    payload = self._build(state, batches)
                except RaybrokerError as exc:
                    # Nothing was sent: the batches are judged like those of a failed call, after the calls in flight.
                    state.unsent = (batches, exc)
                    break
                flight = _InFlight(self._route.send(leader, state.topic, state.partition, payload, self._acks), batches)
                state.in_flight.append(flight)
                flight.call.add_done_callback(partial(self._on_call_done, flight))
        return refused

    def _transaction_partitions(
        self, partitions: list[TopicPartition]
    ) -> tuple[list[TopicPartition], list[Completion]]:
        """The partitions that may be sent to now, in the transaction (added first if new), and the batches of
        those the transaction refuses, failed with its error. A partition whose producer epoch changed waits for
        its calls in flight, then starts its sequence again."""
        assert self._transactions is not None
        identity = self._transactions.identity
        ready: list[TopicPartition] = []
        for tp in partitions:
            state = self._state(tp)
            if (state.producer_id, state.producer_epoch) != identity:
                if state.in_flight or state.failing:
                    continue
                state.producer_id, state.producer_epoch = identity
                state.next_sequence = 0
            ready.append(tp)
        error = self._transactions.add_partitions(ready, self._delivery_timeout_ns / 1e9) if ready else None
        if error is None:
            return ready, []
        refused: list[Completion] = []
        for tp in ready:
            while batches := self._drain(self._state(tp), sys.maxsize, sys.maxsize):
                refused.extend((batch, error) for batch in batches)
        return [], refused

    def _drain(self, state: _PartitionState, max_batches: int, max_bytes: int) -> list[ProducerBatch]:
        """The partition's next closed batches from the accumulator, each noted in its send order the first time."""
        batches = self._accumulator.drain((state.topic, state.partition), max_batches, max_bytes)
        for batch in batches:
            state.unanswered.setdefault(id(batch), batch)
        return batches

    def _batch_room(self, state: _PartitionState) -> int:
        """How many more batches the partition may be sent now. An idempotent producer's partition remembers its
        last NUM_BATCHES_TO_RETAIN (5) batches, so at most 5 may be unacknowledged, however many calls carry
        them: a retry of an older one that was written would be refused (`OutOfOrderSequenceError`), not
        deduplicated. Without idempotence only `max_request_size` bounds a call."""
        if len(state.in_flight) >= self._max_in_flight:
            return 0
        if not self._idempotent:
            return sys.maxsize
        return NUM_BATCHES_TO_RETAIN - sum(len(flight.batches) for flight in state.in_flight)

    def _build(self, state: _PartitionState, batches: list[ProducerBatch]) -> bytes:
        """The call's bytes. A batch sent for the first time gets the partition's producer id, epoch and next
        sequence; a resent batch keeps its bytes, so the partition can recognise it."""
        if self._idempotent and state.producer_id == NO_PRODUCER_ID and any(b.payload is None for b in batches):
            state.producer_id = self._new_producer_id()
        for batch in batches:
            if batch.payload is None:
                base_sequence = NO_SEQUENCE
                if self._idempotent:
                    base_sequence = state.next_sequence
                    state.next_sequence = (state.next_sequence + batch.record_count) % SEQUENCE_MODULUS
                batch.payload = batch.encode(
                    state.producer_id, state.producer_epoch, base_sequence, self._transactions is not None
                )
                batch.producer_epoch = state.producer_epoch
        return b"".join(batch.payload or b"" for batch in batches)

    def _on_call_done(self, flight: _InFlight) -> None:
        """Runs on a Ray thread, which also serves the sender's `ray.get`s: it only flags the call and wakes
        the sender, never waits for anything."""
        flight.done = True
        self._wakeup.set()

    # --- answers ---------------------------------------------------------------------------------

    def _collect(self, now: int) -> list[Completion]:
        """Takes the answers of finished calls, in each partition's call order. Once a partition with failures has
        no call in flight, resolves them: the failed calls' batches in the order they were sent, then the batches
        whose lookup failed. A lookup can fail while an earlier call is still counted in flight: the route forgets a
        leader when that call's failure reaches it, a moment before the sender sees the failure."""
        completions: list[Completion] = []
        for state in self._partitions.values():
            while state.in_flight and state.in_flight[0].done:
                flight = state.in_flight.popleft()
                try:
                    info = flight.call.result()
                except Exception as exc:
                    state.failed.append((flight.batches, exc))
                    continue
                completions.extend(_acknowledged(flight.batches, info))
            if state.failing and not state.in_flight:
                if state.unsent is not None:
                    state.failed.append(state.unsent)
                    state.unsent = None
                completions.extend(self._resolve_failures(state, now))
        return completions

    def _resolve_failures(self, state: _PartitionState, now: int) -> list[Completion]:
        """Decides, once a partition has no call in flight, what becomes of the batches of its failed calls."""
        completions: list[Completion] = []
        resend: list[ProducerBatch] = []
        failed_for_good: BaseException | None = None
        reset_sequence_from: int | None = None
        backoff = False
        for index, (batches, error) in enumerate(state.failed):
            if failed_for_good is not None:
                # An earlier batch's fate is unknown (it may have been written): these may not be resent.
                completions.extend((batch, failed_for_good) for batch in batches)
                continue
            if is_retriable(error) or (index > 0 and isinstance(error, OutOfOrderSequenceError)):
                charged = is_retriable(error)
                for batch in batches:
                    batch.attempts += int(charged)
                expired = self._expiry_error(batches, error, now)
                if expired is None:
                    resend.extend(batches)
                    backoff = backoff or charged
                    continue
                failed_for_good = expired
                reset_sequence_from = len(resend)
                completions.extend((batch, expired) for batch in batches)
            elif len(batches) > 1:
                # A refused call wrote nothing; sent alone, each batch shows whether it is the bad one.
                for batch in batches:
                    batch.solo = True
                resend.extend(batches)
            else:
                completions.extend((batch, error) for batch in batches)
                if reset_sequence_from is None:
                    reset_sequence_from = len(resend)
        first_error = state.failed[0][1]
        logger.info(
            "%s-%d: %d call(s) failed, first with %s: %s; %d batch(es) to resend, %d failed for good",
            state.topic,
            state.partition,
            len(state.failed),
            type(first_error).__name__,
            first_error,
            len(resend),
            len(completions),
        )
        state.failed.clear()
        tp = (state.topic, state.partition)
        if reset_sequence_from is not None and self._idempotent and self._transactions is None:
            for batch in itertools.chain(resend[reset_sequence_from:], self._accumulator.queued(tp)):
                batch.payload = None
            # A fresh id is taken when the next batch is built, so failures in a row cost one id, none at the end.
            state.producer_id = NO_PRODUCER_ID
            state.next_sequence = 0
        self._accumulator.reenqueue(tp, resend)
        if backoff:
            attempts = max(batch.attempts for batch in resend)
            delay_ms = min(self._retry_backoff_ms * 2 ** (attempts - 1), self._retry_backoff_max_ms)
            state.retry_at_ns = now + delay_ms * 1_000_000
        return completions

    def _expiry_error(self, batches: list[ProducerBatch], error: BaseException, now: int) -> BaseException | None:
        """The error that ends these batches' retries, or None while they may be retried."""
        if any(batch.attempts > self._retries for batch in batches):
            return error
        if any(now - batch.created_ns >= self._delivery_timeout_ns for batch in batches):
            return RequestTimedOutError(
                f"delivery_timeout_ms {self._delivery_timeout_ns // 1_000_000} passed since the batch was "
                f"created; last error: {error}"
            )
        return None

    def _in_send_order(self, completions: list[Completion]) -> list[Completion]:
        """The completions that may be given now, each partition's in its send order: an outcome whose partition
        has an earlier batch still unanswered is held until that one's comes."""
        touched: list[_PartitionState] = []
        for batch, outcome in completions:
            state = self._partitions[(batch.topic, batch.partition)]
            state.held[id(batch)] = outcome
            touched.append(state)
        ready: list[Completion] = []
        for state in dict.fromkeys(touched):
            while state.unanswered and (first := next(iter(state.unanswered))) in state.held:
                ready.append((state.unanswered.pop(first), state.held.pop(first)))
        return ready

    def _complete(self, completions: list[Completion]) -> None:
        """Answers the futures (outside any lock: their callbacks may send), then releases the batches."""
        for batch, outcome in completions:
            if isinstance(outcome, BaseException):
                if self._transactions is not None and batch.payload is not None:
                    self._transactions.batch_failed(outcome, batch.producer_epoch)
                batch.fail(outcome)
            else:
                batch.complete(*outcome)
        if completions:
            self._accumulator.deallocate([batch for batch, _ in completions])


def _acknowledged(batches: list[ProducerBatch], info: LogAppendInfo) -> list[Completion]:
    """Each batch's record metadata from the offsets the partition assigned (or had assigned, for a duplicate)."""
    if len(info.batch_offsets) != len(batches):
        error = InvalidRequestError(f"the partition answered {len(info.batch_offsets)} batches for {len(batches)}")
        return [(batch, error) for batch in batches]
    return [
        (batch, (first_offset, info.log_append_time))
        for batch, (first_offset, _) in zip(batches, info.batch_offsets, strict=True)
    ]


__all__ = ["Sender"]
