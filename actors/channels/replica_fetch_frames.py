"""The frames of the replica channel (`actors.channels.replica_channel`): a follower's fetch of one or more partitions
from its leader's process over TCP, and the answer, as fixed-size big-endian integers around the records' own bytes.

- A connection's first `TOKEN_BYTES` bytes are the channel's token, random bytes the leader's process drew, which a
  follower learns from a Ray call to the leader (`PartitionLogActor.replica_channel`): only a process that can call
  the cluster's actors can read a partition through the channel.
- A request (`SharedFetchRequest`, Kafka's follower Fetch of every partition a fetcher follows from one broker):
  `size` (u32, the bytes after it), the follower's Ray node id (u16 length, UTF-8), the fetch's max wait (i32, ms),
  the answer's max bytes (i32, Kafka's `replica.fetch.response.max.bytes`), the number of partitions (i32), then for
  each: the topic (u16 length, UTF-8), the partition (i32), the fetch offset (i64), the partition's max bytes (i32,
  `replica.fetch.max.bytes`) and the leader epoch the follower follows it in (i32): `Replica.replicate`'s
  arguments. A fetch of one partition (`ReplicaFetchRequest`) is such a request of one.
- An answer: `size` (u32), then a kind byte. `ANSWER_MANY` (2) carries one entry per partition asked, in the order
  asked, each a frame of its own: `size` (u32), then `ANSWER_OK` (0) with the leader's high watermark, log start
  offset and log end offset (i64 each) and the records (the rest), or `ANSWER_ERROR` (1), the append channel's error
  answer (`actors.channels.append_frames.encode_error`): the error a Ray call would have raised, fields and all.
  A request the channel cannot answer at all (one that does not parse) is answered with such an error frame alone.

Nothing here is unpickled or evaluated; bytes that do not parse raise `InvalidRequestError`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from actors.channels.append_frames import SIZE, decode_error, encode_error
from actors.core.replication.follower import ReplicaFetch
from storage.errors import InvalidRequestError, RaybrokerError

TOKEN_BYTES = 32
ANSWER_OK = 0
ANSWER_ERROR = 1
ANSWER_MANY = 2

_NAME = struct.Struct(">H")
_SHARED = struct.Struct(">iii")
_PARTITION = struct.Struct(">iqii")
_KIND = struct.Struct(">B")
# What precedes the records in a partition's entry: the kind byte and the three offsets.
_OFFSETS = struct.Struct(">B3q")


class PartitionFetch(NamedTuple):
    """One partition of a follower's fetch: where it fetches from, at most how much, in which leader epoch."""

    topic: str
    partition: int
    offset: int
    max_bytes: int
    leader_epoch: int


class SharedFetchRequest(NamedTuple):
    """A follower's fetch of `partitions` from one leader process, answered once one of them has records or after
    `max_wait_ms`."""

    follower: str
    max_wait_ms: int
    response_max_bytes: int
    partitions: tuple[PartitionFetch, ...]


class ReplicaFetchRequest(NamedTuple):
    """A follower's fetch of one partition: `Replica.replicate`'s arguments, with the partition it is for."""

    topic: str
    partition: int
    follower: str
    offset: int
    max_bytes: int
    max_wait_ms: int
    leader_epoch: int

    def shared(self) -> SharedFetchRequest:
        """The same fetch as a request of one partition."""
        fetch = PartitionFetch(self.topic, self.partition, self.offset, self.max_bytes, self.leader_epoch)
        return SharedFetchRequest(self.follower, self.max_wait_ms, self.max_bytes, (fetch,))


def encode_request(request: SharedFetchRequest | ReplicaFetchRequest) -> bytes:
    """The request's frame."""
    if isinstance(request, ReplicaFetchRequest):
        request = request.shared()
    follower = request.follower.encode()
    parts = [
        _NAME.pack(len(follower)),
        follower,
        _SHARED.pack(request.max_wait_ms, request.response_max_bytes, len(request.partitions)),
    ]
    for fetch in request.partitions:
        topic = fetch.topic.encode()
        parts += (
            _NAME.pack(len(topic)),
            topic,
            _PARTITION.pack(fetch.partition, fetch.offset, fetch.max_bytes, fetch.leader_epoch),
        )
    body = b"".join(parts)
    return SIZE.pack(len(body)) + body


