"""The JoinGroup metadata a classic Kafka consumer sends: a ConsumerProtocolSubscription (an int16 version, then
that version's body), written with kio as Kafka's `ConsumerProtocol.serializeSubscription` writes it, for the tests
that play classic consumers without a client."""

from __future__ import annotations

import io
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from kio.index import load_entity_schema
from kio.serial import entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import i32


def subscription(topics: Sequence[str], owned: Mapping[str, Sequence[int]] | None = None, version: int = 1) -> bytes:
    """A subscription to `topics` owning `owned` (topic -> partitions; version 1+ carries them)."""
    schema: Any = load_entity_schema("consumer_protocol_subscription", version, EntityType.data)
    topic_partition = sys.modules[schema.__module__].TopicPartition
    fields: dict[str, Any] = {"topics": tuple(topics)}
    if version >= 1:
        fields["owned_partitions"] = tuple(
            topic_partition(topic=topic, partitions=tuple(i32(p) for p in sorted(parts)))
            for topic, parts in sorted((owned or {}).items())
            if parts
        )
    buffer = io.BytesIO()
    buffer.write(version.to_bytes(2, "big"))
    entity_writer(schema)(buffer, schema(**fields))
    return buffer.getvalue()
