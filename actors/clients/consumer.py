"""The consumer facade: Kafka's consumer (positions, fetches, committed offsets) over partition actors.

A consumer reads a set of partitions, chosen with `assign([(topic, partition), ...])` or
`subscribe([topic, ...])`. With `group_protocol="classic"` (the default) `subscribe` assigns every partition of the
topics to this one consumer: there is no group membership and no rebalancing between several consumers of a group (a
group here is only a name under which offsets are committed); partitions added to a subscribed topic are picked up
when the topic metadata is refreshed (`metadata_max_age_ms`). With `group_protocol="consumer"` the consumer is a
member of its group through Kafka 4's consumer protocol (`actors.clients.group_member`): the group coordinator
assigns it a share of the topics' partitions, which changes as members (Python consumers and Kafka clients with
`group.protocol=consumer` alike) come and go; `poll` heartbeats, gives partitions up when asked (committing them first
with `enable_auto_commit`), and `close` leaves the group. Its commits carry its member epoch: one whose partitions
moved on raises `CommitFailedError`.

Positions: the position of a partition is the offset of the next record `poll` returns. A partition's
first position is its group's committed offset if there is one, else the `auto_offset_reset` policy
(`earliest`: the log start offset, `latest`: the log end offset, `none`: `OffsetOutOfRangeError`). A
position that falls outside the log (below the log start after retention or `delete_records`, or past
the end) is reset by the same policy on the next fetch, as Kafka's consumer does.

`poll` fetches from every assigned partition whose buffer is empty with one concurrent fetch each
(at most `max_partition_fetch_bytes` each, `fetch_max_bytes` in all; a partition returns at least one
whole batch). Fetches are Kafka's long polls: a partition actor holds a fetch until `fetch_min_bytes` are
there or `fetch_max_wait_ms` expired (or what is left of the poll's `timeout_ms`, if less), so a record
appended while a consumer waits reaches it within a round trip, not after a polling pause. `poll` returns as
soon as any partition answered with records, after starting the next fetch of every partition it drained
(Kafka's pipelining: it waits in the actor while the caller works); the fetches of the others stay in flight
and are collected by the next `poll` (one dropped by `seek`, a position reset or `close` ends on its own when
its wait expires). An actor answers at once when its long-poll slots are taken (`actors.server.partition_log`); an
empty answer that comes back before half its wait is taken for that, and the partition is fetched again
after `EMPTY_FETCH_BACKOFF_S` rather than at once. A partition on the consumer's own Ray node is read from
the page cache (`actors.clients.local_fetch`: the actor only says where the bytes lie, its `locate` long-polling as
a fetch does); other partitions, or all with `local_fetch=False`, through the partition actor. Either way
the bytes are the same. Once a same-node partition has been read up to its high watermark, the consumer follows
its tail without calls (`actors.clients.local_tail`): it looks at the partition's high-watermark file, which the
actor rewrites after every append, and reads new batches from the segment file itself, up to the published high
watermark; while it waits it looks every `TAIL_POLL_S`, until `fetch_min_bytes` are there or `fetch_max_wait_ms`
(or the poll's timeout) passed, as a long poll would. Once `TAIL_IDLE_S` passed without a record, it waits with the
actor's long poll again (no CPU while nothing comes; the first record after the pause costs a round trip), and
looks at the file again after the next records. Whatever the file cannot answer (a seek, a roll, DeleteRecords, a
closed partition) goes to the actor.
`poll` decodes the batches, skips the records below the position (a fetch starts at the batch holding it) and
those at or above the high watermark, and buffers what it does not return yet.
It returns at most `max_poll_records` records, in offset order per partition, and waits up to `timeout_ms`
when nothing is there. Records come back with their key and value as bytes unless a deserializer is given.

Isolation (`isolation_level`, Kafka's `isolation.level`, default `read_uncommitted` as Kafka's Java consumer):
`read_uncommitted` reads every record below the high watermark, those of open and aborted transactions included;
`read_committed` reads only below the last stable offset (so never a record of a transaction still open) and drops
the records of aborted transactions, with the aborted-transaction list each fetch answers
(`storage.partition.aborted_batches`). Control batches (transaction markers) are never returned, at either level, but
move the position past them. `seek_to_end`, `latest` and `offsets_for_times` answer at the level's end (the LSO for
read_committed). A read_committed consumer does not follow same-node tails through the high-watermark file, which
publishes offsets but not aborted transactions: its fetches always go to the actor (`locate` still reads locally).

Committed offsets live in the group coordinator (`actors.server.group_coordinator_actor`, stored in
`__consumer_offsets`). `commit()` commits the current positions; with `enable_auto_commit` they are also
committed every `auto_commit_interval_ms` during `poll`, and on `close`. As Kafka's `commitSync`, a commit that fails
with a retriable error (the coordinator restarting, the leader of its `__consumer_offsets` partition moving) is
tried again every `retry_backoff_ms` until `default_api_timeout_ms` (60 s) passes; committing the same offsets twice
changes nothing. A read_committed consumer asks for stable
offsets, as Kafka's does (KIP-447's `require_stable`): while a transaction that sent offsets for a partition is
committing or aborting (its marker not yet on `__consumer_offsets`), `committed` and the first position wait for
it, up to `STABLE_OFFSETS_TIMEOUT_S`, then raise `RequestTimedOutError`; a consume-transform-produce restart thus
resumes after the transaction its producer just committed.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import ray

from actors.calls import call, get_actor
from actors.clients.broker import Broker
from actors.clients.group_member import GroupMember
from actors.clients.local_fetch import PendingFetch, records_of
from actors.clients.local_tail import LocalTail
from actors.clients.serializers import Deserializer
from actors.clients.transaction_manager import ConsumerGroupMetadata
from actors.core.groups.group_membership import GroupError
from actors.options import group_coordinator_name
from actors.server.partition_log import FetchResult
from actors.server.partition_lookup import partition_actor
from actors.startup_objects import freeze_startup_objects
from storage.arguments import is_int
from storage.closeable import Closeable
from storage.errors import (
    CommitFailedError,
    InvalidConfigError,
    InvalidGroupIdError,
    InvalidRequestError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
    RaybrokerError,
    RequestTimedOutError,
    SerializationError,
    UnknownTopicOrPartitionError,
)
from storage.partition.aborted_batches import AbortedBatches
from storage.partition.log_read import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from storage.records.consumer_offsets import OffsetAndMetadata
from storage.records.file_records import TimestampAndOffset
from storage.records.record_batch import TimestampType, iter_batches
from storage.topic_partition import TopicPartition, check_topic_partition

logger = logging.getLogger(__name__)

AUTO_OFFSET_RESET_POLICIES = ("earliest", "latest", "none")
# Kafka's consumer `group.protocol`: "classic" reads every subscribed partition here (no membership), "consumer"
# joins the group through Kafka 4's consumer protocol (`actors.clients.group_member`).
CONSUMER_GROUP_PROTOCOL = "consumer"
GROUP_PROTOCOLS = ("classic", CONSUMER_GROUP_PROTOCOL)
# The OffsetCommit version a consumer-protocol member's commits are checked as (v9: the member epoch).
CONSUMER_PROTOCOL_COMMIT_VERSION = 9
# Heartbeats one poll may send: the one due, and those acknowledging revocations its answers asked for.
MAX_HEARTBEATS_PER_POLL = 3
# Kafka's `isolation.level` values, and the partition read each one is (`storage.partition.log_read.ISOLATIONS`).
ISOLATION_LEVELS = {"read_uncommitted": "high_watermark", "read_committed": "txn_committed"}
# Pause before fetching again a partition whose actor answered empty without waiting (its long-poll slots
# were taken): bounds the load an idle consumer then puts on it (20 fetches a second) against the latency.
EMPTY_FETCH_BACKOFF_S = 0.05
# How long past its wait an answer may take (a Ray round trip measured 1-3 ms with every core busy) before a
# poll stops waiting for it and leaves it in flight for the next one.
ANSWER_GRACE_S = 0.05
# How often a waiting consumer looks at the high-watermark files of the partitions it follows locally. A look is a
# `pread` of 84 bytes, a CRC and the loop around it (~8 us of CPU measured with every core busy) and
# `time.sleep(0.0002)` woke ~0.28 ms later under that load, so while records keep coming one is seen ~0.1-0.3 ms
# after its append. Waiting that way costs CPU even when nothing comes (6 % of a core idle with a look per ms,
# against 0.8 % blocked in a long poll), so after TAIL_IDLE_S without a record the consumer waits in the actor's long
# poll.
TAIL_POLL_S = 0.0002
TAIL_IDLE_S = 0.1
MIN_RAY_WAIT_S = 0.001
# Kafka's consumer retries OffsetFetch answered UNSTABLE_OFFSET_COMMIT every `retry.backoff.ms` (100 ms) until
# `default.api.timeout.ms` (60 s); a transaction's markers land within milliseconds here, so it looks every 10 ms.
# Kafka's consumer `retry.backoff.ms` and `default.api.timeout.ms`: how often and how long a retriable ListOffsets
# answer (OFFSET_NOT_AVAILABLE) is asked again.
RETRY_BACKOFF_S = 0.1
DEFAULT_API_TIMEOUT_S = 60.0
STABLE_OFFSETS_RETRY_S = 0.01
STABLE_OFFSETS_TIMEOUT_S = 60.0


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


@dataclass(frozen=True, slots=True)
class _InFlight:
    """A partition's fetch in flight, when it started and how long the actor may hold it."""

    fetch: PendingFetch
    started_ns: int
    wait_ms: int


