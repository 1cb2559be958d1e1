"""The admin facade: Kafka's Admin client (topics, configs, partitions, records, offsets, SCRAM credentials, ACLs) over
the broker's actors.

Topic metadata comes from the controller (`actors.core.controller.controller`): each partition's replicas, in-sync
replicas, leader and leader epoch, named by the Ray node ids of their brokers; the live numbers of each partition
(offsets, size, segments, folder) come from its leader replica's `state()`, asked of all partitions at once. A
partition with no leader (offline: none of its in-sync replicas runs), or whose leader's broker is not running (its
node was lost while no controller ran, until a session later the controller takes it for lost), has no replica to
ask, and is described with -1 for its numbers, as Kafka answers an unknown offset, so that an operator still sees it
(`raybroker topics --describe --unavailable-partitions`); so is a partition whose leader replica went away between
the controller's answer and its own (removed as a reassignment completed).

SCRAM credentials and ACLs live in the controller (`actors.core.security`); a password is salted and hashed here,
as Kafka's Admin client does, and only the credential travels. Every method blocks until the broker has answered
and raises the broker's typed errors (`UnknownTopicOrPartitionError`, `TopicExistsError`, `InvalidPartitionsError`,
`InvalidReplicationFactorError`, `InvalidConfigError`, `PolicyViolationError`, `InvalidAclError`,
`UnacceptableCredentialError`, `ResourceNotFoundError`, ...), never Ray's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from actors.calls import call
from actors.clients.broker import Broker
from actors.core.controller.topic_metadata import AdvertisedListener, TopicMetadata
from actors.core.replication.leader_and_isr import NO_LEADER, LeaderAndIsr, ReplicaSet
from actors.core.security.acl_bindings import AclBinding, AclBindingFilter, InvalidAclError
from actors.core.security.scram import (
    MIN_ITERATIONS,
    SCRAM_MECHANISMS,
    ResourceNotFoundError,
    ScramCredential,
    check_mechanism,
    check_user,
)
from actors.server.partition_lookup import partition_actor, replica_actor
from storage.arguments import is_int
from storage.errors import (
    BrokerNotAvailableError,
    InvalidConfigError,
    InvalidRequestError,
    RaybrokerError,
    UnknownTopicOrPartitionError,
)
from storage.kafka_uuid import ZERO_UUID, uuid_text
from storage.logdir.partition_handles import PartitionState

# Kafka's ListOffsets sentinels (OffsetSpec.earliest(), latest(), maxTimestamp()).
OFFSET_SPECS = {"earliest": -2, "latest": -1, "max-timestamp": -3}
# An offline partition's numbers: nobody can read them, and -1 is Kafka's unknown offset.
UNKNOWN = -1


@dataclass(frozen=True, slots=True)
class PartitionDescription(ReplicaSet):
    """One partition: where its leader lives (Ray node, log dir) and its offsets and size now, and its replication
    (Kafka's TopicPartitionInfo): the leader's Ray node id (`node_id`; "" while the partition is offline, then the
    numbers are -1 and `log_dir` ""), its leader epoch, its replicas (preferred leader first) and in-sync
    replicas, by the Ray node ids of their brokers."""

    partition: int
    node_id: str
    log_dir: str
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    size_bytes: int
    segments: int
    leader_epoch: int
    replicas: tuple[str, ...]
    isr: tuple[str, ...]

    @property
    def offline(self) -> bool:
        """No leader: none of its in-sync replicas runs (kafka-topics' `--unavailable-partitions`)."""
        return self.node_id == NO_LEADER


@dataclass(frozen=True, slots=True)
class TopicDescription:
    """A topic's config overrides (Kafka names), its replication factor, its partitions, in partition order, and its
    topic id in Kafka's text (`storage.kafka_uuid`; empty for none)."""

    name: str
    config: dict[str, str]
    partitions: list[PartitionDescription]
    replication_factor: int
    topic_id: str = ""


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    """The running brokers by Ray node id, and the Kafka `node.id` of each one whose node runs a Kafka listener
    (Kafka's DescribeCluster): what Kafka's tools call a broker's id."""

    brokers: tuple[str, ...]
    node_ids: dict[str, int]


class Admin:
    """Manages topics of the running broker; see the module docstring."""

    def __init__(self, broker: Broker | None = None) -> None:
        self._broker = broker or Broker.connect()
        self._controller = self._broker.controller

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        config: Mapping[str, str] | None = None,
        replication_factor: int | None = None,
    ) -> TopicDescription:
        """Creates the topic (Kafka's CreateTopics); `config` takes Kafka's topic config names, and each partition
        gets `replication_factor` replicas on distinct brokers (None or -1: the broker's
        `default.replication.factor`). `InvalidReplicationFactorError` below 1 or above the running brokers."""
        created = self._controller.create_topic.remote(
            name, partitions, _config_mapping(config), replication_factor=replication_factor
        )
        return self._describe(call(created))

    def delete_topic(self, name: str) -> None:
        call(self._controller.delete_topic.remote(name))

    def list_topics(self, include_internal: bool = False) -> list[str]:
        return call(self._controller.list_topics.remote(include_internal))

    def describe_topic(self, name: str) -> TopicDescription:
        return self._describe(call(self._controller.describe_topic.remote(name)))

    def alter_topic_config(self, name: str, config: Mapping[str, str | None]) -> TopicDescription:
        """Merges `config` into the topic's overrides (None removes an override); every partition applies it at
        once."""
        return self._describe(call(self._controller.alter_topic_config.remote(name, _config_mapping(config))))

    def alter_broker_configs(self, broker: str, changes: Mapping[str, str | None]) -> None:
        """Sets (None: deletes) run-time configs of the broker whose Kafka node.id is `broker` ("": every broker),
        as `kafka-configs --alter --entity-type brokers`: the replication throttles
        (`actors.core.controller.dynamic_broker_configs`); `InvalidRequestError` for anything else."""
        call(self._controller.alter_broker_configs.remote(broker, dict(changes)))

    def broker_configs(self, broker: str) -> tuple[dict[str, str], dict[str, str]]:
        """The run-time configs set for broker `broker` and for every broker."""
        levels: tuple[dict[str, str], dict[str, str]] = call(self._controller.broker_configs.remote(broker))
        return levels

    def add_partitions(self, name: str, total: int) -> TopicDescription:
        """Grows the topic to `total` partitions (topics never shrink)."""
        return self._describe(call(self._controller.add_partitions.remote(name, total)))

    def describe_cluster(self) -> ClusterDescription:
        """The running brokers and their listeners' Kafka node ids."""
        brokers_ref, listeners_ref = self._controller.brokers.remote(), self._controller.listeners.remote()
        listeners: dict[str, AdvertisedListener] = call(listeners_ref)
        return ClusterDescription(
            tuple(call(brokers_ref)), {node: listener.broker_id for node, listener in listeners.items()}
        )

    def alter_partition_reassignments(
        self,
        reassignments: Mapping[tuple[str, int], Sequence[str] | None],
        allow_replication_factor_change: bool = True,
    ) -> dict[tuple[str, int], RaybrokerError | None]:
        """Kafka's `alterPartitionReassignments`: each (topic, partition) moved to its target replicas, named by
        the Ray node ids of their brokers (None cancels the move in progress); each partition's error, None where
        the move started (`actors.core.controller.reassignment`: the new replicas catch up, then the old go).
        Without `allow_replication_factor_change` (Kafka's option of that name, KIP-860), a move to another number
        of replicas is refused with `InvalidReplicationFactorError`."""
        return call(
            self._controller.alter_partition_reassignments.remote(dict(reassignments), allow_replication_factor_change)
        )

    def list_partition_reassignments(self) -> list[LeaderAndIsr]:
        """Kafka's `listPartitionReassignments`: the state of each partition being moved (`adding`, `removing`)."""
        return call(self._controller.partition_reassignments.remote())

    def drain_broker(self, node_id: str, dry_run: bool = False) -> list[tuple[str, int, tuple[str, ...]]]:
        """Moves every replica off the broker on Ray node `node_id` before the node is removed
        (`Controller.drain_broker`): the moves started, each (topic, partition, target replicas); with `dry_run`
        the moves it would start. `InvalidReplicaAssignmentError`, nothing moved, if a partition cannot move."""
        return call(self._controller.drain_broker.remote(node_id, dry_run))

    def balance(self, dry_run: bool = False) -> list[tuple[str, int, tuple[str, ...]]]:
        """Spreads replicas evenly over the running brokers (`Controller.balance`): the moves started, each (topic,
        partition, target replicas); with `dry_run` the moves it would start."""
        return call(self._controller.balance.remote(dry_run))

    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """Kafka's DeleteRecords: records below `offset` go; returns the new log start offset."""
        return call(self._broker.partition(topic, partition).delete_records.remote(offset))

    def list_offsets(self, topic: str, spec: str | int) -> dict[int, tuple[int, int] | None]:
        """Per partition, the (offset, timestamp) Kafka's ListOffsets gives for `spec`: `earliest`, `latest`,
        `max-timestamp`, or a timestamp in ms (the first record at or after it); None when there is none."""
        timestamp = _offset_spec(spec)
        partitions = sorted(self._broker.topic(topic).partitions)
        refs = [partition_actor(topic, p).list_offset.remote(timestamp) for p in partitions]
        answers = {}
        for partition, ref in zip(partitions, refs, strict=True):
            found = call(ref)
            answers[partition] = None if found is None else (found.offset, found.timestamp)
        return answers

    # --- SCRAM credentials (Kafka's AlterUserScramCredentials, DescribeUserScramCredentials) ------------------

    def upsert_scram_credential(
        self, user: str, mechanism: str, password: str, iterations: int = MIN_ITERATIONS
    ) -> None:
        """Sets `user`'s credential for `mechanism` (SCRAM-SHA-256 or SCRAM-SHA-512) from `password`."""
        check_user(user)
        credential = ScramCredential.from_password(mechanism, password, iterations)
        call(self._controller.upsert_scram_credential.remote(user, credential))

    def delete_scram_credential(self, user: str, mechanism: str | None = None) -> None:
        """Deletes `user`'s credential for `mechanism`, or for every mechanism when None; `ResourceNotFoundError`
        when there is no such credential."""
        mechanisms = list(SCRAM_MECHANISMS) if mechanism is None else [check_mechanism(mechanism)]
        deleted = [call(self._controller.delete_scram_credential.remote(check_user(user), m)) for m in mechanisms]
        if not any(deleted):
            what = "SCRAM credential" if mechanism is None else f"{mechanism} credential"
            raise ResourceNotFoundError(f"user {user!r} has no {what}")

    def describe_scram_credentials(self, users: Iterable[str] | None = None) -> dict[str, dict[str, int]]:
        """user -> mechanism -> iterations (never the keys), for `users` or every user with a credential;
        `ResourceNotFoundError` for a named user that has none."""
        credentials: dict[str, dict[str, ScramCredential]] = call(self._controller.scram_credentials.remote())
        names = sorted(credentials) if users is None else [check_user(user) for user in users]
        missing = [name for name in names if name not in credentials]
        if missing:
            raise ResourceNotFoundError(f"user {missing[0]!r} has no SCRAM credential")
        return {name: {m: c.iterations for m, c in sorted(credentials[name].items())} for name in names}

    # --- ACLs (Kafka's CreateAcls, DescribeAcls, DeleteAcls) --------------------------------------------------

    def create_acls(self, bindings: Iterable[AclBinding]) -> None:
        """Adds the bindings; one that exists already is left as it is."""
        call(self._controller.create_acls.remote(list(bindings)))

    def describe_acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """The bindings `acl_filter` matches."""
        if not isinstance(acl_filter, AclBindingFilter):
            raise InvalidAclError(f"not an ACL binding filter: {acl_filter!r}")
        _, bindings = call(self._controller.acls.remote())
        return [binding for binding in bindings if acl_filter.matches(binding)]

    def delete_acls(self, filters: Iterable[AclBindingFilter]) -> list[list[AclBinding]]:
        """Deletes every binding a filter matches; per filter, the bindings it matched."""
        return call(self._controller.delete_acls.remote(list(filters)))

    def _describe(self, metadata: TopicMetadata) -> TopicDescription:
        """The topic with each partition's replication state and its leader's log numbers (see the module
        docstring)."""
        states = [metadata.state(p) for p in sorted(metadata.partitions)]
        running = set(call(self._controller.brokers.remote()))
        refs = [
            None if state.offline or state.leader not in running else _ask_leader(metadata.name, state)
            for state in states
        ]
        described = [_partition_description(state, _leader_log(ref)) for state, ref in zip(states, refs, strict=True)]
        return TopicDescription(
            metadata.name,
            dict(metadata.config),
            described,
            metadata.replication_factor,
            "" if metadata.topic_id == ZERO_UUID else uuid_text(metadata.topic_id),
        )


# What a replica the controller named answers when it went away since (deleted as a move completed, its process
# ended): it is described as one without a leader.
_REPLICA_GONE = (BrokerNotAvailableError, UnknownTopicOrPartitionError)


def _ask_leader(topic: str, state: LeaderAndIsr) -> object | None:
    """The pending `state()` call of the partition's leader replica; None if that replica is gone already."""
    try:
        return replica_actor(topic, state.partition, state.leader).state.remote()
    except _REPLICA_GONE:
        return None


def _leader_log(ref: object | None) -> PartitionState | None:
    """A leader replica's `state()` answer; None when there was no replica to ask or the one asked went away before
    answering."""
    if ref is None:
        return None
    try:
        return call(ref)
    except _REPLICA_GONE:
        return None


def _partition_description(state: LeaderAndIsr, log: PartitionState | None) -> PartitionDescription:
    """One partition from its replication state and its leader's log numbers (None while it has no leader)."""
    if log is None:
        numbers = ("", UNKNOWN, UNKNOWN, UNKNOWN, UNKNOWN, UNKNOWN)
    else:
        numbers = (
            str(Path(log.directory).parent),
            log.log_start_offset,
            log.log_end_offset,
            log.high_watermark,
            log.size_bytes,
            log.segments,
        )
    return PartitionDescription(state.partition, state.leader, *numbers, state.leader_epoch, state.replicas, state.isr)


def _config_mapping(config: Mapping[str, str | None] | None) -> dict[str, str | None]:
    """A plain dict of `config` for the controller; anything but a mapping is an `InvalidConfigError`."""
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise InvalidConfigError(f"a topic config must be a mapping, not {type(config).__name__}")
    return dict(config)


def _offset_spec(spec: str | int) -> int:
    if isinstance(spec, str):
        if spec in OFFSET_SPECS:
            return OFFSET_SPECS[spec]
        if spec.isdigit():
            return int(spec)
    elif is_int(spec) and spec >= 0:
        return spec
    raise InvalidRequestError(
        f"offset spec must be one of {', '.join(OFFSET_SPECS)} or a timestamp in ms >= 0, got {spec!r}"
    )


__all__ = ["Admin", "ClusterDescription", "PartitionDescription", "TopicDescription"]
