"""Share sessions as Kafka 4.2's `SharePartitionManager.newContext` keeps them: epoch 0 opens (replacing), -1 closes,
any other must be the session's and moves it on; refusals change nothing; ShareAcknowledge never opens one; the
connection that opened a session ends it when it closes."""

from __future__ import annotations

import uuid

import pytest

from actors.core.shares.share_sessions import FINAL_EPOCH, ShareSessions, next_epoch
from storage.errors import InvalidRequestError, InvalidShareSessionEpochError, ShareSessionNotFoundError

T = uuid.UUID(int=1)


def test_a_session_opens_moves_on_and_closes() -> None:
    sessions = ShareSessions()
    opened = sessions.fetch_context("g", "m", 0, [(T, 0)])
    assert (opened.partitions, opened.full, opened.final) == (((T, 0),), True, False)
    assert sessions.epoch("g", "m") == 1
    added = sessions.fetch_context("g", "m", 1, [(T, 1)], [(T, 0)])
    assert (added.partitions, added.full) == (((T, 1),), False)
    assert sessions.acknowledge_context("g", "m", 2).partitions == ((T, 1),)
    assert sessions.epoch("g", "m") == 3
    final = sessions.fetch_context("g", "m", FINAL_EPOCH, [])
    assert (final.final, final.partitions) == (True, ((T, 1),))
    assert sessions.close("g", "m") == ((T, 1),)
    assert sessions.epoch("g", "m") is None


def test_wrong_epochs_are_refused_and_change_nothing() -> None:
    sessions = ShareSessions()
    with pytest.raises(ShareSessionNotFoundError):
        sessions.fetch_context("g", "m", 1, [(T, 0)])
    with pytest.raises(ShareSessionNotFoundError):
        sessions.fetch_context("g", "m", FINAL_EPOCH, [])
    with pytest.raises(InvalidRequestError):
        sessions.fetch_context("g", "m", 0, [(T, 0)], acknowledges=True)
    assert sessions.epoch("g", "m") is None
    sessions.fetch_context("g", "m", 0, [(T, 0)])
    with pytest.raises(InvalidShareSessionEpochError):
        sessions.fetch_context("g", "m", 2, [(T, 1)])
    with pytest.raises(InvalidShareSessionEpochError):
        sessions.acknowledge_context("g", "m", 0)
    with pytest.raises(InvalidShareSessionEpochError):
        sessions.acknowledge_context("g", "m", 7)
    assert sessions.epoch("g", "m") == 1
    assert sessions.fetch_context("g", "m", 1, []).partitions == ((T, 0),)
    with pytest.raises(ShareSessionNotFoundError):
        sessions.acknowledge_context("g", "other", FINAL_EPOCH)


def test_epoch_zero_replaces_a_session_and_epochs_wrap() -> None:
    sessions = ShareSessions()
    sessions.fetch_context("g", "m", 0, [(T, 0)])
    sessions.fetch_context("g", "m", 1, [])
    assert sessions.fetch_context("g", "m", 0, [(T, 3)]).partitions == ((T, 3),)
    assert sessions.epoch("g", "m") == 1
    assert [next_epoch(e) for e in (-1, 0, 1, 2**31 - 1)] == [0, 1, 2, 1]


def test_a_closed_connection_ends_the_sessions_it_opened_and_no_other() -> None:
    sessions = ShareSessions()
    sessions.fetch_context("g", "a", 0, [(T, 0), (T, 1)], connection=7)
    sessions.fetch_context("g", "b", 0, [(T, 0)], connection=8)
    sessions.fetch_context("h", "a", 0, [(T, 2)], connection=7)
    sessions.fetch_context("g", "c", 0, [(T, 0)], connection=7)
    sessions.fetch_context("g", "c", 0, [(T, 1)], connection=9)  # opened again over another connection
    closed = sessions.disconnected(7)
    assert [(c.group_id, c.member_id, c.partitions) for c in closed] == [
        ("g", "a", ((T, 0), (T, 1))),
        ("h", "a", ((T, 2),)),
    ]
    assert [sessions.epoch(*key) for key in (("g", "a"), ("h", "a"), ("g", "b"), ("g", "c"))] == [None, None, 1, 1]
    assert sessions.disconnected(7) == []
    with pytest.raises(ShareSessionNotFoundError):
        sessions.fetch_context("g", "a", 1, [])
