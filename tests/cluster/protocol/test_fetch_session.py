"""The fetch-session cache as a plain class, on a `MockClock`, against Kafka's `FetchSession.scala` rules: request
metadata, epochs, what an incremental answer leaves out, duplicate requests, topic ids resolved late, and eviction."""

from __future__ import annotations

import random
import uuid

import pytest

from cluster.protocol.fetch_session import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    MAX_EPOCH,
    MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS,
    FetchContext,
    FetchSessionCache,
    PartitionOutcome,
    PartitionRequest,
    SessionError,
    next_epoch,
)
from storage.clock import MockClock
from storage.kafka_uuid import ZERO_UUID

QUIET = PartitionOutcome(high_watermark=5, log_start_offset=0, records_bytes=0, error=False)
DATA = PartitionOutcome(high_watermark=5, log_start_offset=0, records_bytes=100, error=False)
EVICTION_MS = MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS


def part(partition: int, offset: int = 0, topic: str | None = "t", topic_id: uuid.UUID = ZERO_UUID) -> PartitionRequest:
    return PartitionRequest(topic_id, topic, partition, offset, 1 << 20)


def cache(slots: int = 10, clock: MockClock | None = None) -> FetchSessionCache:
    return FetchSessionCache(slots, clock or MockClock(), rng=random.Random(7))


def open_session(sessions: FetchSessionCache, *parts: PartitionRequest, version: int = 12) -> int:
    context = sessions.new_context(version, INVALID_SESSION_ID, 0, parts, (), {})
    return context.answer([QUIET] * len(parts)).session_id


def test_epochs_count_up_wrap_to_one_and_final_stays_final() -> None:
    assert [next_epoch(epoch) for epoch in (0, 1, MAX_EPOCH, FINAL_EPOCH)] == [1, 2, 1, FINAL_EPOCH]


def test_requests_before_v7_and_final_epoch_requests_get_no_session() -> None:
    sessions = cache()
    for version, epoch in ((6, 0), (12, FINAL_EPOCH)):
        context = sessions.new_context(version, INVALID_SESSION_ID, epoch, [part(0)], (), {})
        assert type(context) is FetchContext
        assert context.answer([QUIET]).session_id == INVALID_SESSION_ID
    assert len(sessions) == 0


def test_a_duplicate_incremental_request_answers_invalid_epoch() -> None:
    sessions = cache()
    session_id = open_session(sessions, part(0))
    first = sessions.new_context(12, session_id, 1, (), (), {})
    second = sessions.new_context(12, session_id, 2, (), (), {})
    # `second` was created while `first` was being served: `first` is answered as a duplicate.
    assert first.answer([DATA]).error == SessionError.INVALID_FETCH_SESSION_EPOCH
    assert second.answer([DATA]).error == SessionError.NONE
    # A request repeating an epoch already used is refused up front.
    again = sessions.new_context(12, session_id, 2, (), (), {})
    assert again.answer([]).error == SessionError.INVALID_FETCH_SESSION_EPOCH


def test_a_partition_that_had_records_moves_to_the_end_of_the_session() -> None:
    sessions = cache()
    session_id = open_session(sessions, part(0), part(1), part(2))
    context = sessions.new_context(12, session_id, 1, (), (), {})
    assert [p.partition for p in context.partitions] == [0, 1, 2]
    assert context.answer([DATA, QUIET, QUIET]).included == (0,)
    context = sessions.new_context(12, session_id, 2, (), (), {})
    assert [p.partition for p in context.partitions] == [1, 2, 0]


def test_a_throttled_answer_carries_nothing_and_leaves_the_session_as_it_was() -> None:
    """Kafka's `getThrottledResponse`: a full request a quota throttled opens no session; an incremental one keeps
    its session (id, partitions, order) and answers none, a duplicate among them still INVALID_FETCH_SESSION_EPOCH."""
    sessions = cache()
    full = sessions.new_context(12, INVALID_SESSION_ID, 0, [part(0)], (), {})
    assert full.throttled() == full.throttled()
    assert (full.throttled().session_id, full.throttled().included, len(sessions)) == (INVALID_SESSION_ID, (), 0)
    session_id = open_session(sessions, part(0), part(1))
    context = sessions.new_context(12, session_id, 1, (), (), {})
    answer = context.throttled()
    assert (answer.error, answer.session_id, answer.included) == (SessionError.NONE, session_id, ())
    context = sessions.new_context(12, session_id, 2, (), (), {})
    assert [p.partition for p in context.partitions] == [0, 1]
    assert context.answer([DATA, QUIET]).included == (0,)
    stale = sessions.new_context(12, session_id, 2, (), (), {})
    assert stale.throttled().error == SessionError.INVALID_FETCH_SESSION_EPOCH


