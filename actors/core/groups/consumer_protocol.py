"""The bytes of Kafka's consumer protocol that a group coordinator keeps without owning: a member's subscription
(`ConsumerProtocolSubscription`, its JoinGroup metadata) and its assignment (`ConsumerProtocolAssignment`, the
leader's SyncGroup answer), in groups of protocol type "consumer".

Each is an int16 version followed by that version's body, decoded with kio. Later versions only add fields at the
end, so bytes of a version newer than kio knows are read as the newest it does. Bytes that do not decode (another
client's protocol under the same type, a truncated member metadata) decode as nothing: a coordinator answers from
what it can read, as Kafka's does when its `ConsumerProtocol.deserialize*` fails.
"""

from __future__ import annotations

import io
import struct
import sys
from dataclasses import dataclass
from typing import Any

CONSUMER_PROTOCOL_TYPE = "consumer"
# The newest versions kio has of each.
LATEST_SUBSCRIPTION_VERSION = 3
LATEST_ASSIGNMENT_VERSION = 3
_VERSION = struct.Struct(">h")  # the version prefix of both


@dataclass(frozen=True, slots=True)
class Subscription:
    """What a classic member's ConsumerProtocolSubscription says: its topics, the partitions it owns (version 1+;
    none before) and its rack (version 3+)."""

    version: int
    topics: tuple[str, ...]
    owned: tuple[tuple[str, int], ...]
    rack_id: str | None


def decode_subscription(metadata: bytes) -> Subscription | None:
    """A member's ConsumerProtocolSubscription; None if the bytes do not decode."""
    decoded = _decode("consumer_protocol_subscription", LATEST_SUBSCRIPTION_VERSION, metadata)
    if decoded is None:
        return None
    (version,) = _VERSION.unpack_from(metadata)
    owned = tuple(
        (topic.topic, partition) for topic in getattr(decoded, "owned_partitions", ()) for partition in topic.partitions
    )
    return Subscription(version, tuple(decoded.topics), owned, getattr(decoded, "rack_id", None))


def encode_assignment(partitions: dict[str, list[int]], version: int) -> bytes:
    """A ConsumerProtocolAssignment of `partitions` (topic -> partition numbers) at `version` (capped at the newest
    kio has, as Kafka's `serializeAssignment` caps it), the answer a coordinator that assigns a classic member's
    partitions itself sends in SyncGroup."""
    from kio.index import load_entity_schema
    from kio.serial import entity_writer
    from kio.static.constants import EntityType
    from kio.static.primitive import i32

    version = min(max(version, 0), LATEST_ASSIGNMENT_VERSION)
    schema: Any = load_entity_schema("consumer_protocol_assignment", version, EntityType.data)
    topic_partition = sys.modules[schema.__module__].TopicPartition
    assignment = schema(
        assigned_partitions=tuple(
            topic_partition(topic=topic, partitions=tuple(i32(number) for number in sorted(numbers)))
            for topic, numbers in sorted(partitions.items())
        ),
    )
    buffer = io.BytesIO()
    buffer.write(_VERSION.pack(version))
    entity_writer(schema)(buffer, assignment)
    return buffer.getvalue()


def subscribed_topics(metadata: bytes) -> frozenset[str] | None:
    """The topics of a member's ConsumerProtocolSubscription; None if the bytes do not decode."""
    decoded = _decode("consumer_protocol_subscription", LATEST_SUBSCRIPTION_VERSION, metadata)
    return None if decoded is None else frozenset(decoded.topics)


def assigned_partitions(assignment: bytes) -> list[tuple[str, int]]:
    """The (topic, partition) pairs of a ConsumerProtocolAssignment; none if the bytes do not decode."""
    return decode_assignment(assignment) or []


def decode_assignment(assignment: bytes) -> list[tuple[str, int]] | None:
    """The (topic, partition) pairs of a ConsumerProtocolAssignment; None if the bytes do not decode."""
    decoded = _decode("consumer_protocol_assignment", LATEST_ASSIGNMENT_VERSION, assignment)
    if decoded is None:
        return None
    return [(topic.topic, partition) for topic in decoded.assigned_partitions for partition in topic.partitions]


def version_of(data: bytes) -> int:
    """The version prefix of a subscription or an assignment (0 if the bytes are too short to have one)."""
    return _VERSION.unpack_from(data)[0] if len(data) >= _VERSION.size else 0


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
