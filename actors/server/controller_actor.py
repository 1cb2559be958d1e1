"""The controller actor: the cluster's metadata, one per cluster, pinned to the node holding it.

All its logic is the plain `actors.core.controller.controller.Controller` (the metadata log, placement, elections,
LeaderAndIsr, AlterPartition, topics, configs, ACLs, SCRAM credentials, producer ids), unit-tested without Ray;
see that module for what it owns and guarantees. The actor is that class with Ray's seams, its methods the
actor's remote API:

- node brokers: each node's log-manager actor (`actors.server.log_manager_actor`), found by name; at start, the log
  managers already running on the cluster's live nodes (a controller restarted by Ray finds them again; after a
  full restart each `start_broker` registers);
- metadata mirrors: the same log managers hold the copies of the metadata log
  (`actors.core.controller.metadata_replication`), the one on the controller's own node excepted; a thread of their
  own catches them up (`Controller.sync_metadata_mirrors`, every `MIRROR_SYNC_INTERVAL_S`), which may wait on a
  broker that stands still;
- the controller epoch: claimed in Ray's GCS KV (`CONTROLLER_EPOCH_KEY`), which the head's GCS storage keeps;
- replicas: `update_replication` sent to each replica's partition actor (`actors.server.partition_lookup.replica_actor`)
  without waiting: finding a replica asks its node's broker, which a paused broker never answers
  (`HOST_LOOKUP_TIMEOUT_S`), so each node's states go out in order on a thread of that node's own;
- deleted topics: told to the group coordinator actor (`actors.server.group_coordinator_actor`), found by name, which
  deletes their committed offsets before DeleteTopics answers;
- node liveness: a monitor thread reads `ray.nodes()` every `MONITOR_INTERVAL_S` and hands the live node ids to
  `Controller.check_brokers` (which also fences brokers silent for `broker.session.timeout.ms` and runs the
  preferred-leader rebalance when due); a fenced broker's next heartbeat registers it again (`broker_heartbeat`);
- the transaction coordinator: once `__transaction_state` exists, the monitor starts the coordinator actor beside
  its partition 0's leader whenever none runs (`COORDINATOR_CHECK_S`), as Kafka's coordinator moves with that
  leadership: a coordinator lost with its node must abort the transactions of producers lost with it too, which no
  client would call it for. `prepare_shutdown` stops this before the broker's actors are stopped;
- the wall clock;
- metrics: the process's recorder, exported to Ray (`actors.metrics`), which counts the ISR changes the controller
  persists; the actor also publishes the cluster's gauges from the controller's states (offline and
  under-replicated partitions, consumer lag: `actors.metrics.cluster_view`).
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import ray
from ray.experimental import internal_kv

from actors import heap_trim
from actors.calls import RayPending, call, get_actor
from actors.core.controller.controller import Controller
from actors.core.controller.group_config_store import GroupConfigVersion
from actors.core.controller.topic_metadata import TRANSACTION_STATE_TOPIC
from actors.core.replication.leader_and_isr import LeaderAndIsr
from actors.metrics.cluster_view import ClusterGaugePublisher
from actors.metrics.ray_export import exported_metrics
from actors.options import (
    METADATA_WATCH_GROUP,
    NAMESPACE,
    group_coordinator_name,
    log_manager_name,
    transaction_coordinator_name,
)
from actors.server.partition_lookup import replica_actor
from actors.server.transaction_coordinator_actor import start_transaction_coordinator
from storage.clock import SYSTEM_CLOCK
from storage.config.broker_config import BrokerConfig
from storage.config.transaction_config import TransactionConfig
from storage.errors import BrokerNotAvailableError, RaybrokerError, UnknownTopicOrPartitionError

logger = logging.getLogger(__name__)

# How often the monitor thread looks for brokers whose Ray node died: Ray's own health checks decide when a node
# is dead, this only bounds how late the controller learns of it.
MONITOR_INTERVAL_S = 0.2
# How often the metadata mirrors' thread looks for a mirror to catch up.
MIRROR_SYNC_INTERVAL_S = 0.5
# How often the monitor looks for a missing transaction coordinator (a name-service call to Ray's GCS).
COORDINATOR_CHECK_S = 2.0
# The GCS KV key (in raybroker's namespace) of the newest controller epoch claimed.
CONTROLLER_EPOCH_KEY = b"controller-epoch"


class RayNodeBroker:
    """A node's log-manager actor as the controller's `NodeBroker`."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def create_partition(self, topic: str, partition: int, config: dict[str, str], topic_id: uuid.UUID) -> RayPending:
        return RayPending(self.handle.create_partition.remote(topic, partition, config, topic_id))

    def delete_partitions(self, topic: str, partitions: list[int]) -> RayPending:
        return RayPending(self.handle.delete_partitions.remote(topic, partitions))

    def set_topic_config(self, topic: str, config: dict[str, str]) -> RayPending:
        return RayPending(self.handle.set_topic_config.remote(topic, config))

    def partitions(self) -> RayPending:
        return RayPending(self.handle.partitions.remote())

    def metadata_state(self) -> RayPending:
        return RayPending(self.handle.metadata_state.remote())

    def metadata_append(self, controller_epoch: int, offset: int, batches: bytes) -> RayPending:
        return RayPending(self.handle.metadata_append.remote(controller_epoch, offset, batches))

    def metadata_truncate(self, controller_epoch: int, offset: int) -> RayPending:
        return RayPending(self.handle.metadata_truncate.remote(controller_epoch, offset))

    def metadata_offset_for_epoch(self, epoch: int) -> RayPending:
        return RayPending(self.handle.metadata_offset_for_epoch.remote(epoch))

    def metadata_read(self, offset: int, max_bytes: int) -> RayPending:
        return RayPending(self.handle.metadata_read.remote(offset, max_bytes))


