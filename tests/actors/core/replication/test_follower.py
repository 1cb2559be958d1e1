"""`ReplicaFetcher`, a follower's fetch loop, without Ray: a follower `Log` follows a leader `Log` through
`LogLeader`, an in-test `LeaderLink` that answers as the leader's partition actor does (`epoch_end_offset`, `replicate`,
`offsets`) and can be made to fail.

The oracle is the leader's log: once the follower caught up, it holds the same records at the same offsets, in
batches stamped with the same leader epochs, under the same epoch entries and log start offset; before that, what
it holds is a prefix of the leader's. Most tests drive the fetcher by hand (`truncate_to_leader`, `fetch_once`);
the loop's own paths (an offset below the leader's log start, failed calls) run its thread with a deadline.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.core.replication.follower import ReplicaFetch, ReplicaFetcher, ReplicaSettings, SharedFetchMember
from storage.clock import MockClock
from storage.config.broker_config import BrokerConfig
from storage.errors import BrokerNotAvailableError, OffsetOutOfRangeError
from storage.partition.log import Log
from tests.storage.builders import START_MS, Rec, batch_bytes, log_rows, open_log, segment_bases

# (offset, key, value, partition leader epoch of the record's batch)

NAME = "topic-0"
# About three of `write`'s batches (157 bytes for two records): the tests' logs span several segments.
SEGMENT_BYTES = 600
# Below any batch's size: Kafka's rule that a fetch returns at least one whole batch makes each fetch exactly one.
ONE_BATCH_BYTES = 1
# Two and a half batches: a limit that falls inside a batch, where the leader's read (as Kafka's) ends with a
# partial batch. At most SEGMENT_BYTES: one follower append goes to one segment.
PARTIAL_BATCH_BYTES = 400
# The thread tests wait at most this long for a follower that should catch up in milliseconds.
DEADLINE_S = 5.0


@pytest.fixture(autouse=True)
def no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """Durability is not under test (as in test_follower_truncation): every epoch change and truncation writes
    an fsynced checkpoint."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


@pytest.fixture
def clock() -> MockClock:
    return MockClock(START_MS)


@pytest.fixture
def replica(tmp_path: Path, clock: MockClock) -> Iterator[Callable[..., Log]]:
    """`replica(name, **log_config)` opens the partition's log of broker `name`; closed at teardown."""
    opened: list[Log] = []

    def open_replica(name: str, **overrides: Any) -> Log:
        log = open_log(tmp_path / name / NAME, clock, **{"segment_bytes": SEGMENT_BYTES, **overrides})
        opened.append(log)
        return log

    yield open_replica
    for log in opened:
        if not log.closed:
            log.close()


@pytest.fixture
def thread_errors(monkeypatch: pytest.MonkeyPatch) -> list[BaseException]:
    """Exceptions that ended a thread during the test (a fetcher thread must never die of one)."""
    errors: list[BaseException] = []

    def hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None:
            errors.append(args.exc_value)

    monkeypatch.setattr(threading, "excepthook", hook)
    return errors


# --- the leader side ----------------------------------------------------------------------------------------


