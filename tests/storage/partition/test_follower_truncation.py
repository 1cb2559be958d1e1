"""Where a follower cuts its log before fetching (`follower_truncation.truncation_state`, Kafka's
`AbstractFetcherThread.getOffsetTruncationState`) and the high watermark of a replicated log (`Log.set_replicated`).

The oracles: a transcription of Kafka's rule (`kafka_truncation`), checked case by case and on random answers; and a
simulated partition of three real `Log`s whose leaders change (uncleanly too), whose followers run the
OffsetForLeaderEpoch protocol against the new leader after every change. Whatever the history, no record a follower
keeps may differ from the leader's at the same offset, and a follower that caught up is the leader's copy.
"""

from __future__ import annotations

import functools
import os
import random
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from storage.clock import MockClock
from storage.partition.follower_truncation import TruncationState, truncation_state
from storage.partition.leader_epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from storage.partition.log import Log
from tests.reliability.storage_checks import shm_path_fixture  # noqa: F401 - the `shm_path` fixture
from tests.storage.builders import Rec, batch_bytes, batches_in, log_rows, open_log

# (offset, key, value, partition leader epoch of the record's batch)


@pytest.fixture(autouse=True)
def no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """Durability is not under test here (as in test_log_manager): every epoch change is an fsynced checkpoint
    write, and the simulated histories make thousands of them."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


# --- oracles -----------------------------------------------------------------------------------------------


def kafka_end_offset_for(entries: Sequence[tuple[int, int]], requested: int, log_end_offset: int) -> tuple[int, int]:
    """Kafka's `LeaderEpochFileCache.endOffsetFor` over `(epoch, start offset)` entries, oldest first."""
    if requested == UNDEFINED_EPOCH or not entries:
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    if requested == entries[-1][0]:
        return requested, log_end_offset
    higher = [entry for entry in entries if entry[0] > requested]
    if not higher:
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    floor = [entry for entry in entries if entry[0] <= requested]
    return (floor[-1][0] if floor else requested), higher[0][1]


def kafka_truncation(
    leader_epoch: int,
    leader_end_offset: int,
    follower_end_offset_for: Callable[[int], tuple[int, int]],
    follower_log_end_offset: int,
    follower_high_watermark: int,
) -> tuple[int, bool]:
    """`AbstractFetcherThread.getOffsetTruncationState`, line by line. Kafka's first branch answers the partition's
    fetch offset, which for a follower that starts following is its high watermark (never above its log end)."""
    if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        return min(follower_high_watermark, follower_log_end_offset), True
    if leader_epoch == UNDEFINED_EPOCH:
        return min(leader_end_offset, follower_log_end_offset), True
    follower_epoch, follower_end_offset = follower_end_offset_for(leader_epoch)
    if follower_end_offset == UNDEFINED_EPOCH_OFFSET:  # Kafka's endOffsetForEpoch answers None
        return min(leader_end_offset, follower_log_end_offset), True
    if follower_epoch != leader_epoch:
        return min(follower_end_offset, follower_log_end_offset), False
    return min(min(follower_end_offset, leader_end_offset), follower_log_end_offset), True


def never_asked(epoch: int) -> tuple[int, int]:
    raise AssertionError(f"the follower's epochs must not be consulted (asked for epoch {epoch})")


def follower_with(*entries: tuple[int, int], log_end_offset: int) -> Callable[[int], tuple[int, int]]:
    return lambda epoch: kafka_end_offset_for(entries, epoch, log_end_offset)


# --- truncation_state, case by case ------------------------------------------------------------------------

# The follower of most cases: epochs 1 from 0, 3 from 10, 5 from 20; log end 30, high watermark 12.
FOLLOWER = ((1, 0), (3, 10), (5, 20))


