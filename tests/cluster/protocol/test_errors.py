"""The error table: each broker error gets Kafka's code, subclasses their nearest ancestor's, others -1; and each
error's `retriable` flag is Kafka's for that code."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from cluster.protocol.error_codes import ERROR_CODES, error_code
from storage.errors import (
    BrokerNotAvailableError,
    CorruptIndexError,
    CorruptRecordError,
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
