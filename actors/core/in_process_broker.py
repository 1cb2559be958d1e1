"""The in-process broker: the broker's plain roles wired together in one process, without Ray.

A development and test tier, not a second product (users run the broker on Ray): it runs the same classes the
Ray actors delegate to, so a test of the Kafka listener's handlers exercises the real controller's checks, the
real replication and the real group coordinator.

- Nodes: `nodes` simulated brokers `node-0`, `node-1`, ..., each a `storage.logdir.log_manager.LogManager` over
  its own log dir (`<root>/node-<i>`, `node.id` i). Each partition's log is opened by the node's `LocalReplicas`,
  which gives it its role (`actors.core.replication.replica.Replica`) and its client calls (`PartitionServer`:
  what the partition actor answers, in process).
- The controller (`actors.core.controller.controller.Controller`) over those nodes, its metadata log in
  `<root>/metadata`; it tells replicas their states directly, and leaders ask it for ISR changes directly.
- Followers fetch from their leader's `Replica` in a thread each (`ReplicaFetcher`, `LocalLeaderLink`), so a topic
  with replication factor > 1 replicates as on Ray, throttled by each node's `ReplicationQuotas` as the controller's
  throttles say.
- The group coordinator (`actors.core.groups.group_coordinator.GroupCoordinator`), made on first use, which creates
  `__consumer_offsets` then, as Kafka does for the first group; the controller tells it of each deleted topic
  (made first if `__consumer_offsets` exists: a broker opened again may hold offsets of the topic). The transaction
  coordinator (`actors.core.transactions.transaction_coordinator.TransactionCoordinator`) likewise creates
  `__transaction_state`. Its markers are written to the partitions' leaders here (`InProcessMarkers`), and a marker on
  `__consumer_offsets`
  tells the group coordinator to make the producer's pending transactional offsets committed or drop them
  (`OffsetsCompletingMarkers`).
- The share-partitions' durable states (`actors.core.shares.share_state_store.ShareStateStore`), made on first use,
  which creates `__share_group_state`: every partition leader's share-partitions read and write their states there,
  so a broker opened again on the same root, or a new leader, serves each share group from where its
  acknowledgements left it.
- Metrics (`actors.core.role_metrics`): the leaders' appends, the controller's ISR changes and the bytes reassignments
  move go to the injected recorder, as on Ray (the Kafka listener takes its own).
- One injected clock for the logs, the controller's rebalance timer, ISR lag and group timeouts. Nothing runs on
  a timer of its own but the followers' fetches: the log managers' periodic work runs when `run_scheduled` is
  called (a test moving a `MockClock` calls it), and a node is lost when `lose_node` says so, as the Ray
  controller's monitor would find it.

`close` ends everything: the followers' threads are joined, the logs closed cleanly (checkpoints, clean-shutdown
markers), the metadata log closed; a broker opened again on the same root finds its topics and records.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Mapping
from pathlib import Path

from actors.core.controller.controller import Controller
from actors.core.controller.group_config_store import GroupConfigVersion
from actors.core.controller.log_manager_broker import LogManagerBroker
from actors.core.controller.topic_metadata import (
    CONSUMER_OFFSETS_TOPIC,
    SHARE_GROUP_STATE_TOPIC,
    TRANSACTION_STATE_TOPIC,
)
from actors.core.groups.group_coordinator import GroupCoordinator
from actors.core.groups.group_membership import GroupMembership, MembershipConfig
from actors.core.internal_topics import InProcessInternalPartition
from actors.core.quotas.replication_quotas import ReplicationQuotas
from actors.core.replication.follower import LeaderLink, ReplicaSettings
from actors.core.replication.leader_and_isr import LeaderAndIsr
from actors.core.replication.local_leader_link import LocalLeaderLink
from actors.core.replication.log_changes import LogChanges
from actors.core.replication.partition_server import PartitionServer
from actors.core.replication.replica import Replica
from actors.core.role_metrics import NO_ROLE_METRICS, RoleMetrics
from actors.core.shares.dead_letters import DeadLetterQueue, PartitionDeadLetters
from actors.core.shares.share_state_store import PartitionStates, ShareStateStore
from actors.core.transactions.markers import OffsetsCompletingMarkers, TransactionMarker
from actors.core.transactions.transaction_coordinator import TransactionCoordinator
from storage.clock import SYSTEM_CLOCK, Clock
from storage.config.broker_config import BrokerConfig
from storage.errors import (
    BrokerNotAvailableError,
    IneligibleReplicaError,
    KafkaStorageError,
    NotLeaderOrFollowerError,
    RaybrokerError,
    UnknownTopicOrPartitionError,
)
from storage.logdir.log_manager import LogManager, PartitionPlacement
from storage.logdir.partition_handles import LocalPartition, LocalPartitions, PartitionHandle, PartitionState
from storage.logdir.scheduler import Scheduler
from storage.partition.log import Log
from storage.pending import Pending
from storage.topic_partition import TopicPartition

logger = logging.getLogger(__name__)

# How long closing waits for a follower's fetch in progress: the leader answers it within `replica.fetch.wait.max.ms`
# (500 ms by default).
REPLICA_STOP_TIMEOUT_S = 5.0
METADATA_DIR = "metadata"


class _ReplicaPartition(LocalPartition):
    """A node's partition in process: the log manager's handle, which stops the replica's role before the log
    closes (a deleted topic, an offline dir, shutdown), so no fetcher writes to a closed log."""

    def __init__(self, server: PartitionServer) -> None:
        super().__init__(server.log)
        self.server = server

    def close(self) -> Pending[PartitionState]:
        self.server.replica.stop(
            BrokerNotAvailableError(f"the log of {self.log.directory} is closed"), REPLICA_STOP_TIMEOUT_S
        )
        closed = super().close()
        self.server.changes.notify()
        return closed

    def go_offline(self, reason: str) -> Pending[None]:
        error = KafkaStorageError(f"log dir is offline: {reason}", path=self.log.directory)
        self.server.replica.stop(error, REPLICA_STOP_TIMEOUT_S)
        offline = super().go_offline(reason)
        self.server.changes.notify()
        return offline

    def delete_old_segments(self) -> Pending[int]:
        deleted = super().delete_old_segments()
        self.server.changes.notify()
        return deleted


class LocalReplicas(LocalPartitions):
    """One node's `PartitionFactory`: a replicated `Log` per partition (`LocalPartitions`), led alone until told
    otherwise, with its `Replica` and `PartitionServer`."""

    def __init__(
        self,
        node: str,
        clock: Clock,
        config: BrokerConfig,
        controller: Callable[[], Controller],
        find_replica: Callable[[str, int, str], Replica],
        share_states: Callable[[], ShareStateStore],
        dead_letters: Callable[[], DeadLetterQueue],
        metrics: RoleMetrics = NO_ROLE_METRICS,
    ) -> None:
        super().__init__(clock, config.producer_id_expiration_ms, replicated=True)
        self.node = node
        self._share_states = share_states
        self._dead_letters = dead_letters
        self._metrics = metrics
        self._settings = ReplicaSettings.from_broker_config(config)
        self._controller = controller
        self._find_replica = find_replica
        self._served: dict[TopicPartition, PartitionServer] = {}
        self._lock = threading.Lock()
        self._quotas = ReplicationQuotas(config, clock.milliseconds)
        self._broker_id = config.node_id

    def admit(self, side: str, topic: str, partition: int, recorded: int) -> float:
        """The node's replication quotas (the Replica's `ReplicationThrottle`), over the controller's throttles of
        this node as they are now."""
        self._quotas.update(self._controller().replication_throttles(self.node, self._broker_id))
        return self._quotas.admit(side, topic, partition, recorded)

    def handle_for(self, tp: TopicPartition, log: Log) -> _ReplicaPartition:
        # Every partition is its own leader, in the epoch its log last had, until the controller says otherwise; a
        # log found on disk keeps its checkpointed high watermark until then.
        log.become_leader()
        changes = LogChanges()
        replica = Replica(
            log,
            self.node,
            self._settings,
            changes,
            controller=_ControllerLink(self._controller),
            leader_link=self._link,
            throttle=self,
            metrics=self._metrics,
        )
        topic, partition = tp
        states = PartitionStates(
            self._share_states,
            partition,
            topic_id=lambda: self._controller().describe_topic(topic).topic_id,
            leader_epoch=lambda: replica.leader_epoch,
        )
        server = PartitionServer(
            log,
            replica,
            changes,
            topic=topic,
            metrics=self._metrics,
            clock=self._clock,
            share_states=states,
            dead_letters=PartitionDeadLetters(lambda batch: self._dead_letters().write(batch), topic, partition),
        )
        with self._lock:
            self._served[tp] = server
        return _ReplicaPartition(server)

    def _link(self, state: LeaderAndIsr) -> LeaderLink:
        return LocalLeaderLink(state, self.node, self._find_replica)

    def stop(self, tp: TopicPartition, handle: PartitionHandle) -> None:
        with self._lock:
            served = self._served.get(tp)
            if served is not None and isinstance(handle, _ReplicaPartition) and handle.server is served:
                del self._served[tp]
        super().stop(tp, handle)

    def served(self, topic: str, partition: int) -> PartitionServer:
        """This node's replica of the partition; `UnknownTopicOrPartitionError` if it holds none."""
        served = self._served.get((topic, partition))
        if served is None:
            raise UnknownTopicOrPartitionError(f"node {self.node} holds no replica of {topic}-{partition}")
        return served

    def all_served(self) -> dict[TopicPartition, PartitionServer]:
        with self._lock:
            return dict(self._served)


