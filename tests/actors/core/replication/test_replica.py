"""The replica role machine (`Replica`) without Ray: replicas of one partition on real `Log`s in separate folders,
sharing a `MockClock`, their followers fetching from the leader's `Replica` in process (`LocalLeaderLink`, real
fetcher threads), and the controller's side played by the test: it records each AlterPartition a leader asks for
and hands the replicas the states the controller would decide (`LeaderAndIsr.with_isr`, new epochs).

Oracles: Kafka's replication rules (the high watermark is the smallest log end offset of the ISR; a follower that
lagged more than `replica.lag.time.max.ms` leaves the ISR, one that caught up joins it; `acks=all` answers once every
in-sync replica has the append, refuses below `min.insync.replicas`; stale leader epochs are fenced) and the leader's
log, which a caught-up follower holds record for record.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.core.replication.follower import ReplicaFetch, ReplicaSettings
from actors.core.replication.leader_and_isr import LeaderAndIsr
from actors.core.replication.leader_state import PENDING_TIMEOUT_MS
from actors.core.replication.local_leader_link import LocalLeaderLink
from actors.core.replication.log_changes import LogChanges
from actors.core.replication.replica import Replica
from storage.clock import MockClock
from storage.errors import (
    BrokerNotAvailableError,
    FencedLeaderEpochError,
    InvalidRequestError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
    RaybrokerError,
    RequestTimedOutError,
    UnknownLeaderEpochError,
)
from storage.logdir.partition_handles import reopen_as_replica
from storage.partition.log import Log
from tests.storage.builders import (
    START_MS,
    batch_bytes,
    batches_in,
    config,
    log_rows,
    open_log,
    simple_records,
)

TOPIC, PARTITION = "t", 0
LAG_MS = 10_000
# Fetcher threads copy in milliseconds; this bounds a wait that should end long before.
DEADLINE_S = 5.0
# Followers answer at once when there is nothing to fetch, so tests never wait on a long poll.
SETTINGS = ReplicaSettings(lag_time_max_ms=LAG_MS, fetch_wait_max_ms=10, fetch_backoff_ms=10)


@pytest.fixture(autouse=True)
def no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """Durability is not under test: every epoch change and truncation writes an fsynced checkpoint."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


class RecordedController:
    """The leaders' AlterPartition asks, in order (the controller's answer is the test's `Replicas.tell`); an ask
    that would add a node of `lost` is refused at once, as the controller refuses a replica on a lost node."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int, tuple[str, ...]]] = []
        self.lost: set[str] = set()

    def alter_partition(self, proposed: LeaderAndIsr, refused: Callable[[], None]) -> None:
        self.asked.append((proposed.leader, proposed.leader_epoch, proposed.isr))
        if self.lost & set(proposed.isr):
            refused()


class Replicas:
    """Replicas `a`, `b`, `c` of one partition, each over its own log under `root`."""

    def __init__(self, root: Path, clock: MockClock, **log_config: Any) -> None:
        self.clock = clock
        self.controller = RecordedController()
        self.logs: dict[str, Log] = {}
        self.by_node: dict[str, Replica] = {}
        for node in "abc":
            log = open_log(root / node / f"{TOPIC}-{PARTITION}", clock, **log_config)
            log.become_leader()
            self.logs[node] = log
            self.restart(node)

    def restart(self, node: str) -> Replica:
        """A new `Replica` over `node`'s log (its process started again), told nothing yet."""
        self.by_node[node] = Replica(
            self.logs[node],
            node,
            SETTINGS,
            LogChanges(),
            controller=self.controller,
            leader_link=lambda state: LocalLeaderLink(state, node, self.find),
            isr_checks=False,
        )
        return self.by_node[node]

    def find(self, topic: str, partition: int, node: str) -> Replica:
        return self.by_node[node]

    def tell(self, state: LeaderAndIsr, *nodes: str) -> LeaderAndIsr:
        for node in nodes or state.replicas:
            self.by_node[node].update(state)
        return state

    def append(self, node: str, count: int, acks: int = 1) -> Any:
        records = batch_bytes(simple_records(count, timestamp=self.clock.milliseconds()))
        return self.by_node[node].append(acks, lambda log: log.append(records))

    def close(self) -> None:
        for replica in self.by_node.values():
            replica.stop(BrokerNotAvailableError("closed"), join_timeout_s=DEADLINE_S)
        for log in self.logs.values():
            if not log.closed:
                log.close()


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[Replicas]:
    made = Replicas(tmp_path, MockClock(START_MS))
    try:
        yield made
    finally:
        made.close()


