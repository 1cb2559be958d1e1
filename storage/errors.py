"""The one error hierarchy of raybroker's storage layer, in Kafka's vocabulary.

Every decoder of untrusted bytes (disk files, client batches) raises only these types; lower-level
exceptions (`struct.error`, `IndexError`, codec errors, `OSError`) are wrapped at the boundary with
`raise ... from exc`. Each error carries the fields a caller needs to act on it (file path, byte
position, offset) as attributes, not only inside the message.

Each error type also says whether the same call may succeed if made again (`retriable`), as Kafka's exceptions
do by extending `RetriableException`: the flag equals Kafka's for the error code the type maps to
(`cluster.protocol.error_codes`), and every retry loop asks it (`is_retriable`) rather than naming types. A retriable
error of a partition usually means the caller's idea of its leader is stale: look the leader up again first.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar


class RaybrokerError(Exception):
    """Base of every error raybroker raises on purpose."""

    # Whether the same call may succeed later (Kafka's `RetriableException`); see the module docstring.
    retriable: ClassVar[bool] = False

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        position: int | None = None,
        offset: int | None = None,
    ) -> None:
        self.message = message
        self.path = str(path) if path is not None else None
        self.position = position
        self.offset = offset
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.path is not None:
            where.append(f"file {self.path}")
        if self.position is not None:
            where.append(f"position {self.position}")
        if self.offset is not None:
            where.append(f"offset {self.offset}")
        return f"{self.message} ({', '.join(where)})" if where else self.message

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only fields survive pickling (Ray ships errors between processes).
        return (_rebuild, (type(self), self.message, self.path, self.position, self.offset))


def is_retriable(exc: BaseException) -> bool:
    """Whether a failed call may be made again: a raybroker error whose type is retriable (see the module)."""
    return isinstance(exc, RaybrokerError) and exc.retriable


def _rebuild(
    cls: type[RaybrokerError], message: str, path: str | None, position: int | None, offset: int | None
) -> RaybrokerError:
    return cls(message, path=path, position=position, offset=offset)


class StorageError(RaybrokerError):
    """Base of errors raised by the storage layer."""


class CorruptRecordError(StorageError):
    """Bytes that do not form a valid record batch: bad CRC, bad size field, truncated data (CORRUPT_MESSAGE)."""

    # CORRUPT_MESSAGE is retriable in Kafka: a produce's bytes may have been damaged on the way.
    retriable = True


class InvalidRecordError(StorageError):
    """A well-formed batch that breaks a rule: client baseOffset != 0, count mismatch, control batch from a
    client, unkeyed record on a compacted topic, malformed record or header (INVALID_RECORD)."""


class RecordTooLargeError(StorageError):
    """A batch larger than `max.message.bytes` (MESSAGE_TOO_LARGE)."""


class RecordBatchTooLargeError(StorageError):
    """A whole append larger than `segment.bytes`."""


class InvalidTimestampError(StorageError):
    """CreateTime outside the before/after window, or a client that set LogAppendTime (INVALID_TIMESTAMP)."""


class OffsetOutOfRangeError(StorageError):
    """An offset below the log start offset or above the log end offset (OFFSET_OUT_OF_RANGE)."""


class InvalidOffsetError(StorageError):
    """An index append whose offset is not greater than the last entry's."""


class IndexOffsetOverflowError(StorageError):
    """An offset that cannot be stored relative to its segment's base offset (outside 0..2**31-1)."""


class LogSegmentOffsetOverflowError(StorageError):
    """A segment holding an offset more than 2**31 - 1 above its base, which Kafka's cleaner wrote before the fix
    of KAFKA-6264; `offset` is the first such offset. The log loader splits the segment and loads again."""


class CorruptIndexError(StorageError):
    """An index file that fails its sanity check (size not a multiple of the entry size, bad ordering)."""


class CorruptCheckpointError(StorageError):
    """A checkpoint or properties file whose text breaks its format (bad version, count, or line)."""


class InvalidTopicError(StorageError):
    """A topic name or partition number that breaks Kafka's rules (INVALID_TOPIC_EXCEPTION)."""


class UnsupportedCompressionTypeError(StorageError):
    """A codec id outside none/gzip/snappy/lz4/zstd."""


class InvalidConfigError(RaybrokerError):
    """A configuration key or value that is unknown, of the wrong type, or out of range."""


class PolicyViolationError(StorageError):
    """An operation the topic's policy forbids, e.g. DeleteRecords on a compact-only topic."""


class LogSegmentError(StorageError):
    """A roll or segment operation that would break the segment ordering (Kafka's KafkaException)."""


class KafkaStorageError(StorageError):
    """An I/O error on a log dir: the dir is taken offline and its partitions fail with this (KAFKA_STORAGE_ERROR)."""

    retriable = True