class LogLeader:
    """A `LeaderLink` over the leader's `Log`, answering as `PartitionLog` does: `replicate` refuses an offset
    outside log start..log end (`OffsetOutOfRangeError`), waits up to `max_wait_ms` when there is nothing past
    `offset`, and reads whole batches up to the log end.

    `isr_high_watermark`: the leader records the fetch offset as the follower's log end offset and, with this one
    follower in the ISR, moves its high watermark to it (the leader log must be `set_replicated(True)`).
    `fail(count, *methods)` makes the next `count` calls of those methods raise `BrokerNotAvailableError` (a
    leader restarting); `rewrite` changes `replicate`'s answers."""

    def __init__(self, log: Log, *, isr_high_watermark: bool = False) -> None:
        self.log = log
        self.isr_high_watermark = isr_high_watermark
        self.rewrite: Callable[[ReplicaFetch], ReplicaFetch] | None = None
        self.calls: list[str] = []
        self.failed: list[str] = []
        self.closed = False
        self._failures: dict[str, int] = {}
        self._lock = threading.Lock()

    def fail(self, count: int, *methods: str) -> None:
        with self._lock:
            for method in methods or ("epoch_end_offset", "replicate", "log_start_offset"):
                self._failures[method] = count

    def _call(self, method: str) -> None:
        with self._lock:
            self.calls.append(method)
            if self._failures.get(method, 0) > 0:
                self._failures[method] -= 1
                self.failed.append(method)
                raise BrokerNotAvailableError(f"the leader's {method} failed on purpose")

    def epoch_end_offset(self, epoch: int) -> tuple[int, int]:
        self._call("epoch_end_offset")
        return self.log.end_offset_for_epoch(epoch)

    def replicate(self, offset: int, max_bytes: int, max_wait_ms: int) -> ReplicaFetch:
        self._call("replicate")
        log = self.log
        if not log.log_start_offset <= offset <= log.log_end_offset:
            raise OffsetOutOfRangeError(
                f"fetch offset {offset} is outside {log.log_start_offset}..{log.log_end_offset}", offset=offset
            )
        if self.isr_high_watermark and offset > log.high_watermark:
            log.update_high_watermark(offset)
        deadline = time.monotonic() + max_wait_ms / 1000
        while log.log_end_offset <= offset and time.monotonic() < deadline:
            time.sleep(0.001)
        records = log.read(offset, max_bytes, isolation="log_end").records
        answer = ReplicaFetch(bytes(records), log.high_watermark, log.log_start_offset, log.log_end_offset)
        return answer if self.rewrite is None else self.rewrite(answer)

    def log_start_offset(self) -> int:
        self._call("log_start_offset")
        return self.log.log_start_offset

    def share(self, member: SharedFetchMember) -> bool:
        """No shared fetch: the follower fetches alone, through `replicate`."""
        return False

    def close(self) -> None:
        self.closed = True


# --- helpers ------------------------------------------------------------------------------------------------


def settings(**overrides: int) -> ReplicaSettings:
    """Small fetches, no long poll and a short backoff: the tests' fetches answer at once."""
    values = {"fetch_max_bytes": ONE_BATCH_BYTES, "fetch_wait_max_ms": 0, "fetch_backoff_ms": 5, **overrides}
    return ReplicaSettings(**values)


class Changes:
    """The `on_change` callback: counts the calls."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def write(log: Log, epoch: int, batches: int, *, tag: str, size: int = 2) -> None:
    """`log` leads `epoch` (if it does not already) and appends `batches` batches of `size` records whose values
    name the writer (`tag`) and the epoch, so a divergent record cannot pass for the leader's."""
    if log.leader_epoch != epoch or not log.epoch_entries():
        log.become_leader(epoch)
    for n in range(batches):
        records = [
            Rec(f"k{log.log_end_offset + i}".encode(), f"{tag}-e{epoch}-b{n}-r{i}".encode() * 4) for i in range(size)
        ]
        log.append(batch_bytes(records))


def entries(log: Log) -> list[tuple[int, int]]:
    return [(entry.epoch, entry.start_offset) for entry in log.epoch_entries()]


def assert_prefix_of_leader(follower: Log, leader: Log) -> None:
    """Whatever the follower holds is the leader's, record for record (from the follower's log start on)."""
    held = log_rows(follower)
    assert [row[0] for row in held] == list(range(follower.log_start_offset, follower.log_end_offset))
    assert held == [row for row in log_rows(leader) if follower.log_start_offset <= row[0] < follower.log_end_offset]


def assert_identical(follower: Log, leader: Log) -> None:
    """The follower caught up: the leader's records, epochs, log start and high watermark."""
    assert follower.log_end_offset == leader.log_end_offset
    assert follower.log_start_offset == leader.log_start_offset
    assert log_rows(follower) == log_rows(leader)
    assert entries(follower) == entries(leader)
    assert follower.high_watermark == leader.high_watermark


def fetch_until_caught_up(fetcher: ReplicaFetcher, follower: Log, leader: Log, max_fetches: int = 100) -> int:
    """`fetch_once` until the follower's log end is the leader's, then once more (the fetch from the log end is
    the one that brings the leader's high watermark there); returns the number of fetches."""
    for fetches in range(1, max_fetches + 1):
        fetcher.fetch_once()
        assert_prefix_of_leader(follower, leader)
        if follower.log_end_offset == leader.log_end_offset:
            fetcher.fetch_once()
            return fetches + 1
    raise AssertionError(
        f"not caught up after {max_fetches} fetches: {follower.log_end_offset}/{leader.log_end_offset}"
    )


def follower_of(log: Log) -> Log:
    """A replica that follows: its leader's answers move its high watermark, not its appends (`_follow` does this)."""
    log.set_replicated(True)
    return log


def fetcher_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == f"replica-fetcher-{NAME}"]


