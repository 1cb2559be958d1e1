"""The group coordinator: consumer groups' committed offsets, kept as Kafka keeps them, and the membership of
groups whose clients use Kafka's group protocol over the wire, as a plain class over injected seams.

State it owns, and where it is persisted: the committed offset of every (group, topic, partition), with the leader
epoch and metadata string its client committed with it (`OffsetAndMetadata`, as Kafka keeps them), as records of the
internal compacted topic `__consumer_offsets` (created by the broker's start with `offsets.topic.num.partitions`
partitions, `actors.core.groups.offsets_topic`). A group's commits all go to partition `partition_for_group(group,
partitions)`, so one group's commits stay ordered. The coordinator holds a cache of the latest commit per key. Before a
partition is first used (after a start, also after Ray restarts its actor) it is read from its log start to its high
watermark into the cache: the latest value per key wins, a null value (tombstone) removes the key, and records of other
kinds (group metadata, key version 2) are skipped. A commit is acknowledged only once every in-sync replica has its
record (Kafka's `offsets.commit.required.acks`, -1), so a commit that returned survives a broker restart and its
leader's loss. Calls are idempotent: committing the same offsets again writes a record that changes nothing.

A client may delete `__consumer_offsets` (DeleteTopics; Kafka allows it). Kafka then creates it again when a
group needs it, with `offsets.topic.num.partitions` partitions, and the offsets committed before are lost. So
does the coordinator: a call whose partition access fails (the partition's replica is gone, or no broker knows
the partition) asks the controller whether the topic still exists. If it does, the failure is raised as it is
(`BrokerNotAvailableError` while a partition's replica restarts or its broker is not up yet, which callers
retry). If not, the coordinator creates the topic again (`ensure_consumer_offsets_topic`, as the broker's start
does), forgets the handles and cached offsets of the deleted one, and runs the call once more, which reads each
new (empty) partition on its first use.

Deleting a topic deletes its committed offsets (Kafka's `onPartitionsDeleted`): the controller tells the coordinator
(`on_topic_deleted`), which writes a tombstone for every (group, topic, partition) of the topic into each group's
partition, so a reload (or a topic created again under the same name) finds none of them. A group left without
members and without offsets dies as in Kafka: the tombstone of its group metadata key goes with them and the group
is forgotten, so ListGroups and DescribeGroups no longer show it.

The records are Kafka's OffsetCommit key and value (`storage.records.consumer_offsets`), so logs written by a
Kafka broker read back too.

Membership (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) is `actors.core.groups.group_membership.GroupMembership`,
held here so that every listener of the cluster sees one state per group, whichever listener a member reached; the
consumer protocol's groups are `actors.core.groups.consumer_group_state.ConsumerGroups`, which also serves classic
members of a consumer-protocol group. A group id is one protocol's at a time: a group with members moves between them
as `group.consumer.migration.policy` allows (`consumer_group_heartbeat` and `_settle`).
It is kept in memory only: after a restart of the coordinator members rejoin, as Kafka's clients do after
UNKNOWN_MEMBER_ID. A JoinGroup or SyncGroup that must wait for other members returns at once as pending; the
caller then calls `await_join` / `await_sync`, each of which waits at most `MAX_WAIT_MS` on a condition that
every membership change notifies, so a waiting member holds one of its host's threads for a bounded time only
and the answer leaves as soon as it exists.

Fencing: the coordinator claims each partition in its coordinator epoch before reading it and writes every commit
and tombstone in that epoch (`actors.core.coordinator_claims`; the claim is the tombstone of `FENCING_KEY`), so one
left running beside its successor writes nothing after the successor loaded: its refused write unloads the partition,
and the call is run once more on the partition claimed and loaded again, from what the other coordinator wrote.
Transactional offset commits are the producer's batches (its id and epoch), fenced by the producer's epoch.

Groups' own configs (the GROUP config resource) are the controller's: the coordinator loads them when it starts and is
told of each change after (`update_group_config`); they apply from a group's next heartbeat
(`actors.core.groups.group_config_cache`).

Seams: the clock (commit timestamps, membership timeouts), the controller (`TopicAdmin`: to create and describe
`__consumer_offsets`), `find_partition(p)`, which reaches the leader replica of its partition `p` (`OffsetsPartition`;
`UnknownTopicOrPartitionError` when no broker knows it), and `allocate_coordinator_epoch(at_least)`, the
controller's coordinator epochs, and `group_configs()`, every group's own configs as the controller has them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar

from actors.core.controller.group_config_store import GroupConfigVersion
from actors.core.controller.topic_metadata import CONSUMER_OFFSETS_TOPIC
from actors.core.coordinator_claims import ClaimedPartition, CoordinatorClaims
from actors.core.groups.consumer_group_api import (
    ConsumerGroupDescription,
    HeartbeatRefused,
    HeartbeatRequest,
    HeartbeatResult,
    TopicInfo,
)
from actors.core.groups.consumer_group_state import ConsumerGroups
from actors.core.groups.group_config_cache import GroupConfigCache
from actors.core.groups.group_membership import (
    CONSUMER_GROUP_TYPE,
    GroupDescription,
    GroupError,
    GroupMembership,
    GroupState,
    JoinResult,
    PendingJoin,
    SyncResult,
)
from actors.core.groups.offsets_topic import DEFAULT_OFFSETS_REPLICATION_FACTOR, ensure_consumer_offsets_topic
from actors.core.internal_topics import InternalPartition, TopicAdmin, internal_batches, load_reachable
from actors.core.shares.group_share_config import ResolvedShareConfig
from actors.core.shares.share_group import (
    SHARE_GROUP_TYPE,
    ShareGroupDescription,
    ShareGroups,
    ShareHeartbeatAnswer,
    ShareHeartbeatRequest,
)
from storage.clock import Clock
from storage.config.group_protocol_config import GroupProtocolConfig
from storage.config.share_group_config import ShareGroupConfig
from storage.errors import (
    BrokerNotAvailableError,
    CorruptRecordError,
    InvalidGroupIdError,
    InvalidProducerEpochError,
    InvalidRequestError,
    RaybrokerError,
    UnknownTopicOrPartitionError,
)
from storage.partition.log import LogAppendInfo
from storage.records.consumer_offsets import (
    NO_LEADER_EPOCH,
    GroupTopicPartition,
    OffsetAndMetadata,
    apply_offset_commit,
    encode_group_metadata_key,
    encode_offset_commit_key,
    encode_offset_commit_value,
    partition_for_group,
)
from storage.records.layout import ControlRecordType
from storage.records.record import Record
from storage.records.record_batch import RecordBatchBuilder
from storage.topic_partition import check_topic_partition

logger = logging.getLogger(__name__)

# Bytes read per call while rebuilding the cache: Kafka's default fetch size for one partition.
LOAD_CHUNK_BYTES = 1024 * 1024
# The key of the tombstone a coordinator claims a partition with: an offset of no topic (Kafka refuses an empty topic
# name and a negative partition), which Kafka's loader, as this one, reads as the removal of nothing.
FENCING_KEY = encode_offset_commit_key("", "", -1)
# The longest one `await_join` / `await_sync` call waits: the Ray actor has SERVICE_CONCURRENCY (8) threads, so
# waiting members leave room for commits, and a caller that went away stops costing a thread within 0.5 s.
MAX_WAIT_MS = 500
_Outcome = TypeVar("_Outcome")


class _Fenced(BrokerNotAvailableError):
    """A write refused because another coordinator claimed the partition in a newer epoch."""


class OffsetsPartition(InternalPartition, ClaimedPartition, Protocol):
    """The leader replica of one `__consumer_offsets` partition, as the coordinator reads and appends to it. Its
    `append_replicated` answers once every in-sync replica has the batch (Kafka's group coordinator appends with
    `offsets.commit.required.acks`, -1: a commit its client was answered on survives the leader's loss)."""

    def append_from_coordinator(self, batch: bytes) -> LogAppendInfo:
        """Appends one transactional batch of a producer's offsets (origin COORDINATOR: epoch checked, no
        sequence); answers once every in-sync replica has it (acks=all, as Kafka's TxnOffsetCommit)."""
        ...


class GroupCoordinator:
    """Committed offsets of consumer groups; see the module docstring. Thread-safe (one lock).

    Each `__consumer_offsets` partition is loaded into the cache before its first use (Kafka loads a
    partition when it becomes its leader): `ready()` loads every partition it can reach, and one hosted by a
    broker that is not up yet (a cluster starting node by node) is loaded by the first call that needs it,
    which fails with the retriable `BrokerNotAvailableError` until then.
    """

    def __init__(
        self,
        offsets_topic_partitions: int,
        offsets_topic_replication_factor: int = DEFAULT_OFFSETS_REPLICATION_FACTOR,
        *,
        clock: Clock,
        controller: TopicAdmin,
        find_partition: Callable[[int], OffsetsPartition],
        allocate_coordinator_epoch: Callable[[int], int],
        membership: GroupMembership | None = None,
        group_protocol: GroupProtocolConfig | None = None,
        share_config: ShareGroupConfig | None = None,
        group_configs: Callable[[], Mapping[str, GroupConfigVersion]] | None = None,
    ) -> None:
        """`offsets_topic_partitions` is the broker's `offsets.topic.num.partitions`: the partition count of a
        `__consumer_offsets` this coordinator creates (an existing topic keeps its own), with
        `offsets_topic_replication_factor` replicas (`offsets.topic.replication.factor`, capped at the brokers
        running). `membership` defaults to Kafka's group settings on `clock`, `group_protocol` (the consumer
        protocol's) and `share_config` (share groups', KIP-932) to Kafka's defaults; `group_configs()` gives every
        group's own configs (none by default)."""
        self._lock = threading.Lock()
        self._clock = clock
        self._controller = controller
        self._find_partition = find_partition
        self._offsets_topic_partitions = offsets_topic_partitions
        self._offsets_topic_replication_factor = offsets_topic_replication_factor
        metadata = ensure_consumer_offsets_topic(controller, offsets_topic_partitions, offsets_topic_replication_factor)
        self._partition_count = len(metadata.partitions)
        self._handles: dict[int, OffsetsPartition] = {}
        self._claims = CoordinatorClaims(allocate_coordinator_epoch)
        self._offsets: dict[GroupTopicPartition, OffsetAndMetadata] = {}
        # Transactional offsets (TxnOffsetCommit) per producer id, invisible until its COMMIT marker.
        self._pending: dict[int, dict[GroupTopicPartition, OffsetAndMetadata]] = {}
        # Its own lock: a member's JoinGroup never waits behind a commit's append.
        self._membership_changed = threading.Condition()
        self._membership = membership or GroupMembership(clock)
        group_protocol = group_protocol or GroupProtocolConfig()
        self._group_configs = GroupConfigCache(group_configs() if group_configs else {}, group_protocol)
        self._consumer_groups = ConsumerGroups(
            clock, group_protocol, self._find_topics, controller.list_topics, self._group_configs.consumer_timeouts
        )
        # Share groups' membership, in memory only: members rejoin after a restart.
        self._share_groups = ShareGroups(
            clock, self._find_topics, share_config, group_configs=self._group_configs.share_config
        )

    def ready(self) -> int:
        """Loads every partition it can reach now; returns how many are loaded (the others load on first use)."""
        with self._lock:
            load_reachable(CONSUMER_OFFSETS_TOPIC, self._partition_count, self._loaded_partition)
            return len(self._handles)

    def _on_offsets_topic(self, operation: Callable[[], _Outcome]) -> _Outcome:
        """`operation()`, run with the lock held; if it fails to reach a partition of `__consumer_offsets` because
        the topic was deleted, run once more on the topic created again, and if another coordinator took the
        partition, once more on the partition claimed and loaded again (see the module docstring)."""
        with self._lock:
            try:
                return operation()
            except _Fenced as exc:
                logger.warning("%s: loading the partition again", exc)
            except RaybrokerError as exc:
                if not exc.retriable or not self._recreate_if_deleted(exc):
                    raise
            return operation()

    def _recreate_if_deleted(self, failure: Exception) -> bool:
        """If the controller no longer has `__consumer_offsets`: creates it again, forgets every handle and cached
        offset of the deleted one, and returns True; False while the topic exists. Called with the lock held."""
        try:
            self._controller.describe_topic(CONSUMER_OFFSETS_TOPIC)
            return False
        except UnknownTopicOrPartitionError:
            metadata = ensure_consumer_offsets_topic(
                self._controller, self._offsets_topic_partitions, self._offsets_topic_replication_factor
            )
        logger.warning(
            "%s was deleted (%s): created again with %d partitions; the offsets committed before are lost",
            CONSUMER_OFFSETS_TOPIC,
            failure,
            len(metadata.partitions),
        )
        self._partition_count = len(metadata.partitions)
        self._forget_partitions()
        return True

    def _forget_partitions(self) -> None:
        """Forgets every partition and what was read from them; each is claimed and loaded again at its next use."""
        self._handles.clear()
        self._claims.release_all()
        self._offsets.clear()
        self._pending.clear()

    def _loaded_partition(self, partition: int) -> OffsetsPartition:
        """The partition's leader replica, once its records are in the cache. Called with the lock held."""
        handle = self._handles.get(partition)
        if handle is None:
            try:
                handle = self._find_partition(partition)
            except UnknownTopicOrPartitionError as exc:
                raise BrokerNotAvailableError(f"the group coordinator cannot load its partition yet: {exc}") from exc
            self._claims.claim(partition, handle, FENCING_KEY, self._clock.milliseconds())
            try:
                self._load(partition, handle)
            except BaseException:
                self._claims.release(partition)
                raise
            self._handles[partition] = handle
        return handle

    def _write(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        """Writes `records` to `partition` (loaded first) in this coordinator's epoch (see the module docstring).
        A failed write unloads the partition: a timed-out append may still land, or another coordinator took the
        partition (`_Fenced`, which `_on_offsets_topic` answers by loading it again). Called with the lock held."""
        self._loaded_partition(partition)
        try:
            self._claims.append(partition, records, self._clock.milliseconds())
        except InvalidProducerEpochError as exc:
            # The other coordinator loads every partition it serves: all are read again, not only this one.
            self._forget_partitions()
            raise _Fenced(f"{CONSUMER_OFFSETS_TOPIC}-{partition} was taken by another group coordinator") from exc
        except RaybrokerError:
            self._unload(partition)
            raise

    def _unload(self, partition: int) -> None:
        """Forgets a partition and what was read from it; its next use claims and loads it again."""
        self._handles.pop(partition, None)
        self._claims.release(partition)
        for key in [key for key in self._offsets if partition_for_group(key[0], self._partition_count) == partition]:
            del self._offsets[key]
        for pending in self._pending.values():
            for key in [key for key in pending if partition_for_group(key[0], self._partition_count) == partition]:
                del pending[key]

    def _load(self, partition: int, handle: OffsetsPartition) -> None:
        for batch in internal_batches(handle, f"{CONSUMER_OFFSETS_TOPIC}-{partition}", LOAD_CHUNK_BYTES):
            if batch.is_control:
                marker = batch.end_transaction_marker()
                if marker is not None:
                    self._complete(partition, batch.producer_id, marker.control_type == ControlRecordType.COMMIT)
            else:
                target = self._pending.setdefault(batch.producer_id, {}) if batch.is_transactional else None
                for record in batch.records():
                    self._apply(partition, record, target)

    def _apply(
        self, partition: int, record: Record, target: dict[GroupTopicPartition, OffsetAndMetadata] | None = None
    ) -> None:
        try:
            apply_offset_commit(self._offsets if target is None else target, record.key, record.value)
        except CorruptRecordError as exc:
            logger.warning("%s-%d offset %d skipped: %s", CONSUMER_OFFSETS_TOPIC, partition, record.offset, exc)

    def partition_for(self, group: str) -> int:
        """The `__consumer_offsets` partition of `group`, any string (Kafka's `partitionFor`: AddOffsetsToTxn adds
        the empty group's partition too)."""
        if not isinstance(group, str):
            raise InvalidGroupIdError(f"a group id must be a str, not {group!r}")
        return partition_for_group(group, self._partition_count)

    def commit(self, group: str, offsets: Mapping[tuple[str, int], int], metadata: str = "") -> None:
        """Durably records `group`'s offsets (one batch on the group's partition), each with `metadata` and no
        leader epoch, then caches them."""
        _check_group(group)
        checked = {
            check_topic_partition(tp, InvalidRequestError): _check_offset(tp, offset) for tp, offset in offsets.items()
        }
        if not isinstance(metadata, str):
            raise InvalidRequestError(f"commit metadata must be a str, not {type(metadata).__name__}")
        self._append(
            group, {tp: OffsetAndMetadata(offset, NO_LEADER_EPOCH, metadata) for tp, offset in checked.items()}
        )

    def commit_member(
        self,
        group: str,
        member_id: str,
        generation_id: int,
        offsets: Mapping[tuple[str, int], OffsetAndMetadata],
        *,
        api_version: int,
        group_instance_id: str | None = None,
    ) -> GroupError:
        """A wire client's OffsetCommit (of version `api_version`, from a static member if `group_instance_id`):
        written if the group's state allows it (`GroupMembership.check_commit`: generation -1 only into a group
        without members; in a consumer-protocol group `ConsumerGroups.check_commit`, the generation being the member
        epoch), each partition with its own leader epoch and metadata. Returns the group's verdict; nothing is written
        unless it is NONE. The Python `Consumer`'s `commit` is not checked against the membership: its groups are
        names for offsets only."""
        _check_group(group)
        with self._membership_changed:
            self._settle(group)
            unknown = False
            if self._consumer_groups.has_group(group):
                verdict = self._consumer_groups.check_commit(
                    group, member_id, generation_id, transactional=False, api_version=api_version
                )
            else:
                verdict = self._membership.check_commit(group, member_id, generation_id, group_instance_id)
                unknown = not self._membership.has_group(group)
        if verdict == GroupError.ILLEGAL_GENERATION and unknown and self.group_offsets(group):
            # Kafka keeps a group that only has offsets as an Empty classic group, whose members are none.
            verdict = GroupError.UNKNOWN_MEMBER_ID
        if verdict == GroupError.NONE:
            self._append(group, offsets)
        return verdict

    def _append(self, group: str, offsets: Mapping[tuple[str, int], OffsetAndMetadata]) -> None:
        if not offsets:
            return
        now_ms = self._clock.milliseconds()
        records: list[tuple[bytes, bytes | None]] = [
            (encode_offset_commit_key(group, topic, partition), encode_offset_commit_value(committed, now_ms))
            for (topic, partition), committed in offsets.items()
        ]

        def append() -> None:
            self._write(partition_for_group(group, self._partition_count), records)
            for (topic, partition), committed in offsets.items():
                self._offsets[(group, topic, partition)] = committed

        # The lock is held across the append so two commits of one group reach the log and the cache in order.
        self._on_offsets_topic(append)

    def commit_transactional(
        self,
        group: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        generation_id: int,
        offsets: Mapping[tuple[str, int], OffsetAndMetadata],
    ) -> GroupError:
        """A TxnOffsetCommit: the offsets are appended as the producer's transactional batch (its id and epoch,
        sequence 0, origin COORDINATOR) and stay pending, invisible to `fetch_committed`, until the COMMIT marker
        of its transaction reaches the group's partition (`complete_transaction`). The group's verdict is
        `GroupMembership.check_transactional_commit`'s: without member information the commit is accepted even
        for a group with members, as Kafka accepts it; with some, the member and its generation are checked."""
        _check_group(group)
        with self._membership_changed:
            self._settle(group)
            if self._consumer_groups.has_group(group) and (member_id or generation_id >= 0):
                verdict = self._consumer_groups.check_commit(
                    group, member_id, generation_id, transactional=True, api_version=0
                )
            else:
                verdict = self._membership.check_transactional_commit(group, member_id, generation_id)
        if verdict != GroupError.NONE:
            return verdict
        if not offsets:
            return GroupError.NONE
        now_ms = self._clock.milliseconds()
        builder = RecordBatchBuilder(
            producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=0, is_transactional=True
        )
        for (topic, partition), committed in offsets.items():
            builder.append(
                encode_offset_commit_key(group, topic, partition),
                encode_offset_commit_value(committed, now_ms),
                timestamp=now_ms,
            )
        batch = builder.build()

        def append() -> None:
            handle = self._loaded_partition(partition_for_group(group, self._partition_count))
            handle.append_from_coordinator(batch)
            pending = self._pending.setdefault(producer_id, {})
            for (topic, partition), committed in offsets.items():
                pending[(group, topic, partition)] = committed

        self._on_offsets_topic(append)
        return GroupError.NONE

    def complete_transaction(self, partition: int, producer_id: int, commit: bool) -> None:
        """The transaction marker of `producer_id` reached `__consumer_offsets` partition `partition`: its pending
        offsets of the groups of that partition become committed (COMMIT) or are dropped (ABORT)."""
        with self._lock:
            self._complete(partition, producer_id, commit)

    def _complete(self, partition: int, producer_id: int, commit: bool) -> None:
        pending = self._pending.get(producer_id)
        if not pending:
            return
        done = [key for key in pending if partition_for_group(key[0], self._partition_count) == partition]
        for key in done:
            committed = pending.pop(key)
            if commit:
                self._offsets[key] = committed
        if not pending:
            del self._pending[producer_id]

    def unstable_offsets(self, group: str, topic_partitions: Iterable[tuple[str, int]] | None) -> set[tuple[str, int]]:
        """The partitions among `topic_partitions` (None: any) with transactional offsets of `group` still pending
        (OffsetFetch `require_stable` answers UNSTABLE_OFFSET_COMMIT for them)."""
        _check_group(group)
        wanted = (
            None
            if topic_partitions is None
            else {check_topic_partition(tp, InvalidRequestError) for tp in topic_partitions}
        )
        with self._lock:
            return {
                (topic, partition)
                for pending in self._pending.values()
                for name, topic, partition in pending
                if name == group and (wanted is None or (topic, partition) in wanted)
            }

    def fetch_committed(
        self, group: str, topic_partitions: Iterable[tuple[str, int]]
    ) -> dict[tuple[str, int], OffsetAndMetadata | None]:
        """The commit (offset, leader epoch, metadata) of each (topic, partition) for `group`, None where it has
        none."""
        _check_group(group)
        wanted = [check_topic_partition(tp, InvalidRequestError) for tp in topic_partitions]

        def fetch() -> dict[tuple[str, int], OffsetAndMetadata | None]:
            self._loaded_partition(partition_for_group(group, self._partition_count))
            return {(topic, partition): self._offsets.get((group, topic, partition)) for topic, partition in wanted}

        return self._on_offsets_topic(fetch)

    def group_offsets(self, group: str) -> dict[tuple[str, int], OffsetAndMetadata]:
        """Every commit of `group` (OffsetFetch without topics, `raybroker consumer-groups`)."""
        _check_group(group)

        def fetch() -> dict[tuple[str, int], OffsetAndMetadata]:
            self._loaded_partition(partition_for_group(group, self._partition_count))
            return {
                (topic, partition): committed
                for (name, topic, partition), committed in self._offsets.items()
                if name == group
            }

        return self._on_offsets_topic(fetch)

    # --- Membership (see the module docstring) -----------------------------------------------------------------

    def join_group(self, group: str, member_id: str, **request: Any) -> JoinResult | PendingJoin:
        """A JoinGroup (`GroupMembership.join`'s keyword arguments); `PendingJoin` means: call `await_join`. Into a
        consumer-protocol group with members the member joins as a classic member, answered at once
        (`ConsumerGroups.classic_join`); an empty one of the same id is replaced by a classic group."""
        with self._membership_changed:
            self._settle(group)
            if self._consumer_groups.has_group(group):
                if self._consumer_groups.is_active(group):
                    if not self._membership.config.accepts_session_timeout(request["session_timeout_ms"]):
                        return JoinResult(GroupError.INVALID_SESSION_TIMEOUT, member_id)
                    joined = self._consumer_groups.classic_join(group, member_id, **request)
                    self._membership_changed.notify_all()
                    return joined
                self._consumer_groups.delete(group)
            outcome = self._membership.join(group, member_id, **request)
            self._membership_changed.notify_all()
            return outcome

    def await_join(self, group: str, member_id: str, max_wait_ms: int) -> JoinResult | PendingJoin:
        """The member's JoinGroup answer, waiting up to `min(max_wait_ms, MAX_WAIT_MS)` for it; REBALANCE_IN_PROGRESS
        if its group moved to the consumer protocol meanwhile (it joins again, as a classic member of it)."""

        def poll() -> JoinResult | PendingJoin:
            if self._consumer_groups.has_group(group):
                return JoinResult(GroupError.REBALANCE_IN_PROGRESS, member_id)
            return self._membership.poll_join(group, member_id)

        return self._await(group, poll, max_wait_ms, PendingJoin)

    def sync_group(
        self, group: str, member_id: str, generation_id: int, assignments: Mapping[str, bytes], **protocol: Any
    ) -> SyncResult | None:
        """A SyncGroup; None means: call `await_sync`. A classic member of a consumer-protocol group is answered at
        once with the assignment the coordinator computed (`ConsumerGroups.classic_sync`)."""
        with self._membership_changed:
            self._settle(group)
            if self._consumer_groups.has_group(group):
                return self._consumer_groups.classic_sync(group, member_id, generation_id, **protocol)
            outcome = self._membership.sync(group, member_id, generation_id, assignments, **protocol)
            self._membership_changed.notify_all()
            return outcome

    def await_sync(self, group: str, member_id: str, generation_id: int, max_wait_ms: int) -> SyncResult | None:
        """The member's SyncGroup answer, waiting up to `min(max_wait_ms, MAX_WAIT_MS)` for it; REBALANCE_IN_PROGRESS
        if its group moved to the consumer protocol meanwhile."""

        def poll() -> SyncResult | None:
            if self._consumer_groups.has_group(group):
                return SyncResult(GroupError.REBALANCE_IN_PROGRESS)
            return self._membership.poll_sync(group, member_id, generation_id)

        return self._await(group, poll, max_wait_ms, type(None))

    def heartbeat(
        self, group: str, member_id: str, generation_id: int, group_instance_id: str | None = None
    ) -> GroupError:
        """A Heartbeat (its member's instance id, if static); into a consumer-protocol group a classic member's."""
        with self._membership_changed:
            self._settle(group)
            if self._consumer_groups.has_group(group):
                outcome = self._consumer_groups.classic_heartbeat(group, member_id, generation_id, group_instance_id)
            else:
                outcome = self._membership.heartbeat(group, member_id, generation_id, group_instance_id)
            self._membership_changed.notify_all()
            return outcome

    def leave_group(self, group: str, members: list[tuple[str, str | None]]) -> list[GroupError]:
        """A LeaveGroup of `members` (member id, instance id): each one's outcome, in order."""
        with self._membership_changed:
            self._settle(group)
            if self._consumer_groups.has_group(group):
                outcome = self._consumer_groups.classic_leave(group, members)
            else:
                outcome = self._membership.leave(group, members)
            self._membership_changed.notify_all()
            return outcome

    def consumer_group_heartbeat(self, request: HeartbeatRequest) -> HeartbeatResult:
        """A ConsumerGroupHeartbeat (`ConsumerGroups.heartbeat`). A classic group of the same id is replaced when it
        is empty and the member joins; one with members is taken over by the consumer protocol when the member
        joins and `group.consumer.migration.policy` allows it (`ConsumerGroups.adopt`), else GROUP_ID_NOT_FOUND, as
        Kafka answers. A consumer member's leave that leaves classic members only may hand the group back to the
        classic protocol (`_settle`)."""
        group = request.group_id
        with self._membership_changed:
            self._settle(group)
            if not self._consumer_groups.has_group(group) and self._membership.has_group(group):
                if request.member_epoch != 0:
                    return HeartbeatResult(
                        GroupError.GROUP_ID_NOT_FOUND,
                        f"Group {group} is not a consumer group.",
                        request.member_id or None,
                        request.member_epoch,
                    )
                snapshot = self._membership.snapshot(group)
                if snapshot is not None:
                    try:
                        self._consumer_groups.adopt(snapshot)
                    except HeartbeatRefused as refused:
                        return HeartbeatResult(
                            refused.error, refused.message, request.member_id or None, request.member_epoch
                        )
                    self._membership.forget(group)
                else:
                    self._membership.delete(group)
            outcome = self._consumer_groups.heartbeat(request)
            self._settle(group)
            self._membership_changed.notify_all()
            return outcome

    def _settle(self, group: str) -> None:
        """Applies the consumer-protocol group's due timeouts; if a consumer member's departure left classic
        members only, the classic protocol takes the group over and rebalances it (`ConsumerGroups.take_downgrade`).
        Called with `_membership_changed` held."""
        snapshot = self._consumer_groups.take_downgrade(group)
        if snapshot is not None:
            self._membership.adopt(snapshot)
            logger.info("group %s: classic members only left, it now uses the classic protocol", group)

    def describe_consumer_group(self, group: str) -> ConsumerGroupDescription | None:
        """The consumer-protocol group as ConsumerGroupDescribe shows it; None if `group` is no such group."""
        with self._membership_changed:
            self._settle(group)
            return self._consumer_groups.describe(group)

    def share_group_heartbeat(self, request: ShareHeartbeatRequest) -> ShareHeartbeatAnswer:
        """A ShareGroupHeartbeat (`ShareGroups.heartbeat`), its refusal as a value. A group id taken by a classic or
        consumer-protocol group is not checked yet."""
        with self._membership_changed:
            return self._share_groups.answer(request)

    def describe_share_group(self, group: str) -> ShareGroupDescription | None:
        """The share group as ShareGroupDescribe shows it; None if `group` is no share group."""
        with self._membership_changed:
            if not self._share_groups.has_group(group):
                return None
            return self._share_groups.describe(group)

    def share_group_settings(self, group: str) -> ResolvedShareConfig:
        """What the share group runs with (lock duration, delivery limit, record locks, offset reset)."""
        with self._membership_changed:
            return self._share_groups.settings(group)

    def admit_share_offsets_change(self, group: str, create: bool) -> GroupError:
        """Whether AlterShareGroupOffsets (`create`: it makes an unknown group) or DeleteShareGroupOffsets may change
        the share group's offsets (`ShareGroups.admit_offsets_change`); a classic or consumer-protocol group's id,
        or one with committed offsets (Kafka keeps it as a classic group), is GROUP_ID_NOT_FOUND, as Kafka answers
        ("Group g is not a share group."). The leaders then change the share-partitions; a member joining in between
        is not stopped (Kafka holds the group across both steps)."""
        with self._membership_changed:
            self._settle(group)
            if self._membership.has_group(group) or self._consumer_groups.has_group(group):
                return GroupError.GROUP_ID_NOT_FOUND
            if self._share_groups.has_group(group):
                return self._share_groups.admit_offsets_change(group, create)
        if self.group_offsets(group):
            return GroupError.GROUP_ID_NOT_FOUND
        with self._membership_changed:
            return self._share_groups.admit_offsets_change(group, create)

    def update_group_config(self, group: str, configs: GroupConfigVersion) -> None:
        """The controller's news of a change of the group's configs (`GroupConfigCache.update`)."""
        self._group_configs.update(group, configs)

    def group_config(self, group: str) -> dict[str, str]:
        """The keys the group's GROUP config resource sets, as last told by the controller."""
        return self._group_configs.configs(group)

    def check_offset_fetch(self, group: str, member_id: str | None, member_epoch: int) -> GroupError:
        """OffsetFetch v9+'s member check: a consumer-protocol group's member must name its current epoch; the
        classic protocol's members send none."""
        with self._membership_changed:
            self._settle(group)
            if not self._consumer_groups.has_group(group):
                return GroupError.NONE
            return self._consumer_groups.check_fetch(group, member_id, member_epoch)

    def _find_topics(self, names: Iterable[str]) -> dict[str, TopicInfo]:
        """The consumer groups' seam: each named topic that exists, with its id and partition count."""
        found = {}
        for name in names:
            try:
                metadata = self._controller.describe_topic(name)
            except UnknownTopicOrPartitionError:
                continue
            found[name] = TopicInfo(name, metadata.topic_id, len(metadata.partitions))
        return found

    def _await(self, group: str, poll: Callable[[], _Outcome], max_wait_ms: int, pending: type) -> _Outcome:
        """`poll()`'s outcome once it is not of the `pending` type, or the last one after the bounded wait."""
        deadline = time.monotonic() + min(max(max_wait_ms, 0), MAX_WAIT_MS) / 1000
        with self._membership_changed:
            while True:
                outcome = poll()
                remaining_s = deadline - time.monotonic()
                if not isinstance(outcome, pending) or remaining_s <= 0:
                    self._membership_changed.notify_all()
                    return outcome
                due_ms = self._membership.next_deadline_ms(group)
                if due_ms is not None:
                    # Wake when the group's next timed event (an expiry, the rebalance timeout) is due.
                    remaining_s = min(remaining_s, max(due_ms - self._clock.milliseconds(), 0) / 1000 + 0.001)
                self._membership_changed.wait(remaining_s)

    # --- ListGroups, DescribeGroups, DeleteGroups, OffsetDelete -----------------------------------------------

    def list_groups(self) -> list[GroupDescription]:
        """Every group: those with members (or ever joined here) and those that only have committed offsets,
        which are Empty groups of no protocol type, as Kafka lists a group whose consumers only commit."""

        def committed_groups() -> set[str]:
            for partition in range(self._partition_count):
                self._loaded_partition(partition)
            return {group for group, _, _ in self._offsets}

        committed = self._on_offsets_topic(committed_groups)
        with self._membership_changed:
            for group in self._consumer_groups.group_ids():
                self._settle(group)
            described = {group: self._membership.describe(group) for group in self._membership.group_ids()}
            for group in self._consumer_groups.group_ids():
                described[group] = _listed(self._consumer_groups.describe(group))
            for group in self._share_groups.group_ids():
                shared = self._share_groups.describe(group)
                described[group] = GroupDescription(
                    group, shared.state, SHARE_GROUP_TYPE, "", shared.group_epoch, (), group_type=SHARE_GROUP_TYPE
                )
        return [described.get(group) or _offsets_only(group) for group in sorted(committed | set(described))]

    def describe_group(self, group: str) -> GroupDescription | None:
        """The group as DescribeGroups shows it; None if it has neither members nor committed offsets."""
        _check_group(group)
        with self._membership_changed:
            self._settle(group)
            if self._consumer_groups.has_group(group) or self._share_groups.has_group(group):
                return None
            described = self._membership.describe(group)
        if described is not None:
            return described
        return _offsets_only(group) if self.group_offsets(group) else None

    def delete_group(self, group: str) -> GroupError:
        """Deletes an Empty group and its committed offsets (tombstones in `__consumer_offsets`); a group with
        members is NON_EMPTY_GROUP, an unknown one GROUP_ID_NOT_FOUND. A share group's share-partitions are not
        touched: their leaders drop them (DeleteGroups over the wire and `raybroker share-groups --delete` do that
        first)."""
        _check_group(group)
        with self._membership_changed:
            verdict = self._membership.delete(group)
            if verdict == GroupError.GROUP_ID_NOT_FOUND:
                verdict = self._consumer_groups.delete(group)
            if verdict == GroupError.GROUP_ID_NOT_FOUND:
                verdict = self._share_groups.delete(group)
        if verdict == GroupError.NON_EMPTY_GROUP:
            return verdict

        def delete_offsets() -> bool:
            """Writes a tombstone for every committed offset of the group, read and written under one lock (a
            commit cannot slip between), and forgets them; whether it had any."""
            partition = partition_for_group(group, self._partition_count)
            self._loaded_partition(partition)
            committed = [(topic, number) for name, topic, number in self._offsets if name == group]
            if committed:
                self._write(partition, [(encode_offset_commit_key(group, *tp), None) for tp in committed])
                for topic, number in committed:
                    del self._offsets[(group, topic, number)]
            return bool(committed)

        deleted = self._on_offsets_topic(delete_offsets)
        if verdict == GroupError.GROUP_ID_NOT_FOUND and not deleted:
            return verdict
        return GroupError.NONE

    def delete_offsets(
        self, group: str, partitions: Iterable[tuple[str, int]]
    ) -> tuple[GroupError, dict[tuple[str, int], GroupError]]:
        """OffsetDelete: deletes the group's committed offsets of `partitions` (tombstones in `__consumer_offsets`)
        but those of the topics its members subscribe to, which answer GROUP_SUBSCRIBED_TO_TOPIC. A partition with
        no committed offset answers NONE, as in Kafka. A group with members of another protocol type is
        NON_EMPTY_GROUP and an unknown one GROUP_ID_NOT_FOUND, with no partition answered."""
        _check_group(group)
        wanted = list(dict.fromkeys(partitions))
        with self._membership_changed:
            self._settle(group)
            if self._consumer_groups.has_group(group):
                verdict, subscribed = GroupError.NONE, self._consumer_groups.subscribed_topics(group)
            else:
                verdict, subscribed = self._membership.subscriptions(group)
        if verdict == GroupError.NON_EMPTY_GROUP:
            return verdict, {}
        partition = partition_for_group(group, self._partition_count)

        def delete_offsets() -> bool:
            """Writes a tombstone for each committed offset to delete and forgets it, under one lock (a commit
            cannot slip between); whether the group had any committed offset."""
            self._loaded_partition(partition)
            known = any(name == group for name, _, _ in self._offsets)
            doomed = [tp for tp in wanted if tp[0] not in subscribed and (group, *tp) in self._offsets]
            if doomed:
                self._write(partition, [(encode_offset_commit_key(group, *tp), None) for tp in doomed])
                for topic, number in doomed:
                    del self._offsets[(group, topic, number)]
            return known

        known = self._on_offsets_topic(delete_offsets)
        if verdict == GroupError.GROUP_ID_NOT_FOUND and not known:
            return verdict, {}
        return GroupError.NONE, {
            tp: GroupError.GROUP_SUBSCRIBED_TO_TOPIC if tp[0] in subscribed else GroupError.NONE for tp in wanted
        }

    def on_topic_deleted(self, topic: str) -> list[str]:
        """Deletes every group's committed offsets of the deleted `topic` (see the module docstring); returns the
        groups that died with them. `__consumer_offsets` itself is no topic of commits: it is created again when a
        group needs it."""
        if topic == CONSUMER_OFFSETS_TOPIC:
            return []

        def delete_offsets() -> list[str]:
            for partition in range(self._partition_count):
                self._loaded_partition(partition)
            deleted: dict[str, list[int]] = {}
            remaining: set[str] = set()
            for group, committed_topic, partition in self._offsets:
                if committed_topic == topic:
                    deleted.setdefault(group, []).append(partition)
                else:
                    remaining.add(group)
            with self._membership_changed:
                dead = {group for group in deleted if group not in remaining and not self._is_active(group)}
            by_partition: dict[int, list[str]] = {}
            for group in sorted(deleted):
                by_partition.setdefault(partition_for_group(group, self._partition_count), []).append(group)
            for offsets_partition, groups in sorted(by_partition.items()):
                tombstones: list[tuple[bytes, bytes | None]] = []
                for group in groups:
                    tombstones += [(encode_offset_commit_key(group, topic, number), None) for number in deleted[group]]
                    if group in dead:
                        tombstones.append((encode_group_metadata_key(group), None))
                # One batch per partition of `__consumer_offsets`: the cache forgets only what its log forgot.
                self._write(offsets_partition, tombstones)
                for group in groups:
                    for partition in deleted[group]:
                        del self._offsets[(group, topic, partition)]
            with self._membership_changed:
                for group in dead:
                    self._membership.delete(group)
                    self._consumer_groups.delete(group)
            return sorted(dead)

        dead = self._on_offsets_topic(delete_offsets)
        if dead:
            logger.info("topic %s deleted: groups %s have no offsets left and are dead", topic, ", ".join(dead))
        return dead

    def reset_offsets(self, group: str, offsets: Mapping[tuple[str, int], int]) -> GroupError:
        """`raybroker consumer-groups --reset-offsets --execute`: as Kafka's tool, only a group without members
        may have its offsets moved (NON_EMPTY_GROUP otherwise)."""
        _check_group(group)
        with self._membership_changed:
            if self._is_active(group):
                return GroupError.NON_EMPTY_GROUP
        self.commit(group, offsets)
        return GroupError.NONE

    def _is_active(self, group: str) -> bool:
        """Whether the group has members of either protocol. Called with `_membership_changed` held."""
        return self._membership.is_active(group) or self._consumer_groups.is_active(group)


def _listed(group: ConsumerGroupDescription | None) -> GroupDescription | None:
    """A consumer-protocol group as ListGroups shows it: protocol type "consumer", its state and group epoch."""
    if group is None:
        return None
    return GroupDescription(
        group.group_id, group.state, CONSUMER_GROUP_TYPE, "", group.group_epoch, (), group_type=CONSUMER_GROUP_TYPE
    )


def _offsets_only(group: str) -> GroupDescription:
    return GroupDescription(group, GroupState.EMPTY, "", "", 0, ())


def _check_group(group: object) -> None:
    if not isinstance(group, str) or not group:
        raise InvalidGroupIdError(f"a group id must be a non-empty str, not {group!r}")


def _check_offset(tp: tuple[str, int], offset: object) -> int:
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise InvalidRequestError(f"committed offset of {tp[0]}-{tp[1]} must be an int >= 0, got {offset!r}")
    return offset
