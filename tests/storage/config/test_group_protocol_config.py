"""The consumer group protocol's broker keys: Kafka's names, defaults and bounds (Kafka's `GroupCoordinatorConfig`
checks), as `BrokerConfig` reads them from `server.properties`."""

from __future__ import annotations

import pytest

from storage.config.broker_config import BrokerConfig
from storage.errors import InvalidConfigError


def test_kafkas_defaults() -> None:
    config = BrokerConfig.from_properties({}).group_protocol_config
    assert config.group_coordinator_rebalance_protocols == ("classic", "consumer")
    assert config.consumer_protocol_enabled
    assert (config.group_consumer_heartbeat_interval_ms, config.group_consumer_session_timeout_ms) == (5000, 45000)
    assert config.group_consumer_assignors == ("uniform", "range")
    assert config.group_consumer_max_size == 2**31 - 1


def test_the_consumer_protocol_can_be_turned_off() -> None:
    config = BrokerConfig.from_properties({"group.coordinator.rebalance.protocols": "classic"})
    assert not config.group_protocol_config.consumer_protocol_enabled


@pytest.mark.parametrize(
    ("properties", "fragment"),
    [
        ({"group.coordinator.rebalance.protocols": "consumer"}, "must contain the classic protocol"),
        ({"group.coordinator.rebalance.protocols": "classic,share"}, "share not served"),
        ({"group.consumer.assignors": "sticky"}, "group.consumer.assignors"),
        ({"group.consumer.heartbeat.interval.ms": "1000"}, "expected 5000..15000"),
        ({"group.consumer.session.timeout.ms": "70000"}, "expected 45000..60000"),
        ({"group.consumer.min.session.timeout.ms": "50000", "group.consumer.max.session.timeout.ms": "46000"}, "max"),
        (
            {
                "group.consumer.heartbeat.interval.ms": "50000",
                "group.consumer.max.heartbeat.interval.ms": "60000",
            },
            "less than group.consumer.session.timeout.ms",
        ),
        ({"group.consumer.max.size": "0"}, "group.consumer.max.size"),
    ],
)
def test_out_of_bounds_values_are_refused_with_the_key(properties: dict[str, str], fragment: str) -> None:
    with pytest.raises(InvalidConfigError, match=fragment):
        BrokerConfig.from_properties(properties)


def test_lowered_bounds_allow_a_shorter_heartbeat() -> None:
    config = BrokerConfig.from_properties(
        {"group.consumer.heartbeat.interval.ms": "1000", "group.consumer.min.heartbeat.interval.ms": "1000"}
    )
    assert config.group_protocol_config.group_consumer_heartbeat_interval_ms == 1000