def state(leader: str, isr: str, epoch: int = 1, version: int = 1, replicas: str = "abc") -> LeaderAndIsr:
    return LeaderAndIsr(TOPIC, PARTITION, leader, epoch, tuple(replicas), tuple(isr), version)


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def caught_up(replicas: Replicas, *nodes: str) -> bool:
    leader_end = replicas.logs["a"].log_end_offset
    return all(replicas.logs[node].log_end_offset == leader_end for node in nodes)


# --- roles ---------------------------------------------------------------------------------------------------


def test_a_replica_told_nothing_leads_alone_and_its_appends_are_committed_at_once(replicas: Replicas) -> None:
    alone = replicas.by_node["a"]
    assert alone.state is None and not alone.following and not alone.leading
    replicas.append("a", 3, acks=-1)
    # An unreplicated log's high watermark is its log end offset.
    assert replicas.logs["a"].high_watermark == 3


def test_leader_and_followers_take_their_roles_and_the_followers_copy_the_leaders_log(replicas: Replicas) -> None:
    replicas.tell(state("a", "abc"))
    assert replicas.by_node["a"].leading and not replicas.by_node["a"].following
    assert all(replicas.by_node[node].following for node in "bc")
    replicas.append("a", 5)
    replicas.append("a", 2)
    wait_until(lambda: caught_up(replicas, "b", "c"), "the followers to copy the leader")
    # The leader's high watermark reaches its log end once every follower fetched past it; followers take it.
    wait_until(lambda: replicas.logs["a"].high_watermark == 7, "the high watermark")
    wait_until(lambda: all(replicas.logs[n].high_watermark == 7 for n in "bc"), "the followers' high watermarks")
    assert log_rows(replicas.logs["b"]) == log_rows(replicas.logs["a"]) == log_rows(replicas.logs["c"])


def test_a_follower_refuses_client_appends_and_names_the_leader(replicas: Replicas) -> None:
    replicas.tell(state("a", "abc"))
    with pytest.raises(NotLeaderOrFollowerError, match="the leader is a"):
        replicas.by_node["b"].check_append(1)
    with pytest.raises(InvalidRequestError):
        replicas.by_node["a"].check_append(2)


def test_an_older_state_and_a_state_that_does_not_list_the_replica_are_ignored(replicas: Replicas) -> None:
    newer = replicas.tell(state("a", "abc", epoch=2, version=4))
    assert not replicas.by_node["a"].update(state("b", "abc", epoch=1, version=9))
    assert not replicas.by_node["a"].update(state("a", "ab", epoch=2, version=4))
    assert not replicas.by_node["a"].update(state("b", "bc", epoch=3, version=5, replicas="bc"))
    assert replicas.by_node["a"].state == newer


def test_a_state_from_an_older_controller_epoch_is_refused_however_new_it_looks(replicas: Replicas) -> None:
    """A controller left running beside its successor (Kafka's STALE_CONTROLLER_EPOCH): once a replica has heard from
    controller epoch 4, epoch 3's states change nothing, even in a later leader epoch; epoch 4's and 5's are taken."""
    a = replicas.by_node["a"]
    heard = replicas.tell(state("a", "abc", epoch=2, version=4).sent_by(4))
    assert not a.update(state("b", "bc", epoch=3, version=5).sent_by(3))
    assert a.state == heard and a.leading
    newer = replicas.tell(state("a", "ab", epoch=2, version=5).sent_by(4))
    assert a.state == newer
    assert a.update(state("b", "bc", epoch=3, version=6).sent_by(5))
    assert a.following and a.state is not None and a.state.controller_epoch == 5
    assert not a.update(state("a", "abc", epoch=4, version=7).sent_by(4)), "epoch 5 fenced epoch 4"


