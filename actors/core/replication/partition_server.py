"""What one replica of a partition serves to its callers, written once for both hosts: the partition actor
(`actors.server.partition_log`) and the in-process broker (`actors.core.in_process_broker`) hold the
same `PartitionServer`.

- **Appends** (client batches, a group coordinator's transactional offsets, a transaction coordinator's markers)
  go through `Replica.append`: only the leader takes them, `acks=all` only while enough replicas are in sync, and the
  high watermark and the change counter follow every append. An append answers at once; an `acks=all` caller then
  waits with `await_replicated`, which answers at once for a partition with one replica. The host's thread that
  appends thus never waits for followers. An I/O error is handed to the host's `on_storage_error` (the partition
  actor reports it to its node's log manager, which takes the whole log dir offline) before it is raised.
- **Client reads** are fenced by the client's `current_leader_epoch` and refused by a replica that does not lead
  (`check_leader`, `fetch`, `list_offset`, `epoch_end_offset`, `describe_producers`, `delete_records`).
- **The long poll** (Kafka's `fetch.max.wait.ms` / `fetch.min.bytes`): `long_poll` answers at once when at least
  `min_bytes` are there, else waits on the partition's change counter (`LogChanges`) and looks again, until
  `min_bytes` are there or `max_wait_ms` expired. A waiting fetch holds one of the host's `long_poll_slots`; one that
  finds every slot taken answers at once, as with `max_wait_ms=0`, so long polls never take every read thread. A
  ShareFetch that acquired nothing waits the same way, for an append or for an acknowledgement or release that frees
  record locks (`LogChanges.wake`), as Kafka's delayed share fetch completes on either; it holds one of the host's
  `share_poll_slots`, so acknowledgements always find a share thread.
- **Share groups** (KIP-932): the leader holds the partition's share-partitions (`actors.core.shares.leader_shares`),
  so a ShareFetch acquires records beside the log it reads and acknowledgements settle them there
  (`share_fetch`, `share_acknowledge`, `share_release`; the leader only), and the share-group offset admin APIs
  read, set and drop them there (`share_offsets`, `alter_share_offset`, `delete_share_state`). Their durable state
  goes through the host's `share_states` to `__share_group_state` (`actors.core.shares.share_state_store`); without
  it they are kept in memory only.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from actors.core.replication.log_changes import LogChanges
from actors.core.replication.replica import ACKS_ALL, ACKS_ALL_TIMEOUT_MS, Replica
from actors.core.role_metrics import NO_ROLE_METRICS, RoleMetrics
from actors.core.shares.acknowledgements import AcknowledgementBatch, records_by_type
from actors.core.shares.dead_letters import DeadLetterWriter
from actors.core.shares.group_share_config import ResolvedShareConfig
from actors.core.shares.leader_shares import (
    LeaderShares,
    LogPosition,
    LogRead,
    ShareFetched,
    ShareOffsets,
    SharePartitionStatistics,
    ShareStatePersister,
)
from storage.arguments import is_int
from storage.clock import SYSTEM_CLOCK, Clock
from storage.errors import InvalidRequestError, KafkaStorageError, RaybrokerError
from storage.partition.leader_epoch_cache import UNDEFINED_EPOCH
from storage.partition.log import Log, LogAppendInfo
from storage.partition.producer_append import AppendOrigin
from storage.partition.producer_state import ActiveProducer
from storage.records.file_records import TimestampAndOffset
from storage.records.layout import ControlRecordType
from storage.segment.log_segment import FetchDataInfo

# Long-poll fetches waiting at once per host (a partition actor, a partition host, an in-process partition): half of
# a partition actor's four read threads, so offsets, states and fetches that find data always have a thread.
LONG_POLL_SLOTS = 2
# ShareFetches waiting at once per host: half of a host's share threads (`actors.options.SHARE_THREADS`), so the
# acknowledgements that would wake them always have a thread.
SHARE_POLL_SLOTS = 4

_Answer = TypeVar("_Answer")


class PartitionServer:
    """One replica's appends, reads and long polls; see the module docstring. `topic` names the partition's topic
    for the metrics of its appends (None: not recorded); `share_states` keeps its share-partitions' durable states and
    `dead_letters` writes their dead letters (Kafka 4.4's dead-letter topic)."""

    def __init__(
        self,
        log: Log,
        replica: Replica,
        changes: LogChanges,
        *,
        topic: str | None,
        metrics: RoleMetrics = NO_ROLE_METRICS,
        long_poll_slots: threading.Semaphore | None = None,
        share_poll_slots: threading.Semaphore | None = None,
        on_storage_error: Callable[[KafkaStorageError], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        share_states: ShareStatePersister | None = None,
        dead_letters: DeadLetterWriter | None = None,
    ) -> None:
        self.log = log
        self.replica = replica
        self.changes = changes
        self._topic = topic
        self._metrics = metrics
        self._long_poll_slots = long_poll_slots or threading.BoundedSemaphore(LONG_POLL_SLOTS)
        self._share_poll_slots = share_poll_slots or threading.BoundedSemaphore(SHARE_POLL_SLOTS)
        self._on_storage_error = on_storage_error
        self.shares = LeaderShares(clock, share_states, dead_letters)

    # --- appends -------------------------------------------------------------------------------------------------

    def append(self, batches: bytes | bytearray | memoryview, acks: int = 1) -> LogAppendInfo:
        """Appends client batches (Kafka wire bytes, baseOffset 0) and answers at once with their offsets; with
        `acks` -1 the caller then waits with `await_replicated`."""
        info = self._append(acks, lambda log: log.append(batches))
        if self._topic is not None and not info.duplicate:
            self._metrics.produced(self._topic, info.record_count, info.valid_bytes)
        return info

    def append_from_coordinator(self, batch: bytes | memoryview) -> LogAppendInfo:
        """Appends a group coordinator's transactional offset commit (origin COORDINATOR: the producer's epoch is
        checked, its sequence is not) as an `acks=all` append (Kafka's coordinators append with acks -1)."""
        return self._append(ACKS_ALL, lambda log: log.append(batch, origin=AppendOrigin.COORDINATOR))

    def append_transaction_marker(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int, result: ControlRecordType
    ) -> LogAppendInfo:
        """Writes a transaction coordinator's COMMIT/ABORT marker (`Log.append_transaction_marker`: an older producer
        epoch or coordinator epoch is refused) as an `acks=all` append: Kafka's WriteTxnMarkers appends with acks -1,
        so a marker the coordinator counts as written survives the leader's loss."""
        return self._append(
            ACKS_ALL, lambda log: log.append_transaction_marker(producer_id, producer_epoch, coordinator_epoch, result)
        )

    def _append(self, acks: int, write: Callable[[Log], LogAppendInfo]) -> LogAppendInfo:
        try:
            return self.replica.append(acks, write)
        except KafkaStorageError as exc:
            if self._on_storage_error is not None:
                self._on_storage_error(exc)
            raise

    def await_replicated(self, info: LogAppendInfo, timeout_ms: int = ACKS_ALL_TIMEOUT_MS) -> LogAppendInfo:
        """The second half of an `acks=all` append: `info` once every in-sync replica has it, at once for a partition
        with one replica (`Replica.await_replicated`)."""
        if not self.log.replicated:
            return info
        return self.replica.await_replicated(info, timeout_ms)

    # --- client reads --------------------------------------------------------------------------------------------

    def check_leader(self, current_leader_epoch: int = UNDEFINED_EPOCH) -> Log:
        """The log, for a client read: the client's `current_leader_epoch` and the replica's role checked
        (`Replica.check_client_read`; -1: no epoch checked)."""
        self.replica.check_client_read(current_leader_epoch)
        return self.log

    def fetch(
        self,
        offset: int,
        max_bytes: int,
        isolation: str = "high_watermark",
        current_leader_epoch: int = UNDEFINED_EPOCH,
    ) -> FetchDataInfo:
        """Whole batches from `offset` up to the high watermark, or with `isolation="txn_committed"` (a
        read_committed consumer) those below the last stable offset, with the aborted transactions overlapping them;
        fenced by `current_leader_epoch` (`check_leader`)."""
        return self.check_leader(current_leader_epoch).read(offset, max_bytes, isolation=isolation)

    def list_offset(
        self, timestamp: int, isolation: str = "high_watermark", current_leader_epoch: int = UNDEFINED_EPOCH
    ) -> TimestampAndOffset | None:
        """Kafka's ListOffsets for a consumer at `isolation` (`Replica.list_offset`)."""
        return self.replica.list_offset(timestamp, isolation, current_leader_epoch)

    def epoch_end_offset(self, epoch: int, current_leader_epoch: int = UNDEFINED_EPOCH) -> tuple[int, int]:
        """OffsetForLeaderEpoch, fenced by the caller's `current_leader_epoch` (`Replica.epoch_end_offset`)."""
        return self.replica.epoch_end_offset(epoch, current_leader_epoch)

    def describe_producers(self) -> list[ActiveProducer]:
        """The producers the leader remembers, each with the start offset of its open transaction (Kafka's
        DescribeProducers, which only the leader answers: `check_leader`)."""
        return self.check_leader().active_producers()

    def offsets(self) -> tuple[int, int, int]:
        """(log start offset, high watermark, log end offset) of this replica, whatever its role."""
        log = self.log
        return log.log_start_offset, log.high_watermark, log.log_end_offset

    def delete_records(self, offset: int) -> int:
        """Kafka's DeleteRecords on the leader; returns the new log start offset."""
        log_start_offset = self.check_leader().delete_records(offset)
        self.changes.notify()
        return log_start_offset

    def delete_old_segments(self) -> int:
        """One retention pass; returns the number of segments deleted (waiting readers are told: the log start may
        have moved)."""
        deleted = self.log.delete_old_segments()
        if deleted:
            self.changes.notify()
        return deleted

    # --- share groups -------------------------------------------------------------------------------------------

    def share_fetch(
        self,
        group_id: str,
        member_id: str,
        config: ResolvedShareConfig,
        max_bytes: int,
        max_records: int,
        max_wait_ms: int = 0,
        record_limit: bool = False,
        acknowledgements: list[AcknowledgementBatch] | None = None,
    ) -> ShareFetched:
        """A ShareFetch's part for this partition: first the `acknowledgements` it carries, if any (as
        `share_acknowledge`; a refusal is answered in `acknowledge_error`, the acquisition goes on), then records
        acquired for `member_id` (`LeaderShares.acquire`); when none could be, waits up to `max_wait_ms` for an
        append, an acknowledgement or a release, looking again after each (see the module docstring)."""
        refused: RaybrokerError | None = None
        if acknowledgements:
            try:
                self.share_acknowledge(group_id, member_id, config, acknowledgements)
            except RaybrokerError as exc:
                refused = exc

        def acquired() -> ShareFetched:
            position = self._share_position()
            return self.shares.acquire(group_id, member_id, config, position, max_bytes, max_records, record_limit)

        fetched = self.long_poll(acquired, lambda got: len(got.acquired), max_wait_ms, 1, self._share_poll_slots)
        return fetched if refused is None else dataclasses.replace(fetched, acknowledge_error=refused)

    def share_acknowledge(
        self,
        group_id: str,
        member_id: str,
        config: ResolvedShareConfig,
        batches: list[AcknowledgementBatch],
        renew: bool = False,
    ) -> None:
        """`member_id`'s acknowledgements of records it acquired here, all or none (`LeaderShares.acknowledge`; RENEW
        among them only with `renew`), counted by type once applied. Waiting ShareFetches are woken as soon as they
        are applied, not once their state is durable (`LeaderShares.acknowledge`'s `on_applied`)."""
        self.shares.acknowledge(
            group_id, member_id, config, self._share_position(), batches, renew, on_applied=self.changes.wake
        )
        self._metrics.share_acknowledged(records_by_type(batches))

    def share_release(self, group_id: str, member_id: str) -> None:
        """Releases the records `member_id` holds here: its share session closed."""
        self.check_leader()
        self.shares.release(group_id, member_id, self.replica.leader_epoch, self._share_position())
        self.changes.wake()

    def share_offsets(self, group_id: str) -> ShareOffsets | None:
        """The group's share-partition as DescribeShareGroupOffsets reports it (`LeaderShares.offsets`); None if it
        has none here."""
        log = self.check_leader()
        return self.shares.offsets(group_id, log.high_watermark, self.replica.leader_epoch)

    def alter_share_offset(self, group_id: str, start_offset: int) -> None:
        """AlterShareGroupOffsets' part for this partition: the group's share-partition starts at `start_offset`."""
        self.check_leader()
        self.shares.alter(group_id, start_offset, self.replica.leader_epoch)

    def delete_share_state(self, group_id: str) -> bool:
        """DeleteShareGroupOffsets' part for this partition: the group's share-partition dropped; whether it had
        one."""
        self.check_leader()
        return self.shares.delete(group_id, self.replica.leader_epoch)

    def share_statistics(self) -> list[SharePartitionStatistics]:
        """The share-partitions' statistics while the replica leads (`LeaderShares.statistics`), else none: a
        replica that no longer leads keeps the share-partitions of its last epoch until it leads again."""
        if self.replica.following:
            return []
        return self.shares.statistics(self.log.high_watermark)

    def _share_position(self) -> LogPosition:
        log = self.check_leader()
        return LogPosition(
            log.log_start_offset,
            log.high_watermark,
            lambda offset, max_bytes, read_committed: _share_read(log, offset, max_bytes, read_committed),
            self.replica.leader_epoch,
            log.last_stable_offset,
        )

    # --- the long poll -------------------------------------------------------------------------------------------

    def long_poll(
        self,
        answer: Callable[[], _Answer],
        size: Callable[[_Answer], int],
        max_wait_ms: int,
        min_bytes: int,
        slots: threading.Semaphore | None = None,
    ) -> _Answer:
        """`answer()` once at least `min_bytes` (by `size`) are there or `max_wait_ms` expired, looking again after
        each change; at once without a free slot of `slots` (default the long-poll slots; see the module
        docstring). Errors (an offset out of range, a fenced epoch, a closed log) are raised by `answer` as they
        come."""
        slots = slots or self._long_poll_slots
        for name, value in (("max_wait_ms", max_wait_ms), ("min_bytes", min_bytes)):
            if not is_int(value):
                raise InvalidRequestError(f"{name} must be an int, not {type(value).__name__}")
        deadline = time.monotonic() + max_wait_ms / 1000
        # Read before answering: an append between the answer and the wait is then seen, not slept through.
        seen = self.changes.count
        result = answer()
        if max_wait_ms <= 0 or size(result) >= min_bytes or not slots.acquire(blocking=False):
            return result
        try:
            while True:
                changed = self.changes.wait(seen, deadline)
                if changed is None:
                    return result
                seen = changed
                result = answer()
                if size(result) >= min_bytes or time.monotonic() >= deadline:
                    return result
        finally:
            slots.release()


def _share_read(log: Log, offset: int, max_bytes: int, read_committed: bool) -> LogRead:
    """A share fetch's read of `log`: up to the high watermark, or up to the last stable offset with the aborted
    transactions overlapping what was read (`LeaderShares.acquire` archives their batches)."""
    if not read_committed:
        return LogRead(log.read(offset, max_bytes, isolation="high_watermark").records)
    fetched = log.read(offset, max_bytes, isolation="txn_committed")
    return LogRead(fetched.records, fetched.aborted_transactions or ())
