"""Three Ray nodes of `ray.cluster_utils.Cluster` with a broker each, for the multi-node tests that remove a node
without notice and bring its disks back on a new one (a replaced host)."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray.cluster_utils import Cluster

from actors.clients.broker import stop_broker
from storage.errors import BrokerNotAvailableError
from tests.actors.support import release_session_ray, start_broker_on

# One logical CPU per node: the partition hosts take none.
NODE_ARGS: dict[str, Any] = {"num_cpus": 1, "object_store_memory": 128 * 1024 * 1024}
# A node removal is seen within ~1 s (Ray's defaults take 30 s).
HEALTH_CHECKS = {"health_check_period_ms": 300, "health_check_timeout_ms": 300, "health_check_failure_threshold": 3}


@dataclass
class Nodes:
    """The cluster, the head's node id (it hosts the controller), the worker nodes' Ray handles, every live node's
    log dirs, and the settings every broker starts with."""

    cluster: Cluster
    head: str
    broker_settings: dict[str, str]
    workers: dict[str, Any] = field(default_factory=dict)
    dirs: dict[str, list[Path]] = field(default_factory=dict)

    def start_broker(self, node: str) -> None:
        """Starts the broker of `node` over its log dirs."""
        start_broker_on(node, {"log.dirs": ",".join(str(d) for d in self.dirs[node]), **self.broker_settings})

    def remove(self, node: str) -> list[Path]:
        """Kills a worker node's raylet and every process on it, with no notice; returns its log dirs."""
        self.cluster.remove_node(self.workers.pop(node), allow_graceful=False)
        return self.dirs.pop(node)

    def add(self, log_dirs: list[Path]) -> str:
        """A new worker node with its broker over `log_dirs` (a replaced host with the old disks); its node id."""
        before = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        worker = self.cluster.add_node(**NODE_ARGS)
        self.cluster.wait_for_nodes()
        node = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] not in before)
        self.workers[node] = worker
        self.dirs[node] = log_dirs
        self.start_broker(node)
        return node


@contextlib.contextmanager
def three_nodes(root: Path, broker_settings: dict[str, str]) -> Iterator[Nodes]:
    """A head and two workers, connected to, with a broker each over a log dir under `root` (the head's first);
    the brokers, Ray and the cluster are stopped on exit. The session's own Ray is released first."""
    release_session_ray()
    os.environ["RAY_LOG_TO_DRIVER"] = "0"
    cluster = Cluster(
        initialize_head=True,
        head_node_args={**NODE_ARGS, "include_dashboard": False, "_system_config": HEALTH_CHECKS},
    )
    try:
        workers = [cluster.add_node(**NODE_ARGS) for _ in range(2)]
        ray.init(address=cluster.address, namespace="raybroker", log_to_driver=False, logging_level=logging.ERROR)
        cluster.wait_for_nodes()
        nodes = Nodes(cluster, ray.get_runtime_context().get_node_id(), broker_settings)
        nodes.workers = {worker.node_id: worker for worker in workers}
        for index, node in enumerate([nodes.head, *sorted(nodes.workers)]):
            nodes.dirs[node] = [root / f"node{index}-dir0"]
            nodes.start_broker(node)
        yield nodes
        with contextlib.suppress(BrokerNotAvailableError):
            stop_broker()
    finally:
        ray.shutdown()
        cluster.shutdown()