class RayReplicaNotifier:
    """Sends a replica's partition actor its new state without waiting (the controller's `ReplicaNotifier`): on a
    sender thread of the replica's node, in the order the states were given, so a broker that stands still delays
    only the states of its own replicas. A node's thread ends once its broker left (after the states it was given),
    so an elastic cluster's nodes that come and go leave no thread behind."""

    def __init__(self) -> None:
        self._senders: dict[str, concurrent.futures.ThreadPoolExecutor] = {}
        self._lock = threading.Lock()

    def update_replication(self, node: str, state: LeaderAndIsr) -> None:
        with self._lock:
            sender = self._senders.get(node)
            if sender is None:
                sender = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"replica-states-{node[:8]}")
                self._senders[node] = sender
        sender.submit(_send_state, node, state)

    def forget_node(self, node: str) -> None:
        with self._lock:
            sender = self._senders.pop(node, None)
        if sender is not None:
            sender.shutdown(wait=False)


def _send_state(node: str, state: LeaderAndIsr) -> None:
    """Sends one state. A replica its node does not host (yet: a registering broker opens its partitions after it
    registered, and is told every state of its replicas at once) is not told: it asks for its partition's state when
    it opens. That is said at debug level only, as a node restarted with 30,000 partitions would log a line for each;
    any other failure is a warning."""
    try:
        answer = replica_actor(state.topic, state.partition, node).update_replication.remote(state)
    except UnknownTopicOrPartitionError as exc:
        logger.debug("replica %s-%d on %s not told its state: %s", state.topic, state.partition, node, exc)
        return
    except RaybrokerError as exc:
        logger.warning("replica %s-%d on %s not told its state: %s", state.topic, state.partition, node, exc)
        return
    answer.future().add_done_callback(functools.partial(_report_unsent, node, state))


def _report_unsent(node: str, state: LeaderAndIsr, answer: concurrent.futures.Future[None]) -> None:
    """Logs why a replica did not take its state, if it did not (at debug level when its host does not hold it: not
    opened yet, or closed since); collecting the answer also keeps Ray from printing it as an unhandled error."""
    failure = answer.exception()
    if failure is None:
        return
    level = logging.DEBUG if isinstance(failure, BrokerNotAvailableError) else logging.WARNING
    logger.log(level, "replica %s-%d on %s did not take its state: %s", state.topic, state.partition, node, failure)


