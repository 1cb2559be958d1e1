"""Share groups' broker settings (KIP-932) under Kafka 4.2's names, defaults and bounds, with Kafka 4.3's bounds of a
group's own delivery count limit: the broker's `group.share.*` keys (Kafka's `ShareGroupConfig` and
`GroupCoordinatorConfig`). `ShareGroupKeys` declares them once; `BrokerConfig`
extends it and derives its `share_group_config`, which checks what Kafka checks. A group's own `share.*` keys, which
these bound, are `actors.core.shares.group_share_config`'s.

| Kafka name                                       | type  | default   | bounds         | meaning                     |
|--------------------------------------------------|-------|-----------|----------------|-----------------------------|
| group.share.delivery.count.limit                 | int   | 5         | 2..10          | deliveries, then archived,  |
|                                                  |       |           |                | unless the group sets its   |
|                                                  |       |           |                | own (**)                    |
| group.share.min.delivery.count.limit (4.3)       | int   | 2         | 2..5           | a group's lower bound       |
| group.share.max.delivery.count.limit (4.3)       | int   | 10        | 5..25          | a group's upper bound       |
| group.share.partition.max.record.locks           | int   | 2000      | 100..10000     | in flight per partition     |
| group.share.record.lock.duration.ms              | int   | 30000     | 1000..3600000  | acquisition lock, unless    |
|                                                  |       |           |                | the group sets its own (*)  |
| group.share.min.record.lock.duration.ms          | int   | 15000     | 1000..30000    | a group's lower bound       |
| group.share.max.record.lock.duration.ms          | int   | 60000     | 30000..3600000 | a group's upper bound       |
| group.share.session.timeout.ms                   | int   | 45000     | >= 1           | no heartbeat: removed       |
| group.share.min.session.timeout.ms               | int   | 45000     | >= 1           | a group's lower bound       |
| group.share.max.session.timeout.ms               | int   | 60000     | >= 1           | a group's upper bound       |
| group.share.heartbeat.interval.ms                | int   | 5000      | >= 1           | a member's heartbeat period |
| group.share.min.heartbeat.interval.ms            | int   | 5000      | >= 1           | a group's lower bound       |
| group.share.max.heartbeat.interval.ms            | int   | 15000     | >= 1           | a group's upper bound       |
| group.share.max.size                             | int   | 200       | 10..1000       | members of one share group  |
| share.coordinator.state.topic.num.partitions     | int   | 50        | >= 1           | state topic partitions      |
| share.coordinator.state.topic.replication.factor | short | 3         | 1..32767       | its replicas (capped)       |
| share.coordinator.state.topic.min.isr            | short | 2         | >= 1           | its min.insync.replicas     |
| share.coordinator.state.topic.segment.bytes      | int   | 104857600 | >= 1           | its segment.bytes           |
| share.coordinator.state.topic.prune.interval.ms  | int   | 300000    | >= 1           | between prunes of the topic |
| share.coordinator.cold.partition.snapshot.interval.ms | int | 300000 | >= 1          | a state not written for so  |
|                                                  |       |           |                | long is written again       |
| errors.deadletterqueue.topic.name.prefix (4.4)   | string| dlq.      |                | what a group's dead-letter  |
|                                                  |       |           |                | topic's name must start with|
|                                                  |       |           |                | ("": any name)              |
| errors.deadletterqueue.auto.create.topics.enable (4.4) | boolean | false |          | a missing dead-letter topic |
|                                                  |       |           |                | is created at its first use |

(*) a group's `share.record.lock.duration.ms`, within the min and max keys.
(**) a group's `share.delivery.count.limit` (Kafka 4.3), within the min and max keys.

Checked as Kafka checks them: min <= default <= max for the lock duration, the heartbeat interval and the session
timeout (Kafka's `ShareGroupConfig.validate` and `GroupCoordinatorConfig`'s requirements), min <= default <= max for
the delivery count limit with Kafka 4.3's messages, and the heartbeat interval below the session timeout. The
`share.coordinator.*` keys are Kafka's `ShareCoordinatorConfig`'s: how `__share_group_state`, where the
share-partitions' durable state is written, is created and kept small (the last two are internal keys in Kafka, with
these defaults and bounds). The `errors.deadletterqueue.*` keys are Kafka 4.4's `GroupCoordinatorConfig` keys of
KIP-1191's dead-letter topics (`actors.core.shares.dead_letters`).
"""

