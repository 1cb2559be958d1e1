"""The producer facade: Kafka's `KafkaProducer` (configuration, serializers, partitioning, futures) over
partition actors.

`Producer.send` serializes a record, picks its partition and appends it to that partition's open batch;
it returns a `concurrent.futures.Future` that resolves to the record's `RecordMetadata` once the partition
actor has written it. `Producer.send_many(topic, values, keys=None, partition=None, timestamps=None)` queues
many records at once and returns one `SendManyFuture` for all of them: no future, lock round or size
estimate per record, and batches cut whole (~0.4 us a record on top of encoding, against ~15 us for `send`).

The work is Kafka's three pieces:

- this facade checks the configuration (Kafka's names), serializes keys, values and headers, checks each
  record (size, timestamp, partition) and places keyed records: an explicit partition wins, a keyed record
  goes to `murmur2(key) % partitions` (`actors.clients.partitioner`, Kafka's default partitioner);
- `actors.clients.record_accumulator` batches the records per partition (`batch_size`, `linger_ms`), bounds
  the memory they take (`buffer_memory`, `max_block_ms`) and places null-key records stickily (KIP-480);
- `actors.clients.sender`, a background thread, sends the closed batches to the partition actors with
  idempotent sequence numbers (`enable_idempotence`, on by default), at most
  `max_in_flight_requests_per_connection` calls per partition, and retries (`retries`, `retry_backoff_ms`,
  `retry_backoff_max_ms`, `delivery_timeout_ms`), then answers the futures.

`acks` is Kafka's: "all" (or -1, the default, as Kafka's since 3.0) answers once every in-sync replica has the
records, and refuses while fewer than the topic's `min.insync.replicas` are in sync (`NotEnoughReplicasError`,
retried like a leader change: `NotLeaderOrFollowerError` makes the sender look the leader up again); with one
replica that is the leader's append, at no extra cost. 1 answers once the leader wrote them: those may be lost if the
leader dies before a follower copied them, and an idempotent producer's sequence then runs ahead of the new leader
(`OutOfOrderSequenceError`), which is why Kafka allows idempotence only with acks=all; use
`enable_idempotence=False` with acks=1. acks=0 is the Kafka listener's.

Transactions (`transactional_id`, Kafka's `transactional.id`; confluent-kafka's method names): `init_transactions`
takes the id's producer id and epoch from the transaction coordinator, fencing any older producer of the same id
and aborting what it left open; then each `begin_transaction` ... `commit_transaction` (or `abort_transaction`)
writes records atomically across partitions, with `send_offsets_to_transaction` committing a consumer group's
offsets in the same transaction (consume-transform-produce, exactly once). Batches carry the transactional flag,
and each partition joins the transaction before its first batch (`actors.clients.transaction_manager`); read_committed
readers see the records only after the commit, and never those of an aborted transaction. A transactional producer
is idempotent (acks=all). Errors: `InvalidTxnStateError` for a call out of order (send outside a transaction, begin
twice, commit without begin); `ProducerFencedError` once a newer producer of the id took over (this one can only be
closed); `TransactionAbortableError` (`TransactionTimedOutError` when the coordinator aborted the transaction after
`transaction_timeout_ms`) when the transaction can no longer commit: call `abort_transaction`, then go on.

Errors raised by `send` itself (before anything is queued): `UnknownTopicOrPartitionError` for an
unknown topic or a partition outside the topic, `SerializationError` for a key or value the serializer
cannot encode, `RecordTooLargeError` for a record larger than `max_request_size`, `InvalidTimestampError`
for a negative timestamp, `InvalidRequestError` after `close`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, cast

import numpy as np

from actors.clients.broker import Broker
from actors.clients.futures import RecordMetadata, SendManyFuture
from actors.clients.partitioner import KEY_HASH_CACHE_SIZE, key_hash
from actors.clients.producer_batch import RECORD_OVERHEAD_BOUND, BulkRecords, Headers, record_size_bound
from actors.clients.record_accumulator import RecordAccumulator
from actors.clients.sender import Sender
from actors.clients.serializers import Serializer, default_serializer, string_serializer
from actors.clients.transaction_coordinator_client import RayTransactionCoordinatorClient
from actors.clients.transaction_manager import ConsumerGroupMetadata, TransactionManager, TransactionState
from actors.core.replication.replica import ACKS, ACKS_ALL
from actors.startup_objects import freeze_startup_objects
from storage.arguments import is_int
from storage.clock import SYSTEM_CLOCK
from storage.closeable import Closeable
from storage.errors import (
    InvalidConfigError,
    InvalidRequestError,
    InvalidTimestampError,
    InvalidTxnStateError,
    RaybrokerError,
    RecordTooLargeError,
    RequestTimedOutError,
    SerializationError,
    UnknownTopicOrPartitionError,
)
from storage.partition.producer_state import NUM_BATCHES_TO_RETAIN
from storage.records.compression import CompressionType
from storage.records.record_batch import RECORD_BATCH_OVERHEAD
from storage.topic_partition import TopicPartition, check_topic_partition

HeaderInput = tuple[str, bytes | bytearray | str | None]

logger = logging.getLogger(__name__)

# The states in which `close` aborts the transaction (Kafka's `hasOngoingTransaction`).
_OPEN_TRANSACTION_STATES = frozenset(
    {
        TransactionState.IN_TRANSACTION,
        TransactionState.COMMITTING,
        TransactionState.ABORTING,
        TransactionState.ABORTABLE_ERROR,
    }
)

# `acks` as Kafka's producer config spells it: "all", or a number as a string.
_ACKS_NAMES = {"all": ACKS_ALL, **{str(acks): acks for acks in ACKS}}


# The lowest value each numeric setting takes: a request must hold at least one batch of one record.
_LOWEST_VALUES = {
    "linger_ms": 0,
    "batch_size": 1,
    "retries": 0,
    "retry_backoff_ms": 0,
    "retry_backoff_max_ms": 0,
    "delivery_timeout_ms": 1,
    "max_in_flight_requests_per_connection": 1,
    "max_request_size": RECORD_BATCH_OVERHEAD + RECORD_OVERHEAD_BOUND,
    "buffer_memory": 1,
    "max_block_ms": 0,
    "metadata_max_age_ms": 0,
}


def _check_numbers(**values: object) -> None:
    """`InvalidConfigError` for the first of `values` (named as in `_LOWEST_VALUES`) that is not an int at or above
    its lowest value."""
    for name, value in values.items():
        low = _LOWEST_VALUES[name]
        if not is_int(value) or value < low:
            raise InvalidConfigError(f"{name} must be an int >= {low}, got {value!r}")


def _checked_acks(
    acks: int | str, enable_idempotence: bool, max_in_flight_requests_per_connection: int, transactional_id: str | None
) -> int:
    """The acks a producer asks for (`acks` as a number or Kafka's spelling), after Kafka's rules tying it to
    idempotence, calls in flight and transactions; `InvalidConfigError` when they are broken."""
    if enable_idempotence and max_in_flight_requests_per_connection > NUM_BATCHES_TO_RETAIN:
        raise InvalidConfigError(
            f"an idempotent producer allows at most {NUM_BATCHES_TO_RETAIN} calls in flight per partition "
            f"(the partition remembers that many batches per producer), got {max_in_flight_requests_per_connection}"
        )
    required_acks = _ACKS_NAMES.get(acks, acks) if isinstance(acks, str) else acks
    if transactional_id is not None and (not enable_idempotence or required_acks != ACKS_ALL):
        raise InvalidConfigError("a transactional producer is idempotent with acks='all' (Kafka's requirement)")
    # acks=0 asks for no answer at all, which a client whose every send returns a future cannot offer.
    if required_acks not in ACKS or required_acks == 0:
        raise InvalidConfigError(f"acks must be 1 or 'all' (-1), got {acks!r}; acks=0 is the Kafka listener's")
    return int(required_acks)


class Producer(Closeable):
    """Sends records to the broker's partitions; see the module docstring. Thread-safe."""

    def __init__(
        self,
        broker: Broker | None = None,
        *,
        linger_ms: int = 5,
        batch_size: int = 16384,
        compression_type: str = "none",
        enable_idempotence: bool = True,
        acks: int | str = "all",
        retries: int = 5,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        delivery_timeout_ms: int = 120_000,
        max_in_flight_requests_per_connection: int = 5,
        max_request_size: int = 1024 * 1024,
        buffer_memory: int = 32 * 1024 * 1024,
        max_block_ms: int = 60_000,
        metadata_max_age_ms: int = 300_000,
        value_serializer: Serializer | None = None,
        key_serializer: Serializer | None = None,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60_000,
    ) -> None:
        _check_numbers(
            linger_ms=linger_ms,
            batch_size=batch_size,
            retries=retries,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
            delivery_timeout_ms=delivery_timeout_ms,
            max_in_flight_requests_per_connection=max_in_flight_requests_per_connection,
            max_request_size=max_request_size,
            buffer_memory=buffer_memory,
            max_block_ms=max_block_ms,
            metadata_max_age_ms=metadata_max_age_ms,
        )
        required_acks = _checked_acks(acks, enable_idempotence, max_in_flight_requests_per_connection, transactional_id)
        compression = CompressionType.from_name(compression_type)
        self._broker = broker or Broker.connect()
        self._transactions = self._new_transactions(transactional_id, transaction_timeout_ms, retry_backoff_max_ms)
        self._max_block_s = max_block_ms / 1000
        freeze_startup_objects()
        self._max_request_size = max_request_size
        self._metadata_max_age_ns = metadata_max_age_ms * 1_000_000
        self._value_serializer = value_serializer or default_serializer
        self._key_serializer = key_serializer or default_serializer
        self._metadata_lock = threading.Lock()
        self._partition_counts: dict[str, tuple[int, int]] = {}
        self._str_keys: dict[str, tuple[bytes, int]] = {}
        self._close_lock = threading.Lock()
        self._closed = False
        # Wakes the sender: new batches, flushes, answers from Ray. An Event, not a lock's condition,
        # because Ray's callback thread must never block on a lock.
        wakeup = threading.Event()
        self._accumulator = RecordAccumulator(
            batch_size=batch_size,
            linger_ms=linger_ms,
            buffer_memory=buffer_memory,
            max_block_ms=max_block_ms,
            compression=compression,
            clock=SYSTEM_CLOCK,
            wakeup=wakeup.set,
        )
        self._sender = Sender(
            self._accumulator,
            self._broker,
            wakeup,
            enable_idempotence=enable_idempotence,
            acks=required_acks,
            retries=retries,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
            delivery_timeout_ms=delivery_timeout_ms,
            max_in_flight_requests_per_connection=max_in_flight_requests_per_connection,
            max_request_size=max_request_size,
            clock=SYSTEM_CLOCK,
            transactions=self._transactions,
        )
        self._sender.start()

    def _new_transactions(
        self, transactional_id: str | None, transaction_timeout_ms: int, retry_backoff_max_ms: int
    ) -> TransactionManager | None:
        """A transactional producer's `TransactionManager`, calling the coordinator through the broker; None for a
        producer without `transactional_id`."""
        if transactional_id is None:
            return None
        return TransactionManager(
            transactional_id,
            transaction_timeout_ms,
            RayTransactionCoordinatorClient(self._broker),
            clock=SYSTEM_CLOCK,
            retry_backoff_max_ms=retry_backoff_max_ms,
        )

    @property
    def producer_id(self) -> int:
        """The producer id taken at start (-1 without idempotence; a transactional producer's once
        `init_transactions` ran); a partition whose sequence had to be reset continues under a fresh one."""
        if self._transactions is not None:
            return self._transactions.identity[0]
        return self._sender.producer_id

    @property
    def producer_epoch(self) -> int:
        """A transactional producer's epoch (-1 before `init_transactions`); 0 for an idempotent one."""
        if self._transactions is not None:
            return self._transactions.identity[1]
        return 0 if self._sender.producer_id >= 0 else -1

    # --- transactions ----------------------------------------------------------------------------

    def init_transactions(self, timeout: float | None = None) -> None:
        """Takes the transactional id's producer id and epoch (fencing older producers of the id, whose open
        transaction is aborted); once, before the first transaction. `timeout` in seconds (None: `max_block_ms`)."""
        self._transaction_manager().init(self._block_s(timeout))

    def begin_transaction(self) -> None:
        """Starts a transaction: the records sent until `commit_transaction` or `abort_transaction` belong to it."""
        self._transaction_manager().begin()

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, int],
        group_metadata: ConsumerGroupMetadata,
        timeout: float | None = None,
    ) -> None:
        """Commits `offsets` (the next offset to read per partition) for the consumer's group with the transaction:
        the group sees them only if it commits. `group_metadata` is `Consumer.consumer_group_metadata()`."""
        self._check_open()
        self._transaction_manager().send_offsets(
            {check_topic_partition(tp): offset for tp, offset in offsets.items()},
            group_metadata,
            self._block_s(timeout),
        )

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Sends every record of the transaction, then commits it: once this returns the commit is durable, and
        read_committed readers see every record as soon as the coordinator's markers land, moments later (Kafka
        answers EndTxn before its markers too). Raises the transaction's error if it can no longer commit (then call
        `abort_transaction`); `RequestTimedOutError` after `timeout` seconds (None: `max_block_ms`), after which it
        may be called again."""
        self._end(True, timeout)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Aborts the transaction: its records are never seen by read_committed readers; the producer may begin the
        next one. The records still queued are sent first (and aborted with the rest)."""
        self._end(False, timeout)

    def _end(self, commit: bool, timeout: float | None) -> None:
        manager = self._transaction_manager()
        timeout_s = self._block_s(timeout)
        deadline = time.monotonic() + timeout_s
        manager.begin_end(commit)
        self.flush(timeout_s)
        manager.end(commit, max(deadline - time.monotonic(), 0.0))

    def _transaction_manager(self) -> TransactionManager:
        if self._transactions is None:
            raise InvalidTxnStateError("transactions need a producer with a transactional_id")
        return self._transactions

    def _block_s(self, timeout: float | None) -> float:
        if timeout is None:
            return self._max_block_s
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0:
            raise InvalidRequestError(f"timeout must be a number of seconds >= 0, got {timeout!r}")
        return float(timeout)

    # --- send ------------------------------------------------------------------------------------

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Iterable[HeaderInput] | None = None,
    ) -> Future[RecordMetadata]:
        """Queues one record; the future gives its `RecordMetadata` or the typed error that failed it.

        Per-record Python is this method's whole cost (a `send` loop is CPU-bound on one core), so the common
        case is written out here: `bytes` and `str` values and keys under the default serializer skip its checks
        (`_serialize`), a `str` key's bytes and hash are remembered (`_remember_str_key`), no headers add nothing,
        and a cached partition count is read without the metadata lock."""
        self._check_open()
        hashed = None
        if key is None:
            key_bytes = None
        elif type(key) is str and self._key_serializer is default_serializer:
            known = self._str_keys.get(key)
            if known is None:
                known = self._remember_str_key(key)
            key_bytes, hashed = known
        else:
            key_bytes = _serialize(self._key_serializer, key, "key")
        value_bytes = None if value is None else _serialize(self._value_serializer, value, "value")
        if headers is None:
            record_headers: Headers = ()
            size = RECORD_OVERHEAD_BOUND + (0 if key_bytes is None else len(key_bytes))
            size += 0 if value_bytes is None else len(value_bytes)
        else:
            record_headers = _headers(headers)
            size = record_size_bound(key_bytes, value_bytes, record_headers)
        timestamp = time.time_ns() // 1_000_000 if timestamp_ms is None else _check_timestamp(timestamp_ms)
        if RECORD_BATCH_OVERHEAD + size > self._max_request_size:
            raise RecordTooLargeError(
                f"a record of about {size} bytes does not fit in max_request_size {self._max_request_size}"
            )
        cached = self._partition_counts.get(topic) if partition is None else None
        if cached is not None and time.monotonic_ns() - cached[1] <= self._metadata_max_age_ns:
            num_partitions = cached[0]
        else:
            num_partitions = self._partition_count(topic, partition)
        if partition is None and key_bytes is not None:
            partition = (key_hash(key_bytes) if hashed is None else hashed) % num_partitions
        return self._accumulator.append(
            topic, partition, num_partitions, key_bytes, value_bytes, timestamp, record_headers, size
        )

    def send_many(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        partition: int | None = None,
        timestamps: Sequence[int] | None = None,
    ) -> SendManyFuture:
        """Queues many records at once: `values[i]` with `keys[i]` and `timestamps[i]` (None: no keys, the
        current time for all); partitioned as `send` does. One future for all (`SendManyFuture`), and batches
        encoded whole, so a record costs a fraction of what `send` costs.

        Every record is serialized and checked before any is queued, so a bad one (the errors of `send`)
        queues nothing. Only `RequestTimedOutError` (`buffer_memory` still full after `max_block_ms`) can come
        after some batches were queued; those are still sent. The records are cut into full batches at once
        (`linger_ms` does not apply); a batch `send` left open on a partition is closed first, so records keep
        their send order per partition.
        For throughput give the producer a larger `batch_size` (up to the topic's `max.message.bytes`, 1 MiB by
        default): a batch has fixed costs (encoding setup, validation, and an idempotent partition takes only 5
        unacknowledged batches), so 16 KiB batches of 100-byte records reach ~130k records/s, 1 MB ones ~500k.
        """
        self._check_open()
        count = len(values)
        if keys is not None and len(keys) != count:
            raise InvalidRequestError(f"send_many got {len(keys)} keys for {count} values")
        if timestamps is not None and len(timestamps) != count:
            raise InvalidRequestError(f"send_many got {len(timestamps)} timestamps for {count} values")
        value_bytes = _serialize_all(self._value_serializer, values, "value")
        key_bytes = None if keys is None else _serialize_all(self._key_serializer, keys, "key")
        if timestamps is None:
            record_timestamps = [SYSTEM_CLOCK.milliseconds()] * count
        else:
            record_timestamps = [_check_timestamp(timestamp) for timestamp in timestamps]
        sizes = RECORD_OVERHEAD_BOUND + _lengths(value_bytes)
        if key_bytes is not None:
            sizes += _lengths(key_bytes)
        largest = int(sizes.max()) if count else 0
        if RECORD_BATCH_OVERHEAD + largest > self._max_request_size:
            raise RecordTooLargeError(
                f"a record of about {largest} bytes does not fit in max_request_size {self._max_request_size}"
            )
        num_partitions = self._partition_count(topic, partition)
        # Kept as an array: `tolist()` of a million running totals took ~9% of a `send_many` run.
        cumulative = np.concatenate((np.zeros(1, dtype=np.int64), np.cumsum(sizes)))
        records = BulkRecords(key_bytes, value_bytes, record_timestamps, cumulative)
        return self._accumulator.append_many(topic, partition, num_partitions, records)

    def _remember_str_key(self, key: str) -> tuple[bytes, int]:
        """A `str` key's bytes under the default serializer and its `key_hash`, remembered for the next `send` of
        the same key: the string keeps its own hash, where new key bytes are encoded and hashed on every send
        (~0.3 us of ~2). Up to `KEY_HASH_CACHE_SIZE` keys, forgotten all at once when full."""
        key_bytes = string_serializer(key)
        known = (key_bytes, key_hash(key_bytes))
        if len(self._str_keys) >= KEY_HASH_CACHE_SIZE:
            self._str_keys.clear()
        self._str_keys[key] = known
        return known

    def _check_open(self) -> None:
        if self._closed or not self._sender.running:
            raise InvalidRequestError("cannot send after the producer has been closed")
        if self._transactions is not None:
            self._transactions.check_send()

    def _partition_count(self, topic: str, partition: int | None) -> int:
        """The topic's partition count (cached for `metadata_max_age_ms`); checks an explicit partition."""
        if partition is not None and (not is_int(partition) or partition < 0):
            raise UnknownTopicOrPartitionError(f"partition must be an int >= 0, not {partition!r}")
        now = SYSTEM_CLOCK.nanoseconds()
        with self._metadata_lock:
            cached = self._partition_counts.get(topic)
        if (
            cached is None
            or now - cached[1] > self._metadata_max_age_ns
            or (partition is not None and partition >= cached[0])
        ):
            count = len(self._broker.topic(topic).partitions)
            with self._metadata_lock:
                self._partition_counts[topic] = (count, now)
        else:
            count = cached[0]
        if partition is not None and partition >= count:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} has partitions 0..{count - 1}, not {partition}")
        return count

    # --- flush / close ---------------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> None:
        """Sends every record queued so far at once and waits until each is acknowledged or failed.

        Raises `RequestTimedOutError` if that takes longer than `timeout` seconds (None: no limit). Not for a
        future's callback: callbacks run on the sender thread, which would then wait for itself.
        """
        if not self._accumulator.flush(timeout):
            raise RequestTimedOutError(f"flush did not complete within {timeout} s")

    def close(self, timeout: float | None = None) -> None:
        """Aborts a transaction left open (as Kafka's Java client does on close), flushes, then stops the sender,
        all within `timeout` seconds (None: `max_block_ms`). Records still unsent then fail with
        `RequestTimedOutError`; a transaction that could not be aborted in time is aborted by its coordinator after
        `transaction_timeout_ms`. Calling it again does nothing."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        deadline = time.monotonic() + self._block_s(timeout)
        try:
            self._abort_open_transaction(deadline)
            self.flush(max(deadline - time.monotonic(), 0.0))
        finally:
            self._sender.close()
            self._accumulator.abort_incomplete_batches(
                RequestTimedOutError("the producer was closed before the record was acknowledged")
            )

    def _abort_open_transaction(self, deadline: float) -> None:
        """Aborts the open transaction, if any, before `deadline` (time.monotonic()): it would otherwise hold back
        the last stable offset of every partition it wrote, for read_committed readers, until the coordinator times
        it out. A failure is logged, not raised: the producer closes either way."""
        if self._transactions is None or self._transactions.state not in _OPEN_TRANSACTION_STATES:
            return
        logger.info("aborting the open transaction of %r as the producer closes", self._transactions.transactional_id)
        try:
            self._end(False, max(deadline - time.monotonic(), 0.0))
        except RaybrokerError as exc:
            logger.warning(
                "the open transaction of %r was not aborted as the producer closed: %s",
                self._transactions.transactional_id,
                exc,
            )


def _serialize_all(serializer: Callable[[Any], bytes], items: Sequence[Any], what: str) -> list[bytes | None]:
    """Each item serialized (None stays None); bytes pass through the default serializer without a call."""
    if serializer is default_serializer:
        if set(map(type, items)) <= {bytes, type(None)}:
            return list(items)
        return [item if item is None or type(item) is bytes else _serialize(serializer, item, what) for item in items]
    return [None if item is None else _serialize(serializer, item, what) for item in items]


def _lengths(items: list[bytes | None]) -> np.ndarray:
    """Each item's length (0 for None), as an int64 array. The first pass assumes no None, as `len` runs in C
    then; a None makes it raise `TypeError`, and the second pass checks each item."""
    try:
        return np.fromiter(map(len, cast("list[bytes]", items)), dtype=np.int64, count=len(items))
    except TypeError:
        return np.fromiter((0 if item is None else len(item) for item in items), dtype=np.int64, count=len(items))


def _serialize(serializer: Callable[[Any], bytes], value: Any, what: str) -> bytes:
    """`value` through `serializer`, checked to be bytes; the default serializer's two common cases directly."""
    if serializer is default_serializer:
        if type(value) is bytes:
            return value
        if type(value) is str:
            return string_serializer(value)
    data = serializer(value)
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    if not isinstance(data, bytes):
        raise SerializationError(f"the {what} serializer returned {type(data).__name__}, not bytes")
    return data


def _headers(headers: Iterable[HeaderInput] | None) -> Headers:
    """Header values as bytes (`str` as UTF-8); keys must be `str`."""
    if headers is None:
        return ()
    result = []
    for header in headers:
        if not isinstance(header, tuple) or len(header) != 2 or not isinstance(header[0], str):
            raise SerializationError(f"a header must be a (str, bytes | None) tuple, got {header!r}")
        name, value = header
        if value is None or isinstance(value, bytes):
            result.append((name, value))
        elif isinstance(value, bytearray | memoryview):
            result.append((name, bytes(value)))
        elif isinstance(value, str):
            result.append((name, value.encode("utf-8")))
        else:
            raise SerializationError(f"header {name!r} has a {type(value).__name__} value; expected bytes or str")
    return tuple(result)


def _check_timestamp(timestamp_ms: object) -> int:
    if not is_int(timestamp_ms) or timestamp_ms < 0:
        raise InvalidTimestampError(f"timestamp_ms must be an int >= 0 (ms since the epoch), got {timestamp_ms!r}")
    return timestamp_ms


__all__ = ["ConsumerGroupMetadata", "Producer", "RecordMetadata", "SendManyFuture"]
