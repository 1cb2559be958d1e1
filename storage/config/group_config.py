"""A group's own configs, the GROUP config resource (type 32), under Kafka 4.2's names and Kafka 4.3's
`share.delivery.count.limit`: Kafka's `GroupConfig`, set with
IncrementalAlterConfigs or AlterConfigs (`kafka-configs.sh --entity-type groups`), each falling back to a broker key
when the group does not set it.

| group key                          | type   | where the group sets none (default) | accepted                     |
|------------------------------------|--------|-------------------------------------|------------------------------|
| consumer.session.timeout.ms        | INT    | group.consumer.session.timeout.ms   | >= 1, broker's min..max      |
| consumer.heartbeat.interval.ms     | INT    | group.consumer.heartbeat.interval.ms| >= 1, broker's min..max      |
| share.session.timeout.ms           | INT    | group.share.session.timeout.ms      | >= 1, broker's min..max      |
| share.heartbeat.interval.ms        | INT    | group.share.heartbeat.interval.ms   | >= 1, broker's min..max      |
| share.record.lock.duration.ms      | INT    | group.share.record.lock.duration.ms | >= 1000, broker's min..max   |
| share.auto.offset.reset            | STRING | latest                              | earliest, latest, by_duration|
| streams.session.timeout.ms         | INT    | 45000                               | >= 1, 45000..60000           |
| streams.heartbeat.interval.ms      | INT    | 5000                                | >= 1, 5000..15000            |
| streams.num.standby.replicas       | INT    | 0                                   | 0..2                         |
| streams.initial.rebalance.delay.ms | INT    | 3000                                | >= 0                         |
| share.isolation.level              | STRING | read_uncommitted                    | read_(un)committed           |
| share.delivery.count.limit (4.3)   | INT    | group.share.delivery.count.limit    | >= 2, broker's min..max      |
| errors.deadletterqueue.topic.name (4.4) | STRING | "" (no dead-letter topic)    | not starting with `__`       |
| errors.deadletterqueue.copy.record.enable (4.4) | BOOLEAN | false               | true, false                  |

raybroker serves no streams groups and has no `group.streams.*` broker keys: their keys are kept and described with
Kafka's broker defaults and bounds (`STREAMS_DEFAULTS`). `share.auto.offset.reset`'s `by_duration:<ISO-8601>` passes
Kafka's check here but is refused as not served yet (a share-partition starts at the earliest or the latest offset
only). `share.isolation.level` is applied by the group's share-partitions (`actors.core.shares.share_partition`).
Kafka 4.4's dead-letter keys (KIP-1191) name the topic a share group's rejected and over-delivered records are
written to (`actors.core.shares.dead_letters`); like Kafka, only a name starting with `__` is refused here, the
broker's prefix and the topic's `errors.deadletterqueue.group.enable` are checked when a dead letter is written.

`validate(overrides, ...)` checks a group's whole set of overrides as Kafka's `GroupConfig.validate` does, in its
order and with its messages (each an `InvalidConfigError`, Kafka's INVALID_CONFIG): an unknown name first ("Unknown
group config name: x"), then each value parsed in the order Kafka defines the keys (its `ConfigDef` messages: "Invalid
value abc for configuration x: Not a number of type INT", "... Value must be at least 1000"), then, with every key
not set taken from the broker, each within its broker bounds (consumer, share, then streams keys) and each session
timeout above its heartbeat interval. `defaults(...)` are the values a group that sets nothing has, which
DescribeConfigs reports as DEFAULT_CONFIG, as Kafka 4.2 does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from storage.config.config_values import INT_MAX, INT_MIN, JavaType
from storage.config.group_protocol_config import GroupProtocolConfig
from storage.config.share_group_config import ShareGroupConfig
from storage.errors import InvalidConfigError

SHARE_AUTO_OFFSET_RESET = "share.auto.offset.reset"
SHARE_DELIVERY_COUNT_LIMIT = "share.delivery.count.limit"
ERRORS_DLQ_TOPIC_NAME = "errors.deadletterqueue.topic.name"
ERRORS_DLQ_COPY_RECORD_ENABLE = "errors.deadletterqueue.copy.record.enable"
BY_DURATION = "by_duration:"
READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"
ISOLATION_LEVELS = (READ_COMMITTED, READ_UNCOMMITTED)
# Kafka's `ShareGroupAutoOffsetResetStrategy` grammar for `by_duration:`: Java's `Duration.parse`, not negative.
_ISO_DURATION = re.compile(r"^\+?P(?:\d+D)?(?:T(?:\d+H)?(?:\d+M)?(?:\d+(?:[.,]\d{1,9})?S)?)?$", re.IGNORECASE)

# Kafka 4.2's broker defaults and bounds for the streams group keys (`GroupCoordinatorConfig`'s `group.streams.*`).
STREAMS_DEFAULTS = {
    "streams.session.timeout.ms": 45000,
    "streams.heartbeat.interval.ms": 5000,
    "streams.num.standby.replicas": 0,
    "streams.initial.rebalance.delay.ms": 3000,
}
STREAMS_MIN_SESSION_TIMEOUT_MS, STREAMS_MAX_SESSION_TIMEOUT_MS = 45000, 60000
STREAMS_MIN_HEARTBEAT_INTERVAL_MS, STREAMS_MAX_HEARTBEAT_INTERVAL_MS = 5000, 15000
STREAMS_MAX_STANDBY_REPLICAS = 2


@dataclass(frozen=True, slots=True)
class GroupConfigKey:
    """One group key as Kafka's `GroupConfig` defines it: its type (INT or STRING), its documentation, and for an
    INT its `atLeast` bound."""

    name: str
    java_type: JavaType
    doc: str
    at_least: int = 0


# Kafka 4.2's keys, in the order its DescribeConfigs lists them (its HashMap's order, the same on every broker), then
# Kafka 4.3's `share.delivery.count.limit` and Kafka 4.4's dead-letter keys (4.3 and 4.4 list more keys, in another
# order).
GROUP_CONFIG_KEYS = (
    GroupConfigKey(
        "consumer.session.timeout.ms",
        "int",
        "The timeout to detect client failures when using the consumer group protocol.",
        1,
    ),
    GroupConfigKey("streams.heartbeat.interval.ms", "int", "The heartbeat interval given to the members.", 1),
    GroupConfigKey(
        SHARE_AUTO_OFFSET_RESET,
        "string",
        "The strategy to initialize the share-partition start offset. <ul><li>earliest: automatically reset the "
        "offset to the earliest offset</li><li>latest: automatically reset the offset to the latest offset</li>"
        "<li>by_duration:&lt;duration&gt;: automatically reset the offset to a configured duration from the current "
        "timestamp. &lt;duration&gt; must be specified in ISO8601 format (PnDTnHnMn.nS). Negative duration is not "
        "allowed.</li><li>anything else: throw exception to the share consumer.</li></ul>",
    ),
    GroupConfigKey(
        "consumer.heartbeat.interval.ms", "int", "The heartbeat interval given to the members of a consumer group.", 1
    ),
    GroupConfigKey(
        "share.record.lock.duration.ms",
        "int",
        "The record acquisition lock duration in milliseconds for share groups.",
        1000,
    ),
    GroupConfigKey(
        "streams.initial.rebalance.delay.ms",
        "int",
        "The amount of time the group coordinator will wait for more streams clients to join a new group before "
        "performing the first rebalance. A longer delay means potentially fewer rebalances.",
        0,
    ),
    GroupConfigKey(
        "share.session.timeout.ms",
        "int",
        "The timeout to detect client failures when using the share group protocol.",
        1,
    ),
    GroupConfigKey(
        "share.heartbeat.interval.ms", "int", "The heartbeat interval given to the members of a share group.", 1
    ),
    GroupConfigKey(
        "share.isolation.level",
        "string",
        'Controls how to read records written transactionally. If set to "read_committed", the share group will only '
        'deliver transactional records which have been committed. If set to "read_uncommitted", the share group will '
        "return all messages, even transactional messages which have been aborted. Non-transactional records will be "
        "returned unconditionally in either mode.",
    ),
    GroupConfigKey(
        "streams.session.timeout.ms",
        "int",
        "The timeout to detect client failures when using the streams group protocol.",
        1,
    ),
    GroupConfigKey("streams.num.standby.replicas", "int", "The number of standby replicas for each task.", 0),
    GroupConfigKey(
        SHARE_DELIVERY_COUNT_LIMIT,
        "int",
        "The maximum number of delivery attempts for a record delivered to a share group.",
        2,
    ),
    GroupConfigKey(
        ERRORS_DLQ_TOPIC_NAME,
        "string",
        "The name of the topic to be used as the dead-letter queue (DLQ) topic for this share group. If blank (the "
        "default), the group does not have a DLQ topic.",
    ),
    GroupConfigKey(
        ERRORS_DLQ_COPY_RECORD_ENABLE,
        "boolean",
        "When writing onto the dead-letter queue topic, whether to copy the original record onto the DLQ topic, or "
        "just write a record containing the context information headers.",
    ),
)
# The keys Kafka 4.2 does not have (4.3's limit, 4.4's dead-letter keys): its DescribeConfigs lists eleven keys,
# raybroker's these too.
LATER_GROUP_CONFIG_NAMES = frozenset({SHARE_DELIVERY_COUNT_LIMIT, ERRORS_DLQ_TOPIC_NAME, ERRORS_DLQ_COPY_RECORD_ENABLE})
GROUP_CONFIG_NAMES = frozenset(key.name for key in GROUP_CONFIG_KEYS)
# The order Kafka's `ConfigDef` parses them in (its definition order), which decides which bad value is reported.
_PARSE_ORDER = (
    "consumer.session.timeout.ms",
    "consumer.heartbeat.interval.ms",
    "share.session.timeout.ms",
    "share.heartbeat.interval.ms",
    "share.record.lock.duration.ms",
    SHARE_DELIVERY_COUNT_LIMIT,
    SHARE_AUTO_OFFSET_RESET,
    "streams.session.timeout.ms",
    "streams.heartbeat.interval.ms",
    "streams.num.standby.replicas",
    "streams.initial.rebalance.delay.ms",
    "share.isolation.level",
    ERRORS_DLQ_TOPIC_NAME,
    ERRORS_DLQ_COPY_RECORD_ENABLE,
)
_KEYS = {key.name: key for key in GROUP_CONFIG_KEYS}


def defaults(protocol: GroupProtocolConfig, share: ShareGroupConfig) -> dict[str, str]:
    """Every group key's value for a group that sets none: the broker's (see the module docstring)."""
    return {
        "consumer.session.timeout.ms": str(protocol.group_consumer_session_timeout_ms),
        "consumer.heartbeat.interval.ms": str(protocol.group_consumer_heartbeat_interval_ms),
        "share.session.timeout.ms": str(share.group_share_session_timeout_ms),
        "share.heartbeat.interval.ms": str(share.group_share_heartbeat_interval_ms),
        "share.record.lock.duration.ms": str(share.group_share_record_lock_duration_ms),
        SHARE_DELIVERY_COUNT_LIMIT: str(share.group_share_delivery_count_limit),
        SHARE_AUTO_OFFSET_RESET: "latest",
        "share.isolation.level": READ_UNCOMMITTED,
        ERRORS_DLQ_TOPIC_NAME: "",
        ERRORS_DLQ_COPY_RECORD_ENABLE: "false",
        **{name: str(value) for name, value in STREAMS_DEFAULTS.items()},
    }


def validate(overrides: Mapping[str, str], protocol: GroupProtocolConfig, share: ShareGroupConfig) -> dict[str, str]:
    """The group's overrides checked as Kafka checks them (see the module docstring), each value as Kafka keeps it
    (trimmed); `InvalidConfigError` with Kafka's message for the first it refuses."""
    for name in overrides:
        if name not in GROUP_CONFIG_NAMES:
            raise InvalidConfigError(f"Unknown group config name: {name}")
    parsed: dict[str, int | str] = {}
    for name in _PARSE_ORDER:
        if name in overrides:
            parsed[name] = _parse(_KEYS[name], overrides[name])
    values = {**{name: _parse(_KEYS[name], value) for name, value in defaults(protocol, share).items()}, **parsed}
    _check_bounds(values, protocol, share)
    if str(values[ERRORS_DLQ_TOPIC_NAME]).startswith("__"):
        raise InvalidConfigError(f"{ERRORS_DLQ_TOPIC_NAME}: DLQ topic name must not start with '__'")
    return {name: str(parsed[name]) for name in overrides}


