"""What a partition's leader knows of its followers (Kafka's `Partition` leader state and `Replica` objects).

Each follower's log end offset is the offset of its last fetch: a follower asks for what it lacks, so everything
below it is on its disk. The high watermark is the smallest log end offset in the ISR, the leader's own included:
every in-sync replica has every record below it, so a consumer may read up to it and an `acks=all` write is
acknowledged once it passes its last offset. While an ISR expansion is asked for, the joining followers count too
(Kafka's "maximal ISR"): the high watermark must not pass what a replica about to be in sync has.

In sync, by Kafka's rule (`replica.lag.time.max.ms`): a follower is caught up at a fetch that asks for the leader's
log end offset, and also, at a later fetch, up to the time of the previous one if it then asked for at least the
log end offset the leader had then. A follower in the ISR not caught up for longer than the lag leaves it
(`isr_to_shrink`); one outside whose log end offset reached the high watermark, and the start of the leader's epoch,
joins it (`isr_to_expand`), once it fetched since it left (a broker that died left every ISR, and never fetches).
The leader does not change its ISR itself: it asks the controller (`ControllerActor.alter_partition`), which pushes
the result back to every replica, and it asks for one change at a time (`pending`), at most one every
`PENDING_TIMEOUT_MS` until that answer arrives. The followers an expansion asked for count in the high watermark
until the controller answers, across later asks too (which ask for them again): an unanswered expansion may have
been taken, and a replica in the controller's ISR may be elected, so the high watermark must never pass what it has
(Kafka's leader never drops a pending AlterPartition unanswered). A change the controller refuses (`refused`) is no
longer pending: the followers a refused expansion would have added no longer count in the high watermark, and must
fetch again before they are asked for again. A replica on a node Ray declared dead keeps fetching while its
processes live on; asked for with every later expansion and refused each time (INELIGIBLE_REPLICA), it would
otherwise hold the high watermark at its last fetch and keep every other follower out of the ISR for the rest of the
leader epoch.
"""

from __future__ import annotations

from dataclasses import dataclass

from actors.core.replication.leader_and_isr import LeaderAndIsr

# An ISR change asked of the controller and not yet answered blocks the next one this long at most.
PENDING_TIMEOUT_MS = 5_000


@dataclass(slots=True)
class FollowerProgress:
    """One follower as the leader sees it (Kafka's `Replica` state)."""

    log_end_offset: int
    last_caught_up_ms: int
    last_fetch_ms: int
    last_fetch_leader_log_end_offset: int
    # False from the controller's removal of the follower from the ISR, or its refusal to add it, until the
    # follower's next fetch (see `isr_to_expand`).
    alive_since_removal: bool = True


