"""The group coordinator's copy of groups' own configs (`actors.core.groups.group_config_cache`), plain: the newest
version wins whatever order the controller's news arrive in, and what a share group and a consumer-protocol group read
from it, the broker's values where the group sets none."""

from __future__ import annotations

from actors.core.controller.group_config_store import GroupConfigVersion
from actors.core.groups.group_config_cache import GroupConfigCache
from actors.core.shares.group_share_config import GroupShareConfig
from storage.config.group_protocol_config import GroupProtocolConfig

PROTOCOL = GroupProtocolConfig(group_consumer_heartbeat_interval_ms=6000, group_consumer_min_heartbeat_interval_ms=5000)


def test_the_newest_version_wins_in_any_order_of_arrival() -> None:
    cache = GroupConfigCache({"g": GroupConfigVersion(5, {"share.auto.offset.reset": "earliest"})}, PROTOCOL)
    cache.update("g", GroupConfigVersion(3, {}))
    assert cache.configs("g") == {"share.auto.offset.reset": "earliest"}
    cache.update("g", GroupConfigVersion(9, {}))
    cache.update("g", GroupConfigVersion(7, {"share.record.lock.duration.ms": "20000"}))
    assert cache.configs("g") == {}
    assert cache.configs("never") == {}


def test_groups_read_their_own_keys_else_the_brokers() -> None:
    cache = GroupConfigCache({}, PROTOCOL)
    cache.update(
        "g",
        GroupConfigVersion(
            1,
            {
                "share.auto.offset.reset": "earliest",
                "share.record.lock.duration.ms": "20000",
                "share.isolation.level": "read_committed",
                "share.delivery.count.limit": "7",
                "consumer.session.timeout.ms": "50000",
            },
        ),
    )
    assert cache.share_config("g") == GroupShareConfig(
        share_record_lock_duration_ms=20000,
        share_auto_offset_reset="earliest",
        share_isolation_level="read_committed",
        share_delivery_count_limit=7,
    )
    assert cache.share_config("other") == GroupShareConfig()
    assert cache.consumer_timeouts("g") == (50000, 6000)
    assert cache.consumer_timeouts("other") == (45000, 6000)
