"""One replica's role in its partition's replication: leader, follower, or (until the controller says otherwise)
its own leader alone, as a plain class over the replica's `storage.partition.log.Log`.

The controller tells the replica its partition's state (`update`, Kafka's LeaderAndIsr); an older state than the
last one (by leader epoch, then version) is ignored, and so is one that does not list this replica.

- As the leader it takes appends (`append`, checked by `check_append`; with `acks=all` only while at least
  `min.insync.replicas` replicas are in sync, `NotEnoughReplicasError`; as Kafka's `effectiveMinIsr`, a
  `min.insync.replicas` above the partition's replica count counts as that count, so a one-replica topic takes
  `acks=all` whatever it says), answers its followers' fetches
  (`replicate`) and OffsetsForLeaderEpoch (`epoch_end_offset`), fences a client's read whose `current_leader_epoch`
  is not its own (`check_current_leader_epoch`: Fetch, ListOffsets and OffsetsForLeaderEpoch, KIP-320), moves the high
  watermark to the smallest log end offset of the ISR (`actors.core.replication.leader_state.LeaderState`; with no
  other replica, to its log end at once, as a log reopened at its checkpointed high watermark learns it is alone), and
  asks the controller to grow the ISR when a follower caught up and to shrink it when a follower lagged more than
  `replica.lag.time.max.ms` (checked every half of it, by the log's clock: `check_isr`). A leader in a new epoch starts
  that epoch in its log (`Log.become_leader`), so its followers truncate to it.
- As a follower it runs a `ReplicaFetcher` thread that copies the leader's log through a link the host makes
  (`leader_link(state)`), and refuses client appends and reads with `NotLeaderOrFollowerError`.
- A follower out of the ISR is throttled by the broker's replication quotas (`throttle`,
  `actors.core.quotas.replication_quotas`): the leader answers its fetch with no records while the leader quota holds
  it off, and its own fetcher skips fetches while the follower quota does.
- `await_replicated(info)` is the second half of an `acks=all` append: it answers once the high watermark passed
  the append, so the thread that appends never waits for followers.

Seams: the log (and its clock), this replica's node id, the controller link for AlterPartition (sent without waiting:
the answer comes back as `update`, a refusal through the link's `refused` callback), the factory of links to a leader,
and the partition's change counter (`LogChanges`), which every role change and high-watermark move notifies and which
`replicate` and `await_replicated` wait on. The host (the partition actor, the in-process broker) owns the log's
lifecycle and calls `stop` when the log closes or goes offline; every call after that raises the error it was stopped
with.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from actors.core.quotas.replication_quotas import FOLLOWER, LEADER
from actors.core.replication.follower import LeaderLink, ReplicaFetch, ReplicaFetcher, ReplicaSettings
from actors.core.replication.leader_and_isr import NO_CONTROLLER_EPOCH, LeaderAndIsr
from actors.core.replication.leader_state import LeaderState
from actors.core.replication.log_changes import LogChanges
from actors.core.role_metrics import NO_ROLE_METRICS, RoleMetrics
from storage.arguments import is_int
from storage.errors import (
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
from storage.partition.leader_epoch_cache import UNDEFINED_EPOCH
from storage.partition.log import Log, LogAppendInfo
from storage.partition.log_read import EARLIEST_TIMESTAMP
from storage.records.file_records import TimestampAndOffset

logger = logging.getLogger(__name__)

# Kafka's `request.timeout.ms` default: how long an `acks=all` append waits for its replication.
ACKS_ALL_TIMEOUT_MS = 30_000
# Kafka's `acks`: -1 (all) once every in-sync replica has the write, 1 once the leader has it, 0 unanswered.
ACKS_ALL = -1
ACKS = (ACKS_ALL, 0, 1)
# The ISR check runs every half `replica.lag.time.max.ms`, but never more often than every 10 ms.
MIN_ISR_CHECK_INTERVAL_S = 0.01


class ControllerLink(Protocol):
    """The replica's call to the controller: Kafka's AlterPartition, sent without waiting."""

    def alter_partition(self, proposed: LeaderAndIsr, refused: Callable[[], None]) -> None:
        """Asks for `proposed`: the partition's state as its leader holds it (topic, partition, leader, leader epoch,
        partition epoch, which the controller checks) with the ISR the leader wants. Raises `RaybrokerError` when
        the controller cannot be reached (the check asks again later); calls `refused()`, on any thread, once the
        controller refused the change as not applied on the state the leader holds (INELIGIBLE_REPLICA), never when
        its answer is lost or it refused a stale ask (the change may have been taken: it stays pending until the
        controller's newer state arrives, as Kafka's leader keeps it)."""
        ...


class ReplicationThrottle(Protocol):
    """The broker's replication quotas as a replica asks them (`actors.core.quotas.replication_quotas`)."""

    def admit(self, side: str, topic: str, partition: int, recorded: int) -> float:
        """Records `recorded` bytes for a replica out of its ISR on `side` ("leader" or "follower") if it is
        throttled, and answers how many seconds it must hold off (0: go on)."""
        ...


