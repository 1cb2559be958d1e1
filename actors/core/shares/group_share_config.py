"""A share group's own settings (KIP-932) under Kafka 4.2's names: its `share.*` keys (Kafka's `GroupConfig`, set on
the GROUP config resource), which the broker's `group.share.*` keys bound (`storage.config.share_group_config`), and
what a group runs with once both are resolved.

Group keys (`GroupConfig`), each None when the group does not set it and the broker's value applies:
`share.record.lock.duration.ms` (within the broker's min..max), `share.session.timeout.ms` and
`share.heartbeat.interval.ms` (within theirs, the interval below the timeout), `share.auto.offset.reset`
(`latest`, Kafka's default, or `earliest`; Kafka's `by_duration:<ISO-8601>` is not served yet), and
`share.isolation.level` (`read_uncommitted`, Kafka's default, or `read_committed`: the group acquires records only
below the last stable offset and never delivers those of aborted transactions), and Kafka 4.3's
`share.delivery.count.limit` (within the broker's `group.share.min/max.delivery.count.limit`), and Kafka 4.4's
`errors.deadletterqueue.topic.name` and `errors.deadletterqueue.copy.record.enable` (KIP-1191: where the group's
rejected and over-delivered records are written, `actors.core.shares.dead_letters`), which the broker's
`errors.deadletterqueue.topic.name.prefix` and `errors.deadletterqueue.auto.create.topics.enable` accompany.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage.config.group_config import ISOLATION_LEVELS, READ_COMMITTED, READ_UNCOMMITTED
from storage.config.share_group_config import ShareGroupConfig, require_between
from storage.errors import InvalidConfigError

LATEST = "latest"
EARLIEST = "earliest"
AUTO_OFFSET_RESETS = (LATEST, EARLIEST)


@dataclass(frozen=True)
class GroupShareConfig:
    """One share group's own settings (Kafka's `GroupConfig` share keys); None falls back to the broker's value.
    `resolve` checks them against a broker's bounds, as Kafka's `GroupConfig.validate` does."""

    share_record_lock_duration_ms: int | None = None
    share_session_timeout_ms: int | None = None
    share_heartbeat_interval_ms: int | None = None
    share_auto_offset_reset: str = LATEST
    share_isolation_level: str = READ_UNCOMMITTED
    share_delivery_count_limit: int | None = None
    errors_deadletterqueue_topic_name: str = ""
    errors_deadletterqueue_copy_record_enable: bool = False

    def resolve(self, broker: ShareGroupConfig) -> ResolvedShareConfig:
        """The settings that apply to the group on `broker`; `InvalidConfigError` (Kafka's message) if one of the
        group's is outside the broker's bounds."""
        if self.share_auto_offset_reset not in AUTO_OFFSET_RESETS:
            raise InvalidConfigError(
                f"invalid value {self.share_auto_offset_reset!r} for share.auto.offset.reset: "
                f"expected one of {list(AUTO_OFFSET_RESETS)}"
            )
        if self.share_isolation_level not in ISOLATION_LEVELS:
            raise InvalidConfigError(
                f"invalid value {self.share_isolation_level!r} for share.isolation.level: "
                f"expected one of {list(ISOLATION_LEVELS)}"
            )
        lock_ms = _group_value(
            "share.record.lock.duration.ms",
            self.share_record_lock_duration_ms,
            broker.group_share_record_lock_duration_ms,
            "group.share.min.record.lock.duration.ms",
            broker.group_share_min_record_lock_duration_ms,
            "group.share.max.record.lock.duration.ms",
            broker.group_share_max_record_lock_duration_ms,
        )
        session_ms = _group_value(
            "share.session.timeout.ms",
            self.share_session_timeout_ms,
            broker.group_share_session_timeout_ms,
            "group.share.min.session.timeout.ms",
            broker.group_share_min_session_timeout_ms,
            "group.share.max.session.timeout.ms",
            broker.group_share_max_session_timeout_ms,
        )
        heartbeat_ms = _group_value(
            "share.heartbeat.interval.ms",
            self.share_heartbeat_interval_ms,
            broker.group_share_heartbeat_interval_ms,
            "group.share.min.heartbeat.interval.ms",
            broker.group_share_min_heartbeat_interval_ms,
            "group.share.max.heartbeat.interval.ms",
            broker.group_share_max_heartbeat_interval_ms,
        )
        delivery_count_limit = _group_value(
            "share.delivery.count.limit",
            self.share_delivery_count_limit,
            broker.group_share_delivery_count_limit,
            "group.share.min.delivery.count.limit",
            broker.group_share_min_delivery_count_limit,
            "group.share.max.delivery.count.limit",
            broker.group_share_max_delivery_count_limit,
        )
        if heartbeat_ms >= session_ms:
            raise InvalidConfigError("share.session.timeout.ms must be greater than share.heartbeat.interval.ms")
        return ResolvedShareConfig(
            delivery_count_limit=delivery_count_limit,
            max_record_locks=broker.group_share_partition_max_record_locks,
            record_lock_duration_ms=lock_ms,
            session_timeout_ms=session_ms,
            heartbeat_interval_ms=heartbeat_ms,
            auto_offset_reset=self.share_auto_offset_reset,
            isolation_level=self.share_isolation_level,
            dead_letters=DeadLetterSettings(
                self.errors_deadletterqueue_topic_name,
                self.errors_deadletterqueue_copy_record_enable,
                broker.errors_deadletterqueue_topic_name_prefix,
                broker.errors_deadletterqueue_auto_create_topics_enable,
            ),
        )


@dataclass(frozen=True, slots=True)
class DeadLetterSettings:
    """Where a share group's dead letters go (Kafka 4.4, KIP-1191): the group's `errors.deadletterqueue.topic.name`
    ("": none) and `errors.deadletterqueue.copy.record.enable`, the broker's `errors.deadletterqueue.topic.name.prefix`
    and `errors.deadletterqueue.auto.create.topics.enable`."""

    topic: str = ""
    copy_record: bool = False
    topic_prefix: str = "dlq."
    auto_create_topics: bool = False

    @property
    def enabled(self) -> bool:
        """Whether the group has a dead-letter topic (Kafka's `isDLQEnabledForGroup`)."""
        return bool(self.topic)


@dataclass(frozen=True, slots=True)
class ResolvedShareConfig:
    """What a share group runs with: the broker's limits and the group's settings, each already checked."""

    delivery_count_limit: int = 5
    max_record_locks: int = 2000
    record_lock_duration_ms: int = 30000
    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 5000
    auto_offset_reset: str = LATEST
    isolation_level: str = READ_UNCOMMITTED
    dead_letters: DeadLetterSettings = DeadLetterSettings()

    @property
    def read_committed(self) -> bool:
        """Whether the group reads only committed transactional records (`share.isolation.level`)."""
        return self.isolation_level == READ_COMMITTED


def _group_value(name: str, value: int | None, default: int, low_name: str, low: int, high_name: str, high: int) -> int:
    if value is None:
        return default
    require_between(name, value, low_name, low, high_name, high)
    return value