class Consumer(Closeable):
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
        fetch_max_wait_ms: int = 500,
        fetch_min_bytes: int = 1,
        value_deserializer: Deserializer | None = None,
        key_deserializer: Deserializer | None = None,
        local_fetch: bool = True,
        isolation_level: str = "read_uncommitted",
        default_api_timeout_ms: int = 60_000,
        retry_backoff_ms: int = 100,
        group_protocol: str = "classic",
    ) -> None:
        if group_protocol not in GROUP_PROTOCOLS:
            raise InvalidConfigError(
                f"group_protocol must be one of {', '.join(GROUP_PROTOCOLS)}, got {group_protocol!r}"
            )
        if isolation_level not in ISOLATION_LEVELS:
            raise InvalidConfigError(
                f"isolation_level must be one of {', '.join(ISOLATION_LEVELS)}, got {isolation_level!r}"
            )
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
            ("fetch_max_wait_ms", fetch_max_wait_ms, 0),
            ("fetch_min_bytes", fetch_min_bytes, 0),
            ("default_api_timeout_ms", default_api_timeout_ms, 0),
            ("retry_backoff_ms", retry_backoff_ms, 0),
        ):
            if not is_int(value) or value < low:
                raise InvalidConfigError(f"{name} must be an int >= {low}, got {value!r}")
        if group_id is not None and (not isinstance(group_id, str) or not group_id):
            raise InvalidGroupIdError(f"group_id must be a non-empty str or None, got {group_id!r}")
        if enable_auto_commit and group_id is None:
            raise InvalidGroupIdError("enable_auto_commit needs a group_id to commit under")
        if group_protocol == CONSUMER_GROUP_PROTOCOL and group_id is None:
            raise InvalidGroupIdError("group_protocol='consumer' needs a group_id to join")
        self._broker = broker or Broker.connect()
        freeze_startup_objects()
        self._group_id = group_id
        self._auto_offset_reset = auto_offset_reset
        self._auto_commit_interval_ns = auto_commit_interval_ms * 1_000_000 if enable_auto_commit else None
        self._default_api_timeout_s = default_api_timeout_ms / 1000
        self._retry_backoff_s = retry_backoff_ms / 1000
        self._max_poll_records = max_poll_records
        self._fetch_max_bytes = fetch_max_bytes
        self._max_partition_fetch_bytes = max_partition_fetch_bytes
        self._metadata_max_age_ns = metadata_max_age_ms * 1_000_000
        self._fetch_max_wait_ms = fetch_max_wait_ms
        self._fetch_min_bytes = fetch_min_bytes
        self._value_deserializer = value_deserializer
        self._key_deserializer = key_deserializer
        self._local_fetch = local_fetch
        self._isolation = ISOLATION_LEVELS[isolation_level]
        self._committed = isolation_level == "read_committed"
        self._assignment: list[TopicPartition] = []
        self._subscription: list[str] | None = None
        self._subscribed_at_ns = 0
        self._positions: dict[TopicPartition, int] = {}
        self._buffers: dict[TopicPartition, deque[ConsumerRecord]] = {}
        self._handles: dict[TopicPartition, Any] = {}
        # The node each partition's actor reported on its first fetch: a remote one is fetched directly after.
        self._nodes: dict[TopicPartition, str] = {}
        self._in_flight: dict[TopicPartition, _InFlight] = {}
        # Same-node partitions followed through their high-watermark files, and when records last came.
        self._tails: dict[TopicPartition, LocalTail] = {}
        self._records_ns = 0
        # Partitions not fetched again before this monotonic_ns (their actor answered empty without waiting).
        self._backoff_until_ns: dict[TopicPartition, int] = {}
        self._next_auto_commit_ns = time.monotonic_ns() + (self._auto_commit_interval_ns or 0)
        self._round_robin = 0
        self._closed = False
        self._member = (
            GroupMember(group_id, self._coordinator, lambda name: self._broker.topic(name).topic_id)
            if group_protocol == CONSUMER_GROUP_PROTOCOL and group_id is not None
            else None
        )

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
        self._leave_group()
        self._subscription = None
        self._set_assignment(wanted)

    def subscribe(self, topics: Iterable[str]) -> None:
        """Reads every partition of `topics`, or with `group_protocol="consumer"` the share the group's
        coordinator assigns this member (see the module docstring)."""
        self._check_open()
        names = list(dict.fromkeys(topics))
        for name in names:
            if not isinstance(name, str):
                raise UnknownTopicOrPartitionError(f"a topic name must be a str, not {type(name).__name__}")
        if self._member is not None:
            self._member.subscribe(names)
            self._subscription = names
            self._heartbeat()
            return
        self._set_assignment(self._partitions_of(names))
        self._subscription = names
        self._subscribed_at_ns = time.monotonic_ns()

    def unsubscribe(self) -> None:
        self._leave_group()
        self._subscription = None
        self._set_assignment([])

    def assignment(self) -> list[TopicPartition]:
        return list(self._assignment)

    def _partitions_of(self, topics: list[str]) -> list[TopicPartition]:
        return [(topic, partition) for topic in topics for partition in sorted(self._broker.topic(topic).partitions)]

    def _set_assignment(self, wanted: list[TopicPartition]) -> None:
        keep = set(wanted)
        for mapping in (
            self._positions,
            self._buffers,
            self._handles,
            self._nodes,
            self._in_flight,
            self._backoff_until_ns,
        ):
            for tp in [tp for tp in mapping if tp not in keep]:
                del mapping[tp]
        for tp in [tp for tp in self._tails if tp not in keep]:
            self._tails.pop(tp).close()
        self._assignment = wanted

    # --- positions -------------------------------------------------------------------------------

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record `poll` returns for `tp` (resolving it first if needed)."""
        tp = self._check_assigned(tp)
        self._resolve_positions([tp])
        return self._positions[tp]

    def published_high_watermark(self, tp: TopicPartition) -> int | None:
        """`tp`'s high watermark as its leader on this node last published it (its high-watermark file, rewritten
        before an append is acknowledged), read without a call; None when this consumer does not follow `tp`'s tail
        on its node or the file cannot tell (ask the leader)."""
        tail = self._tails.get(tp)
        return None if tail is None else tail.high_watermark()

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """The next `poll` reads `tp` from `offset` (checked against the log on the next fetch)."""
        tp = self._check_assigned(tp)
        if not is_int(offset) or offset < 0:
            raise InvalidRequestError(f"seek offset must be an int >= 0, got {offset!r}")
        self._set_position(tp, offset)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._seek_to(EARLIEST_TIMESTAMP, partitions)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._seek_to(LATEST_TIMESTAMP, partitions)

    def _seek_to(self, timestamp: int, partitions: Iterable[TopicPartition] | None) -> None:
        tps = self._assignment if partitions is None else [self._check_assigned(tp) for tp in partitions]
        for tp, found in zip(tps, self._list_offsets({tp: timestamp for tp in tps}).values(), strict=True):
            assert found is not None, "earliest and latest always have an answer"
            self._set_position(tp, found.offset)

    def _set_position(self, tp: TopicPartition, offset: int) -> None:
        """Moves the position: what is buffered or in flight from the old one is dropped."""
        self._positions[tp] = offset
        self._buffers.pop(tp, None)
        self._in_flight.pop(tp, None)

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int] | None]:
        """Per partition, the first (offset, timestamp) whose timestamp is >= the given ms; None if none is."""
        checked = {}
        for tp, timestamp in timestamps.items():
            if not is_int(timestamp) or timestamp < 0:
                raise InvalidRequestError(f"timestamp of {tp} must be an int >= 0 (ms), got {timestamp!r}")
            checked[check_topic_partition(tp)] = timestamp
        return {
            tp: None if found is None else (found.offset, found.timestamp)
            for tp, found in self._list_offsets(checked).items()
        }

    def _list_offsets(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, TimestampAndOffset | None]:
        """ListOffsets of every partition at once. A retriable answer is asked again every `retry.backoff.ms`, up to
        `default.api.timeout.ms`, as Kafka's consumer does: a leader elected a moment ago answers OFFSET_NOT_AVAILABLE
        until its high watermark reaches its epoch's start (KIP-207), and a replica that stopped leading since its
        handle was looked up (NOT_LEADER_OR_FOLLOWER) or went away is replaced by the leader looked up again."""
        found: dict[TopicPartition, TimestampAndOffset | None] = {}
        waiting = dict(timestamps)
        deadline = time.monotonic() + DEFAULT_API_TIMEOUT_S

        def raise_unless_retried(exc: RaybrokerError) -> None:
            if not exc.retriable or time.monotonic() >= deadline:
                raise exc

        while waiting:
            refs = {}
            for tp, ts in waiting.items():
                try:
                    refs[tp] = self._handle(tp).list_offset.remote(ts, self._isolation)
                except RaybrokerError as exc:
                    raise_unless_retried(exc)
            for tp, ref in refs.items():
                try:
                    found[tp] = call(ref)
                    del waiting[tp]
                except RaybrokerError as exc:
                    raise_unless_retried(exc)
                    if not isinstance(exc, OffsetNotAvailableError):
                        self._handles.pop(tp, None)
            if waiting:
                time.sleep(RETRY_BACKOFF_S)
        return {tp: found[tp] for tp in timestamps}

    def _resolve_positions(self, tps: list[TopicPartition]) -> None:
        """Gives every partition of `tps` without a position its committed offset, else the reset policy."""
        missing = [tp for tp in tps if tp not in self._positions]
        if not missing:
            return
        if self._group_id is not None:
            committed = self._fetch_committed(self._group_id, missing)
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
            self._set_position(tp, found.offset)

    # --- poll ------------------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[ConsumerRecord]:
        """Up to `max_records` (default `max_poll_records`) records, waiting up to `timeout_ms` for some."""
        self._check_open()
        limit = self._max_poll_records if max_records is None else max_records
        if not is_int(limit) or limit < 1:
            raise InvalidRequestError(f"max_records must be an int >= 1, got {max_records!r}")
        deadline = time.monotonic_ns() + max(0, timeout_ms) * 1_000_000
        self._maybe_auto_commit()
        if self._member is not None:
            if self._subscription is not None and self._member.due:
                self._heartbeat()
        elif (
            self._subscription is not None and time.monotonic_ns() - self._subscribed_at_ns >= self._metadata_max_age_ns
        ):
            self.subscribe(self._subscription)
        while True:
            records = self._drain(limit)
            if records:
                self._prefetch()
                return records
            try:
                self._fetch_round(deadline)
            except RaybrokerError as exc:
                if not exc.retriable:
                    raise
                # The group coordinator or a partition actor is restarting (committed positions or a handle
                # could not be looked up): like Kafka's poll, keep trying until the timeout instead of failing.
                logger.info("poll round failed, retrying: %s", exc)
                time.sleep(max(0, min(EMPTY_FETCH_BACKOFF_S, (deadline - time.monotonic_ns()) / 1e9)))
            if any(self._buffers.values()):
                continue
            if time.monotonic_ns() >= deadline:
                return []

    def _prefetch(self) -> None:
        """Starts the next fetches of the partitions just drained before handing their records out (Kafka's
        fetch pipelining): they wait in the actors while the caller works, which saves the next `poll` a round
        trip. Their wait is `fetch_max_wait_ms`, the next poll's timeout being unknown yet."""
        try:
            self._start_fetches(time.monotonic_ns() + self._fetch_max_wait_ms * 1_000_000)
        except RaybrokerError as exc:
            if not exc.retriable:
                raise
            logger.info("prefetch failed, the next poll retries: %s", exc)

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

    def _fetch_round(self, deadline_ns: int) -> None:
        """Reads the followed partitions' tails; if they had nothing, starts a long-poll fetch for every other
        assigned partition with an empty buffer and none in flight, then waits (until `deadline_ns` and the
        answers' grace) for any answer or record, and buffers every answer there."""
        started_ns = time.monotonic_ns()
        if self._read_tails(started_ns, deadline_ns):
            return
        while True:
            self._start_fetches(deadline_ns)
            following = self._following()
            if not self._in_flight and not following:
                # Every partition is backing off: sleep until the first may be fetched again (or the deadline).
                wake_ns = min([deadline_ns, *self._backoff_until_ns.values()])
                time.sleep(max(0, wake_ns - time.monotonic_ns()) / 1e9)
                return
            now_ns = time.monotonic_ns()
            if self._in_flight:
                by_ref = {flight.fetch.ref: tp for tp, flight in self._in_flight.items()}
                timeout_s = max(0, deadline_ns - now_ns) / 1e9 + ANSWER_GRACE_S
                if following:
                    # Ray counts a wait's timeout in whole milliseconds (0.2 ms returns at once, ~31 us of CPU a
                    # call): with calls in flight, the followed tails are looked at once per millisecond.
                    timeout_s = min(timeout_s, MIN_RAY_WAIT_S)
                ready, _ = ray.wait(list(by_ref), num_returns=1, timeout=timeout_s)
                if ready:
                    self._take_answers(by_ref)
                    return
                if not following:
                    return
            else:
                time.sleep(min(TAIL_POLL_S, max(0, deadline_ns - now_ns) / 1e9))
            if self._read_tails(started_ns, deadline_ns) or time.monotonic_ns() >= deadline_ns:
                return

    def _take_answers(self, by_ref: dict[Any, TopicPartition]) -> None:
        """Buffers every answer there among the fetches in flight (one at least is); a located answer that
        reached the high watermark starts or moves its partition's tail."""
        ready, _ = ray.wait(list(by_ref), num_returns=len(by_ref), timeout=0)
        out_of_range: list[TopicPartition] = []
        first_error: OffsetOutOfRangeError | None = None
        for ref in ready:
            tp = by_ref[ref]
            flight = self._in_flight.pop(tp)
            try:
                result = flight.fetch.result()
            except OffsetOutOfRangeError as exc:
                out_of_range.append(tp)
                first_error = first_error or exc
                continue
            except RaybrokerError as exc:
                if not exc.retriable:
                    raise
                # A restarting actor: the next round asks again (a new actor under the name is looked up).
                logger.info("fetch from %s-%d failed, retrying: %s", tp[0], tp[1], exc)
                self._handles.pop(tp, None)
                self._nodes.pop(tp, None)
                self._backoff_until_ns[tp] = time.monotonic_ns() + round(EMPTY_FETCH_BACKOFF_S * 1e9)
                continue
            if flight.fetch.node_id is not None:
                self._nodes[tp] = flight.fetch.node_id
            records = records_of(result)
            if not len(records) and (time.monotonic_ns() - flight.started_ns) * 2 < flight.wait_ms * 1_000_000:
                self._backoff_until_ns[tp] = time.monotonic_ns() + round(EMPTY_FETCH_BACKOFF_S * 1e9)
            self._buffer_fetched(tp, records, result)
            if len(records):
                self._records_ns = time.monotonic_ns()
            located = flight.fetch.located
            if located is not None and not self._committed:
                tail = self._tails.get(tp)
                if tail is not None and tail.high_watermark_file != located.high_watermark_file:
                    # The partition moved to another log dir of its node: its file is the new folder's.
                    self._tails.pop(tp).close()
                    tail = None
                tail = tail or LocalTail.open(located)
                if tail is not None:
                    self._tails[tp] = tail
                    tail.follow(located, flight.fetch.next_offset)
        self._reset_positions(out_of_range, first_error)

    def _following(self) -> list[TopicPartition]:
        """The partitions with an empty buffer whose tail is at their position: read through their tails."""
        return [
            tp
            for tp, tail in self._tails.items()
            if not self._buffers.get(tp) and tp not in self._in_flight and tail.at(self._positions.get(tp))
        ]

    def _read_tails(self, started_ns: int, deadline_ns: int) -> bool:
        """Reads every followed partition's tail once; True if one gave records (buffered) or handed its partition
        back to the actor path. Until `fetch_max_wait_ms` (or the deadline) passed, a tail with fewer than
        `fetch_min_bytes` new bytes gives none, as the actor holds a long poll."""
        following = self._following()
        if not following:
            return False
        now_ns = time.monotonic_ns()
        waited = now_ns >= min(deadline_ns, started_ns + self._fetch_max_wait_ms * 1_000_000)
        min_bytes = 1 if waited else self._fetch_min_bytes
        idle = [tp for tp in self._assignment if not self._buffers.get(tp)]
        max_bytes = min(self._max_partition_fetch_bytes, self._fetch_max_bytes // max(1, len(idle)))
        changed = False
        for tp in following:
            result = self._tails[tp].fetch(self._positions[tp], max_bytes, min_bytes)
            if result is None:
                changed = True
                continue
            records = records_of(result)
            if len(records):
                self._buffer_fetched(tp, records, result)
                self._records_ns = now_ns
                changed = True
        return changed

    def _start_fetches(self, deadline_ns: int) -> None:
        """A fetch waiting up to `fetch_max_wait_ms` (at most until `deadline_ns`) for every partition that
        needs one, is not followed through its tail (unless no record came for `TAIL_IDLE_S`) and is not backing
        off."""
        now_ns = time.monotonic_ns()
        idle = [tp for tp in self._assignment if not self._buffers.get(tp)]
        hot = now_ns - self._records_ns < TAIL_IDLE_S * 1e9
        following = set(self._following()) if self._tails and hot else set()
        tps = [
            tp
            for tp in idle
            if tp not in self._in_flight and tp not in following and self._backoff_until_ns.get(tp, 0) <= now_ns
        ]
        if not tps:
            return
        self._resolve_positions(tps)
        for tp in tps:
            self._backoff_until_ns.pop(tp, None)
        max_bytes = min(self._max_partition_fetch_bytes, self._fetch_max_bytes // len(idle))
        wait_ms = min(self._fetch_max_wait_ms, max(0, deadline_ns - now_ns) // 1_000_000)
        for tp in tps:
            fetch = PendingFetch(
                self._handle(tp),
                self._positions[tp],
                max_bytes,
                node_id=self._nodes.get(tp),
                prefer_local=self._local_fetch,
                max_wait_ms=wait_ms,
                min_bytes=self._fetch_min_bytes,
                isolation=self._isolation,
            )
            self._in_flight[tp] = _InFlight(fetch, now_ns, wait_ms)

    def _buffer_fetched(self, tp: TopicPartition, data: bytes | memoryview, fetched: FetchResult) -> None:
        """Buffers the records of `data` (the bytes of `fetched`) from the position up to the level's end, less
        those of aborted transactions for read_committed."""
        position = self._positions[tp]
        buffer = self._buffers.setdefault(tp, deque())
        next_position = position
        high_watermark = fetched.last_stable_offset if self._committed else fetched.high_watermark
        aborted = AbortedBatches(fetched.aborted_transactions or ()) if self._committed else None
        for batch in iter_batches(data):
            # The filter sees every batch, markers included: an ABORT marker ends its producer's aborted run.
            dropped = aborted is not None and aborted.drops(batch)
            if batch.is_control or dropped:
                if batch.last_offset < high_watermark:
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
        """Commits `offsets` (default: the current position of every assigned partition) for the group, retrying a
        retriable failure until `default_api_timeout_ms` passes (see the module docstring), then raising it."""
        self._check_open()
        group = self._require_group()
        to_commit = (
            {tp: self._positions[tp] for tp in self._assignment if tp in self._positions}
            if offsets is None
            else {check_topic_partition(tp): offset for tp, offset in offsets.items()}
        )
        deadline = time.monotonic() + self._default_api_timeout_s
        while True:
            try:
                if self._member is None:
                    call(self._coordinator().commit.remote(group, to_commit))
                else:
                    self._commit_as_member(to_commit)
                return
            except RaybrokerError as exc:
                if not exc.retriable or time.monotonic() + self._retry_backoff_s > deadline:
                    raise
                logger.info("commit of group %s failed (%s); trying again", group, exc)
                time.sleep(self._retry_backoff_s)

    def _commit_as_member(self, offsets: Mapping[TopicPartition, int]) -> None:
        """A member's commit, checked against its member epoch (a stale one raises `CommitFailedError`)."""
        assert self._member is not None
        verdict = call(
            self._coordinator().commit_member.remote(
                self._member.group_id,
                self._member.member_id,
                self._member.epoch,
                {tp: OffsetAndMetadata(offset) for tp, offset in offsets.items()},
                api_version=CONSUMER_PROTOCOL_COMMIT_VERSION,
            )
        )
        if verdict != GroupError.NONE:
            raise CommitFailedError(
                f"the commit of group {self._member.group_id!r} was refused ({verdict.name}): the member's partitions "
                "moved on, and the records read since its last commit may be read again by their new owner"
            )

    def _heartbeat(self) -> None:
        """A consumer-protocol member's heartbeat, and what its answer changes (see `actors.clients.group_member`):
        partitions given up (committed first when committing automatically, unless the member was fenced), the new
        ones to read, and a heartbeat at once to acknowledge a revocation."""
        assert self._member is not None
        for _ in range(MAX_HEARTBEATS_PER_POLL):
            changed = self._member.heartbeat(self._assignment)
            if changed is None:
                return
            revoked = [tp for tp in self._assignment if tp not in set(changed.partitions)]
            if revoked and not changed.fenced and self._auto_commit_interval_ns is not None:
                positions = {tp: self._positions[tp] for tp in revoked if tp in self._positions}
                self._auto_commit(functools.partial(self._commit_as_member, positions))
            self._set_assignment(changed.partitions)
            if not revoked and not changed.fenced:
                return

    def _leave_group(self) -> None:
        """A consumer-protocol member leaves its group (its partitions go to the others at once)."""
        if self._member is not None and self._subscription is not None:
            try:
                self._member.leave()
            except RaybrokerError as exc:
                logger.info(
                    "group %s: leaving failed (%s); the coordinator removes the member after its session",
                    self._member.group_id,
                    exc,
                )

    def consumer_group_metadata(self) -> ConsumerGroupMetadata:
        """The group a transactional producer commits this consumer's offsets to
        (`Producer.send_offsets_to_transaction`). A consumer-protocol member gives its member id and epoch, which
        fence a commit of partitions it no longer owns; otherwise generation -1 and no member id, which the group
        coordinator accepts as Kafka accepts a commit without member information."""
        if self._member is not None:
            return ConsumerGroupMetadata(self._require_group(), self._member.epoch, self._member.member_id)
        return ConsumerGroupMetadata(self._require_group())

    def committed(self, tp: TopicPartition) -> int | None:
        """The group's committed offset of `tp`, None if it has none."""
        group = self._require_group()
        tp = check_topic_partition(tp)
        return self._fetch_committed(group, [tp])[tp]

    def _fetch_committed(self, group: str, tps: list[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The group's committed offsets of `tps`; stable ones for read_committed (see the module docstring)."""
        coordinator = self._coordinator()
        if self._committed:
            deadline = time.monotonic() + STABLE_OFFSETS_TIMEOUT_S
            while unstable := call(coordinator.unstable_offsets.remote(group, tps)):
                if time.monotonic() >= deadline:
                    raise RequestTimedOutError(
                        f"offsets of {', '.join(f'{t}-{p}' for t, p in sorted(unstable))} for group {group!r} still "
                        f"pending a transaction after {STABLE_OFFSETS_TIMEOUT_S:g} s"
                    )
                time.sleep(STABLE_OFFSETS_RETRY_S)
        committed: dict[TopicPartition, OffsetAndMetadata | None] = call(coordinator.fetch_committed.remote(group, tps))
        return {tp: None if found is None else found.offset for tp, found in committed.items()}

    def _maybe_auto_commit(self) -> None:
        if self._auto_commit_interval_ns is None or time.monotonic_ns() < self._next_auto_commit_ns:
            return
        self._auto_commit(self.commit)
        self._next_auto_commit_ns = time.monotonic_ns() + self._auto_commit_interval_ns

    def _auto_commit(self, commit: Callable[[], None]) -> None:
        """An automatic commit; one refused because the member's partitions moved on is logged, as Kafka's consumer
        logs a failed auto-commit, and the records since the last commit go to their new owner again."""
        try:
            commit()
        except CommitFailedError as exc:
            logger.warning("automatic commit failed: %s", exc)

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
                self._auto_commit(self.commit)
        finally:
            self._leave_group()
            self._closed = True
            self._buffers.clear()
            self._handles.clear()
            self._nodes.clear()
            self._in_flight.clear()
            self._backoff_until_ns.clear()
            for tail in self._tails.values():
                tail.close()
            self._tails.clear()

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


__all__ = ["Consumer", "ConsumerRecord"]
