"""The frames of the append channel (`actors.server.append_channel`): a same-node producer's appends and their
answers, as fixed-size big-endian integers around the batches' own bytes.

- A request: `size` (u32, the bytes after it), `acks` (i8), the topic's length (u16) and UTF-8 name, the
  partition (i32), then the record batches as Kafka's wire bytes (what `PartitionLogActor.append` takes).
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

import struct

import storage.errors
from storage.errors import InvalidRequestError, RaybrokerError
from storage.partition.log import LogAppendInfo

# Kafka's `socket.request.max.bytes` default: the largest request frame a listener reads.
SOCKET_REQUEST_MAX_BYTES = 104_857_600

SIZE = struct.Struct(">I")
_REQUEST_HEAD = struct.Struct(">bH")
_PARTITION = struct.Struct(">i")
_KIND = struct.Struct(">B")
_INFO = struct.Struct(">9qBI")
_BATCH = struct.Struct(">2q")
_NAME = struct.Struct(">H")
_FIELDS = struct.Struct(">qq")
_NO_PATH = 0xFFFF

ANSWER_OK = 0
ANSWER_ERROR = 1


def encode_request(topic: str, partition: int, acks: int, batches: bytes) -> list[bytes]:
    """The request's frame as pieces to send in order (the batches are not copied into a new buffer)."""
    name = topic.encode()
    head = _REQUEST_HEAD.pack(acks, len(name)) + name + _PARTITION.pack(partition)
    return [SIZE.pack(len(head) + len(batches)), head, batches]


def decode_request(body: bytes | bytearray) -> tuple[str, int, int, memoryview]:
    """(topic, partition, acks, batches) of a request frame's body (the bytes after its size)."""
    try:
        acks, name_size = _REQUEST_HEAD.unpack_from(body)
        start = _REQUEST_HEAD.size
        topic = body[start : start + name_size].decode()
        (partition,) = _PARTITION.unpack_from(body, start + name_size)
    except (struct.error, UnicodeDecodeError) as exc:
        raise InvalidRequestError(f"malformed append request: {exc}") from None
    return topic, partition, acks, memoryview(body)[start + name_size + _PARTITION.size :]


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
    "decode_answer",
    "decode_request",
    "encode_answer",
    "encode_error",
    "encode_request",
    "error_named",
]
