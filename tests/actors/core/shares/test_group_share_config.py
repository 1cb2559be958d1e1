"""Share groups' settings against Kafka 4.2's `ShareGroupConfig`, `GroupCoordinatorConfig` and `GroupConfig`: the
defaults, the bounds of each broker key, the min/default/max rules, and a group's settings held to the broker's
bounds with Kafka's messages."""

from __future__ import annotations

import pytest

from actors.core.shares.group_share_config import GroupShareConfig, ResolvedShareConfig
from storage.config.share_group_config import ShareGroupConfig
from storage.errors import InvalidConfigError


def test_defaults_are_kafka_4_2s() -> None:
    config = ShareGroupConfig()
    assert config.group_share_delivery_count_limit == 5
    assert config.group_share_partition_max_record_locks == 2000
    assert config.group_share_record_lock_duration_ms == 30000
    assert (config.group_share_min_record_lock_duration_ms, config.group_share_max_record_lock_duration_ms) == (
        15000,
        60000,
    )
    assert (config.group_share_session_timeout_ms, config.group_share_heartbeat_interval_ms) == (45000, 5000)
    assert config.group_share_max_size == 200
    assert GroupShareConfig().resolve(config) == ResolvedShareConfig()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("group_share_delivery_count_limit", 1),
        ("group_share_delivery_count_limit", 11),
        ("group_share_partition_max_record_locks", 99),
        ("group_share_partition_max_record_locks", 10001),
        ("group_share_record_lock_duration_ms", 999),
        ("group_share_min_record_lock_duration_ms", 30001),
        ("group_share_max_record_lock_duration_ms", 29999),
        ("group_share_max_size", 9),
    ],
)
def test_broker_keys_out_of_bounds_are_refused(key: str, value: int) -> None:
    """`ConfigDef.Range.between` of each key in Kafka's `ShareGroupConfig.CONFIG_DEF`."""
    with pytest.raises(InvalidConfigError):
        ShareGroupConfig(**{key: value})


def test_the_lock_duration_must_lie_between_its_min_and_max() -> None:
    """Kafka's `ShareGroupConfig.validate`."""
    with pytest.raises(InvalidConfigError, match=r"must be greater than or equal to group\.share\.min\.record\.lock"):
        ShareGroupConfig(group_share_record_lock_duration_ms=10000)
    with pytest.raises(InvalidConfigError, match=r"must be less than or equal to group\.share\.max\.record\.lock"):
        ShareGroupConfig(group_share_record_lock_duration_ms=70000)


@pytest.mark.parametrize(
    ("group", "message"),
    [
        (GroupShareConfig(share_record_lock_duration_ms=14999), "share.record.lock.duration.ms must be greater"),
        (GroupShareConfig(share_record_lock_duration_ms=60001), "share.record.lock.duration.ms must be less"),
        (GroupShareConfig(share_session_timeout_ms=44999), "share.session.timeout.ms must be greater"),
        (GroupShareConfig(share_heartbeat_interval_ms=15001), "share.heartbeat.interval.ms must be less"),
        (GroupShareConfig(share_auto_offset_reset="none"), "share.auto.offset.reset"),
    ],
)
def test_group_settings_outside_the_brokers_bounds_are_refused(group: GroupShareConfig, message: str) -> None:
    """Kafka's `GroupConfig.validate`: a group's share settings within the broker's min and max."""
    with pytest.raises(InvalidConfigError, match=message):
        group.resolve(ShareGroupConfig())


def test_a_groups_settings_override_the_brokers() -> None:
    resolved = GroupShareConfig(
        share_record_lock_duration_ms=15000, share_heartbeat_interval_ms=6000, share_auto_offset_reset="earliest"
    ).resolve(ShareGroupConfig(group_share_delivery_count_limit=3))
    assert resolved == ResolvedShareConfig(
        delivery_count_limit=3, record_lock_duration_ms=15000, heartbeat_interval_ms=6000, auto_offset_reset="earliest"
    )


def test_kafka_4_3s_delivery_count_limit_keys() -> None:
    """Kafka 4.3's `ShareGroupConfig`: `group.share.min.delivery.count.limit` (2, 2..5) and
    `group.share.max.delivery.count.limit` (10, 5..25) bound a group's limit, and the broker's limit between them."""
    config = ShareGroupConfig()
    assert (config.group_share_min_delivery_count_limit, config.group_share_max_delivery_count_limit) == (2, 10)
    for key, value in (
        ("group_share_min_delivery_count_limit", 1),
        ("group_share_min_delivery_count_limit", 6),
        ("group_share_max_delivery_count_limit", 4),
        ("group_share_max_delivery_count_limit", 26),
    ):
        with pytest.raises(InvalidConfigError):
            ShareGroupConfig(**{key: value})
    with pytest.raises(InvalidConfigError) as refused:
        ShareGroupConfig(group_share_delivery_count_limit=3, group_share_min_delivery_count_limit=4)
    assert str(refused.value) == (
        "group.share.delivery.count.limit must be greater than or equal to group.share.min.delivery.count.limit"
    )
    with pytest.raises(InvalidConfigError) as refused:
        ShareGroupConfig(group_share_delivery_count_limit=8, group_share_max_delivery_count_limit=7)
    assert str(refused.value) == (
        "group.share.max.delivery.count.limit must be greater than or equal to group.share.delivery.count.limit"
    )


def test_a_groups_delivery_count_limit_overrides_the_brokers_within_its_bounds() -> None:
    broker = ShareGroupConfig(group_share_max_delivery_count_limit=25)
    assert GroupShareConfig(share_delivery_count_limit=25).resolve(broker).delivery_count_limit == 25
    assert GroupShareConfig().resolve(broker).delivery_count_limit == 5
    with pytest.raises(InvalidConfigError, match=r"share\.delivery\.count\.limit must be less than or equal to"):
        GroupShareConfig(share_delivery_count_limit=11).resolve(ShareGroupConfig())
    with pytest.raises(InvalidConfigError, match=r"share\.isolation\.level"):
        GroupShareConfig(share_isolation_level="committed").resolve(ShareGroupConfig())