class _ControllerLink:
    """A leader's AlterPartition, straight to the in-process controller (its answer comes back as `update`)."""

    def __init__(self, controller: Callable[[], Controller]) -> None:
        self._controller = controller

    def alter_partition(self, proposed: LeaderAndIsr, refused: Callable[[], None]) -> None:
        topic, partition = proposed.topic, proposed.partition
        try:
            self._controller().alter_partition(
                topic, partition, proposed.leader, proposed.leader_epoch, proposed.version, proposed.isr
            )
        except IneligibleReplicaError as exc:
            # An addition on a lost node: refused on the state the leader holds, not applied.
            logger.info("%s-%d: AlterPartition refused: %s", topic, partition, exc)
            refused()
        except RaybrokerError as exc:
            # A stale ask (the leader moved, or the ISR changed, meanwhile): the change stays pending until the
            # controller's newer state, on its way, answers it.
            logger.info("%s-%d: AlterPartition refused: %s", topic, partition, exc)


class InProcessMarkers:
    """The transaction coordinator's `TransactionMarkers` in process: a marker goes to the partition's leader
    replica and is answered once every in-sync replica has it."""

    def __init__(self, broker: InProcessBroker) -> None:
        self._broker = broker

    def write_markers(
        self, partitions: Collection[TopicPartition], marker: TransactionMarker
    ) -> dict[TopicPartition, RaybrokerError]:
        failed: dict[TopicPartition, RaybrokerError] = {}
        for topic, partition in partitions:
            try:
                leader = self._broker.leader(topic, partition)
                leader.await_replicated(
                    leader.append_transaction_marker(
                        marker.producer_id, marker.producer_epoch, marker.coordinator_epoch, marker.result
                    )
                )
            except RaybrokerError as exc:
                failed[(topic, partition)] = exc
        return failed