def run_until(fetcher: ReplicaFetcher, done: Callable[[], bool], deadline_s: float) -> bool:
    """Runs the fetcher's thread until `done()` or the deadline; stops it and waits for the thread to end either
    way. True if `done()` held."""
    fetcher.start()
    deadline = time.monotonic() + deadline_s
    reached = done()
    while not reached and time.monotonic() < deadline and fetcher_threads():
        time.sleep(0.005)
        reached = done()
    fetcher.stop()
    fetcher.join(DEADLINE_S)
    assert not fetcher_threads(), "stop() did not end the fetcher's thread"
    return reached


def caught_up(follower: Log, leader: Log) -> Callable[[], bool]:
    return lambda: (
        follower.log_end_offset == leader.log_end_offset
        and follower.high_watermark == leader.high_watermark
        and follower.log_start_offset == leader.log_start_offset
    )


# --- settings -----------------------------------------------------------------------------------------------


def test_settings_default_to_kafkas_and_follow_the_broker_config() -> None:
    assert ReplicaSettings() == ReplicaSettings(30_000, 1_048_576, 500, 1_000, 10_485_760)
    assert ReplicaSettings.from_broker_config(BrokerConfig()) == ReplicaSettings()
    config = BrokerConfig(
        replica_lag_time_max_ms=7,
        replica_fetch_max_bytes=8,
        replica_fetch_wait_max_ms=9,
        replica_fetch_backoff_ms=10,
        replica_fetch_response_max_bytes=11,
    )
    assert ReplicaSettings.from_broker_config(config) == ReplicaSettings(7, 8, 9, 10, 11)


# --- 1. an empty follower copies the whole log ----------------------------------------------------------------


@pytest.mark.parametrize("isr_high_watermark", [False, True], ids=["leader-alone-in-isr", "follower-in-isr"])
@pytest.mark.parametrize(
    "fetch_max_bytes",
    [
        pytest.param(ONE_BATCH_BYTES, id="one-batch-a-fetch"),
        pytest.param(ReplicaSettings().fetch_max_bytes, id="one-segment-a-fetch"),
        pytest.param(PARTIAL_BATCH_BYTES, id="limit-inside-a-batch"),
    ],
)
def test_an_empty_follower_copies_the_leaders_whole_log(
    replica: Callable[..., Log], isr_high_watermark: bool, fetch_max_bytes: int
) -> None:
    leader = replica("leader")
    leader.set_replicated(isr_high_watermark)  # alone in the ISR its high watermark is its log end
    write(leader, 0, 5, tag="L")
    write(leader, 2, 1, tag="L", size=3)
    write(leader, 5, 6, tag="L")
    follower = follower_of(replica("follower"))
    link = LogLeader(leader, isr_high_watermark=isr_high_watermark)
    changes = Changes()
    fetcher = ReplicaFetcher(NAME, follower, link, settings(fetch_max_bytes=fetch_max_bytes), changes)

    fetcher.truncate_to_leader()
    assert link.calls == []  # an empty log has nothing to cut and asks nothing
    assert (follower.log_end_offset, follower.high_watermark) == (0, 0)

    fetches = 0
    high_watermarks = [follower.high_watermark]
    while follower.log_end_offset < leader.log_end_offset:
        fetched_from = follower.log_end_offset
        fetcher.fetch_once()
        fetches += 1
        assert follower.log_end_offset > fetched_from
        assert_prefix_of_leader(follower, leader)
        assert follower.high_watermark <= follower.log_end_offset
        # The leader's high watermark, as far as the follower has the records below it.
        assert follower.high_watermark == min(leader.high_watermark, follower.log_end_offset)
        if isr_high_watermark:
            assert leader.high_watermark == fetched_from  # the leader learnt the follower's offset by its fetch
        high_watermarks.append(follower.high_watermark)
    assert fetches > 3, "a fetch is at most a segment: several fetches"
    assert changes.count == fetches
    fetcher.fetch_once()  # from the log end: the leader moves its high watermark there and says so
    high_watermarks.append(follower.high_watermark)
    assert high_watermarks == sorted(high_watermarks)
    assert follower.num_segments > 1
    assert entries(leader) == [(0, 0), (2, 10), (5, 13)]
    assert_identical(follower, leader)
    assert follower.high_watermark == leader.log_end_offset == 25


