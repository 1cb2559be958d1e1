"""The controller: the cluster's metadata, one per cluster, as a plain class over injected seams.

State it owns, and where it is persisted: a compacted metadata log, `__cluster_metadata-0` in the
metadata dir (Kafka's `metadata.log.dir`; by default the first of `log.dirs` on the node that started
the cluster), written through `storage.Log` like any partition, so it has Kafka's crash guarantees.
Its records (JSON values, readable with `raybroker dump-log --print-data-log`):

| key                | value                                                            |
|--------------------|------------------------------------------------------------------|
| `cluster`          | `{"cluster_id": ...}`                                            |
| `topic/<name>`     | `{"topic_id", "partitions": {"0": node}, "replication": {"0": state}, "config"}`; null: deleted |
| `partition/<name>/<p>` | `{"topic_id", "leader", "state"}`: one partition's newer state (`partition_records`) |
| `producer-ids`     | `{"next": N}`: the next idempotent-producer id to hand out       |
| `coordinator-epochs` | `{"next": N}`: the next coordinator epoch to hand out (transaction and group coordinators) |
| `controller`       | `{"epoch", "node"}`: the controller that started last, in which epoch on which node |
| `acl/<resource type>/<pattern type>/<name>` | `{"acls": [{"principal", "host", "operation", "permission_type"}]}` |
| `scram/<mechanism>/<user>` | `{"mechanism", "salt", "stored_key", "server_key", "iterations"}` |
| `quota/<entity>`   | `{"values": {key: value}}`: one client quota entity (`actors.core.quotas.client_quotas`) |
| `feature/<name>`   | `{"level": n}`: a feature's finalized level (`actors.core.controller.finalized_features`) |
| `broker-config/<id>` | `{"configs": {key: value}}`: run-time configs of a broker ("": of every broker) |
| `group-config/<group>` | `{"configs": {key: value}}`: a group's own configs (`...controller.group_config_store`) |

A topic record names the topic's id (KIP-516: a random Kafka Uuid in Kafka's text, `storage.kafka_uuid`, drawn at
creation, so a topic created again under the same name has another), each partition's leader node (its last leader
while it has none) and its replication state (`LeaderAndIsr.to_json`: leader, epoch, replicas, isr, version); a record
without `replication` (written before replication) reads as one replica leading in epoch 0, and one without
`topic_id` (written before topic ids) gets an id drawn and written when the log is replayed, as Kafka gives the
topics of a cluster from before topic ids theirs. Each replica is created with its topic's id, which its folder's
`partition.metadata` keeps (`storage.files.partition_metadata`).
An `acl/` record holds every binding of one resource pattern, e.g. `acl/TOPIC/PREFIXED/orders-`
(`actors.core.security.acl_store`); a `scram/` record one user's credential for one mechanism, bytes in
base64, never the password (`actors.core.security.credential_store`); either gets a null value once deleted.

Every write is also sent to the copies of the log that other brokers keep (`actors.core.controller.
metadata_replication`: up to `metadata.replication.factor` - 1 metadata mirrors, each batch stamped with this
controller's epoch, and a controller fenced once a copy has followed a newer one). On start the newest copy among
the running brokers is taken first if it is newer than the log (a controller on a node whose disk was replaced), then
the log is replayed (latest value per key), so a restarted controller finds its topics again.
Which brokers are registered is not persisted: the controller starts with the brokers its host finds running
(`brokers`), and each broker that starts later registers (`register_broker`).
Neither are the Kafka listeners' advertised addresses (`register_listener`), which each listener announces when
it starts and every `broker.heartbeat.interval.ms` after (so a controller started again learns them within one
interval), and withdraws when it stops; Metadata names a node's partitions' leader by them.
Every change a Metadata answer shows (a record written, a broker or listener come or gone) moves a count the
listeners' metadata caches watch (`await_metadata_change`, `actors.core.controller.metadata_changes`).
The ACL version (`acls_version`) is the offset after the last ACL record, so it moves with every ACL change
and survives a restart: the Kafka listeners poll it and rebuild their authorizer only when it moved.
Which nodes hold a partition's replicas, which of them leads in which leader epoch and which are in sync is
decided here (`actors.core.controller.assignment`: placement, clean elections) and pushed to every replica
(`ReplicaNotifier.update_replication`, Kafka's LeaderAndIsr); which log dir holds a replica is decided by its
node's log manager. Its host tells it which nodes are alive (`check_brokers`, from the Ray actor's monitor thread),
and each broker sends a heartbeat every `broker.heartbeat.interval.ms` (`broker_heartbeat`): a broker whose node
died, or that sent none for `broker.session.timeout.ms` (a paused or hung process), leaves every ISR and its
partitions get new leaders from their ISR (Kafka's broker fencing and election); every
`leader.imbalance.check.interval.seconds` by the injected clock, the same pass moves leadership back to preferred
replicas that are in sync (`auto.leader.rebalance.enable`). Leaders ask for ISR changes with
`alter_partition` (Kafka's AlterPartition), which is refused unless they still lead in that epoch. Topic names
follow Kafka's rules (and `__cluster_metadata`, the controller's own folder, is reserved); configs must be a mapping
validated against Kafka's names and ranges before anything is written.

Seams: the clock (`storage.clock`), each node's broker (`NodeBroker`: create, delete and configure partitions,
list the placements it holds; its calls answer a `storage.pending.Pending`, so the controller asks every broker at
once and then collects), a way to find a node's broker when it registers, the replicas' notifier, the metrics
(`actors.core.role_metrics`: every ISR change it persists, counted as Kafka's IsrShrinksPerSec or IsrExpandsPerSec),
and `topic_deleted(name)`, told after a topic is deleted so the group coordinator deletes its committed offsets
(Kafka's `onPartitionsDeleted`; a failure there is logged, the topic stays deleted), and
`group_config_changed(group, configs)` (a `GroupConfigVersion`), told after a group's configs changed so the group
coordinator applies them at the group's next heartbeat or fetch (a failure there is logged: the coordinator loads
every group's configs when it starts again). Calls are serialised by one lock; replicas and the group coordinator are
told outside it.

The class is split by what it owns: topics in `actors.core.controller.topic_admin`, replica moves in
`actors.core.controller.replica_moves` and the cluster's settings in `actors.core.controller.cluster_settings`, mixins
of `Controller` working on its state under its lock.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from actors.core.controller.assignment import (
    after_broker_lost,
    elect_if_offline,
    moved_replica,
    preferred_election,
)
from actors.core.controller.broker_sessions import BrokerSessions
from actors.core.controller.cluster_settings import ClusterSettings
from actors.core.controller.dynamic_broker_configs import (
    BROKER_CONFIG_KEY_PREFIX,
    DynamicBrokerConfigs,
)
from actors.core.controller.elections import ElectionError, ElectionType, requested_election
from actors.core.controller.finalized_features import FEATURE_KEY_PREFIX, FinalizedFeatures
from actors.core.controller.group_config_store import GROUP_CONFIG_KEY_PREFIX, GroupConfigStore, GroupConfigVersion
from actors.core.controller.metadata_changes import MetadataChanges
from actors.core.controller.metadata_replication import MetadataReplication
from actors.core.controller.node_broker import NodeBroker
from actors.core.controller.partition_records import (
    PARTITION_KEY_PREFIX,
    partition_record,
    replayed_partition_states,
)
from actors.core.controller.reassignment import (
    completed,
)
from actors.core.controller.replica_moves import ReplicaMoves
from actors.core.controller.topic_admin import TopicAdmin
from actors.core.controller.topic_metadata import (
    AdvertisedListener,
    TopicMetadata,
)
from actors.core.quotas.client_quotas import (
    QUOTA_KEY_PREFIX,
    ClientQuotaStore,
)
from actors.core.replication.leader_and_isr import LeaderAndIsr
from actors.core.role_metrics import NO_ROLE_METRICS, RoleMetrics
from actors.core.security.acl_store import ACL_KEY_PREFIX, AclStore
from actors.core.security.credential_store import SCRAM_KEY_PREFIX, ScramCredentialStore
from storage.arguments import is_int
from storage.clock import Clock
from storage.config.broker_config import BrokerConfig
from storage.errors import (
    BrokerNotAvailableError,
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidConfigError,
    InvalidRequestError,
    InvalidUpdateVersionError,
    NotControllerError,
    RaybrokerError,
    UnknownTopicOrPartitionError,
)
from storage.files.meta_properties import new_directory_id
from storage.kafka_uuid import ZERO_UUID
from storage.logdir.metadata_mirror import open_metadata_log
from storage.records.record_batch import RecordBatchBuilder

logger = logging.getLogger(__name__)

# How often the monitor pass looks for replicas to heal (`_heal_lost_replicas`).
HEAL_CHECK_MS = 1000


class ReplicaNotifier(Protocol):
    """Tells a replica its partition's new state (Kafka's LeaderAndIsr), without waiting for it."""

    def update_replication(self, node: str, state: LeaderAndIsr) -> None:
        """Raises `RaybrokerError` when the replica on `node` cannot be reached (it asks again when it opens)."""
        ...

    def forget_node(self, node: str) -> None:
        """`node`'s broker left: nothing is sent to it until it registers again (what it holds for it may go)."""
        ...


