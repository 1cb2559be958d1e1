"""Every Ray actor option of raybroker, built in one place: names, namespace, lifetime, restarts,
concurrency, resources and placement.

- All actors live in the namespace `raybroker` and are named, so any process on the cluster finds
  them with `ray.get_actor(name, namespace="raybroker")`; they are detached, so they outlive the
  process that created them (the CLI's `start` exits while the broker keeps running).
- Every actor asks for `num_cpus=0`: they spend their time in I/O and must not take the CPUs Spark
  executors need (measured: with `ray.init(num_cpus=2)` and a Spark executor of 2 cores, a default
  `num_cpus=1` actor never started).
- Partition and log-manager actors are pinned (hard node affinity) to the node whose disks hold their
  folders; a partition actor that dies is restarted by Ray (`max_restarts=-1`) on the same node and
  recovers its log from disk. Tasks are not retried by Ray (`max_task_retries=0`): a produce retry is
  the client's decision, made safe by the idempotent producer.
- Partition actors run methods in four concurrency groups: the default group (one thread) takes
  every write, so appends are single-writer and ordered; `read` (several threads) serves fetches and
  offset queries, which never wait behind an append; `maintenance` (one thread) runs retention,
  flushes and compaction; `replication` serves followers' fetches and `acks=all` waits.
- Kafka-protocol listeners (`cluster.protocol.listener_actor`), `num.network.threads` per node, are pinned to
  the node whose address they bind; a listener that dies is restarted by Ray and binds its port again.
- Partition hosts (`log.partitions.per.process` > 1), named per node and index, run the same
  groups for all the partitions they hold: every write of the host on one thread, in call order. Ray
  runs the calls of async or multi-threaded (`max_concurrency` > 1) actors out of order, so neither
  kind of actor could keep a partition's appends in order.
- Cleaner actors (`actors.server.cleaner_actor`), `log.cleaner.threads` per node, named per node and index, are
  pinned to the node whose disks hold the logs they read and write; each runs one pass at a time (one thread,
  as a Kafka cleaner thread) and is restarted by Ray if it dies (the pass it ran is retried later).
- The Iceberg translation driver (`cluster.iceberg.translation_driver_actor`), one per cluster, is pinned to the
  controller's node, where the embedded Iceberg catalog's files are (beside the metadata dir); restarted by Ray if
  it dies, it resumes from the tables' own offsets.
"""

from __future__ import annotations

from typing import Any

NAMESPACE = "raybroker"
CONTROLLER_NAME = "controller"
READ_GROUP = "read"
MAINTENANCE_GROUP = "maintenance"
# Fetches in flight per partition: more threads only add contention for the GIL the process's threads share.
READ_THREADS = 4
# Replication calls: followers' fetches, which wait up to `replica.fetch.wait.max.ms` for records, and `acks=all`
# appends waiting for their records to be replicated. Their own threads, so neither ever holds a read thread.
REPLICATION_GROUP = "replication"
REPLICATION_THREADS = 16
# Share group calls (ShareFetch, ShareAcknowledge, the share-group offset APIs): each may wait on the write of its
# share-partition's durable state (a call to the state store and an acks=all append to `__share_group_state`), so
# they have threads of their own: members acknowledging at once never hold every read thread of a host's partitions.
SHARES_GROUP = "shares"
SHARE_THREADS = 8
PARTITION_CONCURRENCY_GROUPS = {
    READ_GROUP: READ_THREADS,
    MAINTENANCE_GROUP: 1,
    REPLICATION_GROUP: REPLICATION_THREADS,
    SHARES_GROUP: SHARE_THREADS,
}
# A log manager answers restarted partition hosts on a thread of their own: its SERVICE_CONCURRENCY threads
# may all be waiting on the very host that is restarting (creates queue behind the one holding its lock).
HOSTS_GROUP = "hosts"
# ... and answers its replicas' replication-quota questions on another, never behind a partition's creation.
QUOTAS_GROUP = "quotas"
LOG_MANAGER_CONCURRENCY_GROUPS = {HOSTS_GROUP: 1, QUOTAS_GROUP: 1}
# The controller answers the Kafka listeners' waits for a metadata change (`Controller.await_metadata_change`: one
# waiting per listener process, for up to 30 s) on threads of their own, never on its SERVICE_CONCURRENCY threads.
METADATA_WATCH_GROUP = "metadata-watch"
METADATA_WATCH_THREADS = 128
CONTROLLER_CONCURRENCY_GROUPS = {METADATA_WATCH_GROUP: METADATA_WATCH_THREADS}


def partition_actor_name(topic: str, partition: int, node_id: str) -> str:
    """`partition:<topic>:<partition>:<ray node id>`: one replica per node (topic names cannot contain `:`)."""
    return f"partition:{topic}:{partition}:{node_id}"


def partition_host_name(node_id: str, index: int) -> str:
    """`partition-host:<ray node id>:<index>`: the node's log manager numbers its hosts from 0."""
    return f"partition-host:{node_id}:{index}"


