"""A follower replica's fetch loop (Kafka's `ReplicaFetcherThread`).

The follower copies its leader's log record for record, offsets and leader epochs included:

1. Before its first fetch from a leader (and again after the leader says its offset is past the leader's end) it
   truncates away any tail the leader does not have: it asks the leader where its own newest epoch ends and cuts
   by `storage.partition.follower_truncation` until both agree. No record the leader lacks survives. The question
   carries the epoch the follower follows in (Kafka's `current_leader_epoch`): a replica that does not lead in that
   epoch answers an error (FENCED_LEADER_EPOCH when it knows a newer epoch, UNKNOWN_LEADER_EPOCH when it has not been
   told of this one yet, NOT_LEADER_OR_FOLLOWER when it follows), and the follower cuts nothing by it: its log may lack
   committed records the follower has. It backs off and asks again, until the controller's next state replaces this
   fetcher (Kafka's fetcher drops a fenced partition until its next LeaderAndIsr).
2. It then fetches from its log end offset (the leader records that offset as the follower's progress and answers
   with the batches past it, waiting up to `replica.fetch.wait.max.ms` for some), appends them with the leader's
   offsets (`Log.append_as_follower`), and takes the leader's high watermark (never above its own log end offset)
   and log start offset.
3. A fetch below the leader's log start (the leader deleted what the follower lacks) restarts the follower's log
   empty at the leader's log start. Any other failure (the leader restarting, a new leader not known yet) waits
   `replica.fetch.backoff.ms` and tries again; the controller's next state stops this loop and starts another.

Step 2 runs on the partition's own thread only while no fetch is shared: a link that can (`LeaderLink.share`, over
the leader process's replica channel) takes the partition into one fetch with every other partition this process
follows from the same leader process, as Kafka's fetcher thread fetches every partition it follows from one broker
in one request. That fetch's thread asks the partition where it fetches from (`SharedFetchMember.fetch_offset`),
applies each answer as step 2 does (`take`), and hands the partition back (`leave`) with the leader's error, which
the partition's own thread then handles as it would its own fetch's (steps 1 and 3, or the back-off); or with no
error once the partition asked to leave (stopped, or throttled as below).

A replica out of its partition's ISR asks its broker's follower replication quota before each fetch (`throttle`, the
bytes of the fetch before recorded; `actors.core.quotas.replication_quotas`): while the quota holds it off it skips
the fetch for the time it is told, as Kafka's fetcher leaves a throttled partition out of its fetch.

Once `stop` returned, the fetcher changes its log no more (Kafka's fetcher applies an answer only under the lock that
removing the partition takes): a leader's answer still in flight when the controller's next state came is dropped.
Otherwise the late answer of a leader that lost its leadership (slow because its node is busy, which is also why Ray
declares such a node dead) would cut the log of the replica elected in its place, the records it committed in its
new epoch included, or append the old leader's records after the truncation that following the next leader began.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from storage.config.broker_config import BrokerConfig
from storage.errors import OffsetOutOfRangeError, RaybrokerError
from storage.partition.follower_truncation import truncation_state
from storage.partition.leader_epoch_cache import UNDEFINED_EPOCH
from storage.partition.log import Log
from storage.records.file_records import iter_any_batches

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReplicaFetch:
    """A leader's answer to a follower's fetch: the batches past the fetch offset and the leader's offsets."""

    records: bytes | memoryview
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


class LeaderLink(Protocol):
    """The calls a follower makes to its leader (Ray calls to the leader's replica in the broker)."""

    def epoch_end_offset(self, epoch: int) -> tuple[int, int]:
        """The requested epoch's `(epoch, end offset)` on the leader, asked in the leader epoch the link was made for
        (`FencedLeaderEpochError`, `UnknownLeaderEpochError` or `NotLeaderOrFollowerError` from a replica that does
        not lead in it)."""
        ...

    def replicate(self, offset: int, max_bytes: int, max_wait_ms: int) -> ReplicaFetch:
        """The follower's fetch from `offset` (`OffsetOutOfRangeError` outside the leader's log)."""
        ...

    def log_start_offset(self) -> int:
        """The leader's log start offset."""
        ...

    def share(self, member: SharedFetchMember) -> bool:
        """Adds `member` to the fetch this process shares with the other partitions it follows from the same leader
        process; False if the link shares none (the follower fetches alone)."""
        ...

    def close(self) -> None:
        """The fetcher is done with the link: it releases what it holds (connections)."""
        ...