class Replica:
    """One replica's leader/follower role; see the module docstring. Thread-safe (the role lock)."""

    def __init__(
        self,
        log: Log,
        node: str,
        settings: ReplicaSettings,
        changes: LogChanges,
        *,
        controller: ControllerLink | None = None,
        leader_link: Callable[[LeaderAndIsr], LeaderLink] | None = None,
        isr_checks: bool = True,
        throttle: ReplicationThrottle | None = None,
        metrics: RoleMetrics = NO_ROLE_METRICS,
    ) -> None:
        """`leader_link(state)` links a follower to `state`'s leader (None: this replica never follows, as outside
        a cluster); `isr_checks` False leaves the ISR shrink check to whoever calls `check_isr` (a test moving a
        `MockClock`); `throttle` is the broker's replication quotas (None: never throttled); `metrics` counts the
        bytes a reassignment moves (Kafka's ReassignmentBytesIn and ReassignmentBytesOut): those a replica being
        added appends, and those its leader sends it."""
        self.log = log
        self.node = node
        self.settings = settings
        self._changes = changes
        self._controller = controller
        self._leader_link = leader_link
        self._isr_checks = isr_checks
        self._throttle = throttle
        self._metrics = metrics
        # Per follower out of the ISR: the bytes the leader's last answer sent it, recorded with its next fetch.
        self._unrecorded: dict[str, int] = {}
        self._lock = threading.RLock()
        self._state: LeaderAndIsr | None = None
        # The newest controller epoch a state came from: states of older controllers are refused.
        self._controller_epoch = NO_CONTROLLER_EPOCH
        self._leader: LeaderState | None = None
        self._fetcher: ReplicaFetcher | None = None
        self._isr_thread: threading.Thread | None = None
        self._stopped: RaybrokerError | None = None
        self._stopping = threading.Event()

    @property
    def state(self) -> LeaderAndIsr | None:
        """The controller's latest state of this partition as this replica knows it (None before any)."""
        return self._state

    @property
    def following(self) -> bool:
        """True while the controller's latest state names another leader, or none (an offline partition): client
        reads and appends go to the leader, as Kafka's follower refuses them whether or not it is fetching."""
        state = self._state
        return state is not None and state.leader != self.node

    @property
    def leading(self) -> bool:
        """True while this replica leads a partition the controller told it of."""
        return self._leader is not None

    def _check_open(self) -> None:
        if self._stopped is not None:
            raise self._stopped

    # --- the controller's states -------------------------------------------------------------------------------

    def update(self, state: LeaderAndIsr) -> bool:
        """The controller's newest state of this partition (Kafka's LeaderAndIsr): this replica leads, follows
        or, if it is not among the replicas, keeps what it does. Returns whether the state was taken; an older one
        than the last, one from an older controller epoch than the newest heard from (a controller fenced by its
        successor: Kafka's STALE_CONTROLLER_EPOCH), and any after `stop`, are not."""
        if not isinstance(state, LeaderAndIsr):
            raise InvalidRequestError(f"expected a LeaderAndIsr, not {type(state).__name__}")
        with self._lock:
            if self._stopped is not None:
                return False
            if state.controller_epoch < self._controller_epoch:
                logger.warning(
                    "%s: state from controller epoch %d refused: controller epoch %d is newer",
                    self.log.directory.name,
                    state.controller_epoch,
                    self._controller_epoch,
                )
                return False
            self._controller_epoch = state.controller_epoch
            current = self._state
            if current is not None and (state.leader_epoch, state.version) <= (current.leader_epoch, current.version):
                return False
            if self.node not in state.replicas:
                return False
            self._state = state
            if state.leader == self.node:
                self._lead(state, current)
            else:
                self._follow(state, current)
        self._changes.notify()
        return True

    def _lead(self, state: LeaderAndIsr, previous: LeaderAndIsr | None) -> None:
        """Becomes (or stays) the leader of `state` (under the role lock)."""
        log = self.log
        if self._leader is not None and previous is not None and previous.leader_epoch == state.leader_epoch:
            self._leader.update(state, log.clock.milliseconds())
        else:
            self._stop_fetcher()
            if state.leader_epoch > log.leader_epoch or not log.epoch_entries():
                log.become_leader(max(state.leader_epoch, log.leader_epoch))
            self._leader = LeaderState(self.node, state, log.log_end_offset, log.clock.milliseconds())
            if state.replication_factor > 1 and self._isr_checks:
                self._isr_thread = threading.Thread(
                    target=self._run_isr_checks, args=(self._leader,), name=f"isr-check-{log.directory.name}"
                )
                self._isr_thread.daemon = True
                self._isr_thread.start()
        log.set_replicated(state.replication_factor > 1)
        self._advance_high_watermark()

    def _follow(self, state: LeaderAndIsr, previous: LeaderAndIsr | None) -> None:
        """Becomes (or stays) a follower of `state`'s leader (under the role lock)."""
        self._leader = None
        self.log.set_replicated(True)
        same_leader = previous is not None and (previous.leader, previous.leader_epoch) == (
            state.leader,
            state.leader_epoch,
        )
        if self._fetcher is not None and same_leader and not self._fetcher.stopped:
            return
        self._stop_fetcher()
        if state.offline or self._leader_link is None:
            return
        throttle = self._throttle
        self._fetcher = ReplicaFetcher(
            f"{state.topic}-{state.partition}",
            self.log,
            self._leader_link(state),
            self.settings,
            self._changes.notify,
            in_sync=self._in_sync,
            throttle=None
            if throttle is None
            else lambda recorded: throttle.admit(FOLLOWER, state.topic, state.partition, recorded),
            appended=self._appended_as_follower,
        )
        self._fetcher.start()

    def _appended_as_follower(self, size_bytes: int) -> None:
        """A fetch appended: counted as a reassignment's while the controller's latest state adds this replica."""
        state = self._state
        if state is not None and self.node in state.adding:
            self._metrics.reassignment_bytes_in(size_bytes)

    def _in_sync(self) -> bool:
        """Whether the controller's latest state has this replica in the ISR."""
        state = self._state
        return state is not None and self.node in state.isr

    def _stop_fetcher(self) -> None:
        if self._fetcher is not None:
            self._fetcher.stop()
            self._fetcher = None

    # --- the leader ----------------------------------------------------------------------------------------------

    def check_append(self, required_acks: int) -> None:
        """Refuses a client append this replica may not take (see the module docstring)."""
        self._check_open()
        if required_acks not in ACKS:
            raise InvalidRequestError(f"acks must be one of {ACKS}, not {required_acks!r}")
        state = self._state
        if state is not None and state.leader != self.node:
            raise NotLeaderOrFollowerError(
                f"{self.log.directory.name} is not the leader (the leader is {state.leader})"
            )
        in_sync = 1 if state is None else len(state.isr)
        min_insync_replicas = _effective_min_isr(self.log, state)
        if required_acks == ACKS_ALL and in_sync < min_insync_replicas:
            raise NotEnoughReplicasError(
                f"{in_sync} in-sync replicas of {self.log.directory.name}, min.insync.replicas is {min_insync_replicas}"
            )

    def follower_log_end_offset(self, node: str) -> int | None:
        """The log end offset follower `node` last fetched from (-1 before its first fetch) while this replica
        leads; None when it does not lead or `node` is no follower of it."""
        leader = self._leader
        if leader is None or node == self.node or node not in leader.state.replicas:
            return None
        return leader.follower_log_end_offset(node)

    def append(self, required_acks: int, write: Callable[[Log], LogAppendInfo]) -> LogAppendInfo:
        """Every leader append: `write(log)` runs once this replica may take it (`check_append`), then a replicated
        leader's high watermark moves as far as its ISR allows (its followers' may not yet) and the change is
        notified to the partition's waiters. Returns what `write` did."""
        self.check_append(required_acks)
        info = write(self.log)
        if self.log.replicated:
            with self._lock:
                self._advance_high_watermark()
        self._changes.notify()
        return info

    def _advance_high_watermark(self) -> bool:
        """Moves the leader's high watermark to the smallest log end offset of the ISR; True if it moved."""
        leader = self._leader
        if leader is None:
            return False
        high_watermark = leader.high_watermark(self.log.log_end_offset)
        if high_watermark <= self.log.high_watermark:
            return False
        self.log.update_high_watermark(high_watermark)
        return True

    def _ask_controller(self, leader: LeaderState, isr: tuple[str, ...]) -> None:
        """Asks the controller for an ISR change without waiting (its answer comes as `update`)."""
        state = leader.state
        if self._controller is None:
            return
        logger.info("%s-%d: asking for ISR %s (was %s)", state.topic, state.partition, list(isr), list(state.isr))
        with contextlib.suppress(RaybrokerError):
            self._controller.alter_partition(replace(state, isr=isr), lambda: self._refused(leader, isr))

    def _refused(self, leader: LeaderState, isr: tuple[str, ...]) -> None:
        """The controller refused the ISR `isr` that `leader` asked for (`LeaderState.refused`): the high watermark
        may move, no longer held by the followers it would have added."""
        with self._lock:
            if self._leader is not leader or not leader.refused(isr):
                return
            moved = self._advance_high_watermark()
        if moved:
            self._changes.notify()

    def check_isr(self) -> tuple[str, ...] | None:
        """One ISR shrink check: the ISR without the followers that lagged more than `replica.lag.time.max.ms` by
        the log's clock, asked of the controller; None (and nothing asked) when every follower kept up."""
        with self._lock:
            leader = self._leader
            if leader is None or self._stopped is not None:
                return None
            shrunk = leader.isr_to_shrink(
                self.log.log_end_offset, self.settings.lag_time_max_ms, self.log.clock.milliseconds()
            )
        if shrunk is not None:
            self._ask_controller(leader, shrunk)
        return shrunk

    def _run_isr_checks(self, leader: LeaderState) -> None:
        """`check_isr` every half `replica.lag.time.max.ms`, while `leader` is current."""
        interval_s = max(self.settings.lag_time_max_ms / 2000, MIN_ISR_CHECK_INTERVAL_S)
        while not self._stopping.wait(interval_s):
            if self._leader is not leader:
                return
            self.check_isr()

    def replicate(
        self, follower: str, offset: int, max_bytes: int, max_wait_ms: int, leader_epoch: int
    ) -> ReplicaFetch:
        """A follower's fetch (Kafka's Fetch from a replica): records `offset` as the follower's log end offset,
        moves the high watermark, grows the ISR when the follower caught up, then answers the batches from
        `offset` (up to the log end, waiting up to `max_wait_ms` for some). `FencedLeaderEpochError` or
        `UnknownLeaderEpochError` when the follower's epoch is older or newer than this leader's (Kafka's answers to
        a follower's Fetch, KIP-320), `NotLeaderOrFollowerError` when this replica does not lead or the follower is
        no replica of it; `OffsetOutOfRangeError` outside the log."""
        for name, value in (("offset", offset), ("max_bytes", max_bytes), ("max_wait_ms", max_wait_ms)):
            if not is_int(value):
                raise InvalidRequestError(f"{name} must be an int, not {type(value).__name__}")
        self._check_open()
        log = self.log
        with self._lock:
            leader = self._leader
            if leader is None:
                raise NotLeaderOrFollowerError(f"{log.directory.name} is not the leader")
            if leader_epoch != leader.state.leader_epoch:
                error = FencedLeaderEpochError if leader_epoch < leader.state.leader_epoch else UnknownLeaderEpochError
                raise error(f"{log.directory.name} leads in epoch {leader.state.leader_epoch}, not {leader_epoch}")
            if not log.log_start_offset <= offset <= log.log_end_offset:
                raise OffsetOutOfRangeError(
                    f"fetch offset {offset} is outside {log.log_start_offset}..{log.log_end_offset}", offset=offset
                )
            now_ms = log.clock.milliseconds()
            if not leader.follower_fetched(follower, offset, log.log_end_offset, now_ms):
                raise NotLeaderOrFollowerError(f"{follower!r} is no replica of {log.directory.name}")
            moved = self._advance_high_watermark()
            grown = leader.isr_to_expand(log.high_watermark, now_ms)
        if moved:
            self._changes.notify()
        if grown is not None:
            self._ask_controller(leader, grown)
        deadline = time.monotonic() + max(max_wait_ms, 0) / 1000
        throttle = self._throttle if follower not in leader.state.isr else None
        if throttle is not None and self._hold_off(throttle, leader.state, follower, deadline):
            return ReplicaFetch(b"", log.high_watermark, log.log_start_offset, log.log_end_offset)
        while True:
            seen = self._changes.count
            if log.log_end_offset > offset or time.monotonic() >= deadline or self._leader is not leader:
                records = (
                    bytes(log.read(offset, max_bytes, isolation="log_end").records)
                    if log.log_end_offset > offset
                    else b""
                )
                if throttle is not None:
                    self._unrecorded[follower] = len(records)
                if records and follower in leader.state.adding:
                    self._metrics.reassignment_bytes_out(len(records))
                return ReplicaFetch(records, log.high_watermark, log.log_start_offset, log.log_end_offset)
            self._changes.wait(seen, deadline)

    def _hold_off(self, throttle: ReplicationThrottle, state: LeaderAndIsr, follower: str, deadline: float) -> bool:
        """The leader quota's answer to a fetch of `follower`, out of the ISR (the bytes of its last answer recorded):
        True once the fetch has waited out the quota's hold-off or its own wait, whichever is shorter (Kafka's fetch
        purgatory), to be answered with no records."""
        hold_off_s = throttle.admit(LEADER, state.topic, state.partition, self._unrecorded.pop(follower, 0))
        if hold_off_s <= 0:
            return False
        self._stopping.wait(max(0.0, min(hold_off_s, deadline - time.monotonic())))
        return True

    @property
    def leader_epoch(self) -> int:
        """The leader epoch the controller elected this replica in (its log's before any state): the epoch a
        client's `current_leader_epoch` is checked against, and the one the partition publishes to same-node
        readers."""
        state = self._state
        return self.log.leader_epoch if state is None else state.leader_epoch

    def check_current_leader_epoch(self, current_leader_epoch: int) -> None:
        """A client's `current_leader_epoch` (Fetch, ListOffsets, OffsetsForLeaderEpoch) against this replica's
        `leader_epoch` (`check_current_leader_epoch`, the module's function); the first check of every client read,
        before the one that only the leader answers, as Kafka's `Partition.localLogWithEpochOrThrow`."""
        self._check_open()
        check_current_leader_epoch(current_leader_epoch, self.leader_epoch, self.log.directory.name)

    def check_client_read(self, current_leader_epoch: int) -> None:
        """A client's read (Fetch, ListOffsets, OffsetsForLeaderEpoch), as Kafka's
        `Partition.localLogWithEpochOrThrow`: its `current_leader_epoch` first (`check_current_leader_epoch`), then
        a replica that does not lead (`following`: a follower, or a replica of an offline partition) refuses it
        (`NotLeaderOrFollowerError`)."""
        self.check_current_leader_epoch(current_leader_epoch)
        if self.following:
            raise NotLeaderOrFollowerError(f"{self.log.directory.name} is not the leader")

    @property
    def latest_offset_available(self) -> bool:
        """Whether ListOffsets may answer a latest offset: not while this leader's high watermark is below the start
        offset of its leader epoch (`list_offset`); a replica that does not lead has no such bound."""
        leader = self._leader
        return leader is None or self.log.high_watermark >= leader.epoch_start_offset

    def list_offset(
        self, timestamp: int, isolation: str, current_leader_epoch: int = UNDEFINED_EPOCH
    ) -> TimestampAndOffset | None:
        """Kafka's ListOffsets on this replica (`Partition.fetchOffsetForTimestamp`): the checks of every client read
        (`check_client_read`), then, for anything but the earliest offset, a leader whose high watermark is still below
        the start offset of its leader epoch answers `OffsetNotAvailableError` (retriable, KIP-207): elected a moment
        ago, it learns its high watermark from its followers' next fetches, and until then the latest offset it would
        answer may be short of what its predecessor answered. Then `Log.list_offset`."""
        with self._lock:
            self.check_client_read(current_leader_epoch)
            leader = self._leader
            if timestamp != EARLIEST_TIMESTAMP and leader is not None and not self.latest_offset_available:
                raise OffsetNotAvailableError(
                    f"{self.log.directory.name}: the high watermark {self.log.high_watermark} is below the start "
                    f"offset {leader.epoch_start_offset} of leader epoch {leader.state.leader_epoch}"
                )
        return self.log.list_offset(timestamp, isolation)

    def epoch_end_offset(self, epoch: int, current_leader_epoch: int = UNDEFINED_EPOCH) -> tuple[int, int]:
        """OffsetsForLeaderEpoch (Kafka's `Partition.lastOffsetForLeaderEpoch`): `(epoch, end offset)` of `epoch` in
        this leader's log (`Log.end_offset_for_epoch`), after the checks of every client read (`check_client_read`:
        the caller's `current_leader_epoch`, then only the leader answers). A follower thus truncates only by the
        answer of the leader it follows, in the epoch it follows it in: a replica that no longer leads, or leads but
        has not been told of that epoch yet, may lack records the follower has and that are committed."""
        with self._lock:
            self.check_client_read(current_leader_epoch)
            return self.log.end_offset_for_epoch(epoch)

    def await_replicated(self, info: LogAppendInfo, timeout_ms: int = ACKS_ALL_TIMEOUT_MS) -> LogAppendInfo:
        """Answers `info` once the high watermark passed its last offset (every in-sync replica has it).
        `NotLeaderOrFollowerError` if this replica stopped leading meanwhile, `NotEnoughReplicasAfterAppendError` if
        the ISR fell below `min.insync.replicas`, `RequestTimedOutError` after `timeout_ms` (Kafka's
        `request.timeout.ms`); the error `stop` was given once the log closed."""
        if not isinstance(info, LogAppendInfo) or not is_int(timeout_ms):
            raise InvalidRequestError("await_replicated takes an append's LogAppendInfo and an int timeout")
        deadline = time.monotonic() + timeout_ms / 1000
        log = self.log
        while True:
            seen = self._changes.count
            self._check_open()
            state = self._state
            in_sync = 1 if state is None else len(state.isr)
            # Kafka's checkEnoughReplicasReachOffset: a committed append whose ISR fell below min.insync.replicas
            # meanwhile is NOT_ENOUGH_REPLICAS_AFTER_APPEND, not a success.
            too_few = in_sync < _effective_min_isr(log, state)
            if log.high_watermark > info.last_offset and not too_few:
                return info
            if self._leader is None or state is None:
                raise NotLeaderOrFollowerError(
                    f"{log.directory.name} stopped leading before offset {info.last_offset} was replicated"
                )
            if too_few:
                raise NotEnoughReplicasAfterAppendError(
                    f"the ISR of {log.directory.name} shrank to {in_sync}, below min.insync.replicas "
                    f"{_effective_min_isr(log, state)}, before offset {info.last_offset} was replicated"
                )
            if self._changes.wait(seen, deadline) is None:
                raise RequestTimedOutError(f"offset {info.last_offset} not replicated within {timeout_ms} ms")

    # --- the end ------------------------------------------------------------------------------------------------

    def stop(self, error: RaybrokerError, join_timeout_s: float = 0.0) -> None:
        """The log closed or went offline: no more leading or following, and every later call raises `error`.
        Waits up to `join_timeout_s` for the fetcher and ISR-check threads to end (the partition actor does not
        wait; the in-process broker does, so nothing runs after it closed)."""
        with self._lock:
            if self._stopped is None:
                self._stopped = error
            fetcher = self._fetcher
            self._stop_fetcher()
            self._leader = None
            self._stopping.set()
            isr_thread = self._isr_thread
        if join_timeout_s > 0:
            if fetcher is not None:
                fetcher.join(join_timeout_s)
            if isr_thread is not None:
                isr_thread.join(join_timeout_s)