def test_a_new_leader_starts_its_epoch_and_the_old_leader_truncates_its_divergent_tail(replicas: Replicas) -> None:
    replicas.tell(state("a", "ab", replicas="ab"), "a", "b")
    replicas.append("a", 4)
    wait_until(lambda: caught_up(replicas, "b"), "b to copy a")
    # a leads on alone with records b never gets: b is elected, a follows it in the new epoch.
    replicas.by_node["b"].stop(BrokerNotAvailableError("b is down"), join_timeout_s=DEADLINE_S)
    replicas.append("a", 3)
    replicas.restart("b")
    replicas.tell(state("b", "ab", epoch=2, version=2, replicas="ab"), "a", "b")
    assert replicas.logs["b"].leader_epoch == 2
    replicas.append("b", 2)
    wait_until(lambda: replicas.logs["a"].log_end_offset == 6, "a to truncate and copy b")
    assert log_rows(replicas.logs["a"]) == log_rows(replicas.logs["b"])
    assert [row[0] for row in log_rows(replicas.logs["a"])] == list(range(6))


class HeldLink(LocalLeaderLink):
    """A follower's link whose next `replicate` fails (`fail_next_replicate`) and whose next `epoch_end_offset` answer
    is held back (`holding`): the leader answers at once, the answer arrives once `release` is set, as a slow Ray call
    to a busy leader's node (one Ray is about to declare dead) does."""

    def __init__(self, state: LeaderAndIsr, me: str, find_replica: Callable[[str, int, str], Replica]) -> None:
        super().__init__(state, me, find_replica)
        self.fail_next_replicate = False
        self.holding = False
        self.held = threading.Event()
        self.release = threading.Event()

    def epoch_end_offset(self, epoch: int) -> tuple[int, int]:
        answer = super().epoch_end_offset(epoch)
        if self.holding:
            self.holding = False
            self.held.set()
            assert self.release.wait(DEADLINE_S), "the held answer was never released"
        return answer

    def replicate(self, offset: int, max_bytes: int, max_wait_ms: int) -> ReplicaFetch:
        if self.fail_next_replicate:
            self.fail_next_replicate = False
            raise BrokerNotAvailableError("the leader's node is too busy to answer")
        return super().replicate(offset, max_bytes, max_wait_ms)


def test_a_follower_elected_leader_keeps_its_new_epoch_when_an_old_leaders_late_answer_arrives(
    replicas: Replicas,
) -> None:
    """Follower b asks its leader a where their logs part (after a failed fetch, as after any) and the answer is
    slow; meanwhile the controller elects b (a's node declared dead) and b takes appends that c copies, so they are
    committed. a's late answer must not cut them: the stopped fetcher changes nothing once `stop` returned."""
    links: list[HeldLink] = []

    def held_link(state: LeaderAndIsr) -> HeldLink:
        links.append(HeldLink(state, "b", replicas.find))
        return links[-1]

    replicas.by_node["b"] = Replica(
        replicas.logs["b"],
        "b",
        SETTINGS,
        LogChanges(),
        controller=replicas.controller,
        leader_link=held_link,
        isr_checks=False,
    )
    replicas.tell(state("a", "abc"))
    replicas.append("a", 4)
    wait_until(lambda: caught_up(replicas, "b", "c"), "the followers to copy a")
    old_fetchers = {t for t in threading.enumerate() if t.name.startswith("replica-fetcher-")}
    links[0].holding = links[0].fail_next_replicate = True
    assert links[0].held.wait(DEADLINE_S), "b's fetcher never asked a where their logs part"
    # a stays leader in epoch 1 as far as it knows (a zombie): only b and c are told.
    replicas.tell(state("b", "bc", epoch=2, version=2), "b", "c")
    replicas.append("b", 3)
    wait_until(lambda: replicas.logs["b"].high_watermark == 7, "b's appends committed (c copied them)")
    links[0].release.set()
    for thread in old_fetchers:
        thread.join(DEADLINE_S)
        assert not thread.is_alive()
    b, c = replicas.logs["b"], replicas.logs["c"]
    assert (b.log_end_offset, b.high_watermark, b.leader_epoch) == (7, 7, 2)
    assert log_rows(b) == log_rows(c)


# --- the high watermark and the ISR --------------------------------------------------------------------------


def test_the_high_watermark_is_the_smallest_log_end_offset_of_the_isr(replicas: Replicas) -> None:
    replicas.tell(state("a", "abc"))
    replicas.append("a", 4)
    wait_until(lambda: replicas.logs["a"].high_watermark == 4, "the first high watermark")
    replicas.by_node["c"].stop(BrokerNotAvailableError("c is down"), join_timeout_s=DEADLINE_S)
    replicas.append("a", 4)
    wait_until(lambda: caught_up(replicas, "b"), "b to copy a")
    # c stays in the ISR (it has not lagged for replica.lag.time.max.ms yet) and holds the high watermark back.
    time.sleep(0.05)
    assert replicas.logs["a"].high_watermark == 4


