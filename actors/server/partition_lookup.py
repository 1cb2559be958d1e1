"""Finding a partition's replicas, for the client facades, the listeners and the server's own actors.

A partition's clients talk to its leader replica: the controller says which node leads it, and the replica on
that node is found by its actor's name (`partition:<topic>:<partition>:<node id>`) or, when that node's broker
hosts several partitions per process (`log.partitions.per.process` > 1), through the node's log manager (which
host): the lookup answers a `HostedPartitionHandle`, which callers use exactly as an actor handle. A replica
that no longer leads answers `NotLeaderOrFollowerError`, a `BrokerNotAvailableError`. Lookups are not cached
here (leaders move, and a topic deleted and created again may land in another host): every caller keeps the
handle it got and looks again after a `BrokerNotAvailableError`.

It sits with the server's actors because a hosted partition's handle sends each method to the host's method of
that method's concurrency group, which `PartitionLogActor` declares (`actors.server.partition_host.
partition_method_group`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import ray

from actors.calls import call, controller, get_actor
from actors.core.replication.leader_and_isr import LeaderAndIsr
from actors.options import (
    MAINTENANCE_GROUP,
    NAMESPACE,
    READ_GROUP,
    REPLICATION_GROUP,
    SHARES_GROUP,
    log_manager_name,
    partition_actor_name,
)
from actors.server.partition_host import partition_method_group
from storage.errors import (
    BrokerNotAvailableError,
    InvalidRequestError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)

# How long a node's log manager may take to say which process hosts a partition (milliseconds when it runs): one that
# stands still (paused, hung) while Ray keeps its node alive never answers, and a lookup waiting on it would hold back
# every append behind it after the controller elected a new leader elsewhere.
HOST_LOOKUP_TIMEOUT_S = 5.0


def partition_actor(topic: str, partition: int) -> Any:
    """`leader_replica`'s handle."""
    return leader_replica(topic, partition)[0]


def leader_replica(topic: str, partition: int) -> tuple[Any, LeaderAndIsr]:
    """The leader replica of (topic, partition) and the partition's state: the replica's partition actor, or the
    `HostedPartitionHandle` of a partition held by a partition host. `UnknownTopicOrPartitionError` if the cluster
    has no such partition, `BrokerNotAvailableError` (LEADER_NOT_AVAILABLE, retriable) while it has no leader or
    its leader's replica cannot be reached."""
    state = call(controller().partition_state.remote(topic, partition))
    if state.offline:
        raise BrokerNotAvailableError(
            f"{topic}-{partition} has no leader: none of its in-sync replicas {list(state.isr)} is running"
        )
    try:
        return replica_actor(topic, partition, state.leader), state
    except UnknownTopicOrPartitionError:
        # The partition exists: its leader's node is gone or its replica is (re)starting, a retriable state.
        raise BrokerNotAvailableError(
            f"the leader of {topic}-{partition} on node {state.leader} is not available"
        ) from None


def replica_actor(topic: str, partition: int, node_id: str) -> Any:
    """The replica of (topic, partition) on Ray node `node_id`, as `partition_actor` answers it;
    `UnknownTopicOrPartitionError` if that node hosts none, `BrokerNotAvailableError` (retriable) if its log manager
    does not say within `HOST_LOOKUP_TIMEOUT_S`."""
    try:
        return ray.get_actor(partition_actor_name(topic, partition, node_id), namespace=NAMESPACE)
    except ValueError:
        pass
    try:
        host = call(
            get_actor(log_manager_name(node_id)).partition_host.remote(topic, partition),
            timeout_s=HOST_LOOKUP_TIMEOUT_S,
        )
    except BrokerNotAvailableError:
        host = None
    except RequestTimedOutError:
        raise BrokerNotAvailableError(
            f"the broker of node {node_id} did not say within {HOST_LOOKUP_TIMEOUT_S:g} s which process hosts "
            f"{topic}-{partition} (it stands still, or its node is gone)"
        ) from None
    if host is None:
        raise UnknownTopicOrPartitionError(f"no replica of {topic}-{partition} is hosted on node {node_id}")
    return HostedPartitionHandle(host, topic, partition)


@dataclass(frozen=True, slots=True)
class HostedMethod:
    """`handle.<method>`: `.remote(*args)` sends the call to the host's method of the method's concurrency group
    (`write`, `read`, `replication`, `shares` or `maintain`), as an actor method's `.remote` does, and returns its
    `ObjectRef` (`num_returns` of them, a list, when `.options(num_returns=...)` asked for more than one)."""

    host: Any
    topic: str
    partition: int
    method: str
    group: str | None
    num_returns: int = 1

    def options(self, *, num_returns: int) -> HostedMethod:
        """The method called with Ray's `num_returns`, as an actor method's `.options` offers."""
        return dataclasses.replace(self, num_returns=num_returns)

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        if self.group == READ_GROUP:
            host_method = self.host.read
        elif self.group == MAINTENANCE_GROUP:
            host_method = self.host.maintain
        elif self.group == REPLICATION_GROUP:
            host_method = self.host.replication
        elif self.group == SHARES_GROUP:
            host_method = self.host.shares
        else:
            host_method = self.host.write
        if self.num_returns != 1:
            host_method = host_method.options(num_returns=self.num_returns)
        return host_method.remote(self.topic, self.partition, self.method, *args, **kwargs)


class HostedPartitionHandle:
    """A partition held by a partition host (`actors.server.partition_host`), used as its actor handle:
    `ray.get(handle.append.remote(batch))` answers what the partition actor's would. `host` is the host's
    actor handle (killing it restarts every partition it holds). Picklable, so it travels to Spark tasks."""

    __slots__ = ("host", "partition", "topic")

    def __init__(self, host: Any, topic: str, partition: int) -> None:
        self.host = host
        self.topic = topic
        self.partition = partition

    def __getattr__(self, method: str) -> HostedMethod:
        """`AttributeError` for a name that is no partition method, as an actor handle raises."""
        try:
            group = partition_method_group(method)
        except InvalidRequestError:
            raise AttributeError(f"a partition has no method {method!r}") from None
        return HostedMethod(self.host, self.topic, self.partition, method, group)

    def __reduce__(self) -> tuple[type[HostedPartitionHandle], tuple[Any, str, int]]:
        return HostedPartitionHandle, (self.host, self.topic, self.partition)

    def __repr__(self) -> str:
        return f"HostedPartitionHandle({self.topic}-{self.partition} on {self.host})"