@pytest.mark.parametrize(
    ("leader_epoch", "leader_end", "leo", "hw", "expected"),
    [
        # the leader knows no epoch at or below the one asked: back to the follower's high watermark
        (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, 30, 12, (12, True)),
        (4, UNDEFINED_EPOCH_OFFSET, 30, 12, (12, True)),
        (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, 0, 0, (0, True)),
        (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, 8, 8, (8, True)),
        # ... and never above its log end offset
        (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, 5, 9, (5, True)),
        # an end offset without an epoch (a log from before epochs): the earlier of it and the log end
        (UNDEFINED_EPOCH, 17, 30, 12, (17, True)),
        (UNDEFINED_EPOCH, 45, 30, 12, (30, True)),
        (UNDEFINED_EPOCH, 0, 30, 12, (0, True)),
        (UNDEFINED_EPOCH, 30, 30, 12, (30, True)),
    ],
)
def test_an_undefined_answer_needs_none_of_the_followers_epochs(
    leader_epoch: int, leader_end: int, leo: int, hw: int, expected: tuple[int, bool]
) -> None:
    assert kafka_truncation(leader_epoch, leader_end, never_asked, leo, hw) == expected
    assert truncation_state(leader_epoch, leader_end, never_asked, leo, hw) == TruncationState(*expected)


@pytest.mark.parametrize(
    ("entries", "leo", "leader_epoch", "leader_end", "expected"),
    [
        # both have the epoch: where the earlier of the two ends
        (FOLLOWER, 30, 3, 15, (15, True)),  # the leader's epoch 3 ended first
        (FOLLOWER, 30, 3, 25, (20, True)),  # the follower's epoch 3 ended first (its epoch 5 starts at 20)
        (FOLLOWER, 30, 3, 20, (20, True)),  # both at 20
        (FOLLOWER, 30, 5, 26, (26, True)),  # the follower's latest epoch ends at its log end
        (FOLLOWER, 30, 5, 40, (30, True)),  # never above the follower's log end
        (FOLLOWER, 30, 1, 0, (0, True)),  # the leader's epoch 1 ended at once: nothing is kept
        (FOLLOWER, 30, 1, 10, (10, True)),
        # the follower lacks the leader's epoch: cut to the end of its largest epoch below it and ask again
        (FOLLOWER, 30, 4, 22, (20, False)),  # follower has 3 (ends at 20), not 4
        (FOLLOWER, 30, 2, 8, (10, False)),  # follower has 1 (ends at 10), not 2; the leader's 8 is not used yet
        (((1, 0), (3, 10), (7, 20)), 30, 5, 26, (20, False)),  # follower has 3 (ends where its 7 starts)
        (((1, 0), (3, 10), (5, 20)), 15, 4, 30, (15, False)),  # a stale entry past the log end: cut at the log end
        # an epoch newer than all the follower's: its cache has no end for it (Kafka's None), the leader's end
        (FOLLOWER, 30, 6, 25, (25, True)),
        (FOLLOWER, 30, 6, 35, (30, True)),  # ... never above the log end
        # older than all the follower's: its cache answers (2, 10) (the requested epoch, ending where its first
        # epoch starts), the same epoch
        (((3, 10), (5, 20)), 30, 2, 8, (8, True)),
        (((3, 10), (5, 20)), 30, 2, 14, (10, True)),
        ((), 30, 2, 8, (8, True)),  # no epochs at all: the leader's end offset
        ((), 30, 2, 45, (30, True)),  # ... never above the log end
        ((), 0, 0, 7, (0, True)),
    ],
)
def test_a_defined_answer_follows_kafkas_rule(
    entries: tuple[tuple[int, int], ...], leo: int, leader_epoch: int, leader_end: int, expected: tuple[int, bool]
) -> None:
    follower = follower_with(*entries, log_end_offset=leo)
    assert kafka_truncation(leader_epoch, leader_end, follower, leo, 12) == expected
    assert truncation_state(leader_epoch, leader_end, follower, leo, 12) == TruncationState(*expected)


def test_a_follower_that_answers_no_end_offset_cuts_to_the_leaders_end() -> None:
    """Kafka's `case None`: the follower's cache has nothing for the epoch (`(-1, -1)` here)."""
    no_end = lambda epoch: (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)  # noqa: E731
    assert truncation_state(4, 9, no_end, 30, 3) == TruncationState(9, True)
    assert truncation_state(4, 31, no_end, 30, 3) == TruncationState(30, True)


