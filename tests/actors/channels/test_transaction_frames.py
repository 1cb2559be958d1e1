"""`actors.channels.transaction_frames`: every request and answer survives a round trip, the error table is the
coordinator's whole `TxnError`, a raised error comes back as its own `storage.errors` type, and bytes that do not parse
raise only `InvalidRequestError` (never `struct.error`, `IndexError`, `ValueError` or `UnicodeDecodeError`)."""

from __future__ import annotations

import contextlib
import random
import struct

import pytest

from actors.channels.append_frames import SIZE, encode_error
from actors.channels.transaction_frames import (
    TXN_ERRORS,
    RequestKind,
    TransactionRequest,
    decode_answer,
    decode_request,
    encode_end_txn,
    encode_partition_errors,
    encode_request,
    encode_txn_error,
)
from actors.core.transactions.transaction_coordinator import EndTxnResult
from actors.core.transactions.transaction_metadata import TxnError
from storage.errors import InvalidRequestError, ProducerFencedError, RaybrokerError


def body_of(frame: bytes) -> bytes:
    """The bytes after a frame's size field, checking that the size field counts exactly them."""
    (size,) = SIZE.unpack_from(frame)
    assert size == len(frame) - SIZE.size
    return frame[SIZE.size :]


REQUESTS = {
    "add one": TransactionRequest(RequestKind.ADD_PARTITIONS, "payments", 7, 0, (("orders", 0),)),
    "add several": TransactionRequest(
        RequestKind.ADD_PARTITIONS, "p", 2**63 - 1, 32767, (("orders", 0), ("événements.ü-日本", 2**31 - 1))
    ),
    "add none": TransactionRequest(RequestKind.ADD_PARTITIONS, "p", -1, -1),
    "verify": TransactionRequest(RequestKind.VERIFY_PARTITIONS, "x" * 32767, 0, 0, (("t" * 249, 3),)),
    "commit": TransactionRequest(RequestKind.END_TRANSACTION, "payments", 7, 1, commit=True),
    "abort": TransactionRequest(RequestKind.END_TRANSACTION, "payments", -(2**63), -(2**15), commit=False),
    "implicit add": TransactionRequest(RequestKind.ADD_PARTITIONS_IMPLICITLY, "p", 9, 3, (("orders", 2),)),
    "v2 commit": TransactionRequest(RequestKind.END_TRANSACTION_V2, "payments", 7, 32766, commit=True),
}


@pytest.mark.parametrize("case", sorted(REQUESTS))
def test_a_request_round_trips(case: str) -> None:
    decoded = decode_request(body_of(encode_request(REQUESTS[case])))
    assert decoded == REQUESTS[case]
    assert type(decoded.kind) is RequestKind


@pytest.mark.parametrize("error", list(TxnError))
def test_every_coordinator_answer_round_trips(error: TxnError) -> None:
    assert decode_answer(body_of(encode_txn_error(error))) is error


def test_the_error_table_is_the_whole_txn_error_once_each() -> None:
    assert sorted(TXN_ERRORS, key=lambda error: error.value) == sorted(TxnError, key=lambda error: error.value)
    assert len(set(TXN_ERRORS)) == len(TXN_ERRORS) < 256


def test_a_verification_answer_round_trips_in_its_order() -> None:
    errors = {
        ("orders", 1): TxnError.NONE,
        ("événements", 0): TxnError.TRANSACTION_ABORTABLE,
        ("orders", 0): TxnError.NONE,
    }
    decoded = decode_answer(body_of(encode_partition_errors(errors)))
    assert decoded == errors
    assert isinstance(decoded, dict) and list(decoded) == list(errors)


@pytest.mark.parametrize(
    "result",
    [
        EndTxnResult(TxnError.NONE, 7, 2),
        EndTxnResult(TxnError.PRODUCER_FENCED),
        EndTxnResult(TxnError.NONE, 2**63 - 1, 0),
    ],
)
def test_an_end_txn_v2_answer_round_trips(result: EndTxnResult) -> None:
    assert decode_answer(body_of(encode_end_txn(result))) == result


def test_a_raised_error_comes_back_as_its_own_type_and_text() -> None:
    decoded = decode_answer(body_of(encode_error(ProducerFencedError("epoch 3 is fenced by 4"))))
    assert type(decoded) is ProducerFencedError
    assert isinstance(decoded, RaybrokerError) and decoded.message == "epoch 3 is fenced by 4"


def _head(kind: int, name: bytes = b"payments") -> bytes:
    return struct.pack(">BH", kind, len(name)) + name + struct.pack(">qh", 7, 0)


MALFORMED_REQUESTS = {
    "empty": b"",
    "unknown kind": _head(9) + b"\x00",
    "id length cut": b"\x00\x00",
    "id longer than the body": struct.pack(">BH", 0, 40) + b"payments",
    "id not UTF-8": _head(0, b"\xff\xfe") + struct.pack(">I", 0),
    "producer cut": _head(0)[:-3],
    "count missing": _head(0),
    "count over the body": _head(1) + struct.pack(">I", 2**32 - 1),
    "partition cut": _head(0) + struct.pack(">IH", 1, 6) + b"orders\x00\x00",
    "bytes after the partitions": _head(0) + struct.pack(">I", 0) + b"\x00",
    "commit flag missing": _head(2),
    "commit flag not 0 or 1": _head(2) + b"\x02",
    "bytes after the commit flag": _head(2) + b"\x01\x00",
}


@pytest.mark.parametrize("case", sorted(MALFORMED_REQUESTS))
def test_a_malformed_request_raises_invalid_request(case: str) -> None:
    with pytest.raises(InvalidRequestError):
        decode_request(MALFORMED_REQUESTS[case])


MALFORMED_ANSWERS = {
    "empty": b"",
    "unknown kind": b"\x09\x00",
    "error index missing": b"\x00",
    "error index past the table": b"\x00" + bytes([len(TXN_ERRORS)]),
    "bytes after the error": b"\x00\x00\x00",
    "count over the body": b"\x02" + struct.pack(">I", 1000),
    "partition error cut": b"\x02" + struct.pack(">IH", 1, 6) + b"orders" + struct.pack(">i", 0),
    "error answer cut": b"\x01\x00",
}


@pytest.mark.parametrize("case", sorted(MALFORMED_ANSWERS))
def test_a_malformed_answer_raises_invalid_request(case: str) -> None:
    with pytest.raises(InvalidRequestError):
        decode_answer(MALFORMED_ANSWERS[case])


@pytest.mark.parametrize("decode", [decode_request, decode_answer])
def test_random_bodies_raise_only_invalid_request(decode: object) -> None:
    generator = random.Random(20261124)
    for _ in range(5000):
        body = generator.randbytes(generator.randrange(0, 40))
        if body and generator.random() < 0.5:
            body = bytes([generator.randrange(0, 3)]) + body[1:]
        with contextlib.suppress(InvalidRequestError):
            decode(body)  # type: ignore[operator]


def test_a_name_too_long_for_a_frame_is_refused_before_sending() -> None:
    with pytest.raises(InvalidRequestError):
        encode_request(TransactionRequest(RequestKind.ADD_PARTITIONS, "x" * 65536, 0, 0))