def decode_request(body: bytes | bytearray) -> SharedFetchRequest:
    """The request a frame's body (the bytes after its size) carries."""
    try:
        follower, start = _name(body, 0)
        max_wait_ms, response_max_bytes, count = _SHARED.unpack_from(body, start)
        start += _SHARED.size
        if count < 1 or count * (_NAME.size + _PARTITION.size) > len(body) - start:
            raise InvalidRequestError(f"a replica fetch request of {len(body)} bytes cannot hold {count} partitions")
        partitions = []
        for _ in range(count):
            topic, start = _name(body, start)
            partition, offset, max_bytes, leader_epoch = _PARTITION.unpack_from(body, start)
            start += _PARTITION.size
            partitions.append(PartitionFetch(topic, partition, offset, max_bytes, leader_epoch))
    except (struct.error, UnicodeDecodeError) as exc:
        raise InvalidRequestError(f"malformed replica fetch request: {exc}") from None
    if start != len(body):
        raise InvalidRequestError(f"a replica fetch request with {len(body) - start} bytes after its partitions")
    return SharedFetchRequest(follower, max_wait_ms, response_max_bytes, tuple(partitions))


def _name(body: bytes | bytearray, start: int) -> tuple[str, int]:
    """The UTF-8 string at `start` (u16 length first) and where the bytes after it start."""
    (size,) = _NAME.unpack_from(body, start)
    start += _NAME.size
    if start + size > len(body):
        raise InvalidRequestError(f"a replica fetch request of {len(body)} bytes ends inside a name")
    return bytes(body[start : start + size]).decode(), start + size


def encode_answer(answers: Sequence[ReplicaFetch | RaybrokerError]) -> bytes:
    """The frame answering a request's partitions with `answers`, in the order asked."""
    parts: list[bytes | memoryview] = [b"", _KIND.pack(ANSWER_MANY)]
    for answer in answers:
        if isinstance(answer, RaybrokerError):
            parts.append(encode_error(answer))
            continue
        head = _OFFSETS.pack(ANSWER_OK, answer.high_watermark, answer.log_start_offset, answer.log_end_offset)
        parts += (SIZE.pack(len(head) + len(answer.records)), head, answer.records)
    parts[0] = SIZE.pack(sum(len(part) for part in parts))
    return b"".join(parts)


def decode_answer(body: bytearray, asked: int) -> list[ReplicaFetch | RaybrokerError] | RaybrokerError:
    """The answers an answer frame's body carries for the `asked` partitions of its request, in the order asked
    (each one's records a view of `body`), or the typed error the channel refused the whole request with."""
    if not body:
        raise InvalidRequestError("an empty replica fetch answer")
    if body[0] == ANSWER_ERROR:
        return decode_error(bytes(body))
    if body[0] != ANSWER_MANY:
        raise InvalidRequestError(f"a replica fetch answer of kind {body[0]} and {len(body)} bytes")
    view = memoryview(body)
    answers: list[ReplicaFetch | RaybrokerError] = []
    start = _KIND.size
    while start < len(body):
        if start + SIZE.size > len(body):
            raise InvalidRequestError("a replica fetch answer ends inside an entry's size")
        (size,) = SIZE.unpack_from(body, start)
        start += SIZE.size
        if start + size > len(body) or size < _KIND.size:
            raise InvalidRequestError(f"a replica fetch answer's entry of {size} bytes does not fit its frame")
        answers.append(_decode_entry(view[start : start + size]))
        start += size
    if len(answers) != asked:
        raise InvalidRequestError(f"a replica fetch answer of {len(answers)} partitions to a request of {asked}")
    return answers


def _decode_entry(entry: memoryview) -> ReplicaFetch | RaybrokerError:
    if entry[0] == ANSWER_ERROR:
        return decode_error(bytes(entry))
    if entry[0] != ANSWER_OK or len(entry) < _OFFSETS.size:
        raise InvalidRequestError(f"a replica fetch answer's entry of kind {entry[0]} and {len(entry)} bytes")
    _, high_watermark, log_start_offset, log_end_offset = _OFFSETS.unpack_from(entry)
    return ReplicaFetch(entry[_OFFSETS.size :], high_watermark, log_start_offset, log_end_offset)


__all__ = [
    "TOKEN_BYTES",
    "PartitionFetch",
    "ReplicaFetchRequest",
    "SharedFetchRequest",
    "decode_answer",
    "decode_request",
    "encode_answer",
    "encode_request",
]
