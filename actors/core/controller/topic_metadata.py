"""What the controller tells about topics and listeners: a topic's partitions, config and replication states
(`TopicMetadata`), and where Kafka clients reach a node's broker (`AdvertisedListener`). Frozen values, so they
travel between processes and threads unchanged."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from actors.core.replication.leader_and_isr import LeaderAndIsr
from storage.kafka_uuid import ZERO_UUID, parse_uuid, uuid_text
from storage.logdir.log_dirs import METADATA_TOPIC

# The group coordinator's committed offsets (`actors.core.groups.offsets_topic`), internal as Kafka's is.
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
# The transaction coordinator's transaction states (`actors.core.transactions.state_topic`), internal as Kafka's is.
TRANSACTION_STATE_TOPIC = "__transaction_state"
# The share-partitions' durable states (`actors.core.shares.share_state_store`), internal as Kafka's is.
SHARE_GROUP_STATE_TOPIC = "__share_group_state"
INTERNAL_TOPICS = frozenset({METADATA_TOPIC, CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_GROUP_STATE_TOPIC})


@dataclass(frozen=True, slots=True)
class AdvertisedListener:
    """Where Kafka clients reach the broker of one node: its Kafka `node.id`, its first advertised address, and
    every advertised listener as (listener name, host, port)."""

    broker_id: int
    host: str
    port: int
    listeners: tuple[tuple[str, str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """A topic's partitions (partition -> node id of its leader, or of its last leader while it has none), its
    config overrides (Kafka names), each partition's replication state, and its topic id (KIP-516: a random Kafka
    Uuid given at creation, `storage.kafka_uuid`; a topic created again under the same name gets a new one)."""

    name: str
    partitions: dict[int, str]
    config: dict[str, str]
    replication: dict[int, LeaderAndIsr] = field(default_factory=dict)
    topic_id: uuid.UUID = ZERO_UUID

    @classmethod
    def from_record(cls, name: str, body: dict[str, Any]) -> TopicMetadata:
        """The topic from its metadata-log record's value (`to_record`; one from before replication or topic ids
        reads as one replica leading in epoch 0, or the zero id)."""
        replication = {
            int(p): LeaderAndIsr.from_json(name, int(p), state) for p, state in body.get("replication", {}).items()
        }
        topic_id = parse_uuid(body["topic_id"]) if "topic_id" in body else ZERO_UUID
        partitions = {int(p): node for p, node in body["partitions"].items()}
        return cls(name, partitions, dict(body["config"]), replication, topic_id)

    def to_record(self) -> dict[str, Any]:
        """The value of the topic's metadata-log record (`topic/<name>`)."""
        return {
            "topic_id": uuid_text(self.topic_id),
            "partitions": {str(p): node for p, node in self.partitions.items()},
            "replication": {str(p): state.to_json() for p, state in self.replication.items()},
            "config": self.config,
        }

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS

    @property
    def replication_factor(self) -> int:
        return len(self.state(0).replicas) if self.partitions else 0

    def state(self, partition: int) -> LeaderAndIsr:
        """The partition's replication state (a topic from before replication: its one replica leads, epoch 0)."""
        state = self.replication.get(partition)
        if state is None:
            node = self.partitions[partition]
            state = LeaderAndIsr(self.name, partition, node, 0, (node,), (node,))
        return state

    def states(self) -> list[LeaderAndIsr]:
        """The replication state of each partition (`state`)."""
        return [self.state(partition) for partition in self.partitions]

    def with_states(self, states: Iterable[LeaderAndIsr]) -> TopicMetadata:
        """The topic with each of `states` as its partition's replication state (the last one given wins)."""
        partitions = dict(self.partitions)
        replication = dict(self.replication)
        for state in states:
            partitions[state.partition] = state.leader or partitions.get(state.partition, state.replicas[0])
            replication[state.partition] = state
        return replace(self, partitions=partitions, replication=replication)