class LeaderState:
    """The leader's view of its followers in one leader epoch; see the module docstring. Not thread-safe: the
    partition actor calls it under its own lock."""

    def __init__(self, me: str, state: LeaderAndIsr, leader_epoch_start_offset: int, now_ms: int) -> None:
        self.me = me
        self.state = state
        self._epoch_start = leader_epoch_start_offset
        # Kafka starts every follower's clock at the election, so one that fetches soon stays in the ISR.
        self._followers = {node: FollowerProgress(-1, now_ms, now_ms, -1) for node in state.replicas if node != me}
        self._pending_since_ms: int | None = None
        self._pending_isr: tuple[str, ...] | None = None
        self._joining: tuple[str, ...] = ()

    @property
    def epoch_start_offset(self) -> int:
        """The log end offset at which this leader's epoch began (Kafka's `leaderEpochStartOffsetOpt`)."""
        return self._epoch_start

    def update(self, state: LeaderAndIsr, now_ms: int) -> None:
        """A newer state from the controller in the same epoch (an ISR change; or a replica moved to the node its
        disks came back on, tracked from now on): the change asked for is answered."""
        for node in self.state.isr:
            if node not in state.isr and node in self._followers:
                self._followers[node].alive_since_removal = False
        self.state = state
        self._pending_since_ms = None
        self._pending_isr = None
        self._joining = ()
        for node in state.replicas:
            if node != self.me and node not in self._followers:
                self._followers[node] = FollowerProgress(-1, now_ms, now_ms, -1)
        for node in [node for node in self._followers if node not in state.replicas]:
            del self._followers[node]

    def follower_fetched(self, node: str, fetch_offset: int, leader_log_end_offset: int, now_ms: int) -> bool:
        """Records a follower's fetch; False if `node` is no replica of this partition."""
        progress = self._followers.get(node)
        if progress is None:
            return False
        if fetch_offset >= leader_log_end_offset:
            progress.last_caught_up_ms = now_ms
        elif fetch_offset >= progress.last_fetch_leader_log_end_offset >= 0:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        progress.log_end_offset = fetch_offset
        progress.last_fetch_ms = now_ms
        progress.alive_since_removal = True
        progress.last_fetch_leader_log_end_offset = leader_log_end_offset
        return True

    def high_watermark(self, leader_log_end_offset: int) -> int:
        """The smallest log end offset among the in-sync replicas (and those asked to join), the leader's included."""
        ends = [leader_log_end_offset]
        counted = (*self.state.isr, *self._joining)
        ends.extend(max(self._followers[node].log_end_offset, 0) for node in counted if node in self._followers)
        return min(ends)

    def follower_log_end_offset(self, node: str) -> int:
        progress = self._followers.get(node)
        return -1 if progress is None else progress.log_end_offset

    def _may_ask(self, now_ms: int) -> bool:
        return self._pending_since_ms is None or now_ms - self._pending_since_ms >= PENDING_TIMEOUT_MS

    def isr_to_expand(self, high_watermark: int, now_ms: int) -> tuple[str, ...] | None:
        """The ISR with the followers that caught up added, if any did and no change is pending, and with those
        asked for earlier and not answered yet. A follower the controller removed from the ISR must fetch again
        first: Kafka's leader proposes only replicas of live brokers (`isReplicaIsrEligible`), and a removed
        follower's last offset, from before its broker died, would otherwise make it look caught up, counted in the
        high watermark while the controller refuses it."""
        joining = [
            node
            for node, progress in self._followers.items()
            if node not in self.state.isr
            and progress.alive_since_removal
            and progress.log_end_offset >= high_watermark
            and progress.log_end_offset >= self._epoch_start
        ]
        if not joining or not self._may_ask(now_ms):
            return None
        self._pending_since_ms = now_ms
        self._joining = tuple(node for node in self.state.replicas if node in joining or node in self._joining)
        self._pending_isr = tuple(
            node for node in self.state.replicas if node in self.state.isr or node in self._joining
        )
        return self._pending_isr

    def isr_to_shrink(self, leader_log_end_offset: int, lag_ms: int, now_ms: int) -> tuple[str, ...] | None:
        """The ISR without the followers that have not caught up for `lag_ms`, if any and no change is pending; the
        followers asked for earlier and not answered yet are asked for again (unless they lag too), and go on
        counting in the high watermark until the controller's answer."""
        lagging = [
            node
            for node in (*self.state.isr, *self._joining)
            if node in self._followers
            and self._followers[node].log_end_offset != leader_log_end_offset
            and now_ms - self._followers[node].last_caught_up_ms > lag_ms
        ]
        if not lagging or not self._may_ask(now_ms):
            return None
        self._pending_since_ms = now_ms
        self._pending_isr = tuple(
            node
            for node in self.state.replicas
            if (node in self.state.isr or node in self._joining) and node not in lagging
        )
        return self._pending_isr

    def refused(self, isr: tuple[str, ...]) -> bool:
        """The controller refused the ISR `isr` this leader asked for: if that is the change pending, it is no longer,
        and the followers it would have added neither count in the high watermark nor are asked for again before
        their next fetch; the next change is asked for `PENDING_TIMEOUT_MS` after this one at the earliest, as
        after an unanswered one (see the module docstring). True if it was the change pending."""
        if self._pending_isr != isr:
            return False
        for node in self._joining:
            if node in isr and node in self._followers:
                self._followers[node].alive_since_removal = False
        self._pending_isr = None
        self._joining = tuple(node for node in self._joining if node not in isr)
        return True
