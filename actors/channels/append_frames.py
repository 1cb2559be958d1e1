"""The frames of the append channel (`actors.channels.append_channel`): a same-node producer's appends, a same-node
transaction coordinator's markers, a same-node group coordinator's transactional offset commits, and their answers,
as fixed-size big-endian integers around the batches' own bytes.

- A request: `size` (u32, the bytes after it), its kind (u8), the topic's length (u16) and UTF-8 name, the
  partition (i32), then by kind: `REQUEST_APPEND` (0), `acks` (i8) and the record batches as Kafka's wire bytes (what
  `PartitionLogActor.append` takes); `REQUEST_MARKER` (1), a COMMIT/ABORT marker as
  `PartitionLogActor.append_transaction_marker` takes it: `producer_id` (i64), `producer_epoch` (i16),
  `coordinator_epoch` (i32) and the control type (i16, `ControlRecordType`: 0 ABORT, 1 COMMIT);
  `REQUEST_COORDINATOR` (2), a group coordinator's transactional offset commit as Kafka's wire bytes (what
  `PartitionLogActor.append_from_coordinator` takes: origin COORDINATOR, acks=all).
- An answer: `size` (u32), then a kind byte. `ANSWER_OK` carries the `LogAppendInfo`: its nine integers (i64),
  `duplicate` (u8), the count of batches (u32) and each batch's first and last offset (i64 each).
  `ANSWER_ERROR` carries the error's class name (u16 length, ASCII), its `RaybrokerError` fields `position` and
  `offset` (i64, -1 for none) and `path` (u16 length, UTF-8, absent if its length is 0xFFFF), and its message
  (UTF-8, the rest): the error a Ray call would have raised, fields and all.

Answers come in request order on a connection. Nothing here is unpickled or evaluated: an error is rebuilt only
as a class that `storage.errors` defines and that derives from `RaybrokerError`; any other name becomes a plain
`RaybrokerError` naming it. Bytes that do not parse raise `CorruptRecordError` / `InvalidRequestError`.
"""

from __future__ import annotations

import logging
import struct
from typing import NamedTuple

import storage.errors
from actors.core.transactions.markers import TransactionMarker
from storage.errors import InvalidRequestError, RaybrokerError
from storage.partition.log import LogAppendInfo
from storage.records.layout import ControlRecordType

# Kafka's `socket.request.max.bytes` default: the largest request frame a listener reads.
SOCKET_REQUEST_MAX_BYTES = 104_857_600

SIZE = struct.Struct(">I")
_REQUEST_HEAD = struct.Struct(">BH")
_PARTITION = struct.Struct(">i")
_ACKS = struct.Struct(">b")
_MARKER = struct.Struct(">qhih")
_KIND = struct.Struct(">B")
_INFO = struct.Struct(">9qBI")
_BATCH = struct.Struct(">2q")
_NAME = struct.Struct(">H")
_FIELDS = struct.Struct(">qq")
_NO_PATH = 0xFFFF

REQUEST_APPEND = 0
REQUEST_MARKER = 1
REQUEST_COORDINATOR = 2
ANSWER_OK = 0
ANSWER_ERROR = 1


def over_request_limit(size: int, channel: str, log: logging.Logger) -> bool:
    """Whether a request frame of `size` bytes is over `socket.request.max.bytes`: every channel then closes its
    connection unread, as Kafka's listener does, and says so on `log` (its own logger)."""
    if size <= SOCKET_REQUEST_MAX_BYTES:
        return False
    log.warning(
        "%s: closing a connection: a frame of %d bytes is over socket.request.max.bytes (%d)",
        channel,
        size,
        SOCKET_REQUEST_MAX_BYTES,
    )
    return True


class AppendRequest(NamedTuple):
    """A producer's append: its batches as the client sent them."""

    topic: str
    partition: int
    acks: int
    batches: memoryview


class MarkerRequest(NamedTuple):
    """A transaction coordinator's COMMIT/ABORT marker for one producer's transaction on the partition."""

    topic: str
    partition: int
    marker: TransactionMarker