def written_log(folder: Path, clock: MockClock, epoch: int, count: int) -> Log:
    """A log in `folder` led in `epoch`, holding `count` one-record batches."""
    log = open_log(folder, clock)
    log.become_leader(epoch)
    for _ in range(count):
        log.append(batch_bytes(simple_records(1, timestamp=clock.milliseconds())))
    return log


@pytest.mark.parametrize(("isr", "high_watermark_once_led"), [("abc", 4), ("a", 7)])
def test_a_replica_reopened_at_its_checkpointed_high_watermark_commits_its_tail_once_the_isr_has_it(
    tmp_path: Path, isr: str, high_watermark_once_led: int
) -> None:
    """Kafka's `Partition.createLog` then `makeLeader`: a replica whose log holds 7 records, 4 of them committed by
    its replication-offset-checkpoint, reopens there and, elected leader with other in-sync replicas, keeps it until
    they have fetched the tail (`maybeIncrementLeaderHW`); alone in the ISR it commits its whole log at once. Opened
    at its log end instead, it would show consumers 3 records no other replica may have."""
    clock = MockClock(START_MS)
    folder = tmp_path / "a" / f"{TOPIC}-{PARTITION}"
    written_log(folder, clock, 1, 7).close()
    log = Log.open(folder, config(), clock=clock)
    reopen_as_replica(log, 4)
    replica = Replica(log, "a", SETTINGS, LogChanges(), controller=RecordedController(), isr_checks=False)
    try:
        assert (log.high_watermark, log.log_end_offset) == (4, 7)
        replica.update(state("a", isr, epoch=2))
        assert log.high_watermark == high_watermark_once_led
        committed = batches_in(log.read(0, 100_000, isolation="high_watermark").records)
        assert [record.offset for batch in committed for record in batch.records()] == list(range(log.high_watermark))
        if isr == "abc":
            replica.replicate("b", 7, 1024, 0, 2)
            replica.replicate("c", 6, 1024, 0, 2)
            assert log.high_watermark == 6
            replica.replicate("c", 7, 1024, 0, 2)
        assert log.high_watermark == 7
    finally:
        replica.stop(BrokerNotAvailableError("closed"), join_timeout_s=DEADLINE_S)
        log.close()


def test_a_new_leader_answers_offset_not_available_until_its_high_watermark_reaches_its_epoch_start(
    replicas: Replicas,
) -> None:
    """KIP-207, as Kafka's `Partition.fetchOffsetForTimestamp`: b, elected while its high watermark (learned from a's
    last fetch answer) is below its log end, where its epoch starts, answers ListOffsets for the latest offset, the
    latest of read_committed and a timestamp with OFFSET_NOT_AVAILABLE (retriable), never an offset short of what a
    answered; the earliest offset answers at once, and b says it answers no latest offset (it publishes no readable
    state to same-node readers meanwhile). Once c's fetch moves b's high watermark, b answers its end."""
    replicas.tell(state("a", "abc"))
    replicas.append("a", 5)
    wait_until(lambda: caught_up(replicas, "b", "c"), "the followers to copy a")
    wait_until(lambda: replicas.logs["a"].high_watermark == 5, "a's high watermark")
    replicas.by_node["c"].stop(BrokerNotAvailableError("c is paused"), join_timeout_s=DEADLINE_S)
    assert replicas.by_node["a"].list_offset(-1, "high_watermark").offset == 5
    b_log = replicas.logs["b"]
    b_log.update_high_watermark(3)  # as if a's last answer to b carried an older high watermark
    replicas.tell(state("b", "bc", epoch=2), "b")
    with pytest.raises(OffsetNotAvailableError, match="below the start offset 5"):
        replicas.by_node["b"].list_offset(-1, "high_watermark")
    for timestamp, isolation in ((-1, "txn_committed"), (START_MS, "high_watermark"), (-3, "high_watermark")):
        with pytest.raises(OffsetNotAvailableError):
            replicas.by_node["b"].list_offset(timestamp, isolation)
    assert replicas.by_node["b"].list_offset(-2, "high_watermark").offset == 0
    assert not replicas.by_node["b"].latest_offset_available
    replicas.restart("c")
    replicas.tell(state("b", "bc", epoch=2), "c")
    wait_until(lambda: b_log.high_watermark == 5, "b's high watermark, moved by c's fetch")
    assert replicas.by_node["b"].list_offset(-1, "high_watermark").offset == 5
    assert replicas.by_node["b"].latest_offset_available