class InProcessNode:
    """One simulated broker: its log manager over its own log dir, and its replicas."""

    def __init__(
        self,
        node: str,
        config: BrokerConfig,
        clock: Clock,
        replicas: LocalReplicas,
        on_replica_moved: Callable[[PartitionPlacement], None] | None = None,
    ) -> None:
        """`on_replica_moved` is told of each partition moved between the node's log dirs."""
        self.node = node
        self.config = config
        self.replicas = replicas
        self.manager = LogManager.from_broker_config(
            config, clock=clock, partitions=replicas, on_replica_moved=on_replica_moved
        )
        self.manager.startup()
        self.scheduler = Scheduler(clock)
        self.manager.schedule(self.scheduler, config)
        self.running = True

    def shutdown(self) -> None:
        if self.running:
            self.running = False
            self.manager.shutdown()


class InProcessBroker:
    """The broker's roles in one process; see the module docstring."""

    def __init__(
        self,
        root: Path,
        *,
        nodes: int = 1,
        log_dirs_per_node: int = 1,
        properties: Mapping[str, str] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        membership: MembershipConfig | None = None,
        metrics: RoleMetrics = NO_ROLE_METRICS,
    ) -> None:
        """`properties` are the brokers' `server.properties` (Kafka's names; `log.dirs` and `node.id` are each
        node's own: `<root>/node-<i>`, or with `log_dirs_per_node` > 1 `<root>/node-<i>/dir<k>`); `membership` the
        group coordinator's group settings (None: the properties' `group.*` keys);
        `metrics` records the
        appends and ISR changes of every node."""
        self.root = root
        self.clock = clock
        self.metrics = metrics
        self._log_dirs_per_node = log_dirs_per_node
        self._membership_config = membership
        self._properties = dict(properties or {})
        self._lock = threading.Lock()
        self._coordinator: GroupCoordinator | None = None
        self._transaction_coordinator: TransactionCoordinator | None = None
        self._share_state_store: ShareStateStore | None = None
        self._dead_letter_queue: DeadLetterQueue | None = None
        self._share_state_scheduler = Scheduler(clock)
        self._transaction_scheduler = Scheduler(clock)
        self._controller: Controller | None = None
        self.nodes: dict[str, InProcessNode] = {}
        try:
            for index in range(nodes):
                self._start_node(index)
            self.config = BrokerConfig.from_properties({**self._properties, "log.dirs": str(root / METADATA_DIR)})
            self._controller = Controller(
                root / METADATA_DIR,
                self.config,
                clock=clock,
                brokers={},
                find_broker=self._node_broker,
                replicas=self,
                topic_deleted=self._topic_deleted,
                group_config_changed=self._group_config_changed,
                metrics=metrics,
            )
            for node in self.nodes:
                self._register(node)
        except BaseException:
            self.close()
            raise

    @property
    def controller(self) -> Controller:
        assert self._controller is not None, "made in __init__"
        return self._controller

    def _start_node(self, index: int) -> InProcessNode:
        node = f"node-{index}"
        dirs = [self.root / node]
        if self._log_dirs_per_node > 1:
            dirs = [self.root / node / f"dir{k}" for k in range(self._log_dirs_per_node)]
        config = BrokerConfig.from_properties(
            {**self._properties, "log.dirs": ",".join(str(d) for d in dirs), "node.id": str(index)}
        )
        replicas = LocalReplicas(
            node,
            self.clock,
            config,
            lambda: self.controller,
            self.find_replica,
            lambda: self.share_state_store,
            lambda: self.dead_letter_queue,
            self.metrics,
        )

        def moved(placement: PartitionPlacement) -> None:
            self.controller.assign_replica_dir(placement.topic, placement.partition, node, placement.directory_id)

        started = self.nodes[node] = InProcessNode(node, config, self.clock, replicas, moved)
        return started

    def _node_broker(self, node: str) -> LogManagerBroker:
        found = self.nodes.get(node)
        if found is None or not found.running:
            raise BrokerNotAvailableError(f"no broker runs on {node}")
        return LogManagerBroker(found.manager)

    def _register(self, node: str) -> None:
        """Registers the node's broker, then tells each replica it opened its partition's state, as a partition
        actor asks once it opened."""
        self.controller.register_broker(node)
        for (topic, partition), served in self.nodes[node].replicas.all_served().items():
            try:
                served.replica.update(self.controller.partition_state(topic, partition))
            except UnknownTopicOrPartitionError:
                continue

    # --- the controller's seam to the replicas (`ReplicaNotifier`) ---------------------------------------------

    def update_replication(self, node: str, state: LeaderAndIsr) -> None:
        self.find_replica(state.topic, state.partition, node).update(state)

    def forget_node(self, node: str) -> None:
        """Nothing to release: the states go straight to the replica objects."""

    # --- finding partitions -------------------------------------------------------------------------------------

    def find_replica(self, topic: str, partition: int, node: str) -> Replica:
        return self.replica_on(node, topic, partition).replica

    def replica_on(self, node: str, topic: str, partition: int) -> PartitionServer:
        """The replica of the partition on `node`; `BrokerNotAvailableError` if no broker runs there."""
        found = self.nodes.get(node)
        if found is None or not found.running:
            raise BrokerNotAvailableError(f"no broker runs on {node}")
        return found.replicas.served(topic, partition)

    def leader(self, topic: str, partition: int) -> PartitionServer:
        """The partition's leader replica. `UnknownTopicOrPartitionError` for a partition the cluster does not
        have, `NotLeaderOrFollowerError` while it has no leader (every in-sync replica is down)."""
        state = self.controller.partition_state(topic, partition)
        if state.offline:
            raise NotLeaderOrFollowerError(f"{topic}-{partition} has no leader: none of its in-sync replicas runs")
        return self.replica_on(state.leader, topic, partition)

    def internal_partition(self, topic: str, partition: int) -> InProcessInternalPartition:
        """The partition's leader replica as a coordinator appends to it (each append answered once replicated)."""
        return InProcessInternalPartition(self.leader(topic, partition))

    # --- groups ---------------------------------------------------------------------------------------------------

    @property
    def group_coordinator(self) -> GroupCoordinator:
        """The group coordinator, made (and `__consumer_offsets` created) on first use."""
        with self._lock:
            if self._coordinator is None:
                self._coordinator = GroupCoordinator(
                    self.config.offsets_topic_num_partitions,
                    self.config.offsets_topic_replication_factor,
                    clock=self.clock,
                    controller=self.controller,
                    find_partition=lambda partition: self.internal_partition(CONSUMER_OFFSETS_TOPIC, partition),
                    allocate_coordinator_epoch=self.controller.allocate_coordinator_epoch,
                    membership=GroupMembership(self.clock, self._membership_config or MembershipConfig.of(self.config)),
                    group_protocol=self.config.group_protocol_config,
                    share_config=self.config.share_group_config,
                    group_configs=self.controller.group_configs,
                )
            return self._coordinator

    @property
    def share_state_store(self) -> ShareStateStore:
        """The share-partitions' durable states in `__share_group_state` (created at its first use), which every
        partition leader's share-partitions read and write."""
        with self._lock:
            if self._share_state_store is None:
                self._share_state_store = ShareStateStore(
                    self.config.share_group_config,
                    clock=self.clock,
                    controller=self.controller,
                    find_partition=lambda partition: self.internal_partition(SHARE_GROUP_STATE_TOPIC, partition),
                )
                self._share_state_store.schedule(self._share_state_scheduler)
            return self._share_state_store

    @property
    def dead_letter_queue(self) -> DeadLetterQueue:
        """The writer of share groups' dead letters (Kafka 4.4's dead-letter topics), appending to each topic's
        leader replica as a coordinator does."""
        with self._lock:
            if self._dead_letter_queue is None:
                self._dead_letter_queue = DeadLetterQueue(
                    self.controller,
                    lambda topic, partition, batch: self.internal_partition(topic, partition).append_replicated(batch),
                    self.clock,
                    self.config.num_partitions,
                )
            return self._dead_letter_queue

    def _topic_deleted(self, topic: str) -> None:
        """The controller's `topic_deleted`: the group coordinator deletes the topic's committed offsets."""
        if self._coordinator is not None or CONSUMER_OFFSETS_TOPIC in self.controller.topics():
            self.group_coordinator.on_topic_deleted(topic)

    def _group_config_changed(self, group: str, configs: GroupConfigVersion) -> None:
        """The controller's `group_config_changed`: the group coordinator, if made, applies the group's configs (one
        made later loads them all; the lock orders this after a coordinator being made)."""
        with self._lock:
            coordinator = self._coordinator
        if coordinator is not None:
            coordinator.update_group_config(group, configs)

    @property
    def transaction_coordinator(self) -> TransactionCoordinator:
        """The transaction coordinator, made (and `__transaction_state` created) on first use."""
        with self._lock:
            if self._transaction_coordinator is None:
                self._transaction_coordinator = TransactionCoordinator(
                    self.config.transaction_config,
                    clock=self.clock,
                    controller=self.controller,
                    find_partition=lambda partition: self.internal_partition(TRANSACTION_STATE_TOPIC, partition),
                    allocate_producer_id=self.controller.allocate_producer_id,
                    allocate_coordinator_epoch=self.controller.allocate_coordinator_epoch,
                    markers=self.markers,
                )
                self._transaction_coordinator.schedule(self._transaction_scheduler)
            return self._transaction_coordinator

    @property
    def markers(self) -> OffsetsCompletingMarkers:
        """The markers the transaction coordinator and WriteTxnMarkers write: to the partitions' leaders, a marker
        on `__consumer_offsets` completing the producer's offsets in the group coordinator."""
        return OffsetsCompletingMarkers(InProcessMarkers(self), self._complete_transactional_offsets)

    def _complete_transactional_offsets(self, partition: int, producer_id: int, commit: bool) -> None:
        self.group_coordinator.complete_transaction(partition, producer_id, commit)

    def forget_transaction_coordinator(self) -> None:
        """Drops the transaction coordinator, as a coordinator's restart or move does: the next use makes a new one,
        which loads `__transaction_state` again."""
        with self._lock:
            self._transaction_coordinator = None
            self._transaction_scheduler = Scheduler(self.clock)

    # --- time and failures ----------------------------------------------------------------------------------------

    def run_scheduled(self) -> list[str]:
        """Runs every node's periodic log work that is due by the clock (retention, flushes, checkpoints,
        cleaning) and the coordinators' (transactions, the share-state topic's snapshots and prunes); the names of
        the tasks run."""
        ran: list[str] = []
        for node in self.nodes.values():
            if node.running:
                ran.extend(node.scheduler.run_due())
        ran.extend(self._transaction_scheduler.run_due())
        ran.extend(self._share_state_scheduler.run_due())
        return ran

    def lose_node(self, node: str) -> list[LeaderAndIsr]:
        """Node `node` stops (its partitions closed) and the controller learns it is gone, as the Ray controller's
        monitor finds a dead node; returns the partitions whose state changed."""
        self.nodes[node].shutdown()
        return self.controller.check_brokers([name for name, found in self.nodes.items() if found.running])

    def restart_node(self, node: str) -> None:
        """A lost node starts again over its log dir and registers."""
        index = int(node.rsplit("-", 1)[1])
        self._start_node(index)
        self._register(node)

    def close(self) -> None:
        """Stops every node (replicas' threads joined, logs closed cleanly), then the controller."""
        for node in self.nodes.values():
            node.shutdown()
        if self._controller is not None:
            self._controller.close()
