"""A broker's replication quotas (`actors.core.quotas.replication_quotas`), plain, no Ray, by a mock clock: only a
throttled replica is held off, once the bytes recorded take the rate past the bound, and for no longer than
`replica.fetch.backoff.ms`; the controller's throttles replace the static rates and the throttled partitions."""

from __future__ import annotations

from actors.core.quotas.replication_quotas import (
    ALL_PARTITIONS,
    FOLLOWER,
    LEADER,
    NO_THROTTLES,
    ReplicationQuotas,
    ReplicationThrottles,
)
from storage.clock import MockClock
from storage.config.broker_config import BrokerConfig

# Two samples of one second: a first burst is measured against one second.
CONFIG = BrokerConfig.from_properties(
    {"replication.quota.window.num": "2", "replication.quota.window.size.seconds": "1"}
)


def quotas(clock: MockClock, throttles: ReplicationThrottles) -> ReplicationQuotas:
    made = ReplicationQuotas(CONFIG, clock.milliseconds)
    made.update(throttles)
    return made


def test_a_replica_not_throttled_is_never_held_off() -> None:
    clock = MockClock()
    held = quotas(clock, ReplicationThrottles(1000, 1000, frozenset({("t", 0)}), frozenset()))
    assert held.admit(LEADER, "t", 1, 10**9) == 0
    assert held.admit(FOLLOWER, "t", 0, 10**9) == 0
    assert held.rate(LEADER) == 0


def test_a_throttled_replica_is_held_off_once_past_its_rate() -> None:
    clock = MockClock()
    held = quotas(clock, ReplicationThrottles(None, 10_000, frozenset(), frozenset({("t", 0)})))
    assert held.admit(FOLLOWER, "t", 0, 0) == 0
    assert held.admit(FOLLOWER, "t", 0, 9_000) == 0
    hold_off_s = held.admit(FOLLOWER, "t", 0, 11_000)
    assert 0 < hold_off_s <= CONFIG.replica_fetch_backoff_ms / 1000
    clock.sleep(3_000)
    assert held.admit(FOLLOWER, "t", 0, 0) == 0
    assert held.rate(FOLLOWER) == 0


def test_far_past_the_rate_holds_off_for_the_fetch_backoff_at_most() -> None:
    clock = MockClock()
    held = quotas(clock, ReplicationThrottles(1_000, None, frozenset({("t", ALL_PARTITIONS)}), frozenset()))
    assert held.admit(LEADER, "t", 7, 10**9) == CONFIG.replica_fetch_backoff_ms / 1000


def test_the_static_rate_applies_until_the_controller_sets_one() -> None:
    clock = MockClock()
    static = BrokerConfig.from_properties(
        {
            "follower.replication.throttled.rate": "1000",
            "replication.quota.window.num": "2",
            "replication.quota.window.size.seconds": "1",
        }
    )
    held = ReplicationQuotas(static, clock.milliseconds)
    held.update(ReplicationThrottles(None, None, frozenset(), frozenset({("t", 0)})))
    assert held.admit(FOLLOWER, "t", 0, 5_000) > 0
    held.update(ReplicationThrottles(None, 10**9, frozenset(), frozenset({("t", 0)})))
    assert held.admit(FOLLOWER, "t", 0, 0) == 0
    held.update(NO_THROTTLES)
    assert held.admit(FOLLOWER, "t", 0, 10**9) == 0