def test_a_follower_lagging_longer_than_replica_lag_time_max_ms_is_asked_out_of_the_isr(replicas: Replicas) -> None:
    leader = replicas.by_node["a"]
    current = replicas.tell(state("a", "abc"))
    replicas.by_node["c"].stop(BrokerNotAvailableError("c is down"), join_timeout_s=DEADLINE_S)
    replicas.append("a", 4)
    wait_until(lambda: leader.follower_log_end_offset("b") == 4, "b to copy a and fetch again")
    replicas.clock.sleep(LAG_MS)
    assert leader.check_isr() is None, "not more than replica.lag.time.max.ms yet"
    replicas.clock.sleep(1)
    assert leader.check_isr() == ("a", "b")
    assert replicas.controller.asked == [("a", 1, ("a", "b"))]
    # Once the controller's answer arrives, the high watermark no longer waits for c.
    replicas.tell(current.with_isr(("a", "b")), "a", "b")
    assert replicas.logs["a"].high_watermark == 4
    replicas.append("a", 1)
    wait_until(lambda: replicas.logs["a"].high_watermark == 5, "the high watermark without c")


def test_a_follower_that_caught_up_is_asked_into_the_isr(replicas: Replicas) -> None:
    replicas.tell(state("a", "ab"))
    replicas.append("a", 3)
    wait_until(lambda: caught_up(replicas, "b", "c"), "b and c to copy a")
    wait_until(lambda: ("a", 1, ("a", "b", "c")) in replicas.controller.asked, "the leader to ask for c")


def test_a_follower_on_a_lost_node_once_refused_holds_neither_the_high_watermark_nor_the_isr(
    replicas: Replicas,
) -> None:
    """c's node was declared dead (out of the ISR) while its process lived on and fetched: a asks for c back, the
    controller refuses (INELIGIBLE_REPLICA), then c's process ends. The high watermark no longer waits for c's last
    fetch, and c is not asked for again, which would be refused again and keep the ISR from growing."""
    replicas.controller.lost = {"c"}
    replicas.tell(state("a", "ab"))
    replicas.append("a", 3)
    wait_until(lambda: ("a", 1, ("a", "b", "c")) in replicas.controller.asked, "the leader to ask for c")
    replicas.by_node["c"].stop(BrokerNotAvailableError("c's process ended"), join_timeout_s=DEADLINE_S)
    replicas.append("a", 2)
    wait_until(lambda: replicas.logs["a"].high_watermark == 5, "the high watermark without c")
    # c may have fetched once more after the refusal (asked for, and refused, once more); then never again.
    for high_watermark in (6, 7):
        asked = len(replicas.controller.asked)
        replicas.clock.sleep(PENDING_TIMEOUT_MS)
        replicas.append("a", 1)
        wait_until(lambda h=high_watermark: replicas.logs["a"].high_watermark == h, "the high watermark without c")
    assert replicas.controller.asked[asked:] == []


# --- acks=all ------------------------------------------------------------------------------------------------


def test_acks_all_answers_once_every_in_sync_replica_has_the_append(tmp_path: Path) -> None:
    made = Replicas(tmp_path, MockClock(START_MS), min_insync_replicas=2)
    try:
        made.tell(state("a", "abc"))
        info = made.append("a", 3, acks=-1)
        assert made.by_node["a"].await_replicated(info, timeout_ms=int(DEADLINE_S * 1000)) == info
        assert made.logs["b"].log_end_offset >= 3 and made.logs["c"].log_end_offset >= 3
    finally:
        made.close()


def test_acks_all_times_out_while_an_in_sync_replica_lacks_the_append(replicas: Replicas) -> None:
    replicas.tell(state("a", "ab", replicas="ab"), "a", "b")
    replicas.by_node["b"].stop(BrokerNotAvailableError("b is down"), join_timeout_s=DEADLINE_S)
    info = replicas.append("a", 1, acks=-1)
    started = time.monotonic()
    with pytest.raises(RequestTimedOutError):
        replicas.by_node["a"].await_replicated(info, timeout_ms=100)
    assert time.monotonic() - started >= 0.1