class Controller(TopicAdmin, ReplicaMoves, ClusterSettings):
    """Cluster metadata; see the module docstring. Thread-safe (one lock)."""

    def __init__(
        self,
        metadata_dir: Path,
        config: BrokerConfig,
        *,
        clock: Clock,
        brokers: Mapping[str, NodeBroker],
        find_broker: Callable[[str], NodeBroker],
        replicas: ReplicaNotifier,
        metrics: RoleMetrics = NO_ROLE_METRICS,
        topic_deleted: Callable[[str], None] | None = None,
        group_config_changed: Callable[[str, GroupConfigVersion], None] | None = None,
        node_id: str | None = None,
        claim_epoch: Callable[[int], int] | None = None,
    ) -> None:
        """`brokers` are the node brokers running when the controller starts (none when the cluster starts);
        `find_broker(node)` finds the broker of a node that registers (`BrokerNotAvailableError` if none runs);
        `metrics` counts the ISR changes; `topic_deleted(name)` is told of each deleted topic (see the module
        docstring); `group_config_changed(group, configs)` is told of each change of a group's configs; `node_id` is
        the controller's own node (its broker is no metadata mirror); `claim_epoch(at_least)`
        answers this controller's epoch, at least `at_least` and above every epoch it answered before (default:
        `at_least`, the epoch after the newest in the metadata log)."""
        self.config = config
        self._node_id = node_id
        self._topic_deleted = topic_deleted
        self._group_config_changed = group_config_changed
        self._clock = clock
        self._metrics = metrics
        self._find_broker = find_broker
        self._replicas = replicas
        self._lock = threading.RLock()
        self._metadata_changes = MetadataChanges()
        self._log = open_metadata_log(metadata_dir, clock)
        self._brokers: dict[str, NodeBroker] = dict(brokers)
        self._replication = MetadataReplication(self._log, node_id, config.metadata_replication_factor, clock)
        self._replication.adopt_newest(self._brokers)
        self._topics: dict[str, TopicMetadata] = {}
        self._next_producer_id = 0
        self._next_coordinator_epoch = 0
        self._cluster_id = ""
        self._acls = AclStore(self._write)
        self._scram = ScramCredentialStore(self._write)
        self._quotas = ClientQuotaStore(self._write)
        self._features = FinalizedFeatures(self._write)
        self._broker_configs = DynamicBrokerConfigs(self._write)
        self._group_configs = GroupConfigStore(self._write, config.group_protocol_config, config.share_group_config)
        self._replay()
        claim = claim_epoch or (lambda at_least: at_least)
        self._replication.start_epoch(claim(self._replication.latest_epoch + 1))
        self._replication.sync(self._brokers)
        self._write("controller", {"epoch": self._replication.epoch, "node": node_id})
        for topic in [topic for topic in self._topics.values() if topic.topic_id == ZERO_UUID]:
            self._persist_topic(replace(topic, topic_id=self._new_topic_id()))
        if not self._cluster_id:
            self._cluster_id = new_directory_id()
            self._write("cluster", {"cluster_id": self._cluster_id})
        self._features.bootstrap()
        now_ms = clock.milliseconds()
        # Each registered broker's last heartbeat (or registration) by the clock, and the last monitor pass.
        self._sessions = BrokerSessions(clock, config.broker_session_timeout_ms, self._brokers)
        self._listeners: dict[str, AdvertisedListener] = {}
        self._next_rebalance_ms = now_ms + self._rebalance_interval_ms
        # When each broker that left the cluster left it (for self-healing); forgotten once it registers again.
        self._lost_at_ms: dict[str, int] = {}
        # Brokers being drained (`drain_broker`): no new replica goes there until they leave or register again.
        self._draining: set[str] = set()
        self._next_heal_ms = now_ms

    @property
    def _rebalance_interval_ms(self) -> int:
        return self.config.leader_imbalance_check_interval_seconds * 1000

    def _replay(self) -> None:
        latest: dict[bytes, tuple[int, bytes | None]] = {}
        for record in self._log.records():
            if record.key is not None:
                latest[record.key] = (record.offset, record.value)
        topic_offsets: dict[str, int] = {}
        partition_states: list[tuple[int, str, dict[str, Any]]] = []
        for key, (offset, value) in latest.items():
            name = key.decode("utf-8")
            if name.startswith(ACL_KEY_PREFIX):
                self._acls.load(name, None if value is None else json.loads(value), offset)
                continue
            if name.startswith(QUOTA_KEY_PREFIX):
                self._quotas.load(name, None if value is None else json.loads(value), offset)
                continue
            if name.startswith(FEATURE_KEY_PREFIX):
                self._features.load(name, None if value is None else json.loads(value), offset)
                continue
            if name.startswith(BROKER_CONFIG_KEY_PREFIX):
                self._broker_configs.load(name, None if value is None else json.loads(value))
                continue
            if name.startswith(GROUP_CONFIG_KEY_PREFIX):
                self._group_configs.load(name, None if value is None else json.loads(value), offset)
                continue
            if value is None:
                continue
            body = json.loads(value)
            if name == "cluster":
                self._cluster_id = body["cluster_id"]
            elif name == "producer-ids":
                self._next_producer_id = int(body["next"])
            elif name == "coordinator-epochs":
                self._next_coordinator_epoch = int(body["next"])
            elif name.startswith("topic/"):
                topic = name[len("topic/") :]
                self._topics[topic] = TopicMetadata.from_record(topic, body)
                topic_offsets[topic] = offset
            elif name.startswith(PARTITION_KEY_PREFIX):
                partition_states.append((offset, name, body))
            elif name.startswith(SCRAM_KEY_PREFIX):
                self._scram.load(name, body)
        self._topics.update(replayed_partition_states(self._topics, topic_offsets, partition_states))

    def _write(self, key: str, value: dict[str, Any] | None) -> int:
        """Appends the record (a null value for None), flushes it and sends it to the metadata mirrors in sync
        (`actors.core.controller.metadata_replication`); returns its offset. `NotControllerError` once a successor
        fenced this controller."""
        return self._write_many([(key, value)])

    def _write_many(self, records: Sequence[tuple[str, dict[str, Any] | None]]) -> int:
        """`_write` of several records (one flush and send); returns the last one's offset. They go in one batch
        unless that would pass the metadata log's `max.message.bytes`: a change of every partition of a large
        cluster (a broker registering in the place of a gone node whose disk it holds, ~380 bytes a partition) is
        then several batches, as KRaft splits a non-atomic change's records."""
        self._replication.check_active()
        now_ms = self._clock.milliseconds()
        first_offset = last_offset = -1
        for batch in _batches(records, self._log.config.max_message_bytes, now_ms):
            info = self._log.append(batch)
            first_offset = info.first_offset if first_offset < 0 else first_offset
            last_offset = info.last_offset
        self._log.flush()
        self._replication.replicate(first_offset, self._brokers)
        self._metadata_changes.note()
        return last_offset

    def _persist_topic(self, topic: TopicMetadata) -> None:
        self._write(f"topic/{topic.name}", topic.to_record())
        self._topics[topic.name] = topic

    # --- brokers ---------------------------------------------------------------------------------

    def cluster_id(self) -> str:
        return self._cluster_id

    def register_broker(self, node_id: str) -> None:
        """A node's broker announces itself (idempotent). A partition its disks hold whose assignment names a
        broker that is gone gets this node in that broker's place: node ids change when a cluster restarts, the
        folders on disk do not. Partitions left without a leader elect one again, and the replicas of every
        partition whose state changed are told."""
        with self._lock:
            broker = self._find_broker(node_id)
            self._brokers[node_id] = broker
            self._metadata_changes.note()
            self._lost_at_ms.pop(node_id, None)
            self._draining.discard(node_id)
            self._sessions.beat(node_id)
            placements = broker.partitions().result()
            moved: dict[tuple[str, int], LeaderAndIsr] = {}
            for placement in placements:
                topic = self._topics.get(placement.topic)
                if topic is None or placement.partition not in topic.partitions:
                    continue
                key = (placement.topic, placement.partition)
                state = moved.get(key) or topic.state(placement.partition)
                new = moved_replica(state, node_id, self._brokers, placement.directory_id)
                if new is not None:
                    moved[key] = new
            changed = self._persist_states(list(moved.values()))
            changed.extend(self._elect_offline())
            held = [
                topic.state(partition)
                for topic in self._topics.values()
                for partition in topic.partitions
                if node_id in topic.state(partition).replicas
            ]
        # A replica asks for its partition's state when it opens; these changed since. A broker registering again
        # after it was fenced was told nothing meanwhile (`_push` skips it): its replicas learn every state now,
        # as Kafka's unfenced broker catches up with the metadata log, so a paused leader stops acting as one.
        self._push(changed)
        self._push(held, only=node_id)

    def _persist_state(self, state: LeaderAndIsr) -> LeaderAndIsr:
        """Writes a partition's new replication state (`_persist_states`); returns it."""
        self._persist_states([state])
        return state

    def _persist_states(self, states: Sequence[LeaderAndIsr]) -> list[LeaderAndIsr]:
        """Writes partitions' new replication states as one batch of partition records
        (`actors.core.controller.partition_records`), one append, flush and send to the mirrors however many
        partitions a pass changes (a broker's loss, an election); returns the states."""
        by_topic: dict[str, list[LeaderAndIsr]] = {}
        for state in states:
            by_topic.setdefault(state.topic, []).append(state)
        updated: dict[str, TopicMetadata] = {}
        records: list[tuple[str, dict[str, Any] | None]] = []
        for name, changed in by_topic.items():
            topic = self._topics[name]
            for state in changed:
                self._metrics.isr_changed(len(topic.state(state.partition).isr), len(state.isr))
            updated[name] = topic = topic.with_states(changed)
            records.extend(partition_record(topic, state.partition) for state in changed)
        if records:
            self._write_many(records)
        self._topics.update(updated)
        return list(states)

    def _elect_offline(self) -> list[LeaderAndIsr]:
        """New leaders for partitions whose leader is gone, from their live in-sync replicas."""
        return self._change_every_partition(lambda state: elect_if_offline(state, self._brokers))

    def _change_every_partition(self, decide: Callable[[LeaderAndIsr], LeaderAndIsr | None]) -> list[LeaderAndIsr]:
        """Persists `decide(state)` for every partition it changes (under the lock); returns the new states."""
        changed = []
        for topic in list(self._topics.values()):
            decided = [decide(topic.state(partition)) for partition in topic.partitions]
            changed.extend(self._persist_states([state for state in decided if state is not None]))
        return changed

    def _push(self, states: Iterable[LeaderAndIsr], only: str | None = None) -> None:
        """Tells every live replica of each partition (the one on node `only` if given) its new state (Kafka's
        LeaderAndIsr) in this controller's epoch, without waiting: a replica keeps the newest state it was told
        (`LeaderAndIsr.version`) from the newest controller, and one that restarts asks again."""
        for state in states:
            sent = state.sent_by(self._replication.epoch)
            for node in state.replicas:
                if node not in self._brokers or (only is not None and node != only):
                    continue
                try:
                    self._replicas.update_replication(node, sent)
                except RaybrokerError as exc:
                    logger.warning(
                        "replica %s-%d on %s not told its state: %s", state.topic, state.partition, node, exc
                    )

    def metadata_quorum(self) -> dict[str, object]:
        """The controller's node and epoch, its metadata mirrors and those in sync (for `raybroker status`)."""
        with self._lock:
            return {"node": self._node_id, **self._replication.describe()}

    def sync_metadata_mirrors(self) -> None:
        """One upkeep pass of the metadata mirrors (`MetadataReplication.sync`: new ones and those out of sync caught
        up). The host runs it on a thread of its own: a catch-up waits on brokers that may stand still, which neither
        the controller's lock nor its monitor pass (elections, heartbeats) may wait for."""
        with self._lock:
            links = dict(self._brokers)
        self._replication.sync(links)

    def broker_heartbeat(self, node_id: str) -> bool:
        """A registered broker says it is running (Kafka's BrokerHeartbeat): it stays in the cluster for
        `broker.session.timeout.ms` more. False if `node_id` is not registered (never, or fenced since): it takes no
        part until it registers again."""
        with self._lock:
            if node_id not in self._brokers:
                return False
            self._sessions.beat(node_id)
            return True

    def check_brokers(self, alive: Collection[str]) -> list[LeaderAndIsr]:
        """One monitor pass: every registered broker whose node is not in `alive` is lost (`broker_lost`), so is
        every broker fenced for silence (`actors.core.controller.broker_sessions`), until a session after the start
        every broker the states name that is neither registered nor on a live node leaves the ISRs that keep a
        registered member (`_shrink_isrs_of_dead_absent_brokers`), and, once, a session after the start, every broker
        the states name that never registered is lost (`_forget_absent_brokers`); then, every
        `leader.imbalance.check.interval.seconds` with `auto.leader.rebalance.enable`, preferred leaders are elected
        again, and every `HEAL_CHECK_MS` the replicas of brokers lost past their grace are moved
        (`ReplicaMoves._heal_lost_replicas`), internal topics short of their replication factor grow onto the
        brokers that joined (`ReplicaMoves._grow_internal_topics`), and with `node_add` autobalancing a broker
        holding no replica takes its share (`ReplicaMoves._balance_onto_empty_brokers`). Returns the changed states
        (the moves' are pushed as they start). A fenced controller does nothing."""
        if self._replication.fenced:
            return []
        changed = []
        for node in [node for node in self.brokers() if node not in alive]:
            changed.extend(self.broker_lost(node))
        with self._lock:
            silent = self._sessions.silent(list(self._brokers))
            absent_due = self._sessions.absent_check_due()
        for node in silent:
            logger.warning(
                "broker on node %s sent no heartbeat for broker.session.timeout.ms (%d ms): fenced",
                node,
                self.config.broker_session_timeout_ms,
            )
            changed.extend(self.broker_lost(node))
        changed.extend(self._shrink_isrs_of_dead_absent_brokers(alive))
        if absent_due:
            changed.extend(self._forget_absent_brokers())
        now_ms = self._clock.milliseconds()
        if self.config.auto_leader_rebalance_enable and now_ms >= self._next_rebalance_ms:
            self._next_rebalance_ms = now_ms + self._rebalance_interval_ms
            changed.extend(self.rebalance_leaders())
        if now_ms >= self._next_heal_ms:
            self._next_heal_ms = now_ms + HEAL_CHECK_MS
            self._heal_lost_replicas(now_ms)
            self._grow_internal_topics()
            self._balance_onto_empty_brokers()
        return changed

    def _forget_absent_brokers(self) -> list[LeaderAndIsr]:
        """The brokers that partitions' states name but that did not register within a session of this controller's
        start (their node was lost while no controller ran, e.g. with the head) are lost as a registered broker is
        (`broker_lost`), as Kafka's controller fences any broker whose session expired. One that comes back later
        registers as any other does."""
        with self._lock:
            named = {
                node for topic in self._topics.values() for p in topic.partitions for node in topic.state(p).replicas
            }
            changed = []
            for node in sorted(named - set(self._brokers)):
                logger.warning("broker on node %s did not register within its session: it is taken for lost", node)
                self._lost_at_ms.setdefault(node, self._clock.milliseconds())
                changed.extend(self._change_every_partition(functools.partial(self._after_lost, node)))
        self._push(changed)
        return changed

    def _shrink_isrs_of_dead_absent_brokers(self, alive: Collection[str]) -> list[LeaderAndIsr]:
        """A broker the states name whose node is not alive and that is not registered (lost with the head, while no
        controller ran) leaves at once the ISR of every partition that keeps a registered in-sync replica: those
        partitions' acks=all writes waited for it since the head was lost, and would for a session more. A partition
        with no registered in-sync replica waits for `_forget_absent_brokers` (its brokers may be coming back under
        new node ids, with their disks: a whole cluster restarted)."""
        gone: set[str] = set()

        def without_dead(state: LeaderAndIsr) -> LeaderAndIsr | None:
            dead = [node for node in state.isr if node not in alive and node not in self._brokers]
            if not dead or not any(node in self._brokers for node in state.isr):
                return None
            gone.update(dead)
            new = state
            for node in dead:
                new = self._after_lost(node, new) or new
            return new

        with self._lock:
            if not self._sessions.absent_check_pending:
                return []
            changed = self._change_every_partition(without_dead)
            for node in sorted(gone):
                logger.warning("broker on node %s is not running and not registered: it leaves the ISRs", node)
                self._lost_at_ms.setdefault(node, self._clock.milliseconds())
        self._push(changed)
        return changed

    def _after_lost(self, node_id: str, state: LeaderAndIsr) -> LeaderAndIsr | None:
        """`state` once broker `node_id` is gone (`assignment.after_broker_lost`), for `broker_lost` and absent ones."""
        return after_broker_lost(state, node_id, self._brokers)

    def broker_lost(self, node_id: str) -> list[LeaderAndIsr]:
        """Broker `node_id` is gone (its node died): it leaves every ISR and the partitions it led elect new
        leaders from their ISR; returns the partitions whose state changed."""
        with self._lock:
            self._sessions.forget(node_id)
            if self._brokers.pop(node_id, None) is None:
                return []
            self._metadata_changes.note()
            self._listeners.pop(node_id, None)
            self._lost_at_ms[node_id] = self._clock.milliseconds()
            self._draining.discard(node_id)
            self._replicas.forget_node(node_id)
            logger.warning("broker on node %s is gone: electing new leaders for its partitions", node_id)
            changed = self._change_every_partition(functools.partial(self._after_lost, node_id))
        self._push(changed)
        return changed

    def rebalance_leaders(self) -> list[LeaderAndIsr]:
        """Preferred-leader election for every partition whose preferred replica is alive and in sync."""
        with self._lock:
            changed = self._change_every_partition(lambda state: preferred_election(state, self._brokers))
        self._push(changed)
        return changed

    def partition_state(self, topic: str, partition: int) -> LeaderAndIsr:
        """A partition's replication state, in this controller's epoch (a restarted replica asks for it);
        `UnknownTopicOrPartitionError` if the cluster has no such partition."""
        metadata = self.describe_topic(topic)
        if partition not in metadata.partitions:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {partition!r}")
        return metadata.state(partition).sent_by(self._replication.epoch)

    def leader_states(self, keys: Sequence[tuple[str, int]]) -> list[LeaderAndIsr | UnknownTopicOrPartitionError]:
        """`partition_state` of each (topic, partition), in order, with the error of a partition the cluster does not
        have in its place: one question for a client's first contact with every partition of a large topic."""
        states: list[LeaderAndIsr | UnknownTopicOrPartitionError] = []
        for topic, partition in keys:
            try:
                states.append(self.partition_state(topic, partition))
            except UnknownTopicOrPartitionError as exc:
                states.append(exc)
        return states

    def alter_partition(
        self, topic: str, partition: int, leader: str, leader_epoch: int, partition_epoch: int, isr: Sequence[str]
    ) -> LeaderAndIsr:
        """A leader's ISR change (Kafka's AlterPartition), checked as Kafka's controller checks it: asked from the
        current leader in its current leader epoch and partition epoch (the state's `version`), for an ISR of
        assigned replicas that keeps the leader and adds only replicas of running brokers; the new state is
        persisted, pushed to every replica and returned. A leader or partition epoch above this controller's
        (`NotControllerError`: a successor's state reached the leader), a leader epoch below it
        (`FencedLeaderEpochError`), another broker than the leader (`InvalidRequestError`), a partition epoch below
        it (`InvalidUpdateVersionError`: the ISR was changed since the state the leader asks from, by the controller
        fencing a broker or completing a reassignment), and an addition on a lost node (`IneligibleReplicaError`)
        are refused. A leader refused for a stale epoch is sent the partition's state again (a state it missed,
        Kafka's broker reads from the metadata log) and asks again from it."""
        with self._lock:
            state = self.partition_state(topic, partition)
            stale = self._stale_alter_partition(state, leader, leader_epoch, partition_epoch)
            if stale is None:
                changed, final = self._alter_isr(state, leader, isr)
        if stale is not None:
            if not isinstance(stale, NotControllerError):
                self._push([state], only=leader)
            raise stale
        if changed is state:
            return state
        self._push([changed])
        if final is not None:
            self._delete_replicas(state, changed)
        return changed

    def _alter_isr(
        self, state: LeaderAndIsr, leader: str, isr: Sequence[str]
    ) -> tuple[LeaderAndIsr, LeaderAndIsr | None]:
        """`state` with the ISR `isr` asked by its leader, persisted (under the lock), and the state that completes
        a reassignment with it, if it does (persisted too); `state` itself if the ISR is unchanged."""
        topic, partition = state.topic, state.partition
        wanted = tuple(node for node in state.replicas if node in set(isr))
        if leader not in wanted or len(wanted) != len(set(isr)):
            raise InvalidRequestError(f"ISR {isr!r} must be replicas of {topic}-{partition} including its leader")
        if wanted == state.isr:
            return state, None
        ineligible = [node for node in wanted if node not in state.isr and node not in self._brokers]
        if ineligible:
            raise IneligibleReplicaError(
                f"{topic}-{partition}: {', '.join(ineligible)} cannot join the ISR: no broker runs there"
            )
        changed = self._persist_state(state.with_isr(wanted))
        final = completed(changed, self._brokers)
        if final is not None:
            changed = self._persist_state(final)
        return changed, final

    @staticmethod
    def _stale_alter_partition(
        state: LeaderAndIsr, leader: str, leader_epoch: int, partition_epoch: int
    ) -> RaybrokerError | None:
        """Why an AlterPartition asked from `leader`'s epochs is refused on `state`, in Kafka's order; None if not."""
        where = f"{state.topic}-{state.partition}"
        if leader_epoch > state.leader_epoch or partition_epoch > state.version:
            return NotControllerError(
                f"{where} is in leader epoch {state.leader_epoch} and partition epoch {state.version} here, not "
                f"{leader_epoch} and {partition_epoch}: a newer controller decided it"
            )
        if leader_epoch < state.leader_epoch:
            return FencedLeaderEpochError(f"{where} is in leader epoch {state.leader_epoch}, not {leader_epoch}")
        if state.leader != leader:
            return InvalidRequestError(f"{where} is led by {state.leader or 'no broker'}, not {leader}")
        if partition_epoch < state.version:
            return InvalidUpdateVersionError(f"{where} is in partition epoch {state.version}, not {partition_epoch}")
        return None

    def assign_replica_dir(self, topic: str, partition: int, node: str, directory_id: str) -> None:
        """Broker `node`'s replica of the partition lives in its log dir `directory_id` now (Kafka's
        AssignReplicasToDirs, KIP-858: it moved between its broker's dirs), persisted in the partition's state; nothing
        is pushed, the replicas' roles are unchanged. Ignored for a partition gone or a node that holds no replica."""
        with self._lock:
            topic_metadata = self._topics.get(topic)
            if topic_metadata is None or partition not in topic_metadata.partitions:
                return
            state = topic_metadata.state(partition)
            if node in state.replicas and state.directory_of(node) != directory_id:
                self._persist_state(state.with_directory(node, directory_id))

    def unregister_broker(self, node_id: str) -> None:
        """A broker stopping cleanly (its partitions are closed): it is no longer placed on or elected."""
        with self._lock:
            if self._brokers.pop(node_id, None) is not None:
                self._lost_at_ms[node_id] = self._clock.milliseconds()
                self._replicas.forget_node(node_id)
            self._draining.discard(node_id)
            self._sessions.forget(node_id)
            self._listeners.pop(node_id, None)
            self._metadata_changes.note()

    def brokers(self) -> list[str]:
        with self._lock:
            return sorted(self._brokers)

    def register_listener(self, node_id: str, listener: AdvertisedListener) -> None:
        """The Kafka listener of node `node_id` announces where clients reach it (again: the latest wins).
        Two nodes cannot share a Kafka `node.id`: `InvalidConfigError` naming the node that has it."""
        if not isinstance(listener, AdvertisedListener) or not is_int(listener.broker_id):
            raise InvalidConfigError(f"not an advertised listener: {listener!r}")
        with self._lock:
            for other_node, other in self._listeners.items():
                if other_node != node_id and other.broker_id == listener.broker_id:
                    raise InvalidConfigError(
                        f"node.id {listener.broker_id} is already the broker on node {other_node} "
                        f"({other.host}:{other.port}); give each node's broker its own node.id"
                    )
            if self._listeners.get(node_id) != listener:
                self._listeners[node_id] = listener
                self._metadata_changes.note()

    def unregister_listener(self, node_id: str, listener: AdvertisedListener) -> None:
        """A stopping listener withdraws its address, unless another listener of the node announced since."""
        with self._lock:
            if self._listeners.get(node_id) == listener:
                del self._listeners[node_id]
                self._metadata_changes.note()

    def listeners(self) -> dict[str, AdvertisedListener]:
        """Node id -> its Kafka listener's advertised address, for the nodes whose listener runs."""
        with self._lock:
            return dict(self._listeners)

    def await_metadata_change(self, known: int | None, max_wait_ms: int) -> int:
        """The count of changes a Metadata answer shows (`actors.core.controller.metadata_changes`) once it is not
        `known` (at once for None), or `known` after `max_wait_ms` without a change. It returns once the change's
        own update is over (it takes the lock the change holds), so what a listener asks next shows the change."""
        self._metadata_changes.after(known, max_wait_ms)
        with self._lock:
            return self._metadata_changes.count

    def _broker(self, node_id: str) -> NodeBroker:
        broker = self._brokers.get(node_id)
        if broker is None:
            raise BrokerNotAvailableError(f"the broker on node {node_id} is not running")
        return broker

    def _placeable(self) -> list[str]:
        """The brokers new replicas may go to: the registered ones not being drained."""
        return [node for node in self._brokers if node not in self._draining]

    # --- producer ids ----------------------------------------------------------------------------

    def allocate_producer_id(self) -> int:
        """A fresh idempotent-producer id, durable before it is handed out."""
        with self._lock:
            producer_id = self._next_producer_id
            self._write("producer-ids", {"next": producer_id + 1})
            self._next_producer_id = producer_id + 1
            return producer_id

    def allocate_coordinator_epoch(self, at_least: int = 0) -> int:
        """A coordinator epoch no coordinator had before, and at least `at_least` (the leader epoch of the internal
        partition it loads, `__transaction_state` or `__consumer_offsets`, the coordinator epoch Kafka would name):
        each coordinator that claims a partition takes one, so a coordinator left running beside its successor
        holds an older one and its writes are refused (`actors.core.coordinator_claims`). Durable before it is
        handed out."""
        if not isinstance(at_least, int) or isinstance(at_least, bool) or at_least < 0:
            raise InvalidRequestError(f"a coordinator epoch's floor must be an int >= 0, not {at_least!r}")
        with self._lock:
            epoch = max(self._next_coordinator_epoch, at_least)
            self._write("coordinator-epochs", {"next": epoch + 1})
            self._next_coordinator_epoch = epoch + 1
            return epoch

    def elect_leaders(
        self, election_type: ElectionType, partitions: Iterable[tuple[str, int]] | None
    ) -> dict[tuple[str, int], ElectionError]:
        """Kafka's ElectLeaders: the election asked for on each of `partitions`, or on every partition of the
        cluster for None (`actors.core.controller.elections`); each new state is persisted and pushed to the
        replicas. Answers each partition's outcome; for None, only the partitions where an election was needed,
        as Kafka's controller answers."""
        outcomes: dict[tuple[str, int], ElectionError] = {}
        changed = []
        every_partition = partitions is None
        with self._lock:
            if partitions is None:
                partitions = [(name, number) for name, topic in self._topics.items() for number in topic.partitions]
            for topic, partition in partitions:
                metadata = self._topics.get(topic)
                if metadata is None or partition not in metadata.partitions:
                    outcomes[(topic, partition)] = ElectionError.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                elected = requested_election(metadata.state(partition), election_type, self._brokers)
                if isinstance(elected, ElectionError):
                    outcomes[(topic, partition)] = elected
                elif (topic, partition) not in outcomes:
                    changed.append(elected)
                    outcomes[(topic, partition)] = ElectionError.NONE
            self._persist_states(changed)
        self._push(changed)
        if every_partition:
            return {tp: outcome for tp, outcome in outcomes.items() if outcome != ElectionError.ELECTION_NOT_NEEDED}
        return outcomes

    def close(self) -> None:
        """Closes the metadata log (flushed, with its clean-shutdown marker); the listeners' waits for a change return,
        so they stop keeping this controller's answers."""
        with self._lock:
            self._log.close()
        self._metadata_changes.note()


# The most bytes a record of a v2 batch adds beyond its key and value: its length, attributes, timestamp and offset
# deltas, key and value lengths and header count, each at its longest varint.
_RECORD_OVERHEAD_BOUND = 5 + 1 + 10 + 5 + 5 + 5 + 5


def _batches(records: Sequence[tuple[str, dict[str, Any] | None]], max_bytes: int, now_ms: int) -> Iterable[bytes]:
    """The metadata records (a null value for None) as v2 batches of at most `max_bytes` each, in order; a record
    too large for any batch goes alone, for the log to refuse (`RecordTooLargeError`)."""
    builder = RecordBatchBuilder()
    for key, value in records:
        encoded_key = key.encode("utf-8")
        payload = None if value is None else json.dumps(value, sort_keys=True).encode("utf-8")
        grown = len(encoded_key) + (0 if payload is None else len(payload)) + _RECORD_OVERHEAD_BOUND
        if len(builder) and builder.estimated_size_in_bytes + grown > max_bytes:
            yield builder.build()
            builder = RecordBatchBuilder()
        builder.append(encoded_key, payload, timestamp=now_ms)
    if len(builder):
        yield builder.build()