class ControllerActor(Controller):
    """The plain `Controller` over Ray's seams, whose methods are the actor's remote API as they are (an API added to
    the controller is served on Ray with no edit here); see the module docstring."""

    def __init__(self, metadata_dir: str, broker_config: dict[str, str]) -> None:
        heap_trim.start()
        metrics = exported_metrics()
        super().__init__(
            Path(metadata_dir),
            BrokerConfig.from_properties(broker_config),
            clock=SYSTEM_CLOCK,
            brokers=_running_log_managers(),
            find_broker=lambda node_id: RayNodeBroker(get_actor(log_manager_name(node_id))),
            replicas=RayReplicaNotifier(),
            metrics=metrics,
            topic_deleted=_tell_group_coordinator,
            group_config_changed=_tell_group_config,
            node_id=ray.get_runtime_context().get_node_id(),
            claim_epoch=_claim_epoch,
        )
        self._stopping = threading.Event()
        self._keeper_lock = threading.Lock()
        self._shutting_down = False
        self._monitor = threading.Thread(target=self._run_monitor, name="controller-monitor", daemon=True)
        self._monitor.start()
        self._mirrors = threading.Thread(target=self._run_mirrors, name="controller-mirrors", daemon=True)
        self._mirrors.start()
        self._gauges = ClusterGaugePublisher(metrics, self.partition_states, replica_actor)

    def _run_monitor(self) -> None:
        next_coordinator_check = time.monotonic()
        while not self._stopping.wait(MONITOR_INTERVAL_S):
            try:
                self.check_brokers({node["NodeID"] for node in ray.nodes() if node["Alive"]})
                if time.monotonic() >= next_coordinator_check:
                    next_coordinator_check = time.monotonic() + COORDINATOR_CHECK_S
                    self._keep_transaction_coordinator()
            except Exception:
                logger.exception("controller monitor pass failed")

    def _run_mirrors(self) -> None:
        while not self._stopping.wait(MIRROR_SYNC_INTERVAL_S):
            try:
                self.sync_metadata_mirrors()
            except Exception:
                logger.exception("metadata mirrors' upkeep pass failed")

    def _keep_transaction_coordinator(self) -> None:
        """Starts the transaction coordinator on the node leading `__transaction_state`'s partition 0 if that topic
        exists, the partition has a leader and no coordinator actor runs (see the module docstring)."""
        with self._keeper_lock:
            if not self._shutting_down:
                self._start_missing_transaction_coordinator()

    def _start_missing_transaction_coordinator(self) -> None:
        try:
            state = self.partition_state(TRANSACTION_STATE_TOPIC, 0)
        except UnknownTopicOrPartitionError:
            return
        if state.offline:
            return
        try:
            ray.get_actor(transaction_coordinator_name(), namespace=NAMESPACE)
        except ValueError:
            logger.info("no transaction coordinator runs: starting one on node %s", state.leader)
            start_transaction_coordinator(state.leader, self.config.transaction_config)

    def prepare_shutdown(self) -> None:
        """Starts no transaction coordinator any more: `stop_broker` stops the coordinator next. Returns once a
        start under way has finished, so none begins after the coordinator is stopped."""
        with self._keeper_lock:
            self._shutting_down = True

    def broker_heartbeat(self, node_id: str) -> bool:
        """A node's log manager says it runs (`Controller.broker_heartbeat`). A broker fenced for silence whose node
        Ray still has alive (it was paused, not lost) registers again here, as Kafka's fenced broker is unfenced by
        its next heartbeat: its replicas catch up and rejoin their ISRs. Not one on a node Ray declared dead (a
        zombie until Ray stops it), nor while the cluster shuts down. True if the broker takes part now."""
        if super().broker_heartbeat(node_id):
            return True
        with self._keeper_lock:
            if self._shutting_down:
                return False
        if node_id not in {node["NodeID"] for node in ray.nodes() if node["Alive"]}:
            return False
        logger.warning("fenced broker on node %s sent a heartbeat: it registers again", node_id)
        self.register_broker(node_id)
        return True

    # Ray's stubs type a decorated method as Ray's remote method; its signature is the superclass's.
    @ray.method(concurrency_group=METADATA_WATCH_GROUP)
    def await_metadata_change(self, known: int | None, max_wait_ms: int) -> int:  # type: ignore[override]
        """`Controller.await_metadata_change` on the threads of its own group: every Kafka listener keeps one waiting,
        which must never hold one of the threads the controller's other calls run on."""
        return super().await_metadata_change(known, max_wait_ms)

    def transaction_config(self) -> TransactionConfig:
        """The broker's `transaction.*` settings, for a client that starts the transaction coordinator."""
        return self.config.transaction_config

    def shutdown(self) -> None:
        self._gauges.stop()
        self._stopping.set()
        self._monitor.join()
        self.close()


def _tell_group_coordinator(topic: str) -> None:
    """The group coordinator actor deletes `topic`'s committed offsets (none runs before the first broker started,
    and then no offsets exist)."""
    try:
        coordinator = get_actor(group_coordinator_name())
    except BrokerNotAvailableError:
        return
    call(coordinator.on_topic_deleted.remote(topic))


def _tell_group_config(group: str, configs: GroupConfigVersion) -> None:
    """The group coordinator actor applies the group's changed configs (none runs before the first broker started:
    it loads every group's configs when it starts)."""
    try:
        coordinator = get_actor(group_coordinator_name())
    except BrokerNotAvailableError:
        return
    call(coordinator.update_group_config.remote(group, configs))


def _claim_epoch(at_least: int) -> int:
    """This controller's epoch: above every epoch claimed before in the Ray cluster (kept in Ray's GCS KV, which the
    head's GCS storage keeps across the head's loss) and at least `at_least`."""
    stored = internal_kv._internal_kv_get(CONTROLLER_EPOCH_KEY, namespace=NAMESPACE)
    epoch = max(at_least, int(stored) + 1 if stored else 0)
    internal_kv._internal_kv_put(CONTROLLER_EPOCH_KEY, str(epoch).encode(), overwrite=True, namespace=NAMESPACE)
    return epoch


def _running_log_managers() -> dict[str, RayNodeBroker]:
    """node id -> the log manager running on each live node (none when the cluster starts)."""
    found = {}
    for node in ray.nodes():
        if not node["Alive"]:
            continue
        try:
            found[node["NodeID"]] = RayNodeBroker(get_actor(log_manager_name(node["NodeID"])))
        except BrokerNotAvailableError:
            continue
    return found