class CoordinatorRequest(NamedTuple):
    """A group coordinator's transactional offset commit: one batch as Kafka's wire bytes."""

    topic: str
    partition: int
    batch: memoryview


def _head(kind: int, topic: str, partition: int) -> bytes:
    name = topic.encode()
    return _REQUEST_HEAD.pack(kind, len(name)) + name + _PARTITION.pack(partition)


def encode_request(topic: str, partition: int, acks: int, batches: bytes) -> list[bytes]:
    """An append request's frame as pieces to send in order (the batches are not copied into a new buffer)."""
    head = _head(REQUEST_APPEND, topic, partition) + _ACKS.pack(acks)
    return [SIZE.pack(len(head) + len(batches)), head, batches]


def encode_marker_request(topic: str, partition: int, marker: TransactionMarker) -> list[bytes]:
    """A marker request's frame as pieces to send in order."""
    body = _head(REQUEST_MARKER, topic, partition) + _MARKER.pack(
        marker.producer_id, marker.producer_epoch, marker.coordinator_epoch, marker.result
    )
    return [SIZE.pack(len(body)), body]


def encode_coordinator_request(topic: str, partition: int, batch: bytes) -> list[bytes]:
    """A group coordinator's offset commit request's frame as pieces to send in order."""
    head = _head(REQUEST_COORDINATOR, topic, partition)
    return [SIZE.pack(len(head) + len(batch)), head, batch]


def decode_request(body: bytes | bytearray) -> AppendRequest | MarkerRequest | CoordinatorRequest:
    """The request a frame's body (the bytes after its size) carries."""
    try:
        kind, name_size = _REQUEST_HEAD.unpack_from(body)
        start = _REQUEST_HEAD.size
        if start + name_size > len(body):
            raise InvalidRequestError(f"a request of {len(body)} bytes ends inside its topic name")
        topic = body[start : start + name_size].decode()
        start += name_size
        (partition,) = _PARTITION.unpack_from(body, start)
        start += _PARTITION.size
        if kind == REQUEST_APPEND:
            (acks,) = _ACKS.unpack_from(body, start)
            return AppendRequest(topic, partition, acks, memoryview(body)[start + _ACKS.size :])
        if kind == REQUEST_COORDINATOR:
            return CoordinatorRequest(topic, partition, memoryview(body)[start:])
        if kind == REQUEST_MARKER:
            if len(body) != start + _MARKER.size:
                raise InvalidRequestError(f"a marker request of {len(body)} bytes")
            producer_id, producer_epoch, coordinator_epoch, result = _MARKER.unpack_from(body, start)
            if result not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
                raise InvalidRequestError(f"a marker of control type {result}")
            return MarkerRequest(
                topic,
                partition,
                TransactionMarker(producer_id, producer_epoch, coordinator_epoch, ControlRecordType(result)),
            )
    except (struct.error, UnicodeDecodeError) as exc:
        raise InvalidRequestError(f"malformed append request: {exc}") from None
    raise InvalidRequestError(f"a request of unknown kind {kind}")


def encode_answer(info: LogAppendInfo) -> bytes:
    """The frame answering a successful append."""
    body = [
        _KIND.pack(ANSWER_OK),
        _INFO.pack(
            info.first_offset,
            info.last_offset,
            info.max_timestamp,
            info.offset_of_max_timestamp,
            info.log_append_time,
            info.log_start_offset,
            info.record_count,
            info.batch_count,
            info.valid_bytes,
            int(info.duplicate),
            len(info.batch_offsets),
        ),
        *(_BATCH.pack(first, last) for first, last in info.batch_offsets),
    ]
    payload = b"".join(body)
    return SIZE.pack(len(payload)) + payload


