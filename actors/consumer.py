"""The consumer facade: Kafka's consumer (positions, fetches, committed offsets) over partition actors.

A consumer reads a set of partitions, chosen with `assign([(topic, partition), ...])` or
`subscribe([topic, ...])`. `subscribe` assigns every partition of the topics to this one consumer: there is
no group membership and no rebalancing between several consumers of a group (a group here is only a name
under which offsets are committed); partitions added to a subscribed topic are picked up when the topic
metadata is refreshed (`metadata_max_age_ms`).

Positions: the position of a partition is the offset of the next record `poll` returns. A partition's
first position is its group's committed offset if there is one, else the `auto_offset_reset` policy
(`earliest`: the log start offset, `latest`: the log end offset, `none`: `OffsetOutOfRangeError`). A
position that falls outside the log (below the log start after retention or `delete_records`, or past
the end) is reset by the same policy on the next fetch, as Kafka's consumer does.

`poll` fetches from every assigned partition whose buffer is empty with one concurrent fetch each
(at most `max_partition_fetch_bytes` each, `fetch_max_bytes` in all; a partition returns at least one
whole batch). A partition on the consumer's own Ray node is read from the page cache (`actors.local_fetch`:
the actor only says where the bytes lie); other partitions, or all with `local_fetch=False`, through the
partition actor. Either way the bytes are the same. `poll` decodes the batches, skips the records below
the position (a fetch starts at the batch holding it) and those at or above the high watermark, and
buffers what it does not return yet. It returns at most `max_poll_records` records, in offset order per
partition, and waits up to `timeout_ms` when nothing is there. Records come back with their key and value
as bytes unless a deserializer is given.

Committed offsets live in the group coordinator (`actors.group_coordinator`, stored in
`__consumer_offsets`). `commit()` commits the current positions; with `enable_auto_commit` they are also
committed every `auto_commit_interval_ms` during `poll`, and on `close`.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from actors.broker import Broker
from actors.client import call, check_topic_partition, get_actor, partition_actor
from actors.local_fetch import PendingFetch
from actors.options import group_coordinator_name
from actors.serializers import Deserializer
from storage.errors import (
    BrokerNotAvailableError,
    InvalidConfigError,
    InvalidGroupIdError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    SerializationError,
    UnknownTopicOrPartitionError,
)
from storage.file_records import TimestampAndOffset
from storage.record_batch import TimestampType, iter_batches

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
AUTO_OFFSET_RESET_POLICIES = ("earliest", "latest", "none")
# Kafka's ListOffsets sentinels.
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
# Pause between two fetch rounds that found nothing: partition actors answer at once (no long poll), so
# this bounds the load an idle consumer puts on them (20 rounds a second) against the added latency.
EMPTY_FETCH_BACKOFF_S = 0.05


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    """One record as `poll` returns it (key and value deserialized if deserializers were given)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: TimestampType
    key: Any
    value: Any
    headers: tuple[tuple[str, bytes | None], ...]