def test_the_same_epoch_asked_again_completes() -> None:
    """After an intermediate cut the follower asks again with its now-latest epoch; the leader's answer for it is one
    the follower knows, so the second round completes."""
    follower_entries = [(1, 0), (3, 10)]
    leader_entries = [(1, 0), (2, 6), (4, 12)]
    leo = 18
    epoch, end = kafka_end_offset_for(leader_entries, follower_entries[-1][0], 40)
    assert (epoch, end) == (2, 12)
    first = truncation_state(epoch, end, follower_with(*follower_entries, log_end_offset=leo), leo, 0)
    assert first == TruncationState(10, False)
    follower_entries, leo = [(1, 0)], first.offset
    epoch, end = kafka_end_offset_for(leader_entries, follower_entries[-1][0], 40)
    assert (epoch, end) == (1, 6)
    second = truncation_state(epoch, end, follower_with(*follower_entries, log_end_offset=leo), leo, 0)
    assert second == TruncationState(6, True)


def test_random_answers_follow_kafkas_rule() -> None:
    rng = random.Random(20261123)
    for _ in range(5000):
        entries: list[tuple[int, int]] = []
        epoch, start = -1, 0
        for _ in range(rng.randrange(0, 5)):
            epoch += rng.randrange(1, 4)
            start += rng.randrange(0, 6)
            if not entries or start > entries[-1][1]:
                entries.append((epoch, start))
        leo = (entries[-1][1] if entries else 0) + rng.randrange(0, 6)
        if entries and rng.random() < 0.1:
            leo = max(0, entries[-1][1] - rng.randrange(0, 3))  # a stale entry at or past the log end
        hw = rng.randrange(0, leo + 3)
        leader_epoch = rng.choice([UNDEFINED_EPOCH, *range(0, epoch + 3)])
        leader_end = rng.choice([UNDEFINED_EPOCH_OFFSET, *range(0, leo + 8)])
        follower = follower_with(*entries, log_end_offset=leo)
        expected = kafka_truncation(leader_epoch, leader_end, follower, leo, hw)
        actual = truncation_state(leader_epoch, leader_end, follower, leo, hw)
        case = (entries, leo, hw, leader_epoch, leader_end)
        assert actual == TruncationState(*expected), case
        assert 0 <= actual.offset <= leo, case


# --- a partition of three logs, leaders changing -----------------------------------------------------------

REPLICAS = 3
FETCH_BYTES = 300


def copy_from(leader: Log, follower: Log, max_batches: int | None) -> int:
    """The follower fetches from its log end: at most `max_batches` of the leader's batches (None: all of them)
    are appended as they are. Returns how many batches were copied."""
    copied = 0
    while follower.log_end_offset < leader.log_end_offset and (max_batches is None or copied < max_batches):
        # At most FETCH_BYTES a fetch: one follower append must fit a segment (segment.bytes, Kafka's check too).
        fetch = leader.read(follower.log_end_offset, FETCH_BYTES, isolation="log_end")
        batches = batches_in(fetch.records)
        assert batches and batches[0].base_offset == follower.log_end_offset, (
            f"the follower's log end {follower.log_end_offset} is not a batch boundary of the leader's log"
        )
        if max_batches is not None:
            batches = batches[: max_batches - copied]
        follower.append_as_follower(b"".join(bytes(batch.raw()) for batch in batches))
        copied += len(batches)
    return copied


