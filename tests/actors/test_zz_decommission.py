"""A broker decommissioned with Apache Kafka's own kafka-reassign-partitions.sh while a librdkafka producer writes,
on raybroker across three Ray nodes and on a three-broker Apache Kafka 3.9.1, the same scenario and checks on both.

raybroker runs as the replicated benchmarks run it: three nodes of `ray.cluster_utils.Cluster` with a broker and a
Kafka listener each (`node.id` 0 on the head, 1 and 2 on the workers); Kafka is `benchmarks.kafka_cluster`'s three
combined broker-controllers. On each: a topic of 3 partitions with 2 replicas, a producer (acks=all, idempotent)
writing to it throughout, and the tool's `--generate` over the brokers but the highest id (a worker on raybroker),
`--execute` of the plan it proposed, `--verify` until every move completed. Then no replica of the topic is on that
broker, no delivery failed, and every acknowledged record reads back once (Kafka's tool, clients and broker being the
oracle of what each step answers: both must end the same way).

This module needs its own Ray cluster (`OWNS_RAY`: it runs after the tests sharing the session's Ray)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.bench_replication_kafka import start_listeners
from benchmarks.kafka_broker import KafkaUnavailable
from benchmarks.kafka_cluster import KafkaCluster
from tests.actors.three_nodes import three_nodes
from tests.cluster.protocol.kafka_tools import REASSIGN_PARTITIONS, run_kafka_tool
from tests.conftest import skip_or_fail

OWNS_RAY = True
pytestmark = [pytest.mark.ray, pytest.mark.kafka, pytest.mark.timeout(600)]

TOPIC = "decommissioned"
PARTITIONS = 3
REPLICATION_FACTOR = 2
# The producer writes one record every `SEND_INTERVAL_S`, from before the move until after it completed.
SEND_INTERVAL_S = 0.005
MOVE_TIMEOUT_S = 180.0
READ_TIMEOUT_S = 60.0
# One partition of each coordinator topic, on both sides (Kafka's 50 would open 150 replicas for groups and
# transactions this module never uses).
BROKER_SETTINGS = {"offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1"}


@pytest.fixture(scope="module")
def bootstraps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Each side's bootstrap servers: raybroker's three listeners and Kafka's three brokers."""
    with three_nodes(tmp_path_factory.mktemp("decommission"), BROKER_SETTINGS) as nodes:
        ray_bootstrap = start_listeners(nodes)
        try:
            with KafkaCluster() as kafka:
                yield {"raybroker": ray_bootstrap, "kafka": kafka.bootstrap_servers}
        except KafkaUnavailable as exc:
            skip_or_fail(f"Apache Kafka is not available here: {exc}")


class RunningProducer:
    """A librdkafka producer (acks=all, idempotent) writing numbered values round-robin over the topic's partitions
    on a thread of its own until `stop`; what it had acknowledged and what failed."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer

        self._producer = Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "log_level": 0}
        )
        self.acknowledged: list[bytes] = []
        self.failures: list[str] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="decommission-producer", daemon=True)
        self._thread.start()

    def _delivered(self, error: Any, message: Any) -> None:
        if error is not None:
            self.failures.append(str(error))
        else:
            self.acknowledged.append(message.value())

    def _run(self) -> None:
        index = 0
        while not self._stopping.is_set():
            self._producer.produce(
                TOPIC, value=f"v{index}".encode(), partition=index % PARTITIONS, on_delivery=self._delivered
            )
            self._producer.poll(0)
            index += 1
            time.sleep(SEND_INTERVAL_S)

    def wait_for(self, count: int) -> None:
        deadline = time.monotonic() + READ_TIMEOUT_S
        while len(self.acknowledged) < count:
            assert time.monotonic() < deadline, f"only {len(self.acknowledged)} records acknowledged"
            time.sleep(0.05)

    def stop(self) -> int:
        """Stops writing and flushes; the count of records still unanswered."""
        self._stopping.set()
        self._thread.join(timeout=30)
        return int(self._producer.flush(60))


def broker_ids(bootstrap: str) -> list[int]:
    from confluent_kafka.admin import AdminClient

    return sorted(AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=30).brokers)


def replicas(bootstrap: str) -> dict[int, list[int]]:
    from confluent_kafka.admin import AdminClient

    topic = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(TOPIC, timeout=30).topics[TOPIC]
    return {number: sorted(partition.replicas) for number, partition in topic.partitions.items()}


def create_topic(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, REPLICATION_FACTOR)])[TOPIC].result(timeout=60)
    deadline = time.monotonic() + READ_TIMEOUT_S
    while sorted(len(held) for held in replicas(bootstrap).values()) != [REPLICATION_FACTOR] * PARTITIONS:
        assert time.monotonic() < deadline, "the topic's metadata never named every replica"
        time.sleep(0.2)


def read_back(bootstrap: str, count: int) -> list[bytes]:
    """Every record of the topic from its start, once `count` were read or the deadline passed."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "decommission-check", "log_level": 0})
    try:
        consumer.assign([TopicPartition(TOPIC, partition, 0) for partition in range(PARTITIONS)])
        read: list[bytes] = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        while len(read) < count and time.monotonic() < deadline:
            for message in consumer.consume(500, 1.0):
                assert message.error() is None, message.error()
                read.append(message.value())
        return read
    finally:
        consumer.close()


