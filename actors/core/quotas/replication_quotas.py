"""A broker's replication throttles, as Kafka's `ReplicationQuotaManager` applies them during a reassignment.

Two quotas per broker, each a byte rate over Kafka's replication sensor (`replication.quota.window.num` samples of
`replication.quota.window.size.seconds`, 11 x 1 s by default, `actors.core.quotas.quota_rate.SampledRate`):

- the **leader** quota (`leader.replication.throttled.rate`) bounds what this broker's leaders send to followers of
  the replicas its topics list in `leader.replication.throttled.replicas`;
- the **follower** quota (`follower.replication.throttled.rate`) bounds what this broker's followers fetch for the
  replicas listed in `follower.replication.throttled.replicas`.

As in Kafka, a replica in its partition's ISR is never throttled, so a move never slows the replicas that producers'
`acks=all` wait for: only the copy of a replica being added (or catching up) is. While a quota's rate is above its
bound, a throttled leader answers its follower's fetch with no records after the fetch's wait (Kafka's fetch
purgatory), and a throttled follower skips its fetch for as long as the rate needs to fall back (at most
`replica.fetch.backoff.ms`). The bytes sent or fetched for throttled replicas are recorded; others are not.

The controller turns the configs into one broker's `ReplicationThrottles` (its rates set at run time, and the
partitions throttled on it, by the broker's `node.id`); `ReplicationQuotas.update` takes them. A replica whose
partition they do not cover (`ReplicationThrottles.covers`) is never held off and its bytes are not recorded, so a
process that knows the throttles need not ask the quotas for it at all.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from actors.core.quotas.quota_rate import SampledRate
from storage.config.broker_config import BrokerConfig

LEADER = "leader"
FOLLOWER = "follower"
SIDES = (LEADER, FOLLOWER)
# A throttled-replicas entry for every partition of a topic (the config's `*`).
ALL_PARTITIONS = -1


@dataclass(frozen=True, slots=True)
class ReplicationThrottles:
    """One broker's throttles as the controller computes them: each side's rate set at run time (None: the broker's
    static config applies) and the `(topic, partition)` pairs throttled on that side (`ALL_PARTITIONS`: the whole
    topic)."""

    leader_rate: int | None
    follower_rate: int | None
    leader: frozenset[tuple[str, int]]
    follower: frozenset[tuple[str, int]]

    def covers(self, side: str, topic: str, partition: int) -> bool:
        """Whether the partition's replicas are throttled on `side` ("leader" or "follower") of this broker."""
        partitions = self.leader if side == LEADER else self.follower
        return (topic, partition) in partitions or (topic, ALL_PARTITIONS) in partitions


NO_THROTTLES = ReplicationThrottles(None, None, frozenset(), frozenset())


class _Quota:
    """One side's bound and sensor."""

    def __init__(self, bound: int, samples: int, window_ms: int) -> None:
        self.bound = bound
        self.sensor = SampledRate(samples, window_ms)


class ReplicationQuotas:
    """One broker's leader and follower replication quotas; see the module docstring. Thread-safe: every replica of
    the broker records into the same sensors."""

    def __init__(self, config: BrokerConfig, clock_ms: Callable[[], int]) -> None:
        self._static = {
            LEADER: config.leader_replication_throttled_rate,
            FOLLOWER: config.follower_replication_throttled_rate,
        }
        self._backoff_s = config.replica_fetch_backoff_ms / 1000
        self._clock_ms = clock_ms
        window_ms = config.replication_quota_window_size_seconds * 1000
        samples = config.replication_quota_window_num
        self._quotas = {side: _Quota(self._static[side], samples, window_ms) for side in SIDES}
        self._lock = threading.Lock()
        self.throttles = NO_THROTTLES

    def update(self, throttles: ReplicationThrottles) -> None:
        """Takes the controller's newest throttles for this broker."""
        with self._lock:
            self.throttles = throttles
            for side, rate in ((LEADER, throttles.leader_rate), (FOLLOWER, throttles.follower_rate)):
                self._quotas[side].bound = self._static[side] if rate is None else rate

    def admit(self, side: str, topic: str, partition: int, recorded: int) -> float:
        """One fetch of a replica out of its ISR on `side`: records `recorded` bytes (what the last fetch moved) if
        the replica is throttled, then answers how many seconds it must hold off before moving more (0: go on;
        never more than `replica.fetch.backoff.ms`). A replica that is not throttled always gets 0."""
        with self._lock:
            quota = self._quotas[side]
            if not self.throttles.covers(side, topic, partition):
                return 0.0
            now_ms = self._clock_ms()
            if quota.bound <= 0:
                return self._backoff_s
            throttle_ms = quota.sensor.record(recorded, now_ms, quota.bound)
            if throttle_ms <= 0 and quota.sensor.rate(now_ms) <= quota.bound:
                return 0.0
            return min(max(throttle_ms, 1) / 1000, self._backoff_s)

    def rate(self, side: str) -> float:
        """The bytes a second `side`'s throttled replicas moved over the sensor's window (Kafka's
        `LeaderReplication`/`FollowerReplication` byte-rate metrics)."""
        with self._lock:
            return self._quotas[side].sensor.rate(self._clock_ms())