class LogDirNotFoundError(StorageError):
    """A log dir named by a request that is not one of the broker's `log.dirs` (LOG_DIR_NOT_FOUND)."""


class ReplicaNotAvailableError(StorageError):
    """The broker holds no replica of the partition asked for (REPLICA_NOT_AVAILABLE, what AlterReplicaLogDirs
    answers for one; retriable, as Kafka's)."""

    retriable = True


class InconsistentTopicIdError(StorageError):
    """A partition folder whose `partition.metadata` names another topic id than the topic's: the folder belongs
    to an earlier topic of the same name (INCONSISTENT_TOPIC_ID; retriable, as Kafka's)."""

    retriable = True


class LogDirLockedError(StorageError):
    """Another process holds the `.lock` of a log dir."""


class OutOfOrderSequenceError(StorageError):
    """An idempotent producer's batch whose sequence does not follow its last one (OUT_OF_ORDER_SEQUENCE_NUMBER)."""


class InvalidProducerEpochError(StorageError):
    """A batch from an older epoch of an idempotent producer that has since been fenced (INVALID_PRODUCER_EPOCH)."""


class InvalidTxnStateError(StorageError):
    """A write the producer's transaction state forbids: a non-transactional batch from a producer with a
    transaction open on the partition, a transactional one the coordinator did not verify (INVALID_TXN_STATE)."""


class TransactionCoordinatorFencedError(StorageError):
    """A transaction marker from a coordinator whose epoch is older than the one that wrote the producer's last
    marker: a zombie coordinator (TRANSACTION_COORDINATOR_FENCED)."""


class ProducerFencedError(StorageError):
    """A transactional producer whose epoch is no longer its transactional id's: another producer started with the
    same id (a newer instance, or a retried task) and fenced this one, which can never write again
    (PRODUCER_FENCED)."""


class TransactionAbortableError(StorageError):
    """A transaction that can no longer commit (a batch of it failed, its offsets were refused): the producer must
    call `abort_transaction`, then may start the next one (TRANSACTION_ABORTABLE)."""


class TransactionTimedOutError(TransactionAbortableError):
    """A transaction the coordinator aborted because it stayed open longer than its `transaction.timeout.ms`: the
    producer must call `abort_transaction`, then may start the next one (TRANSACTION_ABORTABLE)."""


class InvalidRequestError(RaybrokerError):
    """A call with arguments outside what the operation accepts: a negative size, an unknown isolation
    level, an invalid ListOffsets timestamp (INVALID_REQUEST)."""


class BrokerError(RaybrokerError):
    """Base of errors raised by the broker layer: topics, partitions, brokers and their clients."""


class InvalidUpdateVersionError(BrokerError):
    """A change asked against a version older than the current one (INVALID_UPDATE_VERSION): an UpdateFeatures
    refused (the message is Kafka's), or an AlterPartition sent with a partition epoch the controller has moved past
    (the leader waits for the partition's newer state and asks again from it)."""


class IneligibleReplicaError(BrokerError):
    """An ISR change that would add a replica whose broker is not running (INELIGIBLE_REPLICA, Kafka's
    AlterPartition check of KIP-841): a follower on a lost node cannot be in sync, whatever it fetched before."""


class UnknownTopicIdError(BrokerError):
    """A topic id (KIP-516) no topic of the cluster has: never assigned, or its topic deleted (UNKNOWN_TOPIC_ID);
    retriable, as Kafka's: a client whose metadata is newer than the broker's asks again."""

    retriable = True


class TopicExistsError(BrokerError):
    """Creating a topic that already exists (TOPIC_ALREADY_EXISTS)."""


class UnknownTopicOrPartitionError(BrokerError):
    """A topic or partition the cluster does not host (UNKNOWN_TOPIC_OR_PARTITION)."""

    # Retriable in Kafka: the caller's metadata may predate the topic.
    retriable = True


class InvalidPartitionsError(BrokerError):
    """A partition count that is not a positive int within the limit, or that would shrink a topic
    (INVALID_PARTITIONS)."""


class BrokerNotAvailableError(BrokerError):
    """No broker is running where the client looked: start one with `raybroker start` (BROKER_NOT_AVAILABLE)."""

    # Answered as LEADER_NOT_AVAILABLE (retriable): the actor is (re)starting or moved.
    retriable = True


class AnswerLostError(BrokerNotAvailableError):
    """A request that was sent, whose answer went away with the process that was to give it (an actor that died or
    restarted, an append channel whose process ended): whether it was carried out is not known. Retriable, as any
    unavailable broker; an append whose answer was lost fails with `RequestTimedOutError` instead
    (`actors.server.append_route`), the code Kafka's clients read as "possibly written"."""


