"""The share consumer facade: Kafka 4.2's `KafkaShareConsumer` (KIP-932) over the group coordinator actor and the
partition actors, so a Python process takes records from a share group beside Kafka's share consumers.

`subscribe(topics)` joins the share group (`actors.clients.share_member`); the coordinator assigns partitions, which
several members may share. `poll` heartbeats when due, then asks each assigned partition's leader to acquire records
for the member, each fetch carrying the partition's acknowledgements pending from the records it returned before (one
call, as Kafka's ShareFetch piggybacks them; `PartitionServer.share_fetch`: whole batches, each record locked for the
group's `share.record.lock.duration.ms` with its delivery count) and returns them, at most `max_poll_records` (a soft
limit: whole batches; a hard one with `share_acquire_mode="record_limit"`, Kafka 4.2's `share.acquire.mode`, which
asks the partitions one after another for what the poll may still take), waiting up to `timeout_ms` while none come.
A member assigned one partition that has acquired nothing for `IDLE_BEFORE_WAIT_S` waits at its leader, as Kafka's
ShareFetch does, up to `fetch_max_wait_ms` (Kafka's `fetch.max.wait.ms`) a call and never past its next heartbeat: an
idle member costs a call per wait rather than one every `POLL_INTERVAL_S`, and the first record appended or released
is taken at once. A busy member asks again every `POLL_INTERVAL_S` instead, so that each poll takes what accumulated
meanwhile, up to `max_poll_records`, rather than being woken for each record alone; so does a member of several
partitions, and one whose leader answered before its wait was over without records (the leader had no wait slot
free, or another member took what woke it). Acknowledgements of a partition the poll does not ask (no longer
assigned, or past the record limit) go in a ShareAcknowledge of their own.

Acknowledgement (Kafka's `share.acknowledgement.mode`):
- `implicit` (the default): every record a `poll` returned is accepted by the next `poll`, `commit_sync` or `close`;
- `explicit`: each record is acknowledged with `acknowledge(record, ack_type)` (ACCEPT, RELEASE: delivered again with a
  higher delivery count, REJECT: never again; Kafka 4.2's RENEW of the lock is not sent by this consumer and raises)
  before the next `poll`, which otherwise raises
  `InvalidRequestError` as Kafka's raises IllegalStateException. `acknowledge` in implicit mode raises too.
Offsets inside an acquired range that hold no record (control batches, compacted away) are acknowledged as GAP, as
Kafka's client does. `commit_sync` sends the pending acknowledgements at once and answers each partition's outcome
(None, or the leader's error: `InvalidRecordStateError` for records whose lock expired and went to another member);
acknowledgements `poll` sends report theirs to `acknowledgement_commit_callback`, and a failure is logged when none
is given. `close` sends what is pending, releases every record the member still holds (they go to other members at
once, as when Kafka's share session closes) and leaves the group.

A partition whose leader moved (a retriable error) is looked up again at the next poll; records it had acquired for
the member are redelivered by the new leader after their lock expires.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from actors.calls import call, get_actor
from actors.clients.broker import Broker
from actors.clients.consumer import ConsumerRecord
from actors.clients.serializers import Deserializer
from actors.clients.share_member import ShareMember
from actors.core.shares.acknowledgements import AcknowledgeType, acknowledgement_batches
from actors.core.shares.group_share_config import ResolvedShareConfig
from actors.core.shares.leader_shares import ShareFetched
from actors.options import group_coordinator_name
from actors.server.partition_lookup import partition_actor
from storage.arguments import is_int
from storage.closeable import Closeable
from storage.errors import InvalidConfigError, InvalidGroupIdError, InvalidRequestError, RaybrokerError, is_retriable
from storage.records.record_batch import iter_batches
from storage.topic_partition import TopicPartition

logger = logging.getLogger(__name__)

IMPLICIT = "implicit"
EXPLICIT = "explicit"
ACKNOWLEDGEMENT_MODES = (IMPLICIT, EXPLICIT)
# Kafka 4.2's `share.acquire.mode` (KIP-1206).
BATCH_OPTIMIZED = "batch_optimized"
RECORD_LIMIT = "record_limit"
ACQUIRE_MODES = (BATCH_OPTIMIZED, RECORD_LIMIT)
# How often a poll that acquired nothing, and did not wait at a leader as long, asks the leaders again while its
# timeout lasts.
POLL_INTERVAL_S = 0.05
# How long a member of one partition acquires nothing before its fetches wait at the leader (see the module
# docstring).
IDLE_BEFORE_WAIT_S = 0.5
# A partition's outcome of an acknowledgement: None when it was applied, else the leader's error.
AcknowledgementOutcomes = dict[TopicPartition, RaybrokerError | None]


@dataclass(frozen=True, slots=True)
class ShareRecord(ConsumerRecord):
    """One record as `poll` returns it (a `ConsumerRecord`), with its delivery count (Kafka's
    `ConsumerRecord.deliveryCount`: 1 on its first delivery)."""

    delivery_count: int


class ShareConsumer(Closeable):
    """A member of a share group; see the module docstring. Not thread-safe (as Kafka's share consumer)."""

    def __init__(
        self,
        group_id: str,
        broker: Broker | None = None,
        *,
        acknowledgement_mode: str = IMPLICIT,
        share_acquire_mode: str = BATCH_OPTIMIZED,
        max_poll_records: int = 500,
        max_partition_fetch_bytes: int = 1024 * 1024,
        fetch_max_wait_ms: int = 500,
        key_deserializer: Deserializer | None = None,
        value_deserializer: Deserializer | None = None,
        client_id: str = "raybroker-python",
        acknowledgement_commit_callback: Callable[[AcknowledgementOutcomes], None] | None = None,
    ) -> None:
        if not isinstance(group_id, str) or not group_id:
            raise InvalidGroupIdError(f"group_id must be a non-empty str, got {group_id!r}")
        if acknowledgement_mode not in ACKNOWLEDGEMENT_MODES:
            raise InvalidConfigError(
                f"acknowledgement_mode must be one of {', '.join(ACKNOWLEDGEMENT_MODES)}, got {acknowledgement_mode!r}"
            )
        if share_acquire_mode not in ACQUIRE_MODES:
            raise InvalidConfigError(
                f"share_acquire_mode must be one of {', '.join(ACQUIRE_MODES)}, got {share_acquire_mode!r}"
            )
        for name, value in (
            ("max_poll_records", max_poll_records),
            ("max_partition_fetch_bytes", max_partition_fetch_bytes),
        ):
            if not is_int(value) or value < 1:
                raise InvalidConfigError(f"{name} must be an int >= 1, got {value!r}")
        if not is_int(fetch_max_wait_ms) or fetch_max_wait_ms < 0:
            raise InvalidConfigError(f"fetch_max_wait_ms must be an int >= 0, got {fetch_max_wait_ms!r}")
        self._broker = broker or Broker.connect()
        self._explicit = acknowledgement_mode == EXPLICIT
        self._record_limit = share_acquire_mode == RECORD_LIMIT
        self._max_poll_records = max_poll_records
        self._max_partition_fetch_bytes = max_partition_fetch_bytes
        self._fetch_max_wait_s = fetch_max_wait_ms / 1000
        self._key_deserializer = key_deserializer
        self._value_deserializer = value_deserializer
        self._callback = acknowledgement_commit_callback
        self._member = ShareMember(
            group_id,
            lambda: get_actor(group_coordinator_name()),
            lambda name: self._broker.topic(name).topic_id,
            client_id,
        )
        self._subscription: list[str] = []
        self._settings = ResolvedShareConfig()
        self._handles: dict[TopicPartition, Any] = {}
        # Records the last poll returned that are not acknowledged yet, and acknowledgements not sent yet.
        self._delivered: dict[TopicPartition, set[int]] = {}
        self._pending: dict[TopicPartition, dict[int, AcknowledgeType]] = {}
        # Partitions that hold records acquired for this member (released on close).
        self._touched: set[TopicPartition] = set()
        # Since when the member's acquisitions have come back empty (None: the last one acquired records).
        self._idle_since: float | None = None
        self._closed = False

    # --- subscription ----------------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str]) -> None:
        """Joins the share group with `topics` (replacing an earlier subscription); the next `poll` heartbeats."""
        self._check_open()
        names = list(topics)
        if not names or not all(isinstance(name, str) and name for name in names):
            raise InvalidRequestError(f"subscribe needs topic names, got {names!r}")
        self._subscription = names
        self._member.subscribe(names)

    def subscription(self) -> list[str]:
        """The topics subscribed to."""
        return list(self._subscription)

    def assignment(self) -> list[TopicPartition]:
        """The partitions the coordinator assigned this member at its last heartbeat."""
        return list(self._member.assignment)

    @property
    def member_id(self) -> str:
        """The member id this consumer joined with."""
        return self._member.member_id

    def acquisition_lock_timeout_ms(self) -> int:
        """The group's record lock duration, which the records of the last poll are held for."""
        return self._settings.record_lock_duration_ms

    def delivery_count_limit(self) -> int:
        """The group's delivery count limit (`group.share.delivery.count.limit`): a record released on its last
        allowed delivery is archived, never delivered again."""
        return self._settings.delivery_count_limit

    # --- records ---------------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 1000) -> list[ShareRecord]:
        """Records acquired for this member, waiting up to `timeout_ms` while none come (see the module docstring)."""
        self._check_open()
        if not self._subscription:
            raise InvalidRequestError("subscribe before poll")
        if not is_int(timeout_ms) or timeout_ms < 0:
            raise InvalidConfigError(f"timeout_ms must be an int >= 0, got {timeout_ms!r}")
        self._settle_delivered()
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            if self._member.due:
                self._member.heartbeat()
                self._settings = self._member.settings()
            asked_at = time.monotonic()
            records = self._acquire(self._wait_ms(deadline))
            now = time.monotonic()
            if records:
                self._idle_since = None
            elif self._idle_since is None:
                self._idle_since = asked_at
            if records or now >= deadline:
                return records
            time.sleep(max(0.0, min(asked_at + POLL_INTERVAL_S, deadline) - now))

    def acknowledge(self, record: ShareRecord, ack_type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """Acknowledges one record the last `poll` returned (explicit mode only), sent with the next poll or commit."""
        self._check_open()
        if not self._explicit:
            raise InvalidRequestError("acknowledge needs acknowledgement_mode='explicit'")
        kind = AcknowledgeType(ack_type)
        if kind == AcknowledgeType.GAP:
            raise InvalidRequestError(
                "GAP is not acknowledged by hand: the consumer sends it for offsets without a record"
            )
        if kind == AcknowledgeType.RENEW:
            raise InvalidRequestError("RENEW is not sent by this consumer: acknowledge within the record lock")
        tp = (record.topic, record.partition)
        delivered = self._delivered.get(tp)
        if delivered is None or record.offset not in delivered:
            raise InvalidRequestError(
                f"{record.topic}-{record.partition} offset {record.offset} was not delivered by the last poll, or is "
                "acknowledged already"
            )
        delivered.discard(record.offset)
        if not delivered:
            del self._delivered[tp]
        self._pending.setdefault(tp, {})[record.offset] = kind

    def commit_sync(self) -> AcknowledgementOutcomes:
        """Sends the pending acknowledgements (in implicit mode: ACCEPT for every record delivered) and answers each
        partition's outcome: None when applied, else the leader's error."""
        self._check_open()
        if not self._explicit:
            self._settle_delivered()
        return self._send_pending()

    def _settle_delivered(self) -> None:
        """Implicit mode: the last poll's records become accepted; explicit mode: every one must be acknowledged."""
        if not self._delivered:
            return
        if self._explicit:
            left = sum(len(offsets) for offsets in self._delivered.values())
            raise InvalidRequestError(
                f"{left} records of the last poll are not acknowledged: explicit mode acknowledges every record "
                "before the next poll"
            )
        for tp, offsets in self._delivered.items():
            pending = self._pending.setdefault(tp, {})
            for offset in offsets:
                pending[offset] = AcknowledgeType.ACCEPT
        self._delivered.clear()

    def _wait_ms(self, deadline: float) -> int:
        """How long the next acquisition may wait at its leader for records: for a member of one partition idle for
        `IDLE_BEFORE_WAIT_S`, up to `fetch_max_wait_ms`, the poll's `deadline` (monotonic) and the next heartbeat;
        else 0."""
        idle = self._idle_since is not None and time.monotonic() - self._idle_since >= IDLE_BEFORE_WAIT_S
        if not idle or len(self._member.assignment) != 1:
            return 0
        wait_s = min(self._fetch_max_wait_s, deadline - time.monotonic(), self._member.seconds_until_due)
        return max(0, int(wait_s * 1000))

    def _acquire(self, wait_ms: int) -> list[ShareRecord]:
        """One round of acquisitions: every assigned partition asked at once for `max_poll_records`, or in the
        record-limit mode one after another, each for what the poll may still take, waiting up to `wait_ms` at the
        leader for records. Each fetch carries the partition's pending acknowledgements; those of a partition not
        asked are sent on their own. Their outcomes are reported."""
        pending, self._pending = self._pending, {}
        outcomes: AcknowledgementOutcomes = {}
        records: list[ShareRecord] = []
        if self._record_limit:
            for tp in list(self._member.assignment):
                left = self._max_poll_records - len(records)
                if left <= 0:
                    break
                acks = pending.pop(tp, None)
                records.extend(self._take(tp, self._ask(tp, left, acks, wait_ms), acks is not None, outcomes))
        else:
            asked = [(tp, pending.pop(tp, None)) for tp in list(self._member.assignment)]
            refs = [(tp, self._ask(tp, self._max_poll_records, acks, wait_ms), acks is not None) for tp, acks in asked]
            for tp, ref, acknowledged in refs:
                records.extend(self._take(tp, ref, acknowledged, outcomes))
        if pending:
            outcomes.update(self._acknowledge(pending))
        if outcomes:
            self._report(outcomes)
        return records

    def _ask(self, tp: TopicPartition, max_records: int, acks: dict[int, AcknowledgeType] | None, wait_ms: int) -> Any:
        """The pending acquisition at `tp`'s leader, carrying `acks`, waiting there up to `wait_ms` for records; the
        error when its leader could not be asked."""
        try:
            return self._handle(tp).share_fetch.remote(
                self._member.group_id,
                self._member.member_id,
                self._settings,
                self._max_partition_fetch_bytes,
                max_records,
                max_wait_ms=wait_ms,
                record_limit=self._record_limit,
                acknowledgements=None if acks is None else acknowledgement_batches(acks),
            )
        except RaybrokerError as exc:
            return exc

    def _take(
        self, tp: TopicPartition, ref: Any, acknowledged: bool, outcomes: AcknowledgementOutcomes
    ) -> list[ShareRecord]:
        """The records an acquisition `_ask` started got (none if it failed or was not started); the outcome of the
        acknowledgements it carried goes to `outcomes`."""
        try:
            if isinstance(ref, RaybrokerError):
                raise ref
            fetched: ShareFetched = call(ref)
        except RaybrokerError as exc:
            if acknowledged:
                outcomes[tp] = exc
            self._forget_leader(tp, exc)
            return []
        if acknowledged:
            outcomes[tp] = fetched.acknowledge_error
        if not fetched.acquired:
            return []
        self._touched.add(tp)
        return self._records_of(tp, fetched)

    def _records_of(self, tp: TopicPartition, fetched: ShareFetched) -> list[ShareRecord]:
        """The records of `fetched` inside its acquired ranges; offsets of those ranges without a record go to the
        pending acknowledgements as GAP."""
        counts: dict[int, int] = {}
        for acquired in fetched.acquired:
            for offset in range(acquired.first_offset, acquired.last_offset + 1):
                counts[offset] = acquired.delivery_count
        records: list[ShareRecord] = []
        for batch in iter_batches(fetched.records):
            if batch.is_control:
                continue
            for record in batch.records():
                count = counts.pop(record.offset, None)
                if count is None:
                    continue
                records.append(
                    ShareRecord(
                        tp[0],
                        tp[1],
                        record.offset,
                        record.timestamp,
                        batch.timestamp_type,
                        _deserialized(self._key_deserializer, record.key),
                        _deserialized(self._value_deserializer, record.value),
                        record.headers,
                        count,
                    )
                )
        if counts:
            pending = self._pending.setdefault(tp, {})
            for offset in counts:
                pending[offset] = AcknowledgeType.GAP
        if records:
            self._delivered.setdefault(tp, set()).update(record.offset for record in records)
        return records

    def _send_pending(self) -> AcknowledgementOutcomes:
        pending, self._pending = self._pending, {}
        return self._acknowledge(pending)

    def _acknowledge(self, pending: dict[TopicPartition, dict[int, AcknowledgeType]]) -> AcknowledgementOutcomes:
        """Sends each partition's acknowledgements in a ShareAcknowledge of its own; answers each one's outcome."""
        outcomes: AcknowledgementOutcomes = {}
        for tp, types in pending.items():
            try:
                call(
                    self._handle(tp).share_acknowledge.remote(
                        self._member.group_id, self._member.member_id, self._settings, acknowledgement_batches(types)
                    )
                )
                outcomes[tp] = None
            except RaybrokerError as exc:
                # A refusal is the acknowledgements' outcome (Kafka's commitSync answers it too); only a leader
                # that moved or went away drops the handle.
                outcomes[tp] = exc
                if is_retriable(exc):
                    self._handles.pop(tp, None)
        return outcomes

    def _report(self, outcomes: AcknowledgementOutcomes) -> None:
        if self._callback is not None:
            self._callback(outcomes)
            return
        for (topic, partition), error in outcomes.items():
            if error is not None:
                logger.warning(
                    "share group %s: acknowledgements of %s-%d failed: %s",
                    self._member.group_id,
                    topic,
                    partition,
                    error,
                )

    def _handle(self, tp: TopicPartition) -> Any:
        handle = self._handles.get(tp)
        if handle is None:
            handle = partition_actor(*tp)
            self._handles[tp] = handle
        return handle

    def _forget_leader(self, tp: TopicPartition, exc: RaybrokerError) -> None:
        """A retriable failure drops the partition's leader handle (looked up again next time); others raise."""
        self._handles.pop(tp, None)
        if not is_retriable(exc):
            raise exc

    # --- lifecycle -------------------------------------------------------------------------------

    def close(self) -> None:
        """Sends what is pending (implicit mode: accepting the last poll's records), releases the records this member
        still holds and leaves the group. Idempotent."""
        if self._closed:
            return
        try:
            if not self._explicit:
                self._settle_delivered()
            self._delivered.clear()
            if self._pending:
                self._report(self._send_pending())
            for tp in sorted(self._touched):
                try:
                    call(self._handle(tp).share_release.remote(self._member.group_id, self._member.member_id))
                except RaybrokerError as exc:
                    logger.info(
                        "share group %s: releasing %s-%d failed (%s); its locks expire", self._member.group_id, *tp, exc
                    )
            self._member.leave()
        finally:
            self._closed = True
            self._handles.clear()

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidRequestError("the share consumer is closed")


def _deserialized(deserializer: Deserializer | None, data: bytes | None) -> Any:
    return data if data is None or deserializer is None else deserializer(data)


__all__ = ["ShareConsumer", "ShareRecord"]
