"""Starting and stopping the broker's actors on a running Ray cluster, and the `Broker` client.

`start_broker(config)` runs on a node of the cluster (the CLI's `raybroker start`, or an embedded
session): it makes sure the cluster's controller exists (created on this node the first time, with its
metadata log in the first log dir), starts this node's log manager over its `log.dirs`, registers it
(the controller learns which partitions this node's disks hold), and makes sure the internal
`__consumer_offsets` topic exists. Running it again is harmless: every actor is named and found again.
`stop_broker()` stops the Iceberg translation driver and the Kafka-protocol listeners first (started beside the
broker by `raybroker start`, from `cluster.iceberg.translation_driver_actor` and `cluster.protocol.listener_actor`,
and found here by name), then shuts every log manager down cleanly
(partitions flushed and closed, checkpoints and clean-shutdown markers written), then the controller.

`Broker` is what users hold: `Broker.connect()` finds the running broker; `broker.partition("t", 0)`
returns a partition actor's raw handle for users who want `.remote()` calls (with
`log.partitions.per.process` > 1, an `actors.calls.HostedPartitionHandle` that takes the same calls).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

import ray

from actors.calls import call, controller, get_actor, kill_and_wait
from actors.core.controller.topic_metadata import TRANSACTION_STATE_TOPIC, TopicMetadata
from actors.core.groups.offsets_topic import ensure_consumer_offsets_topic
from actors.core.transactions.state_topic import ensure_transaction_state_topic
from actors.options import (
    CONTROLLER_NAME,
    ICEBERG_DRIVER_NAME,
    KAFKA_LISTENER_PREFIX,
    NAMESPACE,
    controller_options,
    group_coordinator_name,
    group_coordinator_options,
    log_manager_name,
    log_manager_options,
    transaction_coordinator_name,
)
from actors.server.internal_partition_leaders import RayTopicAdmin
from actors.server.partition_lookup import partition_actor
from actors.server.remote import Controller, GroupCoordinator, LogManager
from actors.server.transaction_coordinator_actor import start_transaction_coordinator
from storage.arguments import is_int
from storage.config.broker_config import BrokerConfig
from storage.config.transaction_config import TransactionConfig
from storage.errors import BrokerNotAvailableError, RaybrokerError, UnknownTopicOrPartitionError

logger = logging.getLogger(__name__)
# A listener closes its sockets and connections at once; a stuck one is killed after this long.
LISTENER_STOP_TIMEOUT_S = 15.0
# The Iceberg driver ends its round in progress (it waits up to 30 s for it itself); a stuck one is killed after this.
ICEBERG_DRIVER_STOP_TIMEOUT_S = 40.0


def start_broker(config: BrokerConfig | Mapping[str, str] | None = None) -> str:
    """Starts (or finds) the controller and this node's broker; returns this node's Ray node id."""
    broker_config = config if isinstance(config, BrokerConfig) else BrokerConfig.from_properties(dict(config or {}))
    properties = broker_config.to_properties()
    node_id = ray.get_runtime_context().get_node_id()
    metadata_dir = broker_config.log_dirs[0]
    # Handles are `Any`: Ray's stubs type an actor's methods as plain callables, without `.remote`.
    # Each actor is a new process (~1 s to start here): the log manager's starts beside the controller's (it asks
    # the controller for the cluster id and topic configs itself), the group coordinator's beside the process that
    # hosts `__consumer_offsets`.
    ctrl: Any = Controller.options(**controller_options(node_id)).remote(metadata_dir, properties)
    manager: Any = LogManager.options(**log_manager_options(node_id)).remote(node_id, properties)
    call(manager.ping.remote())
    call(ctrl.register_broker.remote(node_id))
    coordinator: Any = GroupCoordinator.options(**group_coordinator_options(node_id)).remote(properties)
    ensure_consumer_offsets_topic(
        RayTopicAdmin(), broker_config.offsets_topic_num_partitions, broker_config.offsets_topic_replication_factor
    )
    call(coordinator.ready.remote())
    logger.info("broker started on node %s (cluster %s)", node_id, call(manager.cluster_id.remote()))
    return node_id


def transaction_coordinator(config: TransactionConfig) -> Any:
    """The cluster's transaction coordinator actor, started with `config` by the first caller (a listener's first
    transactional request, a transactional producer), as Kafka creates `__transaction_state` on the first
    transactional lookup: a cluster whose clients never use transactions runs no such actor and no such topic.

    It is started on the node leading `__transaction_state`'s partition 0 (the topic is created first if need be),
    as Kafka's coordinator of an id is the broker leading the id's partition of that topic, and pinned there: a node
    lost takes its coordinator with it (Ray does not restart it elsewhere), and the next caller starts it again
    beside the partition's new leader, where it loads the states and completes every PrepareCommit/PrepareAbort.
    `BrokerNotAvailableError` (retriable) while that partition has no leader."""
    ctrl = controller()
    ensure_transaction_state_topic(RayTopicAdmin(), config)
    state = call(ctrl.partition_state.remote(TRANSACTION_STATE_TOPIC, 0))
    if state.offline:
        raise BrokerNotAvailableError(f"{TRANSACTION_STATE_TOPIC}-0 has no leader: no transaction coordinator now")
    return start_transaction_coordinator(state.leader, config)


def stop_broker() -> dict[str, int]:
    """Clean shutdown of every node's broker, then the controller. Returns final log end offsets."""
    ctrl = controller()
    # First, so that the controller starts no transaction coordinator behind the one stopped below.
    call(ctrl.prepare_shutdown.remote())
    # First, so that no translation round reads a partition while it closes (a round cut short commits nothing).
    with contextlib.suppress(BrokerNotAvailableError):
        driver = get_actor(ICEBERG_DRIVER_NAME)
        with contextlib.suppress(RaybrokerError):
            call(driver.stop.remote(), timeout_s=ICEBERG_DRIVER_STOP_TIMEOUT_S)
        kill_and_wait(driver, ICEBERG_DRIVER_NAME)
    # First, so that no Kafka client reaches a partition while it closes.
    stop_kafka_listeners()
    # First, so that no commit, state or marker is appended while the partitions close.
    with contextlib.suppress(BrokerNotAvailableError):
        stop_transaction_coordinator(get_actor(transaction_coordinator_name()))
    with contextlib.suppress(BrokerNotAvailableError):
        kill_and_wait(get_actor(group_coordinator_name()), group_coordinator_name())
    end_offsets: dict[str, int] = {}
    for node_id in call(ctrl.brokers.remote()):
        try:
            manager = get_actor(log_manager_name(node_id))
        except Exception:
            continue
        end_offsets.update(stop_node_broker(ctrl, node_id, manager))
    call(ctrl.shutdown.remote())
    kill_and_wait(ctrl, CONTROLLER_NAME)
    return end_offsets