def check_current_leader_epoch(current_leader_epoch: int, leader_epoch: int, partition: str) -> None:
    """Kafka's `Partition.checkCurrentLeaderEpoch` (KIP-320): a client's `current_leader_epoch`, the epoch of the
    leader its metadata names, against `leader_epoch`, the epoch of `partition`'s replica it reached. -1 is not
    checked; an older epoch is `FencedLeaderEpochError` (the client's metadata is stale), a newer one
    `UnknownLeaderEpochError` (the replica has not been told of that epoch yet); both are retriable."""
    if not is_int(current_leader_epoch):
        raise InvalidRequestError(f"a leader epoch must be an int, not {type(current_leader_epoch).__name__}")
    if current_leader_epoch in (UNDEFINED_EPOCH, leader_epoch):
        return
    error = FencedLeaderEpochError if current_leader_epoch < leader_epoch else UnknownLeaderEpochError
    raise error(f"{partition} is in leader epoch {leader_epoch}, not {current_leader_epoch}")


def _effective_min_isr(log: Log, state: LeaderAndIsr | None) -> int:
    """`min.insync.replicas`, capped at the partition's replica count (Kafka's `Partition.effectiveMinIsr`)."""
    replicas = 1 if state is None else len(state.replicas)
    return min(log.config.min_insync_replicas, replicas)
