"""Apache Kafka with several brokers on loopback: the baseline of the replicated benchmarks
(`benchmarks/bench_replication_kafka.py`).

`KafkaCluster` runs `brokers` (3) `benchmarks.kafka_broker.KafkaNode`s in one temporary folder, each broker and
KRaft controller in one process (`process.roles=broker,controller`), the three forming the controller quorum
(`controller.quorum.voters`), formatted with one cluster id. Combined nodes rather than a controller of its own
beside three brokers: three JVMs instead of four, and in a steady run the controllers only
exchange heartbeats, so the data path (produce to the leader, followers fetching from it) is the same. Every
setting not named here is Kafka's default (`num.replica.fetchers` 1, `replica.fetch.wait.max.ms` 500,
`min.insync.replicas` 1, the internal topics' replication factor 3); each node's heap is `HEAP` (512 MiB).

`start` waits until an AdminClient's metadata lists every broker; `stop` sends SIGTERM to every node at once (so
they shut down side by side rather than each waiting for a quorum that is leaving), waits for each, kills (by pid)
any still running after `STOP_TIMEOUT_S`, and removes the folder.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from types import TracebackType

from benchmarks.kafka_broker import (
    KAFKA_VERSION,
    KafkaNode,
    free_ports,
    kafka_jars,
    new_cluster_id,
    progress,
    wait_until_answering,
)

BROKERS = 3
# Kafka's default of 50 partitions (times 3 replicas) for a group coordinator the benchmarks never use would only
# slow the start; raybroker's benchmark brokers run with 1 too (`benchmarks.environment`).
PROPERTIES = {"offsets.topic.num.partitions": "1"}


class KafkaCluster:
    """`brokers` Kafka nodes forming one cluster on 127.0.0.1 (see the module docstring). Use as a context
    manager, or call `start()` and `stop()`."""

    def __init__(self, brokers: int = BROKERS, version: str = KAFKA_VERSION) -> None:
        self.brokers = brokers
        self.version = version
        self.folder: Path | None = None
        self.nodes: list[KafkaNode] = []

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)

    @property
    def pids(self) -> list[int]:
        return [node.process.pid for node in self.nodes if node.process is not None]

    def __enter__(self) -> KafkaCluster:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Fetches Kafka if needed, formats and starts every node, and waits until every broker answers."""
        jars = kafka_jars(self.version)
        self.folder = Path(tempfile.mkdtemp(prefix="raybroker-kafka-cluster-"))
        ports = free_ports(2 * self.brokers)
        self.nodes = [
            KafkaNode(self.folder / f"node{index + 1}", index + 1, ports[2 * index], ports[2 * index + 1])
            for index in range(self.brokers)
        ]
        voters = ",".join(node.voter for node in self.nodes)
        cluster_id = new_cluster_id()
        started = time.monotonic()
        try:
            for node in self.nodes:
                node.start(jars, cluster_id, voters, PROPERTIES)
            wait_until_answering(self.bootstrap_servers, self.nodes)
        except BaseException:
            self.stop()
            raise
        progress(
            f"Kafka {self.version} answers on {self.bootstrap_servers}, {self.brokers} brokers "
            f"({time.monotonic() - started:.1f} s)"
        )

    def stop(self) -> None:
        """Stops every node this object started (see the module docstring); safe to call again."""
        for node in self.nodes:
            node.terminate()
        for node in self.nodes:
            node.stop()
        self.nodes = []
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None


if __name__ == "__main__":
    with KafkaCluster() as cluster:
        print(cluster.bootstrap_servers)
