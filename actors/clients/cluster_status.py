"""The cluster's health at one moment, for `raybroker status`: its brokers and where they listen and export metrics,
the controller (its node, its epoch, the brokers holding copies of its metadata log and those in sync), every
partition's replication state, and the consumer groups' lag.

Read from the controller (brokers, listeners, topics and their replication states), Ray's node table (each node's
address and metrics port), the group coordinator and the partitions' leaders (committed offsets and high
watermarks, `actors.metrics.cluster_view`, the readers the controller's lag gauges use). A group coordinator that
does not answer leaves the lag unknown (`groups_error`) rather than failing the whole read: the partitions' health
is what a probe asks about.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ray

from actors.calls import actor_node, call, controller
from actors.core.controller.topic_metadata import AdvertisedListener, TopicMetadata
from actors.core.replication.leader_and_isr import LeaderAndIsr
from actors.metrics.cluster_view import HighWatermarkReader, committed_offsets
from actors.metrics.gauges import PartitionLag, consumer_lag
from actors.server.partition_lookup import replica_actor
from storage.errors import RaybrokerError


@dataclass(frozen=True, slots=True)
class BrokerStatus:
    """One running broker: its Ray node, the Kafka `node.id` of its listener (None without one), its node's address,
    its listeners (`NAME://host:port`) and the URL of its node's metrics endpoint ("" when the node exports none)."""

    node: str
    broker_id: int | None
    address: str
    listeners: tuple[str, ...]
    metrics_url: str


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    """See the module docstring. A partition is offline when it has no leader or its leader's broker is not running
    (kafka-topics' `--unavailable-partitions`), under-replicated when it has a leader and fewer in-sync replicas
    than replicas."""

    cluster_id: str
    controller_node: str
    brokers: tuple[BrokerStatus, ...]
    partitions: tuple[LeaderAndIsr, ...]
    lags: tuple[PartitionLag, ...]
    groups_error: str | None
    # The controller's epoch (-1: not known), the brokers holding copies of its metadata log and those in sync.
    controller_epoch: int = -1
    metadata_copies: tuple[str, ...] = ()
    metadata_in_sync: tuple[str, ...] = ()

    @property
    def offline(self) -> list[LeaderAndIsr]:
        running = {broker.node for broker in self.brokers}
        return [state for state in self.partitions if state.offline or state.leader not in running]

    @property
    def under_replicated(self) -> list[LeaderAndIsr]:
        offline = set(map(id, self.offline))
        return [state for state in self.partitions if id(state) not in offline and state.under_replicated]

    def broker_name(self, node: str) -> str:
        """A replica's broker as Kafka's tools name it: its listener's `node.id`, else its Ray node id."""
        for broker in self.brokers:
            if broker.node == node and broker.broker_id is not None:
                return str(broker.broker_id)
        return node


def read_cluster_status() -> ClusterStatus:
    """The status of the cluster this process is attached to; `BrokerNotAvailableError` when no controller answers."""
    ctrl: Any = controller()
    cluster_id_ref, brokers_ref, listeners_ref, topics_ref, quorum_ref = (
        ctrl.cluster_id.remote(),
        ctrl.brokers.remote(),
        ctrl.listeners.remote(),
        ctrl.topics.remote(),
        ctrl.metadata_quorum.remote(),
    )
    controller_node = actor_node(ctrl)
    listeners: dict[str, AdvertisedListener] = call(listeners_ref)
    topics: dict[str, TopicMetadata] = call(topics_ref)
    nodes = {node["NodeID"]: node for node in ray.nodes() if node["Alive"]}
    brokers = tuple(_broker(node, listeners.get(node), nodes.get(node, {})) for node in call(brokers_ref))
    partitions = tuple(topic.state(p) for _, topic in sorted(topics.items()) for p in sorted(topic.partitions))
    quorum = call(quorum_ref)
    metadata = (int(quorum["epoch"]), tuple(quorum["mirrors"]), tuple(quorum["in_sync"]))
    try:
        committed = committed_offsets()
    except RaybrokerError as exc:
        return ClusterStatus(call(cluster_id_ref), controller_node, brokers, partitions, (), str(exc), *metadata)
    consumed = {(topic, partition) for _, topic, partition in committed}
    watermarks = HighWatermarkReader(replica_actor).read(
        state for state in partitions if (state.topic, state.partition) in consumed
    )
    lags = tuple(consumer_lag(committed, watermarks))
    return ClusterStatus(call(cluster_id_ref), controller_node, brokers, partitions, lags, None, *metadata)


def _broker(node: str, listener: AdvertisedListener | None, ray_node: dict[str, Any]) -> BrokerStatus:
    address = str(ray_node.get("NodeManagerAddress", ""))
    port = ray_node.get("MetricsExportPort")
    metrics_url = f"http://{address}:{port}/metrics" if address and port else ""
    if listener is None:
        return BrokerStatus(node, None, address, (), metrics_url)
    endpoints = tuple(f"{name}://{host}:{port}" for name, host, port in listener.listeners)
    return BrokerStatus(node, listener.broker_id, address, endpoints, metrics_url)