class Consumer:
    """Reads assigned partitions; see the module docstring. Not thread-safe (as Kafka's consumer)."""

    def __init__(
        self,
        broker: Broker | None = None,
        *,
        group_id: str | None = None,
        auto_offset_reset: str = "latest",
        enable_auto_commit: bool = False,
        auto_commit_interval_ms: int = 5000,
        max_poll_records: int = 500,
        fetch_max_bytes: int = 1024 * 1024,
        max_partition_fetch_bytes: int = 1024 * 1024,
        metadata_max_age_ms: int = 300_000,
        value_deserializer: Deserializer | None = None,
        key_deserializer: Deserializer | None = None,
        local_fetch: bool = True,
    ) -> None:
        if auto_offset_reset not in AUTO_OFFSET_RESET_POLICIES:
            raise InvalidConfigError(
                f"auto_offset_reset must be one of {', '.join(AUTO_OFFSET_RESET_POLICIES)}, got {auto_offset_reset!r}"
            )
        for name, value, low in (
            ("auto_commit_interval_ms", auto_commit_interval_ms, 0),
            ("max_poll_records", max_poll_records, 1),
            ("fetch_max_bytes", fetch_max_bytes, 0),
            ("max_partition_fetch_bytes", max_partition_fetch_bytes, 0),
            ("metadata_max_age_ms", metadata_max_age_ms, 0),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise InvalidConfigError(f"{name} must be an int >= {low}, got {value!r}")
        if group_id is not None and (not isinstance(group_id, str) or not group_id):
            raise InvalidGroupIdError(f"group_id must be a non-empty str or None, got {group_id!r}")
        if enable_auto_commit and group_id is None:
            raise InvalidGroupIdError("enable_auto_commit needs a group_id to commit under")
        self._broker = broker or Broker.connect()
        self._group_id = group_id
        self._auto_offset_reset = auto_offset_reset
        self._auto_commit_interval_ns = auto_commit_interval_ms * 1_000_000 if enable_auto_commit else None
        self._max_poll_records = max_poll_records
        self._fetch_max_bytes = fetch_max_bytes
        self._max_partition_fetch_bytes = max_partition_fetch_bytes
        self._metadata_max_age_ns = metadata_max_age_ms * 1_000_000
        self._value_deserializer = value_deserializer
        self._key_deserializer = key_deserializer
        self._local_fetch = local_fetch
        self._assignment: list[TopicPartition] = []
        self._subscription: list[str] | None = None
        self._subscribed_at_ns = 0
        self._positions: dict[TopicPartition, int] = {}
        self._buffers: dict[TopicPartition, deque[ConsumerRecord]] = {}
        self._handles: dict[TopicPartition, Any] = {}
        # The node each partition's actor reported on its first fetch: a remote one is fetched directly after.
        self._nodes: dict[TopicPartition, str] = {}
        self._next_auto_commit_ns = time.monotonic_ns() + (self._auto_commit_interval_ns or 0)
        self._round_robin = 0
        self._closed = False

    # --- assignment ------------------------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Reads exactly these partitions (replacing any assignment or subscription)."""
        self._check_open()
        wanted = list(dict.fromkeys(check_topic_partition(tp) for tp in partitions))
        counts: dict[str, int] = {}
        for topic, partition in wanted:
            if topic not in counts:
                counts[topic] = len(self._broker.topic(topic).partitions)
            if partition >= counts[topic]:
                raise UnknownTopicOrPartitionError(
                    f"topic {topic!r} has partitions 0..{counts[topic] - 1}, not {partition}"
                )
        self._subscription = None
        self._set_assignment(wanted)

    def subscribe(self, topics: Iterable[str]) -> None:
        """Reads every partition of `topics` (no rebalancing: see the module docstring)."""
        self._check_open()
        names = list(dict.fromkeys(topics))
        for name in names:
            if not isinstance(name, str):
                raise UnknownTopicOrPartitionError(f"a topic name must be a str, not {type(name).__name__}")
        self._set_assignment(self._partitions_of(names))
        self._subscription = names
        self._subscribed_at_ns = time.monotonic_ns()

    def unsubscribe(self) -> None:
        self._subscription = None
        self._set_assignment([])

    def assignment(self) -> list[TopicPartition]:
        return list(self._assignment)

    def _partitions_of(self, topics: list[str]) -> list[TopicPartition]:
        return [(topic, partition) for topic in topics for partition in sorted(self._broker.topic(topic).partitions)]

    def _set_assignment(self, wanted: list[TopicPartition]) -> None:
        keep = set(wanted)
        for mapping in (self._positions, self._buffers, self._handles, self._nodes):
            for tp in [tp for tp in mapping if tp not in keep]:
                del mapping[tp]
        self._assignment = wanted

    # --- positions -------------------------------------------------------------------------------

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record `poll` returns for `tp` (resolving it first if needed)."""
        tp = self._check_assigned(tp)
        self._resolve_positions([tp])
        return self._positions[tp]

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """The next `poll` reads `tp` from `offset` (checked against the log on the next fetch)."""
        tp = self._check_assigned(tp)
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise InvalidRequestError(f"seek offset must be an int >= 0, got {offset!r}")
        self._positions[tp] = offset
        self._buffers.pop(tp, None)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._seek_to(EARLIEST_TIMESTAMP, partitions)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._seek_to(LATEST_TIMESTAMP, partitions)

    def _seek_to(self, timestamp: int, partitions: Iterable[TopicPartition] | None) -> None:
        tps = self._assignment if partitions is None else [self._check_assigned(tp) for tp in partitions]
        for tp, found in zip(tps, self._list_offsets({tp: timestamp for tp in tps}).values(), strict=True):
            assert found is not None, "earliest and latest always have an answer"
            self._positions[tp] = found.offset
            self._buffers.pop(tp, None)

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int] | None]:
        """Per partition, the first (offset, timestamp) whose timestamp is >= the given ms; None if none is."""
        checked = {}
        for tp, timestamp in timestamps.items():
            if not isinstance(timestamp, int) or isinstance(timestamp, bool) or timestamp < 0:
                raise InvalidRequestError(f"timestamp of {tp} must be an int >= 0 (ms), got {timestamp!r}")
            checked[check_topic_partition(tp)] = timestamp
        return {
            tp: None if found is None else (found.offset, found.timestamp)
            for tp, found in self._list_offsets(checked).items()
        }

    def _list_offsets(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, TimestampAndOffset | None]:
        refs = {tp: self._handle(tp).list_offset.remote(timestamp) for tp, timestamp in timestamps.items()}
        return {tp: call(ref) for tp, ref in refs.items()}

    def _resolve_positions(self, tps: list[TopicPartition]) -> None:
        """Gives every partition of `tps` without a position its committed offset, else the reset policy."""
        missing = [tp for tp in tps if tp not in self._positions]
        if not missing:
            return
        if self._group_id is not None:
            committed = call(self._coordinator().fetch_committed.remote(self._group_id, missing))
            for tp, offset in committed.items():
                if offset is not None:
                    self._positions[tp] = offset
        self._reset_positions([tp for tp in missing if tp not in self._positions])

    def _reset_positions(self, tps: list[TopicPartition], cause: OffsetOutOfRangeError | None = None) -> None:
        if not tps:
            return
        if self._auto_offset_reset == "none":
            raise cause or OffsetOutOfRangeError(
                f"no committed offset for {', '.join(f'{t}-{p}' for t, p in tps)} and auto_offset_reset is none"
            )
        timestamp = EARLIEST_TIMESTAMP if self._auto_offset_reset == "earliest" else LATEST_TIMESTAMP
        for tp, found in self._list_offsets(dict.fromkeys(tps, timestamp)).items():
            assert found is not None, "earliest and latest always have an answer"
            self._positions[tp] = found.offset
            self._buffers.pop(tp, None)

    # --- poll ------------------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[ConsumerRecord]:
        """Up to `max_records` (default `max_poll_records`) records, waiting up to `timeout_ms` for some."""
        self._check_open()
        limit = self._max_poll_records if max_records is None else max_records
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise InvalidRequestError(f"max_records must be an int >= 1, got {max_records!r}")
        deadline = time.monotonic_ns() + max(0, timeout_ms) * 1_000_000
        self._maybe_auto_commit()
        if self._subscription is not None and time.monotonic_ns() - self._subscribed_at_ns >= self._metadata_max_age_ns:
            self.subscribe(self._subscription)
        while True:
            records = self._drain(limit)
            if records:
                return records
            try:
                self._fetch_round()
            except (BrokerNotAvailableError, RequestTimedOutError) as exc:
                # The group coordinator or a partition actor is restarting (committed positions or a handle
                # could not be looked up): like Kafka's poll, keep trying until the timeout instead of failing.
                logger.info("poll round failed, retrying: %s", exc)
            if any(self._buffers.values()):
                continue
            remaining_s = (deadline - time.monotonic_ns()) / 1e9
            if remaining_s <= 0:
                return []
            time.sleep(min(EMPTY_FETCH_BACKOFF_S, remaining_s))

    def _drain(self, limit: int) -> list[ConsumerRecord]:
        """Buffered records, partition after partition (starting one further each time), advancing positions."""
        records: list[ConsumerRecord] = []
        count = len(self._assignment)
        for step in range(count):
            tp = self._assignment[(self._round_robin + step) % count]
            buffer = self._buffers.get(tp)
            while buffer and len(records) < limit:
                record = buffer.popleft()
                records.append(record)
                self._positions[tp] = record.offset + 1
        self._round_robin = (self._round_robin + 1) % max(1, count)
        return records

    def _fetch_round(self) -> None:
        """One concurrent fetch from every assigned partition whose buffer is empty."""
        tps = [tp for tp in self._assignment if not self._buffers.get(tp)]
        if not tps:
            return
        self._resolve_positions(tps)
        max_bytes = min(self._max_partition_fetch_bytes, self._fetch_max_bytes // len(tps))
        pending = {
            tp: PendingFetch(
                self._handle(tp),
                self._positions[tp],
                max_bytes,
                node_id=self._nodes.get(tp),
                prefer_local=self._local_fetch,
            )
            for tp in tps
        }
        out_of_range: list[TopicPartition] = []
        first_error: OffsetOutOfRangeError | None = None
        for tp, fetch in pending.items():
            try:
                result = fetch.result()
            except OffsetOutOfRangeError as exc:
                out_of_range.append(tp)
                first_error = first_error or exc
                continue
            except (BrokerNotAvailableError, RequestTimedOutError) as exc:
                # A restarting actor: the next round asks again (a new actor under the name is looked up).
                logger.info("fetch from %s-%d failed, retrying: %s", tp[0], tp[1], exc)
                self._handles.pop(tp, None)
                self._nodes.pop(tp, None)
                continue
            if fetch.node_id is not None:
                self._nodes[tp] = fetch.node_id
            self._buffer_fetched(tp, result.records, result.high_watermark)
        self._reset_positions(out_of_range, first_error)

    def _buffer_fetched(self, tp: TopicPartition, data: bytes, high_watermark: int) -> None:
        position = self._positions[tp]
        buffer = self._buffers.setdefault(tp, deque())
        next_position = position
        for batch in iter_batches(data):
            if batch.is_control:
                next_position = max(next_position, batch.next_offset)
                continue
            timestamp_type = batch.timestamp_type
            for record in batch.records():
                if record.offset < position or record.offset >= high_watermark:
                    continue
                buffer.append(
                    ConsumerRecord(
                        tp[0],
                        tp[1],
                        record.offset,
                        record.timestamp,
                        timestamp_type,
                        self._deserialize(self._key_deserializer, record.key, tp, record.offset, "key"),
                        self._deserialize(self._value_deserializer, record.value, tp, record.offset, "value"),
                        record.headers,
                    )
                )
            if batch.last_offset < high_watermark:
                next_position = max(next_position, batch.next_offset)
        if not buffer:
            # Batches without a record to return (compacted away, control, all below the position) still
            # move the position past them, so the next fetch does not return them again.
            self._positions[tp] = next_position

    def _deserialize(
        self, deserializer: Deserializer | None, data: bytes | None, tp: TopicPartition, offset: int, what: str
    ) -> Any:
        if data is None or deserializer is None:
            return data
        try:
            return deserializer(data)
        except SerializationError as exc:
            message = f"{tp[0]}-{tp[1]}: cannot deserialize the {what}: {exc.message}"
            raise SerializationError(message, offset=offset) from exc

    # --- committed offsets -----------------------------------------------------------------------

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Commits `offsets` (default: the current position of every assigned partition) for the group."""
        self._check_open()
        group = self._require_group()
        to_commit = (
            {tp: self._positions[tp] for tp in self._assignment if tp in self._positions}
            if offsets is None
            else {check_topic_partition(tp): offset for tp, offset in offsets.items()}
        )
        call(self._coordinator().commit.remote(group, to_commit))

    def committed(self, tp: TopicPartition) -> int | None:
        """The group's committed offset of `tp`, None if it has none."""
        group = self._require_group()
        tp = check_topic_partition(tp)
        return call(self._coordinator().fetch_committed.remote(group, [tp]))[tp]

    def _maybe_auto_commit(self) -> None:
        if self._auto_commit_interval_ns is None or time.monotonic_ns() < self._next_auto_commit_ns:
            return
        self.commit()
        self._next_auto_commit_ns = time.monotonic_ns() + self._auto_commit_interval_ns

    def _require_group(self) -> str:
        if self._group_id is None:
            raise InvalidGroupIdError("committed offsets need a consumer with a group_id")
        return self._group_id

    def _coordinator(self) -> Any:
        return get_actor(group_coordinator_name())

    # --- lifecycle -------------------------------------------------------------------------------

    def close(self) -> None:
        """Commits the positions when auto-commit is on, then releases the consumer. Idempotent."""
        if self._closed:
            return
        try:
            if self._auto_commit_interval_ns is not None:
                self.commit()
        finally:
            self._closed = True
            self._buffers.clear()
            self._handles.clear()
            self._nodes.clear()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidRequestError("the consumer is closed")

    def _check_assigned(self, tp: object) -> TopicPartition:
        checked = check_topic_partition(tp)
        if checked not in self._assignment:
            raise InvalidRequestError(f"{checked[0]}-{checked[1]} is not assigned to this consumer")
        return checked

    def _handle(self, tp: TopicPartition) -> Any:
        handle = self._handles.get(tp)
        if handle is None:
            handle = partition_actor(*tp)
            self._handles[tp] = handle
        return handle


__all__ = ["Consumer", "ConsumerRecord", "TopicPartition"]
