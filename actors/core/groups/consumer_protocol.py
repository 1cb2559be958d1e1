"""The bytes of Kafka's consumer protocol that a group coordinator keeps without owning: a member's subscription
(`ConsumerProtocolSubscription`, its JoinGroup metadata) and its assignment (`ConsumerProtocolAssignment`, the
leader's SyncGroup answer), in groups of protocol type "consumer".

Each is an int16 version followed by that version's body, decoded with kio. Later versions only add fields at the
end, so bytes of a version newer than kio knows are read as the newest it does. Bytes that do not decode (another
client's protocol under the same type, a truncated member metadata) decode as nothing: a coordinator answers from
what it can read, as Kafka's does when its `ConsumerProtocol.deserialize*` fails.
"""

from __future__ import annotations

import struct
from typing import Any

CONSUMER_PROTOCOL_TYPE = "consumer"
# The newest versions kio has of each.
LATEST_SUBSCRIPTION_VERSION = 3
LATEST_ASSIGNMENT_VERSION = 3
_VERSION = struct.Struct(">h")  # the version prefix of both


def subscribed_topics(metadata: bytes) -> frozenset[str] | None:
    """The topics of a member's ConsumerProtocolSubscription; None if the bytes do not decode."""
    decoded = _decode("consumer_protocol_subscription", LATEST_SUBSCRIPTION_VERSION, metadata)
    return None if decoded is None else frozenset(decoded.topics)


def assigned_partitions(assignment: bytes) -> list[tuple[str, int]]:
    """The (topic, partition) pairs of a ConsumerProtocolAssignment; none if the bytes do not decode."""
    decoded = _decode("consumer_protocol_assignment", LATEST_ASSIGNMENT_VERSION, assignment)
    if decoded is None:
        return []
    return [(topic.topic, partition) for topic in decoded.assigned_partitions for partition in topic.partitions]


def _decode(entity: str, latest_version: int, data: bytes) -> Any:
    """kio's `entity` read from `data` at the version its prefix names (capped at `latest_version`), or None."""
    if len(data) < _VERSION.size:
        return None
    (version,) = _VERSION.unpack_from(data)
    if version < 0:
        return None
    # kio: loaded on first use (its schemas take about 0.5 s to import), so the CLI starts fast.
    from kio.index import load_entity_schema
    from kio.serial import entity_reader
    from kio.serial.errors import SerialError
    from kio.static.constants import EntityType

    schema = load_entity_schema(entity, min(version, latest_version), EntityType.data)
    try:
        decoded, _ = entity_reader(schema)(data, _VERSION.size)
    except (SerialError, ValueError, TypeError, OverflowError, LookupError):
        return None
    return decoded
