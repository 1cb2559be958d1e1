"""The controller's topics: creating them (replicas placed on the least-loaded brokers, each created on its
broker, the topic deleted again if one fails), growing them, their configs, deleting them (Kafka's asynchronous
delete, then the group coordinator told), and reading them. A mixin of `Controller`, whose state, lock and
metadata log it works on (declared below for the type checker only); the module docstring of
`actors.core.controller.controller` says what a topic record holds."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from actors.core.controller.assignment import check_replication_factor, new_partition_state, place_replicas
from actors.core.controller.node_broker import NodeBroker
from actors.core.controller.partition_records import partition_tombstones
from actors.core.controller.reassignment import check_target
from actors.core.controller.topic_metadata import INTERNAL_TOPICS, TopicMetadata
from actors.core.replication.leader_and_isr import LeaderAndIsr
from storage import file_names
from storage.arguments import is_int
from storage.config.broker_config import BrokerConfig
from storage.config.log_config import LogConfig
from storage.errors import (
    BrokerNotAvailableError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidTopicError,
    RaybrokerError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from storage.kafka_uuid import random_uuid
from storage.logdir.log_dirs import METADATA_TOPIC
from storage.pending import Pending, collect

logger = logging.getLogger(__name__)

# A topic may have at most this many partitions: far more than a cluster of this kind hosts (a written partition
# replica holds up to ~1.4 MiB of its partition host process, docs/operating.md, and each
# `log.partitions.per.process` of them a process) is refused up front instead of exhausting the nodes' memory.
MAX_PARTITIONS_PER_TOPIC = 10_000


class TopicAdmin:
    """Topics' creation, growth, configs, deletion and reads, for `Controller` (see the module docstring)."""

    if TYPE_CHECKING:
        config: BrokerConfig
        _lock: threading.RLock
        _brokers: dict[str, NodeBroker]
        _topics: dict[str, TopicMetadata]
        _topic_deleted: Callable[[str], None] | None

        def _write(self, key: str, value: dict[str, Any] | None) -> int: ...

        def _write_many(self, records: Sequence[tuple[str, dict[str, Any] | None]]) -> int: ...

        def _persist_topic(self, topic: TopicMetadata) -> None: ...

        def _push(self, states: Iterable[LeaderAndIsr], only: str | None = None) -> None: ...

        def _broker(self, node_id: str) -> NodeBroker: ...

        def _placeable(self) -> list[str]: ...

    def _validated_config(self, config: object) -> dict[str, str]:
        if config is not None and not isinstance(config, Mapping):
            raise InvalidConfigError(f"a topic config must be a mapping, not {type(config).__name__}")
        overrides = {str(k): str(v) for k, v in (config or {}).items()}
        LogConfig.from_properties(overrides, base=self.config.log_config)
        return overrides

    def create_topic(
        self,
        name: str,
        partitions: int,
        config: Mapping[str, str] | None = None,
        validate_only: bool = False,
        replication_factor: int | None = None,
        assignment: Sequence[Sequence[str]] | None = None,
    ) -> TopicMetadata:
        """Creates the topic's partitions, `replication_factor` replicas each (None or -1:
        `default.replication.factor`) on distinct least-loaded brokers, or each partition's replicas on the brokers
        `assignment` names (Kafka's CreateTopics; `partitions` is then its length). If a replica cannot be
        created, the topic is deleted again (with the replicas that were) and the error raised. With
        `validate_only`, runs every check and places the partitions but writes and creates nothing."""
        file_names.validate_topic(name)
        if name == METADATA_TOPIC:
            raise InvalidTopicError(f"topic name {name!r} is reserved for the cluster metadata log")
        _check_partition_count(partitions)
        overrides = self._validated_config(config)
        with self._lock:
            if name in self._topics:
                raise TopicExistsError(f"topic {name!r} already exists")
            # Kafka's rule: metric names turn '.' into '_', so 'a.b' and 'a_b' may not both exist.
            colliding = [t for t in self._topics if t.replace(".", "_") == name.replace(".", "_")]
            if colliding:
                raise InvalidTopicError(f"topic {name!r} collides with existing topic {colliding[0]!r}")
            if assignment is None:
                placed = self._place(name, partitions, self._replication_factor(replication_factor))
            else:
                placed = self._assigned(assignment, None)
                if len(placed) != partitions:
                    raise InvalidReplicaAssignmentError(
                        f"{len(placed)} partition assignment(s) for a topic of {partitions} partition(s)"
                    )
            states = {p: new_partition_state(name, p, replicas) for p, replicas in enumerate(placed)}
            topic = TopicMetadata(
                name, {p: s.leader for p, s in states.items()}, overrides, states, self._new_topic_id()
            )
            if validate_only:
                return topic
            self._persist_topic(topic)
            try:
                self._create_partitions(topic, range(partitions))
            except BaseException:
                self.delete_topic(name)
                raise
            return topic

    def _create_partitions(self, topic: TopicMetadata, partitions: range) -> None:
        """Creates every replica of the partitions on its broker, records the log dir each landed in and tells
        each its state; if any creation fails, raises its error once every creation has ended, so that the
        caller's rollback never overtakes a creation still running."""
        asked = [(p, node) for p in partitions for node in topic.state(p).replicas]
        placements = collect(
            [self._broker(node).create_partition(topic.name, p, topic.config, topic.topic_id) for p, node in asked]
        )
        directories: dict[int, LeaderAndIsr] = {}
        for (partition, node), placement in zip(asked, placements, strict=True):
            if placement.directory_id:
                state = directories.get(partition) or topic.state(partition)
                directories[partition] = state.with_directory(node, placement.directory_id)
        placed = topic.with_states(directories.values())
        if directories:
            self._persist_topic(placed)
        if topic.replication_factor > 1:
            self._push(placed.state(p) for p in partitions)

    def add_partitions(
        self, name: str, total: int, validate_only: bool = False, assignment: Sequence[Sequence[str]] | None = None
    ) -> TopicMetadata:
        """Grows a topic to `total` partitions (Kafka's CreatePartitions; topics never shrink), the new ones placed
        as `create_topic` places them, or by `assignment` (one per new partition, each with the topic's replication
        factor). If a new partition cannot be created, the topic goes back to its old partitions and the error is
        raised. With `validate_only`, runs every check and places the partitions but writes and creates nothing."""
        _check_partition_count(total)
        with self._lock:
            topic = self.describe_topic(name)
            current = len(topic.partitions)
            if total <= current:
                raise InvalidPartitionsError(f"topic {name!r} has {current} partitions; {total} would not grow it")
            if assignment is None:
                placed = self._place(name, total - current, topic.replication_factor)
            elif len(assignment) != total - current:
                raise InvalidReplicaAssignmentError(
                    f"Attempted to add {total - current} additional partition(s), but only {len(assignment)} "
                    "assignment(s) were specified."
                )
            else:
                placed = self._assigned(assignment, topic.replication_factor)
            grown = topic.with_states(
                new_partition_state(name, partition, replicas)
                for partition, replicas in zip(range(current, total), placed, strict=True)
            )
            if validate_only:
                return grown
            self._persist_topic(grown)
            try:
                self._create_partitions(grown, range(current, total))
            except BaseException:
                self._persist_topic(topic)
                collect(self._delete_replicas_of(grown, range(current, total)))
                raise
            return grown

    def alter_topic_config(self, name: str, config: Mapping[str, str | None]) -> TopicMetadata:
        """Merges `config` into the topic's overrides (a None value removes that override, as Kafka's incremental
        DELETE) and applies it to every partition."""
        with self._lock:
            merged = {**self.describe_topic(name).config, **config}
            return self.set_topic_config(name, {key: value for key, value in merged.items() if value is not None})

    def set_topic_config(self, name: str, config: Mapping[str, str], validate_only: bool = False) -> TopicMetadata:
        """Replaces the topic's overrides with `config` (keys left out go back to the broker's defaults, as Kafka's
        AlterConfigs) and applies them to every partition; with `validate_only`, only checks them."""
        with self._lock:
            topic = self.describe_topic(name)
            merged = self._validated_config(config)
            altered = replace(topic, config=merged)
            if validate_only:
                return altered
            self._persist_topic(altered)
            nodes = sorted(
                {node for p in topic.partitions for node in topic.state(p).replicas if node in self._brokers}
            )
            collect([self._broker(node).set_topic_config(name, merged) for node in nodes])
            return altered

    def delete_topic(self, name: str) -> None:
        """Kafka-style async delete: partitions stop now, their folders are removed after the delay; then
        `topic_deleted` is told (the group coordinator deletes the topic's committed offsets)."""
        with self._lock:
            topic = self.describe_topic(name)
            self._write_many([(f"topic/{name}", None), *partition_tombstones(topic)])
            del self._topics[name]
            pending = self._delete_replicas_of(topic, topic.partitions)
        try:
            collect(pending)
        finally:
            self._tell_topic_deleted(name)

    def _delete_replicas_of(self, topic: TopicMetadata, partitions: Iterable[int]) -> list[Pending[list[int]]]:
        """Asks each running broker holding replicas of `partitions` to delete them, in one call a broker."""
        held: dict[str, list[int]] = {}
        for partition in partitions:
            for node in topic.state(partition).replicas:
                if node in self._brokers:
                    held.setdefault(node, []).append(partition)
        return [self._brokers[node].delete_partitions(topic.name, numbers) for node, numbers in held.items()]

    def _tell_topic_deleted(self, name: str) -> None:
        if self._topic_deleted is None:
            return
        try:
            self._topic_deleted(name)
        except RaybrokerError as exc:
            logger.warning("topic %s deleted, but its committed offsets were not: %s", name, exc)

    def describe_topic(self, name: str) -> TopicMetadata:
        topic = self._topics.get(name) if isinstance(name, str) else None
        if topic is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        return topic

    def topic_names(self) -> dict[uuid.UUID, str]:
        """Every topic's name by its topic id (the Kafka listeners resolve the ids of Fetch v13+ with it)."""
        with self._lock:
            return {topic.topic_id: name for name, topic in self._topics.items()}

    def _new_topic_id(self) -> uuid.UUID:
        """A random topic id no topic of the cluster has (Kafka's `Uuid.randomUuid`, never a reserved id)."""
        taken = {topic.topic_id for topic in self._topics.values()}
        while True:
            topic_id = random_uuid()
            if topic_id not in taken:
                return topic_id

    def list_topics(self, include_internal: bool = False) -> list[str]:
        return sorted(name for name in self._topics if include_internal or name not in INTERNAL_TOPICS)

    def topics(self) -> dict[str, TopicMetadata]:
        return dict(self._topics)

    def partition_states(self) -> list[LeaderAndIsr]:
        """Every partition's replication state (the cluster's gauges read them at each export)."""
        return [state for topic in list(self._topics.values()) for state in topic.states()]

    def topic_configs(self) -> dict[str, dict[str, str]]:
        return {name: dict(topic.config) for name, topic in self._topics.items()}

    def _place(self, topic: str, count: int, replication_factor: int) -> list[tuple[str, ...]]:
        """Replicas for `count` new partitions of `topic` (`actors.core.controller.assignment.place_replicas`)."""
        if not self._brokers:
            raise BrokerNotAvailableError("no broker is registered; start one with `raybroker start`")
        return place_replicas(count, replication_factor, self._placeable(), self.partition_states(), topic)

    def _assigned(self, assignment: Sequence[Sequence[str]], replication_factor: int | None) -> list[tuple[str, ...]]:
        """A manual assignment's replicas, checked as Kafka's controller checks one: each list names running
        brokers, each once, and as many as `replication_factor` (None: as many as the first list);
        `InvalidReplicaAssignmentError` otherwise."""
        placed: list[tuple[str, ...]] = []
        expected = replication_factor
        for replicas in assignment:
            nodes = check_target(replicas, self._brokers)
            if expected is None:
                expected = len(nodes)
            if len(nodes) != expected:
                raise InvalidReplicaAssignmentError(
                    f"The manual partition assignment includes a partition with {len(nodes)} replica(s), but this "
                    f"is not consistent with previous partitions, which have {expected} replica(s)."
                )
            placed.append(nodes)
        return placed

    def _replication_factor(self, requested: object) -> int:
        """The topic's replication factor: `requested`, or `default.replication.factor` for None or -1 (Kafka's
        CreateTopics lets -1 mean the broker's default)."""
        if requested is None or requested == -1:
            requested = self.config.default_replication_factor
        return check_replication_factor(requested, len(self._brokers))


def _check_partition_count(partitions: object) -> None:
    if not is_int(partitions):
        raise InvalidPartitionsError(f"partition count must be an int, not {type(partitions).__name__}")
    if not 1 <= partitions <= MAX_PARTITIONS_PER_TOPIC:
        raise InvalidPartitionsError(f"partition count {partitions} is outside 1..{MAX_PARTITIONS_PER_TOPIC}")