class SharedFetchMember(Protocol):
    """A partition in a shared fetch (`LeaderLink.share`); see the module docstring."""

    @property
    def max_bytes(self) -> int:
        """The most bytes of records a fetch asks for this partition (`replica.fetch.max.bytes`)."""
        ...

    def fetch_offset(self) -> int | None:
        """Where the next fetch of this partition starts; None: the partition leaves the fetch."""
        ...

    def take(self, fetched: ReplicaFetch) -> None:
        """Applies the leader's answer for this partition (step 2), or drops it once the fetcher stopped; raises a
        `RaybrokerError` the log raised."""
        ...

    def leave(self, error: RaybrokerError | None) -> None:
        """The shared fetch no longer fetches this partition: `error` the leader's refusal, None if it asked to
        leave."""
        ...


@dataclass(frozen=True, slots=True)
class ReplicaSettings:
    """The broker's replication settings under Kafka's names (`replica.lag.time.max.ms`, `replica.fetch.max.bytes`,
    `replica.fetch.wait.max.ms`, `replica.fetch.backoff.ms`, `replica.fetch.response.max.bytes`), with Kafka's
    defaults."""

    lag_time_max_ms: int = 30_000
    fetch_max_bytes: int = 1_048_576
    fetch_wait_max_ms: int = 500
    fetch_backoff_ms: int = 1_000
    fetch_response_max_bytes: int = 10_485_760

    @classmethod
    def from_broker_config(cls, config: BrokerConfig) -> ReplicaSettings:
        return cls(
            config.replica_lag_time_max_ms,
            config.replica_fetch_max_bytes,
            config.replica_fetch_wait_max_ms,
            config.replica_fetch_backoff_ms,
            config.replica_fetch_response_max_bytes,
        )


