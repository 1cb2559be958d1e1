"""Every Ray actor option of raybroker, built in one place: names, namespace, lifetime, restarts,
concurrency, resources and placement.

- All actors live in the namespace `raybroker` and are named, so any process on the cluster finds
  them with `ray.get_actor(name, namespace="raybroker")`; they are detached, so they outlive the
  process that created them (the CLI's `start` exits while the broker keeps running).
- Every actor asks for `num_cpus=0`: they spend their time in I/O and must not take the CPUs Spark
  executors need (spark-bridge.md §2: with the CPUs reserved, a default actor never started).
- Partition and log-manager actors are pinned (hard node affinity) to the node whose disks hold their
  folders; a partition actor that dies is restarted by Ray (`max_restarts=-1`) on the same node and
  recovers its log from disk. Tasks are not retried by Ray (`max_task_retries=0`): a produce retry is
  the client's decision, made safe by the idempotent producer.
- Partition actors run methods in three concurrency groups: the default group (one thread) takes
  every write, so appends are single-writer and ordered; `read` (several threads) serves fetches and
  offset queries, which never wait behind an append; `maintenance` (one thread) runs retention,
  flushes and compaction.
"""

from __future__ import annotations

from typing import Any

NAMESPACE = "raybroker"
CONTROLLER_NAME = "controller"
READ_GROUP = "read"
MAINTENANCE_GROUP = "maintenance"
# Fetches in flight per partition: more threads only add GIL contention on a 2-core node.
READ_THREADS = 4
PARTITION_CONCURRENCY_GROUPS = {READ_GROUP: READ_THREADS, MAINTENANCE_GROUP: 1}


def partition_actor_name(topic: str, partition: int) -> str:
    """`partition:<topic>:<partition>` (topic names cannot contain `:`)."""
    return f"partition:{topic}:{partition}"


def log_manager_name(node_id: str) -> str:
    """`log-manager:<ray node id>`: one broker per Ray node."""
    return f"log-manager:{node_id}"


def group_coordinator_name() -> str:
    return "group-coordinator"


def _node_affinity(node_id: str) -> Any:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)


def controller_options(node_id: str) -> dict[str, Any]:
    """The cluster's metadata actor, pinned to the node holding the metadata log."""
    return {
        "name": CONTROLLER_NAME,
        "namespace": NAMESPACE,
        "lifetime": "detached",
        "get_if_exists": True,
        "num_cpus": 0,
        "max_restarts": -1,
        "max_task_retries": 0,
        "max_concurrency": 8,
        "scheduling_strategy": _node_affinity(node_id),
    }


def log_manager_options(node_id: str) -> dict[str, Any]:
    """One node's broker: owns its log dirs and its partition actors."""
    return {
        "name": log_manager_name(node_id),
        "namespace": NAMESPACE,
        "lifetime": "detached",
        "get_if_exists": True,
        "num_cpus": 0,
        "max_restarts": -1,
        "max_task_retries": 0,
        "max_concurrency": 8,
        "scheduling_strategy": _node_affinity(node_id),
    }


def partition_options(topic: str, partition: int, node_id: str) -> dict[str, Any]:
    """One partition log, on the node whose disk holds its folder."""
    return {
        "name": partition_actor_name(topic, partition),
        "namespace": NAMESPACE,
        "lifetime": "detached",
        "get_if_exists": True,
        "num_cpus": 0,
        "max_restarts": -1,
        "max_task_retries": 0,
        "scheduling_strategy": _node_affinity(node_id),
    }


def group_coordinator_options(node_id: str) -> dict[str, Any]:
    """Committed consumer offsets, cached in front of the `__consumer_offsets` topic."""
    return {
        "name": group_coordinator_name(),
        "namespace": NAMESPACE,
        "lifetime": "detached",
        "get_if_exists": True,
        "num_cpus": 0,
        "max_restarts": -1,
        "max_task_retries": 0,
        "max_concurrency": 8,
        "scheduling_strategy": _node_affinity(node_id),
    }
