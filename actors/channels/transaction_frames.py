"""The frames of the transaction channel (`actors.channels.transaction_channel`): a same-node listener's calls to the
transaction coordinator in a transaction's steady state (AddPartitionsToTxn, KIP-890's verification of a
transactional Produce, EndTxn, and transactions v2's implicit adds and EndTxn) and their answers, as fixed-size
big-endian integers and length-prefixed UTF-8.

- A request: `size` (u32, the bytes after it), its kind (u8), the transactional id (u16 length, UTF-8),
  `producer_id` (i64), `producer_epoch` (i16), then by kind: `ADD_PARTITIONS` (0), `VERIFY_PARTITIONS` (1) and
  transactions v2's `ADD_PARTITIONS_IMPLICITLY` (3), the count of partitions (u32) and each one's topic (u16 length,
  UTF-8) and index (i32); `END_TRANSACTION` (2) and transactions v2's `END_TRANSACTION_V2` (4), `commit` (u8, 0 or
  1). Nothing may follow.
- An answer: `size` (u32), then its kind (u8). `ANSWER_TXN_ERROR` (0) carries one `TxnError` (u8, its index in
  `TXN_ERRORS`); `ANSWER_PARTITION_ERRORS` (2) the count of partitions (u32) and each one's topic, index and
  `TxnError` as above; `ANSWER_END_TXN` (3) a `TxnError`, then the producer id (i64) and epoch (i16) to go on with;
  `ANSWER_ERROR` (1) is the append channel's error answer (`actors.channels.append_frames.encode_error`): the typed
  error the Ray call would have raised.

Both ends run the same code (they are on one node), so `TXN_ERRORS` is the same table on both. Nothing is
unpickled or evaluated; bytes that do not parse raise only `InvalidRequestError`.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from actors.channels.append_frames import ANSWER_ERROR, SIZE, decode_error
from actors.core.transactions.transaction_coordinator import EndTxnResult
from actors.core.transactions.transaction_metadata import TxnError
from storage.errors import InvalidRequestError, RaybrokerError
from storage.topic_partition import TopicPartition

TXN_ERRORS = tuple(TxnError)
ANSWER_TXN_ERROR = 0
ANSWER_PARTITION_ERRORS = 2
ANSWER_END_TXN = 3

_KIND = struct.Struct(">B")
_LENGTH = struct.Struct(">H")
_PRODUCER = struct.Struct(">qh")
_COUNT = struct.Struct(">I")
_PARTITION = struct.Struct(">i")
_COMMIT = struct.Struct(">B")
_ERROR = struct.Struct(">B")


class RequestKind(enum.IntEnum):
    ADD_PARTITIONS = 0
    VERIFY_PARTITIONS = 1
    END_TRANSACTION = 2
    ADD_PARTITIONS_IMPLICITLY = 3
    END_TRANSACTION_V2 = 4


# The kinds that carry `commit` rather than partitions.
END_KINDS = frozenset({RequestKind.END_TRANSACTION, RequestKind.END_TRANSACTION_V2})


@dataclass(frozen=True, slots=True)
class TransactionRequest:
    """One call: `partitions` for the partition kinds, `commit` for the `END_KINDS`."""

    kind: RequestKind
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...] = ()
    commit: bool = False


def _name(text: str) -> bytes:
    encoded = text.encode()
    if len(encoded) > 0xFFFF:
        raise InvalidRequestError(f"a name of {len(encoded)} bytes does not fit a transaction channel frame")
    return _LENGTH.pack(len(encoded)) + encoded


def _framed(body: bytes) -> bytes:
    return SIZE.pack(len(body)) + body


def encode_request(request: TransactionRequest) -> bytes:
    """The request's frame; `InvalidRequestError` if a name is longer than a frame can carry."""
    pieces = [
        _KIND.pack(request.kind),
        _name(request.transactional_id),
        _PRODUCER.pack(request.producer_id, request.producer_epoch),
    ]
    if request.kind in END_KINDS:
        pieces.append(_COMMIT.pack(int(request.commit)))
    else:
        pieces.append(_COUNT.pack(len(request.partitions)))
        for topic, partition in request.partitions:
            pieces += (_name(topic), _PARTITION.pack(partition))
    return _framed(b"".join(pieces))


class _Reader:
    """Reads a frame's body from its start; running past its end raises `InvalidRequestError`."""

    __slots__ = ("body", "position")

    def __init__(self, body: bytes | bytearray) -> None:
        self.body = body
        self.position = 0

    def take(self, layout: struct.Struct) -> tuple[int, ...]:
        if self.position + layout.size > len(self.body):
            raise InvalidRequestError(f"a transaction channel frame of {len(self.body)} bytes ends inside a field")
        values = layout.unpack_from(self.body, self.position)
        self.position += layout.size
        return values

    def name(self) -> str:
        (size,) = self.take(_LENGTH)
        if self.position + size > len(self.body):
            raise InvalidRequestError(f"a transaction channel frame of {len(self.body)} bytes ends inside a name")
        try:
            text = bytes(self.body[self.position : self.position + size]).decode()
        except UnicodeDecodeError as exc:
            raise InvalidRequestError(f"a name that is not UTF-8: {exc}") from None
        self.position += size
        return text

    def end(self) -> None:
        if self.position != len(self.body):
            raise InvalidRequestError(f"{len(self.body) - self.position} bytes after a transaction channel frame")


