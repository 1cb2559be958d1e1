"""The error table: each broker error gets Kafka's code, subclasses their nearest ancestor's, others -1."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from cluster.protocol.errors import ERROR_CODES, error_code
from storage.errors import (
    BrokerNotAvailableError,
    CorruptIndexError,
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    LogClosedError,
    OffsetOutOfRangeError,
    TransactionCoordinatorFencedError,
    UnknownTopicOrPartitionError,
)


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