def truncate_against(leader: Log, follower: Log, stats: dict[str, int], max_rounds: int = 64) -> None:
    """The follower's OffsetForLeaderEpoch rounds against `leader`, each cut by `truncation_state`. Each round that
    does not complete removes the follower's newest epoch, so there are at most as many rounds as epochs."""
    for _ in range(max_rounds):
        entries = follower.epoch_entries()
        asked = entries[-1].epoch if entries else UNDEFINED_EPOCH
        own = functools.partial(
            kafka_end_offset_for, [tuple(entry) for entry in entries], log_end_offset=follower.log_end_offset
        )
        leader_epoch, leader_end = leader.end_offset_for_epoch(asked)
        state = truncation_state(
            leader_epoch,
            leader_end,
            follower.end_offset_for_epoch,
            follower.log_end_offset,
            follower.high_watermark,
        )
        expected = kafka_truncation(
            leader_epoch,
            leader_end,
            own,
            follower.log_end_offset,
            follower.high_watermark,
        )
        assert (state.offset, state.completed) == expected
        assert state.offset <= follower.log_end_offset
        stats["cut"] += state.offset < follower.log_end_offset
        follower.truncate_to(state.offset)
        if state.completed:
            return
        stats["intermediate"] += 1
    raise AssertionError(
        f"{follower.directory}: truncation against {leader.directory} did not complete in {max_rounds} rounds: "
        f"follower entries {follower.epoch_entries()}, log end {follower.log_end_offset}; "
        f"leader entries {leader.epoch_entries()}, log end {leader.log_end_offset}"
    )


def entries_below(log: Log, end: int) -> list[tuple[int, int]]:
    """The log's epoch entries that start below `end`: a leader's entry for an epoch it has written nothing in yet
    (a new leader's, at its log end) reaches no follower, in Kafka too (followers learn epochs from batches)."""
    return [tuple(entry) for entry in log.epoch_entries() if entry.start_offset < end]


def check_no_divergence(leader: Log, followers: list[Log], history: list[str]) -> None:
    leader_rows = log_rows(leader)
    for follower in followers:
        assert follower.log_end_offset <= leader.log_end_offset, history
        follower_rows = log_rows(follower)
        assert [row[0] for row in follower_rows] == list(range(follower.log_end_offset)), history
        assert follower_rows == leader_rows[: len(follower_rows)], history


def check_caught_up(leader: Log, followers: list[Log], history: list[str]) -> None:
    leader_rows = log_rows(leader)
    leader_entries = entries_below(leader, leader.log_end_offset)
    for follower in followers:
        assert follower.log_end_offset == leader.log_end_offset, history
        assert log_rows(follower) == leader_rows, history
        assert [tuple(entry) for entry in follower.epoch_entries()] == leader_entries, history


def run_history(
    rng: random.Random, base: Path, clock: MockClock, stats: dict[str, int], *, away: bool, leaders_write: bool
) -> None:
    """One random history. With `away`, a replica can be away when the leader changes: it runs the protocol against
    the leader of the day when it comes back (before it fetches), having missed the epochs in between, which is how
    a follower comes to lack the leader's epoch (the intermediate cuts). With `leaders_write`, a new leader appends a
    batch at once, so that no replica holds an epoch entry without a batch."""
    segment_bytes = rng.choice([400, 1 << 20])
    logs = [
        open_log(base / f"replica{i}" / "topic-0", clock, segment_bytes=segment_bytes, segment_index_bytes=4096)
        for i in range(REPLICAS)
    ]
    history: list[str] = []

    def name(log: Log) -> str:
        return f"replica {logs.index(log)}"

    def come_back(follower: Log) -> None:
        truncate_against(leader, follower, stats)
        synced.add(logs.index(follower))
        history.append(f"{name(follower)} truncated to {follower.log_end_offset}")

    try:
        epoch = 0
        leader = logs[0]
        leader.become_leader(epoch)
        synced = set(range(REPLICAS))  # the replicas that ran the protocol against the current leader
        tag = 0
        for _ in range(rng.randrange(4, 16)):
            followers = [log for log in logs if log is not leader]
            step = rng.random()
            if step < 0.4:
                for _ in range(rng.randrange(1, 4)):
                    tag += 1
                    count = rng.randrange(1, 4)
                    records = [Rec(f"k{tag}-{i}".encode(), f"e{epoch}-t{tag}-{i}".encode()) for i in range(count)]
                    leader.append(batch_bytes(records))
                history.append(f"leader {name(leader)} appends up to {leader.log_end_offset}")
            elif step < 0.7:
                for follower in rng.sample(followers, rng.randrange(1, len(followers) + 1)):
                    if logs.index(follower) not in synced:
                        if rng.random() < 0.5:
                            continue  # still away
                        come_back(follower)
                    copied = copy_from(leader, follower, rng.randrange(0, 4))
                    history.append(f"{name(follower)} copies {copied} batches")
            else:
                epoch += 1
                leader = rng.choice(logs)  # possibly behind, or away: an unclean election
                leader.become_leader(epoch)
                history.append(f"{name(leader)} leads epoch {epoch} from {leader.log_end_offset}")
                if leaders_write:
                    tag += 1
                    leader.append(batch_bytes([Rec(f"k{tag}".encode(), f"e{epoch}-t{tag}".encode())]))
                synced = {logs.index(leader)}
                followers = [log for log in logs if log is not leader]
                for follower in followers:
                    if not away or rng.random() < 0.7:
                        come_back(follower)
                        copy_from(leader, follower, rng.choice([0, 1, 2, None]))
                    else:
                        history.append(f"{name(follower)} is away")
            check_no_divergence(leader, [log for log in followers if logs.index(log) in synced], history)
        followers = [log for log in logs if log is not leader]
        for follower in followers:
            if logs.index(follower) not in synced:
                come_back(follower)
            copy_from(leader, follower, None)
        check_caught_up(leader, followers, history)
        stats["histories"] += 1
    finally:
        for log in logs:
            log.close()
        shutil.rmtree(base, ignore_errors=True)


