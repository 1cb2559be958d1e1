"""A follower's fetch answer (`ReplicaFetch`) cut into pieces small enough for Ray to return inline.

Ray puts a task's return value above `max_direct_call_object_size` (100 KiB by default) in the object store of the
node that ran the task; a caller on another node then pulls it from there (the owner asked for its location, a pull
request between the raylets, the bytes copied into the caller's store, then read from it). A follower fetches up
to `replica.fetch.max.bytes` (Kafka's 1 MiB) a call and one call at a time, so that pull's latency, not the bytes,
set how fast a partition replicated: with `acks=all` over three Ray nodes the followers spent ~95% of their time
waiting for their fetch answers while every process on the nodes was mostly idle. Values at or below the limit
travel in the call's own gRPC reply instead, as a Kafka follower's fetch answer comes over its connection.

The leader answers a fetch as `pieces` return values (the call's `num_returns`): the first is the `ReplicaFetch`
with the first `PIECE_BYTES` of its records, each next one the next `PIECE_BYTES` bytes (empty once the records
ran out), the last one whatever is left (a first batch larger than the fetch's `max_bytes` is answered whole, as
Kafka's reads do, and its remainder then goes through the object store). `PIECE_BYTES` leaves 4 KiB of Ray's
limit for the serialized value's own header and the `ReplicaFetch`'s fields. The follower asks for
`piece_count(max_bytes)` pieces, at most `MAX_PIECES` (what the leader accepts), and joins them back.
"""

from __future__ import annotations

from collections.abc import Sequence

from actors.core.replication.follower import ReplicaFetch
from storage.arguments import is_int
from storage.errors import InvalidRequestError

# Ray's `max_direct_call_object_size` default (100 KiB) less 4 KiB for the serialization header and the fields.
PIECE_BYTES = 96 * 1024
# The most pieces a fetch is answered in: 96 MiB of records, above Kafka's `replica.fetch.max.bytes` range in use.
MAX_PIECES = 1024

ReplicaFetchPiece = ReplicaFetch | bytes


def piece_count(max_bytes: int) -> int:
    """How many pieces a fetch of up to `max_bytes` is answered in (at least 1, at most `MAX_PIECES`)."""
    return min(max(-(-max_bytes // PIECE_BYTES), 1), MAX_PIECES)


def checked_piece_count(pieces: object) -> int:
    """A follower's `pieces`, as Ray brings it untyped: an int from 1 to `MAX_PIECES`, else `InvalidRequestError`."""
    if not is_int(pieces) or not 1 <= pieces <= MAX_PIECES:
        raise InvalidRequestError(f"pieces must be an int from 1 to {MAX_PIECES}, not {pieces!r}")
    return pieces


def split(fetch: ReplicaFetch, pieces: int) -> tuple[ReplicaFetchPiece, ...]:
    """`fetch` as `pieces` values: the `ReplicaFetch` with the first piece of its records, then the other pieces."""
    records = fetch.records
    cuts = [index * PIECE_BYTES for index in range(pieces)] + [max(len(records), pieces * PIECE_BYTES)]
    first = ReplicaFetch(records[: cuts[1]], fetch.high_watermark, fetch.log_start_offset, fetch.log_end_offset)
    return (first, *(bytes(records[cuts[index] : cuts[index + 1]]) for index in range(1, pieces)))


def join(parts: Sequence[object]) -> ReplicaFetch:
    """The `ReplicaFetch` whose pieces `parts` are (`split`'s answer); `InvalidRequestError` for anything else."""
    first = parts[0] if parts else None
    rest = [part for part in parts[1:] if isinstance(part, bytes)]
    if not isinstance(first, ReplicaFetch) or len(rest) != len(parts) - 1:
        raise InvalidRequestError("a replica fetch answer is a ReplicaFetch followed by byte pieces")
    if not rest:
        return first
    records = b"".join([first.records, *rest])
    return ReplicaFetch(records, first.high_watermark, first.log_start_offset, first.log_end_offset)


__all__ = ["MAX_PIECES", "PIECE_BYTES", "ReplicaFetchPiece", "checked_piece_count", "join", "piece_count", "split"]