def test_a_follower_at_the_leaders_log_end_keeps_up_with_new_records(replica: Callable[..., Log]) -> None:
    leader = replica("leader")
    write(leader, 3, 2, tag="L")
    leader.set_replicated(True)
    follower = follower_of(replica("follower"))
    link = LogLeader(leader, isr_high_watermark=True)
    fetcher = ReplicaFetcher(NAME, follower, link, settings(), Changes())
    fetch_until_caught_up(fetcher, follower, leader)
    for epoch in (3, 4, 4, 7):
        write(leader, epoch, 1, tag="L", size=3)
        assert follower.high_watermark < leader.log_end_offset
        fetch_until_caught_up(fetcher, follower, leader)
        assert_identical(follower, leader)
    fetcher.fetch_once()  # nothing new: an empty answer changes nothing
    assert_identical(follower, leader)


# --- 2. a divergent tail goes ---------------------------------------------------------------------------------


def copy_all(source: Log, target: Log) -> None:
    """`target` follows `source` to its log end with a fetcher of its own, then stops following (it is alone in
    its ISR again: its high watermark is its log end)."""
    fetcher = ReplicaFetcher(NAME, follower_of(target), LogLeader(source), settings(), Changes())
    fetcher.truncate_to_leader()
    fetch_until_caught_up(fetcher, target, source)
    target.set_replicated(False)


def led_an_older_epoch(leader: Log, follower: Log) -> int:
    """F led epoch 0 and wrote 0-3, which L copied, then 4-7, which L never got; L leads epoch 1 from 4 and
    writes 4-9. F's epoch 0 ends at 8, L's at 4: the cut is at 4."""
    write(follower, 0, 2, tag="F")
    copy_all(follower, leader)
    write(follower, 0, 2, tag="F-divergent")
    write(leader, 1, 3, tag="L")
    return 4


def missed_an_epoch(leader: Log, follower: Log) -> int:
    """L wrote 0-3 in epoch 0 (F copied them) and 4-5 in epoch 1 while F was away; F led epoch 2 from 4 and wrote
    4-7, which L never got; L leads epoch 3 and writes 6-9. F asks for epoch 2, L answers (1, 6), F lacks epoch 1:
    an intermediate cut at F's epoch 0's end, 4; then F asks for epoch 0, L answers (0, 4): done at 4."""
    write(leader, 0, 2, tag="L")
    copy_all(leader, follower)
    write(leader, 1, 1, tag="L")
    write(follower, 2, 2, tag="F-divergent")
    write(leader, 3, 2, tag="L")
    return 4


def led_an_epoch_writing_nothing(leader: Log, follower: Log) -> int:
    """F copied L's 0-5 of epoch 0, then led epoch 1 from 6 and wrote nothing; L (with 0-5 too) leads epoch 2 and
    writes 6-9. No record diverges, but F's entry (1, 6) must go, or F's epochs would not be L's."""
    write(leader, 0, 3, tag="L")
    copy_all(leader, follower)
    follower.become_leader(1)
    write(leader, 2, 2, tag="L")
    return 6


@pytest.mark.parametrize("history", [led_an_older_epoch, missed_an_epoch, led_an_epoch_writing_nothing])
def test_a_divergent_tail_is_cut_and_the_follower_becomes_the_leaders_copy(
    replica: Callable[..., Log], history: Callable[[Log, Log], int]
) -> None:
    leader = replica("leader")
    follower = replica("follower")
    cut = history(leader, follower)
    leader_rows = log_rows(leader)
    divergent = [row for row in log_rows(follower) if row not in leader_rows]

    follower_of(follower)
    link = LogLeader(leader)
    changes = Changes()
    fetcher = ReplicaFetcher(NAME, follower, link, settings(), changes)
    fetcher.truncate_to_leader()
    assert follower.log_end_offset == cut
    assert log_rows(follower) == leader_rows[:cut]
    assert not set(divergent) & set(log_rows(follower))
    assert entries(follower) == [entry for entry in entries(leader) if entry[1] < cut]
    assert follower.high_watermark <= cut
    assert changes.count == (1 if divergent else 0)  # a cut that removes records is a change
    assert "replicate" not in link.calls

    fetch_until_caught_up(fetcher, follower, leader)
    assert_identical(follower, leader)
    fetcher.truncate_to_leader()  # asking again once caught up cuts nothing
    assert_identical(follower, leader)