class CoordinatorLoadInProgressError(BrokerNotAvailableError):
    """A coordinator's internal partition cannot be loaded yet: its leader's high watermark has not reached its log
    end, so the latest states may still be above what a read returns (COORDINATOR_LOAD_IN_PROGRESS); retriable."""


class LogClosedError(BrokerNotAvailableError):
    """A call reached a partition log that was closed under it (its topic deleted, its broker shutting down):
    not a disk failure, so its log dir stays online; retriable, like Kafka's NOT_LEADER_OR_FOLLOWER, by
    looking the partition up again."""


class NotLeaderOrFollowerError(BrokerNotAvailableError):
    """A call that only a partition's leader answers reached a replica that is not it, or a follower's fetch
    reached a replica that no longer leads (NOT_LEADER_OR_FOLLOWER); retriable by looking the leader up again."""


class FencedLeaderEpochError(BrokerNotAvailableError):
    """A request carrying a leader epoch older than the replica's (FENCED_LEADER_EPOCH): the caller's metadata is
    stale; retriable by looking the leader up again."""


class UnknownLeaderEpochError(BrokerNotAvailableError):
    """A request carrying a leader epoch newer than the replica's (UNKNOWN_LEADER_EPOCH): the replica has not been
    told of that epoch yet; retriable."""


class OffsetNotAvailableError(BrokerNotAvailableError):
    """ListOffsets for anything but the earliest offset reached a leader whose high watermark is still below the start
    offset of its leader epoch (OFFSET_NOT_AVAILABLE, KIP-207): a leader just elected learns its high watermark from
    its followers' next fetches, and until then its latest offset may be short of its predecessor's; retriable."""


class NotControllerError(BrokerNotAvailableError):
    """A metadata change asked of a controller that a successor has fenced (NOT_CONTROLLER): it writes nothing
    more; retriable, by asking the cluster's controller again."""


class StaleControllerEpochError(BrokerError):
    """A metadata write from a controller older than the one a copy of the metadata log has followed since
    (STALE_CONTROLLER_EPOCH): that controller was fenced by a successor."""


class InvalidReplicaAssignmentError(BrokerError):
    """A replica list that names no broker, one twice, or one that is not running (INVALID_REPLICA_ASSIGNMENT)."""


class NoReassignmentInProgressError(BrokerError):
    """A reassignment cancelled where none is in progress (NO_REASSIGNMENT_IN_PROGRESS)."""


class NotEnoughReplicasError(BrokerError):
    """An `acks=all` write refused before it was appended: fewer replicas are in sync than the topic's
    `min.insync.replicas` (NOT_ENOUGH_REPLICAS); retriable."""

    retriable = True


class NotEnoughReplicasAfterAppendError(BrokerError):
    """An `acks=all` write that was appended, but the in-sync replicas fell below `min.insync.replicas` before it
    was replicated (NOT_ENOUGH_REPLICAS_AFTER_APPEND); retriable (an idempotent producer's retry is no duplicate)."""

    retriable = True


class InvalidReplicationFactorError(BrokerError):
    """A replication factor below 1 or above the number of live brokers (INVALID_REPLICATION_FACTOR)."""


class RequestTimedOutError(BrokerError):
    """A broker call that did not answer in time (REQUEST_TIMED_OUT); retriable."""

    retriable = True


class SerializationError(BrokerError):
    """A key or value that its serializer cannot turn into bytes, or bytes its deserializer cannot read
    (Kafka's SerializationException / RecordDeserializationException)."""


class InvalidRecordStateError(BrokerError):
    """A share group member's acknowledgement of records it does not hold: not acquired, acquired by another member,
    or already acknowledged, released or archived (INVALID_RECORD_STATE, Kafka's `InvalidRecordStateException`); the
    whole acknowledgement of the share-partition changes nothing."""


class ShareSessionNotFoundError(BrokerError):
    """A ShareFetch or ShareAcknowledge of a share session the broker does not hold: never opened, closed, or
    forgotten (SHARE_SESSION_NOT_FOUND, retriable: the client opens a new one)."""

    retriable = True


class InvalidShareSessionEpochError(BrokerError):
    """A ShareFetch or ShareAcknowledge whose share session epoch is not the one the broker expects next (a lost
    answer, or ShareAcknowledge trying to open a session; INVALID_SHARE_SESSION_EPOCH, retriable)."""

    retriable = True


class CommitFailedError(BrokerError):
    """A group member's commit refused because its partitions moved on (Kafka's `CommitFailedException`: a stale member
    epoch, or a member the group no longer knows)."""


class InvalidGroupIdError(BrokerError):
    """A consumer-group call without a valid group id: none configured, or not a non-empty string (INVALID_GROUP_ID)."""


class IcebergCatalogError(BrokerError):
    """The Iceberg catalog or warehouse of a topic's table could not be loaded, read or committed to (unreachable,
    refused, a table of another shape): translation pauses and is tried again, the topic keeps serving."""