HISTORIES = 300


@pytest.mark.slow
@pytest.mark.parametrize(
    ("away", "leaders_write"),
    [
        pytest.param(False, True, id="followers-follow-at-once-and-every-leader-writes"),
        pytest.param(True, True, id="followers-away-and-every-leader-writes"),
        # A leader that writes nothing leaves an epoch entry without a batch at its log end, which a cut there drops.
        pytest.param(False, False, id="followers-follow-at-once-and-empty-leaderships"),
        pytest.param(True, False, id="followers-away-and-empty-leaderships"),
    ],
)
def test_no_divergent_record_survives_a_leader_change(
    shm_path: Path, clock: MockClock, away: bool, leaders_write: bool
) -> None:
    rng = random.Random(101)
    stats = {"histories": 0, "cut": 0, "intermediate": 0}
    for n in range(HISTORIES):
        run_history(rng, shm_path / f"h{n}", clock, stats, away=away, leaders_write=leaders_write)
    assert stats["histories"] == HISTORIES
    # The histories reach the branches that matter: real cuts, and (with replicas away) followers that lack the
    # leader's epoch.
    assert stats["cut"] > 50, stats
    if away:
        assert stats["intermediate"] > 0, stats


def leading_epoch_0(directory: Path, clock: MockClock, batches: int) -> Log:
    """A log that led epoch 0 and wrote `batches` batches of two records (offsets 0 .. 2 * batches - 1)."""
    log = open_log(directory, clock)
    log.become_leader(0)
    for tag in range(batches):
        log.append(batch_bytes([Rec(f"k{tag}-{i}".encode(), b"v") for i in range(2)]))
    return log


def test_a_follower_cut_at_its_log_end_drops_the_epoch_entry_there(tmp_path: Path, clock: MockClock) -> None:
    """A and B hold offsets 0-9 of epoch 0. A leads epoch 1 and writes nothing (entry (1, 10)), then B leads epoch
    2. A asks for epoch 1: B answers (0, 10), A's own epoch 0 ends at 10 too, so the cut is at 10, A's log end.
    Kafka's `truncateTo(10)` changes no record but still runs `leaderEpochCache.truncateFromEnd(10)` ("a conflicting
    epoch entry at the end of the log from the leader ... failed to append any entries before another leader was
    elected"): A's checkpoint is then [(0, 0)], B's entries below the log end."""
    a = leading_epoch_0(tmp_path / "a" / "topic-0", clock, 5)
    b = open_log(tmp_path / "b" / "topic-0", clock)
    try:
        copy_from(a, b, None)
        a.become_leader(1)
        b.become_leader(2)
        assert b.end_offset_for_epoch(1) == (0, 10)
        state = truncation_state(0, 10, a.end_offset_for_epoch, a.log_end_offset, a.high_watermark)
        assert state == TruncationState(10, True)
        a.truncate_to(state.offset)
        assert log_rows(a) == log_rows(b)
        assert [tuple(entry) for entry in a.epoch_entries()] == [(0, 0)]
    finally:
        a.close()
        b.close()


