"""The error table: each broker error gets Kafka's code, subclasses their nearest ancestor's, others -1; and each
error's `retriable` flag is Kafka's for that code."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from cluster.protocol.error_codes import ERROR_CODES, error_code, share_partition_error_code
from storage.errors import (
    BrokerNotAvailableError,
    CorruptIndexError,
    CorruptRecordError,
    FencedLeaderEpochError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    LogClosedError,
    OffsetOutOfRangeError,
    RaybrokerError,
    TransactionCoordinatorFencedError,
    UnknownTopicOrPartitionError,
    is_retriable,
)


def _every_error_type(base: type[RaybrokerError] = RaybrokerError) -> list[type[RaybrokerError]]:
    found = [base]
    for subclass in base.__subclasses__():
        found.extend(_every_error_type(subclass))
    return found


def test_broker_errors_get_kafkas_codes() -> None:
    assert error_code(OffsetOutOfRangeError("x")) == 1
    assert error_code(CorruptRecordError("x")) == 2
    assert error_code(UnknownTopicOrPartitionError("x")) == 3


def test_transaction_errors_get_kafkas_codes() -> None:
    assert error_code(InvalidProducerEpochError("x")) == 47
    assert error_code(InvalidTxnStateError("x")) == 48
    assert error_code(TransactionCoordinatorFencedError("x")) == 52


def test_a_subclass_with_its_own_row_beats_its_parent() -> None:
    assert error_code(LogClosedError("x")) == ErrorCode.not_leader_or_follower
    assert error_code(BrokerNotAvailableError("x")) == ErrorCode.leader_not_available


def test_errors_without_a_row_are_unknown_server_errors() -> None:
    assert error_code(CorruptIndexError("x")) == ErrorCode.unknown_server_error
    assert error_code(KeyError("x")) == ErrorCode.unknown_server_error


def test_the_table_never_answers_success() -> None:
    assert ErrorCode.none not in ERROR_CODES.values()


def test_every_error_is_retriable_exactly_when_kafka_retries_its_code() -> None:
    """The oracle is Kafka's own error table (`ErrorCode.retriable`, generated from Kafka's `Errors`): a type is
    retriable iff the code it answers with is. Types without a code of their own answer UNKNOWN_SERVER_ERROR,
    which Kafka does not retry."""
    types = _every_error_type()
    assert set(ERROR_CODES) <= set(types)
    mismatched = {
        cls.__name__: (cls.retriable, error_code(cls.__new__(cls)).name)
        for cls in types
        if cls.retriable is not error_code(cls.__new__(cls)).retriable
    }
    assert mismatched == {}
    assert {cls for cls in ERROR_CODES if cls.retriable} >= {BrokerNotAvailableError, UnknownTopicOrPartitionError}


def test_is_retriable_asks_the_flag_and_refuses_foreign_errors() -> None:
    assert is_retriable(LogClosedError("closed"))
    assert is_retriable(UnknownTopicOrPartitionError("gone"))
    assert not is_retriable(InvalidRecordError("bad"))
    assert not is_retriable(TimeoutError("not ours"))


# The partition errors Kafka 4.2's share consumer handles in a ShareFetch answer (`ShareFetchCollector`
# .handleInitializeErrors); any other code makes it throw IllegalStateException.
SHARE_CONSUMER_HANDLES = {
    ErrorCode.not_leader_or_follower,
    ErrorCode.replica_not_available,
    ErrorCode.kafka_storage_error,
    ErrorCode.fenced_leader_epoch,
    ErrorCode.offset_not_available,
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.unknown_topic_id,
    ErrorCode.inconsistent_topic_id,
    ErrorCode.topic_authorization_failed,
    ErrorCode.unknown_leader_epoch,
    ErrorCode.unknown_server_error,
    ErrorCode.corrupt_message,
}


def test_a_share_fetch_answers_an_unreachable_leader_with_a_code_kafkas_share_consumer_retries() -> None:
    for exc in (BrokerNotAvailableError("restarting"), LogClosedError("closed"), FencedLeaderEpochError("old")):
        assert share_partition_error_code(exc) in SHARE_CONSUMER_HANDLES
    assert share_partition_error_code(BrokerNotAvailableError("x")) == ErrorCode.not_leader_or_follower
    assert share_partition_error_code(OffsetOutOfRangeError("x")) == error_code(OffsetOutOfRangeError("x"))