class ReplicaFetcher:
    """Follows one leader in one leader epoch until `stop`; see the module docstring."""

    def __init__(
        self,
        name: str,
        log: Log,
        leader: LeaderLink,
        settings: ReplicaSettings,
        on_change: Callable[[], None],
        *,
        in_sync: Callable[[], bool] = lambda: True,
        throttle: Callable[[int], float] | None = None,
        appended: Callable[[int], None] = lambda size_bytes: None,
    ) -> None:
        """`in_sync()` says whether this replica is in its partition's ISR now; `throttle(recorded)` records the bytes
        the last fetch of a replica out of the ISR copied and answers how long to hold off (None: never throttled);
        `appended(size_bytes)` is told the bytes of each fetch appended."""
        self._name = name
        self._log = log
        self._leader = leader
        self._settings = settings
        self._on_change = on_change
        self._in_sync = in_sync
        self._throttle = throttle
        self._appended = appended
        self._stopped = threading.Event()
        # Held while the loop changes the log, and by `stop`: no change begins once `stop` returned.
        self._changing = threading.Lock()
        self._unrecorded = 0
        self._membership: _Membership | None = None
        self._thread = threading.Thread(target=self._run, name=f"replica-fetcher-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Ends the loop: once this returns, the log is not changed again (a change under way, one append or
        truncation, ends first; an answer still in flight is dropped). Does not wait for the thread, whose call in
        flight the leader answers within its wait."""
        with self._changing:
            self._stopped.set()
            if self._membership is not None:
                self._membership.left.set()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def _run(self) -> None:
        try:
            self._follow()
        finally:
            self._leader.close()

    def _follow(self) -> None:
        truncated = False
        while not self._stopped.is_set():
            try:
                if not truncated:
                    self.truncate_to_leader()
                    truncated = True
                if not self._fetch_shared():
                    self.fetch_once()
            except OffsetOutOfRangeError:
                try:
                    truncated = self._restart_at_leader_start()
                except RaybrokerError as exc:
                    self._back_off(exc)
                    truncated = False
            except RaybrokerError as exc:
                self._back_off(exc)
                truncated = False

    def _back_off(self, error: RaybrokerError) -> None:
        logger.warning("%s: a call to the leader failed, retrying: %s", self._name, error)
        self._stopped.wait(self._settings.fetch_backoff_ms / 1000)

    def truncate_to_leader(self) -> None:
        """Step 1 of the module docstring."""
        log = self._log
        while not self._stopped.is_set():
            entries = log.epoch_entries()
            asked = entries[-1].epoch if entries else UNDEFINED_EPOCH
            if asked == UNDEFINED_EPOCH and log.log_end_offset == log.log_start_offset:
                return
            leader_epoch, leader_end = self._leader.epoch_end_offset(asked)
            with self._changing:
                if self._stopped.is_set():
                    return
                state = truncation_state(
                    leader_epoch, leader_end, log.end_offset_for_epoch, log.log_end_offset, log.high_watermark
                )
                truncated = log.truncate_to(state.offset)
            if truncated:
                logger.warning("%s: truncated to offset %d, where it parts from the leader", self._name, state.offset)
                self._on_change()
            if state.completed:
                return

    def _fetch_shared(self) -> bool:
        """Step 2 in the fetch the link shares, until the partition leaves it: raises the leader's error it left
        with; False if the link shares no fetch or the follower quota may hold this replica off (it fetches alone)."""
        if self._throttled():
            return False
        membership = _Membership(self)
        with self._changing:
            if self._stopped.is_set():
                return True
            self._membership = membership
        if not self._leader.share(membership):
            return False
        membership.left.wait()
        if membership.error is not None:
            raise membership.error
        return True

    def _throttled(self) -> bool:
        """Whether the follower quota may hold this replica off: out of the ISR, under a quota."""
        return self._throttle is not None and not self._in_sync()

    def _shared_offset(self) -> int | None:
        """`SharedFetchMember.fetch_offset`: the log end offset; None once stopped or throttled."""
        if self._stopped.is_set() or self._throttled():
            return None
        return self._log.log_end_offset

    def fetch_once(self) -> None:
        """Step 2 of the module docstring, unless the follower quota holds this replica off."""
        throttle = self._throttle if self._throttled() else None
        if throttle is not None:
            hold_off_s = throttle(self._unrecorded)
            self._unrecorded = 0
            if hold_off_s > 0:
                self._stopped.wait(hold_off_s)
                return
        fetched = self._leader.replicate(
            self._log.log_end_offset, self._settings.fetch_max_bytes, self._settings.fetch_wait_max_ms
        )
        if throttle is not None:
            self._unrecorded += len(whole_batches(fetched.records))
        self._apply(fetched)

    def _apply(self, fetched: ReplicaFetch) -> None:
        """Appends the whole batches of a leader's answer and takes its offsets, unless stopped (step 2); tells
        `on_change` if the log changed (a shared fetch answers every partition it fetches, most with nothing new)."""
        log = self._log
        records = whole_batches(fetched.records)
        with self._changing:
            if self._stopped.is_set():
                return
            before = (log.log_end_offset, log.high_watermark, log.log_start_offset)
            if records:
                first_offset = next(iter_any_batches(records)).base_offset
                if first_offset < log.log_end_offset == log.log_start_offset:
                    # Restarted empty at a leader's log start inside a batch: the log starts where that batch does.
                    log.truncate_fully_and_start_at(first_offset)
                log.append_as_follower(records)
                self._appended(len(records))
            log.update_high_watermark(max(log.high_watermark, min(fetched.high_watermark, log.log_end_offset)))
            if fetched.log_start_offset > log.log_start_offset:
                log.maybe_increment_log_start_offset(min(fetched.log_start_offset, log.high_watermark))
            changed = (log.log_end_offset, log.high_watermark, log.log_start_offset) != before
        if changed:
            self._on_change()

    def _restart_at_leader_start(self) -> bool:
        """Step 3: True if the log restarted at the leader's log start; False (truncate first) if the follower's
        offset was past the leader's end instead."""
        start = self._leader.log_start_offset()
        with self._changing:
            if self._stopped.is_set() or self._log.log_end_offset >= start:
                return False
            logger.warning(
                "%s: the leader starts at %d, past this replica's end: restarting empty there", self._name, start
            )
            self._log.truncate_fully_and_start_at(start)
        self._on_change()
        return True


class _Membership:
    """One stay of a `ReplicaFetcher`'s partition in a shared fetch (its `SharedFetchMember`): `left` is set when
    the fetch hands the partition back, with `error`, or when the fetcher stops."""

    def __init__(self, fetcher: ReplicaFetcher) -> None:
        self._fetcher = fetcher
        self.left = threading.Event()
        self.error: RaybrokerError | None = None

    @property
    def max_bytes(self) -> int:
        return self._fetcher._settings.fetch_max_bytes

    def fetch_offset(self) -> int | None:
        return None if self.left.is_set() else self._fetcher._shared_offset()

    def take(self, fetched: ReplicaFetch) -> None:
        self._fetcher._apply(fetched)

    def leave(self, error: RaybrokerError | None) -> None:
        self.error = error
        self.left.set()


def whole_batches(records: bytes | memoryview) -> bytes | memoryview:
    """`records` without a trailing partial batch: a fetch stops at `replica.fetch.max.bytes`, which may fall inside
    a batch (as Kafka's reads do); the rest comes with the next fetch."""
    size = sum(batch.size_in_bytes for batch in iter_any_batches(records))
    return records if size == len(records) else records[:size]