from __future__ import annotations

from dataclasses import dataclass

from storage.config.config_values import check_fields, config_field
from storage.errors import InvalidConfigError


@dataclass(frozen=True)
class ShareGroupKeys:
    """The share groups' broker keys, each declared here only."""

    group_share_delivery_count_limit: int = config_field(5, "int", low=2, high=10)
    group_share_min_delivery_count_limit: int = config_field(2, "int", low=2, high=5)
    group_share_max_delivery_count_limit: int = config_field(10, "int", low=5, high=25)
    group_share_partition_max_record_locks: int = config_field(2000, "int", low=100, high=10000)
    group_share_record_lock_duration_ms: int = config_field(30000, "int", low=1000, high=3600000)
    group_share_min_record_lock_duration_ms: int = config_field(15000, "int", low=1000, high=30000)
    group_share_max_record_lock_duration_ms: int = config_field(60000, "int", low=30000, high=3600000)
    group_share_session_timeout_ms: int = config_field(45000, "int", low=1)
    group_share_min_session_timeout_ms: int = config_field(45000, "int", low=1)
    group_share_max_session_timeout_ms: int = config_field(60000, "int", low=1)
    group_share_heartbeat_interval_ms: int = config_field(5000, "int", low=1)
    group_share_min_heartbeat_interval_ms: int = config_field(5000, "int", low=1)
    group_share_max_heartbeat_interval_ms: int = config_field(15000, "int", low=1)
    group_share_max_size: int = config_field(200, "int", low=10, high=1000)
    share_coordinator_state_topic_num_partitions: int = config_field(50, "int", low=1)
    share_coordinator_state_topic_replication_factor: int = config_field(3, "int", low=1, high=32767)
    share_coordinator_state_topic_min_isr: int = config_field(2, "int", low=1, high=32767)
    share_coordinator_state_topic_segment_bytes: int = config_field(104857600, "int", low=1)
    share_coordinator_state_topic_prune_interval_ms: int = config_field(300000, "int", low=1)
    share_coordinator_cold_partition_snapshot_interval_ms: int = config_field(300000, "int", low=1)
    errors_deadletterqueue_topic_name_prefix: str = config_field("dlq.", "string")
    errors_deadletterqueue_auto_create_topics_enable: bool = config_field(False, "boolean")


@dataclass(frozen=True)
class ShareGroupConfig(ShareGroupKeys):
    """The broker's share group settings (see the module docstring for names, defaults and bounds)."""

    def __post_init__(self) -> None:
        check_fields(self)
        for what in ("record.lock.duration.ms", "session.timeout.ms", "heartbeat.interval.ms"):
            require_between(
                f"group.share.{what}",
                getattr(self, f"group_share_{what.replace('.', '_')}"),
                f"group.share.min.{what}",
                getattr(self, f"group_share_min_{what.replace('.', '_')}"),
                f"group.share.max.{what}",
                getattr(self, f"group_share_max_{what.replace('.', '_')}"),
            )
        # Kafka 4.3's `ShareGroupConfig.validate`, its messages.
        if self.group_share_max_delivery_count_limit < self.group_share_delivery_count_limit:
            raise InvalidConfigError(
                "group.share.max.delivery.count.limit must be greater than or equal to group.share.delivery.count.limit"
            )
        if self.group_share_delivery_count_limit < self.group_share_min_delivery_count_limit:
            raise InvalidConfigError(
                "group.share.delivery.count.limit must be greater than or equal to group.share.min.delivery.count.limit"
            )
        if self.group_share_heartbeat_interval_ms >= self.group_share_session_timeout_ms:
            raise InvalidConfigError(
                "group.share.heartbeat.interval.ms must be less than group.share.session.timeout.ms"
            )


def require_between(name: str, value: int, low_name: str, low: int, high_name: str, high: int) -> None:
    """`InvalidConfigError` with Kafka's message unless `low` <= `value` <= `high` (each bound named by its key)."""
    if value < low:
        raise InvalidConfigError(f"{name} must be greater than or equal to {low_name}")
    if value > high:
        raise InvalidConfigError(f"{name} must be less than or equal to {high_name}")
