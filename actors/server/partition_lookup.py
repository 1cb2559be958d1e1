"""Finding a partition's replicas, for the client facades, the listeners and the server's own actors.

A partition's clients talk to its leader replica: the controller says which node leads it, and the node's log
manager says which partition host holds the replica there (`log.partitions.per.process` > 1): the lookup answers a
`HostedPartitionHandle`, which callers use exactly as an actor handle; a replica no host holds is found by its
actor's name (`partition:<topic>:<partition>:<node id>`). `leader_replicas` looks many partitions up with one
question to the controller and one to each leading node's log manager. A replica
that no longer leads answers `NotLeaderOrFollowerError`, a `BrokerNotAvailableError`. Lookups are not cached
here (leaders move, and a topic deleted and created again may land in another host): every caller keeps the
handle it got and looks again after a `BrokerNotAvailableError`.

It sits with the server's actors because a hosted partition's handle sends each method to the host's method of
that method's concurrency group, which `PartitionLogActor` declares (`actors.server.partition_host.
partition_method_group`).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence
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
    RaybrokerError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)

# How long a node's log manager may take to say which process hosts a partition (milliseconds when it runs): one that
# stands still (paused, hung) while Ray keeps its node alive never answers, and a lookup waiting on it would hold back
# every append behind it after the controller elected a new leader elsewhere.
HOST_LOOKUP_TIMEOUT_S = 5.0

PartitionKey = tuple[str, int]


def partition_actor(topic: str, partition: int) -> Any:
    """`leader_replica`'s handle."""
    return leader_replica(topic, partition)[0]


def leader_replica(topic: str, partition: int) -> tuple[Any, LeaderAndIsr]:
    """The leader replica of (topic, partition) and the partition's state: the replica's partition actor, or the
    `HostedPartitionHandle` of a partition held by a partition host. `UnknownTopicOrPartitionError` if the cluster
    has no such partition, `BrokerNotAvailableError` (LEADER_NOT_AVAILABLE, retriable) while it has no leader or
    its leader's replica cannot be reached."""
    found = leader_replicas([(topic, partition)])[(topic, partition)]
    if isinstance(found, RaybrokerError):
        raise found
    return found


def leader_replicas(keys: Sequence[PartitionKey]) -> dict[PartitionKey, tuple[Any, LeaderAndIsr] | RaybrokerError]:
    """`leader_replica` of many partitions at once: one question to the controller and one to each leading node's
    log manager, where the partitions one by one would ask both each (a client's first contact with a topic of
    thousands of partitions). Each key maps to its replica and state, or to the error `leader_replica` raises for
    it; an error of the controller itself is raised."""
    found: dict[PartitionKey, tuple[Any, LeaderAndIsr] | RaybrokerError] = {}
    led: dict[str, list[tuple[PartitionKey, LeaderAndIsr]]] = defaultdict(list)
    states = call(controller().leader_states.remote(list(keys)))
    for (topic, partition), state in zip(keys, states, strict=True):
        if isinstance(state, RaybrokerError):
            found[(topic, partition)] = state
        elif state.offline:
            found[(topic, partition)] = BrokerNotAvailableError(
                f"{topic}-{partition} has no leader: none of its in-sync replicas {list(state.isr)} is running"
            )
        else:
            led[state.leader].append(((topic, partition), state))
    for node_id, partitions in led.items():
        replicas = _replicas_on(node_id, [key for key, _ in partitions])
        for (topic, partition), state in partitions:
            replica = replicas[(topic, partition)]
            if isinstance(replica, UnknownTopicOrPartitionError):
                # The partition exists: its leader's node is gone or its replica is (re)starting, a retriable state.
                found[(topic, partition)] = BrokerNotAvailableError(
                    f"the leader of {topic}-{partition} on node {node_id} is not available"
                )
            elif isinstance(replica, RaybrokerError):
                found[(topic, partition)] = replica
            else:
                found[(topic, partition)] = (replica, state)
    return found


def replica_actor(topic: str, partition: int, node_id: str) -> Any:
    """The replica of (topic, partition) on Ray node `node_id`, as `partition_actor` answers it;
    `UnknownTopicOrPartitionError` if that node hosts none, `BrokerNotAvailableError` (retriable) if its log manager
    does not say within `HOST_LOOKUP_TIMEOUT_S`."""
    replica = _replicas_on(node_id, [(topic, partition)])[(topic, partition)]
    if isinstance(replica, RaybrokerError):
        raise replica
    return replica


def _replicas_on(node_id: str, keys: list[PartitionKey]) -> dict[PartitionKey, Any]:
    """`replica_actor` of each of `keys` on node `node_id`, its error in its place: the node's log manager says which
    host holds each (one call), and a partition no host holds is looked up as an actor of its own."""
    try:
        hosts = call(get_actor(log_manager_name(node_id)).partition_hosts.remote(keys), timeout_s=HOST_LOOKUP_TIMEOUT_S)
    except BrokerNotAvailableError:
        hosts = [None] * len(keys)
    except RequestTimedOutError:
        unanswered = BrokerNotAvailableError(
            f"the broker of node {node_id} did not say within {HOST_LOOKUP_TIMEOUT_S:g} s which processes host "
            f"{len(keys)} partition(s) (it stands still, or its node is gone)"
        )
        return dict.fromkeys(keys, unanswered)
    replicas: dict[PartitionKey, Any] = {}
    for (topic, partition), host in zip(keys, hosts, strict=True):
        if host is not None:
            replicas[(topic, partition)] = HostedPartitionHandle(host, topic, partition)
            continue
        try:
            replicas[(topic, partition)] = ray.get_actor(
                partition_actor_name(topic, partition, node_id), namespace=NAMESPACE
            )
        except ValueError:
            replicas[(topic, partition)] = UnknownTopicOrPartitionError(
                f"no replica of {topic}-{partition} is hosted on node {node_id}"
            )
    return replicas


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