def encode_error(error: BaseException) -> bytes:
    """The frame answering a refused append: the error's class name, fields and message."""
    name = type(error).__name__.encode("ascii", "replace")
    if isinstance(error, RaybrokerError):
        message, path, position, offset = error.message, error.path, error.position, error.offset
    else:
        message, path, position, offset = str(error), None, None, None
    path_bytes = b"" if path is None else path.encode()[: _NO_PATH - 1]
    payload = b"".join(
        (
            _KIND.pack(ANSWER_ERROR),
            _NAME.pack(len(name)),
            name,
            _FIELDS.pack(-1 if position is None else position, -1 if offset is None else offset),
            _NAME.pack(_NO_PATH if path is None else len(path_bytes)),
            path_bytes,
            message.encode(),
        )
    )
    return SIZE.pack(len(payload)) + payload


def decode_answer(body: bytes) -> LogAppendInfo | RaybrokerError:
    """The `LogAppendInfo` an answer frame's body carries, or the typed error it names."""
    try:
        (kind,) = _KIND.unpack_from(body)
        if kind == ANSWER_OK:
            first, last, max_timestamp, of_max, append_time, log_start, records, batches, valid, duplicate, count = (
                _INFO.unpack_from(body, _KIND.size)
            )
            start = _KIND.size + _INFO.size
            if len(body) != start + count * _BATCH.size:
                raise InvalidRequestError(f"an append answer of {len(body)} bytes for {count} batches")
            offsets: tuple[tuple[int, int], ...] = tuple(_BATCH.iter_unpack(body[start:]))
            return LogAppendInfo(
                first,
                last,
                max_timestamp,
                of_max,
                append_time,
                log_start,
                records,
                batches,
                valid,
                offsets,
                bool(duplicate),
            )
        if kind == ANSWER_ERROR:
            return _decode_error(body)
    except (struct.error, UnicodeDecodeError) as exc:
        raise InvalidRequestError(f"malformed append answer: {exc}") from None
    raise InvalidRequestError(f"an append answer of unknown kind {kind}")


def decode_error(body: bytes) -> RaybrokerError:
    """The typed error an `ANSWER_ERROR` answer's body (`encode_error`'s frame after its size) names; bytes that do
    not parse raise `InvalidRequestError`."""
    try:
        return _decode_error(body)
    except (struct.error, UnicodeDecodeError) as exc:
        raise InvalidRequestError(f"malformed error answer: {exc}") from None


def _decode_error(body: bytes) -> RaybrokerError:
    (name_size,) = _NAME.unpack_from(body, _KIND.size)
    start = _KIND.size + _NAME.size
    name = _cut(body, start, name_size).decode("ascii")
    position, offset = _FIELDS.unpack_from(body, start + name_size)
    start += name_size + _FIELDS.size
    (path_size,) = _NAME.unpack_from(body, start)
    start += _NAME.size
    path = None
    if path_size != _NO_PATH:
        path = _cut(body, start, path_size).decode()
        start += path_size
    return error_named(
        name,
        body[start:].decode(),
        path=path,
        position=None if position == -1 else position,
        offset=None if offset == -1 else offset,
    )


def _cut(body: bytes, start: int, size: int) -> bytes:
    if start + size > len(body):
        raise InvalidRequestError(f"an append answer of {len(body)} bytes ends inside a field of {size} bytes")
    return body[start : start + size]


def error_named(
    name: str, message: str, *, path: str | None = None, position: int | None = None, offset: int | None = None
) -> RaybrokerError:
    """The `storage.errors` class called `name` with `message` and fields; a plain `RaybrokerError` for any other
    name."""
    cls = vars(storage.errors).get(name)
    if isinstance(cls, type) and issubclass(cls, RaybrokerError):
        return cls(message, path=path, position=position, offset=offset)
    return RaybrokerError(f"{name}: {message}", path=path, position=position, offset=offset)


__all__ = [
    "SIZE",
    "SOCKET_REQUEST_MAX_BYTES",
    "AppendRequest",
    "CoordinatorRequest",
    "MarkerRequest",
    "decode_answer",
    "decode_error",
    "decode_request",
    "encode_answer",
    "encode_coordinator_request",
    "encode_error",
    "encode_marker_request",
    "encode_request",
    "error_named",
    "over_request_limit",
]