def test_a_follower_ahead_of_the_leader_in_the_same_epoch_is_cut_to_the_leaders_end(
    replica: Callable[..., Log],
) -> None:
    """F led epoch 0 and wrote 0-9; L copied 0-5 only and now leads epoch 1, having written nothing yet: L's
    epoch 0 ends at 6, F's at 10, the cut is at 6. Until then a fetch from F's log end is out of L's range."""
    leader = replica("leader")
    follower = replica("follower")
    write(follower, 0, 3, tag="F")
    copy_all(follower, leader)
    write(follower, 0, 2, tag="F")
    leader.become_leader(1)
    follower_of(follower)
    fetcher = ReplicaFetcher(NAME, follower, LogLeader(leader), settings(), Changes())
    with pytest.raises(OffsetOutOfRangeError):
        fetcher.fetch_once()
    fetcher.truncate_to_leader()
    assert follower.log_end_offset == 6
    write(leader, 1, 2, tag="L")
    fetch_until_caught_up(fetcher, follower, leader)
    assert_identical(follower, leader)


# --- 3. the leader deleted records ----------------------------------------------------------------------------


def test_records_the_leader_deleted_below_the_followers_end_move_its_log_start(replica: Callable[..., Log]) -> None:
    leader = replica("leader")
    write(leader, 0, 5, tag="L")
    follower = replica("follower")
    copy_all(leader, follower)
    write(leader, 1, 5, tag="L")
    assert leader.delete_records(8) == 8  # DeleteRecords below the follower's log end (10)
    fetcher = ReplicaFetcher(NAME, follower_of(follower), LogLeader(leader), settings(), Changes())
    fetcher.truncate_to_leader()
    assert follower.log_end_offset == 10
    fetch_until_caught_up(fetcher, follower, leader)
    assert_identical(follower, leader)
    assert follower.log_start_offset == 8
    assert entries(follower) == [(0, 8), (1, 10)]


def follower_below_leader_start(replica: Callable[..., Log], leader_start: int) -> tuple[Log, Log]:
    """F copied L's 0-3 (epoch 0); L then wrote up to 20 (epoch 0 to 10, epoch 1 on) and DeleteRecords moved its
    log start to `leader_start`, past F's log end; retention removed the segments below it."""
    leader = replica("leader")
    write(leader, 0, 2, tag="L")
    follower = replica("follower")
    copy_all(leader, follower)
    write(leader, 0, 3, tag="L")
    write(leader, 1, 5, tag="L")
    assert leader.delete_records(leader_start) == leader_start
    leader.delete_old_segments()
    assert leader.log_end_offset == 20
    return leader, follower_of(follower)


def test_a_follower_below_the_leaders_log_start_restarts_empty_there(
    replica: Callable[..., Log], thread_errors: list[BaseException]
) -> None:
    leader, follower = follower_below_leader_start(replica, 16)
    changes = Changes()
    fetcher = ReplicaFetcher(NAME, follower, LogLeader(leader), settings(), changes)
    with pytest.raises(OffsetOutOfRangeError):  # by hand, the fetch says so and changes nothing
        fetcher.fetch_once()
    assert (follower.log_start_offset, follower.log_end_offset) == (0, 4)

    assert run_until(fetcher, caught_up(follower, leader), DEADLINE_S), (follower, thread_errors)
    assert not thread_errors
    assert_identical(follower, leader)
    assert entries(follower) == [(1, 16)]
    assert segment_bases(follower.directory)[0] == 16  # nothing of the old log is left below the new start
    assert changes.count > 0


def test_a_follower_below_a_leader_start_inside_a_batch_catches_up(
    replica: Callable[..., Log], thread_errors: list[BaseException]
) -> None:
    leader, follower = follower_below_leader_start(replica, 15)
    fetcher = ReplicaFetcher(NAME, follower, LogLeader(leader), settings(), Changes())
    assert run_until(fetcher, caught_up(follower, leader), DEADLINE_S), (
        f"follower at {follower.log_start_offset}..{follower.log_end_offset}, leader at "
        f"{leader.log_start_offset}..{leader.log_end_offset}"
    )
    assert not thread_errors
    assert_identical(follower, leader)


def test_a_failed_log_start_lookup_after_an_out_of_range_fetch_is_retried(
    replica: Callable[..., Log], thread_errors: list[BaseException]
) -> None:
    leader, follower = follower_below_leader_start(replica, 16)
    link = LogLeader(leader)
    link.fail(1, "log_start_offset")
    fetcher = ReplicaFetcher(NAME, follower, link, settings(), Changes())
    reached = run_until(fetcher, caught_up(follower, leader), DEADLINE_S)
    assert link.failed == ["log_start_offset"]
    assert not thread_errors, f"the fetcher's thread died of {thread_errors!r}"
    assert reached
    assert_identical(follower, leader)