def _parse(key: GroupConfigKey, raw: str) -> int | str:
    """Kafka's `ConfigDef.parse` of one value, with its messages (a BOOLEAN kept as `true` or `false`)."""
    text = raw.strip()
    if key.java_type == "boolean":
        if text.lower() not in ("true", "false"):
            raise InvalidConfigError(
                f"Invalid value {raw} for configuration {key.name}: Expected value to be either true or false"
            )
        return text.lower()
    if key.java_type == "string":
        if key.name == ERRORS_DLQ_TOPIC_NAME:
            return text
        if key.name == SHARE_AUTO_OFFSET_RESET:
            _check_auto_offset_reset(raw, text)
        elif text not in ISOLATION_LEVELS:
            raise InvalidConfigError(
                f"Invalid value {raw} for configuration {key.name}: "
                f"String must be one of: {', '.join(ISOLATION_LEVELS)}"
            )
        return text
    if not re.fullmatch(r"[+-]?[0-9]+", text) or not INT_MIN <= int(text) <= INT_MAX:
        raise InvalidConfigError(f"Invalid value {raw} for configuration {key.name}: Not a number of type INT")
    number = int(text)
    if number < key.at_least:
        raise InvalidConfigError(
            f"Invalid value {number} for configuration {key.name}: Value must be at least {key.at_least}"
        )
    return number