def test_acks_all_is_refused_below_min_insync_replicas_and_fails_when_the_isr_shrinks(tmp_path: Path) -> None:
    made = Replicas(tmp_path, MockClock(START_MS), min_insync_replicas=2)
    try:
        current = made.tell(state("a", "ab", replicas="ab"), "a", "b")
        made.by_node["b"].stop(BrokerNotAvailableError("b is down"), join_timeout_s=DEADLINE_S)
        info = made.append("a", 1, acks=-1)
        answer: list[BaseException] = []

        def wait() -> None:
            try:
                made.by_node["a"].await_replicated(info, timeout_ms=int(DEADLINE_S * 1000))
            except NotEnoughReplicasAfterAppendError as exc:
                answer.append(exc)

        waiter = threading.Thread(target=wait)
        waiter.start()
        made.tell(current.with_isr(("a",)), "a")
        waiter.join(DEADLINE_S)
        # The append is committed (the ISR is the leader alone) but below min.insync.replicas: Kafka's
        # NOT_ENOUGH_REPLICAS_AFTER_APPEND.
        assert made.logs["a"].high_watermark > info.last_offset
        assert len(answer) == 1
        with pytest.raises(NotEnoughReplicasError):
            made.append("a", 1, acks=-1)
        made.append("a", 1, acks=1)
    finally:
        made.close()


def test_min_insync_replicas_above_the_replica_count_counts_as_that_count(tmp_path: Path) -> None:
    # Kafka's effectiveMinIsr: min.insync.replicas 3 on a partition of 2 replicas asks for both, not for 3.
    made = Replicas(tmp_path, MockClock(START_MS), min_insync_replicas=3)
    try:
        current = made.tell(state("a", "ab", replicas="ab"), "a", "b")
        info = made.append("a", 1, acks=-1)
        assert made.by_node["a"].await_replicated(info, timeout_ms=int(DEADLINE_S * 1000)) == info
        made.tell(current.with_isr(("a",)), "a")
        with pytest.raises(NotEnoughReplicasError):
            made.append("a", 1, acks=-1)
    finally:
        made.close()


def test_a_replica_that_stopped_leading_fails_the_waiting_append(replicas: Replicas) -> None:
    replicas.tell(state("a", "ab", replicas="ab"), "a", "b")
    replicas.by_node["b"].stop(BrokerNotAvailableError("b is down"), join_timeout_s=DEADLINE_S)
    info = replicas.append("a", 1, acks=-1)
    replicas.tell(state("b", "b", epoch=2, version=2, replicas="ab"), "a")
    with pytest.raises(NotLeaderOrFollowerError):
        replicas.by_node["a"].await_replicated(info, timeout_ms=int(DEADLINE_S * 1000))


# --- fencing and the end -------------------------------------------------------------------------------------


def test_a_followers_fetch_is_fenced_by_leader_epoch_and_checked(replicas: Replicas) -> None:
    replicas.tell(state("a", "a", epoch=3), "a")
    leader = replicas.by_node["a"]
    with pytest.raises(FencedLeaderEpochError):
        leader.replicate("b", 0, 1024, 0, 2)
    with pytest.raises(UnknownLeaderEpochError):
        leader.replicate("b", 0, 1024, 0, 4)
    with pytest.raises(NotLeaderOrFollowerError):
        leader.replicate("z", 0, 1024, 0, 3)
    with pytest.raises(OffsetOutOfRangeError):
        leader.replicate("b", 1, 1024, 0, 3)
    with pytest.raises(InvalidRequestError):
        leader.replicate("b", "0", 1024, 0, 3)  # type: ignore[arg-type]
    with pytest.raises(NotLeaderOrFollowerError):
        replicas.by_node["b"].replicate("c", 0, 1024, 0, 3)


