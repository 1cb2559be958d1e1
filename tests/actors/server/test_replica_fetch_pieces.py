"""A follower's fetch answer cut into pieces Ray returns inline (`actors.server.replica_fetch_pieces`): every piece
but an oversized last one stays at or under `PIECE_BYTES`, and joining the pieces gives back the same answer, for
records of every size around the piece boundaries; bad piece counts and bad answers raise `InvalidRequestError`."""

from __future__ import annotations

import os
import pickle

import pytest

from actors.core.replication.follower import ReplicaFetch
from actors.server.replica_fetch_pieces import (
    MAX_PIECES,
    PIECE_BYTES,
    checked_piece_count,
    join,
    piece_count,
    split,
)
from storage.errors import InvalidRequestError

# Ray's `max_direct_call_object_size` default: a value serialized larger than this goes to the object store.
RAY_INLINE_LIMIT_BYTES = 100 * 1024


@pytest.mark.parametrize(
    ("max_bytes", "expected"),
    [(0, 1), (1, 1), (PIECE_BYTES, 1), (PIECE_BYTES + 1, 2), (1_048_576, 11), (10**12, MAX_PIECES)],
)
def test_piece_count_covers_max_bytes_within_bounds(max_bytes: int, expected: int) -> None:
    assert piece_count(max_bytes) == expected


@pytest.mark.parametrize(
    "size", [0, 1, PIECE_BYTES - 1, PIECE_BYTES, PIECE_BYTES + 1, 1_000_000, 1_048_576, 11 * PIECE_BYTES + 7]
)
def test_split_then_join_gives_the_same_answer(size: int) -> None:
    fetch = ReplicaFetch(os.urandom(size), 17, 3, 42)
    pieces = piece_count(1_048_576)
    parts = split(fetch, pieces)
    assert len(parts) == pieces
    assert join(parts) == fetch
    assert join(list(parts)) == fetch
    # Every piece Ray must inline stays under its limit once pickled; only records above max_bytes overflow the last.
    within = parts if size <= pieces * PIECE_BYTES else parts[:-1]
    assert all(len(pickle.dumps(part, protocol=5)) <= RAY_INLINE_LIMIT_BYTES for part in within)


def test_one_piece_is_the_whole_answer() -> None:
    fetch = ReplicaFetch(os.urandom(3 * PIECE_BYTES), 1, 0, 5)
    assert split(fetch, 1) == (fetch,)


@pytest.mark.parametrize("pieces", [0, -1, MAX_PIECES + 1, "3", 2.0, True, None])
def test_a_bad_piece_count_is_refused(pieces: object) -> None:
    with pytest.raises(InvalidRequestError):
        checked_piece_count(pieces)


@pytest.mark.parametrize(
    "parts", [[], [b"x"], (ReplicaFetch(b"", 0, 0, 0), "text"), [ReplicaFetch(b"", 0, 0, 0), None], [1, b""]]
)
def test_a_bad_answer_is_refused(parts: list[object]) -> None:
    with pytest.raises(InvalidRequestError):
        join(parts)