def log_manager_name(node_id: str) -> str:
    """`log-manager:<ray node id>`: one broker per Ray node."""
    return f"log-manager:{node_id}"


def cleaner_name(node_id: str, index: int) -> str:
    """`log-cleaner:<ray node id>:<index>`: a node's cleaner threads, numbered from 0."""
    return f"log-cleaner:{node_id}:{index}"


def group_coordinator_name() -> str:
    return "group-coordinator"


def transaction_coordinator_name() -> str:
    return "transaction-coordinator"


ICEBERG_DRIVER_NAME = "iceberg-driver"
KAFKA_LISTENER_PREFIX = "kafka-listener:"


def kafka_listener_name(node_id: str, index: int) -> str:
    """`kafka-listener:<ray node id>:<index>`: a node's Kafka-protocol listener processes, numbered from 0
    (`num.network.threads` of them share the node's port)."""
    return f"{KAFKA_LISTENER_PREFIX}{node_id}:{index}"


def _node_affinity(node_id: str) -> Any:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)


# max_concurrency of the service actors (controller, log managers, transaction coordinator); partition actors
# use PARTITION_CONCURRENCY_GROUPS instead.
SERVICE_CONCURRENCY = 8
# The group coordinator's: a JoinGroup or SyncGroup waiting for the rest of its group holds a thread for up to
# `actors.core.groups.group_coordinator.MAX_WAIT_MS`, so with fewer threads than waiting members the members'
# heartbeats and joins queue behind the waits and a rebalance takes a wait longer (11 members over 8 threads: 2.8 s
# where Kafka takes 2.1, `group_join_s`; 2.3 s over 64).
GROUP_COORDINATOR_CONCURRENCY = 64


def _pinned_actor_options(name: str, node_id: str, *, max_concurrency: int | None = None) -> dict[str, Any]:
    """A named, detached, restartable, zero-CPU actor, pinned to `node_id` (see the module docstring)."""
    options: dict[str, Any] = {
        "name": name,
        "namespace": NAMESPACE,
        "lifetime": "detached",
        "get_if_exists": True,
        "num_cpus": 0,
        "max_restarts": -1,
        "max_task_retries": 0,
    }
    if max_concurrency is not None:
        options["max_concurrency"] = max_concurrency
    options["scheduling_strategy"] = _node_affinity(node_id)
    return options


def controller_options(node_id: str) -> dict[str, Any]:
    """The cluster's metadata actor, pinned to the node holding the metadata log."""
    return _pinned_actor_options(CONTROLLER_NAME, node_id, max_concurrency=SERVICE_CONCURRENCY)


def log_manager_options(node_id: str) -> dict[str, Any]:
    """One node's broker: owns its log dirs and its partition actors."""
    return _pinned_actor_options(log_manager_name(node_id), node_id, max_concurrency=SERVICE_CONCURRENCY)


def partition_options(topic: str, partition: int, node_id: str) -> dict[str, Any]:
    """One partition log, on the node whose disk holds its folder."""
    return _pinned_actor_options(partition_actor_name(topic, partition, node_id), node_id)


def partition_host_options(node_id: str, index: int) -> dict[str, Any]:
    """Several partition logs in one process, on the node whose disks hold their folders."""
    return _pinned_actor_options(partition_host_name(node_id, index), node_id)


def cleaner_options(node_id: str, index: int) -> dict[str, Any]:
    """One of a node's `log.cleaner.threads` cleaner threads, on the node whose logs it compacts."""
    return _pinned_actor_options(cleaner_name(node_id, index), node_id)


def group_coordinator_options(node_id: str) -> dict[str, Any]:
    """Committed consumer offsets, cached in front of the `__consumer_offsets` topic."""
    return _pinned_actor_options(group_coordinator_name(), node_id, max_concurrency=GROUP_COORDINATOR_CONCURRENCY)


def transaction_coordinator_options(node_id: str) -> dict[str, Any]:
    """Transactional ids' producer ids and transactions, cached in front of the `__transaction_state` topic."""
    return _pinned_actor_options(transaction_coordinator_name(), node_id, max_concurrency=SERVICE_CONCURRENCY)


def kafka_listener_options(node_id: str, index: int) -> dict[str, Any]:
    """One Kafka-protocol listener process on the node whose broker it serves: its handlers run on their own
    event loop thread, so the actor's own calls (ready, stop) need no concurrency of their own."""
    return _pinned_actor_options(kafka_listener_name(node_id, index), node_id)


def iceberg_driver_options(node_id: str) -> dict[str, Any]:
    """The cluster's Iceberg translation driver, on the controller's node: its loop runs on a thread of its own, and
    the actor's calls (status, stop) on two more, so `raybroker iceberg --describe` never waits behind a round."""
    return _pinned_actor_options(ICEBERG_DRIVER_NAME, node_id, max_concurrency=2)