# --- 4. the follower's log start follows the leader's ---------------------------------------------------------


def test_the_followers_log_start_follows_the_leaders(replica: Callable[..., Log]) -> None:
    leader = replica("leader")
    write(leader, 0, 4, tag="L")
    write(leader, 1, 4, tag="L")
    follower = replica("follower")
    copy_all(leader, follower)
    fetcher = ReplicaFetcher(NAME, follower_of(follower), LogLeader(leader), settings(), Changes())
    for start in (3, 8, 9, 14, 16):
        leader.delete_records(start)
        fetcher.fetch_once()
        assert follower.log_start_offset == leader.log_start_offset == start
        assert follower.log_start_offset <= follower.high_watermark
        assert entries(follower) == entries(leader)
        assert_prefix_of_leader(follower, leader)
    assert_identical(follower, leader)


def test_the_followers_log_start_never_passes_its_high_watermark(replica: Callable[..., Log]) -> None:
    """The leader's answer is read field by field: its high watermark, then its log start offset. Between the two
    reads the high watermark can move and DeleteRecords follow it, so an answer can carry a log start above its
    high watermark; the follower moves its log start no further than its own high watermark."""
    leader = replica("leader")
    write(leader, 0, 5, tag="L")
    leader.set_replicated(True)
    leader.update_high_watermark(4)
    follower = replica("follower")
    link = LogLeader(leader)
    fetcher = ReplicaFetcher(NAME, follower_of(follower), link, settings(), Changes())
    fetch_until_caught_up(fetcher, follower, leader)
    assert (follower.log_end_offset, follower.high_watermark) == (10, 4)

    leader.update_high_watermark(10)
    leader.delete_records(8)
    link.rewrite = lambda answer: dataclasses.replace(answer, high_watermark=4)  # read before it moved
    fetcher.fetch_once()
    assert (follower.high_watermark, follower.log_start_offset) == (4, 4)

    link.rewrite = None
    fetcher.fetch_once()
    assert (follower.high_watermark, follower.log_start_offset) == (10, 8)
    assert_identical(follower, leader)


# --- 5. the loop: failures, retries, stop ---------------------------------------------------------------------


def test_the_loop_retries_failed_calls_and_converges(
    replica: Callable[..., Log], thread_errors: list[BaseException]
) -> None:
    leader = replica("leader")
    follower = replica("follower")
    led_an_older_epoch(leader, follower)
    follower_of(follower)
    link = LogLeader(leader)
    link.fail(3, "epoch_end_offset", "replicate")
    fetcher = ReplicaFetcher(NAME, follower, link, settings(fetch_wait_max_ms=20), Changes())
    fetcher.start()
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not caught_up(follower, leader)() and time.monotonic() < deadline:
            time.sleep(0.005)
        assert caught_up(follower, leader)(), (follower, link.failed, thread_errors)
        assert sorted(link.failed) == ["epoch_end_offset"] * 3 + ["replicate"] * 3
        write(leader, 1, 2, tag="L-more")  # the running loop follows what the leader writes next
        while not caught_up(follower, leader)() and time.monotonic() < deadline:
            time.sleep(0.005)
    finally:
        fetcher.stop()
        fetcher.join(DEADLINE_S)
    assert not fetcher_threads(), "stop() did not end the fetcher's thread"
    assert fetcher.stopped
    assert not thread_errors
    assert_identical(follower, leader)


def test_stop_ends_a_loop_that_only_fails(replica: Callable[..., Log], thread_errors: list[BaseException]) -> None:
    leader = replica("leader")
    write(leader, 0, 2, tag="L")
    follower = follower_of(replica("follower"))
    link = LogLeader(leader)
    link.fail(1_000_000)
    fetcher = ReplicaFetcher(NAME, follower, link, settings(fetch_backoff_ms=10_000), Changes())
    fetcher.start()
    deadline = time.monotonic() + DEADLINE_S
    while not link.failed and time.monotonic() < deadline:
        time.sleep(0.005)
    assert link.failed == ["replicate"]  # and now it waits out its backoff
    started = time.monotonic()
    fetcher.stop()
    fetcher.join(DEADLINE_S)
    assert not fetcher_threads()
    assert time.monotonic() - started < DEADLINE_S / 2, "stop() must cut the backoff short"
    assert link.closed, "the ended loop releases its link"
    assert follower.log_end_offset == 0
    assert not thread_errors
