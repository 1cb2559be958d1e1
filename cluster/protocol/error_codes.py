"""The one table from raybroker's errors to Kafka's error codes, and the protocol layer's own errors.

Handlers catch the typed errors the broker raises (`storage.errors`) per partition or per topic and answer
`error_code(exc)`; nothing else in the protocol package names a Kafka error number for a broker error. The
lookup walks the exception's class hierarchy, so a subclass without its own row (`LogClosedError` has one,
`StorageError` subclasses such as `CorruptIndexError` have none) gets its nearest ancestor's code, and an
error outside the hierarchy is `UNKNOWN_SERVER_ERROR` (-1), which Kafka's clients do not retry.

Codes chosen where Kafka has no exact twin, and why:
- `BrokerNotAvailableError` (a partition actor dead or restarting, no broker registered) answers
  LEADER_NOT_AVAILABLE (5): retriable, and clients refresh their metadata and try again, which is what a
  restarting actor needs. BROKER_NOT_AVAILABLE (8) is not retriable in Kafka's clients.
  Its `AnswerLostError` (a call whose actor died under it) answers the same, except an append's: the append route
  turns that into `RequestTimedOutError` (REQUEST_TIMED_OUT, 7), as the append may have been written, and Kafka's
  clients read REQUEST_TIMED_OUT as possibly written, LEADER_NOT_AVAILABLE as not.
- `LogClosedError` (the log closed under the call: topic deleted, broker stopping) answers
  NOT_LEADER_OR_FOLLOWER (6), Kafka's answer when a partition moved away from the broker asked.
- `RecordBatchTooLargeError` (an append larger than `segment.bytes`) answers RECORD_LIST_TOO_LARGE (18).

Authorization failures are raised by the handlers themselves (`cluster.protocol.handlers.authorization`) and
answered with the code of the resource refused: TOPIC_, GROUP_, CLUSTER_ or TRANSACTIONAL_ID_AUTHORIZATION_FAILED
(29, 30, 31, 53); SECURITY_DISABLED (54) answers the ACL APIs of a broker without `authorizer.class.name`. The
SCRAM credential errors (`actors.core.security.scram`) and `DuplicateResourceError` answer
AlterUserScramCredentials and DescribeUserScramCredentials per user.

The group APIs' outcomes (`actors.core.groups.group_membership.GroupError`) are named as Kafka's codes and map by name
(`group_error_code`); a group coordinator that cannot be reached answers COORDINATOR_NOT_AVAILABLE. So do the
transaction coordinator's (`actors.core.transactions.transaction_metadata.TxnError`, `txn_error_code`) and the
controller's elections (`actors.core.controller.elections.ElectionError`, `election_error_code`).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from actors.core.controller.elections import ElectionError
from actors.core.groups.group_membership import GroupError
from actors.core.quotas.controller_mutations import ThrottlingQuotaExceededError
from actors.core.security.scram import (
    ResourceNotFoundError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)
from actors.core.transactions.transaction_metadata import TxnError
from storage.errors import (
    BrokerNotAvailableError,
    CoordinatorLoadInProgressError,
    CorruptRecordError,
    FencedLeaderEpochError,
    InconsistentTopicIdError,
    IneligibleReplicaError,
    InvalidConfigError,
    InvalidGroupIdError,
    InvalidPartitionsError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidRecordStateError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidShareSessionEpochError,
    InvalidTimestampError,
    InvalidTopicError,
    InvalidTxnStateError,
    InvalidUpdateVersionError,
    KafkaStorageError,
    LogClosedError,
    LogDirNotFoundError,
    NoReassignmentInProgressError,
    NotControllerError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    PolicyViolationError,
    ProducerFencedError,
    RaybrokerError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    ReplicaNotAvailableError,
    RequestTimedOutError,
    ShareSessionNotFoundError,
    StaleControllerEpochError,
    TopicExistsError,
    TransactionAbortableError,
    TransactionCoordinatorFencedError,
    UnknownLeaderEpochError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
    UnsupportedCompressionTypeError,
)


class AuthorizationFailedError(RaybrokerError):
    """The connection's principal may not do what it asked (see the subclasses for the resource refused)."""


class TopicAuthorizationFailedError(AuthorizationFailedError):
    """An operation on a topic refused (TOPIC_AUTHORIZATION_FAILED), also for a topic that does not exist."""


class GroupAuthorizationFailedError(AuthorizationFailedError):
    """An operation on a consumer group refused (GROUP_AUTHORIZATION_FAILED)."""


