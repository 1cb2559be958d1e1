"""A partition's replication state as a metadata-log record of its own, `partition/<topic>/<partition>`.

Why: a topic's record (`topic/<name>`, `TopicMetadata.to_record`) holds every partition's state, ~360 bytes a
partition at replication factor 2, so writing it for one partition's change (an ISR shrink or expand, an election, a
reassignment's step) wrote, flushed and sent to the metadata mirrors the whole topic: ~3.5 MB a change at 10,000
partitions. Kafka writes a PartitionChangeRecord of the one partition; so does the controller now, and keeps writing
the whole topic record where the topic itself changes (created, grown, its config altered, its id drawn).

The record's value: `{"topic_id", "leader", "state"}`: the topic's id, the node the topic names for the partition (its
leader, or its last leader while it has none) and the state (`LeaderAndIsr.to_json`). On replay a partition record
counts only over the topic record it follows (a higher offset: a later topic record holds every state as it was then)
and only for the topic id it names (a topic deleted and created again under its name); a deleted topic's partition
records are written null with its topic record, so compaction removes them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from actors.core.controller.topic_metadata import TopicMetadata
from actors.core.replication.leader_and_isr import LeaderAndIsr
from storage.kafka_uuid import uuid_text

PARTITION_KEY_PREFIX = "partition/"

Record = tuple[str, dict[str, Any] | None]


def partition_key(topic: str, partition: int) -> str:
    return f"{PARTITION_KEY_PREFIX}{topic}/{partition}"


def partition_record(topic: TopicMetadata, partition: int) -> Record:
    """The record of the partition's state as `topic` has it."""
    return partition_key(topic.name, partition), {
        "topic_id": uuid_text(topic.topic_id),
        "leader": topic.partitions[partition],
        "state": topic.state(partition).to_json(),
    }


def partition_tombstones(topic: TopicMetadata) -> list[Record]:
    """Null records for every partition of a deleted topic."""
    return [(partition_key(topic.name, partition), None) for partition in topic.partitions]


def replayed_partition_states(
    topics: Mapping[str, TopicMetadata],
    topic_offsets: Mapping[str, int],
    records: Iterable[tuple[int, str, dict[str, Any]]],
) -> dict[str, TopicMetadata]:
    """The topics that partition records (offset, key, value) change, each with the states that count (see the module
    docstring)."""
    changed: dict[str, tuple[dict[int, str], dict[int, LeaderAndIsr]]] = {}
    for offset, key, body in records:
        name, _, number = key[len(PARTITION_KEY_PREFIX) :].rpartition("/")
        topic = topics.get(name)
        if topic is None or offset < topic_offsets[name] or body["topic_id"] != uuid_text(topic.topic_id):
            continue
        partition = int(number)
        if partition not in topic.partitions:
            continue
        partitions, replication = changed.setdefault(name, (dict(topic.partitions), dict(topic.replication)))
        partitions[partition] = body["leader"]
        replication[partition] = LeaderAndIsr.from_json(name, partition, body["state"])
    return {
        name: replace(topics[name], partitions=partitions, replication=replication)
        for name, (partitions, replication) in changed.items()
    }