def stop_transaction_coordinator(transactions: Any) -> None:
    """Stops the transaction coordinator actor (its appends end; one that does not answer is killed anyway)."""
    with contextlib.suppress(RaybrokerError):
        call(transactions.stop.remote())
    kill_and_wait(transactions, transaction_coordinator_name())


def stop_node_broker(ctrl: Any, node_id: str, manager: Any) -> dict[str, int]:
    """Shuts node `node_id`'s log manager `manager` down cleanly (its partitions, hosts and cleaners), unregisters
    the broker from the controller `ctrl`, then kills the actor; returns its partitions' final log end offsets."""
    end_offsets: dict[str, int] = call(manager.shutdown.remote())
    call(ctrl.unregister_broker.remote(node_id))
    kill_and_wait(manager, log_manager_name(node_id))
    return end_offsets


def stop_kafka_listeners(node_id: str | None = None) -> None:
    """Stops every node's Kafka-protocol listener processes (named `kafka-listener:*`, started from
    `cluster.protocol.listener_actor`), or only those of Ray node `node_id`: each closes its sockets and
    connections, then its actor is killed."""
    prefix = KAFKA_LISTENER_PREFIX if node_id is None else f"{KAFKA_LISTENER_PREFIX}{node_id}:"
    names = sorted(
        actor["name"]
        for actor in ray.util.list_named_actors(all_namespaces=True)
        if actor["namespace"] == NAMESPACE and actor["name"].startswith(prefix)
    )
    for name in names:
        with contextlib.suppress(BrokerNotAvailableError):
            listener = get_actor(name)
            with contextlib.suppress(RaybrokerError):
                call(listener.stop.remote(), timeout_s=LISTENER_STOP_TIMEOUT_S)
            kill_and_wait(listener, name)


class Broker:
    """A client's view of the running broker (see the module docstring)."""

    def __init__(self, controller_handle: Any) -> None:
        self._controller = controller_handle

    @classmethod
    def connect(cls) -> Broker:
        """The broker of the Ray cluster this process is connected to."""
        return cls(controller())

    @property
    def controller(self) -> Any:
        return self._controller

    def topic(self, name: str) -> TopicMetadata:
        return call(self._controller.describe_topic.remote(name))

    def partition(self, topic: str, partition: int) -> Any:
        """The raw actor handle of a partition, or its `HostedPartitionHandle` when a partition host holds it:
        `ray.get(handle.append.remote(batch_bytes))` either way."""
        self._check_partition(topic, partition)
        return partition_actor(topic, partition)

    def node_of(self, topic: str, partition: int) -> str:
        """The Ray node id hosting the partition."""
        return self._check_partition(topic, partition).partitions[partition]

    def _check_partition(self, topic: str, partition: int) -> TopicMetadata:
        """The topic's metadata; `UnknownTopicOrPartitionError` unless it has that partition."""
        if not is_int(partition):
            raise UnknownTopicOrPartitionError(f"partition must be an int, not {type(partition).__name__}")
        metadata = self.topic(topic)
        if partition not in metadata.partitions:
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} has partitions 0..{len(metadata.partitions) - 1}, not {partition}"
            )
        return metadata