def test_a_stale_epoch_entry_does_not_eat_the_entries_before_it(tmp_path: Path, clock: MockClock) -> None:
    """B copied offsets 0-3 of A's epoch 0, led epoch 1 from 4 writing nothing, then A (offsets 0-9) leads epoch 2.
    B asks for epoch 1: A answers (0, 10), B's epoch 0 ends at 4, the cut is at 4, B's log end. B then fetches A's
    epoch-0 batches from 4. In Kafka the cut dropped B's (1, 4), so B ends with A's entries below the log end,
    [(0, 0)]; had (1, 4) survived the cut, assigning (0, 4) for the first fetched batch would remove every entry
    with an epoch >= 0 first, leaving [(0, 4)], as if offsets 0-3 had no epoch."""
    a = leading_epoch_0(tmp_path / "a" / "topic-0", clock, 5)
    b = open_log(tmp_path / "b" / "topic-0", clock)
    try:
        copy_from(a, b, 2)
        assert b.log_end_offset == 4
        b.become_leader(1)
        a.become_leader(2)
        truncate_against(a, b, {"cut": 0, "intermediate": 0})
        assert b.log_end_offset == 4
        copy_from(a, b, None)
        assert log_rows(b) == log_rows(a)
        assert [tuple(entry) for entry in b.epoch_entries()] == [(0, 0)]
    finally:
        a.close()
        b.close()


def test_an_intermediate_cut_at_the_log_end_moves_on_to_the_older_epoch(tmp_path: Path, clock: MockClock) -> None:
    """A wrote 0-3 in epoch 0 (B copied them) and 4-5 in epoch 1 (B was away); B led epoch 2 from 4 and wrote
    nothing (A was away); A leads epoch 3. B asks for epoch 2: A answers (1, 6); B lacks epoch 1, its epoch 0 ends
    at 4, its log end: an intermediate cut at 4. In Kafka that cut drops B's entry (2, 4), B asks for epoch 0
    next, A answers (0, 4), and the second round completes at 4 (were (2, 4) kept, B would ask for epoch 2 forever)."""
    a = leading_epoch_0(tmp_path / "a" / "topic-0", clock, 2)
    b = open_log(tmp_path / "b" / "topic-0", clock)
    try:
        copy_from(a, b, None)
        a.become_leader(1)
        a.append(batch_bytes([Rec(b"e1", b"v"), Rec(b"e1", b"w")]))
        b.become_leader(2)
        a.become_leader(3)
        assert a.end_offset_for_epoch(2) == (1, 6)
        assert truncation_state(1, 6, b.end_offset_for_epoch, 4, 4) == TruncationState(4, False)
        stats = {"cut": 0, "intermediate": 0}
        truncate_against(a, b, stats, max_rounds=2)
        assert stats["intermediate"] == 1
        assert [tuple(entry) for entry in b.epoch_entries()] == [(0, 0)]
        copy_from(a, b, None)
        assert log_rows(b) == log_rows(a)
    finally:
        a.close()
        b.close()


# --- the high watermark of a replicated log ----------------------------------------------------------------


def records_at(log: Log, offset: int, isolation: str) -> list[tuple[int, int]]:
    """(batch base, record offset) of everything one large read from `offset` returns."""
    data = log.read(offset, 1 << 20, isolation=isolation).records
    return [(batch.base_offset, record.offset) for batch in batches_in(data) for record in batch.records()]


