"""The consumer group protocol's broker settings (KIP-848), under Kafka's names and with Kafka's defaults (Kafka's
`GroupCoordinatorConfig`).

| Kafka name                                  | type | default          | meaning                                  |
|---------------------------------------------|------|------------------|------------------------------------------|
| group.coordinator.rebalance.protocols       | list | classic,consumer | protocols served (classic always)        |
| group.consumer.heartbeat.interval.ms        | int  | 5000             | a member's heartbeat period              |
| group.consumer.min.heartbeat.interval.ms    | int  | 5000             | its lower bound                          |
| group.consumer.max.heartbeat.interval.ms    | int  | 15000            | its upper bound                          |
| group.consumer.session.timeout.ms           | int  | 45000            | no heartbeat this long: member removed   |
| group.consumer.min.session.timeout.ms       | int  | 45000            | its lower bound                          |
| group.consumer.max.session.timeout.ms       | int  | 60000            | its upper bound                          |
| group.consumer.max.size                     | int  | 2147483647       | members of one consumer group            |
| group.consumer.assignors                    | list | uniform,range    | server assignors, the first the default  |
| group.consumer.migration.policy             | str  | bidirectional    | which way a group with members may move  |
|                                             |      |                  | between the protocols (see below)        |

Kafka takes the assignors by class name as well as by short name; raybroker's are its own, so only `uniform` and
`range` are names it knows. The migration policy is one of `disabled`, `upgrade` (a classic group with members
becomes a consumer-protocol group when a consumer member joins), `downgrade` (a consumer-protocol group left with
classic members only becomes a classic group) and `bidirectional`. `GroupProtocolKeys` declares them once;
`BrokerConfig` extends it and derives its `group_protocol_config`, which checks what Kafka's `GroupCoordinatorConfig`
checks: each interval within its bounds, the heartbeat shorter than the session.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage.config.config_values import check_fields, config_field
from storage.errors import InvalidConfigError

INT_MAX = 2**31 - 1
CLASSIC_PROTOCOL = "classic"
CONSUMER_PROTOCOL = "consumer"
KNOWN_ASSIGNORS = ("uniform", "range")
MIGRATION_POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")


@dataclass(frozen=True)
class GroupProtocolKeys:
    """The consumer group protocol's broker keys, each declared here only."""

    group_coordinator_rebalance_protocols: tuple[str, ...] = config_field((CLASSIC_PROTOCOL, CONSUMER_PROTOCOL), "list")
    group_consumer_heartbeat_interval_ms: int = config_field(5000, "int", low=1)
    group_consumer_min_heartbeat_interval_ms: int = config_field(5000, "int", low=1)
    group_consumer_max_heartbeat_interval_ms: int = config_field(15000, "int", low=1)
    group_consumer_session_timeout_ms: int = config_field(45000, "int", low=1)
    group_consumer_min_session_timeout_ms: int = config_field(45000, "int", low=1)
    group_consumer_max_session_timeout_ms: int = config_field(60000, "int", low=1)
    group_consumer_max_size: int = config_field(INT_MAX, "int", low=1)
    group_consumer_assignors: tuple[str, ...] = config_field(KNOWN_ASSIGNORS, "list")
    group_consumer_migration_policy: str = config_field("bidirectional", "string", choices=MIGRATION_POLICIES)


@dataclass(frozen=True)
class GroupProtocolConfig(GroupProtocolKeys):
    """The consumer group protocol's settings (see the module docstring for names and defaults)."""

    @property
    def upgrade_enabled(self) -> bool:
        """Whether a classic group with members becomes a consumer-protocol group when a consumer member joins."""
        return self.group_consumer_migration_policy in ("upgrade", "bidirectional")

    @property
    def downgrade_enabled(self) -> bool:
        """Whether a consumer-protocol group left with classic members only becomes a classic group."""
        return self.group_consumer_migration_policy in ("downgrade", "bidirectional")

    def __post_init__(self) -> None:
        check_fields(self)
        protocols = self.group_coordinator_rebalance_protocols
        unknown = [name for name in protocols if name not in (CLASSIC_PROTOCOL, CONSUMER_PROTOCOL)]
        if unknown:
            raise InvalidConfigError(
                f"invalid value {','.join(protocols)!r} for group.coordinator.rebalance.protocols: "
                f"{', '.join(unknown)} not served (classic and consumer are)"
            )
        if CLASSIC_PROTOCOL not in protocols:
            raise InvalidConfigError("group.coordinator.rebalance.protocols must contain the classic protocol")
        unknown = [name for name in self.group_consumer_assignors if name not in KNOWN_ASSIGNORS]
        if unknown or not self.group_consumer_assignors:
            raise InvalidConfigError(
                f"invalid value {','.join(self.group_consumer_assignors)!r} for group.consumer.assignors: "
                f"expected some of {', '.join(KNOWN_ASSIGNORS)}"
            )
        _check_within(
            "group.consumer.heartbeat.interval.ms",
            self.group_consumer_heartbeat_interval_ms,
            self.group_consumer_min_heartbeat_interval_ms,
            self.group_consumer_max_heartbeat_interval_ms,
        )
        _check_within(
            "group.consumer.session.timeout.ms",
            self.group_consumer_session_timeout_ms,
            self.group_consumer_min_session_timeout_ms,
            self.group_consumer_max_session_timeout_ms,
        )
        if self.group_consumer_heartbeat_interval_ms >= self.group_consumer_session_timeout_ms:
            raise InvalidConfigError(
                "group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms"
            )

    @property
    def consumer_protocol_enabled(self) -> bool:
        """Whether ConsumerGroupHeartbeat is served (and advertised)."""
        return CONSUMER_PROTOCOL in self.group_coordinator_rebalance_protocols


def _check_within(name: str, value: int, low: int, high: int) -> None:
    prefix = name.removesuffix(".ms").rsplit(".", 1)
    if low > high:
        raise InvalidConfigError(f"{prefix[0]}.min.{prefix[1]}.ms must be less than or equal to the max")
    if not low <= value <= high:
        raise InvalidConfigError(f"invalid value {value} for {name}: expected {low}..{high}")