def _check_auto_offset_reset(raw: str, text: str) -> None:
    """Kafka's `ShareGroupAutoOffsetResetStrategy` validator; `by_duration:` passes it but is not served yet."""
    duration = text[len(BY_DURATION) :] if text.lower().startswith(BY_DURATION) else None
    if text in ("earliest", "latest"):
        return
    # Java's `Duration.parse` wants at least one number ("P" and "PT" alone are refused).
    if duration is not None and _ISO_DURATION.match(duration) and any(c.isdigit() for c in duration):
        raise InvalidConfigError(
            f"Invalid value {raw} for configuration {SHARE_AUTO_OFFSET_RESET}: by_duration is not served by raybroker "
            "yet; use 'earliest' or 'latest'"
        )
    raise InvalidConfigError(
        f"Invalid value {raw} for configuration {SHARE_AUTO_OFFSET_RESET}: Invalid value `{raw}` for configuration "
        f"{SHARE_AUTO_OFFSET_RESET}. The value must be either 'earliest', 'latest' or of the format "
        "'by_duration:<PnDTnHnMn.nS>'."
    )


def _check_bounds(values: Mapping[str, int | str], protocol: GroupProtocolConfig, share: ShareGroupConfig) -> None:
    """Kafka's `GroupConfig.validateValues`, in its order."""
    p, s = protocol, share
    bounds = (
        ("consumer.heartbeat.interval.ms", "group.consumer", "heartbeat.interval.ms"),
        ("consumer.session.timeout.ms", "group.consumer", "session.timeout.ms"),
        ("share.heartbeat.interval.ms", "group.share", "heartbeat.interval.ms"),
        ("share.session.timeout.ms", "group.share", "session.timeout.ms"),
        ("share.record.lock.duration.ms", "group.share", "record.lock.duration.ms"),
        (SHARE_DELIVERY_COUNT_LIMIT, "group.share", "delivery.count.limit"),
        ("streams.heartbeat.interval.ms", "group.streams", "heartbeat.interval.ms"),
        ("streams.session.timeout.ms", "group.streams", "session.timeout.ms"),
    )
    limits = {
        "consumer.heartbeat.interval.ms": (
            p.group_consumer_min_heartbeat_interval_ms,
            p.group_consumer_max_heartbeat_interval_ms,
        ),
        "consumer.session.timeout.ms": (
            p.group_consumer_min_session_timeout_ms,
            p.group_consumer_max_session_timeout_ms,
        ),
        "share.heartbeat.interval.ms": (
            s.group_share_min_heartbeat_interval_ms,
            s.group_share_max_heartbeat_interval_ms,
        ),
        "share.session.timeout.ms": (s.group_share_min_session_timeout_ms, s.group_share_max_session_timeout_ms),
        "share.record.lock.duration.ms": (
            s.group_share_min_record_lock_duration_ms,
            s.group_share_max_record_lock_duration_ms,
        ),
        SHARE_DELIVERY_COUNT_LIMIT: (s.group_share_min_delivery_count_limit, s.group_share_max_delivery_count_limit),
        "streams.heartbeat.interval.ms": (STREAMS_MIN_HEARTBEAT_INTERVAL_MS, STREAMS_MAX_HEARTBEAT_INTERVAL_MS),
        "streams.session.timeout.ms": (STREAMS_MIN_SESSION_TIMEOUT_MS, STREAMS_MAX_SESSION_TIMEOUT_MS),
    }
    for name, prefix, what in bounds:
        low, high = limits[name]
        value = int(values[name])
        if value < low:
            raise InvalidConfigError(f"{name} must be greater than or equal to {prefix}.min.{what}")
        if value > high:
            raise InvalidConfigError(f"{name} must be less than or equal to {prefix}.max.{what}")
    if int(values["streams.num.standby.replicas"]) > STREAMS_MAX_STANDBY_REPLICAS:
        raise InvalidConfigError(
            "streams.num.standby.replicas must be less than or equal to group.streams.max.standby.replicas"
        )
    for kind in ("consumer", "share", "streams"):
        if int(values[f"{kind}.session.timeout.ms"]) <= int(values[f"{kind}.heartbeat.interval.ms"]):
            raise InvalidConfigError(f"{kind}.session.timeout.ms must be greater than {kind}.heartbeat.interval.ms")
