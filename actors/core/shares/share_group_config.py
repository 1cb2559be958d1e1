"""Share groups' settings (KIP-932) under Kafka 4.2's names, defaults and bounds: the broker's `group.share.*` keys
(Kafka's `ShareGroupConfig` and `GroupCoordinatorConfig`) and a group's own `share.*` keys (Kafka's `GroupConfig`,
set on the GROUP config resource), which the broker's bounds constrain.

Broker keys (`ShareGroupConfig`):

| Kafka name                                  | type | default | bounds          | meaning                             |
|---------------------------------------------|------|---------|-----------------|-------------------------------------|
| group.share.delivery.count.limit            | int  | 5       | 2..10           | deliveries before a record archives |
| group.share.partition.max.record.locks      | int  | 2000    | 100..10000      | records in flight per partition     |
| group.share.record.lock.duration.ms         | int  | 30000   | 1000..3600000   | acquisition lock, unless the group  |
|                                             |      |         |                 | sets share.record.lock.duration.ms  |
| group.share.min.record.lock.duration.ms     | int  | 15000   | 1000..30000     | a group's lower bound               |
| group.share.max.record.lock.duration.ms     | int  | 60000   | 30000..3600000  | a group's upper bound               |
| group.share.session.timeout.ms              | int  | 45000   | >= 1            | no heartbeat this long: removed     |
| group.share.min.session.timeout.ms          | int  | 45000   | >= 1            | a group's lower bound               |
| group.share.max.session.timeout.ms          | int  | 60000   | >= 1            | a group's upper bound               |
| group.share.heartbeat.interval.ms           | int  | 5000    | >= 1            | a member's heartbeat period         |
| group.share.min.heartbeat.interval.ms       | int  | 5000    | >= 1            | a group's lower bound               |
| group.share.max.heartbeat.interval.ms       | int  | 15000   | >= 1            | a group's upper bound               |
| group.share.max.size                        | int  | 200     | 10..1000        | members of one share group          |

Checked as Kafka checks them: min <= default <= max for the lock duration, the heartbeat interval and the session
timeout (Kafka's `ShareGroupConfig.validate` and `GroupCoordinatorConfig`'s requirements), and the heartbeat interval
below the session timeout.

Group keys (`GroupConfig`), each None when the group does not set it and the broker's value applies:
`share.record.lock.duration.ms` (within the broker's min..max), `share.session.timeout.ms` and
`share.heartbeat.interval.ms` (within theirs, the interval below the timeout), and `share.auto.offset.reset`
(`latest`, Kafka's default, or `earliest`; Kafka's `by_duration:<ISO-8601>` is not served yet).
"""

from __future__ import annotations

from dataclasses import dataclass

from storage.config.config_values import check_fields, config_field
from storage.errors import InvalidConfigError

LATEST = "latest"
EARLIEST = "earliest"
AUTO_OFFSET_RESETS = (LATEST, EARLIEST)


@dataclass(frozen=True)
class ShareGroupConfig:
    """The broker's share group settings (see the module docstring for names, defaults and bounds)."""

    group_share_delivery_count_limit: int = config_field(5, "int", low=2, high=10)
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

    def __post_init__(self) -> None:
        check_fields(self)
        for what in ("record.lock.duration.ms", "session.timeout.ms", "heartbeat.interval.ms"):
            _require_between(
                f"group.share.{what}",
                getattr(self, f"group_share_{what.replace('.', '_')}"),
                f"group.share.min.{what}",
                getattr(self, f"group_share_min_{what.replace('.', '_')}"),
                f"group.share.max.{what}",
                getattr(self, f"group_share_max_{what.replace('.', '_')}"),
            )
        if self.group_share_heartbeat_interval_ms >= self.group_share_session_timeout_ms:
            raise InvalidConfigError(
                "group.share.heartbeat.interval.ms must be less than group.share.session.timeout.ms"
            )


@dataclass(frozen=True)
class GroupShareConfig:
    """One share group's own settings (Kafka's `GroupConfig` share keys); None falls back to the broker's value.
    `resolve` checks them against a broker's bounds, as Kafka's `GroupConfig.validate` does."""

    share_record_lock_duration_ms: int | None = None
    share_session_timeout_ms: int | None = None
    share_heartbeat_interval_ms: int | None = None
    share_auto_offset_reset: str = LATEST

    def resolve(self, broker: ShareGroupConfig) -> ResolvedShareConfig:
        """The settings that apply to the group on `broker`; `InvalidConfigError` (Kafka's message) if one of the
        group's is outside the broker's bounds."""
        if self.share_auto_offset_reset not in AUTO_OFFSET_RESETS:
            raise InvalidConfigError(
                f"invalid value {self.share_auto_offset_reset!r} for share.auto.offset.reset: "
                f"expected one of {list(AUTO_OFFSET_RESETS)}"
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
        if heartbeat_ms >= session_ms:
            raise InvalidConfigError("share.session.timeout.ms must be greater than share.heartbeat.interval.ms")
        return ResolvedShareConfig(
            delivery_count_limit=broker.group_share_delivery_count_limit,
            max_record_locks=broker.group_share_partition_max_record_locks,
            record_lock_duration_ms=lock_ms,
            session_timeout_ms=session_ms,
            heartbeat_interval_ms=heartbeat_ms,
            auto_offset_reset=self.share_auto_offset_reset,
        )


@dataclass(frozen=True, slots=True)
class ResolvedShareConfig:
    """What a share group runs with: the broker's limits and the group's settings, each already checked."""

    delivery_count_limit: int = 5
    max_record_locks: int = 2000
    record_lock_duration_ms: int = 30000
    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 5000
    auto_offset_reset: str = LATEST


def _group_value(name: str, value: int | None, default: int, low_name: str, low: int, high_name: str, high: int) -> int:
    if value is None:
        return default
    _require_between(name, value, low_name, low, high_name, high)
    return value


def _require_between(name: str, value: int, low_name: str, low: int, high_name: str, high: int) -> None:
    if value < low:
        raise InvalidConfigError(f"{name} must be greater than or equal to {low_name}")
    if value > high:
        raise InvalidConfigError(f"{name} must be less than or equal to {high_name}")