def _partition_count(reader: _Reader, entry_bytes: int) -> int:
    """A count of partitions, bounded by what the rest of the body can hold (each at least `entry_bytes`)."""
    (count,) = reader.take(_COUNT)
    if count * entry_bytes > len(reader.body) - reader.position:
        raise InvalidRequestError(f"{count} partitions in a transaction channel frame of {len(reader.body)} bytes")
    return count


def decode_request(body: bytes | bytearray) -> TransactionRequest:
    """The request a frame's body (the bytes after its size) carries."""
    reader = _Reader(body)
    (number,) = reader.take(_KIND)
    try:
        kind = RequestKind(number)
    except ValueError:
        raise InvalidRequestError(f"a transaction channel request of unknown kind {number}") from None
    transactional_id = reader.name()
    producer_id, producer_epoch = reader.take(_PRODUCER)
    if kind in END_KINDS:
        (commit,) = reader.take(_COMMIT)
        if commit not in (0, 1):
            raise InvalidRequestError(f"an EndTxn request whose commit flag is {commit}")
        reader.end()
        return TransactionRequest(kind, transactional_id, producer_id, producer_epoch, commit=bool(commit))
    count = _partition_count(reader, _LENGTH.size + _PARTITION.size)
    partitions: list[TopicPartition] = []
    for _ in range(count):
        topic = reader.name()
        (partition,) = reader.take(_PARTITION)
        partitions.append((topic, partition))
    reader.end()
    return TransactionRequest(kind, transactional_id, producer_id, producer_epoch, tuple(partitions))


def encode_txn_error(error: TxnError) -> bytes:
    """The frame answering ADD_PARTITIONS or END_TRANSACTION."""
    return _framed(_KIND.pack(ANSWER_TXN_ERROR) + _ERROR.pack(TXN_ERRORS.index(error)))


def encode_end_txn(result: EndTxnResult) -> bytes:
    """The frame answering END_TRANSACTION_V2."""
    return _framed(
        _KIND.pack(ANSWER_END_TXN)
        + _ERROR.pack(TXN_ERRORS.index(result.error))
        + _PRODUCER.pack(result.producer_id, result.producer_epoch)
    )


def encode_partition_errors(errors: dict[TopicPartition, TxnError]) -> bytes:
    """The frame answering VERIFY_PARTITIONS."""
    pieces = [_KIND.pack(ANSWER_PARTITION_ERRORS), _COUNT.pack(len(errors))]
    for (topic, partition), error in errors.items():
        pieces += (_name(topic), _PARTITION.pack(partition), _ERROR.pack(TXN_ERRORS.index(error)))
    return _framed(b"".join(pieces))


def _txn_error(reader: _Reader) -> TxnError:
    (index,) = reader.take(_ERROR)
    if index >= len(TXN_ERRORS):
        raise InvalidRequestError(f"a transaction error of unknown index {index}")
    return TXN_ERRORS[index]


def decode_answer(body: bytes) -> TxnError | dict[TopicPartition, TxnError] | EndTxnResult | RaybrokerError:
    """What an answer frame's body carries: one `TxnError`, one per partition, an EndTxn v5 result, or the typed
    error raised."""
    reader = _Reader(body)
    (kind,) = reader.take(_KIND)
    if kind == ANSWER_ERROR:
        return decode_error(body)
    if kind == ANSWER_TXN_ERROR:
        error = _txn_error(reader)
        reader.end()
        return error
    if kind == ANSWER_END_TXN:
        error = _txn_error(reader)
        producer_id, producer_epoch = reader.take(_PRODUCER)
        reader.end()
        return EndTxnResult(error, producer_id, producer_epoch)
    if kind == ANSWER_PARTITION_ERRORS:
        count = _partition_count(reader, _LENGTH.size + _PARTITION.size + _ERROR.size)
        errors: dict[TopicPartition, TxnError] = {}
        for _ in range(count):
            topic = reader.name()
            (partition,) = reader.take(_PARTITION)
            errors[(topic, partition)] = _txn_error(reader)
        reader.end()
        return errors
    raise InvalidRequestError(f"a transaction channel answer of unknown kind {kind}")


__all__ = [
    "TXN_ERRORS",
    "RequestKind",
    "TransactionRequest",
    "decode_answer",
    "decode_request",
    "encode_end_txn",
    "encode_partition_errors",
    "encode_request",
    "encode_txn_error",
]