class ClusterAuthorizationFailedError(AuthorizationFailedError):
    """An operation on the cluster refused (CLUSTER_AUTHORIZATION_FAILED)."""


class TransactionalIdAuthorizationFailedError(AuthorizationFailedError):
    """An operation on a transactional id refused (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)."""


class SecurityDisabledError(RaybrokerError):
    """An ACL API on a broker without `authorizer.class.name` (SECURITY_DISABLED), as Kafka answers it."""


class DuplicateResourceError(RaybrokerError):
    """A user named twice in one SCRAM credentials request (DUPLICATE_RESOURCE)."""


ERROR_CODES: dict[type[Exception], ErrorCode] = {
    OffsetOutOfRangeError: ErrorCode.offset_out_of_range,
    CorruptRecordError: ErrorCode.corrupt_message,
    UnknownTopicOrPartitionError: ErrorCode.unknown_topic_or_partition,
    UnknownTopicIdError: ErrorCode.unknown_topic_id,
    InconsistentTopicIdError: ErrorCode.inconsistent_topic_id,
    LogDirNotFoundError: ErrorCode.log_dir_not_found,
    ReplicaNotAvailableError: ErrorCode.replica_not_available,
    BrokerNotAvailableError: ErrorCode.leader_not_available,
    LogClosedError: ErrorCode.not_leader_or_follower,
    NotLeaderOrFollowerError: ErrorCode.not_leader_or_follower,
    NotControllerError: ErrorCode.not_controller,
    InvalidUpdateVersionError: ErrorCode.invalid_update_version,
    ThrottlingQuotaExceededError: ErrorCode.throttling_quota_exceeded,
    InvalidReplicaAssignmentError: ErrorCode.invalid_replica_assignment,
    NoReassignmentInProgressError: ErrorCode.no_reassignment_in_progress,
    StaleControllerEpochError: ErrorCode.stale_controller_epoch,
    FencedLeaderEpochError: ErrorCode.fenced_leader_epoch,
    UnknownLeaderEpochError: ErrorCode.unknown_leader_epoch,
    OffsetNotAvailableError: ErrorCode.offset_not_available,
    NotEnoughReplicasError: ErrorCode.not_enough_replicas,
    NotEnoughReplicasAfterAppendError: ErrorCode.not_enough_replicas_after_append,
    InvalidReplicationFactorError: ErrorCode.invalid_replication_factor,
    RequestTimedOutError: ErrorCode.request_timed_out,
    RecordTooLargeError: ErrorCode.message_too_large,
    InvalidTopicError: ErrorCode.invalid_topic_exception,
    RecordBatchTooLargeError: ErrorCode.record_list_too_large,
    InvalidGroupIdError: ErrorCode.invalid_group_id,
    InvalidRecordStateError: ErrorCode.invalid_record_state,
    ShareSessionNotFoundError: ErrorCode.share_session_not_found,
    InvalidShareSessionEpochError: ErrorCode.invalid_share_session_epoch,
    InvalidTimestampError: ErrorCode.invalid_timestamp,
    TopicExistsError: ErrorCode.topic_already_exists,
    InvalidPartitionsError: ErrorCode.invalid_partitions,
    InvalidConfigError: ErrorCode.invalid_config,
    IneligibleReplicaError: ErrorCode.ineligible_replica,
    InvalidRequestError: ErrorCode.invalid_request,
    PolicyViolationError: ErrorCode.policy_violation,
    OutOfOrderSequenceError: ErrorCode.out_of_order_sequence_number,
    InvalidProducerEpochError: ErrorCode.invalid_producer_epoch,
    InvalidTxnStateError: ErrorCode.invalid_txn_state,
    TransactionCoordinatorFencedError: ErrorCode.transaction_coordinator_fenced,
    ProducerFencedError: ErrorCode.producer_fenced,
    TransactionAbortableError: ErrorCode.transaction_abortable,
    KafkaStorageError: ErrorCode.kafka_storage_error,
    UnsupportedCompressionTypeError: ErrorCode.unsupported_compression_type,
    InvalidRecordError: ErrorCode.invalid_record,
    TopicAuthorizationFailedError: ErrorCode.topic_authorization_failed,
    GroupAuthorizationFailedError: ErrorCode.group_authorization_failed,
    ClusterAuthorizationFailedError: ErrorCode.cluster_authorization_failed,
    TransactionalIdAuthorizationFailedError: ErrorCode.transactional_id_authorization_failed,
    SecurityDisabledError: ErrorCode.security_disabled,
    DuplicateResourceError: ErrorCode.duplicate_resource,
    UnsupportedSaslMechanismError: ErrorCode.unsupported_sasl_mechanism,
    UnacceptableCredentialError: ErrorCode.unacceptable_credential,
    ResourceNotFoundError: ErrorCode.resource_not_found,
}


