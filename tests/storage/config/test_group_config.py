"""A group's own configs (`storage.config.group_config`) checked as Kafka 4.2's `GroupConfig.validate`: the oracle is
what Kafka 4.2 answered to the same overrides (its messages, copied from its IncrementalAlterConfigs answers, on a
broker with `group.share.heartbeat.interval.ms` 1000 and `group.share.min.heartbeat.interval.ms` 1000)."""

from __future__ import annotations

import pytest

from storage.config.group_config import GROUP_CONFIG_NAMES, defaults, validate
from storage.config.group_protocol_config import GroupProtocolConfig
from storage.config.share_group_config import ShareGroupConfig
from storage.errors import InvalidConfigError

PROTOCOL = GroupProtocolConfig()
SHARE = ShareGroupConfig(group_share_heartbeat_interval_ms=1000, group_share_min_heartbeat_interval_ms=1000)
AUTO_OFFSET_RESET_REFUSED = (
    "Invalid value {0} for configuration share.auto.offset.reset: Invalid value `{0}` for configuration "
    "share.auto.offset.reset. The value must be either 'earliest', 'latest' or of the format "
    "'by_duration:<PnDTnHnMn.nS>'."
)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"no.such": "1"}, "Unknown group config name: no.such"),
        ({"share.auto.offset.reset": "bogus"}, AUTO_OFFSET_RESET_REFUSED.format("bogus")),
        ({"share.auto.offset.reset": "EARLIEST"}, AUTO_OFFSET_RESET_REFUSED.format("EARLIEST")),
        ({"share.auto.offset.reset": "by_duration:-PT1H"}, AUTO_OFFSET_RESET_REFUSED.format("by_duration:-PT1H")),
        (
            {"share.record.lock.duration.ms": "500"},
            "Invalid value 500 for configuration share.record.lock.duration.ms: Value must be at least 1000",
        ),
        (
            {"share.record.lock.duration.ms": "abc"},
            "Invalid value abc for configuration share.record.lock.duration.ms: Not a number of type INT",
        ),
        (
            {"share.record.lock.duration.ms": "2147483648"},
            "Invalid value 2147483648 for configuration share.record.lock.duration.ms: Not a number of type INT",
        ),
        (
            {"share.record.lock.duration.ms": "70000"},
            "share.record.lock.duration.ms must be less than or equal to group.share.max.record.lock.duration.ms",
        ),
        (
            {"share.session.timeout.ms": "1000"},
            "share.session.timeout.ms must be greater than or equal to group.share.min.session.timeout.ms",
        ),
        (
            {"consumer.session.timeout.ms": "0"},
            "Invalid value 0 for configuration consumer.session.timeout.ms: Value must be at least 1",
        ),
        (
            {"streams.num.standby.replicas": "-1"},
            "Invalid value -1 for configuration streams.num.standby.replicas: Value must be at least 0",
        ),
        (
            {"streams.num.standby.replicas": "3"},
            "streams.num.standby.replicas must be less than or equal to group.streams.max.standby.replicas",
        ),
        (
            {"streams.heartbeat.interval.ms": "4000"},
            "streams.heartbeat.interval.ms must be greater than or equal to group.streams.min.heartbeat.interval.ms",
        ),
        (
            {"share.isolation.level": "READ_COMMITTED"},
            "Invalid value READ_COMMITTED for configuration share.isolation.level: String must be one of: "
            "read_committed, read_uncommitted",
        ),
        # Parsed in Kafka's definition order: the session timeout's bad value is reported before the lock's.
        (
            {"share.record.lock.duration.ms": "1", "share.session.timeout.ms": "x"},
            "Invalid value x for configuration share.session.timeout.ms: Not a number of type INT",
        ),
    ],
)
def test_kafkas_refusals_and_messages(overrides: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidConfigError) as refused:
        validate(overrides, PROTOCOL, SHARE)
    assert str(refused.value) == message


def test_accepted_values_are_kept_trimmed_and_the_rest_falls_back_to_the_broker() -> None:
    accepted = {
        "share.auto.offset.reset": " earliest",
        "share.record.lock.duration.ms": "20000",
        "share.heartbeat.interval.ms": "15000",
        "share.session.timeout.ms": "45000",
        "streams.initial.rebalance.delay.ms": "999999",
    }
    assert validate(accepted, PROTOCOL, SHARE) == {**accepted, "share.auto.offset.reset": "earliest"}
    assert set(defaults(PROTOCOL, SHARE)) == GROUP_CONFIG_NAMES
    assert defaults(PROTOCOL, SHARE)["share.heartbeat.interval.ms"] == "1000"


def test_by_duration_passes_kafkas_check_but_is_not_served() -> None:
    with pytest.raises(InvalidConfigError, match="by_duration is not served"):
        validate({"share.auto.offset.reset": "by_duration:PT1H"}, PROTOCOL, SHARE)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("1", "Invalid value 1 for configuration share.delivery.count.limit: Value must be at least 2"),
        ("x", "Invalid value x for configuration share.delivery.count.limit: Not a number of type INT"),
        ("11", "share.delivery.count.limit must be less than or equal to group.share.max.delivery.count.limit"),
    ],
)
def test_kafka_4_3s_delivery_count_limit_refusals(value: str, message: str) -> None:
    """Kafka 4.3's `GroupConfig`: `atLeast(2)`, then within the broker's `group.share.min/max.delivery.count.limit`
    (2 and 10 by default), its messages."""
    with pytest.raises(InvalidConfigError) as refused:
        validate({"share.delivery.count.limit": value}, PROTOCOL, SHARE)
    assert str(refused.value) == message


def test_kafka_4_3s_delivery_count_limit_is_bounded_by_the_brokers_min_and_max() -> None:
    share = ShareGroupConfig(group_share_min_delivery_count_limit=4, group_share_max_delivery_count_limit=20)
    with pytest.raises(InvalidConfigError) as refused:
        validate({"share.delivery.count.limit": "3"}, PROTOCOL, share)
    assert str(refused.value) == (
        "share.delivery.count.limit must be greater than or equal to group.share.min.delivery.count.limit"
    )
    assert validate({"share.delivery.count.limit": " 20"}, PROTOCOL, share) == {"share.delivery.count.limit": "20"}
    assert defaults(PROTOCOL, share)["share.delivery.count.limit"] == "5"