def test_epoch_end_offset_answers_only_as_the_leader_in_the_callers_leader_epoch(replicas: Replicas) -> None:
    """Kafka's `Partition.lastOffsetForLeaderEpoch` (KIP-320): the caller's current leader epoch is checked first,
    older FENCED_LEADER_EPOCH and newer UNKNOWN_LEADER_EPOCH, -1 not at all; then only the leader answers."""
    replicas.tell(state("a", "abc", epoch=3))
    replicas.append("a", 4)
    leader = replicas.by_node["a"]
    assert leader.epoch_end_offset(3, 3) == leader.epoch_end_offset(3) == (3, 4)
    assert leader.epoch_end_offset(1, 3) == (1, 0)
    with pytest.raises(FencedLeaderEpochError):
        leader.epoch_end_offset(3, 2)
    with pytest.raises(UnknownLeaderEpochError):
        leader.epoch_end_offset(3, 4)
    with pytest.raises(NotLeaderOrFollowerError):
        replicas.by_node["b"].epoch_end_offset(3, 3)
    with pytest.raises(InvalidRequestError):
        leader.epoch_end_offset(3, "3")  # type: ignore[arg-type]


class AnswersKept(LocalLeaderLink):
    """A follower's link that keeps what each `epoch_end_offset` answered: the answer, or the error's type."""

    def __init__(self, state: LeaderAndIsr, me: str, find_replica: Callable[[str, int, str], Replica]) -> None:
        super().__init__(state, me, find_replica)
        self.answers: list[object] = []

    def epoch_end_offset(self, epoch: int) -> tuple[int, int]:
        try:
            answer = super().epoch_end_offset(epoch)
        except RaybrokerError as exc:
            self.answers.append(type(exc))
            raise
        self.answers.append(answer)
        return answer


@pytest.mark.parametrize(
    ("a_told", "c_told", "error"),
    [
        # c missed the state in which a leads in epoch 3: a fences it.
        (state("a", "ac", epoch=3, replicas="ac"), state("a", "ac", epoch=2, replicas="ac"), FencedLeaderEpochError),
        # c is told first that a leads in epoch 3; a still follows b in epoch 2.
        (state("b", "abc", epoch=2), state("a", "ac", epoch=3, replicas="ac"), UnknownLeaderEpochError),
    ],
    ids=["fenced", "unknown"],
)
def test_a_follower_truncates_nothing_by_a_replica_that_does_not_lead_in_its_epoch(
    tmp_path: Path, a_told: LeaderAndIsr, c_told: LeaderAndIsr, error: type[RaybrokerError]
) -> None:
    """Follower c holds 8 records of epoch 2, replica a only 5 of them (as a lagging follower does). Asked where
    epoch 2 ends, a's log says 5; but a does not lead in the epoch c follows it in, so c must not cut its log by
    that answer (the 3 records may be committed by the leader a lags behind): it backs off and asks again. Kafka's
    fetcher likewise truncates only on an answer without error, and drops a fenced partition until its next state."""
    clock = MockClock(START_MS)
    a_log = written_log(tmp_path / "a" / f"{TOPIC}-{PARTITION}", clock, 2, 5)
    c_log = written_log(tmp_path / "c" / f"{TOPIC}-{PARTITION}", clock, 2, 8)
    a = Replica(a_log, "a", SETTINGS, LogChanges(), controller=RecordedController(), isr_checks=False)
    links: list[AnswersKept] = []

    def link(state: LeaderAndIsr) -> AnswersKept:
        links.append(AnswersKept(state, "c", lambda topic, partition, node: a))
        return links[-1]

    c = Replica(c_log, "c", SETTINGS, LogChanges(), controller=RecordedController(), leader_link=link, isr_checks=False)
    try:
        a.update(a_told)
        c.update(c_told)
        wait_until(lambda: len(links[0].answers) >= 2, "c to ask a twice")
        assert links[0].answers[:2] == [error, error]
        assert c_log.log_end_offset == 8
    finally:
        for replica in (c, a):
            replica.stop(BrokerNotAvailableError("closed"), join_timeout_s=DEADLINE_S)
        a_log.close()
        c_log.close()


def test_a_stopped_replica_raises_its_stop_error_and_its_threads_end(replicas: Replicas) -> None:
    replicas.tell(state("a", "abc"))
    before = {thread.name for thread in threading.enumerate()}
    assert any(name.startswith("replica-fetcher-") for name in before)
    gone = BrokerNotAvailableError("closed on purpose")
    for replica in replicas.by_node.values():
        replica.stop(gone, join_timeout_s=DEADLINE_S)
    assert not any(thread.name.startswith("replica-fetcher-") for thread in threading.enumerate())
    with pytest.raises(BrokerNotAvailableError, match="closed on purpose"):
        replicas.by_node["a"].check_append(1)
    assert not replicas.by_node["a"].update(state("a", "abc", epoch=5, version=5))
