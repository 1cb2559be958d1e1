"""A follower's link to its leader in the same process (`LeaderLink` over the leader's `Replica`): what the partition
actor's Ray link does over Ray, for the in-process broker and the replica tests. The leader replica is looked up by
(topic, partition, node) on every call, as the Ray link finds the leader's actor again after a failure: a leader
replica that closed answers its stop error, and the fetcher backs off and retries."""

from __future__ import annotations

from collections.abc import Callable

from actors.core.replication.follower import ReplicaFetch, SharedFetchMember
from actors.core.replication.leader_and_isr import LeaderAndIsr
from actors.core.replication.replica import Replica


class LocalLeaderLink:
    """Follower `me`'s calls to the leader of `state`, found with `find_replica(topic, partition, node)`."""

    def __init__(self, state: LeaderAndIsr, me: str, find_replica: Callable[[str, int, str], Replica]) -> None:
        self._state = state
        self._me = me
        self._find_replica = find_replica

    def _leader(self) -> Replica:
        return self._find_replica(self._state.topic, self._state.partition, self._state.leader)

    def epoch_end_offset(self, epoch: int) -> tuple[int, int]:
        return self._leader().epoch_end_offset(epoch, self._state.leader_epoch)

    def replicate(self, offset: int, max_bytes: int, max_wait_ms: int) -> ReplicaFetch:
        return self._leader().replicate(self._me, offset, max_bytes, max_wait_ms, self._state.leader_epoch)

    def log_start_offset(self) -> int:
        return self._leader().log.log_start_offset

    def share(self, member: SharedFetchMember) -> bool:
        """No shared fetch: an in-process follower's fetch is a call, with nothing to share."""
        return False

    def close(self) -> None:
        """Nothing to release: every call finds the leader again."""
