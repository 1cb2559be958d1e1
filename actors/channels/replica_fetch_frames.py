"""The frames of the replica channel (`actors.channels.replica_channel`): a follower's fetch from its leader's process
over TCP, and the answer, as fixed-size big-endian integers around the records' own bytes.

- A connection's first `TOKEN_BYTES` bytes are the channel's token, random bytes the leader's process drew, which a
  follower learns from a Ray call to the leader (`PartitionLogActor.replica_channel`): only a process that can call
  the cluster's actors can read a partition through the channel.
- A request: `size` (u32, the bytes after it), the topic's length (u16) and UTF-8 name, the partition (i32), the
  fetch offset (i64), the fetch's max bytes (i32) and max wait (i32, ms), the leader epoch the follower follows
  (i32), then the follower's Ray node id (UTF-8, the rest): `Replica.replicate`'s arguments.
- An answer: `size` (u32), then a kind byte. `ANSWER_OK` (0) carries the leader's high watermark, log start offset
  and log end offset (i64 each), then the records (the rest). `ANSWER_ERROR` (1) is the append channel's error
  answer (`actors.channels.append_frames.encode_error`): the error a Ray call would have raised, fields and all.

Nothing here is unpickled or evaluated; bytes that do not parse raise `InvalidRequestError`.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from actors.channels.append_frames import SIZE, decode_error
from actors.core.replication.follower import ReplicaFetch
from storage.errors import InvalidRequestError, RaybrokerError

TOKEN_BYTES = 32
ANSWER_OK = 0
ANSWER_ERROR = 1

_TOPIC = struct.Struct(">H")
_FETCH = struct.Struct(">iqiii")
# What precedes the records in an answer's body: the kind byte and the three offsets.
_OFFSETS = struct.Struct(">B3q")


class ReplicaFetchRequest(NamedTuple):
    """A follower's fetch: `Replica.replicate`'s arguments, with the partition it is for."""

    topic: str
    partition: int
    follower: str
    offset: int
    max_bytes: int
    max_wait_ms: int
    leader_epoch: int


def encode_request(request: ReplicaFetchRequest) -> bytes:
    """The request's frame."""
    topic = request.topic.encode()
    body = b"".join(
        (
            _TOPIC.pack(len(topic)),
            topic,
            _FETCH.pack(
                request.partition, request.offset, request.max_bytes, request.max_wait_ms, request.leader_epoch
            ),
            request.follower.encode(),
        )
    )
    return SIZE.pack(len(body)) + body


def decode_request(body: bytes | bytearray) -> ReplicaFetchRequest:
    """The request a frame's body (the bytes after its size) carries."""
    try:
        (topic_size,) = _TOPIC.unpack_from(body)
        start = _TOPIC.size
        if start + topic_size + _FETCH.size > len(body):
            raise InvalidRequestError(f"a replica fetch request of {len(body)} bytes ends inside its fields")
        topic = bytes(body[start : start + topic_size]).decode()
        start += topic_size
        partition, offset, max_bytes, max_wait_ms, leader_epoch = _FETCH.unpack_from(body, start)
        follower = bytes(body[start + _FETCH.size :]).decode()
    except (struct.error, UnicodeDecodeError) as exc:
        raise InvalidRequestError(f"malformed replica fetch request: {exc}") from None
    return ReplicaFetchRequest(topic, partition, follower, offset, max_bytes, max_wait_ms, leader_epoch)


def encode_answer_head(fetch: ReplicaFetch) -> bytes:
    """The start of the frame answering `fetch`: its size, kind and offsets; `fetch.records` follow it."""
    offsets = _OFFSETS.pack(ANSWER_OK, fetch.high_watermark, fetch.log_start_offset, fetch.log_end_offset)
    return SIZE.pack(len(offsets) + len(fetch.records)) + offsets


def decode_answer(body: bytearray) -> ReplicaFetch | RaybrokerError:
    """The `ReplicaFetch` an answer frame's body carries (its records a view of `body`), or the typed error it
    names."""
    if not body:
        raise InvalidRequestError("an empty replica fetch answer")
    if body[0] == ANSWER_ERROR:
        return decode_error(bytes(body))
    if body[0] != ANSWER_OK or len(body) < _OFFSETS.size:
        raise InvalidRequestError(f"a replica fetch answer of kind {body[0]} and {len(body)} bytes")
    _, high_watermark, log_start_offset, log_end_offset = _OFFSETS.unpack_from(body)
    return ReplicaFetch(memoryview(body)[_OFFSETS.size :], high_watermark, log_start_offset, log_end_offset)


__all__ = [
    "TOKEN_BYTES",
    "ReplicaFetchRequest",
    "decode_answer",
    "decode_request",
    "encode_answer_head",
    "encode_request",
]