def decommission(bootstrap: str, workdir: Path) -> dict[str, Any]:
    """The scenario of the module docstring on one side; what its checks look at."""
    create_topic(bootstrap)
    ids = broker_ids(bootstrap)
    victim = ids[-1]
    producer = RunningProducer(bootstrap)
    producer.wait_for(100)
    topics_file = workdir / "topics.json"
    topics_file.write_text(json.dumps({"version": 1, "topics": [{"topic": TOPIC}]}))
    generated = run_kafka_tool(
        REASSIGN_PARTITIONS,
        bootstrap,
        "--generate",
        "--topics-to-move-json-file",
        str(topics_file),
        "--broker-list",
        ",".join(str(broker) for broker in ids[:-1]),
    )
    assert generated.returncode == 0, generated.stderr[-2000:]
    lines = generated.stdout.splitlines()
    plan = lines[lines.index("Proposed partition reassignment configuration") + 1]
    plan_file = workdir / "plan.json"
    plan_file.write_text(plan)
    executed = run_kafka_tool(REASSIGN_PARTITIONS, bootstrap, "--execute", "--reassignment-json-file", str(plan_file))
    assert executed.returncode == 0, executed.stderr[-2000:]
    deadline = time.monotonic() + MOVE_TIMEOUT_S
    while True:
        verified = run_kafka_tool(
            REASSIGN_PARTITIONS, bootstrap, "--verify", "--reassignment-json-file", str(plan_file)
        )
        if verified.returncode == 0 and "still in progress" not in verified.stdout:
            break
        assert time.monotonic() < deadline, verified.stdout[-2000:]
        time.sleep(1)
    producer.wait_for(len(producer.acknowledged) + 100)
    unanswered = producer.stop()
    read = read_back(bootstrap, len(producer.acknowledged))
    return {
        "victim holds": [p for p, held in replicas(bootstrap).items() if victim in held],
        "completed": sorted(
            line.split(" ")[3] for line in verified.stdout.splitlines() if line.endswith("is completed.")
        ),
        "failures": producer.failures[:3],
        "unanswered": unanswered,
        "lost": sorted(set(producer.acknowledged) - set(read))[:5],
        "duplicated": sorted(value for value in set(read) if read.count(value) > 1)[:5],
        "unacknowledged read": sorted(set(read) - set(producer.acknowledged))[:5],
        "acknowledged": len(producer.acknowledged) > 200,
    }


def test_kafka_reassign_partitions_decommissions_a_broker_under_a_producer_as_on_kafka(
    bootstraps: dict[str, str], tmp_path: Path
) -> None:
    outcomes = {}
    for side, bootstrap in bootstraps.items():
        workdir = tmp_path / side
        workdir.mkdir()
        outcomes[side] = decommission(bootstrap, workdir)
    expected = {
        "victim holds": [],
        "completed": [f"{TOPIC}-{partition}" for partition in range(PARTITIONS)],
        "failures": [],
        "unanswered": 0,
        "lost": [],
        "duplicated": [],
        "unacknowledged read": [],
        "acknowledged": True,
    }
    assert outcomes["kafka"] == expected, outcomes["kafka"]
    assert outcomes["raybroker"] == expected, outcomes["raybroker"]