def test_an_unknown_topic_id_stays_in_the_session_and_is_named_once_known() -> None:
    sessions = cache()
    later = uuid.UUID(int=2**100 + 1)
    session_id = open_session(sessions, part(0, topic=None, topic_id=later), version=13)
    context = sessions.new_context(13, session_id, 1, (), (), {})
    assert [p.topic for p in context.partitions] == [None]
    context.answer([PartitionOutcome(-1, -1, 0, True)])
    context = sessions.new_context(13, session_id, 2, (), (), {later: "late"})
    assert [(p.topic, p.topic_id) for p in context.partitions] == [("late", later)]


def test_forgetting_every_partition_closes_the_session() -> None:
    sessions = cache()
    session_id = open_session(sessions, part(0), part(1))
    context = sessions.new_context(12, session_id, 1, [part(2)], [("t", 0), ("t", 1), ("t", 2)], {})
    assert type(context) is FetchContext and [p.partition for p in context.partitions] == [2]
    assert len(sessions) == 0


def test_a_full_cache_keeps_recent_sessions_and_opens_none() -> None:
    clock = MockClock()
    sessions = cache(2, clock)
    kept = {open_session(sessions, part(0)), open_session(sessions, part(0), part(1))}
    clock.sleep(EVICTION_MS)  # not yet more than the eviction time
    assert open_session(sessions, part(0), part(1), part(2)) == INVALID_SESSION_ID
    assert {session_id for session_id in kept if sessions.get(session_id)} == kept


def test_a_session_unused_for_the_eviction_time_gives_way_to_any_new_one() -> None:
    clock = MockClock()
    sessions = cache(2, clock)
    idle = open_session(sessions, part(0), part(1))
    used = open_session(sessions, part(0), part(1))
    clock.sleep(EVICTION_MS)
    sessions.new_context(12, used, 1, (), (), {})
    clock.sleep(1)
    new = open_session(sessions, part(0))
    assert new != INVALID_SESSION_ID and sessions.get(idle) is None and sessions.get(used) is not None
    assert sessions.evictions == 1


def test_an_old_session_in_use_gives_way_only_to_a_bigger_one() -> None:
    clock = MockClock()
    sessions = cache(1, clock)
    old = open_session(sessions, part(0), part(1))
    clock.sleep(EVICTION_MS + 1)
    sessions.new_context(12, old, 1, (), (), {})  # used just now: not stale, but old enough to be evicted
    assert open_session(sessions, part(0), part(1)) == INVALID_SESSION_ID
    bigger = open_session(sessions, part(0), part(1), part(2))
    assert bigger != INVALID_SESSION_ID and sessions.get(old) is None


@pytest.mark.parametrize("follower_first", [True, False])
def test_a_followers_session_evicts_a_recent_consumer_session_but_not_the_other_way(follower_first: bool) -> None:
    clock = MockClock()
    sessions = cache(1, clock)
    first = sessions.new_context(12, 0, 0, [part(0)], (), {}, privileged=follower_first).answer([QUIET]).session_id
    context = sessions.new_context(12, 0, 0, [part(0)], (), {}, privileged=not follower_first)
    second = context.answer([QUIET]).session_id
    if follower_first:
        assert second == INVALID_SESSION_ID and sessions.get(first) is not None
    else:
        assert second != INVALID_SESSION_ID and sessions.get(first) is None


def test_session_ids_are_positive_and_distinct() -> None:
    sessions = cache(500)
    ids = {open_session(sessions, part(0)) for _ in range(500)}
    assert len(ids) == 500 and min(ids) > 0
    assert sessions.total_partitions == 500
