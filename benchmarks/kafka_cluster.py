"""Apache Kafka with several brokers on loopback: the baseline of the replicated benchmarks
(`benchmarks/bench_replication_kafka.py`).

`KafkaCluster` runs `brokers` (3) `benchmarks.kafka_broker.KafkaNode`s as one `benchmarks.kafka_broker.KafkaQuorum`
in one temporary folder, each broker and KRaft controller in one process (`process.roles=broker,controller`), the
three forming the controller quorum (`controller.quorum.voters`), formatted with one cluster id. Combined nodes
rather than a controller of its own beside three brokers: three JVMs instead of four, and in a steady run the
controllers only exchange heartbeats, so the data path (produce to the leader, followers fetching from it) is the
same. Every setting not named here is Kafka's default (`num.replica.fetchers` 1, `replica.fetch.wait.max.ms` 500,
`min.insync.replicas` 1, the internal topics' replication factor 3); each node's heap is `HEAP` (512 MiB).

How it starts and stops is `KafkaQuorum`'s: `start` waits until an AdminClient's metadata lists every broker;
`stop` sends SIGTERM to every node at once, waits for each, kills any still running after `STOP_TIMEOUT_S`, and
removes the folder.
"""

from __future__ import annotations

from benchmarks.kafka_broker import KAFKA_VERSION, KafkaQuorum

BROKERS = 3
# Kafka's default of 50 partitions (times 3 replicas) for a group coordinator the benchmarks never use would only
# slow the start; raybroker's benchmark brokers run with 1 too (`benchmarks.environment`).
PROPERTIES = {"offsets.topic.num.partitions": "1"}


class KafkaCluster(KafkaQuorum):
    """`brokers` Kafka nodes forming one cluster on 127.0.0.1 with `PROPERTIES` (see the module docstring)."""

    def __init__(self, brokers: int = BROKERS, version: str = KAFKA_VERSION) -> None:
        super().__init__(brokers, PROPERTIES, version)


if __name__ == "__main__":
    with KafkaCluster() as cluster:
        print(cluster.bootstrap_servers)