def typed_error(code: ErrorCode, message: str) -> RaybrokerError:
    """The typed error a Kafka broker's `code` stands for, as raybroker's wire tools raise it: the first class of
    the table with that code, else a plain `RaybrokerError`; the message names the code."""
    for cls, known in ERROR_CODES.items():
        if known == code and issubclass(cls, RaybrokerError):
            return cls(f"{message}: {code.name.upper()}")
    return RaybrokerError(f"{message}: {code.name.upper()}")


def error_code(exc: BaseException) -> ErrorCode:
    """Kafka's error code for `exc`: its own class's row, else its nearest ancestor's, else UNKNOWN_SERVER_ERROR."""
    for cls in type(exc).__mro__:
        code = ERROR_CODES.get(cls)
        if code is not None:
            return code
    return ErrorCode.unknown_server_error


def share_partition_error_code(exc: BaseException) -> ErrorCode:
    """Kafka's error code for `exc` on a partition of a ShareFetch or ShareAcknowledge: `error_code`'s, but
    NOT_LEADER_OR_FOLLOWER where that is LEADER_NOT_AVAILABLE (a partition actor dead or restarting, a call to the
    share-state store that failed): Kafka's share consumer retries after a metadata refresh for
    NOT_LEADER_OR_FOLLOWER and throws IllegalStateException for LEADER_NOT_AVAILABLE, which Kafka's broker never
    answers there."""
    code = error_code(exc)
    return ErrorCode.not_leader_or_follower if code == ErrorCode.leader_not_available else code


class ProtocolError(Exception):
    """Bytes from a client that are not a request this server can answer: the connection is closed."""


class MalformedFrameError(ProtocolError):
    """A frame whose header or body does not decode (truncated, garbage, a size out of bounds)."""


class UnsupportedApiError(ProtocolError):
    """An API key, or a version of it, that this server does not serve (ApiVersions excepted: a too-new
    ApiVersions request is answered with the supported ranges)."""


def group_error_code(error: GroupError) -> ErrorCode:
    """Kafka's error code for a group call's outcome (`GroupError` values are Kafka's error names)."""
    return ErrorCode[error.value]


def election_error_code(outcome: ElectionError) -> ErrorCode:
    """Kafka's error code for a partition's election outcome (`ElectionError` values are Kafka's error names)."""
    return ErrorCode[outcome.value]


def txn_error_code(error: TxnError, producer_fenced: bool = True) -> ErrorCode:
    """Kafka's error code for a transaction coordinator's answer (`TxnError` values are Kafka's error names);
    PRODUCER_FENCED (90) becomes INVALID_PRODUCER_EPOCH (47) for a request version older than the one that
    introduced it (`producer_fenced` False), as Kafka's `KafkaApis` answers old clients."""
    if error == TxnError.PRODUCER_FENCED and not producer_fenced:
        return ErrorCode.invalid_producer_epoch
    return ErrorCode[error.value]


def coordinator_error_code(exc: BaseException) -> ErrorCode:
    """The code of a failed coordinator call: COORDINATOR_LOAD_IN_PROGRESS (14) while it loads a partition of its
    internal topic, COORDINATOR_NOT_AVAILABLE (15) while the coordinator is down or restarting, so that clients look
    it up again and retry; otherwise the table's code."""
    if isinstance(exc, CoordinatorLoadInProgressError):
        return ErrorCode.coordinator_load_in_progress
    return ErrorCode.coordinator_not_available if isinstance(exc, BrokerNotAvailableError) else error_code(exc)


class SaslFailure(Exception):
    """A SASL handler's failed answer: `response` (a kio response body) goes back to the client, then the
    connection is closed after `connection.failed.authentication.delay.ms`. `reason` is safe to log."""

    def __init__(self, reason: str, response: object) -> None:
        super().__init__(reason)
        self.reason = reason
        self.response = response


class AuthenticationFailedError(ProtocolError):
    """A connection whose authentication failed: `frame` (the encoded answer) is sent after the failed-login delay,
    then the connection is closed."""

    def __init__(self, reason: str, frame: bytes) -> None:
        super().__init__(reason)
        self.reason = reason
        self.frame = frame