def test_a_replicated_log_keeps_its_high_watermark_until_it_is_moved(log_dir: Path, clock: MockClock) -> None:
    log = open_log(log_dir, clock)
    try:
        log.become_leader(0)
        log.append(batch_bytes([Rec(b"a", b"1"), Rec(b"b", b"2")]))
        assert (log.replicated, log.high_watermark) == (False, 2)
        log.set_replicated(True)
        assert (log.replicated, log.high_watermark) == (True, 2)  # switching on moves nothing
        for tag in range(4):
            log.append(batch_bytes([Rec(f"k{tag}".encode(), b"v"), Rec(f"l{tag}".encode(), b"w")]))
            assert log.high_watermark == 2
        assert log.log_end_offset == 10
        assert log.update_high_watermark(6) == 6
        assert log.high_watermark == 6
        follower_batch = bytearray(batch_bytes([Rec(b"f", b"x")], base_offset=10))
        log.append_as_follower(follower_batch)
        assert (log.log_end_offset, log.high_watermark) == (11, 6)
        assert log.update_high_watermark(50) == 11  # clamped to the log end
        assert log.update_high_watermark(-3) == 0  # and to the log start
        assert log.update_high_watermark(4) == 4
        log.truncate_to(3)  # a truncation below it pulls it down
        assert (log.log_end_offset, log.high_watermark) == (3, 3)
        log.append(batch_bytes([Rec(b"c", b"3")]))
        assert (log.log_end_offset, log.high_watermark) == (4, 3)
        log.set_replicated(False)
        assert (log.replicated, log.high_watermark) == (False, 4)  # the only replica again: up to the log end
        log.append(batch_bytes([Rec(b"d", b"4"), Rec(b"e", b"5")]))
        assert log.high_watermark == log.log_end_offset == 6
    finally:
        log.close()


def test_a_follower_append_leaves_the_high_watermark_while_replicated(log_dir: Path, clock: MockClock) -> None:
    log = open_log(log_dir, clock)
    try:
        log.set_replicated(True)
        offset = 0
        for tag in range(5):
            batch = bytearray(
                batch_bytes([Rec(f"k{tag}-{i}".encode(), b"v") for i in range(REPLICAS)], base_offset=offset)
            )
            log.append_as_follower(batch)
            offset += 3
            assert log.high_watermark == 0
        assert log.update_high_watermark(9) == 9
        log.set_replicated(False)
        assert log.high_watermark == 15
    finally:
        log.close()


def test_a_high_watermark_read_never_returns_records_at_or_past_it(log_dir: Path, clock: MockClock) -> None:
    rng = random.Random(7)
    log = open_log(log_dir, clock, segment_bytes=300)
    try:
        log.become_leader(0)
        log.set_replicated(True)
        batches: list[tuple[int, int]] = []  # (base, last) of every batch, the oracle
        for tag in range(25):
            count = rng.randrange(1, 4)
            info = log.append(batch_bytes([Rec(f"k{tag}-{i}".encode(), b"v" * 20) for i in range(count)]))
            batches.append((info.first_offset, info.last_offset))
        assert log.num_segments > 1
        assert log.high_watermark == 0
        leo = log.log_end_offset
        for hw in range(leo + 1):
            assert log.update_high_watermark(hw) == hw
            for offset in range(leo + 1):
                got = records_at(log, offset, "high_watermark")
                assert all(record < hw for _, record in got), (hw, offset, got)
                # Kafka's fetch up to the high watermark's position: the whole batches from the one holding
                # `offset` that end below it (a batch holding the high watermark waits), up to the segment end.
                first = next((i for i, (_, last) in enumerate(batches) if last >= offset), len(batches))
                whole = [batch for batch in batches[first:] if batch[1] < hw]
                got_batches = sorted({base for base, _ in got})
                assert got_batches == [base for base, _ in whole[: len(got_batches)]], (hw, offset, got)
                if whole:
                    assert got_batches, (hw, offset)  # something below the high watermark is readable
                log_end_read = records_at(log, offset, "log_end")
                assert got == log_end_read[: len(got)]
        log.set_replicated(False)
        assert records_at(log, 0, "high_watermark") == records_at(log, 0, "log_end")
    finally:
        log.close()
